"""vision bench denoise-sequences' flat-pixel PSNR (flat_mask) and ColorVideoVDP JOD columns, against numbers
written here by hand: edge masks listed pixel by pixel, PSNRs in numpy."""
import json

import numpy as np
import pytest

from vision.pipelines.bench import denoise_sequences as ds
from vision.pipelines.bench.denoise_sequences import flat_mask

from sequence_folder import sequence_folder


def _within(seeds, h, w, r=2):
    """Brute force: True where some seed pixel lies within Chebyshev distance r."""
    out = np.zeros((h, w), bool)
    for y in range(h):
        for x in range(w):
            out[y, x] = any(abs(y - sy) <= r and abs(x - sx) <= r for sy, sx in seeds)
    return out


def _flat_frame(h=30, w=48):
    return {"color": np.zeros((h, w, 3), np.float32),
            "normal": np.tile(np.float32([0, 0, 1]), (h, w, 1)),
            "depth": np.full((h, w, 1), 2.0, np.float32),
            "albedo": np.full((h, w, 3), 0.5, np.float32),
            "index": np.ones((h, w, 1), np.float32)}


def test_flat_mask_is_false_exactly_within_two_pixels_of_each_guide_edge():
    h, w = 30, 48
    d = _flat_frame(h, w)
    d["depth"][:, 8:] = 3.0  # a depth step between columns 7 and 8 (log 1.5 = 0.41)
    d["depth"][:, 40:] = 3.0 * 1.02  # log 0.0198: under 0.05, no edge
    d["normal"][:, 20:] = [0.2, 0.0, 0.98]  # a crease between columns 19 and 20 (0.2 > 0.1)
    d["normal"][:, 30:] = [0.25, 0.0, 0.97]  # then 0.05: no edge
    d["albedo"][24:] = 0.7  # an albedo edge between rows 23 and 24 (0.2)
    d["albedo"][:3] = 0.45  # 0.05: no edge
    d["index"][8, 34] = 5  # one pixel of another object in the middle of a flat field
    seeds = ([(y, x) for y in range(h) for x in (7, 8, 19, 20)] + [(y, x) for y in (23, 24) for x in range(w)]
             + [(8, 34), (7, 34), (9, 34), (8, 33), (8, 35)])
    want = ~_within(seeds, h, w)
    got = flat_mask(d)
    assert got.dtype == bool and got.shape == (h, w)
    np.testing.assert_array_equal(got, want)
    assert want[:, 5:11].sum() == 0 and want[:, 4].sum() > 0 and want[:, 11].sum() > 0  # the 6 columns of a step
    assert not want[5:12, 32:37].any() and want[5, 31] and want[13, 34]  # the index pixel's 7 x 7 minus corners

    # each guide alone gives its own edges; absent guides are skipped
    only_index = {"color": d["color"], "index": d["index"]}
    np.testing.assert_array_equal(flat_mask(only_index), ~_within(seeds[-5:], h, w))


def test_flat_mask_no_surface_and_no_change():
    h, w = 12, 20
    assert flat_mask(_flat_frame(h, w)).all()  # nothing changes anywhere
    d = _flat_frame(h, w)
    d["depth"][:, :7] = 0.0  # no surface (Cycles sky after read_render_file) ...
    d["depth"][:, 7:14] = 1e10  # ... and no surface written as far away ...
    d["depth"][:, 14:] = np.inf  # ... or as infinity: no surface throughout, no edge
    assert flat_mask(d).all()
    d = _flat_frame(h, w)
    d["depth"][:, :10] = 0.99e9  # a surface next to no surface, though the log differs by only 0.02
    d["depth"][:, 10:] = 1.01e9
    np.testing.assert_array_equal(flat_mask(d), ~_within([(y, x) for y in range(h) for x in (9, 10)], h, w))
    d = _flat_frame(h, w)
    d["depth"][:, 10:] = 0.0  # surface (2.0) next to the sky
    np.testing.assert_array_equal(flat_mask(d), ~_within([(y, x) for y in range(h) for x in (9, 10)], h, w))


def _write_frame(path, color, depth):
    from vision.data import write_exr

    h, w = depth.shape
    ch = {f"ViewLayer.Combined.{c}": np.ascontiguousarray(color[..., i], np.float32) for i, c in enumerate("RGB")}
    ch["ViewLayer.Combined.A"] = np.ones((h, w), np.float32)
    ch["ViewLayer.Denoising Depth.Z"] = depth.astype(np.float32)
    for i, c in enumerate("XYZ"):
        ch[f"ViewLayer.Denoising Normal.{c}"] = np.full((h, w), (0.0, 0.0, 1.0)[i], np.float32)
    for c in "RGB":
        ch[f"ViewLayer.Denoising Albedo.{c}"] = np.full((h, w), 0.5, np.float32)
    ch["ViewLayer.IndexOB.X"] = np.ones((h, w), np.float32)
    write_exr(path, ch)


