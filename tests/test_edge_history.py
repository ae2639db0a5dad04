"""Temporal antialiasing of edge pixels (vision.denoise.edge_history) against a float64 loop written from its
definition, on the PyTorch path (float64, float32) and in the numba loop, and its effect on a jittered edge."""
import numpy as np
import pytest
import torch

from vision.denoise.edge_history import edge_history
from vision.denoise.reproject import Tolerances


def _same(k0, y0, x0, k1, y1, x1, tol):
    if abs(k0["index"][0, y0, x0] - k1["index"][0, y1, x1]) >= 0.5:
        return False
    d0, d1 = k0["depth"][0, y0, x0], k1["depth"][0, y1, x1]
    if (d0 > 0) != (d1 > 0) or (d0 > 0 and abs(d0 - d1) > tol.depth * max(d0, d1)):
        return False
    n0, n1 = k0["normal"][:, y0, x0], k1["normal"][:, y1, x1]
    return bool(n0 @ n1 >= tol.normal * np.linalg.norm(n0) * np.linalg.norm(n1))


def _naive(out, hist, offset, prev, cur, tol, cap, gamma):
    """Float64 loops: edge pixel = a 3 x 3 neighbour off its surface; bilinear taps that show any surface of the
    3 x 3 footprint; history clipped to the neighbourhood's mean +- gamma sd; blended with 1 / min(n + 1, cap)."""
    _, h, w = out.shape
    res, new = out.copy(), np.concatenate([out, np.ones((1, h, w))])
    clamp = lambda v, n: min(max(v, 0), n - 1)  # noqa: E731
    for y in range(h):
        for x in range(w):
            foot = [(clamp(y + dy, h), clamp(x + dx, w)) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]
            if all(_same(cur, yy, xx, cur, y, x, tol) for yy, xx in foot):
                continue
            px, py = x + offset[0, y, x], y + offset[1, y, x]
            x0, y0 = int(np.floor(px)), int(np.floor(py))
            fx, fy = px - x0, py - y0
            tot, acc = 0.0, np.zeros(4)
            for dx, dy, wt in ((0, 0, (1 - fx) * (1 - fy)), (1, 0, fx * (1 - fy)), (0, 1, (1 - fx) * fy),
                               (1, 1, fx * fy)):
                xi, yi = x0 + dx, y0 + dy
                if not (0 <= xi < w and 0 <= yi < h):
                    continue
                if any(_same(prev, yi, xi, cur, yy, xx, tol) for yy, xx in foot):
                    tot += wt
                    acc += wt * hist[:, yi, xi]
            if tot <= 1e-4:
                continue
            nb = out[:, max(y - 1, 0):y + 2, max(x - 1, 0):x + 2].reshape(3, -1)
            mean, sd = nb.mean(1), np.sqrt(np.maximum((nb ** 2).mean(1) - nb.mean(1) ** 2, 0))
            old = np.clip(acc[:3] / tot, mean - gamma * sd, mean + gamma * sd)
            n = min(acc[3] / tot + 1, cap)
            res[:, y, x] = old + (out[:, y, x] - old) / n
            new[:3, y, x], new[3, y, x] = res[:, y, x], n
    return res, new


@pytest.mark.parametrize("dtype,numba", [(torch.float64, False), (torch.float32, False), (torch.float32, True)])
def test_edge_history_equals_the_float64_definition(dtype, numba):
    from vision.kernels.runtime import use_numba

    g = np.random.default_rng(5)
    h, w = 14, 17

    def keys():
        index = np.zeros((1, h, w))
        index[:, 4:10, 5:12] = 1.0 + (g.random((1, 6, 7)) < 0.15)
        depth = np.where(index > 0, 1.5, 4.0) + 0.01 * g.random((1, h, w))
        depth[:, :2] = 0.0  # sky
        normal = np.zeros((3, h, w))
        normal[2] = 1.0
        normal[0, 4:10, 5:12] = g.uniform(-1, 1, (6, 7))
        return {"depth": depth, "normal": normal, "index": index}

    prev, cur = keys(), keys()
    out = g.random((3, h, w))
    hist = np.concatenate([g.random((3, h, w)), g.integers(1, 5, (1, h, w)).astype(float)])
    offset = g.uniform(-1.5, 1.5, (2, h, w))
    tol = Tolerances()
    want, want_hist = _naive(out, hist, offset, prev, cur, tol, 4, 1.0)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(dtype)[None]  # noqa: E731
    with use_numba(numba):
        got, got_hist = edge_history(t(out), t(hist), t(offset), {k: t(v) for k, v in prev.items()},
                                     {k: t(v) for k, v in cur.items()}, tol, 4, 1.0)
    atol = 1e-12 if dtype == torch.float64 else 3e-6
    np.testing.assert_allclose(got[0].double().numpy(), want, atol=atol)
    np.testing.assert_allclose(got_hist[0].double().numpy(), want_hist, atol=atol)
    changed = np.abs(want - out).max(0) > 1e-9
    assert 0.05 < changed.mean() < 0.6  # edge pixels with history were blended, the rest kept as they are


@pytest.mark.parametrize("numba", [False, True])
def test_a_jittered_edge_converges_to_the_mean_of_its_samples(numba):
    """A still camera, a column of pixels on the edge of two surfaces: each frame's sample there lands on one
    or the other (its index, depth and result with it). The result is the running mean of the results, an
    exponential one once ``cap`` frames are in, the old mean clipped to the neighbourhood's mean +- sd; pixels off
    the edge keep their own result."""
    from vision.kernels.runtime import use_numba

    h, w = 6, 12
    normal = torch.zeros(1, 3, h, w)
    normal[:, 2] = 1
    flips = [1, 0, 0, 1, 1, 1, 0, 1]
    hist, prev, got = None, None, []
    with use_numba(numba):
        for k in flips:
            index = torch.zeros(1, 1, h, w)
            index[..., 7:] = 1
            index[..., 6] = k  # the edge column's sample: surface 1 (bright) or 0 (dark)
            depth = 2 + index
            out = index.expand(1, 3, h, w).clone() * 0.8 + 0.1
            keys = {"depth": depth, "normal": normal, "index": index}
            res, hist = edge_history(out, hist, torch.zeros(1, 2, h, w), prev, keys, Tolerances(), 4, 1.0)
            prev = keys
            got.append(res[0, 0, 3, 6].item())
            assert torch.equal(res[..., :5], out[..., :5]) and torch.equal(res[..., 8:], out[..., 8:])
    want, mean = [], None
    for n, k in enumerate(flips, 1):
        v = 0.8 * k + 0.1
        block = np.array([0.1, v, 0.9] * 3)  # the 3 x 3 neighbourhood: dark, the edge sample, bright
        lo, hi = block.mean() - block.std(), block.mean() + block.std()
        mean = v if mean is None else np.clip(mean, lo, hi) + (v - np.clip(mean, lo, hi)) / min(n, 4)
        want.append(mean)
    np.testing.assert_allclose(got, want, atol=1e-6)
