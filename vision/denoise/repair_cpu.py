"""numba loop of the firefly test's first step (:func:`vision.denoise.repair.suppress_fireflies`) on CPU float32: each
pixel's light (colour clamped at 0, minus the emission; its largest channel) and the count of negative samples in one
pass over the buffers as they lie, where the PyTorch path reads the colour for its minimum, writes the light's three
planes and reads them back for their maximum (see :mod:`vision.kernels.runtime.jit`). Imported only where numba is
available; the tests compare it with the PyTorch path.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import prange

from vision.kernels.runtime.jit import kernel

F4 = "float32[:, :, :, :]"


@kernel(f"void({F4}, {F4}, boolean, float32[:, :, :, ::1], int64[::1])")
def light_top_planes(color, emission, has_emission, top, negative):
    """top (B, 1, H, W) = per pixel the largest channel of ``max(color, 0) - emission`` (NaN where any channel is
    NaN); ``negative[b H + y]``: row y's samples below 0. color (B, C, H, W); emission (B or 1, C or 1, H, W), read
    only with ``has_emission``."""
    B, C, H, W = color.shape
    zero = np.float32(0.0)
    for n in prange(B * H):
        b, y = n // H, n % H
        eb = min(b, emission.shape[0] - 1)
        t = top[b, 0, y]
        count = 0
        for x in range(W):
            best = zero
            for c in range(C):
                v = color[b, c, y, x]
                if v < zero:
                    count += 1
                    v = zero
                if has_emission:
                    v = v - emission[eb, min(c, emission.shape[1] - 1), y, x]
                if c == 0 or (best == best and (v > best or v != v)):  # a NaN stays
                    best = v
            t[x] = best
        negative[n] = count


def light_top(color: torch.Tensor, emission: torch.Tensor | None) -> tuple[torch.Tensor, int]:
    """:func:`light_top_planes`: (top (B, 1, H, W), the number of negative samples)."""
    b, _, h, w = color.shape
    top = color.new_empty(b, 1, h, w)
    negative = np.empty(b * h, np.int64)
    light_top_planes(color, color.new_zeros(1, 1, 1, 1) if emission is None else emission, emission is not None, top,
                     negative)
    return top, int(negative.sum())
