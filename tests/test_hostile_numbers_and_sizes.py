"""Hostile and careless numbers and sizes: numeric flags that are NaN, inf or out of range, loss inputs beyond
float32, malformed options, output paths checked before the work, and files whose headers claim huge sizes are one
line with exit 2, before any work and with nothing written (``test_hostile_inputs.py`` covers data files and
output paths)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from vision.io import write_image
from vision.pipelines.cli import main

from cli_checks import one_line_error  # noqa: E402


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "a.png"
    write_image(path, np.random.default_rng(0).uniform(size=(24, 24, 3)).astype(np.float32))
    return path


def _refused(capsys, argv, *needles, out=None):
    try:
        code = main(argv)
    except SystemExit as stop:  # refused while the command line is parsed (an option whose type checks it)
        code = stop.code
    assert code == 2
    line = one_line_error(capsys, *needles)
    if out is not None:
        assert not out.exists(), out
    return line


# --------------------------------------------------------------------------- numeric flags

@pytest.mark.parametrize("flag,value", [("--lr", "nan"), ("--lr", "inf"), ("--lr", "0"), ("--lr", "-1"),
                                        ("--quality", "500"), ("--quality", "-1"), ("--eps", "nan"),
                                        ("--spl-weight", "inf")])
def test_restore_structure_refuses_meaningless_numbers(image, tmp_path, capsys, flag, value):
    out = tmp_path / "out.jpg"
    _refused(capsys, ["restore-structure", "--source", str(image), "--edited", str(image), "-o", str(out),
                      flag, value], flag, out=out)


@pytest.mark.parametrize("flag,value", [("--guidance-scale", "nan"), ("--steps", "-3"), ("--strength", "inf"),
                                        ("--start", "2")])
def test_edit_refuses_meaningless_numbers(image, tmp_path, capsys, flag, value):
    out = tmp_path / "e.png"
    _refused(capsys, ["edit", str(image), "--prompt", "x", "-o", str(out), flag, value], flag, out=out)


@pytest.mark.parametrize("flag,value", [("--lr", "nan"), ("--lr", "inf"), ("--lr", "0"), ("--backbone-lr", "nan"),
                                        ("--img-size", "7"), ("--threads", "-1"), ("--ema", "1.5"),
                                        ("--lora-targets", "(unclosed")])
def test_finetune_refuses_meaningless_options(tmp_path, capsys, flag, value):
    (tmp_path / "data" / "images").mkdir(parents=True)
    run = tmp_path / "run"
    _refused(capsys, ["finetune", "--task", "depth", "--data", str(tmp_path / "data"), "-o", str(run), flag, value],
             flag, out=run)


def test_jpeg_quality_out_of_range_is_refused(tmp_path):
    with pytest.raises(ValueError, match="quality"):
        write_image(tmp_path / "q.jpg", np.zeros((4, 4, 3), np.float32), quality=500)
    assert not (tmp_path / "q.jpg").exists()


def test_restore_refuses_infinite_lr():
    from vision.restore import restore_structure

    x = torch.rand(1, 3, 16, 16)
    for lr in (float("inf"), float("nan")):
        with pytest.raises(ValueError, match="lr"):
            restore_structure(x, x, steps=1, lr=lr, progress=False)


def test_structure_loss_beyond_float32_is_an_error_not_nan():
    from vision.kernels import structure_loss

    torch.manual_seed(0)
    x = torch.rand(1, 3, 32, 32)
    # the loss is not scale invariant (eps is in [0, 1] units) but scales as value^2: at 1e30 it is ~4e53, which
    # float32 cannot hold, so float32 inputs are refused by name; float64 computes it
    with pytest.raises(ValueError, match="source has values up to 1e\\+30"):
        structure_loss(x * 1e30, x)
    big = structure_loss(x.double() * 1e30, x.double())
    assert torch.isfinite(big) and big > 0
    # at the largest float32 magnitude taken, the float32 loss agrees with the float64 one
    ref = structure_loss(x.double() * 1e15, x.double())
    got = structure_loss(x * 1e15, x)
    assert torch.isfinite(got) and abs(float(got) / float(ref) - 1) < 1e-3


# --------------------------------------------------------------------------- tracebacks -> one line

def _pickle(path):
    import pickle

    path.write_bytes(pickle.dumps({"model": 1}))
    return path


def test_demo_on_an_absent_gpu_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "demo"
    _refused(capsys, ["demo", "--device", "cuda", "-o", str(out)], "--device cuda", out=out)


@pytest.mark.parametrize("extra,needle", [(["--device", "cuda"], "--device"), (["--radii", "a,b"], "--radii"),
                                          (["--lr", "nan"], "--lr"), (["--init", "PICKLE"], "not a safetensors"),
                                          (["--widths", "100000000,24,32,48"], "--widths"),
                                          (["--hidden", "100000"], "--hidden"), (["--radii", "4,100000"], "--radii")])
def test_train_denoiser_options_are_one_line_before_any_data(tmp_path, capsys, monkeypatch, extra, needle):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    extra = [str(_pickle(tmp_path / "w.pkl")) if e == "PICKLE" else e for e in extra]
    out = tmp_path / "w.safetensors"
    # --data does not exist: each refusal comes before the data is read
    _refused(capsys, ["train-denoiser", "--data", str(tmp_path / "none"), "-o", str(out)] + extra, needle, out=out)


def test_train_denoiser_output_is_checked_before_training(tmp_path, capsys):
    folder = tmp_path / "w.safetensors"
    folder.mkdir()
    _refused(capsys, ["train-denoiser", "--data", str(tmp_path / "none"), "-o", str(folder)], "-o", "folder")
    from cli_checks import unwritable_folder

    locked = unwritable_folder(tmp_path)
    _refused(capsys, ["train-denoiser", "--data", str(tmp_path / "none"), "-o", str(locked / "w.safetensors")], "-o",
             out=locked / "w.safetensors")


# --------------------------------------------------------------------------- work lost at the end

@pytest.mark.parametrize("bench", ["guided-filter", "spl"])
def test_bench_json_is_checked_before_the_bench_runs(tmp_path, capsys, bench):
    from cli_checks import unwritable_folder

    target = unwritable_folder(tmp_path) / "x.json"
    _refused(capsys, ["bench", bench, "--json", str(target)], "--json", out=target)
    folder = tmp_path / "x.json"
    folder.mkdir()
    _refused(capsys, ["bench", bench, "--json", str(folder)], "--json", "folder")


# --------------------------------------------------------------------------- memory bounds

def _png_header(path, w, h):
    """A PNG whose IHDR claims w x h (8-bit gray) with a tiny IDAT: a few bytes that claim any size."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))
    return path


