"""``vision denoise`` on EXR frames: layouts, robustness (skip, atomic, inputs safe, NaN, errors), shards."""
import shutil
import sys

import numpy as np
import pytest

from vision.bundled import asset_path
from vision.data import read_exr, read_frame, write_exr, write_frame
from vision.data.exr import read_exr_header
from vision.data.render_layers import read_render_file
from vision.denoise import metrics as M
from vision.pipelines.cli import main as cli_main
from vision.pipelines.cli.denoise_io import expand_frames, parse_shard, shard

SCENE = "scene_00001"


def main(argv):
    """``vision ARGV``; a ``denoise`` without ``--model`` gets ``--model flr``: these tests compare the command with
    ``denoise()``'s FLR (the command's own default is FLNR, tested on its own below)."""
    if argv[:1] == ["denoise"] and "--model" not in argv and "--help" not in argv:
        argv = [*argv, "--model", "flr"]
    return cli_main(argv)


@pytest.fixture
def seq(tmp_path):
    """The bundled frames of one scene, copied (never written next to the assets)."""
    d = tmp_path / "frames"
    d.mkdir()
    for k in range(2):
        shutil.copy(asset_path("scenes", SCENE, f"frame_{k:02d}.exr"), d / f"frame_{k:02d}.exr")
    return d


def _rgb(path):
    ch = read_exr(path, ["R", "G", "B"])
    return np.stack([ch[c] for c in "RGB"], -1)


def test_help_has_an_example(capsys):
    with pytest.raises(SystemExit):
        main(["denoise", "--help"])
    text = capsys.readouterr().out
    assert "examples:" in text and "vision denoise" in text and "--shard" in text


def test_denoises_render_scenes_frames_and_skips_done(seq, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["denoise", str(seq / "frame_*.exr"), "-o", str(out), "-q"]) == 0
    for k in range(2):
        d = read_frame(seq / f"frame_{k:02d}.exr", ["color", "reference"])
        res = _rgb(out / f"frame_{k:02d}.exr")
        assert M.psnr(res, d["reference"]) >= M.psnr(d["color"], d["reference"]) + 12
    assert not list(out.glob(".*"))  # no temporary files left
    mtime = (out / "frame_00.exr").stat().st_mtime_ns
    capsys.readouterr()
    assert main(["denoise", str(seq / "frame_*.exr"), "-o", str(out), "-q"]) == 0
    assert "skipped 2" in capsys.readouterr().out
    assert (out / "frame_00.exr").stat().st_mtime_ns == mtime


def test_never_overwrites_an_input(seq, capsys):
    before = (seq / "frame_00.exr").read_bytes()
    assert main(["denoise", str(seq / "frame_00.exr"), "-o", str(seq), "-q"]) == 2
    assert "overwrite an input" in capsys.readouterr().err
    assert (seq / "frame_00.exr").read_bytes() == before
    # with a suffix the same folder is fine
    assert main(["denoise", str(seq / "frame_00.exr"), "-o", str(seq), "--suffix", "_dn", "-q"]) == 0
    assert (seq / "frame_00_dn.exr").is_file()


def test_separate_buffer_files_match_the_multilayer_frame(seq, tmp_path):
    d = read_frame(seq / "frame_00.exr")
    sep = tmp_path / "sep"
    sep.mkdir()
    write_frame(sep / "beauty.0007.exr", {"color": d["color"]})
    for name in ("albedo", "normal", "depth", "ao", "emission"):
        write_frame(sep / f"{name}.0007.exr", {name: d[name]})
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["denoise", str(seq / "frame_00.exr"), "-o", str(a), "-q"]) == 0
    args = ["denoise", str(sep / "beauty.0007.exr"), "-o", str(b), "-q"]
    for name in ("albedo", "normal", "depth", "ao", "emission"):
        args += [f"--{name}", str(sep / f"{name}.{{frame}}.exr")]
    assert main(args) == 0
    np.testing.assert_allclose(_rgb(b / "beauty.0007.exr"), _rgb(a / "frame_00.exr"), atol=1e-5)


