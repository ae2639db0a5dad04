"""The four Mitsuba 3 evaluation scenes, as hand-written ``mi.load_dict`` dictionaries (README.md beside this
file says what each one tests). World frame: y up, metres. Each entry of :data:`SCENES`:
name -> (function returning the scene's shapes and emitters as a dict, three views (origin, target, fov deg)).

Textures are Mitsuba's checkerboard at several UV scales and small value-noise bitmaps made here from a fixed
NumPy seed, so every scene rebuilds bit for bit.
"""
import numpy as np

import mitsuba as mi


def T():
    return mi.ScalarTransform4f()


def rgb(*v):
    return {"type": "rgb", "value": list(v)}


def diffuse(*color):
    return {"type": "diffuse", "reflectance": rgb(*color)}


def checker(c0, c1, scale):
    return {"type": "diffuse", "reflectance": {"type": "checkerboard", "color0": rgb(*c0), "color1": rgb(*c1),
                                               "to_uv": mi.ScalarTransform4f().scale([scale, scale, 1])}}


def noise_bitmap(seed, cells, c0, c1, size=256):
    """A smooth value-noise texture: random values on a cells x cells grid, bicubic-free bilinear upsampling
    of two octaves, mapped between two colours. Scale comes from ``cells`` (features per UV unit)."""
    rng = np.random.default_rng(seed)
    img = np.zeros((size, size), np.float32)
    for octave, weight in ((cells, 0.7), (cells * 4, 0.3)):
        grid = rng.random((octave + 1, octave + 1)).astype(np.float32)
        t = np.linspace(0, octave, size, endpoint=False, dtype=np.float32)
        i = t.astype(int)
        f = t - i
        f = f * f * (3 - 2 * f)
        rows = grid[i] * (1 - f)[:, None] + grid[i + 1] * f[:, None]
        img += weight * (rows[:, i] * (1 - f)[None, :] + rows[:, i + 1] * f[None, :])
    c0, c1 = np.asarray(c0, np.float32), np.asarray(c1, np.float32)
    tex = c0 + (c1 - c0) * img[..., None]
    return {"type": "bitmap", "bitmap": mi.Bitmap(np.ascontiguousarray(tex)), "raw": True,
            "filter_type": "bilinear"}


def noisy_diffuse(seed, cells, c0, c1):
    return {"type": "diffuse", "reflectance": noise_bitmap(seed, cells, c0, c1)}


def box(lo, hi, bsdf):
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    return {"type": "cube", "to_world": T().translate(((lo + hi) / 2).tolist()).scale(((hi - lo) / 2).tolist()),
            "bsdf": bsdf}


def ball(center, radius, bsdf, **extra):
    return {"type": "sphere", "center": list(center), "radius": radius, "bsdf": bsdf, **extra}


def panel(center, normal_to, size, bsdf=None, radiance=None, up=(0, 1, 0)):
    """A rectangle at ``center`` facing the point ``normal_to``, ``size`` = (width, height); an area light
    when ``radiance`` is given (one-sided, like every Mitsuba area light)."""
    d = {"type": "rectangle", "to_world": T().look_at(origin=list(center), target=list(normal_to), up=list(up))
         .scale([size[0] / 2, size[1] / 2, 1]), "bsdf": bsdf or diffuse(0.05, 0.05, 0.05)}
    if radiance is not None:
        d["emitter"] = {"type": "area", "radiance": rgb(*radiance)}
    return d


def room(W, D, H, wall, floor, ceiling, open_front=True):
    """Inner faces x = +-W/2, z = +-D/2, y = 0 and H, as thin boxes (so both sides are solid)."""
    w, d, t = W / 2, D / 2, 0.1
    shapes = {"floor": box((-w - t, -t, -d - t), (w + t, 0, d + t), floor),
              "ceiling": box((-w - t, H, -d - t), (w + t, H + t, d + t), ceiling),
              "wall_left": box((-w - t, 0, -d - t), (-w, H, d + t), wall),
              "wall_right": box((w, 0, -d - t), (w + t, H, d + t), wall),
              "wall_back": box((-w, 0, -d - t), (w, H, -d), wall)}
    if not open_front:
        shapes["wall_front"] = box((-w, 0, d), (w, H, d + t), wall)
    return shapes


