"""The numba loop of FLNR's cell statistics (op ``denoise.flnr.cells``, :mod:`.cells`) on CPU float32 without
autograd: the network's whole input in one pass over the pixels (see :mod:`vision.kernels.runtime.jit`). Imported
only where numba is available (the path's ``run`` loads it).
"""
from __future__ import annotations

import numpy as np
import torch
from numba import prange

from vision.kernels.runtime.jit import kernel

from ..log_cpu import _log_row
from .rows_numba import NONE, add_guides


@kernel("void(float32[:, :, :, :], float32[:, :, :, :], float32[:, :, :, :], float32[:, :, :, :], "
        "float32[:, :, :, :], float32[:, :, :, :], boolean[::1], int64, float32[:, :, :, ::1])")
def cell_stats(target, mask, normal, depth, ao, albedo, present, s, out):
    """out (B, 13, gh, gw), per s x s cell (the last partial cells over their real pixels): the means of the 8
    guide channels in the :data:`~vision.data.fields.FLNR_LAYOUT` layout (0 for a missing buffer: ``present``
    (4,) flags, a dummy array in its place; depth as given, log-depth for FLNR), of ``log1p(max(target, 0))``
    per channel and of the mask, and the standard deviation of the log-luminance (the channel mean of those
    logs): what :func:`~.cells.cell_guides` and :func:`~.cells.cell_inputs`
    give before the standardisation, in one pass. target (B, 3, H, W) finite, mask (B, 1, H, W), the buffers
    (B or 1, c, H, W), any strides. Rows of a cell are summed as whole rows, then each cell's columns."""
    B, C, H, W = target.shape
    gh, gw = out.shape[2], out.shape[3]
    zero, one, third = np.float32(0.0), np.float32(1.0), np.float32(1.0 / 3.0)
    for n in prange(B * gh):
        b = n // gh
        i = n - b * gh
        y0, y1 = i * s, min(H, i * s + s)
        sums = np.zeros((13, W), np.float32)
        v, bits, lum = np.empty(W, np.float32), np.empty(W, np.int32), np.empty(W, np.float32)
        lt = np.empty((C, W), np.float32)
        for y in range(y0, y1):
            add_guides(sums, normal, depth, ao, albedo, present, b, y, W)
            for c in range(C):
                src = target[b, c, y]
                for x in range(W):
                    v[x] = one + max(src[x], zero)
                _log_row(v, bits, lt[c])
            for x in range(W):
                lum[x] = (lt[0, x] + lt[1, x] + lt[2, x]) * third
            for c in range(C):
                src, dst = lt[c], sums[8 + c]
                for x in range(W):
                    dst[x] += src[x]
            m, dm, dq = mask[b, 0, y], sums[11], sums[12]
            for x in range(W):
                dm[x] += m[x]
                dq[x] += lum[x] * lum[x]
        for j in range(gw):
            x0, x1 = j * s, min(W, j * s + s)
            inv = one / np.float32((y1 - y0) * (x1 - x0))
            for k in range(13):
                acc = zero
                row = sums[k]
                for x in range(x0, x1):
                    acc += row[x]
                out[b, k, i, j] = acc * inv
            mean = (out[b, 8, i, j] + out[b, 9, i, j] + out[b, 10, i, j]) * third
            out[b, 12, i, j] = np.sqrt(max(out[b, 12, i, j] - mean * mean, zero))


def cells(buffers: list, target: torch.Tensor, mask: torch.Tensor, cell: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`cell_stats` as (cells (B, 8, gh, gw), the network's other inputs (B, 5, gh, gw)): FLNR's
    :func:`~.cells.cell_guides` and, but for the standardised guides,
    :func:`~.cells.cell_inputs`."""
    b, _, h, w = target.shape
    out = target.new_empty(b, 13, -(-h // cell), -(-w // cell))
    arrays = [NONE if v is None else v for v in buffers]
    present = np.array([v is not None for v in buffers], np.bool_)
    cell_stats(target, mask.expand(b, 1, h, w), *arrays, present, cell, out)
    return out[:, :8], out[:, 8:]