def test_flat_psnr_equals_numpy_on_the_known_mask(tmp_path):
    """Three 12 x 16 frames with a depth step between columns 7 and 8, so columns 5-10 are edge and the other
    10 columns flat; the output is off by 0.5 on the edge band (ignored) and by 0.1 t on even rows of columns 0-4;
    scored from frame 2."""
    from vision.data import write_exr

    h, w = 12, 16
    depth = np.full((h, w), 2.0)
    depth[:, 8:] = 4.0
    entries, refs = [], {}
    rng = np.random.default_rng(3)
    for t in (1, 2, 3):
        refs[t] = (0.1 + 0.3 * rng.random((h, w, 3))).astype(np.float32)
        _write_frame(tmp_path / f"n{t}.exr", refs[t] + 0.3, depth)
        write_exr(tmp_path / f"r{t}.exr", {c: np.ascontiguousarray(refs[t][..., i]) for i, c in enumerate("RGB")})
        entries.append({"sequence": "s", "frame": t, "noisy": f"n{t}.exr", "reference": f"r{t}.exr"})
    (tmp_path / "manifest.json").write_text(json.dumps({"frames": entries}))

    def spoil(d, state):
        state["t"] = state.get("t", 0) + 1
        out = d["reference"].copy()
        out[:, 5:11] += 0.5
        out[0::2, 0:5] += 0.1 * state["t"]
        return out

    frames = ds.read_sequences(tmp_path)["s"]
    res = ds.score_sequence(frames, {"exact": lambda d, s: d["reference"], "spoil": spoil}, first=2)

    def tm(x):
        return np.clip(x.astype(np.float64), 0, 1) ** (1 / 2.2)

    flat = np.ones((h, w), bool)
    flat[:, 5:11] = False
    want = []
    for t in (2, 3):
        out = refs[t].copy()
        out[0::2, 0:5] += np.float32(0.1 * t)
        want.append(10 * np.log10(1 / np.mean(((tm(out) - tm(refs[t])) ** 2)[flat])))
    assert res["spoil"]["flat"] == pytest.approx(np.mean(want), abs=1e-9)
    assert res["spoil"]["flat_share"] == pytest.approx(10 / 16)
    assert res["exact"]["flat"] == float("inf")
    assert res["spoil"]["psnr"] < res["spoil"]["flat"]  # the band that is off by 0.5 counts in PSNR only
    assert res["spoil"]["jod"] is None  # not asked for


def _video(rng, n=4, h=48, w=64):
    base = 0.2 + 0.5 * rng.random((1, h, w, 3))
    return [(base[0] + 0.05 * np.sin(0.3 * t + np.arange(w) / 7.0)[None, :, None]).astype(np.float32) ** 2.2
            for t in range(n)]


def test_jod_identical_is_ten_and_more_noise_scores_lower():
    pytest.importorskip("pycvvdp")
    rng = np.random.default_rng(0)
    ref = _video(rng)
    assert ds.jod(ref, ref) == pytest.approx(10.0, abs=0.01)
    noise = [rng.standard_normal(r.shape).astype(np.float32) for r in ref]
    little = ds.jod([r + 0.01 * n for r, n in zip(ref, noise)], ref)
    more = ds.jod([r + 0.05 * n for r, n in zip(ref, noise)], ref)
    assert more < little < 10.0


def _bench_folder(tmp_path):
    return sequence_folder(tmp_path)


@pytest.mark.parametrize("cvvdp", [True, False], ids=["cvvdp", "no-cvvdp"])
def test_bench_prints_and_writes_flat_and_jod(tmp_path, capsys, monkeypatch, cvvdp):
    from vision.pipelines.cli import main

    if cvvdp:
        pytest.importorskip("pycvvdp")
    else:
        monkeypatch.setitem(__import__("sys").modules, "pycvvdp", None)  # import pycvvdp: ImportError
        monkeypatch.setattr(ds, "_jod_metric", None)
    folder = _bench_folder(tmp_path)
    assert main(["bench", "denoise-sequences", str(folder), "--methods", "flr", "--from", "1",
                 "--json", str(tmp_path / "rows.json")]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("sequence"))
    assert header.split() == ["sequence", "method", "PSNR", "stability", "disoccluded", "flat", "JOD", "s/frame"]
    assert ("(cvvdp not installed: no JOD column; pip install cvvdp)" in out) != cvvdp
    r = json.loads((tmp_path / "rows.json").read_text())["orbit"]["flr"]
    assert np.isfinite(r["flat"]) and 0 < r["flat_share"] < 1
    assert f"orbit: {100 * r['flat_share']:.1f}% of the scored pixels flat" in out
    row = next(line for line in out.splitlines() if line.startswith("orbit ") and " flr " in line).split()
    if cvvdp:
        assert 0 <= r["jod"] <= 10 and row[-2] == f"{r['jod']:.3f}"
    else:
        assert r["jod"] is None and row[-2] == "-"
