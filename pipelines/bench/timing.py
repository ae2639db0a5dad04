"""Shared timing and reporting for ``vision bench``: medians over repeats, device-synchronised, ratio tables."""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


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
