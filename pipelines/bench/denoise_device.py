"""``vision bench denoise --cuda-size WxH``: FLR and FLNR per frame on a device, one row per method as it is measured.

Every method is called on (1, C, H, W) tensors resident on the device (what a renderer on the same GPU hands
over) and measured in this order, so a slow first call (Triton compiles, CUDA graph capture) never counts:

* warm-up: :data:`WARMUP` calls, then one synchronisation;
* host syncs per frame: one call with CUDA's sync debug mode on ``warn`` (every synchronising CUDA call warns,
  including those inside PyTorch); on a CPU device the Python-level host reads of tensors (``item``, ``bool``,
  ``float``, ... trapped as in ``tests/sync_trap.py``) instead, what would synchronise on CUDA;
* per call: the median wall time of ``--repeat`` calls, each synchronised (one frame's latency, host work
  included);
* GPU time (CUDA only): the kernels' own time per frame from ``torch.profiler`` over ``--repeat`` calls, and
  the throughput time per frame of ``--repeat`` calls back to back with one synchronisation;
* graph: whether the frame ran as a captured CUDA graph (see :mod:`vision.denoise.graphs`).
"""
from __future__ import annotations

import statistics
import time
import warnings

import torch
from torch.profiler import ProfilerActivity, profile

from vision.denoise import graphs

from .timing import format_time

WARMUP = 3
_TRAPPED = ("item", "__bool__", "__float__", "__int__", "__index__", "tolist", "numpy")


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def count_host_syncs(fn, device) -> int:
    """Host synchronisations of one call of ``fn``: CUDA's sync debug warnings on CUDA, trapped host reads of
    tensors on CPU."""
    if device.type == "cuda":
        _sync(device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                fn()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        _sync(device)
        return sum("synchroniz" in str(w.message) for w in caught)
    saved = {name: getattr(torch.Tensor, name) for name in _TRAPPED}
    count = [0]

    def counting(fn_):
        def read(*args, **kwargs):
            count[0] += 1
            return fn_(*args, **kwargs)
        return read

    for name, fn_ in saved.items():
        setattr(torch.Tensor, name, counting(fn_))
    try:
        fn()
    finally:
        for name, fn_ in saved.items():
            setattr(torch.Tensor, name, fn_)
    return count[0]


def kernel_time(fn, device, n: int) -> float | None:
    """Seconds of GPU kernel (and copy) time per call of ``fn`` from ``torch.profiler``; None off CUDA or when
    the profiler yields nothing."""
    if device.type != "cuda":
        return None

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                fn()
            _sync(device)
        total_us = sum(getattr(e, "self_device_time_total", 0) or 0 for e in prof.key_averages())
    except Exception:  # noqa: BLE001 - a profiler that cannot start (CUPTI busy) leaves the column empty
        return None
    return total_us * 1e-6 / n if total_us else None


def measure(name: str, fn, device, repeat: int) -> dict:
    """The row of one method (see the module docstring); an exception becomes the row's ``error``."""
    row = {"method": name}
    try:
        before = (len(graphs._graphs), len(graphs._failed))
        for _ in range(WARMUP):
            fn()
        _sync(device)
        row["graph"] = ("yes" if len(graphs._graphs) > before[0] else "failed" if len(graphs._failed) > before[1]
                        else "no")
        row["host syncs/frame"] = count_host_syncs(fn, device)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            _sync(device)
            times.append(time.perf_counter() - t0)
        row["per call"] = statistics.median(times)
        if device.type == "cuda":
            t0 = time.perf_counter()
            for _ in range(repeat):
                fn()
            _sync(device)
            row["throughput"] = (time.perf_counter() - t0) / repeat
            row["kernels"] = kernel_time(fn, device, repeat)
    except Exception as err:  # noqa: BLE001 - reported in the row; the other methods still run
        row["error"] = err
    return row


def format_row(row: dict) -> dict:
    if "error" in row:
        return {"method": row["method"], "per call": f"error: {row['error']!r}"[:200]}
    out = {"method": row["method"], "graph": row.get("graph", "-"),
           "host syncs/frame": str(row.get("host syncs/frame", "-"))}
    for key in ("per call", "throughput", "kernels"):
        out[key] = format_time(row.get(key)) if isinstance(row.get(key), float) else "-"
    return out


COLUMNS = ["method", "per call", "throughput", "kernels", "host syncs/frame", "graph"]


def print_row(row: dict, first: bool) -> None:
    """One row, aligned to fixed widths, as soon as it is measured (the header before the first)."""
    widths = [16, 11, 11, 11, 16, 7]
    if first:
        print("  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)), flush=True)
        print("  ".join("-" * w for w in widths), flush=True)
    cells = format_row(row)
    print("  ".join(str(cells.get(c, "")).ljust(w) for c, w in zip(COLUMNS, widths)), flush=True)
