"""``vision render-scenes`` and its Mitsuba passes, checked against geometry placed by hand.

The rendered test scene is a 4 x 3 x 4 m box room with a sphere, a (glossy) box, a glowing sphere and
a ceiling panel light, at 32 x 32 pixels in ``scalar_rgb``. Every expectation is computed here,
independently of the renderer: a pinhole camera and analytic ray intersections give the id,
position, depth and normal of each pixel; AO near the room's edges follows from the fact that
cosine-weighted directions project to uniform points on the unit disk (Malley); the mean of many
1-spp frames must match the reference within its Monte Carlo error.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from vision.data.scenes import (CLASSES, KINDS, Camera, Material, SceneObject, SceneSpec, make_scene,
                                object_mesh, scene_seed)

SIZE = 32
AO_RAYS = 64
AO_RADIUS = 0.4
NOISY = 48
SPP_REF = 512
LAMP = 20.0


def room_spec() -> SceneSpec:
    m = lambda *rgb, **kw: Material(albedo=list(rgb), **kw)  # noqa: E731
    walls = [  # (class, centre, u, v): front = u x v, pointing into the room
        ("floor", [0, 0, 0], [0, 0, 2], [2, 0, 0], m(0.5, 0.5, 0.5)),
        ("ceiling", [0, 3, 0], [2, 0, 0], [0, 0, 2], m(0.8, 0.8, 0.8)),
        ("wall", [-2, 1.5, 0], [0, 1.5, 0], [0, 0, 2], m(0.6, 0.3, 0.3)),
        ("wall", [2, 1.5, 0], [0, 0, 2], [0, 1.5, 0], m(0.3, 0.6, 0.3)),
        ("wall", [0, 1.5, -2], [2, 0, 0], [0, 1.5, 0], m(0.3, 0.3, 0.6)),
        ("wall", [0, 1.5, 2], [0, 1.5, 0], [2, 0, 0], m(0.6, 0.6, 0.6)),
    ]
    objects = [SceneObject(i + 1, c, "rectangle", {"center": ce, "u": u, "v": v}, mat)
               for i, (c, ce, u, v, mat) in enumerate(walls)]
    objects += [
        SceneObject(7, "sphere", "sphere", {"center": [0.6, 0.5, -0.6], "radius": 0.5}, m(0.7, 0.2, 0.1)),
        SceneObject(8, "box", "box", {"center": [-0.9, 0.4, -1.0], "half": [0.4, 0.4, 0.4], "yaw": 0.0},
                    m(0.2, 0.6, 0.3, glossy=True, roughness=0.2)),
        SceneObject(9, "light", "sphere", {"center": [-0.2, 1.8, -1.2], "radius": 0.35}, m(0, 0, 0), emission=[LAMP] * 3),
        SceneObject(10, "light", "rectangle", {"center": [0, 2.99, 0], "u": [0.6, 0, 0], "v": [0, 0, 0.6]},
                    m(0, 0, 0), emission=[6.0] * 3),
    ]
    cam = Camera(origin=[1.3, 1.3, 1.7], target=[-0.8, 0.9, -1.4], fov=70.0)
    return SceneSpec("rooms", 1234, cam, objects, ao_radius=AO_RADIUS, lighting="test")


# ---------------------------------------------------------------- independent geometry

def camera_rays(cam: Camera, w: int, h: int):
    o = np.asarray(cam.origin, float)
    f = np.asarray(cam.target, float) - o
    f /= np.linalg.norm(f)
    r = np.cross(f, cam.up)
    r /= np.linalg.norm(r)
    u = np.cross(r, f)
    t = math.tan(math.radians(cam.fov) / 2)
    jj, ii = np.mgrid[0:h, 0:w]
    x = (2 * (ii + 0.5) / w - 1) * t
    y = -(2 * (jj + 0.5) / h - 1) * t * h / w
    d = f + x[..., None] * r + y[..., None] * u
    return o, d / np.linalg.norm(d, axis=-1, keepdims=True), (r, u, f)


def intersect(spec: SceneSpec, o, d):
    """Analytic first hit per ray: (instance, t, normal facing the ray origin)."""
    n_rays = d.shape[0]
    best_t = np.full(n_rays, np.inf)
    best_id = np.zeros(n_rays, int)
    best_n = np.zeros((n_rays, 3))
    for obj in spec.objects:
        p = obj.params
        if obj.shape == "rectangle":
            c, u, v = (np.asarray(p[k], float) for k in ("center", "u", "v"))
            n = np.cross(u, v)
            n /= np.linalg.norm(n)
            with np.errstate(divide="ignore", invalid="ignore"):
                t = ((c - o) @ n) / (d @ n)
            q = o + t[:, None] * d
            a, b = (q - c) @ u / (u @ u), (q - c) @ v / (v @ v)
            ok = (t > 1e-6) & (np.abs(a) <= 1) & (np.abs(b) <= 1)
            nn = np.tile(n, (n_rays, 1))
        elif obj.shape == "sphere":
            c, r = np.asarray(p["center"], float), p["radius"]
            oc = o - c
            b = d @ oc
            disc = b * b - (oc @ oc - r * r)
            t = -b - np.sqrt(np.maximum(disc, 0))
            ok = (disc > 0) & (t > 1e-6)
            nn = (o + t[:, None] * d - c) / r
        elif obj.shape == "box":
            assert p["yaw"] == 0
            lo = np.asarray(p["center"]) - p["half"]
            hi = np.asarray(p["center"]) + p["half"]
            with np.errstate(divide="ignore", invalid="ignore"):
                t1, t2 = (lo - o) / d, (hi - o) / d
            tmin, tmax = np.minimum(t1, t2), np.maximum(t1, t2)
            t = tmin.max(axis=1)
            ok = (t <= tmax.min(axis=1)) & (t > 1e-6)
            axis = tmin.argmax(axis=1)
            nn = np.zeros((n_rays, 3))
            nn[np.arange(n_rays), axis] = -np.sign(d[np.arange(n_rays), axis])
        else:
            raise AssertionError(obj.shape)
        better = ok & (t < best_t)
        best_t[better], best_id[better], best_n[better] = t[better], obj.instance, nn[better]
    flip = np.einsum("ij,ij->i", best_n, d) > 0
    best_n[flip] *= -1
    return best_id, best_t, best_n


_DISK = {}


def disk_occlusion(dists, radius, n=601):
    """Unoccluded share of cosine-weighted rays from a point near perpendicular planes.

    ``dists``: for each occluding plane, (tangent axis 0 or 1, sign, distance). Cosine-weighted
    directions project to uniform points (x, y) on the unit disk, z = sqrt(1 - x^2 - y^2); a ray
    reaches a plane at distance d along +x within ``radius`` iff x * radius > d.
    """
    if n not in _DISK:
        g = (np.arange(n) + 0.5) / n * 2 - 1
        x, y = np.meshgrid(g, g)
        inside = x * x + y * y < 1
        _DISK[n] = (x[inside], y[inside])
    x, y = _DISK[n]
    blocked = np.zeros(x.shape, bool)
    for axis, sign, dist in dists:
        blocked |= (x, y)[axis] * sign * radius > dist
    return 1 - blocked.mean()


# ---------------------------------------------------------------- the rendered scene

@pytest.fixture(scope="module")
def tiny():
    pytest.importorskip("mitsuba")
    from vision.data.render import render_scene

    spec = room_spec()
    render = render_scene(spec, SIZE, spp_ref=SPP_REF, noisy_seeds=NOISY, ao_rays=AO_RAYS, variant="scalar_rgb")
    o, d, axes = camera_rays(spec.camera, SIZE, SIZE)
    ids, t, n = intersect(spec, o, d.reshape(-1, 3))
    truth = {"id": ids.reshape(SIZE, SIZE), "pos": (o + t[:, None] * d.reshape(-1, 3)).reshape(SIZE, SIZE, 3),
             "normal": n.reshape(SIZE, SIZE, 3), "axes": axes, "origin": o, "dirs": d}
    return spec, render, truth


def interior(mask):
    """Pixels whose 3 x 3 neighbourhood lies wholly in ``mask``."""
    m = np.pad(mask, 1, constant_values=False)
    out = np.ones_like(mask)
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            out &= m[1 + dy:1 + dy + mask.shape[0], 1 + dx:1 + dx + mask.shape[1]]
    return out


def test_segmentation_matches_analytic_ray_casting(tiny):
    spec, render, truth = tiny
    seg = render.buffers["segment"][..., 0]
    assert render.buffers["segment"].dtype == np.uint32
    agree = seg == truth["id"]
    assert agree.mean() >= 0.995, f"{(~agree).sum()} pixels disagree"
    assert {1, 2, 3, 5, 7, 8, 9} <= set(np.unique(truth["id"]).tolist()), "the camera sees the corner and every object"
    sem = render.buffers["semantic"][..., 0]
    cls_of = {o.instance: CLASSES.index(o.cls) for o in spec.objects}
    assert all(sem[k] == cls_of[int(seg[k])] for k in zip(*np.nonzero(seg)))
    assert (seg > 0).all()  # a closed room: every ray hits something


def test_position_depth_and_normals_follow_the_geometry(tiny):
    spec, render, truth = tiny
    b = render.buffers
    ok = b["segment"][..., 0] == truth["id"]
    assert np.abs(b["position"] - truth["pos"])[ok].max() < 2e-3
    # depth: positive, and the z of the position in the camera frame
    r, u, f = truth["axes"]
    z = (b["position"] - truth["origin"]) @ f
    assert (b["depth"][..., 0] > 0).all()
    np.testing.assert_allclose(b["depth"][..., 0], z, rtol=1e-5, atol=1e-5)
    # each position projects back onto its pixel centre
    rel = b["position"] - truth["origin"]
    fx = 0.5 * SIZE / math.tan(math.radians(spec.camera.fov) / 2)
    px = SIZE / 2 + fx * (rel @ r) / (rel @ f)
    py = SIZE / 2 - fx * (rel @ u) / (rel @ f)
    jj, ii = np.mgrid[0:SIZE, 0:SIZE]
    assert np.abs(px - (ii + 0.5)).max() < 1e-2 and np.abs(py - (jj + 0.5)).max() < 1e-2
    # intrinsics in the manifest say the same
    assert spec.camera.intrinsics(SIZE, SIZE)["fx"] == pytest.approx(fx)
    # normals: unit length, the analytic ones, and in camera space the same vectors rotated
    n = b["normal"]
    np.testing.assert_allclose(np.linalg.norm(n, axis=-1), 1, atol=1e-5)
    assert np.abs(n - truth["normal"])[ok].max() < 2e-3
    cam = np.stack([n @ r, n @ u, -(n @ f)], -1)
    np.testing.assert_allclose(b["camnormal"], cam, atol=1e-5)
    assert (np.einsum("hwc,hwc->hw", n, truth["dirs"]) < 0).all()  # every normal faces the viewer


def test_albedo_is_the_placed_reflectance(tiny):
    spec, render, truth = tiny
    a = render.buffers["albedo"]
    assert a.min() >= 0 and a.max() <= 1
    seg = render.buffers["segment"][..., 0]
    for obj in spec.objects:
        mask = seg == obj.instance
        if mask.any():
            want = np.zeros(3) if obj.emission is not None else np.asarray(obj.material.albedo)
            np.testing.assert_allclose(a[mask], np.broadcast_to(want, a[mask].shape), atol=1e-6, err_msg=obj.cls)
    glossy = render.buffers["glossy"][..., 0]
    np.testing.assert_array_equal(glossy, (seg == 8).astype(np.float32))


def test_ambient_occlusion_matches_the_disk_projection(tiny):
    spec, render, truth = tiny
    ao = render.buffers["ao"][..., 0]
    assert ao.min() >= 0 and ao.max() <= 1
    seg = render.buffers["segment"][..., 0]
    pos = truth["pos"]
    room = {1: (1, 1), 2: (1, -1), 3: (0, 1), 4: (0, -1), 5: (2, 1), 6: (2, -1)}  # id -> (normal axis, sign)
    bounds = [(-2, 2), (0, 3), (-2, 2)]
    # keep room pixels farther than the AO radius from the sphere, the box and both lights
    c7, c9 = np.array([0.6, 0.5, -0.6]), np.array([-0.2, 1.8, -1.2])
    far = ((np.linalg.norm(pos - c7, axis=-1) > 0.5 + AO_RADIUS + 0.05)
           & (np.linalg.norm(pos - c9, axis=-1) > 0.35 + AO_RADIUS + 0.05)
           & (np.abs(pos - [-0.9, 0.4, -1.0]).max(axis=-1) > 0.4 + AO_RADIUS + 0.05)
           & ~((pos[..., 1] > 3 - AO_RADIUS - 0.05) & (np.abs(pos[..., [0, 2]]).max(axis=-1) < 0.6 + AO_RADIUS + 0.05)))
    open_px, edge_px, errors = [], [], []
    for j, i in zip(*np.nonzero(far & np.isin(seg, list(room)) & (seg == truth["id"]))):
        axis, _ = room[int(seg[j, i])]
        tangents = [a for a in range(3) if a != axis]
        dists = []
        for k, ax in enumerate(tangents):
            lo, hi = bounds[ax]
            for sign, dist in ((-1, pos[j, i, ax] - lo), (1, hi - pos[j, i, ax])):
                if dist < AO_RADIUS:
                    dists.append((k, sign, dist))
        want = disk_occlusion(dists, AO_RADIUS)  # the frame's orientation about the normal does not matter
        sigma = math.sqrt(max(want * (1 - want), 1 / AO_RAYS) / AO_RAYS)
        errors.append((ao[j, i] - want) / sigma)
        (edge_px if dists else open_px).append((ao[j, i], want))
    errors = np.array(errors)
    assert len(open_px) > 20 and len(edge_px) > 20
    assert all(a == 1.0 for a, _ in open_px), "no occluder within the radius: every ray escapes"
    assert np.abs(errors).max() < 5, f"worst AO error {np.abs(errors).max():.1f} sigma"
    assert abs(errors.mean()) < 4 / math.sqrt(len(errors))
    # darker in corners: mean AO of the edge pixels is well below 1
    assert np.mean([a for a, _ in edge_px]) < 0.9


def test_emission_is_the_visible_lamp(tiny):
    spec, render, truth = tiny
    e = render.buffers["emission"]
    seg = render.buffers["segment"][..., 0]
    lamp = interior(seg == 9)
    assert lamp.sum() >= 4
    np.testing.assert_allclose(e[lamp], LAMP, rtol=1e-6)
    none = interior(~np.isin(seg, [9, 10]))
    assert (e[none] == 0).all()
    # a black emitter reflects nothing: every 1-spp sample there is exactly its radiance
    for _, frame in render.frames[:4]:
        np.testing.assert_allclose(frame[lamp], LAMP, rtol=1e-6)


def test_mean_of_noisy_frames_matches_reference_within_monte_carlo_error(tiny):
    spec, render, truth = tiny
    frames = np.stack([f for _, f in render.frames]).astype(np.float64)  # (N, H, W, 3)
    assert len({s for s, _ in render.frames}) == NOISY
    assert not set(render.settings["noisy_seeds"]) & set(render.settings["reference_seeds"])
    ref = render.buffers["reference"].astype(np.float64)
    mean, var = frames.mean(0), frames.var(0, ddof=1)
    # 8 x 8 blocks: the mean of 64 pixels x N frames against the same block of the reference,
    # whose per-sample variance is that of the frames (same integrator and filter)
    b = 8
    blk = lambda x: x.reshape(SIZE // b, b, SIZE // b, b, 3).sum((1, 3)) / b ** 2  # noqa: E731
    se = np.sqrt(blk(var) / b ** 2 * (1 / NOISY + 1 / SPP_REF))
    z = (blk(mean) - blk(ref)) / se
    assert np.abs(z).max() < 5, f"max |z| = {np.abs(z).max():.2f}"
    assert ref.mean() > 0.05
    # a box pixel filter: neighbouring pixels' noise is uncorrelated (a Gaussian filter splats it)
    res = frames - mean
    lit = var.sum(-1) > 0
    a, c = res[:, :, :-1][:, lit[:, :-1] & lit[:, 1:]], res[:, :, 1:][:, lit[:, :-1] & lit[:, 1:]]
    corr = ((a * c).mean() / math.sqrt((a * a).mean() * (c * c).mean()))
    assert abs(corr) < 0.1, corr


def test_written_frames_round_trip_bit_exact(tiny, tmp_path):
    from vision.data.exr import LAYERS, read_frame
    from vision.data.render import SceneRender, write_scene

    spec, render, _ = tiny
    small = SceneRender(spec, render.width, render.height, render.buffers, render.frames[:2], render.settings, render.seconds)
    folder = write_scene(small, tmp_path / "scene_00000", "scene_00000")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert [f["file"] for f in manifest["frames"]] == ["frame_00.exr", "frame_01.exr"]
    assert manifest["renderer"].startswith("mitsuba 3") and manifest["spp_ref"] == SPP_REF
    assert manifest["instances"][6] == {"id": 7, "class": "sphere", "class_id": CLASSES.index("sphere"),
                                        "shape": "sphere", "glossy": False, "light": False}
    assert (folder / "preview.png").stat().st_size > 0
    for k, (_, color) in enumerate(small.frames):
        got = read_frame(folder / f"frame_{k:02d}.exr")
        assert set(got) == set(LAYERS)
        for name, arr in {"color": color, **render.buffers}.items():
            want = arr if arr.ndim == 3 else arr[..., None]
            assert got[name].dtype == want.dtype, name
            assert np.array_equal(got[name].view(np.uint32), want.view(np.uint32)), name


# ---------------------------------------------------------------- scene descriptions (no Mitsuba)

@pytest.mark.parametrize("kind", KINDS)
def test_scene_descriptions_are_deterministic_and_sane(kind):
    a, b = make_scene(kind, 7), make_scene(kind, 7)
    assert a.to_dict() == b.to_dict()
    assert make_scene(kind, 8).to_dict() != a.to_dict()
    assert SceneSpec.from_dict(json.loads(json.dumps(a.to_dict()))).to_dict() == a.to_dict()
    for seed in range(12):
        s = make_scene(kind, seed)
        ids = [o.instance for o in s.objects]
        assert ids == list(range(1, len(ids) + 1))
        assert all(o.cls in CLASSES for o in s.objects)
        assert any(o.emission is not None for o in s.objects) or s.sky is not None
        for o in s.objects:
            assert all(0 <= c <= 1 for c in o.material.albedo)
            if o.material.texture:
                assert all(0 <= c <= 1 for c in o.material.texture["color1"])
            if o.shape in ("torus", "cone", "blob"):
                V, F, N, UV = object_mesh(o)
                assert F.min() >= 0 and F.max() < len(V)
                np.testing.assert_allclose(np.linalg.norm(N, axis=1), 1, atol=1e-6)
                # triangles wind counter-clockwise seen from outside: the signed volume is positive
                vol = np.einsum("ij,ij->i", V[F[:, 0]] - V.mean(0), np.cross(V[F[:, 1]] - V.mean(0), V[F[:, 2]] - V.mean(0)))
                assert vol.sum() > 0
        if kind in ("rooms", "lamps"):  # the camera is inside the room
            floor = next(o for o in s.objects if o.cls == "floor")
            u, v = floor.params["u"], floor.params["v"]
            hw, hd = abs(u[0]) + abs(v[0]), abs(u[2]) + abs(v[2])
            ox, oy, oz = s.camera.origin
            assert abs(ox) < hw and abs(oz) < hd and 0 < oy < 3.4
    assert scene_seed(0, 3) == scene_seed(0, 3) != scene_seed(0, 4) != scene_seed(1, 4)


# ---------------------------------------------------------------- the command line

def run_cli(argv, capsys):
    from vision.pipelines.cli import main

    rc = main(["render-scenes", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("args, needle", [
    (["--count", "0"], "--count"),
    (["--count", "2", "--size", "0"], "--size"),
    (["--count", "2", "--size", "-5"], "--size"),
    (["--count", "2", "--kinds", "rooms,caves"], "caves"),
])
def test_bad_arguments_get_one_clear_error(args, needle, tmp_path, capsys):
    rc, _, err = run_cli(["--out", str(tmp_path / "o"), *args], capsys)
    assert rc == 2
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1 and "error" in lines[0] and needle in lines[0], err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_help_has_an_example(capsys):
    from vision.pipelines.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["render-scenes", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "examples:" in text and "vision render-scenes --out" in text and "--spp-ref" in text


def test_unwritable_out_dir_gets_one_clear_error(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a folder cannot be made under a file, even by root
    rc, _, err = run_cli(["--out", str(blocker / "sub"), "--count", "1"], capsys)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--out" in lines[0] and str(blocker) in lines[0], err


def test_command_is_deterministic_resumable_and_feeds_the_dataset(tmp_path, capsys):
    pytest.importorskip("mitsuba")
    import torch

    from vision.data import RenderedScenes
    from vision.data.exr import read_exr

    args = ["--count", "3", "--size", "16", "--spp-ref", "16", "--noisy-seeds", "2", "--ao-rays", "8",
            "--variant", "scalar_rgb", "--seed", "5"]
    rc, out, _ = run_cli(["--out", str(tmp_path / "a"), *args], capsys)
    assert rc == 0 and "per scene" in out
    first = {p: p.stat().st_mtime_ns for p in (tmp_path / "a").glob("scene_*/frame_*.exr")}
    assert len(first) == 6
    rc, out, _ = run_cli(["--out", str(tmp_path / "a"), *args], capsys)  # resume: nothing left to do
    assert rc == 0 and "nothing to do" in out
    assert first == {p: p.stat().st_mtime_ns for p in (tmp_path / "a").glob("scene_*/frame_*.exr")}
    rc, _, err = run_cli(["--out", str(tmp_path / "a"), *args[:2], "--size", "24", *args[4:]], capsys)
    assert rc == 2 and "--size" in err  # other settings do not mix into the folder
    # the same seed renders the same bits, scene by scene, whatever --count is
    rc, _, _ = run_cli(["--out", str(tmp_path / "b"), "--count", "2", *args[2:]], capsys)
    for k in range(2):
        for f in range(2):
            x = read_exr(tmp_path / "a" / f"scene_{k:05d}" / f"frame_{f:02d}.exr")
            y = read_exr(tmp_path / "b" / f"scene_{k:05d}" / f"frame_{f:02d}.exr")
            assert x.keys() == y.keys() and all(np.array_equal(x[c], y[c]) for c in x)
    manifest = json.loads((tmp_path / "a" / "scene_00001" / "manifest.json").read_text())
    assert manifest["command"].startswith("vision render-scenes --out") and manifest["kind"] == KINDS[1]
    assert manifest["pixel_filter"] == "box" and manifest["variant"] == "scalar_rgb"

    fields = ["color", "albedo", "normal", "depth", "ao", "emission", "reference", "segment", "semantic"]
    splits = {s: RenderedScenes(tmp_path / "a", split=s, fields=fields, fractions=(0.34, 0.33, 0.33))
              for s in ("train", "val", "test", "all")}
    names = [set(ds.scenes) for s, ds in splits.items() if s != "all"]
    assert set().union(*names) == set(splits["all"].scenes) and sum(map(len, names)) == 3
    assert len(splits["all"]) == 6
    item = splits["all"][1]
    assert item["color"].shape == (3, 16, 16) and item["color"].dtype == torch.float32
    assert item["depth"].shape == (1, 16, 16) and item["segment"].dtype == torch.int64
    assert item["scene"] == "scene_00000" and item["frame"] == 1
    one = RenderedScenes(tmp_path / "a", split="all", fields=["color"], frames=[0])
    assert len(one) == 3
    with pytest.raises(ValueError, match="unknown field"):
        RenderedScenes(tmp_path / "a", fields=["colour"])
    with pytest.raises(ValueError, match="unknown split"):
        RenderedScenes(tmp_path / "a", split="training")


def test_variant_falls_back_to_scalar_with_one_note(monkeypatch):
    pytest.importorskip("mitsuba")
    from vision.data import mitsuba_variant

    monkeypatch.setattr(mitsuba_variant, "_variant_cache", {})
    monkeypatch.delenv("DRJIT_LIBLLVM_PATH", raising=False)
    monkeypatch.setattr(mitsuba_variant, "find_libllvm", lambda min_version=16: None)
    notes = []
    assert mitsuba_variant.choose_variant("auto", note=notes.append) == "scalar_rgb"
    assert len(notes) == 1 and "\n" not in notes[0] and "scalar_rgb" in notes[0]


# ---------------------------------------------------------------- the bundled scenes (no Mitsuba)

def test_bundled_scenes_load_and_hold_their_invariants():
    from vision.bundled import asset_path
    from vision.data import RenderedScenes

    root = asset_path("scenes")
    ds = RenderedScenes(root, split="all", fields=["color", "albedo", "normal", "depth", "ao", "reference", "segment"])
    assert len(ds.scenes) >= 3
    index = json.loads((root / "dataset.json").read_text())
    assert index["command"].startswith("vision render-scenes --out assets/scenes")
    kinds = set()
    for k in range(len(ds)):
        item = ds[k]
        m = ds.manifest(k)
        kinds.add(m["kind"])
        assert m["command"] == index["command"] and m["spp_ref"] >= 1024
        hit = item["segment"][0] > 0
        n = item["normal"].norm(dim=0)
        assert (n[hit] - 1).abs().max() < 1e-4
        assert item["albedo"].min() >= 0 and item["albedo"].max() <= 1
        assert item["ao"].min() >= 0 and item["ao"].max() <= 1
        assert (item["depth"][0][hit] > 0).all() and (item["depth"][0][~hit] == 0).all()
        assert item["reference"].isfinite().all() and item["reference"].min() >= 0
    assert kinds == set(KINDS)
    total = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    assert total < 8 * 2 ** 20, f"bundled scenes take {total / 2 ** 20:.1f} MB"
