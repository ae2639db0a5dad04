"""The published defaults of the Structure Preservation Loss and its optimisation, in one place.

The SPL paper's public code uses a 5-pixel window radius, eps 1e-4 and loss weights 1e4 (structure) and 1e3
(colour), tuned on 512 x 512 images. ``SPL_DEFAULTS`` is the :class:`~vision.kernels.spl.config.SPLConfig` built
with them; every signature that takes these settings reads its defaults there. ``SPLDefaults`` is another name of
``SPLConfig``.
"""
from __future__ import annotations

from .config import SPL_DEFAULTS, SPLConfig

SPLDefaults = SPLConfig

__all__ = ["SPL_DEFAULTS", "SPLDefaults", "SPLConfig"]