def hidden():
    """Light behind an occluder: a lamp behind a tall cabinet faces the corner; all visible light bounced."""
    s = room(5.0, 5.0, 2.6, diffuse(0.75, 0.73, 0.7), checker((0.5, 0.45, 0.4), (0.2, 0.18, 0.16), 6.0),
             diffuse(0.8, 0.8, 0.8), open_front=False)
    s["cabinet"] = box((-2.5, 0, -1.9), (-0.9, 2.1, -1.5), noisy_diffuse(11, 3, (0.35, 0.22, 0.12),
                                                                         (0.6, 0.42, 0.25)))
    s["lamp"] = panel((-1.7, 1.0, -2.2), (-1.7, 1.6, -2.5), (0.6, 0.4), radiance=(150.0, 125.0, 90.0))
    s["sofa"] = box((0.6, 0, -2.4), (2.4, 0.5, -1.5), noisy_diffuse(12, 16, (0.15, 0.2, 0.35), (0.3, 0.4, 0.6)))
    s["cushion"] = ball((1.2, 0.7, -1.9), 0.22, diffuse(0.8, 0.5, 0.1))
    s["table"] = box((-0.5, 0.45, -0.4), (0.7, 0.5, 0.4), {"type": "roughplastic", "alpha": 0.15,
                                                          "diffuse_reflectance": rgb(0.3, 0.15, 0.08)})
    s["table_base"] = box((0.0, 0, -0.1), (0.2, 0.45, 0.1), diffuse(0.1, 0.1, 0.1))
    s["bowl"] = ball((0.3, 0.62, 0.1), 0.12, {"type": "roughconductor", "material": "Al", "alpha": 0.1})
    s["plant_pot"] = box((1.8, 0, 0.8), (2.2, 0.45, 1.2), diffuse(0.55, 0.25, 0.12))
    s["plant"] = ball((2.0, 0.85, 1.0), 0.4, noisy_diffuse(13, 40, (0.05, 0.15, 0.03), (0.2, 0.45, 0.1)))
    return s


def indirect():
    """A room lit by a spot aimed into the ceiling from inside an opaque shade: light arrives only after
    bouncing off the ceiling and the walls."""
    s = room(6.0, 5.0, 3.0, noisy_diffuse(21, 2, (0.6, 0.6, 0.55), (0.8, 0.78, 0.72)),
             noisy_diffuse(22, 12, (0.3, 0.2, 0.12), (0.55, 0.4, 0.25)), diffuse(0.85, 0.85, 0.85))
    # the shade: a cylinder open at the top (Mitsuba cylinders have no caps), 0.8 m tall, the spot inside it
    s["shade"] = {"type": "cylinder", "p0": [2.2, 0.9, -1.8], "p1": [2.2, 1.7, -1.8], "radius": 0.25,
                  "bsdf": diffuse(0.2, 0.2, 0.2)}
    s["shade_floor"] = {"type": "disk", "to_world": T().translate([2.2, 0.9, -1.8]).rotate([1, 0, 0], -90)
                        .scale(0.25), "bsdf": diffuse(0.2, 0.2, 0.2)}
    s["stand"] = box((2.17, 0, -1.83), (2.23, 0.9, -1.77), diffuse(0.1, 0.1, 0.1))
    s["spot"] = {"type": "spot", "to_world": T().look_at(origin=[2.2, 1.0, -1.8], target=[2.0, 3.0, -1.6],
                                                         up=[0, 0, 1]),
                 "cutoff_angle": 40.0, "beam_width": 30.0, "intensity": rgb(180.0, 150.0, 114.0)}
    s["column"] = {"type": "cylinder", "p0": [-1.2, 0, -0.8], "p1": [-1.2, 3.0, -0.8], "radius": 0.3,
                   "bsdf": checker((0.8, 0.8, 0.78), (0.25, 0.25, 0.3), 24.0)}
    s["crate"] = box((0.3, 0, -1.6), (1.3, 1.0, -0.6), checker((0.7, 0.55, 0.3), (0.4, 0.28, 0.12), 4.0))
    s["crate2"] = box((0.5, 1.0, -1.4), (1.1, 1.6, -0.8), noisy_diffuse(23, 30, (0.1, 0.3, 0.4), (0.5, 0.7, 0.8)))
    s["ball"] = ball((-0.3, 0.35, 0.6), 0.35, checker((0.9, 0.1, 0.1), (0.95, 0.95, 0.9), 10.0))
    s["vase"] = ball((1.6, 0.3, 0.9), 0.3, {"type": "roughplastic", "alpha": 0.08,
                                            "diffuse_reflectance": rgb(0.1, 0.35, 0.2)})
    s["rug"] = box((-1.5, 0, -0.2), (1.5, 0.01, 1.6), checker((0.6, 0.1, 0.1), (0.85, 0.75, 0.55), 16.0))
    return s


def emitter():
    """Emitters in view: a bright panel on the back wall, a small very bright bulb, a light strip on the
    floor; a dark room around them, so the lights dominate the image's range."""
    s = room(5.0, 5.0, 2.8, diffuse(0.25, 0.25, 0.27), checker((0.35, 0.35, 0.35), (0.1, 0.1, 0.1), 8.0),
             diffuse(0.3, 0.3, 0.3))
    s["window_light"] = panel((0.0, 1.5, -2.49), (0.0, 1.5, 0.0), (1.6, 1.0), radiance=(6.0, 7.0, 9.0))
    s["bulb"] = ball((-1.4, 1.6, -0.8), 0.06, diffuse(0.8, 0.8, 0.8),
                     emitter={"type": "area", "radiance": rgb(120.0, 90.0, 55.0)})
    s["bulb_stand"] = box((-1.43, 0, -0.83), (-1.37, 1.54, -0.77), diffuse(0.1, 0.1, 0.1))
    s["strip"] = box((0.8, 0.0, -1.6), (2.2, 0.04, -1.52), diffuse(0.8, 0.8, 0.8))
    s["strip_light"] = panel((1.5, 0.041, -1.56), (1.5, 1.0, -1.56), (1.4, 0.08), radiance=(20.0, 4.0, 2.0),
                             up=(0, 0, 1))
    s["sphere"] = ball((0.4, 0.5, -0.5), 0.5, {"type": "roughplastic", "alpha": 0.2,
                                               "diffuse_reflectance": rgb(0.6, 0.6, 0.6)})
    s["block"] = box((-0.9, 0, 0.3), (-0.2, 0.7, 1.0), noisy_diffuse(31, 6, (0.2, 0.4, 0.1), (0.6, 0.7, 0.3)))
    s["mirror_ball"] = ball((1.5, 0.3, 0.5), 0.3, {"type": "conductor", "material": "Ag"})
    return s


