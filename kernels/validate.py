"""Input checks shared by the ops: bad input gets a ValueError that names the problem, never a wrong answer."""
from __future__ import annotations

import math

import numpy as np
import torch

from .runtime.switches import data_checks

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def is_symbolic(value) -> bool:
    """Whether ``value`` may be a number that torch.compile (``dynamic=True``) or torch.export keeps symbolic while
    it builds a graph, e.g. a compiled module's float ``eps`` (Dynamo passes it as a 0-d tensor that passes for a
    float, so every plain number is suspect while tracing). Python cannot read such a value (``math.isfinite`` of
    it breaks the graph), so its checks are declared with ``torch._check`` instead: guards of the compiled graph,
    whose failure stops the call. Eager calls never take this branch and keep the one-line ``ValueError``."""
    return isinstance(value, SYMBOLIC) or (not isinstance(value, torch.Tensor) and torch.compiler.is_compiling())


def reads_data() -> bool:
    """False while torch.compile or torch.export traces: a graph cannot branch on tensor values. The traced custom
    ops still check their inputs when they run (their bodies execute eagerly inside the compiled graph)."""
    return not torch.compiler.is_compiling()


def is_flag(value) -> bool:
    """Whether ``value`` is a bool (Python's or NumPy's): ``float()`` and ``int()`` would read it as 1 or 0."""
    return isinstance(value, (bool, np.bool_))


def as_float(value, name: str, expected: str) -> float:
    """``value`` as a float, for an argument documented as a number: a bool and a string are refused by name
    (``float()`` would run True as 1.0 and parse "0.1"), as is anything ``float()`` cannot read."""
    if is_flag(value) or isinstance(value, (str, bytes)):
        raise ValueError(f"{name} must be {expected}, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be {expected}, got {value!r}") from None


def check_float_tensor(t: torch.Tensor, name: str) -> torch.Tensor:
    """``t``, a tensor given for a float argument: an integer or bool tensor is refused by name, not cast."""
    if not t.is_floating_point():
        raise ValueError(f"{name} must be a float or a floating-point tensor, got a {t.dtype} tensor")
    return t


def check_flag(value, name: str) -> bool:
    """``value`` as a bool: an on/off option refuses anything else (a string such as "no" would be truthy)."""
    if not (is_flag(value) or isinstance(value, torch.SymBool)):  # a traced flag: bool() guards on it, as before
        raise ValueError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def check_positive(value, name: str, why: str = ""):
    """``value`` as a float that must be positive and finite (a symbolic value stays symbolic, see is_symbolic)."""
    message = f"{name} must be positive and finite{f' ({why})' if why else ''}"
    if is_symbolic(value):  # the message closure may hold constants only (Dynamo)
        torch._check(value > 0, lambda: message)
        torch._check(value < math.inf, lambda: message)
        return value
    number = as_float(value, name, "a positive float")
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{message}, got {number}")
    return number


def check_not_meta_beside_real(t: torch.Tensor, name: str, device) -> None:
    """Refuse, naming ``name``, a meta tensor (a shape without values) given with inputs on a real ``device``: its
    values cannot be moved there. All-meta inputs pass (the ops give meta results of the real shapes).

        >>> check_not_meta_beside_real(torch.empty(3, device="meta"), "eps", "cpu")
        Traceback (most recent call last):
        ValueError: eps is a meta tensor (a shape without values) but the inputs are on cpu
    """
    if t.is_meta and torch.device(device).type != "meta":
        raise ValueError(f"{name} is a meta tensor (a shape without values) but the inputs are on {device}")


def check_image(x, name: str, channels: tuple[int, ...] | None = None) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape (B, C, H, W), got {type(x).__name__}")
    if x.dim() != 4:
        raise ValueError(f"{name} must have shape (B, C, H, W), got {x.dim()} dims {tuple(x.shape)}")
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} must be float32, float16 or bfloat16, got {x.dtype}")
    if min(x.shape) == 0:
        raise ValueError(f"{name} is empty: shape {tuple(x.shape)}")
    if channels is not None and x.shape[1] not in channels:
        raise ValueError(f"{name} must have {' or '.join(map(str, channels))} channels, got {x.shape[1]}")
    return x


def check_finite(x: torch.Tensor, name: str, backend: str = "torch") -> None:
    """Raise a ValueError naming ``name`` if ``x`` holds NaN or Inf (when ``runtime.data_checks(backend)``)."""
    check_all_finite((x, name), backend=backend)


def check_all_finite(*named: tuple[torch.Tensor, str], backend: str = "torch") -> None:
    """Raise if any of the (tensor, name) pairs holds NaN or Inf.

    Reads tensor data, so it runs only where ``runtime.data_checks(backend)`` says (by default not on the Triton
    path, which never synchronises with the host). One reduction per tensor and a single host synchronisation
    in the common (finite) case: a sum is finite unless an element is NaN/Inf (or the float32 sum overflows,
    which the exact check settles).
    """
    if not (data_checks(backend) and reads_data()):
        return
    total = sum(x.sum(dtype=torch.float32) for x, _ in named)
    if bool(torch.isfinite(total)):
        return
    for x, name in named:
        bad = int((~torch.isfinite(x)).sum())
        if bad:
            raise ValueError(f"{name} contains {bad} NaN or Inf values")


def check_radius(radius) -> int:
    if isinstance(radius, torch.SymInt):
        torch._check(radius >= 0, lambda: "radius must be a non-negative integer")
        return radius  # type: ignore[return-value]  # a SymInt stands for an int in traced code
    if isinstance(radius, bool) or not isinstance(radius, (int,)) and not (
        isinstance(radius, float) and radius.is_integer()
    ):
        raise ValueError(f"radius must be a non-negative integer, got {radius!r}")
    radius = int(radius)
    if radius < 0:
        raise ValueError(f"radius must be a non-negative integer, got {radius}")
    return radius


def check_scale(scale) -> int:
    if isinstance(scale, torch.SymInt):
        torch._check(scale >= 1, lambda: "scale must be a positive integer")
        return scale  # type: ignore[return-value]
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise ValueError(f"scale must be a positive integer, got {scale!r}")
    return scale


def check_eps(eps, batch: int, device, backend: str = "torch") -> torch.Tensor:
    """eps as a float32 tensor of shape (B,): a positive float or a per-batch tensor.

    A float is checked on the host (no sync); a tensor's values only where ``runtime.data_checks(backend)``; a
    symbolic float (a compiled module's eps) with ``torch._check``.
    """
    if isinstance(eps, torch.Tensor):
        check_not_meta_beside_real(eps, "eps", device)
        t = check_float_tensor(eps, "eps").to(device=device, dtype=torch.float32)
        if t.dim() > 1 or t.numel() not in (1, batch):
            raise ValueError(f"eps must be a float or a tensor of shape ({batch},), got shape {tuple(eps.shape)}")
        t = t.reshape(-1).expand(batch)
    elif is_symbolic(eps):
        value = check_positive(eps, "eps", "it regularises flat windows")
        return torch.full((batch,), value, device=device, dtype=torch.float32)
    else:
        value = as_float(eps, "eps", "a float or a tensor")
        if not math.isfinite(value):
            raise ValueError(f"eps must be finite, got {value}")
        if not value > 0:
            raise ValueError(f"eps must be positive and finite (it regularises flat windows), got {value}")
        return torch.full((batch,), value, device=device, dtype=torch.float32)
    if not (data_checks(backend) and reads_data()):
        return t
    if not bool(torch.isfinite(t).all()) or bool((t <= 0).any()):
        raise ValueError(f"eps must be positive and finite (it regularises flat windows), got {t.tolist()}")
    return t
