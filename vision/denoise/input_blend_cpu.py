"""numba loops for the input blend on CPU float32 (see :mod:`vision.kernels.runtime.jit`): the per-pixel sums of
:func:`~vision.denoise.input_blend.towards_input` in one pass over its four inputs, and the blend itself in a
second, where the PyTorch path streams a dozen full planes through memory. Imported only where numba is available;
the PyTorch formulas in :mod:`.input_blend` are what this is tested against.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import prange

from vision.kernels.runtime.jit import kernel
from vision.kernels.runtime.threads import n_workers

from .accumulate import BIG

_ANY4 = "float32[:, :, :, :]"


@kernel(f"void({_ANY4}, {_ANY4}, {_ANY4}, {_ANY4}, int64, float32[:, :, :, ::1])")
def blend_sums_planes(out, color, sharp, factor, bands, sums):
    """``sums`` (B, 4, H, W) = per pixel, summed over the 3 channels: ``r r``, the noise energy, ``r d`` and ``d d``,
    with ``r = color - out`` and ``d = sharp - out``; the noise energy is that of
    :func:`~vision.denoise.input_blend.noise_energy` on ``(color - sharp) / factor`` scaled by ``factor``
    (interior pixels, copied outwards at the border; zeros for frames under 3 x 3). Each sum is clamped into
    [-BIG, BIG], NaN as BIG. ``out``, ``color``, ``sharp``: (B, 3, H, W); ``factor``: (B, 1 or 3, H, W), > 0.
    Each of ``bands`` bands of rows per image runs down its rows keeping the last three rows of ``(color - sharp) /
    factor`` in a ring, so each is computed once (and twice where two bands meet)."""
    B, C, H, W = out.shape
    fc = factor.shape[1]
    big, sixth, two = np.float32(BIG), np.float32(1.0 / 6.0), np.float32(2.0)
    small = H < 3 or W < 3
    per = -(-H // bands)
    for job in prange(B * bands):
        b = job // bands
        y0 = (job - b * bands) * per
        y1 = min(H, y0 + per)
        rough = np.empty((C, 3, W), np.float32)  # row yy in slot yy % 3
        across = np.empty(W, np.float32)
        made = -1  # the next rough row to compute; the ring holds the three before it
        for y in range(y0, y1):
            rr, energy, rd, dd = sums[b, 0, y], sums[b, 1, y], sums[b, 2, y], sums[b, 3, y]  # contiguous rows
            for x in range(W):
                rr[x] = np.float32(0.0)
                energy[x] = np.float32(0.0)
                rd[x] = np.float32(0.0)
                dd[x] = np.float32(0.0)
            for c in range(C):
                o, yv, sv = out[b, c, y], color[b, c, y], sharp[b, c, y]
                for x in range(W):
                    r = yv[x] - o[x]
                    d = sv[x] - o[x]
                    rr[x] += r * r
                    rd[x] += r * d
                    dd[x] += d * d
            if not small:
                yc = min(max(y, 1), H - 2)  # the nearest interior row: the border copies it
                if made < yc - 1 or yc - 1 < made - 3:  # a row needed is not in the ring: start it at yc - 1
                    made = yc - 1
                while made <= yc + 1:
                    for c in range(C):
                        cc = c if fc > 1 else 0
                        yv, sv, fv, rk = color[b, c, made], sharp[b, c, made], factor[b, cc, made], rough[c, made % 3]
                        for x in range(W):
                            rk[x] = (yv[x] - sv[x]) / fv[x]
                    made += 1
                for c in range(C):
                    cc = c if fc > 1 else 0
                    r0, r1, r2 = rough[c, (yc - 1) % 3], rough[c, yc % 3], rough[c, (yc + 1) % 3]
                    for x in range(W):  # the second difference down the column, then along the row
                        across[x] = r0[x] + r2[x] - two * r1[x]
                    fv = factor[b, cc, yc]
                    for x in range(W):
                        xc = min(max(x, 1), W - 2)
                        v = (across[xc - 1] + across[xc + 1] - two * across[xc]) * sixth * fv[xc]
                        energy[x] += v * v
            for row in (rr, energy, rd, dd):
                for x in range(W):
                    v = row[x]
                    row[x] = big if v != v else min(max(v, -big), big)


@kernel(f"void({_ANY4}, {_ANY4}, {_ANY4}, float32[:, :, :, ::1], float32[::1], float32, int64, {_ANY4})")
def blend_apply_planes(out, color, sharp, sums, trust, leverage, after_step, result):
    """``result`` (B, 3, H, W) = ``out + s r + w (1 - s) d`` with the window sums ``sums`` (B, 4, H, W, as
    :func:`blend_sums_planes` writes them, box-filtered), ``trust`` (B,) the square root of each image's
    :func:`~vision.denoise.input_blend.frame_share`, ``w = unit((rd - leverage v) / dd) trust`` and ``s = unit(1 -
    v / (e trust))``, or with ``after_step`` (1) ``s = unit(1 - (1 - leverage w) v / (e' trust))``, ``e' = max(0, e -
    2 w rd + w^2 dd)`` (``unit``: clamped into [0, 1], NaN and inf as 0)."""
    B, C, H, W = out.shape
    zero, one, two = np.float32(0.0), np.float32(1.0), np.float32(2.0)
    for n in prange(B * H):  # per row: the two factors along it, then each channel (loops that vectorise)
        b, y = n // H, n % H
        t = trust[b]
        es, vs, rds, dds = sums[b, 0, y], sums[b, 1, y], sums[b, 2, y], sums[b, 3, y]
        s, ws = np.empty(W, np.float32), np.empty(W, np.float32)
        for x in range(W):
            e, v, rd, dd = es[x], vs[x], rds[x], dds[x]
            w = (rd - leverage * v) / dd
            w = min(max(w, zero), one) * t if w - w == zero else zero  # finite, else 0
            if after_step:
                e = max(e - two * w * rd + w * w * dd, zero)
                v = (one - leverage * w) * v
            f = one - v / (e * t)
            f = min(max(f, zero), one) if f - f == zero else zero
            s[x] = f
            ws[x] = w * (one - f)
        for c in range(C):
            o, col, sh, r = out[b, c, y], color[b, c, y], sharp[b, c, y], result[b, c, y]
            for x in range(W):
                v = o[x]
                r[x] = v + s[x] * (col[x] - v) + ws[x] * (sh[x] - v)


@kernel("void(float32[:, :, :, :], int64, float32[:, :, :, ::1])")
def cell_median_planes(grid, n, out):
    """``out`` (B, 1, h, w): per cell of ``grid`` (B, 1, h, w), the lower median of the ``n`` x ``n`` cells around
    it, the border cells repeated past the edge (NaN sorts as the largest).

    Per row of cells, the ``n`` rows around it padded by their border cells, then for every pair of the window's
    ``n^2`` places and all the row's cells at once, which of the two is smaller: the lower median is the largest
    value with at most ``(n^2 - 1) / 2`` values below it (those above the median have more). The pair loops run along
    the row, so they vectorise (an insertion sort per cell took 4 times as long at 1280 x 720). A row whose window
    holds a NaN is sorted cell by cell instead."""
    B, _, H, W = grid.shape
    k = n // 2
    m = n * n
    half = (m - 1) // 2
    for q in prange(B * H):
        b, y = q // H, q % H
        pad = np.empty((n, W + 2 * k), np.float32)
        nan = False
        for dy in range(n):
            src, row = grid[b, 0, min(max(y + dy - k, 0), H - 1)], pad[dy]
            for x in range(W + 2 * k):
                v = src[min(max(x - k, 0), W - 1)]
                row[x] = v
                nan = nan or v != v
        o = out[b, 0, y]
        if nan:
            vals = np.empty(m, np.float32)
            for x in range(W):
                c = 0
                for dy in range(n):
                    for dx in range(n):
                        v = pad[dy, x + dx]
                        j = c
                        while j > 0 and (vals[j - 1] > v or vals[j - 1] != vals[j - 1]) and v == v:
                            vals[j] = vals[j - 1]
                            j -= 1
                        vals[j] = v
                        c += 1
                o[x] = vals[half]
            continue
        below = np.zeros((m, W), np.int32)  # per place of the window, how many of the others are smaller
        for i in range(m):
            ri, bi = pad[i // n, i % n:i % n + W], below[i]
            for j in range(i + 1, m):
                rj, bj = pad[j // n, j % n:j % n + W], below[j]
                for x in range(W):
                    a, c = ri[x], rj[x]
                    bi[x] += np.int32(c < a)
                    bj[x] += np.int32(a < c)
        for x in range(W):
            best = np.float32(-np.inf)
            for i in range(m):
                v = pad[i // n, x + i % n]
                if below[i, x] <= half and v > best:
                    best = v
            o[x] = best


@kernel("void(float32[:, :, :, :], float32[:, :, :, :], int64, float32, float32[:, :, :, ::1])")
def log_ratio_cells_planes(noise, energy, cell, tiny, out):
    """``out`` (B, 1, h, w): per cell of ``cell`` x ``cell`` pixels, the mean of ``log((noise + tiny) / (energy +
    tiny))`` over its pixels, the frame's last row and column repeated to fill the border cells."""
    B, _, H, W = noise.shape
    h, w = out.shape[2], out.shape[3]
    inv = np.float32(1.0 / (cell * cell))
    for q in prange(B * h):
        b, i = q // h, q % h
        for j in range(w):
            acc = np.float32(0.0)
            for dy in range(cell):
                y = min(i * cell + dy, H - 1)
                for dx in range(cell):
                    x = min(j * cell + dx, W - 1)
                    acc += np.log((noise[b, 0, y, x] + tiny) / (energy[b, 0, y, x] + tiny))
            out[b, 0, i, j] = acc * inv


@kernel("void(float32[:, :, :, :], float32, int64, float32[:, :, :, ::1], float32[:, :, :, ::1])")
def lone_peaks_planes(ne, ratio, radius, rows, out):
    """``out`` (B, 1, H, W): the largest value, over the ``(2 radius + 1)^2`` window around each pixel (clipped at the
    frame's edge), of the pixels of ``ne`` (B, 1, H, W) that are at least ``ratio`` times each of their 8 neighbours
    (the frame's border repeated); 0 where there is none. ``rows``: scratch of ``out``'s shape. Rows padded at their
    ends (the border repeated for the neighbours, zeros for the window: the values are >= 0), so that every loop runs
    along a row without a bound to test and vectorises."""
    B, _, H, W = ne.shape
    zero = np.float32(0.0)
    for q in prange(B * H):
        b, y = q // H, q % H
        near = np.empty((3, W + 2), np.float32)  # rows y - 1, y, y + 1, one pixel more at each end
        for dy in range(3):
            src, row = ne[b, 0, min(max(y + dy - 1, 0), H - 1)], near[dy]
            for x in range(W):
                row[x + 1] = src[x]
            row[0], row[W + 1] = src[0], src[W - 1]
        up, mid, down = near[0], near[1], near[2]
        lone = np.zeros(W + 2 * radius, np.float32)
        for x in range(W):
            top = max(max(max(up[x], up[x + 1]), max(up[x + 2], mid[x])),
                      max(max(mid[x + 2], down[x]), max(down[x + 1], down[x + 2])))
            top = max(top, zero)
            v = mid[x + 1]
            lone[x + radius] = v if v >= ratio * top else zero
        r = rows[b, 0, y]
        for x in range(W):
            r[x] = lone[x]
        for d in range(1, 2 * radius + 1):  # the running maximum along the row
            for x in range(W):
                r[x] = max(r[x], lone[x + d])
    for q in prange(B * H):  # then down the column
        b, y = q // H, q % H
        o = out[b, 0, y]
        for x in range(W):
            o[x] = zero
        for yy in range(max(y - radius, 0), min(y + radius + 1, H)):
            r = rows[b, 0, yy]
            for x in range(W):
                o[x] = max(o[x], r[x])


def lone_peaks(ne: torch.Tensor, ratio: float, radius: int) -> torch.Tensor:
    """:func:`lone_peaks_planes` into a new tensor."""
    out = torch.empty(ne.shape, dtype=ne.dtype)
    lone_peaks_planes(ne, float(ratio), int(radius), torch.empty_like(out), out)
    return out


def noise_cells(noise: torch.Tensor, energy: torch.Tensor, cell: int, n: int) -> torch.Tensor:
    """:func:`log_ratio_cells_planes` then :func:`cell_median_planes`: the grid of
    ``input_blend._noise_cells_torch``."""
    b, _, h, w = noise.shape
    grid = torch.empty(b, 1, -(-h // cell), -(-w // cell), dtype=noise.dtype)
    log_ratio_cells_planes(noise, energy, int(cell), float(torch.finfo(noise.dtype).tiny), grid)
    out = torch.empty_like(grid)
    cell_median_planes(grid, int(n), out)
    return out


def blend_sums(out: torch.Tensor, color: torch.Tensor, sharp: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """:func:`blend_sums_planes` into a new (B, 4, H, W) tensor."""
    b, _, h, w = out.shape
    sums = out.new_empty(b, 4, h, w)
    bands = max(1, min(h // 16, n_workers(out.device)))  # one per worker: each computes two rows more than its own
    blend_sums_planes(out, color, sharp, factor.expand(b, -1, h, w), bands, sums)
    return sums


def blend_apply(out: torch.Tensor, color: torch.Tensor, sharp: torch.Tensor, sums: torch.Tensor,
                trust: torch.Tensor, leverage: float, after_step: bool = False) -> torch.Tensor:
    """:func:`blend_apply_planes` into a new (B, 3, H, W) tensor laid out as ``color`` (channels-last when the denoiser
    was handed HWC buffers, so that the result goes back to the caller's layout without a copy); ``trust``
    (B, 1, 1, 1)."""
    result = torch.empty_like(color)
    blend_apply_planes(out, color, sharp, sums.contiguous(), trust.reshape(-1).contiguous(), float(leverage),
                       int(bool(after_step)), result)
    return result