def _sky_bitmap():
    """An environment map with structure (a horizon, a bright patch) so glossy reflections are not flat."""
    h, w = 64, 128
    v = np.linspace(0, 1, h, dtype=np.float32)[:, None]
    u = np.linspace(0, 1, w, dtype=np.float32)[None, :]
    sky = np.where(v < 0.5, 0.6 + 1.2 * (0.5 - v), 0.08 + 0.1 * np.sin(40 * u) ** 2)
    img = np.stack([sky * 0.7, sky * 0.85, sky * 1.0], -1)
    spot = np.exp(-(((u - 0.3) / 0.04) ** 2 + ((v - 0.25) / 0.05) ** 2)) * 40.0
    img = img + spot[..., None] * np.array([1.0, 0.9, 0.7], np.float32)
    return mi.Bitmap(np.ascontiguousarray(img.astype(np.float32)))


def glossy():
    """Glossy and specular: rough gold, copper and aluminium, rough plastic, a mirror sphere and a glass
    sphere on a checker floor under a structured sky and one area light."""
    s = {"sky": {"type": "envmap", "bitmap": _sky_bitmap(), "scale": 1.0},
         "floor": box((-8, -0.1, -8), (8, 0, 8), checker((0.8, 0.8, 0.8), (0.15, 0.15, 0.15), 8.0)),
         "backdrop": box((-8, 0, -3.1), (8, 3, -3.0), noisy_diffuse(41, 5, (0.3, 0.3, 0.35), (0.55, 0.5, 0.45))),
         "softbox": panel((-2.0, 3.0, 1.5), (0.0, 0.5, -0.5), (1.2, 1.2), radiance=(12.0, 12.0, 12.0)),
         "gold": ball((-1.3, 0.55, -0.6), 0.55, {"type": "roughconductor", "material": "Au", "alpha": 0.2}),
         "copper": ball((0.1, 0.45, -1.3), 0.45, {"type": "roughconductor", "material": "Cu", "alpha": 0.35}),
         "alu": box((1.0, 0, -1.8), (1.8, 1.2, -1.2), {"type": "roughconductor", "material": "Al", "alpha": 0.05}),
         "mirror": ball((0.9, 0.4, 0.2), 0.4, {"type": "conductor", "material": "Ag"}),
         "glass": ball((-0.3, 0.3, 0.6), 0.3, {"type": "dielectric", "int_ior": 1.5}),
         "plastic": ball((-2.3, 0.35, 0.4), 0.35, {"type": "roughplastic", "alpha": 0.1,
                                                   "diffuse_reflectance": rgb(0.1, 0.2, 0.7)}),
         "shiny_plastic": ball((2.2, 0.3, 0.3), 0.3, {"type": "plastic", "diffuse_reflectance": rgb(0.8, 0.1, 0.1)})}
    return s


SCENES = {
    "hidden": (hidden, [((1.8, 1.5, 2.2), (-0.6, 0.8, -1.2), 65.0),
                        ((-2.0, 1.7, 2.2), (0.8, 0.6, -1.5), 60.0),
                        ((2.2, 2.2, 0.3), (-1.0, 0.5, -1.0), 70.0)]),
    "indirect": (indirect, [((-2.4, 1.6, 2.2), (0.8, 1.0, -1.2), 65.0),
                            ((2.5, 2.4, 2.2), (-0.5, 0.5, -1.0), 65.0),
                            ((0.0, 0.8, 2.3), (0.5, 1.8, -2.5), 60.0)]),
    "emitter": (emitter, [((0.0, 1.4, 2.3), (0.0, 1.0, -2.0), 60.0),
                          ((-2.0, 1.0, 2.0), (1.0, 0.6, -1.5), 62.0),
                          ((2.2, 2.3, 2.1), (-0.5, 0.5, -1.0), 66.0)]),
    "glossy": (glossy, [((0.0, 1.6, 4.5), (0.0, 0.4, -0.6), 45.0),
                        ((-3.5, 0.8, 3.0), (0.0, 0.5, -0.6), 40.0),
                        ((2.8, 2.4, 2.6), (-0.2, 0.3, -0.6), 42.0)]),
}
