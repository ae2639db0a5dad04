"""The CUDA architecture a launch runs on, for launchers whose configuration differs per architecture.

``device_arch(x.device)`` is ``10 * major + minor`` (80 A100, 86 RTX 30, 89 RTX 40 / L4, 90 H100 / H200), read once
per device and cached. It is None on CPU tensors and under Triton's interpreter, where launchers keep their
architecture-independent choice. ``vision.kernels.launch_configs`` passes each target explicitly instead, so the
static compile test checks the choice every architecture gets.
"""
from __future__ import annotations

from functools import lru_cache

import torch

from .backends import interpreting


@lru_cache(maxsize=None)
def _capability(index: int) -> int:
    major, minor = torch.cuda.get_device_capability(index)
    return 10 * major + minor


def device_arch(device) -> int | None:
    """``sm_XY`` as the integer XY of the CUDA device ``device`` (a ``torch.device``), or None off CUDA and in the
    interpreter."""
    if interpreting() or getattr(device, "type", None) != "cuda":
        return None

    return _capability(device.index if device.index is not None else torch.cuda.current_device())
