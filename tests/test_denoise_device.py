"""The denoiser's device path: no host reads per frame, robust to extreme and negative colour samples, argument
errors. The Triton path runs through the interpreter on CPU tensors (small frames); on CUDA the same code runs."""
import os
import sys
import traceback
import warnings

import numpy as np
import pytest
import torch

from vision.bundled import asset_path
from vision.data import read_frame
from vision.denoise import BufferWarning, denoise
from vision.denoise import metrics as M

GUIDES = ("albedo", "normal", "depth", "ao", "emission")
TRAPPED = ("item", "__bool__", "__float__", "__int__", "__index__", "tolist", "numpy")


@pytest.fixture(scope="module")
def frame():
    return read_frame(asset_path("scenes", "scene_00002", "frame_00.exr"))  # it has emitters and far depth


def _crop(d, n):
    return {k: np.ascontiguousarray(v[:n, :n]) for k, v in d.items()}


class _Recorder:
    """Every host read of a tensor inside the block, with the innermost project frame that asked for it (the
    reads are let through: which module synchronises is the question, not only whether one does)."""

    def __enter__(self):
        self.sites, self.saved = [], {n: getattr(torch.Tensor, n) for n in TRAPPED}
        for n in TRAPPED:
            setattr(torch.Tensor, n, self._wrap(n, self.saved[n]))
        return self

    def _wrap(self, name, fn):
        def read(t, *args, **kwargs):
            where = [f for f in traceback.extract_stack()[:-1] if "/vision/" in f.filename
                     or "/kernels/" in f.filename]
            self.sites.append((name, f"{where[-1].filename}:{where[-1].lineno}" if where else "?"))
            return fn(t, *args, **kwargs)
        return read

    def __exit__(self, *exc):
        for n, fn in self.saved.items():
            setattr(torch.Tensor, n, fn)


def _torch_frame(d):
    return {k: torch.from_numpy(v).permute(2, 0, 1)[None].contiguous() for k, v in d.items()}


@pytest.mark.parametrize("model", ["flr", "flnr"])
def test_whole_call_reads_no_tensor_on_the_host_on_the_triton_path(frame, model, monkeypatch):
    """denoise() on the Triton path (interpreted) with NaN, Inf, a firefly, negative samples, sky (depth 0) and
    emitters, and the same result as the PyTorch path; no host read anywhere, the kernels' included."""
    from vision.kernels.runtime import interpreting

    if not interpreting() and not torch.cuda.is_available():
        pytest.skip("needs TRITON_INTERPRET=1 (tests/conftest.py sets it without CUDA)")
    d = _torch_frame(_crop(frame, 64))
    d["depth"][..., :4, :] = 0  # sky
    c = d["color"].clone()
    c[0, 0, 3, 5], c[0, 1, 9, 9], c[0, 2, 20, 30], c[0, 0, 40, 41] = float("nan"), float("inf"), 1e30, -0.5
    guides = {k: d[k] for k in GUIDES}
    guides["normal"] = guides["normal"].clone()
    guides["normal"][0, 0, 50, 50] = float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BufferWarning)
        want = denoise(c, **guides, model=model)
    monkeypatch.setenv("VISION_BACKEND", "triton")
    with _Recorder() as rec, warnings.catch_warnings():
        warnings.simplefilter("error", BufferWarning)  # the device path does not warn (it would need a read)
        got = denoise(c, **guides, model=model)
    assert torch.isfinite(got).all()
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)
    own = [s for s in rec.sites if "/kernels/" not in s[1]]
    assert not own, f"host reads in the denoiser: {own}"
    assert not rec.sites, f"host reads in vision.kernels: {sorted(set(rec.sites))}"


def _fireflies(d, n, value, seed=0):
    c = d["color"].copy()
    rng = np.random.default_rng(seed)
    idx = rng.choice(c.shape[0] * c.shape[1], n, replace=False)
    c.reshape(-1, 3)[idx, rng.integers(0, 3, n)] = value
    return c


@pytest.mark.parametrize("model", ["flr", "flnr"])
@pytest.mark.parametrize("n, value", [(300, 1e30), (1, 1e10)])
def test_extreme_samples_change_only_their_neighbourhood(frame, model, n, value):
    g = {k: frame[k] for k in GUIDES}
    clean = denoise(frame["color"], **g, model=model)
    with pytest.warns(BufferWarning, match=rf"color: {n} extreme sample") as rec:
        got = denoise(_fireflies(frame, n, value), **g, model=model)
    assert len(rec) == 1
    assert np.isfinite(got).all()
    assert M.psnr(got, clean) >= 30


def test_negative_samples_are_clamped_with_a_warning(frame):
    g = {k: frame[k] for k in GUIDES}
    c = frame["color"].copy()
    c[10:12, 10:12] = -3.0
    with pytest.warns(BufferWarning, match="color: 12 negative value"):
        got = denoise(c, **g, model="flr")
    c[10:12, 10:12] = 0.0
    np.testing.assert_array_equal(got, denoise(c, **g, model="flr"))


