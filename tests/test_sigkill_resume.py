"""SIGKILL at random moments of a short `vision finetune`, then `--resume`, ends with the
weights of an uninterrupted run (bit for bit), or at most a one-line refusal that names the damaged file; never a
traceback, never a silent divergence.

Each trial starts the real command in a process of its own (forked from a server that has imported torch, see
tests/hostile/forkserver.py) on a fresh run folder, kills it (SIGKILL: no handler runs) at
a seeded random moment of its training (from the moment RUN/previews appears, just before the first step, to
where an uninterrupted run ended), resumes it to the end and compares every saved tensor. 5 trials by default; VISION_SIGKILL_TRIALS=20 for
the issue's 20 (about 20 s a trial, two at a time on 2 cores)."""
from __future__ import annotations

import json
import os
import queue
import random
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

TRIALS = int(os.environ.get("VISION_SIGKILL_TRIALS", "5"))
SEED = int(os.environ.get("VISION_SIGKILL_SEED", "38"))
TINY = dict(depth=4, embed_dim=32, num_heads=2)


def _data(root: Path) -> Path:
    """The bundled scenes cut into twelve 32 x 32 crops, as images/ + targets/ (test_finetune.Crop)."""
    from test_finetune import write_crops

    write_crops(root)
    return root


def _command(data: Path, run: Path, *extra) -> list[str]:
    """The arguments of `vision` (after ``python -m vision.pipelines.cli``)."""
    return ["finetune", "--task", "depth", "--data", str(data),
            "-o", str(run), "--epochs", "6", "--batch-size", "2", "--img-size", "32", "--lora-rank", "0",
            "--ema", "0.9", "--mixed-precision", "no", "--cpu", "--threads", "1", "--seed", "3", "--quiet",
            "--backbone-kwargs", json.dumps(TINY), *extra]


ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def _servers(n: int) -> list:
    """``n`` start-up servers (tests/hostile/forkserver.py): each run is a process forked from one that imported
    torch, timm and peft once, as ``python -m vision.pipelines.cli`` would be after its imports, which saves their
    start-up (seconds) in each of the eleven runs; the kills and exits stay those of real processes."""
    from hostile.forkserver import Server

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: Server(ENV, preload=("timm", "peft")), range(n)))


def _start(server, args: list, log: Path):
    """Start `vision ARGS` in a process of its own; its stderr goes to ``log``."""
    return server.start(args, log.parent, ENV, os.devnull, log, timeout=600)


def _run(server, args: list, log: Path) -> tuple[int, str]:
    """Run `vision ARGS` to its end: (exit code, stderr)."""
    rc, _, _ = _start(server, args, log).wait()
    return rc, log.read_text()


def _weights(run: Path) -> dict:
    """Every tensor the run keeps: the kept weights and the last epoch's (state/resume.safetensors)."""
    out = {f"model/{k}": v for k, v in load_file(str(run / "model.safetensors")).items()}
    out.update({f"resume/{k}": v for k, v in load_file(str(run / "state" / "resume.safetensors")).items()})
    return out


def _differs(a: dict, b: dict) -> list[str]:
    if set(a) != set(b):
        return sorted(set(a) ^ set(b))
    return [k for k in a if not torch.equal(a[k], b[k])]


def _one_line_refusal(stderr: str) -> bool:
    lines = stderr.strip().splitlines()
    return len(lines) == 1 and "Traceback" not in stderr and "error" in lines[0]


def _left(run: Path) -> str:
    """What a kill left: the epoch of the complete checkpoint, and a staging or previous folder if any."""
    try:
        epoch = json.loads((run / "state" / "checkpoint.json").read_text())["state"]["epoch"]
    except (OSError, ValueError, KeyError, TypeError):
        epoch = None
    extra = sorted(p.name for p in run.glob(".state.*")) if run.is_dir() else []
    return f"checkpoint after epoch {epoch}" + "".join(f", {e}" for e in extra) if epoch is not None \
        else "no checkpoint" + "".join(f", {e}" for e in extra)