def _npy_header(path, shape):
    from numpy.lib import format as npf

    with open(path, "wb") as f:
        npf.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return path


def test_a_png_claiming_a_huge_size_is_refused_from_its_header(tmp_path, capsys):
    from vision.io import read_image

    huge = _png_header(tmp_path / "huge.png", 100000, 100000)
    with pytest.raises(ValueError, match="huge.png.*100000x100000.*limit"):
        read_image(huge)
    out = tmp_path / "r.png"
    _refused(capsys, ["restore-structure", "--source", str(huge), "--edited", str(huge), "-o", str(out)],
             "--source", "huge.png", "limit", out=out)
    _refused(capsys, ["edit", str(huge), "--prompt", "x", "-o", str(out)], "huge.png", "limit", out=out)


def test_the_pixel_limit_applies_to_valid_images_and_has_an_override(tmp_path, capsys, monkeypatch):
    # a valid 200 x 200 image under a 10000-pixel limit: the 20000 x 20000 case at 1/10000 of the cost
    path = tmp_path / "big.png"
    write_image(path, np.zeros((200, 200, 1), np.float32))
    monkeypatch.setenv("VISION_MAX_PIXELS", "10000")
    out = tmp_path / "r.png"
    _refused(capsys, ["restore-structure", "--source", str(path), "--edited", str(path), "-o", str(out)],
             "big.png", "VISION_MAX_PIXELS", out=out)
    monkeypatch.setenv("VISION_MAX_PIXELS", "40000")
    from vision.io import read_image

    assert read_image(path).shape == (200, 200, 1)


def test_an_npy_header_claiming_a_huge_array_is_refused_before_loading(tmp_path):
    from vision.io import check_npy_header

    with pytest.raises(ValueError, match="huge.npy.*100000x100000.*limit"):
        check_npy_header(_npy_header(tmp_path / "huge.npy", (100000, 100000, 3)))
    with pytest.raises(ValueError, match="short.npy.*header declares"):
        check_npy_header(_npy_header(tmp_path / "short.npy", (100, 100)))
    np.save(tmp_path / "ok.npy", np.zeros((8, 9), np.float32))
    assert check_npy_header(tmp_path / "ok.npy") == (8, 9)


def test_bench_sizes_beyond_the_pixel_limit_are_one_line(capsys):
    _refused(capsys, ["bench", "guided-filter", "--sizes", "1000000"], "--sizes", "limit")


@pytest.mark.parametrize("bench", ["guided-filter", "spl", "local-regression"])
def test_bench_eps_nan_names_the_flag(capsys, bench):
    _refused(capsys, ["bench", bench, "--eps", "nan"], "--eps nan")


def _weights_with(path, **changes):
    """The bundled FLNR weights with ``changes`` to the config in their metadata (the tensors as they are)."""
    import json

    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from vision.bundled import asset_path
    from vision.denoise.flnr.model import CONFIG_KEY

    src = asset_path("weights", "flnr.safetensors")
    with safe_open(str(src), "pt") as f:
        meta = dict(f.metadata())
    cfg = json.loads(meta[CONFIG_KEY])
    changes = {k: v(cfg) if callable(v) else v for k, v in changes.items()}
    meta[CONFIG_KEY] = json.dumps(dict(cfg, **changes))
    save_file(load_file(str(src)), str(path), metadata=meta)
    return path


