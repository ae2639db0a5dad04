"""Runtime switches of the kernels: an environment variable, a setter and a context manager each.

| switch | env var | setter / context manager | values (default first) |
|---|---|---|---|
| input checks that read tensor data (NaN/Inf, eps > 0 of a tensor eps) | ``VISION_CHECKS`` | ``set_checks`` / ``checks`` | ``auto``, ``on``, ``off`` |
| numba loops for the CPU float32 inference paths | ``VISION_NUMBA`` | ``set_numba`` / ``use_numba`` | ``1``, ``0`` |
| backend of every op (:mod:`.backends`) | ``VISION_BACKEND`` | ``set_backend`` / ``use_backend`` | unset (automatic), ``torch``, ``triton`` |
| CUDA-graph capture (``vision.restore``'s fused loop) | ``VISION_CUDA_GRAPHS`` | ``set_cuda_graphs`` / ``use_cuda_graphs`` | ``on``, ``off`` |
| messages that are not results (:mod:`.logs`) | ``VISION_VERBOSITY`` | ``set_verbosity`` / ``verbosity`` | ``info``, ``error``, ``warning``, ``debug`` |

Switches are read at every call, so a test or a script can flip them at any time. A ``checks()`` block holds for its
own thread (as torch's grad mode does) and for the workers its ops hand items to
(:func:`~vision.kernels.runtime.threads.parallel_for`), not for other threads of the process.

``auto`` runs the data checks on the PyTorch path (a CPU tensor costs nothing to read) and skips them on the
Triton path, where reading a device tensor on the host would stall the GPU once per call and break CUDA graph
capture: the Triton path never synchronises with the host. ``on`` runs them everywhere (one sync per call on
CUDA), ``off`` nowhere. Shape, dtype and argument checks always run: they read no tensor data.

Example::

    from vision.kernels import runtime
    runtime.set_checks("on")              # for the whole process
    with runtime.checks("off"):           # or for a block
        ...
"""
from __future__ import annotations

import contextlib
import os
import threading

CHECK_MODES = ("auto", "on", "off")
_checks_local = threading.local()  # .forced: this thread's stack of checks() blocks


def _checks_forced() -> list[str]:
    forced = getattr(_checks_local, "forced", None)
    if forced is None:
        forced = _checks_local.forced = []
    return forced


def _check_mode(value: str) -> str:
    value = value.strip().lower() or "auto"
    if value not in CHECK_MODES:
        raise ValueError(f"VISION_CHECKS must be one of {CHECK_MODES}, got {value!r}")
    return value


def checks_mode() -> str:
    """The current data-check mode: the innermost ``checks()`` block of this thread, else ``set_checks``, else
    ``VISION_CHECKS``."""
    forced = _checks_forced()
    if forced:
        return forced[-1]
    return _check_mode(os.environ.get("VISION_CHECKS", "auto"))


def data_checks(backend: str) -> bool:
    """Whether an op running on ``backend`` ("torch" or "triton") reads its inputs' values to check them."""
    mode = checks_mode()
    return mode == "on" or (mode == "auto" and backend != "triton")


def set_checks(mode: str) -> None:
    """Set the data-check mode for the process (overrides ``VISION_CHECKS``)."""
    os.environ["VISION_CHECKS"] = _check_mode(mode)


@contextlib.contextmanager
def checks(mode: str):
    """Data-check mode inside a ``with`` block, for this thread (and the workers its ops hand items to)."""
    forced = _checks_forced()
    forced.append(_check_mode(mode))
    try:
        yield
    finally:
        forced.pop()


def forced_checks() -> str | None:
    """This thread's innermost ``checks()`` mode, None outside any block (what a worker thread takes over)."""
    forced = _checks_forced()
    return forced[-1] if forced else None


_numba_forced: list[bool] = []
_OFF = ("0", "false", "no", "off")


def numba_enabled() -> bool:
    """Whether the numba CPU loops may run (they still need numba to import: :func:`.jit.enabled`)."""
    if _numba_forced:
        return _numba_forced[-1]
    return os.environ.get("VISION_NUMBA", "1").strip().lower() not in _OFF


def set_numba(on: bool) -> None:
    """Turn the numba CPU loops on or off for the process (overrides ``VISION_NUMBA``)."""
    os.environ["VISION_NUMBA"] = "1" if on else "0"


@contextlib.contextmanager
def use_numba(on: bool):
    """numba CPU loops on or off inside a ``with`` block."""
    _numba_forced.append(bool(on))
    try:
        yield
    finally:
        _numba_forced.pop()


_graphs_forced: list[bool] = []


def cuda_graphs_enabled() -> bool:
    """Whether work on CUDA may be captured and replayed as CUDA graphs: the innermost ``use_cuda_graphs()`` block,
    else ``set_cuda_graphs``, else ``VISION_CUDA_GRAPHS`` (default on). Off, the same work runs eagerly."""
    if _graphs_forced:
        return _graphs_forced[-1]
    return os.environ.get("VISION_CUDA_GRAPHS", "on").strip().lower() not in _OFF


def set_cuda_graphs(on: bool) -> None:
    """Turn CUDA-graph capture on or off for the process (overrides ``VISION_CUDA_GRAPHS``)."""
    os.environ["VISION_CUDA_GRAPHS"] = "on" if on else "off"


@contextlib.contextmanager
def use_cuda_graphs(on: bool):
    """CUDA-graph capture on or off inside a ``with`` block."""
    _graphs_forced.append(bool(on))
    try:
        yield
    finally:
        _graphs_forced.pop()
