"""Animation denoising: TemporalDenoiser (history, rejection, light changes) and ``vision denoise --temporal`` on real
Cycles frames with motion vectors (restart, shards, hostile sequences)."""
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from vision.data import read_exr
from vision.data.render_layers import read_render_file, samples_per_pixel
from vision.denoise import TemporalDenoiser, denoise
from vision.denoise.accumulate import changed
from vision.pipelines.cli import main

SEQ = Path(__file__).parent / "data" / "blender" / "seq"


def _frames():
    return [read_render_file(SEQ / f"noisy_{t:04d}.exr").layers[0].buffers for t in (1, 2, 3)]


def _flat(h: int, w: int, distance: float):
    """Buffers of a flat wall facing the camera: albedo 0.5, normal +z, depth ``distance`` (HWC float32)."""
    normal = np.zeros((h, w, 3), np.float32)
    normal[..., 2] = 1
    return np.full((h, w, 3), 0.5, np.float32), normal, np.full((h, w, 1), distance, np.float32)


def _kw(b):
    return {k: b[k] for k in ("albedo", "normal", "depth", "emission", "position", "motion", "index") if k in b}


def test_static_history_is_the_exact_mean_of_the_frames_and_counts_them():
    """A still camera and scene: after n frames the accumulated colour is the mean of the n noisy frames (n <=
    max_history), the history length is n everywhere, and the noise variance falls as 1 / n."""
    g = np.random.default_rng(0)
    h, w = 24, 32
    albedo, normal, depth = _flat(h, w, 3.0)
    frames = [np.float32(0.4) + g.normal(0, 0.1, (h, w, 3)).astype(np.float32) for _ in range(6)]
    den = TemporalDenoiser(model="flr", max_history=32)
    for k, f in enumerate(frames):
        acc = den.accumulate(f, albedo=albedo, normal=normal, depth=depth)
        assert torch.all(den.history_length == k + 1)
    np.testing.assert_allclose(acc[0].permute(1, 2, 0).numpy(), np.mean(frames, 0), atol=2e-6)
    assert np.var(acc[0].numpy()) < 1.3 * 0.01 / 6


def test_history_variance_and_the_shrinkage_towards_it_follow_their_definitions():
    """A still camera: the history's variance of the mean equals the float64 sample variance of the frames over n;
    ``towards_history`` equals the James-Stein formula written out in float64 with box sums over the window; and
    noise-free frames give s = 1 (the result is the history itself) once a pixel has MIN_FRAMES frames."""
    from vision.denoise.accumulate import MIN_FRAMES, towards_history

    g = np.random.default_rng(3)
    h, w = 20, 24
    _, normal, depth = _flat(h, w, 3.0)
    albedo = g.uniform(0.2, 0.9, (h, w, 3)).astype(np.float32)
    light = g.uniform(0.5, 2.0, (h, w, 3))
    frames = [(albedo * light * g.exponential(1.0, (h, w, 3))).astype(np.float32) for _ in range(5)]
    den = TemporalDenoiser(model="flr", shrink_radius=2)
    for f in frames:
        acc = den.accumulate(f, albedo=albedo, normal=normal, depth=depth)
    hist = den._history
    demod = np.stack(frames).astype(np.float64) / np.maximum(albedo, 1e-2)  # the history holds demodulated light
    np.testing.assert_allclose(hist.variance_of_mean()[0].permute(1, 2, 0).numpy(), demod.var(0, ddof=1) / 5,
                               rtol=2e-4, atol=1e-6)
    floor = torch.from_numpy(np.maximum(albedo, 1e-2)).permute(2, 0, 1)[None]
    out = torch.from_numpy(0.4 * albedo * light).float().permute(2, 0, 1)[None]  # a "fit" 60 % too dark
    got = towards_history(out, acc, hist, floor, radius=2)[0].permute(1, 2, 0).numpy()
    a, o = acc[0].permute(1, 2, 0).numpy().astype(np.float64), out[0].permute(1, 2, 0).numpy().astype(np.float64)
    v = (demod.var(0, ddof=1) / 5 * np.maximum(albedo, 1e-2).astype(np.float64) ** 2).sum(-1)
    d2 = ((a - o) ** 2).sum(-1)
    box = lambda x: np.array([[x[max(i - 2, 0):i + 3, max(j - 2, 0):j + 3].mean() for j in range(w)]  # noqa: E731
                              for i in range(h)])
    s = np.clip(1 - box(v) / box(d2), 0, 1)[..., None]
    np.testing.assert_allclose(got, o + s * (a - o), rtol=1e-4, atol=1e-5)
    assert 0 < s.mean() < 1
    clean = TemporalDenoiser(model="flr", shrink_radius=2)
    still = (albedo * light).astype(np.float32)
    for k in range(MIN_FRAMES):
        acc = clean.accumulate(still, albedo=albedo, normal=normal, depth=depth)
    res = towards_history(acc * 0.5, acc, clean._history, floor, radius=2)
    np.testing.assert_allclose(res.numpy(), acc.numpy(), rtol=1e-6)


