"""Procedural scene descriptions for ``vision render-scenes``, deterministic from a seed.

A :class:`SceneSpec` is plain data (JSON-serialisable, NumPy only, no Mitsuba): a camera, a list of
:class:`SceneObject` (each one instance of the segmentation, with a semantic class, a shape with its
parameters in world units, a material and, for lights, an emitted radiance), an optional sky and an
optional sun. ``vision.data.render`` turns it into a Mitsuba scene; the tests intersect rays with the
same parameters analytically, so every number here has a geometric meaning.

World frame: y up, metres. Kinds:

- ``rooms``: a closed box room with objects on the floor, lit by a ceiling panel, a hidden uplight
  (all light arrives indirectly, off the ceiling), one small bright sphere, or a window panel;
- ``objects``: objects on an open textured ground under a procedural sky, with or without a sun;
- ``lamps``: a room where emitters are visible in the frame (glowing spheres, a bright wall panel).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

# generated geometry lives in .meshes; the renderer and the tests import it from here, as they always have
from .meshes import blob_mesh, cone_mesh, noise_texture, object_mesh, sky_image, torus_mesh  # noqa: F401

KINDS = ("rooms", "objects", "lamps")

# Semantic classes: segment.class holds the index into this tuple; 0 = no surface (sky / background).
CLASSES = ("background", "floor", "wall", "ceiling", "light", "sphere", "box", "cylinder", "panel",
           "torus", "cone", "blob")

SHAPES = ("sphere", "box", "cylinder", "rectangle", "torus", "cone", "blob")


@dataclass
class Material:
    """A diffuse (or, if ``glossy``, rough-plastic) material.

    ``albedo`` is the RGB diffuse reflectance in [0, 1]; with a ``texture`` it is colour 0 of the
    texture and ``texture["color1"]`` the other colour: ``{"type": "checker", "color1", "scale"}``
    (checks per UV unit) or ``{"type": "noise", "color1", "scale", "seed"}`` (tileable value noise);
    an optional ``"repeat"`` tiles either texture that many times per UV unit.
    ``roughness`` is the GGX alpha of the glossy coat (glossy materials only).
    """

    albedo: list
    texture: dict | None = None
    glossy: bool = False
    roughness: float = 0.0


@dataclass
class SceneObject:
    """One instance: ``shape`` with ``params`` (world units), a material, and an emitted radiance for lights.

    Shape parameters:

    - ``sphere``: ``center`` [3], ``radius``;
    - ``box``: ``center`` [3], ``half`` [3] half extents, ``yaw`` (radians about +y);
    - ``cylinder``: ``base`` [3] centre of the bottom cap, ``radius``, ``height`` (axis +y), capped;
    - ``rectangle``: ``center`` [3], ``u``, ``v`` half-extent vectors; the front (and the emitting
      side of a light) faces ``normalize(u x v)``;
    - ``torus``: ``center``, ``major``, ``minor`` radii, ``yaw``, ``tilt`` (radians about the
      rotated x axis; 0 = lying flat);
    - ``cone``: ``base`` [3], ``radius``, ``height`` (apex up), with a base disk;
    - ``blob``: ``center``, ``radius``, ``amplitude`` (relative bump height), ``seed``.
    """

    instance: int
    cls: str
    shape: str
    params: dict
    material: Material
    emission: list | None = None

    @property
    def class_id(self) -> int:
        return CLASSES.index(self.cls)


@dataclass
class Camera:
    """Pinhole camera looking from ``origin`` at ``target``; ``fov`` = horizontal field of view in degrees."""

    origin: list
    target: list
    up: list = field(default_factory=lambda: [0.0, 1.0, 0.0])
    fov: float = 60.0

    def axes(self) -> np.ndarray:
        """Rows: image right, image up, forward (unit vectors, world frame)."""
        o, t, up = (np.asarray(x, dtype=np.float64) for x in (self.origin, self.target, self.up))
        f = t - o
        f /= np.linalg.norm(f)
        r = np.cross(f, up)
        r /= np.linalg.norm(r)
        return np.stack([r, np.cross(r, f), f])

    def intrinsics(self, width: int, height: int) -> dict:
        """fx, fy, cx, cy in pixels; pixel (i, j) has its centre at (i + 0.5, j + 0.5), j down."""
        fx = 0.5 * width / math.tan(math.radians(self.fov) / 2)
        return {"fx": fx, "fy": fx, "cx": width / 2, "cy": height / 2}

    def world_from_camera(self) -> list:
        """4 x 4 matrix mapping camera coordinates (x right, y up, z backwards: OpenGL) to world."""
        r, u, f = self.axes()
        m = np.eye(4)
        m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = r, u, -f, self.origin
        return m.tolist()


@dataclass
class SceneSpec:
    kind: str
    seed: int
    camera: Camera
    objects: list
    ao_radius: float                 # ambient-occlusion ray length, a fraction of the scene size
    lighting: str = ""               # which lighting recipe was drawn (for the manifest and statistics)
    sky: dict | None = None          # {"zenith": rgb, "horizon": rgb, "ground": rgb, "scale": float}
    sun: dict | None = None          # {"direction": towards the sun [3], "irradiance": rgb}

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> "SceneSpec":
        objects = [SceneObject(**{**o, "material": Material(**o["material"])}) for o in d["objects"]]
        return SceneSpec(**{**d, "camera": Camera(**d["camera"]), "objects": objects})


def rect(center, normal, half_w: float, half_h: float, hint=(0.0, 1.0, 0.0)) -> dict:
    """Rectangle parameters (center, u, v) with its front facing ``normal``; ``v`` leans towards ``hint``."""
    n = np.asarray(normal, dtype=np.float64)
    n /= np.linalg.norm(n)
    hint = np.asarray(hint, dtype=np.float64)
    if abs(n @ hint) > 0.99:
        hint = np.array([0.0, 0.0, 1.0]) if abs(n[2]) < 0.9 else np.array([1.0, 0.0, 0.0])
    u = np.cross(hint, n)
    u /= np.linalg.norm(u)
    v = np.cross(n, u)  # u x v = n
    return {"center": [float(x) for x in center], "u": (u * half_w).tolist(), "v": (v * half_h).tolist()}


def rect_normal(params: dict) -> np.ndarray:
    n = np.cross(params["u"], params["v"])
    return n / np.linalg.norm(n)


# ----------------------------------------------------------------------------------------------
# Random scene recipes.

def scene_seed(seed: int, index: int) -> int:
    """Seed of scene ``index`` of a run with ``--seed seed`` (independent of ``--count``)."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0] & 0x7FFFFFFF)