def test_normal_frames_are_untouched_by_the_firefly_step():
    """No sample of the bundled 1-spp frames is an outlier (their light peaks at ~50x the 0.9 quantile): the step
    returns them as they are, so the bench's quality rows cannot move."""
    from vision.denoise.buffers import suppress_fireflies

    for s in range(3):
        for f in range(2):
            d = read_frame(asset_path("scenes", f"scene_{s:05d}", f"frame_{f:02d}.exr"))
            c, e = (torch.from_numpy(d[k]).permute(2, 0, 1)[None] for k in ("color", "emission"))
            with warnings.catch_warnings():
                warnings.simplefilter("error", BufferWarning)
                assert suppress_fireflies(c, e) is c and suppress_fireflies(c) is c


@pytest.mark.parametrize("kw", [dict(tile=-5), dict(tile=0), dict(tile=2.5), dict(tile="64"), dict(radius=-1),
                                dict(radius=True), dict(scale=0), dict(eps=-1.0), dict(eps="x"), dict(repair="no")])
def test_bad_arguments_raise_a_clear_value_error(kw):
    name = next(iter(kw))
    with pytest.raises(ValueError, match=name):
        denoise(np.ones((16, 16, 3), np.float32), **kw, model="flr")


def test_graph_plumbing_with_a_stand_in_capture(frame, monkeypatch):
    """vision.denoise.graphs without CUDA: a stand-in capture that replays by running the frame on the static
    inputs. One capture per kind of frame, each call's own content, the eager result; a failed capture warns once
    and falls back to eager frames."""
    from vision.denoise import graphs

    captures = []

    def stand_in(fn, inputs):
        captures.append(1)
        out = fn(*inputs)
        return (lambda: out.copy_(fn(*inputs))), out

    monkeypatch.setenv("VISION_CHECKS", "off")  # no host reads: what makes a frame capturable
    monkeypatch.setattr(graphs, "_on_cuda", lambda ts: True)
    monkeypatch.setattr(graphs, "_capture", stand_in)
    graphs.clear()
    a, b = _crop(frame, 32), _crop({k: v[32:] for k, v in frame.items()}, 32)
    g = [{k: torch.from_numpy(f[k]) for k in GUIDES} for f in (a, b)]
    colors = [torch.from_numpy(f["color"]) for f in (a, b)]
    graphs.set_enabled(False)
    want = [denoise(c, **gf, model="flr") for c, gf in zip(colors, g)]
    graphs.set_enabled(None)
    got = [denoise(c, **gf, model="flr") for c, gf in zip(colors, g)]
    assert len(captures) == 1 and len(graphs._graphs) == 1
    for x, y in zip(got, want):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    denoise(colors[0], **g[0], radius=4, model="flr")  # other settings: another graph
    assert len(captures) == 2

    def broken(fn, inputs):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(graphs, "_capture", broken)
    graphs.clear()
    with pytest.warns(RuntimeWarning, match="graph capture failed"):
        first = denoise(colors[0], **g[0], model="flr")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        second = denoise(colors[1], **g[1], model="flr")
    np.testing.assert_array_equal(first.numpy(), want[0].numpy())
    np.testing.assert_array_equal(second.numpy(), want[1].numpy())
    graphs.clear()


def test_bench_device_rows_on_cpu(capsys):
    """`vision bench denoise --cuda-size WxH --device cpu --timing-only`: the GPU script's command on CPU tensors,
    one row per method with per-call time, host syncs per frame and graph columns; the sync counter counts the
    host reads of one call."""
    from vision.pipelines.bench.denoise_device import count_host_syncs
    from vision.pipelines.cli import main

    x = torch.ones(3)
    assert count_host_syncs(lambda: (bool(x.sum()), float(x[0]), x.tolist()), torch.device("cpu")) == 3
    assert main(["bench", "denoise", "--cuda-size", "32x24", "--device", "cpu", "--timing-only", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "cpu time per 32x24 frame" in out and "host syncs/frame" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("flr", "flnr"))]
    assert [r[0] for r in rows] == ["flr", "flr", "flr", "flnr"]
    assert all(r[-1] == "no" and r[-2].isdigit() for r in rows)  # no graphs on CPU; a sync count per row


def _fill_reference(x, bad):
    """float64 loops: every bad sample becomes the mean of the good samples among its 3 x 3 in-frame neighbours."""
    out = x.astype(np.float64).copy()
    b, c, h, w = x.shape
    for i in range(b):
        for k in range(c):
            for y in range(h):
                for z in range(w):
                    if not bad[i, k, y, z]:
                        continue
                    vals = [x[i, k, yy, zz] for yy in range(max(0, y - 1), min(h, y + 2))
                            for zz in range(max(0, z - 1), min(w, z + 2)) if not bad[i, k, yy, zz]]
                    out[i, k, y, z] = np.mean(vals) if vals else 0.0
    return out