@pytest.mark.parametrize("scale", [1e20, 1e30])
def test_extreme_radiance_gives_finite_frames_of_the_right_level(scale):
    """Radiance whose squares overflow float32 (the history's second moment, the change test's window sums): the
    windows involved fall back to the fit, nothing raises, and the result keeps the frames' level, over the whole
    frame and where only half of it is that bright."""
    g = np.random.default_rng(4)
    h, w = 24, 32
    albedo, normal, depth = _flat(h, w, 2.0)
    for half in (False, True):
        den = TemporalDenoiser(shrink_radius=2)  # the second moment and its windows too
        for _ in range(5):
            c = g.exponential(0.5, (h, w, 3)).astype(np.float32)
            c[:, : w // 2 if half else w] *= np.float32(scale)
            out = np.asarray(den(c, albedo=albedo, normal=normal, depth=depth))
        assert np.isfinite(out).all() and (out >= 0).all()
        if not half:
            assert 0.35 < out.mean() / scale < 0.65  # colour 0.5 on average


def test_each_frame_is_repaired_and_rid_of_fireflies_once(monkeypatch):
    """The accumulated colour is made of frames already repaired and rid of their fireflies as they came in, so the
    regression's own call does not run those steps again; the frames are those of a denoiser that does (Blender's
    frames, with a firefly and a NaN added to one of them)."""
    import vision.denoise.buffers as B
    import vision.denoise.frame as frame
    import vision.denoise.temporal as temporal

    frames = _frames()
    frames[1] = dict(frames[1], color=frames[1]["color"].copy())
    frames[1]["color"][10, 12] = 1e6
    frames[1]["color"][20, 5, 1] = np.nan
    calls = []
    real = B.suppress_fireflies
    monkeypatch.setattr(B, "suppress_fireflies", lambda *a, **k: (calls.append(1), real(*a, **k))[1])

    def again(*a, **k):  # the regression's call as a plain denoise() call would run it
        return frame._denoise(*a, **dict(k, prepared=False))

    runs = {}
    for name in ("once", "again"):
        if name == "again":
            monkeypatch.setattr(temporal, "_denoise", again)
        den, calls[:] = TemporalDenoiser(), []
        with pytest.warns(B.BufferWarning):
            runs[name] = [den(b["color"], **_kw(b)) for b in frames]
        runs[name + " calls"] = len(calls)
    assert runs["once calls"] == len(frames) and runs["again calls"] == 2 * len(frames)
    for a, b in zip(runs["once"], runs["again"]):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_change_test_fires_on_a_light_switched_on_and_rarely_on_noise():
    """The window test against the samples' own noise: a frame 50 % brighter restarts (nearly) every pixel's
    history; a frame of the same light, with heavy-tailed 1-spp-like noise, almost none."""
    g = np.random.default_rng(1)
    shape = (1, 3, 64, 64)
    noisy = lambda level: torch.from_numpy(level * g.exponential(1.0, shape).astype(np.float32))  # noqa: E731
    history = torch.full(shape, 1.0)
    valid = torch.ones(1, 1, 64, 64, dtype=torch.bool)
    count = torch.full((1, 1, 64, 64), 8.0)
    same = changed(noisy(1.0), history, valid, count, 4.0).float().mean()
    brighter = changed(noisy(1.5), history, valid, count, 4.0).float().mean()
    assert same < 0.01 and brighter > 0.95


@pytest.mark.parametrize("size", [(64, 64), (13, 18)])
def test_change_cells_one_numba_pass_matches_float64_block_means(size):
    """The change test's cell statistics on the CPU path (one numba pass) against their definition in float64:
    block means over each 4 x 4 cell's real pixels (partial cells at 13 x 18) of v, l v, o v, l^2 v and n v, with
    l and o channel means (an HWC-strided frame, a batch of two, one square past float32 range set to BIG); and the
    flags of both paths agree."""
    from vision.denoise.accumulate import BIG, _change_cells_numba, _change_cells_torch
    from vision.kernels.runtime import use_numba

    g = torch.Generator().manual_seed(2)
    h, w = size
    signal = (3 * torch.rand(2, h, w, 3, generator=g)).permute(0, 3, 1, 2)
    signal[1, :, 2, 3] = 1e20
    previous = torch.rand(2, 3, h, w, generator=g)
    valid = torch.rand(2, 1, h, w, generator=g) > 0.3
    valid[1, 0, 2, 3] = True  # its square overflows float32 (then BIG, as in float64 past the clamp)
    count = torch.randint(1, 9, (2, 1, h, w), generator=g).float()
    v = valid.double()
    lum, old = signal.double().mean(1, keepdim=True), previous.double().mean(1, keepdim=True)
    planes = torch.cat([v, lum * v, old * v, lum.square() * v, count.double() * v], 1)
    want = torch.nn.functional.avg_pool2d(planes, 4, ceil_mode=True, count_include_pad=False).clamp(-BIG, BIG)
    got = _change_cells_numba(signal, previous, valid, count, 4)
    np.testing.assert_allclose(got.double().numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_change_cells_torch(signal, previous, valid, count, 4).double().numpy(), want.numpy(),
                               rtol=1e-5, atol=1e-6)
    flags = changed(signal, previous, valid, count, 4.0)
    with use_numba(False):
        assert torch.equal(flags, changed(signal, previous, valid, count, 4.0))


@pytest.mark.parametrize("square", [False, True])
def test_history_update_in_one_numba_pass_is_the_pytorch_update_bit_for_bit(square):
    """The history's update on the CPU path (one numba pass writing one stack of planes, which the next frame
    reprojects as it lies) against the PyTorch formulas, over three frames of a panning camera with a few pixels
    rejected: the same numbers exactly, with and without the second moment."""
    from vision.denoise import accumulate
    from vision.denoise.reproject import Tolerances
    from vision.kernels.runtime import use_numba

    g = torch.Generator().manual_seed(4)
    h, w = 20, 28
    keys = {"depth": 1 + torch.rand(1, 1, h, w, generator=g), "normal": None, "index": None}
    frames = [torch.rand(1, h, w, 3, generator=g).permute(0, 3, 1, 2) for _ in range(4)]
    offset = torch.full((1, 2, h, w), -0.3)
    offset[..., :3, :] = 40.0  # taps outside the frame: no history there
    runs = []
    for numba in (True, False):
        with use_numba(numba):
            hist = accumulate.start(frames[0], keys, square=square)
            for f in frames[1:]:
                hist, _ = accumulate.update(hist, f, offset, keys, Tolerances(), 32, 4.0)
        runs.append(hist)
    fast, slow = runs
    assert fast.planes.shape[1] == slow.planes.shape[1] == (7 if square else 4)  # one stack of planes each
    for field in ("mean", "count") + (("square",) if square else ()):
        assert torch.equal(getattr(fast, field), getattr(slow, field)), field
    assert float(fast.count.max()) == 4.0 and float(fast.count.min()) == 1.0


def test_blender_sequence_keeps_history_on_the_same_object_and_drops_it_where_disoccluded():
    """On the real Cycles frames (camera orbiting 25 degrees per frame, a ball rolling 1.5 m): at frame 3, judged
    from the files alone (the Vector pass and IndexOB, no depth or normal), a pixel whose previous position lies
    over a pixel outside the frame or whose four previous taps all show another object has no history; most of
    those whose four taps all show its own object keep it."""
    frames = _frames()
    den = TemporalDenoiser(model="flr")
    outs = [den(b["color"], **_kw(b)) for b in frames]
    assert all(np.isfinite(o).all() and o.shape == frames[0]["color"].shape for o in outs)
    n = den.history_length[0, 0].numpy()
    cur, prev = frames[2], frames[1]
    h, w = n.shape
    yy, xx = np.mgrid[0:h, 0:w]
    py, px = yy - cur["motion"][..., 1], xx + cur["motion"][..., 0]
    outside = (py < -1) | (py > h) | (px < -1) | (px > w)
    own = np.ones((h, w), bool)
    other = ~outside
    for dy in (0, 1):
        for dx in (0, 1):
            yi, xi = np.floor(py).astype(int) + dy, np.floor(px).astype(int) + dx
            inside = (yi >= 0) & (yi < h) & (xi >= 0) & (xi < w)
            same = prev["index"][yi.clip(0, h - 1), xi.clip(0, w - 1), 0] == cur["index"][..., 0]
            own &= inside & same
            other &= ~(inside & same)
    assert outside.sum() > 20 and other.sum() > 20 and own.sum() > 300
    assert (n[outside] == 1).all() and (n[other] == 1).all()
    assert (n[own] >= 2).mean() > 0.75
    # the first frame has no history: it is the single-frame denoiser's result
    first = denoise(frames[0]["color"], **{k: v for k, v in _kw(frames[0]).items() if k not in ("motion", "index")},
                    model="flr")
    np.testing.assert_allclose(outs[0], first, rtol=1e-5, atol=1e-5)


def test_no_motion_pass_means_a_static_camera_and_bad_buffers_are_one_line():
    b = _frames()[0]
    den = TemporalDenoiser(model="flr")
    den(b["color"], albedo=b["albedo"])
    den(b["color"], albedo=b["albedo"])
    assert torch.all(den.history_length == 2)
    with pytest.raises(ValueError, match="motion must have 4 channel"):
        den(b["color"], motion=b["motion"][..., :2])
    with pytest.raises(ValueError, match=r"depth is 15x20 \(HxW\) but color is 30x40"):
        den(b["color"], depth=b["depth"][::2, ::2])
    with pytest.raises(ValueError, match="unknown buffer"):
        den(b["color"], velocity=b["motion"])
    with pytest.raises(ValueError, match="max_history"):
        TemporalDenoiser(max_history=0)
    den.reset()
    assert den.history_length is None


@pytest.mark.slow  # a subprocess or the Triton interpreter: over 10 s on 2 cores
def test_triton_path_reads_nothing_on_the_host(backend):
    """The whole temporal step (reprojection, change test, FLR) on the Triton path in the interpreter: no host
    synchronisation, so a CUDA frame can be captured in a graph."""
    from sync_trap import no_host_sync

    frames = _frames()
    den = TemporalDenoiser(model="flr", radius=3)
    crop = (slice(8, 24), slice(8, 32))  # 16 x 24 of the frames: the interpreter runs every kernel launch in Python
    t = [{k: torch.from_numpy(np.ascontiguousarray(v[crop])) for k, v in _kw(b).items()}
         | {"color": torch.from_numpy(np.ascontiguousarray(b["color"][crop]))} for b in frames[:2]]
    den(t[0].pop("color"), **t[0])
    if backend == "triton":
        with no_host_sync():
            out = den(t[1].pop("color"), **t[1])
    else:
        out = den(t[1].pop("color"), **t[1])
    assert torch.isfinite(out).all()


# --------------------------------------------------------------------------- the command


@pytest.fixture
def shot(tmp_path):
    d = tmp_path / "shot"
    d.mkdir()
    for t in (1, 2, 3):
        shutil.copy(SEQ / f"noisy_{t:04d}.exr", d / f"f_{t}.exr")
    return d


def _rgb(path):
    ch = read_exr(path, ["ViewLayer.Combined.R", "ViewLayer.Combined.G", "ViewLayer.Combined.B"])
    return np.stack([ch[f"ViewLayer.Combined.{c}"] for c in "RGB"], -1)


def test_command_equals_the_api_and_a_restarted_run_gives_the_same_frames(shot, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["denoise", str(shot / "f_*.exr"), "-o", str(out), "-q", "--temporal", "--model", "flr"]) == 0
    den = TemporalDenoiser(model="flr", tile=1024)
    for t in (1, 2, 3):
        rf = read_render_file(shot / f"f_{t}.exr")
        b = rf.layers[0].buffers
        spp = samples_per_pixel(rf.header, rf.layers[0].name)[0]  # the command reads it from the header
        np.testing.assert_array_equal(_rgb(out / f"f_{t}.exr"), den(b["color"], **_kw(b), spp=spp))
    first = {t: _rgb(out / f"f_{t}.exr") for t in (2, 3)}
    (out / "f_2.exr").unlink()
    (out / "f_3.exr").unlink()
    capsys.readouterr()
    assert main(["denoise", str(shot / "f_*.exr"), "-o", str(out), "-q", "--temporal", "--model", "flr"]) == 0
    assert "skipped 1" in capsys.readouterr().out
    for t in (2, 3):
        np.testing.assert_array_equal(_rgb(out / f"f_{t}.exr"), first[t])


def test_shard_warms_up_on_the_frames_before_it(shot, tmp_path, capsys):
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert main(["denoise", str(shot / "f_*.exr"), "-o", str(whole), "-q", "--temporal", "--model", "flr"]) == 0
    assert main(["denoise", str(shot / "f_*.exr"), "-o", str(part), "-q", "--temporal", "--model", "flr",
                 "--shard", "1/2", "--warmup", "8"]) == 0
    assert "1 read first into the history" in capsys.readouterr().out
    assert sorted(p.name for p in part.glob("*.exr")) == ["f_2.exr", "f_3.exr"]
    for t in (2, 3):
        np.testing.assert_array_equal(_rgb(part / f"f_{t}.exr"), _rgb(whole / f"f_{t}.exr"))


def test_hostile_sequences_each_give_one_line(shot, tmp_path, capsys):
    from vision.data import write_exr

    def run(*args):
        capsys.readouterr()
        rc = main(["denoise", *map(str, args), "-o", str(tmp_path / "o"), "-q", "--temporal", "--model", "flr"])
        out, err = capsys.readouterr()
        return rc, out, err

    rc, _, err = run(shot / "f_1.exr", shot / "f_2.exr", shot / "f_1.exr")  # a frame repeated
    assert rc == 2 and "given twice" in err and len(err.strip().splitlines()) == 1
    rc = main(["denoise", str(shot / "f_2.exr"), str(shot / "f_1.exr"), "-o", str(tmp_path / "o"), "--temporal",
               "--model", "flr"])  # named out of order: taken in name order, said once (a warning: not under -q)
    assert rc == 0 and "name order" in capsys.readouterr().err
    # a frame of another size in the middle
    ch = read_exr(shot / "f_2.exr")
    write_exr(shot / "f_2.exr", {k: np.ascontiguousarray(v[::2, ::2]) for k, v in ch.items()})
    rc, _, err = run(shot / "f_*.exr")
    assert rc == 2 and "f_2.exr" in err and "one size" in err and len(err.strip().splitlines()) == 1
    # frames without a Vector pass: one line saying where Blender turns it on; --static-camera takes them as a
    # still shot, and the summary says how many
    for t in (1, 2, 3):
        ch = read_exr(SEQ / f"noisy_{t:04d}.exr")
        write_exr(shot / f"f_{t}.exr", {k: v for k, v in ch.items() if ".Vector." not in k})
    rc, out, err = run(shot / "f_*.exr")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "f_1.exr: no motion vectors for --temporal" in err
    assert "Passes > Data > Vector" in err and "--static-camera" in err
    rc, out, err = run(shot / "f_*.exr", "--static-camera")
    assert rc == 0 and "3 frame(s) had no motion vectors" in out


def test_sequence_bench_scores_equal_hand_computed_numbers(tmp_path):
    """vision bench denoise-sequences' PSNR and stability against numpy written here, on the fixture frames with
    a stand-in reference (the frame's own colour, halved)."""
    from sequence_folder import sequence_folder
    from vision.denoise.metrics import tonemap
    from vision.pipelines.bench.denoise_sequences import read_sequences, score_sequence

    sequence_folder(tmp_path, "s", reverse=True)
    frames = read_sequences(tmp_path)["s"]
    assert [f["frame"] for f in frames] == [1, 2, 3]
    res = score_sequence(frames, {"exact": lambda d, s: d["reference"], "double": lambda d, s: 2 * d["reference"]},
                         first=2)
    assert res["exact"]["psnr"] == float("inf") and res["exact"]["stability"] == float("inf")
    refs = [read_render_file(SEQ / f"noisy_{t:04d}.exr").layers[0].buffers["color"] / 2 for t in (1, 2, 3)]
    tm = [tonemap(r) for r in refs]
    psnr = np.mean([10 * np.log10(1 / np.mean((tonemap(2 * r) - x) ** 2)) for r, x in zip(refs[1:], tm[1:])])
    # the differences of every scored frame with the one before it (frames 2 - 1 and 3 - 2), averaged in MSE
    diff = np.mean([np.mean((tonemap(2 * refs[t]) - tonemap(2 * refs[t - 1]) - (tm[t] - tm[t - 1])) ** 2)
                    for t in (1, 2)])
    assert res["double"]["psnr"] == pytest.approx(psnr, abs=1e-9)
    assert res["double"]["stability"] == pytest.approx(10 * np.log10(1 / diff), abs=1e-9)
    with pytest.raises(ValueError, match="--sequences: x not in"):
        read_sequences(tmp_path, ["x"])
    from PIL import Image

    from vision.pipelines.bench.denoise_sequences import write_figures

    last: dict = {}
    score_sequence(frames, {"double": lambda d, s: 2 * d["reference"]}, first=2, last=last)
    paths = write_figures(tmp_path / "figs", "s", last, ["double"])
    assert [p.name for p in paths] == ["s_frame.png", "s_flicker.png"]
    flicker = np.asarray(Image.open(paths[1]))  # the map of the one method: its last difference's error, x4
    want = np.clip(4 * np.abs(tonemap(2 * refs[2]) - tonemap(2 * refs[1]) - (tm[2] - tm[1])).mean(-1), 0, 1)
    assert flicker.shape[0] > want.shape[0] and flicker.mean() > 0 and want.mean() > 0


def test_a_frame_reached_twice_or_a_moving_data_window_is_refused_in_one_line(shot, tmp_path, capsys):
    import os

    os.link(shot / "f_1.exr", shot / "f_4.exr")  # a hard link: the same frame under a new name
    assert main(["denoise", str(shot / "f_*.exr"), "-o", str(tmp_path / "a"), "-q", "--temporal"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "f_4.exr is the same file as" in err[0] and "f_1.exr" in err[0]
    (shot / "f_4.exr").unlink()
    (shot / "f_5.exr").symlink_to(shot / "f_2.exr")
    assert main(["denoise", str(shot / "f_*.exr"), "-o", str(tmp_path / "b"), "-q", "--temporal"]) == 2
    assert "is the same file as" in capsys.readouterr().err
    (shot / "f_5.exr").unlink()
    # frame 3 cropped one pixel further right: its history would be misregistered
    import OpenEXR

    moved = shot / "f_3.exr"
    with OpenEXR.File(str(moved)) as f:
        hdr, parts = f.header(), f.channels()
        (x0, y0), (x1, y1) = (tuple(int(v) for v in c) for c in hdr["dataWindow"])
        hdr["dataWindow"] = (np.array([x0 + 1, y0], np.int32), np.array([x1 + 1, y1], np.int32))
        hdr["displayWindow"] = (np.array([0, 0], np.int32), np.array([x1 + 1, y1], np.int32))
        OpenEXR.File(hdr, {k: v.pixels for k, v in parts.items()}).write(str(tmp_path / "moved.exr"))
    (tmp_path / "moved.exr").replace(moved)
    assert main(["denoise", str(shot / "f_*.exr"), "-o", str(tmp_path / "c"), "-q", "--temporal"]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if "error" in line]
    assert len(err) == 1 and "f_3.exr" in err[0] and "data window" in err[0] and "misregistered" in err[0]


@pytest.mark.parametrize("model", ["flr", "flnr"])
def test_a_frame_that_fails_leaves_the_history_as_it_was(model, monkeypatch):
    """A call that raises after the frame was read (here the fit, as an interrupt or a memory error would) leaves the
    denoiser as before the call: the history has not taken the frame, and the frames after it come out exactly as
    in a run that never met the failure (the reference: a second denoiser fed the same frames, no failure)."""
    import vision.denoise.temporal as temporal

    frames = _frames()
    failing, clean = TemporalDenoiser(model=model), TemporalDenoiser(model=model)
    for b in frames[:2]:
        failing(b["color"], **_kw(b), spp=16)
        clean(b["color"], **_kw(b), spp=16)
    before = failing.history_length.clone()

    def broken(*args, **kwargs):
        raise MemoryError("no room for the fit")

    with monkeypatch.context() as m:
        m.setattr(temporal, "_denoise", broken)
        with pytest.raises(MemoryError):
            failing(frames[2]["color"], **_kw(frames[2]), spp=16)
    assert torch.equal(failing.history_length, before)
    b = frames[2]
    np.testing.assert_array_equal(failing(b["color"], **_kw(b), spp=16), clean(b["color"], **_kw(b), spp=16))
    assert torch.equal(failing.history_length, clean.history_length)