def make_scene(kind: str, seed: int) -> SceneSpec:
    """Draw a scene of ``kind`` from ``seed``; the same (kind, seed) always gives the same scene."""
    if kind not in KINDS:
        raise ValueError(f"unknown scene kind {kind!r}; choose from {', '.join(KINDS)}")
    rng = np.random.default_rng(seed)
    return {"rooms": _rooms, "objects": _objects, "lamps": _lamps}[kind](rng, seed)


def _color(rng, sat=(0.15, 0.85), val=(0.25, 0.9)) -> list:
    h = rng.random()
    s, v = rng.uniform(*sat), rng.uniform(*val)
    k = (np.array([5.0, 3.0, 1.0]) + h * 6) % 6
    rgb = v - v * s * np.clip(np.minimum(k, 4 - k), 0, 1)
    return [float(x) for x in rgb]


def _material(rng, glossy_p=0.2, texture_p=0.4, sat=(0.15, 0.85), val=(0.25, 0.9)) -> Material:
    m = Material(albedo=_color(rng, sat, val))
    r = rng.random()
    if r < texture_p / 2:
        m.texture = {"type": "checker", "color1": _color(rng, sat, val), "scale": float(rng.choice([2, 4, 6, 8]))}
    elif r < texture_p:
        m.texture = {"type": "noise", "color1": _color(rng, sat, val), "scale": float(rng.uniform(2, 8)),
                     "seed": int(rng.integers(1 << 30))}
    if rng.random() < glossy_p:
        m.glossy, m.roughness = True, float(rng.uniform(0.05, 0.35))
    return m


