"""numba loops of the history (:mod:`vision.denoise.accumulate`) on CPU float32 (see :mod:`vision.kernels.runtime.jit`):
the change test's cell means of its five statistics in one pass over the frame, where the PyTorch path forms five
full-resolution planes, stacks them and averages them down; and the update that takes a frame into the history, in
one pass into one stack of planes. Imported only where numba is available; the tests compare them with the PyTorch
path.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import prange

from vision.kernels.runtime.jit import kernel

F4 = "float32[:, :, :, :]"


@kernel(f"void({F4}, {F4}, boolean[:, :, :, :], {F4}, int64, float32, float32[:, :, :, ::1])")
def change_cells_planes(signal, previous, valid, count, cell, big, out):
    """out (B, 5, gh, gw) = the means over each ``cell`` x ``cell`` block's real pixels of ``v``, ``l v``, ``o v``,
    ``l^2 v`` and ``n v``, with ``v`` the pixel's ``valid`` flag, ``l`` and ``o`` the channel means of ``signal`` and
    ``previous`` (B, 3, H, W) and ``n`` its ``count`` (B, 1, H, W); each mean NaN or past +-``big`` set to +-``big``
    (NaN as ``big``), as :func:`vision.denoise.accumulate.finite` does with its ``BIG``."""
    B, C, H, W = signal.shape
    gh, gw = out.shape[2], out.shape[3]
    zero, third = np.float32(0.0), np.float32(1.0 / 3.0)
    for n in prange(B * gh):
        b, i = n // gh, n % gh
        acc = np.zeros((5, gw), np.float32)
        y0, y1 = i * cell, min(H, i * cell + cell)
        for y in range(y0, y1):
            for x in range(W):
                j = x // cell
                v = np.float32(1.0) if valid[b, 0, y, x] else zero
                lum = (signal[b, 0, y, x] + signal[b, 1, y, x] + signal[b, 2, y, x]) * third
                old = (previous[b, 0, y, x] + previous[b, 1, y, x] + previous[b, 2, y, x]) * third
                acc[0, j] += v
                acc[1, j] += lum * v
                acc[2, j] += old * v
                acc[3, j] += lum * lum * v
                acc[4, j] += count[b, 0, y, x] * v
        rows = y1 - y0
        for k in range(5):
            o = out[b, k, i]
            for j in range(gw):
                m = acc[k, j] / np.float32(rows * (min(W, j * cell + cell) - j * cell))
                o[j] = big if m != m else min(max(m, -big), big)


def change_cells(signal: torch.Tensor, previous: torch.Tensor, valid: torch.Tensor, count: torch.Tensor,
                 cell: int, big: float) -> torch.Tensor:
    """:func:`change_cells_planes` into a new (B, 5, ceil(H / cell), ceil(W / cell)) tensor."""
    b, _, h, w = signal.shape
    out = signal.new_empty(b, 5, -(-h // cell), -(-w // cell))
    change_cells_planes(signal, previous, valid, count, int(cell), float(big), out)
    return out


@kernel(f"void({F4}, {F4}, boolean[:, :, :, :], float32, float32[:, :, :, ::1])")
def take_frame_planes(vals, signal, valid, max_history, out):
    """out (B, K, H, W), K = 4 or 7: the history after taking this frame's ``signal`` (B, 3, H, W), from the
    reprojected ``vals`` (B, K, H, W: mean, count, and with K = 7 the mean square) and ``valid`` (B, 1, H, W): count
    ``n = min(count + 1, max_history)`` (1 where not valid), then ``h + (x - h) / n`` for the mean of the signal
    ``x`` and of its square (``h = x`` where not valid), each operation as
    :func:`vision.denoise.accumulate.update` rounds it."""
    B, K, H, W = out.shape
    zero, one = np.float32(0.0), np.float32(1.0)
    for n in prange(B * H):
        b, y = n // H, n % H
        for x in range(W):
            ok = valid[b, 0, y, x]
            count = min((vals[b, 3, y, x] if ok else zero) + one, max_history)
            a = one / count
            out[b, 3, y, x] = count
            for c in range(3):
                s = signal[b, c, y, x]
                m = vals[b, c, y, x] if ok else s
                out[b, c, y, x] = m + a * (s - m)
                if K == 7:
                    sq = s * s
                    q = vals[b, 4 + c, y, x] if ok else sq
                    out[b, 4 + c, y, x] = q + a * (sq - q)


def take_frame(vals: torch.Tensor, signal: torch.Tensor, valid: torch.Tensor, max_history: int) -> torch.Tensor:
    """:func:`take_frame_planes` into a new (B, K, H, W) tensor."""
    out = torch.empty(vals.shape, dtype=vals.dtype)
    take_frame_planes(vals, signal, valid, float(max_history), out)
    return out