def _trial(server, data: Path, run: Path, delay: float, reference: dict) -> dict:
    """Start, SIGKILL ``delay`` s after RUN/previews appears, --resume to the end, compare."""
    log = run.with_name(run.name + ".first.err")
    proc = _start(server, _command(data, run), log)
    end = time.monotonic() + 300
    while not (run / "previews").exists() and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.01)
    time.sleep(delay)
    finished = proc.poll() is not None
    proc.send_signal(signal.SIGKILL)
    rc, _, _ = proc.wait()
    err = log.read_text()
    killed = rc == -signal.SIGKILL
    at_kill = _left(run)
    if not killed and rc != 0:
        return dict(delay=delay, outcome="first run failed", detail=err.strip()[-400:])
    rc, err = _run(server, _command(data, run, "--resume"), run.with_name(run.name + ".resume.err"))
    base = dict(delay=round(delay, 2), killed=killed and not finished, left=at_kill)
    if rc != 0:
        refused = _one_line_refusal(err)
        return dict(base, outcome="refused in one line" if refused else "traceback or garbled error",
                    detail=err.strip()[-400:])
    differ = _differs(_weights(run), reference)
    return dict(base, outcome="same weights" if not differ else "DIVERGED", detail=differ[:5])


@pytest.mark.slow  # real processes: about 10-20 s per trial, two at a time
def test_sigkill_at_random_moments_then_resume_gives_the_uninterrupted_weights(tmp_path):
    data = _data(tmp_path / "data")
    whole = tmp_path / "whole"
    servers = _servers(2)
    t0 = time.monotonic()
    log = tmp_path / "whole.err"
    proc = _start(servers[0], _command(data, whole), log)
    while not (whole / "previews").exists() and proc.poll() is None:
        time.sleep(0.01)
    appeared, seen = time.monotonic(), {}
    while proc.poll() is None:  # when each epoch's checkpoint is published
        seen.setdefault(_left(whole), time.monotonic() - appeared)
        time.sleep(0.01)
    rc, _, _ = proc.wait(timeout=600)
    assert rc == 0, log.read_text()
    ended = time.monotonic() - appeared
    uninterrupted = time.monotonic() - t0
    reference = _weights(whole)
    marks = sorted(t for k, t in seen.items() if re.fullmatch(r"checkpoint after epoch \d+", k))
    assert len(marks) >= 2, seen
    epoch = (marks[-1] - marks[0]) / (len(marks) - 1)
    rng = random.Random(SEED)
    delays = [rng.uniform(0.0, ended) for _ in range(TRIALS)]  # from the first step to the end
    free = queue.Queue()
    for server in servers:
        free.put(server)

    def trial(i):
        server = free.get()
        try:
            return _trial(server, data, tmp_path / f"run{i}", delays[i], reference)
        finally:
            free.put(server)

    try:
        with ThreadPoolExecutor(2) as pool:  # (two at a time: the moments are random anyway)
            results = list(pool.map(trial, range(TRIALS)))
    finally:
        for server in servers:
            server.close()
    outcomes, left = {}, {}
    for r in results:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
        left[r["left"]] = left.get(r["left"], 0) + 1
    report = "\n".join(json.dumps(r) for r in results)
    print(f"\n{TRIALS} SIGKILL trials (seed {SEED}; uninterrupted run {uninterrupted:.0f} s, training "
          f"{ended:.1f} s from the first step, epochs {epoch:.1f} s; all "
          f"{time.monotonic() - t0:.0f} s): {outcomes}\nkills left: {left}\n{report}")
    bad = [r for r in results if r["outcome"] not in ("same weights", "refused in one line")]
    assert not bad, report
    # a refusal is allowed by the issue, but none is expected: the checkpoints are atomic
    assert outcomes.get("same weights", 0) == TRIALS, report
    assert sum(r["killed"] for r in results) >= TRIALS // 2, report  # most kills landed while it ran