def _room_shell(rng, objects: list, W: float, D: float, H: float) -> None:
    hw, hd = W / 2, D / 2
    floor = _material(rng, glossy_p=0.15, texture_p=0.7, sat=(0.0, 0.5), val=(0.3, 0.8))
    wall = _material(rng, glossy_p=0.0, texture_p=0.3, sat=(0.0, 0.4), val=(0.45, 0.85))
    ceil = Material(albedo=[float(x) for x in np.full(3, rng.uniform(0.6, 0.85))])
    panels = [
        ("floor", rect([0, 0, 0], [0, 1, 0], hw, hd, hint=(0, 0, -1)), floor),
        ("ceiling", rect([0, H, 0], [0, -1, 0], hw, hd, hint=(0, 0, 1)), ceil),
        ("wall", rect([-hw, H / 2, 0], [1, 0, 0], hd, H / 2), wall),
        ("wall", rect([hw, H / 2, 0], [-1, 0, 0], hd, H / 2), wall),
        ("wall", rect([0, H / 2, -hd], [0, 0, 1], hw, H / 2), wall),
        ("wall", rect([0, H / 2, hd], [0, 0, -1], hw, H / 2), wall),
    ]
    for cls, params, mat in panels:
        objects.append(SceneObject(len(objects) + 1, cls, "rectangle", params, mat))


def _place_objects(rng, objects: list, n: int, region, keep_out: list, max_height: float = 1.4) -> None:
    """Put ``n`` random objects on the floor (y = 0) inside ``region`` = (xmin, xmax, zmin, zmax)."""
    placed = [(np.asarray(p[:2]), p[2]) for p in keep_out]
    for _ in range(n):
        cls = str(rng.choice(["sphere", "box", "cylinder", "torus", "cone", "blob", "panel"],
                             p=[0.22, 0.22, 0.16, 0.1, 0.1, 0.12, 0.08]))
        s = float(rng.uniform(0.2, 0.55))
        m = 1.45 * s  # a turned box reaches s * sqrt(2) from its centre
        for _attempt in range(50):
            xz = np.array([rng.uniform(region[0] + m, region[1] - m), rng.uniform(region[2] + m, region[3] - m)])
            if all(np.linalg.norm(xz - q) > m + r + 0.05 for q, r in placed):
                break
        else:
            continue
        x, z = float(xz[0]), float(xz[1])
        mat = _material(rng)
        if cls == "sphere":
            shape, params = "sphere", {"center": [x, s, z], "radius": s}
        elif cls == "box":
            half = [s * rng.uniform(0.5, 1.0), min(s * rng.uniform(0.4, 1.6), max_height / 2), s * rng.uniform(0.5, 1.0)]
            shape, params = "box", {"center": [x, half[1], z], "half": half, "yaw": float(rng.uniform(0, np.pi))}
        elif cls == "cylinder":
            shape, params = "cylinder", {"base": [x, 0.0, z], "radius": s * rng.uniform(0.4, 0.9),
                                         "height": min(s * rng.uniform(1.0, 3.5), max_height)}
        elif cls == "torus":
            minor = s * rng.uniform(0.2, 0.35)
            tilt = float(rng.choice([0.0, np.pi / 2]))
            cy = minor if tilt == 0 else s
            shape, params = "torus", {"center": [x, cy, z], "major": s - minor, "minor": minor,
                                      "yaw": float(rng.uniform(0, np.pi)), "tilt": tilt}
        elif cls == "cone":
            shape, params = "cone", {"base": [x, 0.0, z], "radius": s, "height": min(s * rng.uniform(1.2, 3.0), max_height)}
        elif cls == "blob":
            amp = float(rng.uniform(0.08, 0.2))
            r = s / (1 + amp)
            shape, params = "blob", {"center": [x, r * 0.9, z], "radius": r, "amplitude": amp,
                                     "seed": int(rng.integers(1 << 30))}
        else:  # a standing board, turned at random
            a = float(rng.uniform(0, 2 * np.pi))
            hh = min(s * rng.uniform(1.2, 2.2), max_height / 2)
            shape, params = "rectangle", rect([x, hh, z], [math.cos(a), 0, math.sin(a)], s, hh)
        objects.append(SceneObject(len(objects) + 1, cls, shape, params, mat))
        placed.append((xz, m))


