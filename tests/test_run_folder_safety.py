"""Run folders are untrusted input: no write through a symbolic link, checkpoints that a kill leaves
whole, one run per folder, and `vision denoise` leaves no temporary files after SIGTERM or a kill."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from test_finetune import Crop, tiny_cfg

from vision.bundled import asset_path
from vision.pipelines.cli import main


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def _finetune(run, *extra):
    return main(["finetune", "--task", "depth", "--data", str(asset_path("scenes")), "-o", str(run), "--resume",
                 "--img-size", "32", "--epochs", "1", "--quiet", *extra])


@pytest.mark.parametrize("name", ["config.json", "metrics.jsonl", "previews", "README.md", "state"])
def test_a_symlink_in_the_run_folder_is_refused_and_its_target_untouched(tmp_path, capsys, name):
    victim = tmp_path / "victim"
    if name in ("previews", "state"):
        victim.mkdir()
        (victim / "keep.txt").write_text("mine")
    else:
        victim.write_text("mine")
    run = tmp_path / "run"
    run.mkdir()
    (run / name).symlink_to(victim)
    assert _finetune(run) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and name in err and "-o" in err and "symbolic link" in err
    if victim.is_dir():
        assert [p.name for p in victim.iterdir()] == ["keep.txt"]
    else:
        assert victim.read_text() == "mine"


def test_a_link_inside_previews_is_refused(tmp_path):
    from vision.outputs import in_run

    (tmp_path / "previews").mkdir()
    (tmp_path / "previews" / "epoch_001.png").symlink_to(tmp_path.parent / "elsewhere.png")
    with pytest.raises(ValueError, match="epoch_001.png.*symbolic link"):
        in_run(tmp_path, "previews/epoch_001.png")
    assert in_run(tmp_path, "previews/epoch_002.png") == tmp_path / "previews" / "epoch_002.png"


def test_a_second_run_into_the_same_folder_is_refused(tmp_path, capsys):
    from vision.outputs import run_lock

    run = tmp_path / "run"
    run.mkdir()
    with run_lock(run, command="vision finetune"):  # another run holds the folder
        assert _finetune(run) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "in use by another vision finetune run" in err


def _weights(run):
    from safetensors.torch import load_file

    return load_file(str(run / "model.safetensors"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A 2-epoch run without interruption, and a run stopped after epoch 1 (copied by each test)."""
    import torch

    from vision.pipelines.training.finetune import train

    base = tmp_path_factory.mktemp("runs")
    data = Crop("depth")
    quiet = dict(train_set=data, val_set=data, progress=False, log=lambda *a: None)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # set up before the per-test one_thread fixture: one thread is faster here too
    try:
        train(tiny_cfg(epochs=2), base / "whole", **quiet)
        train(tiny_cfg(epochs=2, stop_after=1), base / "one", **quiet)
    finally:
        torch.set_num_threads(threads)
    return base, quiet


def _resume(runs, tmp_path, damage):
    from vision.pipelines.training.finetune import train

    base, quiet = runs
    run = tmp_path / "run"
    shutil.copytree(base / "one", run)
    damage(run)
    history = train(tiny_cfg(epochs=2), run, resume=True, **quiet)
    return run, history


def _equal(a, b):
    return set(a) == set(b) and all((a[k] == b[k]).all() for k in a)


@pytest.mark.slow
def test_a_killed_save_leaves_a_staging_folder_that_resume_ignores(runs, tmp_path):
    def damage(run):  # killed while writing the epoch-2 checkpoint: a staging folder, its optimizer.bin empty
        shutil.copytree(run / "state", run / ".state.tmp")
        (run / ".state.tmp" / "checkpoint.json").unlink()
        (run / ".state.tmp" / "optimizer.bin").write_bytes(b"")

    run, history = _resume(runs, tmp_path, damage)
    assert [h["epoch"] for h in history] == [1, 2]
    assert _equal(_weights(run), _weights(runs[0] / "whole"))  # the same as one uninterrupted run
    assert not (run / ".state.tmp").exists()


def test_a_kill_between_the_two_renames_resumes_from_the_old_folder(runs, tmp_path):
    run, history = _resume(runs, tmp_path, lambda run: (run / "state").rename(run / ".state.old"))
    assert [h["epoch"] for h in history] == [1, 2]
    assert _equal(_weights(run), _weights(runs[0] / "whole"))
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2  # the checkpoint's history, not a repeated line


