"""The numba loop of FLNR's guide head (op ``denoise.flnr.head``, :mod:`.head`) on CPU float32 without autograd: the
function of :func:`~.head._head_bands`, row by row, so the upsampled code and the hidden layer live in a row buffer in
cache (see :mod:`vision.kernels.runtime.jit`). Imported only where numba is available (the path's ``run`` loads it).
"""
from __future__ import annotations

import numpy as np
import torch
from numba import prange

from vision.kernels.local_linear.cpu_path import cell_row, upsample_row
from vision.kernels.runtime.jit import kernel

from .rows_numba import NONE, add_guides


@kernel("void(float32[:, :, :, ::1], int64, float32[:, :, ::1], float32[:, :, :, :], float32[:, :, :, :], "
        "float32[:, :, :, :], float32[:, :, :, :], boolean[::1], float32[:, ::1], float32[::1], float32[:, :, :, ::1])")
def guide_head(code, s, wT, normal, depth, ao, albedo, present, w2, b2, g):
    """g (B, Q, H, W) = ``W2 leaky(up(code) + W f) + b2``, or ``up(code) + W f`` when w2 has no rows.

    code (B, width, gh, gw): the network's code plus the head's bias, on s x s cells; wT (B or 1, width, 8):
    the input layer on the :data:`~vision.data.fields.FLNR_LAYOUT` channels (normal 3, log-depth 1, AO 1,
    albedo 3); the four buffers (B or 1, c, H, W), any strides, and ``present`` (4,) flags (a missing
    buffer is a dummy array with flag 0, its rows zero); w2 (Q, width), b2 (Q,)."""
    B, width, gh, gw = code.shape
    q, H, W = g.shape[1], g.shape[2], g.shape[3]
    slope = np.float32(0.1)
    for n in prange(B * H):
        b = n // H
        y = n - b * H
        r0, r1, wy = cell_row(y, s, gh)
        row = np.empty(gw + 2, np.float32)
        hid = np.empty((width, gw * s), np.float32)
        feats = np.zeros((8, W), np.float32)  # the row's 8 guide channels, contiguous
        add_guides(feats, normal, depth, ao, albedo, present, b, y, W)
        f0, f1, f2, f3, f4, f5, f6, f7 = (feats[0], feats[1], feats[2], feats[3], feats[4], feats[5], feats[6],
                                          feats[7])
        wb = wT[min(b, wT.shape[0] - 1)]
        for u in range(width):
            h = hid[u]
            upsample_row(code[b, u, r0], code[b, u, r1], wy, s, row, h)
            w0, w1, w2_, w3, w4, w5, w6, w7 = (wb[u, 0], wb[u, 1], wb[u, 2], wb[u, 3], wb[u, 4], wb[u, 5], wb[u, 6],
                                               wb[u, 7])
            for x in range(W):  # all eight channels in one pass over the hidden row
                h[x] += (w0 * f0[x] + w1 * f1[x] + w2_ * f2[x] + w3 * f3[x]
                         + w4 * f4[x] + w5 * f5[x] + w6 * f6[x] + w7 * f7[x])
        if w2.shape[0] == 0:
            for o in range(q):
                out, h = g[b, o, y], hid[o]
                for x in range(W):
                    out[x] = h[x]
            continue
        for u in range(width):
            h = hid[u]
            for x in range(W):
                v = h[x]
                h[x] = v if v > 0 else slope * v  # leaky ReLU, slope 0.1
        full = width - width % 4
        for o in range(q):
            out, bo = g[b, o, y], b2[o]
            for x in range(W):
                out[x] = bo
            for u in range(0, full, 4):  # four hidden units per pass over the output row
                ha, hb, hc, hd = hid[u], hid[u + 1], hid[u + 2], hid[u + 3]
                wa, wb_, wc, wd = w2[o, u], w2[o, u + 1], w2[o, u + 2], w2[o, u + 3]
                for x in range(W):
                    out[x] += wa * ha[x] + wb_ * hb[x] + wc * hc[x] + wd * hd[x]
            for u in range(full, width):
                wa, ha = w2[o, u], hid[u]
                for x in range(W):
                    out[x] += wa * ha[x]


def head(code: torch.Tensor, buffers: list, weight: torch.Tensor, bias: torch.Tensor, layer, size, cell: int):
    """:func:`~.head._head_bands` by :func:`guide_head`: (B, Q, H, W) learned guides; ``layer`` the head's output
    layer (an ``nn.Linear``), None for a linear head."""
    b, width = code.shape[:2]
    c = (code + bias.reshape(-1, width, 1, 1)).contiguous()
    w_t = weight.detach().transpose(1, 2).contiguous()
    if layer is None:
        w2, b2 = np.zeros((0, width), np.float32), np.zeros(0, np.float32)
    else:
        w2, b2 = layer.weight.detach().contiguous(), layer.bias.detach().contiguous()
    q = width if layer is None else w2.shape[0]
    g = code.new_empty(b, q, *size)
    arrays = [NONE if v is None else v for v in buffers]
    present = np.array([v is not None for v in buffers], np.bool_)
    guide_head(c, cell, w_t, *arrays, present, w2, b2, g)
    return g