def _huge_widths(cfg):
    return [10 ** 8] + cfg["widths"][1:]


def test_weights_whose_config_asks_for_huge_widths_are_refused_before_building(tmp_path):
    from vision.denoise.flnr import FLNR, load_flnr

    for key, value in (("widths", _huge_widths), ("hidden", 10 ** 8), ("guides", 10 ** 6)):
        path = _weights_with(tmp_path / f"{key}.safetensors", **{key: value})
        with pytest.raises(ValueError, match=f"{key}.safetensors: config {key} .*out of bounds"):
            FLNR.from_file(path)
    with pytest.raises(ValueError, match="not a safetensors"):
        load_flnr(_pickle(tmp_path / "w.safetensors"))


def test_denoise_with_huge_config_weights_is_one_line(tmp_path, capsys):
    from vision.data import write_exr

    weights = _weights_with(tmp_path / "huge.safetensors", widths=_huge_widths)
    rgb = np.random.default_rng(0).random((16, 16, 3)).astype(np.float32)
    write_exr(tmp_path / "f_001.exr", {c: rgb[..., k] for k, c in enumerate("RGB")})
    out = tmp_path / "out"
    _refused(capsys, ["denoise", str(tmp_path / "f_001.exr"), "-o", str(out), "--weights", str(weights), "-q"],
             "--weights", "out of bounds", out=out)


def test_restore_structure_checks_an_exr_data_window_before_reading(tmp_path, capsys, monkeypatch):
    from vision.data import write_exr

    rgb = np.random.default_rng(0).random((16, 16, 3)).astype(np.float32)
    path = tmp_path / "big.exr"
    write_exr(path, {c: rgb[..., k] for k, c in enumerate("RGB")})
    monkeypatch.setenv("VISION_MAX_PIXELS", "100")
    out = tmp_path / "r.exr"
    _refused(capsys, ["restore-structure", "--source", str(path), "--edited", str(path), "-o", str(out)],
             "--source", "big.exr", "16x16", "limit", out=out)


@pytest.mark.parametrize("words, prog", [
    (["predict", "run", "photo.png", "-o", "out", "--bogus"], "vision predict"),
    (["bench", "denoise", "--bogus", "1"], "vision bench denoise"),
    (["denoise", "frame.exr", "-o", "out", "--radius", "3", "--bogus"], "vision denoise"),
    (["--bogus"], "vision"),
])
def test_an_unknown_option_is_refused_by_the_command_it_was_given_to(words, prog, capsys):
    """argparse leaves words no option takes to ``vision`` itself ("vision: error: unrecognized arguments", pointing
    at ``vision --help``); the command they were given to refuses them, and its help is the one named."""
    with pytest.raises(SystemExit) as stop:
        main(words)
    assert stop.value.code == 2
    line = one_line_error(capsys, f"{prog}: error: unrecognized arguments: --bogus", f"(options: {prog} --help)")
    assert line.startswith(prog + ":")


def test_a_bench_error_names_the_bench(capsys):
    """A bench's refusal names the bench (``vision bench guided-filter: error: ...``), not only ``vision bench``."""
    assert main(["bench", "guided-filter", "--sizes", "0"]) == 2
    one_line_error(capsys, "vision bench guided-filter: error:", "--sizes")


@pytest.mark.parametrize("flag, value, says", [("--epochs", "0", ">= 1"), ("--batch", "0", ">= 1"),
                                               ("--crop", "8", ">= 16"), ("--lr", "-1", "> 0"),
                                               ("--upsample-prob", "2", "in [0, 1]")])
def test_train_denoiser_names_the_one_bad_number(flag, value, says, tmp_path, capsys):
    """Each out-of-range training number is refused by name with its value, not in one sentence listing them all."""
    from vision.bundled import asset_path

    out = tmp_path / "w.safetensors"
    assert main(["train-denoiser", "--data", str(asset_path("scenes")), "-o", str(out), flag, value]) == 2
    one_line_error(capsys, f"{flag} {value}: must be {says}")
    assert not out.exists()


@pytest.mark.parametrize("flag", ["--epochs", "--batch-size"])
def test_finetune_names_the_one_bad_count(flag, tmp_path, capsys):
    """``vision finetune`` names the bad count and its value, as every other numeric option, before anything loads."""
    from vision.bundled import asset_path

    out = tmp_path / "run"
    assert main(["finetune", "--task", "depth", "--data", str(asset_path("scenes")), "-o", str(out), flag, "0"]) == 2
    one_line_error(capsys, f"{flag} 0: must be >= 1")
    assert not out.exists()
