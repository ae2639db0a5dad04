"""The numba loop of FLNR's last steps (op ``denoise.flnr.finish``, :mod:`.finish`) on CPU float32 without autograd:
:func:`~.finish.blended_light` plus the emission, row by row, so the light and its 3 x 3 means live in a row buffer in
cache (see :mod:`vision.kernels.runtime.jit`). Imported only where numba is available (the path's ``run`` loads it).
"""
from __future__ import annotations

import numpy as np
import torch
from numba import prange

from vision.kernels.runtime.jit import kernel

from .rows_numba import NONE


@kernel("void(float32[:, :, :, ::1], float32[:, :, :, ::1], float32[:, :, :, ::1], float32[:, :, :, ::1], "
        "float32[:, :, :, ::1], boolean, float64, float64, float32[:, :, :, :])")
def finish(fitted, factor, add, blend, albedo, has_albedo, gain, top, out):
    """out = ``lerp(L, mean3(L), sigmoid(top) sigmoid(blend + gain contrast(albedo))) + add`` with the light
    L = ``max(fitted, 0) factor``: fitted, factor, add, out (B, 3, H, W), blend (B, 1, H, W), albedo
    (B or 1, 3, H, W) (contrast 0 without it), any strides; ``top`` is sigmoid(top) already; ``mean3``
    averages the pixels of the 3 x 3 neighbourhood inside the frame and ``contrast(a) = sum_c |a_c -
    mean3(a_c)|``."""
    B, C, H, W = fitted.shape
    zero, one = np.float32(0.0), np.float32(1.0)
    gain, top = np.float32(gain), np.float32(top)
    for n in prange(B * H):
        b = n // H
        y = n - b * H
        y0, y1 = max(y - 1, 0), min(y + 1, H - 1)
        inv = np.empty(W, np.float32)  # 1 / (pixels of the 3 x 3 neighbourhood inside the frame)
        for x in range(W):
            inv[x] = one / np.float32((y1 - y0 + 1) * (3 - (x == 0) - (x == W - 1)))  # 1 column when W == 1
        sums = np.zeros(W + 2, np.float32)  # column sums over rows y0..y1, zero-padded along x
        logit, res = np.empty(W, np.float32), np.empty(W, np.float32)
        bl = blend[b, 0, y]
        for x in range(W):
            logit[x] = bl[x]
        if has_albedo:
            ab = albedo[min(b, albedo.shape[0] - 1)]
            for c in range(C):
                for x in range(W + 2):
                    sums[x] = zero
                for yy in range(y0, y1 + 1):
                    ar = ab[c, yy]
                    for x in range(W):
                        sums[x + 1] += ar[x]
                ar = ab[c, y]
                for x in range(W):
                    logit[x] += gain * abs(ar[x] - (sums[x] + sums[x + 1] + sums[x + 2]) * inv[x])
        for x in range(W):
            logit[x] = top / (one + np.exp(-logit[x]))
        for c in range(C):
            for x in range(W + 2):
                sums[x] = zero
            for yy in range(y0, y1 + 1):
                fr, fa = fitted[b, c, yy], factor[b, c, yy]
                for x in range(W):
                    sums[x + 1] += max(fr[x], zero) * fa[x]
            fr, fa, ad, o = fitted[b, c, y], factor[b, c, y], add[b, c, y], out[b, c, y]
            for x in range(W):  # into a contiguous row (vectorised), then to the output's layout
                v = max(fr[x], zero) * fa[x]
                res[x] = v + logit[x] * ((sums[x] + sums[x + 1] + sums[x + 2]) * inv[x] - v) + ad[x]
            for x in range(W):
                o[x] = res[x]


def finish_frame(fitted, factor, add, blend, albedo, edge_gain, blend_max, out):
    """:func:`~.finish._finish_rows` by :func:`finish`, into ``out``; ``edge_gain`` and ``blend_max`` the blend's
    learned scalars (0-dim tensors)."""
    gain = float(edge_gain.detach())
    top = float(torch.sigmoid(blend_max.detach()))
    # contiguous inputs (copies only for batches that broadcast a buffer), the output in any layout
    fitted, factor, add, blend = (t.contiguous() for t in (fitted, factor, add, blend))
    has_albedo = albedo is not None
    finish(fitted, factor, add, blend, albedo.contiguous() if has_albedo else NONE, has_albedo, gain, top, out)
    return out
