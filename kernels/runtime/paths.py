"""The implementation paths of each op, declared in one place per op, chosen and run the same way for all of them.

An op registers its paths once, at import (``register``): a name, the backend that ``VISION_BACKEND`` /
``use_backend`` select it by, a priority, ``supports(**call)``, which returns ``None`` when the path takes the
call or a short reason when it does not, and ``run``: the path's implementation (a callable; an op whose work
has several entry points, a forward and a backward, registers a namespace of them). Every engine is its own path
(Triton, PyTorch with OpenCV's window sums, PyTorch with numba loops, OpenCV's CPU bands, plain PyTorch), so the
registry's choice is the whole decision: the implementation it names runs, and nothing below it picks another
engine. ``decide(op, x, **call)`` returns the first path, by priority, that belongs to the backend
``backend_for(x)`` picks (or ``VISION_BACKEND`` forces) and supports the call; if no Triton path supports it
(float64 gradchecks, border modes a kernel lacks), the PyTorch paths are tried. ``choose`` returns its name
(what an op hands to its ``torch.library`` custom op, whose arguments are plain values), and inside the custom op
``implementation(op, name)`` looks the callable up at call time (``run(op, name, ...)`` calls it). A step whose
engine depends on data the registry cannot see before the op runs (the guided filter's banded CPU forward needs
the guide's range) is an op of its own with paths (``guided_filter_bands``), decided where the data is read.

The choice is logged once per (op, path, reason) at debug level on the ``vision.kernels`` logger, and
``explain(op, x, **call)`` says which path a call takes and why the others do not. Example::

    >>> from vision.kernels import box_filter
    >>> from vision.kernels.runtime import explain
    >>> x = torch.rand(1, 3, 64, 64)
    >>> print(explain("box_filter", x, dtype=torch.float32, radius=4, image=x, border="valid"))  # doctest: +SKIP
    box_filter on a cpu float32 tensor (1, 3, 64, 64): torch+opencv (torch)
    ...
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .backends import backend_for, explain as explain_backend
from .logs import get_verbosity

log = logging.getLogger("vision.kernels")


@dataclass(eq=False)
class Path:
    op: str
    name: str
    backend: str  # "torch" or "triton"
    priority: int
    supports: Callable[..., str | None]
    run: Any = None  # the implementation: a callable, or a namespace of the op's entry points (forward, backward)


_PATHS: dict[str, list[Path]] = {}
_logged: set = set()


def _always(**call) -> None:
    return None


def register(op: str, name: str, backend: str, priority: int = 0,
             supports: Callable[..., str | None] | None = None, run: Any = None) -> None:
    """Declare a path of ``op`` with its implementation ``run``; a later registration of the same (op, name)
    replaces the earlier one."""
    if backend not in ("torch", "triton"):
        raise ValueError(f"backend must be 'torch' or 'triton', got {backend!r}")
    paths = [p for p in _PATHS.get(op, []) if p.name != name]
    paths.append(Path(op, name, backend, priority, supports or _always, run))
    _PATHS[op] = sorted(paths, key=lambda p: -p.priority)


def paths(op: str) -> list[Path]:
    if op not in _PATHS:
        raise ValueError(f"no paths are registered for op {op!r}; known ops: {sorted(_PATHS)}")
    return _PATHS[op]


def path(op: str, name: str) -> Path:
    """The registered path ``name`` of ``op``."""
    for p in paths(op):
        if p.name == name:
            return p
    raise ValueError(f"{op} has no path {name!r}; its paths: {[p.name for p in paths(op)]}")


def implementation(op: str, name: str) -> Any:
    """What path ``name`` of ``op`` runs, looked up at call time (a test may swap ``Path.run``)."""
    impl = path(op, name).run
    if impl is None:
        raise ValueError(f"path {name!r} of {op} was registered without an implementation")
    return impl


def backend_of(op: str, name: str) -> str:
    """"torch" or "triton": the backend path ``name`` of ``op`` belongs to (what ``data_checks`` asks)."""
    return path(op, name).backend


def run(op: str, name: str, *args, **kwargs):
    """Call the implementation of path ``name`` of ``op`` (``name`` as :func:`choose` returned it)."""
    return implementation(op, name)(*args, **kwargs)


def _decide(op: str, x: torch.Tensor, call: dict) -> tuple[Path, list[tuple[Path, str]]]:
    backend = backend_for(x)
    notes = []
    for wanted in (backend,) if backend == "torch" else (backend, "torch"):
        for p in paths(op):
            if p.backend != wanted:
                continue
            reason = p.supports(**call)
            if reason is None:
                return p, notes
            notes.append((p, reason))
    raise ValueError(f"{op}: no {backend} path takes this call: " + "; ".join(f"{p.name}: {r}" for p, r in notes))


def decide(op: str, x: torch.Tensor, **call) -> Path:
    """The path ``op`` runs for this call, with its implementation (see the module docstring)."""
    path, notes = _decide(op, x, call)
    if torch.compiler.is_compiling():  # traced into a graph: the eager calls log it
        return path
    key = (op, path.name, tuple(r for _, r in notes))
    # the key is spent only when the record is shown, so a later -v (or VISION_VERBOSITY=debug) still sees it
    if key not in _logged and log.isEnabledFor(logging.DEBUG) and get_verbosity() <= logging.DEBUG:
        _logged.add(key)
        skipped = "".join(f"; not {p.name}: {r}" for p, r in notes)
        log.debug("%s runs the %s path (%s backend)%s", op, path.name, path.backend, skipped)
    return path


def choose(op: str, x: torch.Tensor, **call) -> str:
    """The name of the path ``op`` runs for this call: :func:`decide`'s choice, as a custom op's argument."""
    return decide(op, x, **call).name


def explain(op: str, x: torch.Tensor, **call) -> str:
    """Several lines: which path ``op`` takes for this call, and why each other path does not."""
    backend = backend_for(x)
    path, notes = _decide(op, x, call)
    noted = {p.name: r for p, r in notes}
    lines = [f"{op} on a {x.device.type} {str(x.dtype).replace('torch.', '')} tensor {tuple(x.shape)}: "
             f"{path.name} ({path.backend})", f"  backend: {explain_backend(x)}"]
    for p in paths(op):
        if p is path:
            why = "chosen"
        elif p.name in noted:
            why = f"not taken: {noted[p.name]}"
        elif p.backend != backend and not (backend == "triton" and p.backend == "torch"):
            why = f"not taken: the {backend} backend runs this call"
        else:
            why = "not tried: a path before it takes the call"
        lines.append(f"  {p.name:12s} [{p.backend}, priority {p.priority}] {why}")
    return "\n".join(lines)
