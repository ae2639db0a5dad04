"""The published defaults of the Structure Preservation Loss and its optimisation, in one place.

The SPL paper's public code uses a 5-pixel window radius, eps 1e-4 and loss weights 1e4 (structure) and 1e3
(colour), tuned on 512 x 512 images. Every signature that takes these reads them from ``SPL_DEFAULTS``.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SPLDefaults:
    radius: int = 5
    eps: float = 1e-4
    spl_weight: float = 1e4
    color_weight: float = 1e3


SPL_DEFAULTS = SPLDefaults()
