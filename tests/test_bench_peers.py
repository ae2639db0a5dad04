"""The benchmark's cumsum (Deep-Guided-Filter-style) peer against an independent float64 NumPy guided filter
built from direct window sums; and `vision bench guided-filter` end to end."""
import json

import numpy as np
import pytest
import torch

from vision.pipelines.bench.guided_filter import parse_size
from vision.pipelines.bench.peers import (cumsum_box_mean, cumsum_box_sum, cumsum_guided_filter,
                                          cumsum_guided_filter_color, window_count)


def direct_box_mean(x: np.ndarray, r: int) -> np.ndarray:
    """Mean over the in-image pixels of every (2r+1)^2 window, by adding the (2r+1)^2 shifted images."""
    h, w = x.shape[-2:]
    total = np.zeros(x.shape, np.float64)
    count = np.zeros((h, w), np.float64)
    pad = [(0, 0)] * (x.ndim - 2) + [(r, r), (r, r)]
    xp, ones = np.pad(x.astype(np.float64), pad), np.pad(np.ones((h, w)), r)
    for dy in range(2 * r + 1):
        for dx in range(2 * r + 1):
            total += xp[..., dy:dy + h, dx:dx + w]
            count += ones[dy:dy + h, dx:dx + w]
    return total / count


def direct_gray(I, p, r, eps):
    mI, mp = direct_box_mean(I, r), direct_box_mean(p, r)
    a = (direct_box_mean(I * p, r) - mI * mp) / (direct_box_mean(I * I, r) - mI * mI + eps)
    b = mp - a * mI
    return direct_box_mean(a, r) * I + direct_box_mean(b, r)


def direct_colour(I, p, r, eps):
    """He's colour guided filter, I (3, H, W), p (H, W): the 3x3 system solved with np.linalg.solve."""
    h, w = p.shape
    mI = np.stack([direct_box_mean(c, r) for c in I])
    mp = direct_box_mean(p, r)
    sigma, cov = np.empty((h, w, 3, 3)), np.empty((h, w, 3))
    for i in range(3):
        cov[..., i] = direct_box_mean(I[i] * p, r) - mI[i] * mp
        for j in range(3):
            sigma[..., i, j] = direct_box_mean(I[i] * I[j], r) - mI[i] * mI[j] + (eps if i == j else 0.0)
    a = np.linalg.solve(sigma, cov[..., None])[..., 0]
    b = mp - np.einsum("hwc,chw->hw", a, mI)
    return sum(direct_box_mean(a[..., c], r) * I[c] for c in range(3)) + direct_box_mean(b, r)


SHAPES_RADII = [((13, 17), 1), ((13, 17), 3), ((13, 17), 8), ((20, 9), 2), ((5, 40), 4)]  # r=8: window > image


@pytest.mark.parametrize("shape,r", SHAPES_RADII)
def test_box_sum_and_count(rng, shape, r):
    x = rng.random((2, 3, *shape))
    got = cumsum_box_mean(torch.from_numpy(x), r).numpy()
    np.testing.assert_allclose(got, direct_box_mean(x, r), rtol=0, atol=1e-12)
    n = window_count(torch.zeros(1, 1, *shape, dtype=torch.float64), r)[0, 0].numpy()
    h, w = shape
    assert n[0, 0] == min(r + 1, h) * min(r + 1, w)  # corner window: (r+1)^2 pixels when it fits
    if h > 2 * r and w > 2 * r:
        assert n[r, r] == (2 * r + 1) ** 2
    s = cumsum_box_sum(torch.ones(1, 1, *shape, dtype=torch.float64), r)[0, 0].numpy()
    np.testing.assert_array_equal(s, n)


@pytest.mark.parametrize("shape,r", SHAPES_RADII)
@pytest.mark.parametrize("eps", [1e-4, 1e-2, 1.0])
def test_cumsum_gray_matches_direct_float64(rng, shape, r, eps):
    I, p = rng.random(shape), rng.random((3, *shape))
    got = cumsum_guided_filter(torch.from_numpy(I)[None, None], torch.from_numpy(p)[None], r, eps)[0].numpy()
    want = np.stack([direct_gray(I, pc, r, eps) for pc in p])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    # a multi-channel guide is channel-wise gray filtering, as in Deep Guided Filter
    G = rng.random((3, *shape))
    got = cumsum_guided_filter(torch.from_numpy(G)[None], torch.from_numpy(p)[None], r, eps)[0].numpy()
    want = np.stack([direct_gray(G[c], p[c], r, eps) for c in range(3)])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


@pytest.mark.parametrize("shape,r", SHAPES_RADII)
@pytest.mark.parametrize("eps", [1e-4, 1e-2])
def test_cumsum_colour_matches_direct_float64(rng, shape, r, eps):
    I, p = rng.random((3, *shape)), rng.random((2, *shape))
    got = cumsum_guided_filter_color(torch.from_numpy(I)[None], torch.from_numpy(p)[None], r, eps)[0].numpy()
    want = np.stack([direct_colour(I, pc, r, eps) for pc in p])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)