def test_blender_channel_names(seq, tmp_path):
    d = read_frame(seq / "frame_00.exr")
    ch = {}
    for pas, field, comps in [("Combined", "color", "RGB"), ("Denoising Albedo", "albedo", "RGB"),
                              ("Denoising Normal", "normal", "XYZ"), ("Denoising Depth", "depth", "Z"),
                              ("Emit", "emission", "RGB")]:
        for k, c in enumerate(comps):
            ch[f"ViewLayer.{pas}.{c}"] = np.ascontiguousarray(d[field][..., k])
    write_exr(tmp_path / "blend.exr", ch)
    assert main(["denoise", str(tmp_path / "blend.exr"), "-o", str(tmp_path / "o"), "-q"]) == 0
    # the denoised RGB replaces the beauty where it was read from: what a compositor reads as the image
    got = read_exr(tmp_path / "o" / "blend.exr")
    res = np.stack([got[f"ViewLayer.Combined.{c}"] for c in "RGB"], -1)
    assert M.psnr(res, d["reference"]) >= M.psnr(d["color"], d["reference"]) + 12
    assert np.array_equal(got["ViewLayer.Denoising Depth.Z"], ch["ViewLayer.Denoising Depth.Z"])


def test_nan_samples_are_repaired_with_a_warning(seq, tmp_path, capsys):
    d = read_frame(seq / "frame_00.exr")
    color = d["color"].copy()
    color[3, 4] = np.nan
    color[50, 60, 0] = np.inf
    d["color"] = color
    write_frame(tmp_path / "bad.exr", d)
    assert main(["denoise", str(tmp_path / "bad.exr"), "-o", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "4 NaN/Inf" in err and "bad.exr" in err
    assert np.isfinite(_rgb(tmp_path / "o" / "bad.exr")).all()


@pytest.mark.parametrize("case, match", [
    ("missing", "does not exist"),
    ("size", "64x64"),
    ("albedo", "albedo must lie in"),  # negative albedo is a wrong buffer (above 1 is a renderer's convention)
    ("nocolor", "no colour channels"),
    ("noframes", "no files match"),
    ("shard", "--shard"),
])
def test_clear_errors(seq, tmp_path, capsys, case, match):
    d = read_frame(seq / "frame_00.exr")
    frame = str(seq / "frame_00.exr")
    extra = []
    if case == "missing":
        extra = ["--albedo", str(tmp_path / "albedo.{frame}.exr")]
    elif case == "size":
        write_frame(tmp_path / "small.exr", {"normal": np.ascontiguousarray(d["normal"][::2, ::2])})
        extra = ["--normal", str(tmp_path / "small.exr")]
    elif case == "albedo":
        write_frame(tmp_path / "f.exr", {"color": d["color"], "albedo": d["albedo"] - 0.5, "normal": d["normal"]})
        frame = str(tmp_path / "f.exr")
    elif case == "nocolor":
        write_frame(tmp_path / "f.exr", {"albedo": d["albedo"]})
        frame = str(tmp_path / "f.exr")
    elif case == "noframes":
        frame = str(tmp_path / "none_*.exr")
    elif case == "shard":
        extra = ["--shard", "2/2"]
    assert main(["denoise", frame, "-o", str(tmp_path / "o"), "-q", *extra]) == 2
    assert match in capsys.readouterr().err
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").iterdir())


def test_shards_split_a_sequence_without_overlap(tmp_path):
    names = [tmp_path / f"f_{k}.exr" for k in (10, 9, 1, 2, 100, 3, 4)]
    for n in names:
        n.write_bytes(b"")
    frames = expand_frames([str(tmp_path / "f_*.exr")])
    assert [f.name for f in frames] == ["f_1.exr", "f_2.exr", "f_3.exr", "f_4.exr", "f_9.exr", "f_10.exr",
                                        "f_100.exr"]
    parts = [shard(frames, i, 3) for i in range(3)]
    assert sum(parts, []) == frames and [len(p) for p in parts] == [2, 2, 3]
    (tmp_path / "f[1].exr").write_bytes(b"")  # a literal name wins over the glob it also is (f1.exr, f_1.exr...)
    (tmp_path / "f1.exr").write_bytes(b"")
    assert [f.name for f in expand_frames([str(tmp_path / "f[1].exr")])] == ["f[1].exr"]
    assert [f.name for f in expand_frames([str(tmp_path / "f[0-9].exr")])] == ["f1.exr"]
    assert parse_shard("1/3") == (1, 3)
    for bad in ("3/3", "a/b", "1/0"):
        with pytest.raises(ValueError):
            parse_shard(bad)


def test_shard_runs_and_half_resolution_colour(seq, tmp_path):
    out = tmp_path / "o"
    assert main(["denoise", str(seq / "frame_*.exr"), "-o", str(out), "-q", "--shard", "1/2"]) == 0
    assert [p.name for p in out.iterdir()] == ["frame_01.exr"]
    # colour at half resolution in the frame, guides from full-resolution separate files
    d = read_frame(seq / "frame_00.exr")
    h, w, _ = d["color"].shape
    write_frame(tmp_path / "half.exr", {"color": np.ascontiguousarray(
        d["color"].reshape(h // 2, 2, w // 2, 2, 3).mean((1, 3)))})
    write_frame(tmp_path / "g.exr", {k: d[k] for k in ("albedo", "normal", "depth", "ao", "emission")})
    args = ["denoise", str(tmp_path / "half.exr"), "-o", str(out), "-q"]
    for k in ("albedo", "normal", "depth", "ao", "emission"):
        args += [f"--{k}", str(tmp_path / "g.exr")]
    assert main(args) == 0
    res = _rgb(out / "half.exr")
    assert res.shape == (h, w, 3)
    assert M.psnr(res, d["reference"]) >= M.psnr(d["color"], d["reference"]) + 10


def test_phase_of_half_resolution_colour(seq, tmp_path, capsys):
    """--phase 1,0: colour pixel (i, j) is the full-resolution sample (2i + 1, 2j); the file equals
    denoise(..., phase=(1, 0)), and a bad phase stops with an error naming the frame."""
    from vision.denoise import denoise

    d = read_frame(seq / "frame_00.exr")
    bufs = ("albedo", "normal", "depth", "ao", "emission")
    write_frame(tmp_path / "half.exr", {"color": np.ascontiguousarray(d["color"][1::2, ::2])})
    write_frame(tmp_path / "g.exr", {k: d[k] for k in bufs})
    args = ["denoise", str(tmp_path / "half.exr"), "-q"] + sum([[f"--{k}", str(tmp_path / "g.exr")] for k in bufs], [])
    assert main(args + ["-o", str(tmp_path / "o"), "--phase", "1,0"]) == 0
    want = denoise(np.ascontiguousarray(d["color"][1::2, ::2]), **{k: d[k] for k in bufs}, phase=(1, 0), model="flr")
    np.testing.assert_allclose(_rgb(tmp_path / "o" / "half.exr"), want, rtol=1e-6, atol=1e-6)
    assert read_exr_header(tmp_path / "o" / "half.exr")["vision.denoiser"].endswith(" phase=1,0")
    for bad, match in (("2,0", "phase (2, 0) is outside the 2 x 2 block"), ("x", "--phase must be DY,DX")):
        assert main(args + ["-o", str(tmp_path / "p"), "--phase", bad]) == 2
        assert match in capsys.readouterr().err


def test_failed_write_leaves_no_partial_output(seq, tmp_path, monkeypatch):
    from vision.pipelines.cli import denoise_frames

    def boom(path, channels, header=None):
        path.write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(denoise_frames, "write_exr", boom)
    # an OS error is one line and exit 2 (vision.pipelines.cli.main), not a traceback, and leaves nothing
    assert main(["denoise", str(seq / "frame_00.exr"), "-o", str(tmp_path / "o"), "-q"]) == 2
    assert not (tmp_path / "o").exists() or list((tmp_path / "o").iterdir()) == []


def test_demo_section_writes_a_comparison(tmp_path):
    """FLR and FLNR images per scene, far closer to the 2048-spp reference than the 1-spp input; with pyoidn
    installed, an OIDN panel in the comparison."""
    from vision.io import read_image
    from vision.pipelines.demos import denoise as demo_denoise

    written = demo_denoise.run(tmp_path, "cpu")
    assert len(written) == 3 * len(demo_denoise.SCENES) and all(p.is_file() for p in written)
    for scene in demo_denoise.SCENES:
        d = read_frame(asset_path("scenes", scene, "frame_00.exr"), ["color", "reference"])
        ref, noisy = M.tonemap(d["reference"]), M.tonemap(d["color"])
        for model in ("flr", "flnr"):  # the 8-bit images are far closer to the reference than the 1-spp input
            out = read_image(tmp_path / f"{scene}_{model}.png")
            assert np.mean((out - ref) ** 2) < 0.05 * np.mean((noisy - ref) ** 2), (scene, model)
        assert not np.array_equal(read_image(tmp_path / f"{scene}_flr.png"), read_image(tmp_path / f"{scene}_flnr.png"))
    comp = read_image(tmp_path / f"{demo_denoise.SCENES[0]}_comparison.png")
    panels = 5 if _has_pyoidn() else 4  # input, FLR, FLNR, (OIDN,) reference
    assert comp.shape[1] >= panels * 2 * 128


def _has_pyoidn() -> bool:
    try:
        import pyoidn  # noqa: F401
    except ImportError:
        return False
    return True


def test_demo_without_pyoidn_says_in_the_picture_how_to_get_it(tmp_path, monkeypatch, capsys):
    from vision.io import read_image
    from vision.kernels.runtime import verbosity
    from vision.pipelines.demos import denoise as demo_denoise

    monkeypatch.setitem(sys.modules, "pyoidn", None)  # not installed
    assert demo_denoise.oidn({}) is None
    monkeypatch.setattr(demo_denoise, "SCENES", demo_denoise.SCENES[:1])
    with verbosity("info"):
        demo_denoise.run(tmp_path, "cpu")
    assert "pip install pyoidn" in capsys.readouterr().err  # said on the terminal too
    comp = read_image(tmp_path / f"{demo_denoise.SCENES[0]}_comparison.png")
    rows = 2 * 128  # the panels: input, FLR, FLNR, reference, each 256 px high under a label band
    assert comp.shape[1] >= 4 * rows
    below = comp[-30:]  # the footer line under the panels: dark text on white
    assert below.min() < 0.3 and (comp[-30:, -8:] == 1).all()
    if _has_pyoidn():  # with pyoidn the same picture has no footer: it is the line that makes the difference
        monkeypatch.delitem(sys.modules, "pyoidn")
        demo_denoise.run(tmp_path / "with", "cpu")
        other = read_image(tmp_path / "with" / f"{demo_denoise.SCENES[0]}_comparison.png")
        assert other.shape[0] < comp.shape[0] and other.shape[1] > comp.shape[1]


def test_temporal_flag_reduces_flicker(seq, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["denoise", str(seq / "frame_*.exr"), "-o", str(a), "-q"]) == 0
    assert main(["denoise", str(seq / "frame_*.exr"), "-o", str(b), "-q", "--temporal", "--static-camera"]) == 0
    per = [_rgb(a / f"frame_{k:02d}.exr") for k in range(2)]
    tem = [_rgb(b / f"frame_{k:02d}.exr") for k in range(2)]
    assert M.flicker(tem) <= 0.52 * M.flicker(per)
    np.testing.assert_allclose(tem[0], per[0], atol=1e-5)  # the first frame has no history
    # a re-run that skips frame 0 still reads it into the history: frame 1 comes out the same
    (b / "frame_01.exr").unlink()
    assert main(["denoise", str(seq / "frame_*.exr"), "-o", str(b), "-q", "--temporal", "--static-camera"]) == 0
    np.testing.assert_allclose(_rgb(b / "frame_01.exr"), tem[1], atol=1e-6)


def test_temporal_with_a_phase(seq, tmp_path):
    """--temporal --phase 1,0 on two 1/2-resolution frames: the outputs are TemporalFLR's with that phase."""
    from vision.denoise import TemporalFLR

    bufs = ("albedo", "normal", "depth", "ao", "emission")
    half, frames = tmp_path / "half", [read_frame(seq / f"frame_{k:02d}.exr") for k in range(2)]
    half.mkdir()
    for k, d in enumerate(frames):
        write_frame(half / f"h_{k:02d}.exr", {"color": np.ascontiguousarray(d["color"][1::2, ::2])})
        write_frame(tmp_path / f"g_{k:02d}.exr", {b: d[b] for b in bufs})
    args = ["denoise", str(half / "h_*.exr"), "-q", "--temporal", "--phase", "1,0", "-o", str(tmp_path / "o")]
    args += sum([[f"--{b}", str(tmp_path / "g_{frame}.exr")] for b in bufs], [])
    assert main(args) == 0
    tf = TemporalFLR()
    for k, d in enumerate(frames):
        want = tf(np.ascontiguousarray(d["color"][1::2, ::2]), phase=(1, 0), **{b: d[b] for b in bufs})
        np.testing.assert_allclose(_rgb(tmp_path / "o" / f"h_{k:02d}.exr"), want, rtol=1e-6, atol=1e-6)


def test_model_flnr_with_bundled_and_given_weights(seq, tmp_path, capsys):
    from vision.denoise import denoise
    from vision.denoise.flnr import FLNR

    out = tmp_path / "flnr"
    assert main(["denoise", str(seq / "frame_00.exr"), "-o", str(out), "--model", "flnr", "-q"]) == 0
    d = read_frame(seq / "frame_00.exr")
    want = denoise(d["color"], **{k: d[k] for k in ("albedo", "normal", "depth", "ao", "emission", "position")},
                   model="flnr")
    np.testing.assert_allclose(_rgb(out / "frame_00.exr"), want, rtol=1e-5, atol=1e-6)
    w = FLNR(widths=(4, 6, 8)).save(tmp_path / "w.safetensors")
    assert main(["denoise", str(seq / "frame_00.exr"), "-o", str(tmp_path / "w"), "--model", "flnr",
                 "--weights", str(w), "-q"]) == 0
    capsys.readouterr()
    # FLNR denoises the temporal history too; only the static-camera filter for 1/u-resolution colour is FLR's
    assert main(["denoise", str(seq / "frame_00.exr"), "-o", str(tmp_path / "t"), "--model", "flnr",
                 "--temporal", "--phase", "0,0", "-q"]) == 2
    assert "--model flr" in capsys.readouterr().err


def test_default_model_is_flnr_also_with_temporal(seq, tmp_path, capsys):
    """FLNR is ahead of FLR on every evaluation family (BENCHMARKS.md), so the command runs it unless told
    otherwise, also on a temporal history."""
    from vision.denoise import denoise

    d = read_frame(seq / "frame_00.exr")
    g = {k: d[k] for k in ("albedo", "normal", "depth", "ao", "emission")}
    assert cli_main(["denoise", str(seq / "frame_00.exr"), "-o", str(tmp_path / "a"), "-q"]) == 0
    np.testing.assert_allclose(_rgb(tmp_path / "a" / "frame_00.exr"), denoise(d["color"], **g, model="flnr"),
                               rtol=1e-5, atol=1e-5)
    assert read_exr_header(tmp_path / "a" / "frame_00.exr")["vision.denoiser"].startswith("flnr")
    assert cli_main(["denoise", str(seq / "frame_00.exr"), "-o", str(tmp_path / "t"), "-q", "--temporal",
                     "--static-camera"]) == 0
    assert read_exr_header(tmp_path / "t" / "frame_00.exr")["vision.denoiser"].startswith("flnr")


def test_denoising_commands_let_idle_openmp_threads_sleep():
    """`vision denoise`, `vision bench denoise` and `denoise-sequences` set OMP_WAIT_POLICY=PASSIVE before torch
    loads (FLNR's numba stages share the cores with PyTorch's OpenMP workers), other commands do not, and a user's
    setting wins."""
    import os
    import subprocess
    import sys

    code = ("import os, sys; from vision.pipelines.cli import tune_for_denoising; tune_for_denoising(sys.argv[1:]); "
            "print(os.environ.get('OMP_WAIT_POLICY'))")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}

    def policy(*words, **extra):
        run = subprocess.run([sys.executable, "-c", code, *words], env=dict(env, **extra), capture_output=True,
                             text=True, check=True)
        return run.stdout.strip()

    assert policy("denoise", "in.exr") == "PASSIVE"
    assert policy("bench", "denoise", "--frames", "m.json") == "PASSIVE"
    assert policy("bench", "denoise-sequences", "seq") == "PASSIVE"  # its seconds per frame are the command's
    assert policy("finetune") == "None"
    assert policy("bench", "guided-filter") == "None"
    assert policy("denoise", OMP_WAIT_POLICY="ACTIVE") == "ACTIVE"


def test_huge_scale_and_frames_over_the_pixel_limit_are_refused_in_one_line(seq, tmp_path, capsys, monkeypatch):
    frame = str(seq / "frame_00.exr")
    assert main(["denoise", frame, "-o", str(tmp_path / "a"), "-q", "--scale", "100000000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "frame_00.exr" in err[0] and "scale must be at most the frame's larger side (128" in err[0]
    monkeypatch.setenv("VISION_MAX_PIXELS", "1000")  # the frame is 128 x 128: refused from its header
    assert main(["denoise", frame, "-o", str(tmp_path / "b"), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "frame_00.exr" in err[0] and "over the limit" in err[0]
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_every_part_of_a_multi_part_exr_and_every_buffer_file_is_held_to_the_pixel_limit(tmp_path, capsys,
                                                                                         monkeypatch):
    """The readers decode every part of a file: a second part over the pixel limit is refused from the headers,
    as a first one is, and so is a buffer file; one line naming the file and its size, before anything is made."""
    import OpenEXR

    from vision.io import check_exr_header

    def part(name, size, names):  # the parts of a file share one display window: the larger part's
        return OpenEXR.Part({"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage,
                             "displayWindow": (np.array([0, 0], np.int32), np.array([15, 15], np.int32))},
                            {n: np.full((size, size), 0.5, np.float32) for n in names}, name=name)

    guides = [f"albedo.{c}" for c in "RGB"] + [f"normal.{c}" for c in "XYZ"]
    OpenEXR.File([part("beauty", 8, "RGB"), part("aovs", 16, guides)]).write(str(tmp_path / "mp.exr"))
    write_exr(tmp_path / "small.exr", {c: np.full((8, 8), 0.5, np.float32) for c in "RGB"})
    write_exr(tmp_path / "albedo.exr", {f"albedo.{c}": np.full((16, 16), 0.5, np.float32) for c in "RGB"})
    monkeypatch.setenv("VISION_MAX_PIXELS", "100")  # 8 x 8 = 64 passes; 16 x 16 = 256 does not
    for argv, name in (([str(tmp_path / "mp.exr")], "mp.exr"),
                       ([str(tmp_path / "small.exr"), "--albedo", str(tmp_path / "albedo.exr"), "--allow-no-guides"],
                        "albedo.exr")):
        out = tmp_path / f"o_{name}"
        assert main(["denoise", *argv, "-o", str(out), "-q"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{name}: the image is 16x16 = 0 MP, over the limit" in err[0], err
        assert not out.exists()
    with pytest.raises(ValueError, match=r"mp\.exr: the image is 16x16"):
        check_exr_header(tmp_path / "mp.exr")  # as vision restore-structure checks an EXR
    with pytest.raises(ValueError, match=r"mp\.exr: the image is 16x16"):  # and the library's reader
        read_render_file(tmp_path / "mp.exr")


@pytest.mark.parametrize("option, value, needs", [
    ("--radius", "0", "an integer >= 1"), ("--radius", "-2", "an integer >= 1"), ("--radius", "2.5", "an integer"),
    ("--scale", "0", "an integer >= 1"), ("--tile", "-1", "an integer >= 0"), ("--max-history", "0", "an integer >= 1"),
    ("--warmup", "-1", "an integer >= 0"), ("--spp", "0.5", "a number >= 1"), ("--spp", "nan", "a finite number"),
    ("--eps", "0", "a number > 0"), ("--eps", "inf", "a finite number"),
])
def test_numbers_out_of_range_are_refused_while_the_command_line_is_parsed(seq, tmp_path, capsys, option, value,
                                                                            needs):
    """One line naming the option, exit 2, before any frame is read (a missing frame is not what is reported) and
    with no output folder made; the ranges are the library's (denoise() takes radius, scale and tile >= 1, tile 0
    here meaning no tiles)."""
    for frame in (seq / "frame_00.exr", tmp_path / "missing.exr"):
        with pytest.raises(SystemExit) as stop:
            cli_main(["denoise", str(frame), "-o", str(tmp_path / "o"), "-q", "--model", "flr", option, value])
        err = capsys.readouterr().err.strip().splitlines()
        assert stop.value.code == 2 and len(err) == 1, err
        assert f"argument {option}: must be {needs}, got {value}" in err[0], err
        assert not (tmp_path / "o").exists()


def test_an_output_name_too_long_for_its_temporary_file_is_refused_before_any_work(tmp_path, capsys):
    """A 247-character frame name: the output fits the file system's 255 bytes, its temporary name beside it would
    not. One line naming the frame, exit 2, before the frame is read or the output folder made."""
    frame = tmp_path / ("x" * 247 + ".exr")
    write_exr(frame, {c: np.full((8, 8), 0.5, np.float32) for c in "RGB"})
    code = cli_main(["denoise", str(frame), "-o", str(tmp_path / "out"), "--model", "flr", "-q", "--allow-no-guides"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "is too long (251 bytes; with the temporary name it is written under first, 265 > 255)" in err[0]
    assert not (tmp_path / "out").exists()
