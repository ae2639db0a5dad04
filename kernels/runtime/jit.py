"""Fused CPU loops compiled by numba: the no-autograd CPU paths of a few per-pixel stages.

On CPU, PyTorch runs a stage such as "lerp 15 coefficient planes, multiply by 4 features, sum" as one op
per step, and each op streams full planes through memory; on a 2-core machine that traffic, not the
arithmetic, is the time. A numba loop does the whole stage per row while the row is in cache.

Every kernel (``kernels/local_linear/cpu_path.py``, the ``*_numba.py`` modules of ``vision/denoise/flnr/``,
``log_cpu.py``) has a PyTorch path beside it (what autograd, CUDA, float64 and half precision take), and the tests
compare both to float64 references.
``VISION_NUMBA=0`` (or ``runtime.set_numba(False)``) turns the numba paths off (read at every call). The kernels compile on first use (about
20 s for all of them, once: the machine code is cached next to their module), and run on as many threads as
torch's. Threads: numba's workqueue layer, unless ``NUMBA_THREADING_LAYER`` says otherwise. It is fork-safe and
holds its memory on a busy machine. The TBB layer, 5-10 % faster on an idle one (FLNR at 1280 x 720), grew a
``vision denoise --temporal`` process by 150 KB a frame while other work kept the cores busy (460 MB over 3,000
frames) and ran each frame 2-3 times slower than the workqueue there; its exit handler can also spin for ever.
numba's GNU OpenMP layer terminates any process forked after it ran (a data loader's workers, a process pool).
The workqueue serves one launch at a time (our kernels take turns through ``_lock``): a program that runs numba
parallel functions of its own from another thread at the same time must set ``NUMBA_THREADING_LAYER=tbb``, or numba
aborts the process. Serial loops on our own worker threads measured slower than numba's parallel ones.
"""
from __future__ import annotations

import os
import sys
import threading
from functools import lru_cache
from pathlib import Path

import torch

from .switches import numba_enabled
from .threads import budget
from .logs import get_logger

NOTICE_AFTER_S = 2.0  # a compilation still running after this long prints one notice per process (a cache load
# takes well under a second; the first compile on a fresh install about 20 s in all)
NOTICE_AFTER_CACHED_S = 10.0  # the same for a kernel whose cache index exists: a load from the cache, which on a
# busy machine can pass 2 s (numba's own set-up comes with the first) and is no compilation to announce
_noticed = threading.Event()
_lock = threading.Lock()  # numba's workqueue layer must not be entered by two threads at once; with the others
# concurrent kernels would only share the same cores


@lru_cache(maxsize=None)
def _numba():
    try:
        import numba  # lazy: numba loads its compiled loops only when a CPU loop runs
    except Exception:  # not installed, or no wheel for this Python: the PyTorch paths run
        return None
    if "NUMBA_THREADING_LAYER" not in os.environ:
        # fork-safe, and flat in memory on a busy machine, where TBB's grows frame after frame (module docstring)
        numba.config.THREADING_LAYER = "workqueue"
    return numba


def enabled(*tensors: torch.Tensor) -> bool:
    """Whether the numba loops may take these tensors: numba imports, not turned off, CPU float32, nothing to
    differentiate."""
    return refusal(*tensors) is None


def refusal(*tensors: torch.Tensor) -> str | None:
    """Why the numba loops may not take these tensors (None: they may), the reason a registry path's ``supports``
    reports."""
    if not numba_enabled():
        return "numba is off (VISION_NUMBA=0)"
    if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in tensors):
        return "needs CPU float32"
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return "autograd is on"
    return None if _importable() else "numba does not import"


_answer: list = []  # whether numba imports, once asked: a plain value, which torch.compile reads as a constant


def _importable() -> bool:
    """Whether numba imports. Asked once outside torch.compile; while compiling and not yet asked, no (the PyTorch
    paths trace, an import does not). Not ``torch.compiler.assume_constant_result``: applying it imports
    torch._dynamo, 3 s of every command's start-up."""
    if not _answer:
        if torch.compiler.is_compiling():
            return False
        _answer.append(_numba() is not None)
    return _answer[0]


def _notice() -> None:
    if not _noticed.is_set():
        _noticed.set()

        get_logger(__name__).info("vision: compiling the CPU kernels (first use after an install: about 20 s, once; "
                                  "the machine code is cached)")


def _cached(fn) -> bool:
    """Whether numba's cache index for ``fn`` exists beside its module (``__pycache__/<module>.<name>-<line>.pyXY.nbi``,
    where numba writes it when that folder is writable): the call will most likely load machine code, not
    compile."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    source = Path(code.co_filename)
    index = f"{source.stem}.{fn.__qualname__}-{code.co_firstlineno}.py{sys.version_info[0]}{sys.version_info[1]}.nbi"
    return (source.parent / "__pycache__" / index).is_file()


def _compile(nb, fn, signature: str):
    """``fn`` compiled (or loaded from numba's cache) for ``signature``; a notice on stderr when it takes long."""
    timer = threading.Timer(NOTICE_AFTER_CACHED_S if _cached(fn) else NOTICE_AFTER_S, _notice)
    timer.daemon = True
    timer.start()
    try:
        try:
            return nb.njit(signature, parallel=True, cache=True, nogil=True)(fn)
        except RuntimeError:  # "cannot cache function": no writable cache location (a read-only install and
            # HOME); compile for this process only
            return nb.njit(signature, parallel=True, nogil=True)(fn)
    finally:
        timer.cancel()


def kernel(signature: str):
    """Decorator: the function compiled as a parallel numba function (``numba.prange`` loops) for one
    ``signature`` (``"void(float32[:, ::1], ...)"``: ``::1`` marks C-contiguous axes, plain ``:`` any strides).

    One signature, so one compilation per kernel (cached on disk): strided and contiguous tensors alike are
    passed as the layout declared, instead of numba compiling a variant for every layout it is given.
    Compilation happens at the first call, never at import."""
    def wrap(fn):
        compiled = []

        def call(*args):
            """Run the kernel on NumPy views of the tensor arguments with the caller's thread budget."""
            nb = _numba()
            # inside :func:`~vision.kernels.runtime.threads.own_threads` torch runs on one thread and the budget is
            # its worker count
            threads = max(1, min(budget(), nb.config.NUMBA_NUM_THREADS))
            arrays = [a.detach().numpy() if isinstance(a, torch.Tensor) else a for a in args]
            before = torch.get_num_threads()
            with _lock:
                if not compiled:
                    compiled.append(_compile(nb, fn, signature))
                nb.set_num_threads(threads)
                compiled[0](*arrays)
            if torch.get_num_threads() != before:  # numba's OpenMP layer can share torch's runtime, whose thread
                torch.set_num_threads(before)  # count it has just set

        call.__doc__, call.__name__, call.py_func = fn.__doc__, fn.__name__, fn
        return call

    return wrap
