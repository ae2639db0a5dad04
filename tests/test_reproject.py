"""Motion vectors and reprojection (vision.denoise.reproject) against float64 references written from definitions.

The Cycles convention is checked on a real Blender 3.4 sequence (tests/data/blender/seq: 3 frames of
benchmarks/denoise/blender_seq.py's ``orbit`` at 40 x 30, camera orbiting 25 degrees per frame and a ball
rolling 1.5 m per frame, with Position, Vector and IndexOB passes and every frame's camera and object
matrices): each pixel's surface point (Position pass) is projected through the previous frame's camera (and,
for the ball, moved back by its own matrices) in float64, and that must be where ``previous_offset`` says.
"""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from vision.data.exr import read_exr_parts
from vision.denoise.reproject import Tolerances, previous_offset, reproject

SEQ = Path(__file__).parent / "data" / "blender" / "seq"


def _frame(t):
    ch = read_exr_parts(SEQ / f"noisy_{t:04d}.exr")
    get = lambda p, cs: np.stack([ch[f"ViewLayer.{p}.{c}"] for c in cs], -1).astype(np.float64)  # noqa: E731
    return {"position": get("Position", "XYZ"), "vector": get("Vector", "XYZW"), "depth": get("Depth", "Z")[..., 0],
            "index": ch["ViewLayer.IndexOB.X"].astype(int)}


def _project(points, cam, size):
    """Continuous pixel coordinates (column, row; rows down, pixel centres at +0.5) of world points, float64:
    Blender's perspective camera, sensor fitted to the width."""
    w, h = size
    m = np.linalg.inv(np.array(cam["camera"], dtype=np.float64))
    pc = points @ m[:3, :3].T + m[:3, 3]
    f = cam["lens"] / cam["sensor_width"] * w
    z = -pc[..., 2]
    return np.stack([w / 2 + f * pc[..., 0] / z, h / 2 - f * pc[..., 1] / z], -1)


@pytest.mark.parametrize("t", [2, 3])
def test_cycles_vector_points_to_the_previous_position_of_every_surface_point(t):
    meta = json.loads((SEQ / "cameras.json").read_text())
    frames = {f["frame"]: f for f in meta["frames"]}
    size = tuple(meta["size"])
    cur, prev_cam = frames[t], frames[t - 1]
    d = _frame(t)
    p = d["position"]
    surface = d["depth"] < 1e9
    # each object's point one frame earlier: M(t-1) M(t)^-1 p (static objects: p itself)
    prev_points = p.copy()
    by_index = {o["pass_index"]: name for name, o in cur["objects"].items()}
    moving = 0
    for idx in np.unique(d["index"][surface]):
        name = by_index[int(idx)]
        m0 = np.array(prev_cam["objects"][name]["matrix"])
        m1 = np.array(cur["objects"][name]["matrix"])
        if np.allclose(m0, m1):
            continue
        sel = surface & (d["index"] == idx)
        moving += int(sel.sum())
        back = m0 @ np.linalg.inv(m1)
        prev_points[sel] = p[sel] @ back[:3, :3].T + back[:3, 3]
    assert moving > 10  # the rolling ball is in view
    expected = _project(prev_points, prev_cam, size) - _project(p, cur, size)
    vec = torch.from_numpy(d["vector"]).permute(2, 0, 1)[None].float()
    got = previous_offset(vec)[0].permute(1, 2, 0).double().numpy()
    err = np.abs(got - expected)[surface]
    assert np.abs(expected[surface]).max() > 3  # real motion, several pixels
    assert err.max() < 2e-3, err.max()
    # the other sign or the next-frame half would be pixels off
    assert np.abs(-got - expected)[surface].max() > 1


def test_previous_offset_refuses_bad_input():
    with pytest.raises(ValueError, match="convention"):
        previous_offset(torch.zeros(1, 4, 2, 2), "blender")
    with pytest.raises(ValueError, match=r"\(B, 4, H, W\)"):
        previous_offset(torch.zeros(1, 2, 2, 2))
    assert previous_offset(torch.ones(1, 2, 3, 3), "offset").shape == (1, 2, 3, 3)