def _room_camera(rng, W, D, H) -> Camera:
    hw, hd = W / 2, D / 2
    origin = [rng.uniform(-hw + 0.6, hw - 0.6), rng.uniform(1.0, min(1.8, H - 0.5)), hd - rng.uniform(0.3, 0.8)]
    target = [rng.uniform(-hw + 0.5, hw - 0.5), rng.uniform(0.3, 1.2), -hd + rng.uniform(0.5, 1.5)]
    return Camera(origin=[float(v) for v in origin], target=[float(v) for v in target], fov=float(rng.uniform(50, 75)))


def _room_dims(rng):
    return float(rng.uniform(4, 7)), float(rng.uniform(4, 7)), float(rng.uniform(2.6, 3.4))


def _add_light(objects, shape, params, radiance) -> None:
    mat = Material(albedo=[0.0, 0.0, 0.0])
    objects.append(SceneObject(len(objects) + 1, "light", shape, params, mat,
                               emission=[float(x) for x in radiance]))


def _warm_white(rng, power: float) -> np.ndarray:
    tint = np.array([1.0, rng.uniform(0.8, 1.0), rng.uniform(0.6, 1.0)])
    return power * tint / tint.mean()


def _rooms(rng, seed) -> SceneSpec:
    W, D, H = _room_dims(rng)
    objects: list = []
    _room_shell(rng, objects, W, D, H)
    camera = _room_camera(rng, W, D, H)
    lighting = str(rng.choice(["ceiling", "hidden", "small", "window"]))
    area_floor = W * D
    if lighting == "ceiling":  # a panel flush below the ceiling, facing down: mostly direct light
        hx, hz = rng.uniform(0.3, 0.8), rng.uniform(0.3, 0.8)
        c = [rng.uniform(-W / 4, W / 4), H - 0.01, rng.uniform(-D / 4, D / 4)]
        _add_light(objects, "rectangle", rect(c, [0, -1, 0], hx, hz, hint=(0, 0, 1)),
                   _warm_white(rng, 0.5 * area_floor / (4 * hx * hz)))
    elif lighting == "hidden":  # an uplight facing the ceiling: every lit pixel is lit indirectly
        hx, hz = rng.uniform(0.3, 0.7), rng.uniform(0.3, 0.7)
        c = [rng.uniform(-W / 4, W / 4), H - rng.uniform(0.3, 0.6), rng.uniform(-D / 4, D / 4)]
        _add_light(objects, "rectangle", rect(c, [0, 1, 0], hx, hz, hint=(0, 0, 1)),
                   _warm_white(rng, 1.2 * area_floor / (4 * hx * hz)))
    elif lighting == "small":  # a tiny bright sphere: hard shadows, high variance
        r = rng.uniform(0.04, 0.1)
        c = [rng.uniform(-W / 4, W / 4), H - rng.uniform(0.3, 0.8), rng.uniform(-D / 3, D / 4)]
        _add_light(objects, "sphere", {"center": [float(x) for x in c], "radius": float(r)},
                   _warm_white(rng, 0.5 * area_floor / (4 * np.pi * r * r)))
    else:  # a window-like panel on a side wall
        side = float(rng.choice([-1.0, 1.0]))
        hw_, hh_ = rng.uniform(0.4, 0.9), rng.uniform(0.4, 0.7)
        c = [side * (W / 2 - 0.01), rng.uniform(hh_ + 0.8, H - hh_ - 0.1), rng.uniform(-D / 3, D / 3)]
        _add_light(objects, "rectangle", rect(c, [-side, 0, 0], hw_, hh_),
                   np.array([0.9, 0.95, 1.1]) * 0.6 * area_floor / (4 * hw_ * hh_))
    keep = [(camera.origin[0], camera.origin[2], 0.9)]
    _place_objects(rng, objects, int(rng.integers(3, 8)), (-W / 2, W / 2, -D / 2, D / 2), keep)
    diag = math.sqrt(W * W + D * D + H * H)
    return SceneSpec("rooms", seed, camera, objects, ao_radius=round(0.08 * diag, 4), lighting=lighting)


