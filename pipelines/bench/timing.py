"""Shared timing and reporting for ``vision bench``: medians over repeats, device-synchronised, ratio tables."""
from __future__ import annotations

import random
import statistics
import time
from typing import Callable
import platform

import cv2
import torch

from .commands import DTYPE_NAMES


def synchronize(device: torch.device | str | None) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], object], *, device=None, warmup: int = 1, repeat: int = 5,
              min_time: float = 0.0) -> float:
    """Median seconds per call of ``fn`` after ``warmup`` calls; synchronises CUDA around each call.

    ``min_time`` repeats further until that many seconds were spent, for very fast calls.
    """
    for _ in range(warmup):
        fn()
    synchronize(device)
    times: list[float] = []
    spent = 0.0
    while len(times) < repeat or spent < min_time:
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        dt = time.perf_counter() - t0
        times.append(dt)
        spent += dt
        if len(times) >= 10 * max(repeat, 1) and spent >= min_time:
            break
    return statistics.median(times)


def format_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def print_table(rows: list[dict], columns: list[str], title: str | None = None) -> str:
    """Print ``rows`` (dicts) as an aligned text table with the given ``columns``; returns the text."""
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = []
    if title:
        lines.append(title)
    lines.append("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def time_interleaved(calls: dict, *, device=None, repeat: int | None = None, budget: float = 5.0,
                     max_repeat: int = 5, min_time: float = 0.0, sample_time: float = 0.0,
                     clock: Callable[[], float] = time.perf_counter) -> dict:
    """Median seconds per call of each ``calls[key]()``, timed round-robin: one sample of each per round, in a
    new (seeded) order every round.

    On a shared machine a burst of load then slows every entry alike instead of whichever one happened
    to be running, so the ratios between entries stay meaningful. Each entry gets one untimed first
    call, then ``repeat`` timed samples, or by default as many as fit in ``budget`` seconds (1 to
    ``max_repeat``), continuing past that while its timed total is under ``min_time`` (at most 10x).
    ``sample_time`` > 0 makes each sample run the call back to back until about that many seconds
    (from a second, calibrating call; at most 1000 calls) before one synchronisation: on a GPU this
    measures throughput instead of launch-plus-sync latency, which dominates microsecond kernels.
    A call that raises drops out; its exception is returned in place of the time. ``clock`` may be
    ``time.process_time`` (CPU seconds of this process, all threads summed) for CPU work on a machine
    whose other load makes wall time meaningless; it cannot see GPU time.
    """
    targets: dict = {}
    inner: dict = {}
    times: dict = {k: [] for k in calls}
    result: dict = {}

    def once(fn, n=1):
        t0 = clock()
        for _ in range(n):
            fn()
        synchronize(device)
        return (clock() - t0) / n

    for key, fn in calls.items():
        try:
            first = once(fn)
            if sample_time > 0:
                first = once(fn)
                inner[key] = int(max(1, min(1000, -(-sample_time // max(first, 1e-9)))))
        except Exception as err:  # noqa: BLE001 - reported to the caller, which prints it
            result[key] = err
            continue
        targets[key] = repeat if repeat is not None else int(max(1, min(max_repeat, budget / max(first, 1e-9))))
    active = list(targets)
    order = random.Random(0)
    while active:
        # a fresh order every round (seeded: the same run to run), so no entry always runs right after the same
        # neighbour: a call after one that churns memory finds its own data evicted from the cache (1.3x slower
        # after OpenCV's guided filter, measured), which a fixed or rotated order charges to one entry every time
        for key in order.sample(active, len(active)):
            try:
                times[key].append(once(calls[key], inner.get(key, 1)))
            except Exception as err:  # noqa: BLE001
                result[key] = err
                active.remove(key)
                continue
            n, spent = len(times[key]), sum(times[key]) * inner.get(key, 1)
            if n >= targets[key] and (spent >= min_time or n >= 10 * targets[key]):
                active.remove(key)
    for key, ts in times.items():
        if key not in result and ts:
            result[key] = statistics.median(ts)
    return result


DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}  # --dtype NAME -> torch dtype


def set_threads(n: int | None) -> None:
    """Use ``n`` CPU threads in torch and OpenCV (``None``/0: leave their defaults)."""
    if not n:
        return
    torch.set_num_threads(n)
    cv2.setNumThreads(n)


def library_versions(*modules: str) -> dict:
    """Python, torch and the given modules' versions (None where a module does not import), for the report."""
    v = {"python": platform.python_version(), "torch": torch.__version__}
    for mod in modules:
        try:
            v[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - a missing or broken peer is reported as None
            v[mod] = None
    return v


def resolve_device(name: str | None) -> tuple[str, torch.device]:
    """``--device`` (default: cuda if available, else cpu) as (name, torch.device); a missing CUDA is a ValueError."""
    device = name or ("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda but no CUDA device is available")
    return device, dev