def _naive(history, offset, prev, cur, tol):
    """Float64 loops from reproject's definition: four bilinear taps, each kept when inside the frame and on the
    same surface (index equal, relative depth, normal cosine), normalised by the kept weight."""
    c, h, w = history.shape
    vals = np.zeros((c, h, w))
    total = np.zeros((h, w))
    for i in range(h):
        for j in range(w):
            x, y = j + offset[0, i, j], i + offset[1, i, j]
            x0, y0 = int(np.floor(x)), int(np.floor(y))
            fx, fy = x - x0, y - y0
            for dx, dy, wt in ((0, 0, (1 - fx) * (1 - fy)), (1, 0, fx * (1 - fy)), (0, 1, (1 - fx) * fy),
                               (1, 1, fx * fy)):
                xi, yi = x0 + dx, y0 + dy
                if not (0 <= xi < w and 0 <= yi < h):
                    continue
                if prev["index"][0, yi, xi] != cur["index"][0, i, j]:
                    continue
                d0, d1 = prev["depth"][0, yi, xi], cur["depth"][0, i, j]
                if (d0 > 0) != (d1 > 0) or (d0 > 0 and abs(d0 - d1) > tol.depth * max(d0, d1)):
                    continue
                n0, n1 = prev["normal"][:, yi, xi], cur["normal"][:, i, j]
                if n0 @ n1 < tol.normal * np.linalg.norm(n0) * np.linalg.norm(n1):
                    continue
                vals[:, i, j] += wt * history[:, yi, xi]
                total[i, j] += wt
    has = total > 1e-4
    vals[:, has] /= total[has]
    vals[:, ~has] = 0
    return vals, np.where(has, total, 0)


@pytest.mark.parametrize("dtype,numba", [(torch.float64, False), (torch.float32, False), (torch.float32, True)])
def test_reproject_equals_the_float64_definition(dtype, numba):
    """float64 on the PyTorch path, float32 on it and in the numba loop (the CPU inference path)."""
    from vision.kernels.runtime import use_numba

    g = np.random.default_rng(3)
    h, w = 12, 15
    def buffers():
        depth = np.where(g.random((1, h, w)) < 0.15, 0.0, 2 + g.random((1, h, w)) * 0.3)
        depth[:, :, :4] = 5.0  # a far region: a depth edge at column 4
        normal = np.tile(np.array([0, 0, 1.0])[:, None, None], (1, h, w)) + 0.3 * g.standard_normal((3, h, w)) * \
            (g.random((1, h, w)) < 0.2)
        index = (g.random((1, h, w)) < 0.1).astype(float)
        return {"depth": depth, "normal": normal, "index": index}
    prev, cur = buffers(), buffers()
    history = g.random((5, h, w))
    offset = g.uniform(-3, 3, (2, h, w))
    tol = Tolerances()
    want, want_w = _naive(history, offset, prev, cur, tol)
    t = lambda a: torch.from_numpy(a).to(dtype)[None]  # noqa: E731
    with use_numba(numba):
        got, got_w = reproject(t(history), t(offset), {k: t(v) for k, v in prev.items()},
                               {k: t(v) for k, v in cur.items()}, tol)
    assert got.dtype == dtype
    atol = 1e-12 if dtype == torch.float64 else 2e-6
    np.testing.assert_allclose(got[0].double().numpy(), want, atol=atol)
    np.testing.assert_allclose(got_w[0, 0].double().numpy(), want_w, atol=atol)
    assert 0.2 < (want_w == 0).mean() < 0.9  # the test exercises rejections and acceptances


def test_disocclusion_behind_a_moving_square_has_no_history():
    """A square at depth 1 moves 3 pixels right over a wall at depth 4 (camera still): the wall strip it uncovers
    has no history, the wall elsewhere and the square (followed by its motion) keep all of it."""
    h, w = 16, 20
    def frame(x0):
        depth = np.full((1, h, w), 4.0)
        depth[:, 5:11, x0:x0 + 6] = 1.0
        return depth
    d0, d1 = frame(4), frame(7)
    offset = np.zeros((2, h, w))
    offset[0][d1[0] == 1.0] = -3.0  # square pixels came from 3 columns to the left
    t = lambda a: torch.from_numpy(a).float()[None]  # noqa: E731
    _, weight = reproject(torch.ones(1, 1, h, w), t(offset), {"depth": t(d0)}, {"depth": t(d1)})
    weight = weight[0, 0].numpy()
    assert (weight[5:11, 4:7] == 0).all()          # uncovered wall
    assert (weight[5:11, 7:13] == 1).all()         # the square
    assert (weight[:5] == 1).all() and (weight[11:] == 1).all() and (weight[:, 13:] == 1).all()
