"""The CPU thread budget of the kernels: worker threads for independent items of a stage, fork-safe.

On CPU a stage of the local regression or of FLNR is hundreds of small tensor ops; with torch's intra-op threads
every op is a parallel region, and on a busy machine each region waits for its slowest thread. Inside
:func:`own_threads` the caller runs its ops on one thread and hands independent items (planes, bands, channels)
to :func:`parallel_for`, whose workers (one intra-op thread each) meet only at the end of a stage. numba kernels
(:mod:`.jit`) take the same budget (:func:`budget`).
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from .switches import checks, forced_checks

__all__ = ["own_threads", "threaded", "n_workers", "parallel_for", "budget"]

_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()
_local = threading.local()


def _after_fork_in_child() -> None:
    """A forked child inherits the pool object but none of its threads: work submitted to it would wait forever
    (a data loader's workers, a multiprocessing pool). The child starts a pool of its own when it needs one."""
    global _pool, _pool_size, _pool_lock
    _pool, _pool_size, _pool_lock = None, 0, threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _single_threaded():
    torch.set_num_threads(1)  # per thread (OpenMP's thread count is a per-thread setting)


@contextlib.contextmanager
def own_threads(device):
    """Run a CPU stage sequence with this thread's intra-op threads turned into :func:`parallel_for` workers.

    The stages are hundreds of small tensor ops; with intra-op threads every op is a parallel region, and on
    a busy machine each region waits for its slowest thread to be scheduled. So inside this block the caller
    runs its ops on one thread and independent items go to ``torch.get_num_threads()`` workers (one intra-op
    thread each), which only meet at the end of a stage. The caller's setting is restored on exit.
    """
    n = torch.get_num_threads()
    if device.type != "cpu" or n <= 1 or getattr(_local, "workers", None) is not None:
        yield
        return
    _local.workers = n
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)
        _local.workers = None


def threaded(fn):
    """Decorator: run ``fn(first_tensor, ...)`` inside :func:`own_threads` of that tensor's device."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t = next(a for a in args if isinstance(a, torch.Tensor) or isinstance(a, dict))
        device = (t["f"] if isinstance(t, dict) else t).device
        with own_threads(device):
            return fn(*args, **kwargs)
    return wrapper


def n_workers(device) -> int:
    return getattr(_local, "workers", None) or 1 if device.type == "cpu" else 1


def parallel_for(fn, items, device) -> None:
    """Run ``fn(item)`` for independent items on the workers of :func:`own_threads` (in order without them).

    Tensor ops and OpenCV release the GIL, so the workers overlap.
    """
    global _pool, _pool_size
    items = list(items)
    n = min(len(items), n_workers(device))
    if n <= 1:
        for item in items:
            fn(item)
        return
    with _pool_lock:
        if _pool is None or _pool_size < n:
            if _pool is not None:
                _pool.shutdown(wait=False)  # running items finish; the new pool takes the next ones
            _pool = ThreadPoolExecutor(n, thread_name_prefix="vision-llr", initializer=_single_threaded)
            _pool_size = n
        pool = _pool

    inference = torch.is_inference_mode_enabled()
    mode = forced_checks()

    def run(item):
        # grad and inference modes are per thread: forward and backward never record a graph, and under the
        # caller's inference_mode its tensors are inference tensors that only inference-mode code may write; the
        # caller's checks() block, per thread too, holds for its items
        with torch.inference_mode() if inference else torch.no_grad(), \
                checks(mode) if mode is not None else contextlib.nullcontext():
            fn(item)

    for fut in [pool.submit(run, item) for item in items]:
        fut.result()


def budget() -> int:
    """Threads a CPU kernel may use now: the workers of an enclosing :func:`own_threads`, else torch's count."""
    return getattr(_local, "workers", None) or torch.get_num_threads()
