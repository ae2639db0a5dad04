"""A full disk at the end of `vision train-denoiser` loses no weights, and the hostile corpus
(tests/hostile/corpus.py: ~40 hostile command lines over every subcommand, run as subprocesses) ends in no
traceback and no timeout."""
from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vision.bundled import asset_path
from vision.pipelines.cli import main

from cli_checks import last_line_error  # noqa: E402


def _tiny(tmp_path, epochs=2):
    data = tmp_path / "scenes"
    if not data.exists():
        shutil.copytree(asset_path("scenes"), data)
    return ["train-denoiser", "--data", str(data), "--epochs", str(epochs), "--steps", "2", "--batch", "2",
            "--crop", "32", "--widths", "4,6,8", "--hidden", "0", "--quiet"]


def _full_disk(monkeypatch, full):
    """Every safetensors write whose path ``full(path)`` picks fails as a full disk does."""
    import safetensors.torch as st

    write = st.save_file

    def save_file(tensors, path, *a, **k):
        if full(Path(path)):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return write(tensors, path, *a, **k)

    monkeypatch.setattr(st, "save_file", save_file)


def _is_output(path: Path) -> bool:  # the atomic temporary of -o w.safetensors
    return path.name.startswith(".w.safetensors.")


def _same(a: dict, b: dict) -> bool:
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_a_full_disk_at_the_final_write_keeps_the_weights_in_the_checkpoint(tmp_path, capsys, monkeypatch):
    out = tmp_path / "w.safetensors"
    argv = [*_tiny(tmp_path), "-o", str(out)]
    with monkeypatch.context() as m:
        _full_disk(m, _is_output)
        assert main(argv) == 1
    line = last_line_error(capsys, "-o", "No space left on device", "w.safetensors.state", "--resume")
    assert "kept in the checkpoint" in line
    assert not out.exists() and not list(tmp_path.glob(".w.safetensors.*"))  # no partial file left behind
    from vision.pipelines.training.denoiser import EXTRA, find_checkpoint

    where, state = find_checkpoint(tmp_path / "w.safetensors.state")
    assert state["epoch"] == 2  # the whole run is in the checkpoint
    kept = {k[5:]: v for k, v in load_file(str(where / EXTRA)).items() if k.startswith("best/")}
    # the disk has space again: --resume writes the weights without training again
    assert main([*argv, "--resume"]) == 0
    assert "resuming" in capsys.readouterr().err
    assert _same(load_file(str(out)), kept)


def test_a_full_disk_for_checkpoint_and_output_rescues_the_weights_beside_it(tmp_path, capsys, monkeypatch):
    out = tmp_path / "w.safetensors"
    argv = [*_tiny(tmp_path, epochs=3), "-o", str(out)]
    saves = []

    def full(path):  # the disk fills during epoch 2's checkpoint; -o's write fails too, the rescue file fits
        if path.name == "trainer.safetensors":
            saves.append(path)
            return len(saves) >= 2
        return _is_output(path)

    with monkeypatch.context() as m:
        _full_disk(m, full)
        assert main(argv) == 1
    line = last_line_error(capsys, "No space left on device", "w.rescued.safetensors", "after epoch 1", "--resume")
    rescued = tmp_path / "w.rescued.safetensors"
    assert rescued.is_file() and not out.exists()
    state = tmp_path / "w.safetensors.state"
    assert not (tmp_path / ".w.safetensors.state.tmp").exists()  # the failed checkpoint gave its space back
    from vision.denoise.flnr import load_flnr, read_metadata

    assert load_flnr(rescued) is not None and read_metadata(rescued)["vision.train.epochs"] == "2"
    # --resume continues from epoch 1's checkpoint and ends the run
    assert main([*argv, "--resume"]) == 0, line
    assert out.is_file() and read_metadata(out)["vision.train.epochs"] == "3"
    assert (state / "checkpoint.json").is_file()


def test_a_checkpoint_that_cannot_be_written_stops_the_run_and_keeps_the_best_weights(tmp_path, capsys, monkeypatch):
    out = tmp_path / "w.safetensors"
    with monkeypatch.context() as m:
        _full_disk(m, lambda path: path.name == "trainer.safetensors")
        assert main([*_tiny(tmp_path, epochs=3), "-o", str(out)]) == 1
    last_line_error(capsys, "checkpoint not written", "No space left on device", "stopped after epoch 1", str(out),
                   "no checkpoint in", "--resume")
    from vision.denoise.flnr import read_metadata

    assert read_metadata(out)["vision.train.epochs"] == "1"


def test_sigterm_and_a_full_disk_rescue_the_weights_beside_the_checkpoint(tmp_path, capsys, monkeypatch):
    """SIGTERM saves a mid-epoch checkpoint (where --resume trains on), so when -o cannot be written the best
    weights so far go to NAME.rescued.safetensors rather than only into the checkpoint."""
    import os
    import signal

    from vision.pipelines.cli import train_denoiser_run as T

    out = tmp_path / "w.safetensors"
    calls, real = {"n": 0}, T.loss_fn

    def sigterm(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:  # the first step of epoch 2
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*a, **k)

    with monkeypatch.context() as m:
        m.setattr(T, "loss_fn", sigterm)
        _full_disk(m, _is_output)
        assert main([*_tiny(tmp_path, epochs=3), "-o", str(out)]) == 1
    last_line_error(capsys, "No space left on device", "w.rescued.safetensors", "after epoch 1", "--resume")
    from vision.denoise.flnr import read_metadata

    assert read_metadata(tmp_path / "w.rescued.safetensors")["vision.train.epochs"] == "1" and not out.exists()


# --------------------------------------------------------------------------- the corpus

SHARDS = 3  # the corpus in three tests, so that a parallel run spreads it over its workers instead of ending on it


def test_the_hostile_corpus_covers_every_command():
    from hostile.corpus import CASES

    assert len(CASES) >= 40
    commands = {c.argv[0] for c in CASES}
    from vision.pipelines.cli import COMMANDS

    assert commands == set(COMMANDS), set(COMMANDS) - commands  # every subcommand has cases


@pytest.mark.slow  # ~60 subprocesses in all, one at a time per shard: about a minute each on 2 cores
@pytest.mark.parametrize("shard", range(SHARDS))
def test_the_hostile_corpus_has_no_traceback_timeout_or_stray_write(tmp_path, shard):
    from hostile.corpus import CASES, run_corpus, table

    report = run_corpus(tmp_path, cases=CASES[shard::SHARDS], workers=1)
    print("\n" + table(report))
    counts, checks = report["counts"], report["checks"]
    assert counts["traceback"] == counts["crash"] == counts["timeout"] == 0, table(report)
    assert checks["writes outside -o"] == checks["inputs changed"] == checks["over the memory bound"] == 0, \
        table(report)
    assert checks["silent NaN/Inf results"] == checks["stale temporary files"] == 0, table(report)
    assert checks["not as expected"] == 0, table(report)
    assert not (tmp_path / "inputs" / "pwned").exists() and not list(tmp_path.glob("case*/pwned"))  # no unpickling
