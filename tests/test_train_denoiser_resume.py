"""vision train-denoiser survives long runs: atomic checkpoints, --resume bit for bit after SIGKILL, SIGTERM and
Ctrl-C, refusals in one line, bf16 autocast on CPU, two CPU processes under accelerate launch."""
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vision.bundled import asset_path
from vision.denoise.flnr import read_metadata

ROOT = Path(__file__).resolve().parents[1]


def _tiny(tmp_path, epochs, steps=3):
    data = tmp_path / "scenes"
    if not data.exists():
        shutil.copytree(asset_path("scenes"), data)
    return ["train-denoiser", "--data", str(data), "--epochs", str(epochs), "--steps", str(steps), "--batch", "2",
            "--crop", "32", "--widths", "4,6,8", "--hidden", "0", "--quiet"]


def _main(args) -> int:
    from vision.pipelines.cli import main

    return main(args)


def _assert_same_weights(a: Path, b: Path) -> None:
    x, y = load_file(str(a)), load_file(str(b))
    assert set(x) == set(y)
    for k in x:
        assert torch.equal(x[k], y[k]), k


def _state(folder: Path) -> dict:
    return json.loads((folder / "checkpoint.json").read_text())["state"]


def _start(args, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "vision.pipelines.cli", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_checkpoint(proc, folder: Path, timeout: float = 120.0) -> None:
    """Poll until the first checkpoint is complete (its manifest is written last, then the folder renamed)."""
    end = time.monotonic() + timeout
    while not (folder / "checkpoint.json").is_file():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "no checkpoint appeared"
        time.sleep(0.002)


@pytest.mark.slow  # a subprocess or the Triton interpreter: over 10 s on 2 cores
def test_resume_after_sigkill_ends_with_the_uninterrupted_weights(tmp_path):
    tiny = _tiny(tmp_path, epochs=3, steps=6)
    full, cut = tmp_path / "full.safetensors", tmp_path / "cut.safetensors"
    assert _main([*tiny, "-o", str(full)]) == 0
    proc = _start([*tiny, "-o", str(cut)], tmp_path)
    _wait_for_checkpoint(proc, tmp_path / "cut.safetensors.state")
    proc.kill()  # SIGKILL: no handler runs
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    from vision.pipelines.training.denoiser import find_checkpoint

    where, state = find_checkpoint(tmp_path / "cut.safetensors.state")
    assert where is not None and 1 <= state["epoch"] < 3, state  # killed in the middle of the run
    assert _main([*tiny, "--resume", "-o", str(cut)]) == 0
    _assert_same_weights(full, cut)
    _assert_same_weights(tmp_path / "full.safetensors.state" / "model.safetensors",
                         tmp_path / "cut.safetensors.state" / "model.safetensors")
    assert read_metadata(cut)["vision.train.val_history"] == read_metadata(full)["vision.train.val_history"]


def test_a_checkpoint_left_mid_write_is_ignored_and_the_last_complete_one_used(tmp_path, monkeypatch):
    from vision.pipelines.cli import train_denoiser_run as T

    tiny = _tiny(tmp_path, epochs=2)
    full, cut = tmp_path / "full.safetensors", tmp_path / "cut.safetensors"
    assert _main([*tiny, "-o", str(full)]) == 0
    calls, real = {"n": 0}, T.loss_fn

    def interrupted(*a, **k):
        calls["n"] += 1
        if calls["n"] == 4:  # the first step of epoch 2 (3 steps per epoch): no checkpoint of this epoch
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(T, "loss_fn", interrupted)
    assert _main([*tiny, "-o", str(cut)]) == 0
    monkeypatch.setattr(T, "loss_fn", real)
    folder = tmp_path / "cut.safetensors.state"
    assert _state(folder)["epoch"] == 1
    saved = tmp_path / "epoch1"
    shutil.copytree(folder, saved)

    def half_written():  # a save killed while writing: the staging folder with a cut-off file, no manifest
        tmp = tmp_path / ".cut.safetensors.state.tmp"
        tmp.mkdir()
        (tmp / "model.safetensors").write_bytes((saved / "model.safetensors").read_bytes()[:100])

    half_written()
    assert _main([*tiny, "--resume", "-o", str(cut)]) == 0
    _assert_same_weights(full, cut)
    assert not (tmp_path / ".cut.safetensors.state.tmp").exists()  # the next save removed it
    # killed between the two renames of a save: the old checkpoint is .NAME.old, the new one is not sealed
    shutil.rmtree(folder)
    shutil.copytree(saved, tmp_path / ".cut.safetensors.state.old")
    half_written()
    cut.unlink()
    assert _main([*tiny, "--resume", "-o", str(cut)]) == 0
    _assert_same_weights(full, cut)
    assert _state(folder)["epoch"] == 2 and not (tmp_path / ".cut.safetensors.state.old").exists()


@pytest.mark.slow  # a subprocess or the Triton interpreter: over 10 s on 2 cores
def test_sigterm_saves_a_checkpoint_exits_143_and_resumes_bit_for_bit(tmp_path):
    tiny = _tiny(tmp_path, epochs=4, steps=6)
    full, cut = tmp_path / "full.safetensors", tmp_path / "cut.safetensors"
    proc = _start([*tiny, "-o", str(cut)], tmp_path)
    _wait_for_checkpoint(proc, tmp_path / "cut.safetensors.state")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    lines = [line for line in err.splitlines() if "SIGTERM" in line]
    assert len(lines) == 1 and lines[0].startswith("stopped by SIGTERM in epoch ") and "--resume" in lines[0], err
    assert cut.is_file() and out == ""
    state = _state(tmp_path / "cut.safetensors.state")
    assert state["epoch"] < 4
    assert _main([*tiny, "-o", str(full)]) == 0
    assert _main([*tiny, "--resume", "-o", str(cut)]) == 0
    _assert_same_weights(full, cut)


def test_ctrl_c_finishes_the_step_saves_mid_epoch_and_exits_130(tmp_path, monkeypatch, capsys):
    from vision.pipelines.cli import train_denoiser_run as T

    tiny = _tiny(tmp_path, epochs=2)
    full, cut = tmp_path / "full.safetensors", tmp_path / "cut.safetensors"
    calls, real = {"n": 0}, T.loss_fn

    def ctrl_c(*a, **k):
        calls["n"] += 1
        if calls["n"] == 5:  # the second step of epoch 2
            os.kill(os.getpid(), signal.SIGINT)
        return real(*a, **k)

    monkeypatch.setattr(T, "loss_fn", ctrl_c)
    assert _main([*tiny, "-o", str(cut)]) == 130
    monkeypatch.setattr(T, "loss_fn", real)
    assert calls["n"] == 5  # the step in which it came was finished, no other was begun
    state = _state(tmp_path / "cut.safetensors.state")
    assert (state["epoch"], state["step"]) == (1, 2)
    assert "stopped by Ctrl-C in epoch 2" in capsys.readouterr().err
    assert _main([*tiny, "--resume", "-o", str(cut)]) == 0
    assert _main([*tiny, "-o", str(full)]) == 0
    _assert_same_weights(full, cut)


def test_other_settings_or_no_checkpoint_are_refused_in_one_line(tmp_path, capsys):
    tiny = _tiny(tmp_path, epochs=1, steps=1)
    out = tmp_path / "w.safetensors"
    assert _main([*tiny, "--resume", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--resume: no complete checkpoint in" in err and not out.exists()
    assert _main([*tiny, "-o", str(out)]) == 0
    capsys.readouterr()
    crop = ["48" if a == "32" else a for a in tiny]
    assert _main([*crop, "--batch", "3", "--resume", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("error") == 1 and "FLNR:" not in err, err  # refused before the model is built
    err = err.splitlines()[-1]
    assert "other settings" in err, err
    assert "--batch 3 here, 2 there" in err and "--crop 48 here, 32 there" in err
    assert _main([*tiny, "--widths", "4,6,10", "--resume", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "model widths [4, 6, 10] here, [4, 6, 8] there" in err
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert _main([*tiny, "--checkpoint-dir", str(other), "-o", str(out)]) == 2
    assert "is not a train-denoiser checkpoint" in capsys.readouterr().err
    assert (other / "notes.txt").read_text() == "mine"


def test_bf16_autocast_on_cpu_trains_with_a_finite_loss(tmp_path, capsys):
    tiny = _tiny(tmp_path, epochs=1, steps=2)
    out = tmp_path / "w.safetensors"
    assert _main([*tiny, "--mixed-precision", "bf16", "--grad-accum", "2", "--ema", "0.9", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    loss = float(err.split("epoch 1: train loss ")[1].split(",")[0])
    assert math.isfinite(loss) and loss > 0
    assert "bf16 mixed precision" in err
    meta = read_metadata(out)
    assert meta["vision.train.mixed_precision"] == "bf16"
    assert "--mixed-precision bf16" in meta["vision.train.command"] and "--grad-accum 2" in meta["vision.train.command"]
    assert all(torch.isfinite(t).all() for t in load_file(str(out)).values())


DDP_DRIVER = r"""
import sys
import torch
from safetensors.torch import save_file
import vision.pipelines.training.denoiser as D

real = D._same_on_every_rank
def spy(acc, modules):  # every rank's final weights, for the test to compare (the CLI writes rank 0's only)
    save_file({k: v.detach().contiguous() for k, v in modules[0].state_dict().items()},
              f"{sys.argv[1]}/rank{acc.process_index}.safetensors")
    return real(acc, modules)
D._same_on_every_rank = spy
from vision.pipelines.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow  # a subprocess or the Triton interpreter: over 10 s on 2 cores
def test_two_cpu_processes_end_with_identical_weights(tmp_path):
    driver = tmp_path / "driver.py"
    driver.write_text(DDP_DRIVER)
    out = tmp_path / "w.safetensors"
    tiny = _tiny(tmp_path, epochs=2, steps=2)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # (accelerate 1.16 runs `launch --cpu --num_processes 2` as one process: two CPU processes are --multi_gpu
    # on a machine without a visible GPU, DDP over gloo, as in test_finetune)
    env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
           str(driver), str(tmp_path), *tiny, "--ema", "0.5", "-o", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "identical on 2 processes" in proc.stdout
    _assert_same_weights(tmp_path / "rank0.safetensors", tmp_path / "rank1.safetensors")
    meta = read_metadata(out)
    assert meta["vision.train.processes"] == "2" and meta["vision.train.epochs"] == "2"
    assert proc.stderr.count("epoch 1: train loss") == 1  # only the main process reports
    state = _state(tmp_path / "w.safetensors.state")
    assert state["settings"]["processes"] == 2 and state["epoch"] == 2
    assert load_file(str(tmp_path / "w.safetensors.state" / "trainer.safetensors"))["sampler"].shape[0] == 2