@pytest.mark.parametrize("flags", [False, True])
def test_triton_fill_against_float64_loops(flags):
    from vision.denoise.fill_triton import fill
    from vision.kernels.runtime import interpreting

    if not interpreting() and not torch.cuda.is_available():
        pytest.skip("needs the Triton interpreter or CUDA")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    rng = np.random.default_rng(3)
    x = (rng.random((2, 3, 21, 140)) * 4).astype(np.float32)
    x[0, 1, 0, 0], x[1, 2, 20, 139], x[0, 0, 5, 10:13], x[1, 0, 7, 7] = np.nan, np.inf, np.nan, -np.inf
    x[0, 2, :3, :3] = np.nan  # a sample with no finite neighbour becomes 0
    bad = ~np.isfinite(x)
    flag = rng.random((2, 1, 21, 140)) > 0.95 if flags else None
    if flags:
        bad = bad | flag
    got, count = fill(torch.from_numpy(x).to(dev), None if flag is None else torch.from_numpy(flag).to(dev))
    np.testing.assert_allclose(got.cpu().double().numpy(), _fill_reference(x, bad), rtol=1e-6, atol=1e-6)
    assert int(count) == int((~np.isfinite(x)).sum())


def test_triton_fill_compiles_for_hopper_without_spills():
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = ("from vision.kernels.static_compile import compile_static\n"
            "from vision.denoise.fill_triton import _fill_kernel, BLOCK_H, BLOCK_W\n"
            "for flag in (True, False):\n"
            "    s = compile_static(_fill_kernel, dict(HAS_FLAG=flag, BH=BLOCK_H, BW=BLOCK_W), signature={"
            "'x_ptr': '*fp32', 'flag_ptr': '*u8' if flag else '*fp32', 'out_ptr': '*fp32', 'count_ptr': '*i32'})\n"
            "    print(s.registers, s.stack_bytes)\n")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    if res.returncode and "cuobjdump" in res.stderr:
        pytest.skip("no cuobjdump in this Triton install")
    assert res.returncode == 0, res.stderr[-2000:]
    for line in res.stdout.split("\n")[:2]:
        regs, stack = map(int, line.split())
        assert stack == 0 and regs <= 128


@pytest.mark.slow
@pytest.mark.parametrize("model", ["flr", "flnr"])
def test_denoiser_code_under_no_host_sync(frame, model, monkeypatch):
    """The whole denoise() call under tests/sync_trap.no_host_sync() on the Triton path (interpreted), with the
    trap lifted only inside the ops of vision.kernels (local linear fit and apply, box filter: rebuilt
    separately; the test above lists what they still read): every other step, repairs, checks, statistics, the
    network, reads nothing on the host."""
    import vision.kernels as K
    from sync_trap import TRAPPED as TRAP_NAMES, no_host_sync
    from vision.kernels.runtime import interpreting

    if not interpreting() and not torch.cuda.is_available():
        pytest.skip("needs TRITON_INTERPRET=1 (tests/conftest.py sets it without CUDA)")
    originals = {n: getattr(torch.Tensor, n) for n in TRAP_NAMES}

    def untrapped(fn):
        def call(*args, **kwargs):
            trapped = {n: getattr(torch.Tensor, n) for n in TRAP_NAMES}
            for n, f in originals.items():
                setattr(torch.Tensor, n, f)
            try:
                return fn(*args, **kwargs)
            finally:
                for n, f in trapped.items():
                    setattr(torch.Tensor, n, f)
        return call

    monkeypatch.setattr(K, "local_linear_fit", untrapped(K.local_linear_fit))
    monkeypatch.setattr(K, "local_linear_apply", untrapped(K.local_linear_apply))
    monkeypatch.setattr(K, "box_filter", untrapped(K.box_filter))  # its check_finite reads on every backend
    monkeypatch.setenv("VISION_BACKEND", "triton")
    d = _torch_frame(_crop(frame, 48))
    c = d["color"].clone()
    c[0, 0, 3, 5], c[0, 2, 20, 30], c[0, 0, 40, 41] = float("nan"), 1e30, -0.5
    with no_host_sync():
        out = denoise(c, **{k: d[k] for k in GUIDES}, model=model)
    assert torch.isfinite(out).all()


def test_bright_regions_are_not_fireflies(frame):
    """A 6 x 6 light seen without an emission buffer (1e5, far above the frame's light) stays as it is; a lone sample
    1e4 times its surroundings is refilled."""
    from vision.denoise.buffers import suppress_fireflies

    c = torch.from_numpy(frame["color"]).permute(2, 0, 1)[None].clone()
    c[..., 40:46, 60:66] = 1e5
    with warnings.catch_warnings():
        warnings.simplefilter("error", BufferWarning)
        assert suppress_fireflies(c) is c
    c[0, 1, 100, 20] = 5e3
    with pytest.warns(BufferWarning, match="1 extreme sample"):
        out = suppress_fireflies(c)
    assert float(out[0, 1, 100, 20]) < 10 and torch.equal(out[..., 40:46, 60:66], c[..., 40:46, 60:66])