def _objects(rng, seed) -> SceneSpec:
    objects: list = []
    ground = _material(rng, glossy_p=0.1, texture_p=0.8, sat=(0.0, 0.5), val=(0.3, 0.7))
    if ground.texture:  # the ground is 60 m across: repeat the texture so its features stay a metre or so
        ground.texture["repeat"] = 15.0
    objects.append(SceneObject(1, "floor", "rectangle", rect([0, 0, 0], [0, 1, 0], 30.0, 30.0, hint=(0, 0, -1)), ground))
    R = float(rng.uniform(1.5, 2.8))
    _place_objects(rng, objects, int(rng.integers(4, 10)), (-R, R, -R, R), [])
    az, dist = rng.uniform(0, 2 * np.pi), rng.uniform(1.4, 2.2) * R
    origin = [dist * math.cos(az), rng.uniform(0.8, 2.5), dist * math.sin(az)]
    target = [rng.uniform(-0.3, 0.3) * R, rng.uniform(0.2, 0.6), rng.uniform(-0.3, 0.3) * R]
    camera = Camera(origin=[float(v) for v in origin], target=[float(v) for v in target], fov=float(rng.uniform(45, 65)))
    sky = {"zenith": [float(x) for x in np.array([0.25, 0.45, 0.9]) * rng.uniform(0.6, 1.2)],
           "horizon": [float(x) for x in np.array([0.85, 0.88, 0.95]) * rng.uniform(0.7, 1.2)],
           "ground": [0.25, 0.22, 0.2], "scale": float(rng.uniform(0.6, 1.4))}
    sun = None
    lighting = "sky"
    if rng.random() < 0.7:
        el, saz = rng.uniform(np.radians(20), np.radians(70)), rng.uniform(0, 2 * np.pi)
        d = [math.cos(el) * math.cos(saz), math.sin(el), math.cos(el) * math.sin(saz)]
        sun = {"direction": [float(x) for x in d],
               "irradiance": [float(x) for x in np.array([1.0, 0.95, 0.85]) * rng.uniform(1.0, 3.0)]}
        lighting = "sky+sun"
    return SceneSpec("objects", seed, camera, objects, ao_radius=round(0.1 * 2 * R, 4), lighting=lighting, sky=sky, sun=sun)


def _lamps(rng, seed) -> SceneSpec:
    W, D, H = _room_dims(rng)
    objects: list = []
    _room_shell(rng, objects, W, D, H)
    camera = _room_camera(rng, W, D, H)
    keep = [(camera.origin[0], camera.origin[2], 0.9)]
    _place_objects(rng, objects, int(rng.integers(2, 6)), (-W / 2, W / 2, -D / 2, D / 2), keep)
    axes = camera.axes()
    t = math.tan(math.radians(camera.fov) / 2)
    origin = np.asarray(camera.origin)
    n_lamps, placed = int(rng.integers(1, 4)), 0
    for _ in range(200):  # glowing spheres floating in view, above the objects (which are < 1.4 m tall)
        if placed == n_lamps:
            break
        r = rng.uniform(0.06, 0.18)
        p = np.array([rng.uniform(-W / 2 + r + 0.1, W / 2 - r - 0.1), rng.uniform(1.55 + r, H - r - 0.1),
                      rng.uniform(-D / 2 + r + 0.1, D / 2 - r - 0.1)])
        rel = p - origin
        z = rel @ axes[2]
        if z < 1.2 or abs(rel @ axes[0]) > 0.8 * t * z or abs(rel @ axes[1]) > 0.8 * t * z:
            continue  # behind, too close, or outside the central 80 % of the frame
        if any(o.cls == "light" and np.linalg.norm(p - o.params["center"]) < r + o.params["radius"] + 0.1
               for o in objects if o.shape == "sphere"):
            continue
        _add_light(objects, "sphere", {"center": [float(x) for x in p], "radius": float(r)},
                   _warm_white(rng, rng.uniform(0.15, 0.3) * W * D / (4 * np.pi * r * r)))
        placed += 1
    if rng.random() < 0.6 or placed == 0:  # a bright panel on the far wall, facing the camera
        hw_, hh_ = rng.uniform(0.3, 0.8), rng.uniform(0.2, 0.5)
        c = [rng.uniform(-W / 4, W / 4), rng.uniform(1.2, H - hh_ - 0.2), -D / 2 + 0.01]
        _add_light(objects, "rectangle", rect(c, [0, 0, 1], hw_, hh_), _warm_white(rng, rng.uniform(3, 8)))
    diag = math.sqrt(W * W + D * D + H * H)
    return SceneSpec("lamps", seed, camera, objects, ao_radius=round(0.08 * diag, 4), lighting=f"{placed} lamps")
