"""Float64 NumPy reference of the box filter: slow, and obviously right (one shifted sum per window offset)."""
from __future__ import annotations

import numpy as np

from ..border import source_index


def box_filter_reference(x: np.ndarray, radius: int, border: str = "valid") -> np.ndarray:
    """Window mean over the last two axes of ``x`` in float64."""
    x = np.asarray(x, dtype=np.float64)
    h, w = x.shape[-2:]
    total = np.zeros_like(x)
    count = np.zeros((h, w))
    for dy in range(-radius, radius + 1):
        iy = source_index(np.arange(h) + dy, h, border)
        for dx in range(-radius, radius + 1):
            ix = source_index(np.arange(w) + dx, w, border)
            inside = (iy[:, None] >= 0) & (ix[None, :] >= 0)
            total += np.where(inside, x[..., np.maximum(iy, 0)[:, None], np.maximum(ix, 0)[None, :]], 0.0)
            count += inside
    return total / count
