"""numba loops for FLNR's per-pixel stages on CPU float32 without autograd (see :mod:`vision.kernels.runtime.jit`).

:func:`guide_head` is :func:`vision.denoise.flnr._head_bands` and :func:`finish` is
:meth:`vision.denoise.flnr.FLNR._blended_light` plus the emission, row by row: every intermediate (the
upsampled code, the hidden layer, the light and its 3 x 3 means) lives in a row buffer in cache, so each
stage reads its inputs and writes its output once. Imported only where numba is available.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from vision.kernels.runtime.jit import kernel
from vision.kernels.local_linear.cpu_path import cell_row, upsample_row

from .log_cpu import _log_row

_NONE = np.zeros((1, 1, 1, 1), np.float32)  # stands in for a missing buffer (its flag is 0)


@njit(cache=True, inline="always")
def _add_rows(sums, at, v, b, y, W):
    """sums[at + c] += row y of the buffer v (B or 1, c, H, W) for image b, every channel c."""
    vb = v[min(b, v.shape[0] - 1)]
    for c in range(vb.shape[0]):
        src, dst = vb[c, y], sums[at + c]
        for x in range(W):
            dst[x] += src[x]


@njit(cache=True, inline="always")
def _add_guides(sums, normal, depth, ao, albedo, present, b, y, W):
    """sums[0:8] += row y of the guide buffers in the GUIDES layout (normal 3, depth 1, AO 1, albedo 3) for image b;
    a buffer whose ``present`` flag is 0 adds nothing."""
    if present[0]:
        _add_rows(sums, 0, normal, b, y, W)
    if present[1]:
        _add_rows(sums, 3, depth, b, y, W)
    if present[2]:
        _add_rows(sums, 4, ao, b, y, W)
    if present[3]:
        _add_rows(sums, 5, albedo, b, y, W)


@kernel("void(float32[:, :, :, :], float32[:, :, :, :], float32[:, :, :, :], float32[:, :, :, :], "
        "float32[:, :, :, :], float32[:, :, :, :], boolean[::1], int64, float32[:, :, :, ::1])")
def cell_stats(target, mask, normal, depth, ao, albedo, present, s, out):
    """out (B, 13, gh, gw), per s x s cell (the last partial cells over their real pixels): the means of the 8
    guide channels in the :data:`~vision.denoise.flnr.GUIDES` layout (0 for a missing buffer: ``present``
    (4,) flags, a dummy array in its place; depth as given, log-depth for FLNR), of ``log1p(max(target, 0))``
    per channel and of the mask, and the standard deviation of the log-luminance (the channel mean of those
    logs): what :func:`~vision.denoise.flnr_net.cell_guides` and :func:`~vision.denoise.flnr_net.cell_inputs`
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
            _add_guides(sums, normal, depth, ao, albedo, present, b, y, W)
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
    :func:`~vision.denoise.flnr_net.cell_guides` and, but for the standardised guides,
    :func:`~vision.denoise.flnr_net.cell_inputs`."""
    b, _, h, w = target.shape
    out = target.new_empty(b, 13, -(-h // cell), -(-w // cell))
    arrays = [_NONE if v is None else v for v in buffers]
    present = np.array([v is not None for v in buffers], np.bool_)
    cell_stats(target, mask.expand(b, 1, h, w), *arrays, present, cell, out)
    return out[:, :8], out[:, 8:]


@kernel("void(float32[:, :, :, ::1], int64, float32[:, :, ::1], float32[:, :, :, :], float32[:, :, :, :], "
        "float32[:, :, :, :], float32[:, :, :, :], boolean[::1], float32[:, ::1], float32[::1], float32[:, :, :, ::1])")
def guide_head(code, s, wT, normal, depth, ao, albedo, present, w2, b2, g):
    """g (B, Q, H, W) = ``W2 leaky(up(code) + W f) + b2``, or ``up(code) + W f`` when w2 has no rows.

    code (B, width, gh, gw): the network's code plus the head's bias, on s x s cells; wT (B or 1, width, 8):
    the input layer on the :data:`~vision.denoise.flnr.GUIDES` channels (normal 3, log-depth 1, AO 1,
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
        _add_guides(feats, normal, depth, ao, albedo, present, b, y, W)
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


@kernel("void(float32[:, :, :, :], float32[:, :, :, ::1], float32[:, :, :, ::1], float32[:, :, :, ::1], "
        "float32[:, :, :, ::1], float32[:, :, :, ::1])")
def detail(out, add, factor, target, logit, mask):
    """:func:`vision.denoise.flnr_stages.detail_blend` in one pass, in place on ``out`` (any layout), the window
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


@kernel("void(float32[:, :, :, :], float32[:, :, :, :], float32[:, :, :, :], boolean, boolean, float64, "
        "float32[:, :, :, ::1], float32[:, :, :, ::1], float32[:, :, :, ::1], float32[:, :, :, ::1], "
        "float32[:, :, :, ::1], int64[::1])")
def demodulate(color, albedo, emission, has_albedo, has_emission, floor, target, factor, mask, albedo_out,
               emission_out, hits):
    """:func:`vision.denoise.buffers.demodulate` before its emitter fill, in one pass over the buffers as they lie
    (HWC arrays are strided planes): target = (colour - emission) / factor with factor = max(albedo, ``floor``);
    mask = 1 where any emission channel > 0; ``hits[b H + y]`` counts row y's
    emitter pixels. Also writes the albedo and the emission as planes (``albedo_out``, ``emission_out``; FLNR's
    later stages read them so) when there are such. color (B, 3, H, W); albedo, emission (B or 1, 3, H, W)."""
    B, C, H, W = color.shape
    one, zero, fl = np.float32(1.0), np.float32(0.0), np.float32(floor)
    for n in prange(B * H):
        b = n // H
        y = n - b * H
        m = mask[b, 0, y]
        for x in range(W):
            m[x] = zero
        for c in range(C):
            src, t, f = color[b, c, y], target[b, c, y], factor[b, c, y]
            for x in range(W):
                t[x] = src[x]
            if has_emission:
                e, eo = emission[min(b, emission.shape[0] - 1), c, y], emission_out[b, c, y]
                for x in range(W):
                    v = e[x]
                    eo[x] = v
                    t[x] -= v
                    if v > zero:
                        m[x] = one
            if has_albedo:
                a, ao = albedo[min(b, albedo.shape[0] - 1), c, y], albedo_out[b, c, y]
                for x in range(W):
                    v = a[x]
                    ao[x] = v
                    g = v if v >= fl else fl
                    f[x] = g
                    t[x] /= g
            else:
                for x in range(W):
                    f[x] = one
        count = 0
        for x in range(W):
            count += m[x] > zero
        hits[n] = count


def head(model, code: torch.Tensor, buffers: list, weight: torch.Tensor, bias: torch.Tensor, size, cell: int):
    """:func:`vision.denoise.flnr._head_bands` by :func:`guide_head`: (B, Q, H, W) learned guides."""
    b, width = code.shape[:2]
    c = (code + bias.reshape(-1, width, 1, 1)).contiguous()
    w_t = weight.detach().transpose(1, 2).contiguous()
    if model.head_out is None:
        w2, b2 = np.zeros((0, width), np.float32), np.zeros(0, np.float32)
    else:
        w2, b2 = model.head_out.weight.detach().contiguous(), model.head_out.bias.detach().contiguous()
    q = width if model.head_out is None else w2.shape[0]
    g = code.new_empty(b, q, *size)
    arrays = [_NONE if v is None else v for v in buffers]
    present = np.array([v is not None for v in buffers], np.bool_)
    guide_head(c, cell, w_t, *arrays, present, w2, b2, g)
    return g


def finish_frame(model, fitted, factor, add, blend, albedo, out):
    """:func:`vision.denoise.flnr._finish_bands` by :func:`finish`, into ``out``."""
    gain = float(model.edge_gain.detach())
    top = float(torch.sigmoid(model.blend_max.detach()))
    # contiguous inputs (copies only for batches that broadcast a buffer), the output in any layout
    fitted, factor, add, blend = (t.contiguous() for t in (fitted, factor, add, blend))
    has_albedo = albedo is not None
    finish(fitted, factor, add, blend, albedo.contiguous() if has_albedo else _NONE, has_albedo, gain, top, out)
    return out


def prepare(color: torch.Tensor, albedo, emission, fill_radius: int, floor: float):
    """FLNR's demodulation on CPU float32 (colour at the guides' resolution) by :func:`demodulate`, then
    :func:`~vision.denoise.buffers.fill_emitters` where there are emitter pixels: (target, factor, add, mask,
    albedo, emission) with the last two as planes (or None)."""
    from . import buffers as B

    b, c, h, w = color.shape
    target, factor = color.new_empty(b, c, h, w), color.new_empty(b, c, h, w)
    mask = color.new_empty(b, 1, h, w)
    albedo_p = None if albedo is None else color.new_empty(b, c, h, w)
    emission_p = None if emission is None else color.new_empty(b, c, h, w)
    hits = np.empty(b * h, np.int64)
    demodulate(color, _NONE if albedo is None else albedo, _NONE if emission is None else emission,
               albedo is not None, emission is not None, floor, target, factor, mask,
               _NONE if albedo_p is None else albedo_p, _NONE if emission_p is None else emission_p, hits)
    rows = np.flatnonzero(hits.reshape(b, h).any(0))
    if rows.size:
        # only the rows with emitter pixels change, and each fill reads fill_radius rows around its pixel: fill
        # that band (a light or a sky often covers a few rows of the frame), with the true image border where
        # the band reaches it, so every window is the one the whole frame would give
        y0, y1 = max(0, int(rows[0]) - fill_radius), min(h, int(rows[-1]) + 1 + fill_radius)
        band = (slice(None), slice(None), slice(y0, y1))
        t_band, f_band = B.fill_emitters(target[band], factor[band], None if albedo_p is None else albedo_p[band],
                                         mask[band], fill_radius, floor)
        target[band], factor[band] = t_band, f_band
    add = torch.zeros_like(target) if emission_p is None else emission_p  # planar, as the last steps read it
    return target, factor, add, mask, albedo_p, emission_p
