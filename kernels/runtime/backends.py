"""Choose the implementation of an op: Triton kernel or PyTorch path, and say which one a call takes.

Triton runs when the tensor is on CUDA and Triton imports; the PyTorch path runs otherwise.
``VISION_BACKEND=torch|triton`` forces one (read at every call, so tests can switch it). Forcing
``triton`` on CPU tensors needs ``TRITON_INTERPRET=1`` set before ``vision.kernels`` is imported:
the interpreter then executes the kernels with NumPy, which is how CI runs the kernels' code.
"""
from __future__ import annotations

import contextlib
import os
from functools import lru_cache

import torch

BACKENDS = ("torch", "triton")
_forced: list[str] = []


@lru_cache(maxsize=None)
def triton_available() -> bool:
    try:
        # lazy: a probe, asked for CUDA tensors or a forced Triton backend: a CPU run never loads Triton (Linux only)
        import triton.language  # noqa: F401  (imports triton itself first)
    except Exception:  # ImportError, or a broken install that fails at import
        return False
    return True


_as_on_gpu: list[bool] = []


def interpreting() -> bool:
    """Whether Triton's interpreter runs the kernels (``TRITON_INTERPRET`` set), as the launch choosers and the
    backend check read it; inside :func:`choosing_as_on_a_gpu`, False."""
    return not _as_on_gpu and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@contextlib.contextmanager
def choosing_as_on_a_gpu():
    """Within the block, :func:`interpreting` is False, so the launch choosers (which pick larger, fewer programs
    under the interpreter) choose what a GPU gets, while ``TRITON_INTERPRET`` itself, which Triton reads when a
    kernel is decorated, stays as the process set it (``launch_configs`` lists configurations this way)."""
    _as_on_gpu.append(True)
    try:
        yield
    finally:
        _as_on_gpu.pop()


def forced_backend() -> str | None:
    name = _forced[-1] if _forced else os.environ.get("VISION_BACKEND", "").strip().lower()
    if not name:
        return None
    if name not in BACKENDS:
        raise ValueError(f"VISION_BACKEND must be one of {BACKENDS}, got {name!r}")
    return name


def backend_for(x: torch.Tensor) -> str:
    """The backend an op on ``x`` runs with: ``"triton"`` or ``"torch"``."""
    name = forced_backend()
    if name == "torch":
        return "torch"
    if name == "triton":
        if not triton_available():
            raise RuntimeError("VISION_BACKEND=triton but triton does not import on this machine")
        if x.device.type != "cuda" and not interpreting():
            raise RuntimeError(
                "VISION_BACKEND=triton on a CPU tensor needs TRITON_INTERPRET=1 set before importing vision.kernels"
            )
        return "triton"
    return "triton" if x.device.type == "cuda" and triton_available() else "torch"


def set_backend(name: str | None) -> None:
    """Force a backend for the process (``None``: automatic); overrides ``VISION_BACKEND``."""
    if name is None:
        os.environ.pop("VISION_BACKEND", None)
        return
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    os.environ["VISION_BACKEND"] = name


@contextlib.contextmanager
def use_backend(name: str):
    """Force a backend inside a ``with`` block: ``with use_backend("torch"): ...``."""
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    _forced.append(name)
    try:
        yield
    finally:
        _forced.pop()


def explain(x: torch.Tensor) -> str:
    """One line saying which backend an op on ``x`` runs with, and why. Example::

        >>> from vision.kernels.runtime import explain_backend
        >>> explain_backend(torch.zeros(1, 1, 8, 8))
        'torch: the tensor is on cpu (Triton runs on CUDA tensors)'
    """
    forced = forced_backend()
    if forced:
        source = "use_backend()" if _forced else "VISION_BACKEND"
        return f"{backend_for(x)}: forced by {source}={forced}"
    if x.device.type != "cuda":
        return f"torch: the tensor is on {x.device.type} (Triton runs on CUDA tensors)"
    if not triton_available():
        return "torch: triton does not import here"
    return "triton: a CUDA tensor and triton imports"