def test_cumsum_float32_error_is_small_on_noise(rng):
    I, p = rng.random((3, 64, 80)), rng.random((3, 64, 80))
    g32 = cumsum_guided_filter_color(torch.from_numpy(I).float()[None], torch.from_numpy(p).float()[None], 4, 1e-2)
    want = np.stack([direct_colour(I, pc, 4, 1e-2) for pc in p])
    assert np.abs(g32[0].double().numpy() - want).max() < 1e-4


@pytest.mark.slow
def test_cumsum_peers_gradients_are_autograd_correct(rng):
    I = torch.from_numpy(rng.random((1, 3, 6, 7))).requires_grad_(True)
    p = torch.from_numpy(rng.random((1, 1, 6, 7))).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: cumsum_guided_filter_color(a, b, 1, 0.1), (I, p))
    assert torch.autograd.gradcheck(lambda a, b: cumsum_guided_filter(a[:, :1], b, 2, 0.1), (I, p))


def test_peers_reject_bad_channels():
    with pytest.raises(ValueError):
        cumsum_guided_filter(torch.rand(1, 2, 8, 8), torch.rand(1, 3, 8, 8), 1, 0.1)
    with pytest.raises(ValueError):
        cumsum_guided_filter_color(torch.rand(1, 1, 8, 8), torch.rand(1, 3, 8, 8), 1, 0.1)


def test_parse_size():
    assert parse_size("1024") == (1024, 1024)
    assert parse_size("3840x2160") == (2160, 3840)  # width x height -> (H, W)
    assert parse_size("4K") == (2160, 3840)
    for bad in ("abc", "0", "12x", "-3"):
        with pytest.raises(ValueError):
            parse_size(bad)


@pytest.mark.slow
def test_bench_guided_filter_runs_end_to_end(tmp_path, capsys):
    from vision.kernels import guided_filter  # noqa: F401  (fails loudly until the operators exist)
    from vision.pipelines.cli import main

    out = tmp_path / "rows.json"
    assert main(["bench", "guided-filter", "--sizes", "64", "--repeat", "1", "--device", "cpu",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    for kind in ("gray", "colour"):
        for pas in ("forward", "forward+backward"):
            assert f"64x64  {kind} guide" in text and pas in text
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert {(r["guide"], r["pass"]) for r in rows} == {(k, p) for k in ("gray", "colour")
                                                        for p in ("forward", "forward+backward")}
    for r in rows:
        if r["impl"] == "ours":
            assert r["seconds"] and r["seconds"] > 0, r  # every border mode of ours ran, both passes
    # The correctness column: each peer against ours in its border mode. OpenCV and kornia only when present.
    checked = set()
    for r in rows:
        d = r.get("max_abs_diff")
        if isinstance(d, float):
            tol = 1e-4 if r["pass"] == "forward" else 1e-3  # gradients sum up to (2r+1)^2 terms of N(0, 1)
            assert d < tol, r
            checked.add((r["impl"], r["guide"], r["pass"]))
    assert ("cumsum DGF-style", "gray", "forward") in checked
    assert ("cumsum 3x3 colour", "colour", "forward+backward") in checked
    assert "acceptance not evaluated" in text  # 64x64 is not the acceptance size


def test_time_interleaved_round_robin_and_errors():
    from vision.pipelines.bench.timing import time_interleaved

    order = []

    def boom():
        order.append("c")
        raise RuntimeError("peer broke")

    calls = {"a": lambda: order.append("a"), "b": lambda: order.append("b"), "c": boom}
    res = time_interleaved(calls, repeat=3)
    assert isinstance(res["c"], RuntimeError)
    assert res["a"] >= 0 and res["b"] >= 0
    # one untimed first call each, then rounds of one sample of each entry, in a new order every round
    assert order[:3] == ["a", "b", "c"] and len(order) == 9
    assert all(sorted(order[i:i + 2]) == ["a", "b"] for i in (3, 5, 7))
    order.clear()
    time_interleaved({k: (lambda k=k: order.append(k)) for k in "wxyz"}, repeat=40)
    rounds = [order[i:i + 4] for i in range(4, len(order), 4)]
    assert len(rounds) == 40 and all(sorted(r) == list("wxyz") for r in rounds)
    after = {(a, b) for prev, cur in zip(rounds, rounds[1:]) for a, b in zip(prev + cur, (prev + cur)[1:])}
    assert {b for a, b in after if a == "z"} >= set("wxy")  # every other entry runs right after z at some point
    order.clear()
    res = time_interleaved({"a": lambda: order.append("a")}, repeat=2, sample_time=1.0)
    assert len(order) == 2 + 2 * 1000  # first + calibration call, then 2 samples of (capped) 1000 calls


def test_bench_guided_filter_huge_radius(tmp_path, capsys):
    """--huge-radius: box and guided at r = 10^6 against r = 128, one row per op and border, with the ratio."""
    from vision.pipelines.cli import main

    out = tmp_path / "huge.json"
    assert main(["bench", "guided-filter", "--huge-radius", "--sizes", "32", "--repeat", "1", "--device", "cpu",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "time at r = 10^6 / time at r = 128, 32x32" in text
    rows = json.loads(out.read_text())["rows"]
    assert {(r["op"], r["border"]) for r in rows} == {(op, b) for op in ("box", "guided")
                                                      for b in ("valid", "reflect", "replicate", "symmetric")}
    assert all(r["seconds_128"] > 0 and r["seconds_1e6"] > 0 and r["ratio"] for r in rows), rows
