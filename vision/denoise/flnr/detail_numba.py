"""The numba loop of FLNR's detail blend (op ``denoise.flnr.detail``, :mod:`.detail`) on CPU float32 without
autograd: the 3 x 3 sums, weights and blend in one pass per row (see :mod:`vision.kernels.runtime.jit`). Imported
only where numba is available (the path's ``run`` loads it).
"""
from __future__ import annotations

import numpy as np
from numba import prange

from vision.kernels.runtime.jit import kernel


@kernel("void(float32[:, :, :, :], float32[:, :, :, ::1], float32[:, :, :, ::1], float32[:, :, :, ::1], "
        "float32[:, :, :, ::1], float32[:, :, :, ::1])")
def detail(out, add, factor, target, logit, mask):
    """:func:`~.detail.detail_blend` in one pass, in place on ``out`` (any layout), the window
    moments in float64: out += w (D - out), D = factor m + add with m the mean of the 3 x 3 samples max(target, 0)
    inside the frame without the largest, w = sigmoid(logit) (1 - mask) max(0, 1 - V / |D - out|^2). out, add,
    factor, target (B, 3, H, W); logit, mask (B, 1, H, W)."""
    B, C, H, W = out.shape
    one, zero = np.float32(1.0), np.float32(0.0)
    for n in prange(B * H):
        b = n // H
        y = n - b * H
        y0, y1 = max(y - 1, 0), min(y + 1, H - 1)
        w = np.empty(W, np.float32)
        lg, mk = logit[b, 0, y], mask[b, 0, y]
        for x in range(W):
            w[x] = (one - mk[x]) / (one + np.exp(-lg[x]))
        s1, s2, tops = np.zeros(W + 2), np.zeros(W + 2), np.zeros(W + 2)  # column sums, squares and maxima
        smooth = np.empty((C, W), np.float32)
        diff2, var = np.zeros(W), np.zeros(W)
        for c in range(C):
            for x in range(W + 2):
                s1[x] = 0.0
                s2[x] = 0.0
                tops[x] = 0.0  # the samples are clamped at 0, so 0 is below every one of them
            for yy in range(y0, y1 + 1):
                tr = target[b, c, yy]
                for x in range(W):
                    v = max(np.float64(tr[x]), 0.0)
                    s1[x + 1] += v
                    s2[x + 1] += v * v
                    tops[x + 1] = max(tops[x + 1], v)
            fa, ad, o, tc = factor[b, c, y], add[b, c, y], out[b, c, y], target[b, c, y]
            for x in range(W):
                k = (y1 - y0 + 1) * (3 - (x == 0) - (x == W - 1)) - 1
                top = max(max(tops[x], tops[x + 1]), tops[x + 2])
                a1 = s1[x] + s1[x + 1] + s1[x + 2] - top
                a2 = s2[x] + s2[x + 1] + s2[x + 2] - top * top
                m = a1 / k if k >= 1 else max(np.float64(tc[x]), 0.0)
                f = np.float64(fa[x])
                d = f * m + ad[x]
                smooth[c, x] = d
                diff2[x] += (d - o[x]) ** 2
                if k >= 2:
                    var[x] += f * f * max(a2 - a1 * m, 0.0) / (k - 1) / k
                else:
                    var[x] = np.inf
        for x in range(W):
            s = 1.0 - var[x] / diff2[x] if diff2[x] > 0.0 else 0.0
            w[x] *= np.float32(s) if s > 0.0 and np.isfinite(s) else zero
        for c in range(C):
            o = out[b, c, y]
            for x in range(W):
                v = o[x]
                o[x] = v + w[x] * (smooth[c, x] - v)