KILL = """
import os, signal, sys
sys.path.insert(0, sys.argv[1])
import torch
torch.set_num_threads(1)
from test_finetune import Crop, tiny_cfg
from vision.pipelines.training import checkpoint
from vision.pipelines.training.finetune import train
count, rename = [0], os.rename
def killing_rename(a, b):
    count[0] += 1
    if count[0] == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)
    rename(a, b)
checkpoint.os.rename = killing_rename
data = Crop("depth")
train(tiny_cfg(epochs=2), sys.argv[2], train_set=data, val_set=data, progress=False, log=lambda *a: None)
"""


@pytest.mark.slow  # real SIGKILLs of a training subprocess
@pytest.mark.parametrize("at", [2, 3])  # epoch 2's save: before the old checkpoint is moved aside / between renames
def test_sigkill_while_publishing_then_resume_equals_an_uninterrupted_run(runs, tmp_path, at):
    from pathlib import Path

    from vision.pipelines.training.finetune import train

    run = tmp_path / "run"
    res = subprocess.run([sys.executable, "-c", KILL, str(Path(__file__).parent), str(run), str(at)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == -signal.SIGKILL, res.stderr
    history = train(tiny_cfg(epochs=2), run, resume=True, **runs[1])  # the lock died with the process
    assert [h["epoch"] for h in history] == [1, 2]
    assert _equal(_weights(run), _weights(runs[0] / "whole"))


def test_a_damaged_checkpoint_is_refused_in_one_line(runs, tmp_path):
    def damage(run):
        (run / "state" / "optimizer.bin").write_bytes(b"")

    with pytest.raises(ValueError, match=r"state is not a complete checkpoint .*optimizer.bin has 0 bytes") as err:
        _resume(runs, tmp_path, damage)
    assert "\n" not in str(err.value)


# ---- vision denoise: temporary files

def _frames(tmp_path):
    d = tmp_path / "frames"
    d.mkdir()
    shutil.copy(asset_path("scenes", "scene_00001", "frame_00.exr"), d / "frame_00.exr")
    return d


def test_denoise_removes_stale_temporary_files_of_its_frames_only(tmp_path):
    frames, out = _frames(tmp_path), tmp_path / "out"
    out.mkdir()
    stale = out / ".frame_00.0123abcd.tmp.exr"
    keep = [out / ".frame_00.89abcdef.tmp.exr",  # recent: maybe another run's, being written
            out / ".other.0123abcd.tmp.exr",      # not a frame of this run
            out / ".frame_00.0123abcdef.tmp.exr",  # not the exact pattern
            out / "frame_00.0123abcd.tmp.exr"]     # not hidden
    for p in [stale, *keep]:
        p.write_bytes(b"partial")
    old = time.time() - 3600
    for p in [stale, *keep[1:]]:
        os.utime(p, (old, old))
    assert main(["denoise", str(frames / "frame_00.exr"), "-o", str(out), "--model", "flr", "-q"]) == 0
    assert not stale.exists() and all(p.exists() for p in keep)


@pytest.mark.slow  # a subprocess or the Triton interpreter: over 10 s on 2 cores
def test_sigterm_during_denoise_exits_143_and_leaves_no_temporary_file(tmp_path):
    frames, out = _frames(tmp_path), tmp_path / "out"
    code = ("import os, signal, sys, time\n"
            "import vision.pipelines.cli.denoise_frames as frames\n"
            "write = frames.write_exr\n"
            "def slow(path, channels, header=None):\n"  # SIGTERM arrives while the temporary file exists
            "    write(path, channels, header)\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    time.sleep(30)\n"
            "frames.write_exr = slow\n"
            "from vision.pipelines.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    res = subprocess.run([sys.executable, "-c", code, "denoise", str(frames / "frame_00.exr"), "-o", str(out),
                          "--model", "flr", "-q"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 128 + signal.SIGTERM, res.stderr
    lines = [ln for ln in res.stderr.strip().splitlines() if "compiling the CPU kernels" not in ln]  # a cold cache
    assert lines == ["vision denoise: terminated (SIGTERM); unfinished outputs removed"]
    assert not out.exists() or not list(out.iterdir())
