"""Render a :class:`~vision.data.scenes.SceneSpec` with Mitsuba 3: noisy frames, guide buffers, references, labels.

What is rendered, and how (the manifest records every number):

- **noisy frames** and the **reference**: Mitsuba's ``path`` integrator (``max_depth`` 12, Russian roulette from depth 3),
  ``independent`` sampler, ``box`` pixel filter (a Gaussian filter splats each sample over several
  pixels and correlates the noise, which defeats denoisers). A frame is 1 spp with its own seed; the
  reference is ``spp_ref`` samples, rendered in chunks with seeds that no frame uses, and averaged.
- **emission**: the same integrator with ``max_depth`` 1 (only what is directly visible: lights and
  sky), averaged over ``emission_spp`` samples per pixel, so ``color - emission`` has no light in it.
- **buffers at the pixel centre** ("rasterised", one ray through the centre of each pixel, as a
  G-buffer would be): albedo (the BSDF's diffuse reflectance), shading normal, position, camera
  z-depth, camera-space normal, instance and semantic ids, glossy mask, and ambient occlusion
  (``ao_rays`` cosine-weighted rays about the geometric normal, of length ``spec.ao_radius``).
  Normals face the camera side of the surface. Pixels without a surface have albedo, normal,
  position and depth 0, AO 1 and ids 0.

Variants: see :mod:`.mitsuba_variant` (``llvm_ad_rgb`` where it works, else ``scalar_rgb``). This module imports
Mitsuba (the [render] extra); ``import vision.data`` does not import this module, so it works without Mitsuba.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import drjit as dr
import mitsuba as mi
import numpy as np
from PIL import Image

from .exr import LAYERS, write_frame
from .mitsuba_variant import choose_variant
from .scenes import CLASSES, SceneObject, SceneSpec, noise_texture, object_mesh, rect_normal, sky_image

MAX_DEPTH = 12
RR_DEPTH = 3           # Russian roulette from this depth on: long paths are rare, so depth 12 costs about what 8 does
AO_RAYS = 64
EMISSION_SPP = 64
REF_CHUNK = 256      # reference samples per render call, which bounds the memory of one wavefront
# ----------------------------------------------------------------------------------------------
# SceneSpec -> Mitsuba scene

def shape_key(instance: int, part: int = 0) -> str:
    """Name of a Mitsuba shape: ``obj<instance>_<part>`` (an instance may have several shapes)."""
    return f"obj{instance:04d}_{part}"


def instance_of(key: str) -> int:
    return int(key[3:7])


def _texture(mi, mat):
    base = {"type": "rgb", "value": [float(x) for x in mat.albedo]}
    tex = mat.texture
    if tex is None:
        return base
    rep = float(tex.get("repeat", 1.0))
    if tex["type"] == "checker":
        k = float(tex["scale"]) * rep
        return {"type": "checkerboard", "color0": base, "color1": {"type": "rgb", "value": tex["color1"]},
                "to_uv": mi.ScalarTransform4f().scale([k, k, 1.0])}
    if tex["type"] == "noise":
        img = noise_texture(tex["seed"], mat.albedo, tex["color1"], tex["scale"])
        return {"type": "bitmap", "bitmap": mi.Bitmap(img), "raw": True, "filter_type": "bilinear",
                "wrap_mode": "repeat", "to_uv": mi.ScalarTransform4f().scale([rep, rep, 1.0])}
    raise ValueError(f"unknown texture type {tex['type']!r}")


def _bsdf(mi, obj: SceneObject, thin: bool) -> dict:
    mat = obj.material
    if obj.emission is not None:
        b = {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.0, 0.0, 0.0]}}
    elif mat.glossy:
        b = {"type": "roughplastic", "distribution": "ggx", "alpha": float(mat.roughness),
             "diffuse_reflectance": _texture(mi, mat)}
    else:
        b = {"type": "diffuse", "reflectance": _texture(mi, mat)}
    return {"type": "twosided", "bsdf": b} if thin else b


def _frame_matrix(center, u, v, n) -> "np.ndarray":
    m = np.eye(4)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = u, v, n, center
    return m


def _mesh(mi, key, V, F, N, UV, bsdf: dict):
    props = mi.Properties()
    props["bsdf"] = mi.load_dict(bsdf)
    mesh = mi.Mesh(key, len(V), len(F), props=props, has_vertex_normals=True, has_vertex_texcoords=True)
    params = mi.traverse(mesh)
    ftype, utype = type(params["vertex_positions"]), type(params["faces"])
    params["vertex_positions"] = ftype(np.asarray(V, np.float32).ravel())
    params["vertex_normals"] = ftype(np.asarray(N, np.float32).ravel())
    params["vertex_texcoords"] = ftype(np.asarray(UV, np.float32).ravel())
    params["faces"] = utype(np.asarray(F, np.uint32).ravel())
    params.update()
    return mesh


def _shapes(mi, obj: SceneObject) -> dict:
    T = mi.ScalarTransform4f
    p = obj.params
    emitter = None
    if obj.emission is not None:
        emitter = {"type": "area", "radiance": {"type": "rgb", "value": [float(x) for x in obj.emission]}}
    out = {}
    if obj.shape == "sphere":
        out[shape_key(obj.instance)] = {"type": "sphere", "center": [float(x) for x in p["center"]],
                                        "radius": float(p["radius"]), "bsdf": _bsdf(mi, obj, False)}
    elif obj.shape == "box":
        c, s = math.cos(p["yaw"]), math.sin(p["yaw"])
        R = np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]]) * np.asarray(p["half"])[None, :]
        out[shape_key(obj.instance)] = {"type": "cube", "to_world": T(_frame_matrix(p["center"], *R.T)),
                                        "bsdf": _bsdf(mi, obj, False)}
    elif obj.shape == "cylinder":
        b, r, h = np.asarray(p["base"], dtype=np.float64), p["radius"], p["height"]
        top = b + [0.0, h, 0.0]
        out[shape_key(obj.instance, 0)] = {"type": "cylinder", "p0": b.tolist(), "p1": top.tolist(), "radius": float(r),
                                           "bsdf": _bsdf(mi, obj, False)}
        # top cap (the bottom one stands on the floor, unseen): a disk facing +y (u x v = +y)
        cap = _frame_matrix(top, [0, 0, r], [r, 0, 0], [0, 1, 0])
        out[shape_key(obj.instance, 1)] = {"type": "disk", "to_world": T(cap), "bsdf": _bsdf(mi, obj, False)}
    elif obj.shape == "rectangle":
        m = _frame_matrix(p["center"], p["u"], p["v"], rect_normal(p))
        out[shape_key(obj.instance)] = {"type": "rectangle", "to_world": T(m), "bsdf": _bsdf(mi, obj, True)}
    elif obj.shape in ("torus", "cone", "blob"):
        V, F, N, UV = object_mesh(obj)
        out[shape_key(obj.instance)] = _mesh(mi, shape_key(obj.instance), V, F, N, UV, _bsdf(mi, obj, False))
    else:
        raise ValueError(f"unknown shape {obj.shape!r}")
    if emitter is not None:
        for key, d in out.items():
            if isinstance(d, dict):
                d["emitter"] = emitter
    return out


def scene_dict(spec: SceneSpec, width: int, height: int) -> dict:
    """The Mitsuba ``load_dict`` description of ``spec`` rendered at ``width`` x ``height``."""
    cam = spec.camera
    d = {
        "type": "scene",
        "sensor": {
            "type": "perspective", "fov": float(cam.fov), "fov_axis": "x", "near_clip": 1e-3, "far_clip": 1e4,
            "to_world": mi.ScalarTransform4f().look_at(origin=[float(x) for x in cam.origin],
                                                       target=[float(x) for x in cam.target],
                                                       up=[float(x) for x in cam.up]),
            "film": {"type": "hdrfilm", "width": int(width), "height": int(height), "pixel_format": "rgb",
                     "component_format": "float32", "rfilter": {"type": "box"}},
            "sampler": {"type": "independent", "sample_count": 1},
        },
    }
    for obj in spec.objects:
        d.update(_shapes(mi, obj))
    if spec.sky is not None:
        d["sky"] = {"type": "envmap", "bitmap": mi.Bitmap(sky_image(spec.sky))}
    if spec.sun is not None:
        d["sun"] = {"type": "directional", "direction": [-float(x) for x in spec.sun["direction"]],
                    "irradiance": {"type": "rgb", "value": [float(x) for x in spec.sun["irradiance"]]}}
    return d


def load_scene(spec: SceneSpec, width: int, height: int):
    # optimize=False: Mitsuba would otherwise merge meshes that share a BSDF into one shape, losing instances
    return mi.load_dict(scene_dict(spec, width, height), optimize=False)


# ----------------------------------------------------------------------------------------------
# Passes

def _is_scalar() -> bool:
    return mi.variant().startswith("scalar")


def render_radiance(scene, spp: int, seed: int, max_depth: int = MAX_DEPTH, rr_depth: int = RR_DEPTH) -> np.ndarray:
    """Mean path-traced radiance over ``spp`` samples per pixel: (H, W, 3) float32."""
    integrator = mi.load_dict({"type": "path", "max_depth": int(max_depth), "rr_depth": int(rr_depth)})
    img = mi.render(scene, integrator=integrator, spp=int(spp), seed=int(seed))
    return np.array(img, dtype=np.float32)[..., :3]


def _centre_hits(scene, width: int, height: int) -> dict:
    """First hit of one ray through each pixel centre (NumPy arrays, pixels in row-major order)."""
    sensor = scene.sensors()[0]
    jj, ii = np.mgrid[0:height, 0:width]
    u = ((ii + 0.5) / width).ravel().astype(np.float32)
    v = ((jj + 0.5) / height).ravel().astype(np.float32)
    n_pix = u.size
    if not _is_scalar():
        ray, _ = sensor.sample_ray(0.0, 0.5, mi.Point2f(mi.Float(u), mi.Float(v)), mi.Point2f(0.5, 0.5))
        si = scene.ray_intersect(ray)
        albedo = si.bsdf(ray).eval_diffuse_reflectance(si)
        ptr = dr.reinterpret_array(mi.UInt32, si.shape)
        lut = {int(np.array(dr.reinterpret_array(mi.UInt32, mi.ShapePtr(s)))[0]): instance_of(s.id())
               for s in scene.shapes()}
        ptr = np.array(ptr)
        inst = np.array([lut.get(int(k), 0) for k in range(int(ptr.max()) + 1)], dtype=np.uint32)[ptr]
        vec = lambda x: np.array(x, dtype=np.float64).reshape(3, -1).T  # noqa: E731
        valid = np.array(si.is_valid(), dtype=bool)
        out = {"valid": valid, "p": vec(si.p), "n": vec(si.sh_frame.n), "ng": vec(si.n), "d": vec(ray.d),
               "albedo": vec(albedo), "instance": np.where(valid, inst, 0).astype(np.uint32)}
        for k in ("p", "n", "ng", "albedo"):  # misses carry inf / garbage there
            out[k][~valid] = 0.0
    else:
        out = {k: np.zeros((n_pix, 3)) for k in ("p", "n", "ng", "d", "albedo")}
        out["valid"] = np.zeros(n_pix, bool)
        out["instance"] = np.zeros(n_pix, np.uint32)
        for k in range(n_pix):
            ray, _ = sensor.sample_ray(0.0, 0.5, mi.Point2f(float(u[k]), float(v[k])), mi.Point2f(0.5, 0.5))
            out["d"][k] = ray.d
            si = scene.ray_intersect(ray)
            if not si.is_valid():
                continue
            out["valid"][k] = True
            out["p"][k], out["n"][k], out["ng"][k] = si.p, si.sh_frame.n, si.n
            out["albedo"][k] = si.bsdf(ray).eval_diffuse_reflectance(si)
            out["instance"][k] = instance_of(si.shape.id())
    return out


def _orthonormal(n: np.ndarray):
    """Two tangents completing unit normals ``n`` (M, 3) to right-handed frames (Duff et al. 2017)."""
    sign = np.where(n[:, 2] >= 0, 1.0, -1.0)
    a = -1.0 / (sign + n[:, 2])
    b = n[:, 0] * n[:, 1] * a
    t = np.stack([1 + sign * n[:, 0] ** 2 * a, sign * b, -sign * n[:, 0]], -1)
    s = np.stack([b, sign + n[:, 1] ** 2 * a, -n[:, 1]], -1)
    return t, s


def _occluded(scene, origins: np.ndarray, dirs: np.ndarray, maxt: float) -> np.ndarray:
    """Whether each ray (origin, unit direction) hits anything within ``maxt``: (M,) bool."""
    if len(origins) == 0:
        return np.zeros(0, bool)
    if not _is_scalar():
        out = []
        step = 1 << 21
        for s in range(0, len(origins), step):
            o = origins[s:s + step].astype(np.float32)
            d = dirs[s:s + step].astype(np.float32)
            ray = mi.Ray3f(mi.Point3f(mi.Float(o[:, 0]), mi.Float(o[:, 1]), mi.Float(o[:, 2])),
                           mi.Vector3f(mi.Float(d[:, 0]), mi.Float(d[:, 1]), mi.Float(d[:, 2])))
            ray.maxt = float(maxt)
            out.append(np.array(scene.ray_test(ray), dtype=bool))
        return np.concatenate(out)
    hit = np.zeros(len(origins), bool)
    for k in range(len(origins)):
        ray = mi.Ray3f(origins[k].tolist(), dirs[k].tolist())
        ray.maxt = float(maxt)
        hit[k] = bool(scene.ray_test(ray))
    return hit


def ambient_occlusion(scene, p: np.ndarray, ng: np.ndarray, radius: float, rays: int, seed: int) -> np.ndarray:
    """Fraction of ``rays`` cosine-weighted directions about ``ng`` unoccluded within ``radius``: (M,)."""
    m = len(p)
    rng = np.random.default_rng(seed)
    u1, u2 = rng.random((m, rays)), rng.random((m, rays))
    r, phi = np.sqrt(u1), 2 * np.pi * u2
    t, s = _orthonormal(ng)
    d = ((r * np.cos(phi))[..., None] * t[:, None] + (r * np.sin(phi))[..., None] * s[:, None]
         + np.sqrt(np.maximum(0.0, 1 - u1))[..., None] * ng[:, None])
    d /= np.linalg.norm(d, axis=-1, keepdims=True)
    # offset along the normal, scaled with the coordinates' magnitude (float32 spacing)
    eps = 1e-4 * (1 + np.abs(p).max(axis=1, keepdims=True))
    o = np.repeat(p + eps * ng, rays, axis=0)
    hit = _occluded(scene, o, d.reshape(-1, 3), radius - eps.max())
    return 1.0 - hit.reshape(m, rays).mean(axis=1)


def render_buffers(scene, spec: SceneSpec, width: int, height: int, ao_rays: int = AO_RAYS,
                   ao_seed: int = 0) -> dict:
    """Pixel-centre buffers: the fields of :data:`vision.data.exr.LAYERS` other than radiance."""
    h = _centre_hits(scene, width, height)
    valid = h["valid"]
    # face the camera side: flip both normals where the geometric one points away from the viewer
    facing = np.where(np.einsum("ij,ij->i", h["ng"], h["d"]) > 0, -1.0, 1.0)[:, None]
    ng, n = h["ng"] * facing, h["n"] * facing
    n = np.where((np.einsum("ij,ij->i", n, h["d"]) > 0)[:, None], ng, n)  # shading normal behind the viewer
    n /= np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-12)
    ng /= np.maximum(np.linalg.norm(ng, axis=1, keepdims=True), 1e-12)
    axes = spec.camera.axes()
    depth = np.where(valid, (h["p"] - np.asarray(spec.camera.origin)) @ axes[2], 0.0)
    camn = np.stack([n @ axes[0], n @ axes[1], -(n @ axes[2])], -1)
    ao = np.ones(len(valid))
    ao[valid] = ambient_occlusion(scene, h["p"][valid], ng[valid], spec.ao_radius, ao_rays, ao_seed)
    cls_lut = np.zeros(len(spec.objects) + 1, np.uint32)
    gl_lut = np.zeros(len(spec.objects) + 1, np.float32)
    for obj in spec.objects:
        cls_lut[obj.instance] = CLASSES.index(obj.cls)
        gl_lut[obj.instance] = float(obj.material.glossy and obj.emission is None)
    zero = lambda x: np.where(valid[:, None], x, 0.0)  # noqa: E731
    shape3 = lambda x: np.asarray(x, np.float32).reshape(height, width, -1)  # noqa: E731
    inst = h["instance"]
    return {
        "albedo": shape3(np.clip(zero(h["albedo"]), 0.0, None)),
        "normal": shape3(zero(n)),
        "depth": shape3(depth),
        "position": shape3(zero(h["p"])),
        "ao": shape3(ao),
        "camnormal": shape3(zero(camn)),
        "segment": inst.reshape(height, width, 1).astype(np.uint32),
        "semantic": cls_lut[inst].reshape(height, width, 1),
        "glossy": gl_lut[inst].reshape(height, width, 1),
    }


# ----------------------------------------------------------------------------------------------
# One scene, end to end

@dataclass
class SceneRender:
    spec: SceneSpec
    width: int
    height: int
    buffers: dict                 # field -> (H, W, C): pixel-centre buffers, emission, reference
    frames: list                  # (seed, (H, W, 3) noisy 1-spp radiance)
    settings: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)


def scene_seeds(spec_seed: int, noisy: int, ref_chunks: int) -> dict:
    """Distinct 31-bit render seeds for the frames, the reference chunks, emission and AO."""
    state = np.random.SeedSequence([spec_seed, 0x5EED]).generate_state(noisy + ref_chunks + 2 + 64)
    seeds = list(dict.fromkeys(int(s & 0x7FFFFFFF) for s in state))  # unique, order kept
    return {"noisy": seeds[:noisy], "reference": seeds[noisy:noisy + ref_chunks],
            "emission": seeds[noisy + ref_chunks], "ao": seeds[noisy + ref_chunks + 1]}


def render_scene(spec: SceneSpec, width: int, height: int | None = None, spp_ref: int = 2048, noisy_seeds: int = 4,
                 ao_rays: int = AO_RAYS, max_depth: int = MAX_DEPTH, emission_spp: int = EMISSION_SPP,
                 variant: str = "auto") -> SceneRender:
    """Render every pass of ``spec``; see the module docstring for what each one is."""
    height = width if height is None else height
    variant = choose_variant(variant)
    chunks = [REF_CHUNK] * (spp_ref // REF_CHUNK) + ([spp_ref % REF_CHUNK] if spp_ref % REF_CHUNK else [])
    seeds = scene_seeds(spec.seed, noisy_seeds, len(chunks))
    secs = {}
    t = time.perf_counter()
    scene = load_scene(spec, width, height)
    secs["load"] = time.perf_counter() - t

    t = time.perf_counter()
    buffers = render_buffers(scene, spec, width, height, ao_rays, seeds["ao"])
    secs["buffers"] = time.perf_counter() - t

    t = time.perf_counter()
    frames = [(s, render_radiance(scene, 1, s, max_depth)) for s in seeds["noisy"]]
    secs["noisy"] = time.perf_counter() - t

    t = time.perf_counter()
    buffers["emission"] = render_radiance(scene, emission_spp, seeds["emission"], max_depth=1)
    secs["emission"] = time.perf_counter() - t

    t = time.perf_counter()
    acc = np.zeros((height, width, 3), np.float64)
    for n, s in zip(chunks, seeds["reference"]):
        acc += render_radiance(scene, n, s, max_depth) * (n / spp_ref)
    buffers["reference"] = acc.astype(np.float32)
    secs["reference"] = time.perf_counter() - t

    settings = {
        "renderer": f"mitsuba {mi.__version__}", "drjit": dr.__version__, "variant": variant,
        "width": width, "height": height, "integrator": {"type": "path", "max_depth": max_depth, "rr_depth": RR_DEPTH},
        "pixel_filter": "box", "sampler": "independent",
        "spp_ref": spp_ref, "reference_chunks": chunks, "reference_seeds": seeds["reference"],
        "noisy_spp": 1, "noisy_seeds": seeds["noisy"],
        "emission": {"max_depth": 1, "spp": emission_spp, "seed": seeds["emission"]},
        "ao": {"rays": ao_rays, "radius": spec.ao_radius, "seed": seeds["ao"], "distribution": "cosine, about the geometric normal"},
        "buffers": "one ray through each pixel centre",
    }
    return SceneRender(spec, width, height, buffers, frames, settings, secs)


# ----------------------------------------------------------------------------------------------
# Writing a scene folder

def _tonemap(x: np.ndarray) -> np.ndarray:
    return (np.clip(x, 0, 1) ** (1 / 2.2) * 255 + 0.5).astype(np.uint8)


def _palette(ids: np.ndarray) -> np.ndarray:
    h = (ids.astype(np.uint64) * np.uint64(2654435761)) & np.uint64(0xFFFFFF)
    rgb = np.stack([(h >> np.uint64(s)) & np.uint64(255) for s in (0, 8, 16)], -1).astype(np.uint8)
    rgb[ids == 0] = 0
    return rgb


def preview(render: SceneRender) -> np.ndarray:
    """A 2 x 4 contact sheet: noisy, reference, emission, albedo / normal, depth, AO, instances."""
    b = render.buffers
    depth = b["depth"][..., 0]
    dmax = depth.max() if depth.max() > 0 else 1.0
    tiles = [
        _tonemap(render.frames[0][1]), _tonemap(b["reference"]), _tonemap(b["emission"]), _tonemap(b["albedo"]),
        _tonemap((b["normal"] * 0.5 + 0.5) * (b["segment"] > 0)),
        _tonemap(np.repeat(np.where(depth > 0, 1 - depth / dmax, 0)[..., None], 3, -1)),
        _tonemap(np.repeat(b["ao"], 3, -1)), _palette(b["segment"][..., 0]),
    ]
    return np.concatenate([np.concatenate(tiles[:4], 1), np.concatenate(tiles[4:], 1)], 0)


def write_scene(render: SceneRender, folder, name: str, extra: dict | None = None) -> Path:
    """Write ``frame_XX.exr`` (one per noisy seed), ``preview.png`` and, last, ``manifest.json``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    frames = []
    for k, (seed, color) in enumerate(render.frames):
        fname = f"frame_{k:02d}.exr"
        fields = {"color": color, **render.buffers}
        write_frame(folder / fname, fields, header={"vision.scene": name, "vision.frame": k, "vision.seed": int(seed),
                                                    "vision.spp": int(render.settings["noisy_spp"]),
                                                    "vision.spp_ref": int(render.settings["spp_ref"])})
        frames.append({"file": fname, "seed": int(seed), "spp": 1})
    Image.fromarray(preview(render)).save(folder / "preview.png")
    spec = render.spec
    cam = spec.camera
    manifest = {
        "name": name, "kind": spec.kind, "scene_seed": spec.seed, "lighting": spec.lighting,
        **render.settings,
        "frames": frames,
        "camera": {"origin": cam.origin, "target": cam.target, "up": cam.up, "fov_x_deg": cam.fov,
                   "intrinsics": cam.intrinsics(render.width, render.height),
                   "world_from_camera": cam.world_from_camera(),
                   "convention": "camera x right, y up, z backwards (OpenGL); pixel (i, j) centre at (i+0.5, j+0.5), j down"},
        "channels": {f: {"channels": list(LAYERS[f][0]), "dtype": LAYERS[f][1], "meaning": LAYERS[f][2]} for f in LAYERS},
        "classes": list(CLASSES),
        "instances": [{"id": o.instance, "class": o.cls, "class_id": CLASSES.index(o.cls), "shape": o.shape,
                       "glossy": bool(o.material.glossy), "light": o.emission is not None} for o in spec.objects],
        "seconds": {k: round(v, 3) for k, v in render.seconds.items()},
        "scene": spec.to_dict(),
        **(extra or {}),
    }
    tmp = folder / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(folder / "manifest.json")
    return folder
