"""numba loop for :func:`vision.denoise.reproject.reproject` on CPU float32 (see :mod:`vision.kernels.runtime.jit`):
the four bilinear taps, the same-surface test and the weighted mean in one pass per row, where the PyTorch path
streams some 60 full planes through memory. Imported only where numba is available; the tests compare it with
the PyTorch path and a float64 loop.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from vision.kernels.runtime.jit import kernel

F4 = "float32[:, :, :, :]"


def njit_inline(fn):
    return njit(cache=True, inline="always")(fn)


@njit_inline
def _same(pd, pn, pi, bd, bn, bi, y0, x0, cd, cn, ci, cbd, cbn, cbi, y1, x1, tol, use):
    """Whether previous-frame pixel (y0, x0) shows the surface of current pixel (y1, x1) (reproject's test)."""
    zero = np.float32(0.0)
    if use[2] and abs(pi[bi, 0, y0, x0] - ci[cbi, 0, y1, x1]) >= np.float32(0.5):
        return False
    if use[0]:
        d0, d1 = pd[bd, 0, y0, x0], cd[cbd, 0, y1, x1]
        if (d0 > zero) != (d1 > zero):
            return False
        if d0 > zero and abs(d0 - d1) > tol[0] * max(d0, d1):
            return False
    if use[1]:
        n0x, n0y, n0z = pn[bn, 0, y0, x0], pn[bn, 1, y0, x0], pn[bn, 2, y0, x0]
        n1x, n1y, n1z = cn[cbn, 0, y1, x1], cn[cbn, 1, y1, x1], cn[cbn, 2, y1, x1]
        dot = n0x * n1x + n0y * n1y + n0z * n1z
        nn = (n0x * n0x + n0y * n0y + n0z * n0z) * (n1x * n1x + n1y * n1y + n1z * n1z)
        # dot >= tol |n0| |n1| without the square root (tol > 0); a zero normal leaves it to depth and index
        if nn > zero and (dot < zero or dot * dot < tol[1] * tol[1] * nn):
            return False
    return True


@njit_inline
def _batches(b, pd, pn, pi, cd, cn, ci, offset):
    """The batch row each buffer gives batch ``b`` (buffers of batch 1 serve every image)."""
    return (min(b, pd.shape[0] - 1), min(b, pn.shape[0] - 1), min(b, pi.shape[0] - 1), min(b, cd.shape[0] - 1),
            min(b, cn.shape[0] - 1), min(b, ci.shape[0] - 1), min(b, offset.shape[0] - 1))


@njit_inline
def _origin(offset, ob, y, x):
    """The previous position of pixel (y, x): its top-left bilinear tap and the fractions towards the others."""
    fxs = np.float32(x) + offset[ob, 0, y, x]
    fys = np.float32(y) + offset[ob, 1, y, x]
    x0, y0 = np.floor(fxs), np.floor(fys)
    return int(x0), int(y0), fxs - x0, fys - y0


@njit_inline
def _tap(ix, iy, fx, fy, t, H, W):
    """Bilinear tap ``t`` (0..3) from :func:`_origin`: its pixel and weight, the weight -1 outside the frame."""
    dx, dy = t & 1, t >> 1
    xi, yi = ix + dx, iy + dy
    if xi < 0 or xi > W - 1 or yi < 0 or yi > H - 1:
        return xi, yi, np.float32(-1.0)
    one = np.float32(1.0)
    return xi, yi, (fx if dx else one - fx) * (fy if dy else one - fy)


@kernel(f"void({F4}, {F4}, {F4}, {F4}, {F4}, {F4}, {F4}, {F4}, float32[::1], int64[::1], "
        "float32[:, :, :, ::1], float32[:, :, :, ::1])")
def reproject_planes(history, offset, pd, pn, pi, cd, cn, ci, tol, use, out, weight):
    """out (B, C, H, W) and weight (B, 1, H, W) as :func:`vision.denoise.reproject.reproject` returns them.

    ``pd``/``cd`` depth, ``pn``/``cn`` normal, ``pi``/``ci`` index of the previous / current frame (batch 1 or
    B; unused ones any (1, k, 1, 1) array), ``use`` = (depth, normal, index) flags, ``tol`` = (depth, normal,
    threshold of no history)."""
    B, C, H, W = history.shape
    zero = np.float32(0.0)
    for n in prange(B * H):
        b, y = n // H, n % H
        bd, bn, bi, cbd, cbn, cbi, ob = _batches(b, pd, pn, pi, cd, cn, ci, offset)
        acc = np.zeros(C, np.float32)
        for x in range(W):
            ix, iy, fx, fy = _origin(offset, ob, y, x)
            total = zero
            acc[:] = zero
            for t in range(4):
                xi, yi, wt = _tap(ix, iy, fx, fy, t, H, W)
                if wt < zero or not _same(pd, pn, pi, bd, bn, bi, yi, xi, cd, cn, ci, cbd, cbn, cbi, y, x, tol, use):
                    continue
                total += wt
                for c in range(C):
                    acc[c] += wt * history[b, c, yi, xi]
            if total > tol[2]:
                for c in range(C):
                    out[b, c, y, x] = acc[c] / total
                weight[b, 0, y, x] = total
            else:
                for c in range(C):
                    out[b, c, y, x] = zero
                weight[b, 0, y, x] = zero


def reproject(history: torch.Tensor, offset: torch.Tensor, prev_keys: dict, cur_keys: dict, tol, no_history: float
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`reproject_planes` on float32 CPU tensors; returns (values, weight)."""
    b, c, h, w = history.shape
    dummy = history.new_zeros(1, 3, 1, 1)
    use = np.array([cur_keys.get(k) is not None for k in ("depth", "normal", "index")], np.int64)
    pick = lambda keys, k: dummy if keys.get(k) is None else keys[k]  # noqa: E731
    out = history.new_empty(b, c, h, w)
    weight = history.new_empty(b, 1, h, w)
    reproject_planes(history, offset, pick(prev_keys, "depth"), pick(prev_keys, "normal"), pick(prev_keys, "index"),
                     pick(cur_keys, "depth"), pick(cur_keys, "normal"), pick(cur_keys, "index"),
                     np.array([tol.depth, tol.normal, no_history], np.float32), use, out, weight)
    return out, weight


@kernel(f"void({F4}, {F4}, {F4}, float32[::1], int64[::1], uint8[:, :, ::1])")
def edge_flags(cd, cn, ci, par, use, flags):
    """flags (B, H, W): bit 0 set where the pixel is not on the surface of its right neighbour, bit 1 its lower,
    bit 2 its lower-right, bit 3 its lower-left one (each pair tested once; the border replicated)."""
    B, H, W = flags.shape
    for n in prange(B * H):
        b, y = n // H, n % H
        _, _, _, cbd, cbn, cbi, _ = _batches(b, cd, cn, ci, cd, cn, ci, cd)
        yd = min(y + 1, H - 1)
        for x in range(W):
            xr, xl = min(x + 1, W - 1), max(x - 1, 0)
            f = 0
            if not _same(cd, cn, ci, cbd, cbn, cbi, y, xr, cd, cn, ci, cbd, cbn, cbi, y, x, par, use):
                f |= 1
            if not _same(cd, cn, ci, cbd, cbn, cbi, yd, x, cd, cn, ci, cbd, cbn, cbi, y, x, par, use):
                f |= 2
            if not _same(cd, cn, ci, cbd, cbn, cbi, yd, xr, cd, cn, ci, cbd, cbn, cbi, y, x, par, use):
                f |= 4
            if not _same(cd, cn, ci, cbd, cbn, cbi, yd, xl, cd, cn, ci, cbd, cbn, cbi, y, x, par, use):
                f |= 8
            flags[b, y, x] = f


@kernel(f"void({F4}, {F4}, {F4}, {F4}, {F4}, {F4}, {F4}, {F4}, {F4}, float32[::1], int64[::1], "
        "uint8[:, :, ::1], float32[:, :, :, ::1], float32[:, :, :, ::1])")
def edge_history_planes(out, history, offset, pd, pn, pi, cd, cn, ci, par, use, flags, result, new_history):
    """:func:`vision.denoise.edge_history.edge_history` on float32 planes: ``par`` = (depth tolerance, normal
    tolerance, threshold of no history, cap, gamma); result (B, 3, H, W), new_history (B, 4, H, W)."""
    B, _, H, W = out.shape
    zero, one = np.float32(0.0), np.float32(1.0)
    for n in prange(B * H):
        b, y = n // H, n % H
        bd, bn, bi, cbd, cbn, cbi, ob = _batches(b, pd, pn, pi, cd, cn, ci, offset)
        acc = np.zeros(4, np.float32)
        for x in range(W):
            # a neighbour off this pixel's surface: its own pair bits, or the bits its left / upper neighbours
            # set towards it
            f = flags[b, y, x]
            if x > 0:
                f |= flags[b, y, x - 1] & 1
            if y > 0:
                f |= flags[b, y - 1, x] & 2
                if x > 0:
                    f |= flags[b, y - 1, x - 1] & 4
                if x < W - 1:
                    f |= flags[b, y - 1, x + 1] & 8
            edge = f != 0
            done = not edge
            if edge:
                ix, iy, fx, fy = _origin(offset, ob, y, x)
                total = zero
                acc[:] = zero
                for t in range(4):
                    xi, yi, wt = _tap(ix, iy, fx, fy, t, H, W)
                    if wt < zero:
                        continue
                    seen = False
                    for j in range(9):
                        yy, xx = min(max(y + j // 3 - 1, 0), H - 1), min(max(x + j % 3 - 1, 0), W - 1)
                        if _same(pd, pn, pi, bd, bn, bi, yi, xi, cd, cn, ci, cbd, cbn, cbi, yy, xx, par, use):
                            seen = True
                            break
                    if not seen:
                        continue
                    total += wt
                    for c in range(4):
                        acc[c] += wt * history[b, c, yi, xi]
                if total > par[2]:
                    count = min(acc[3] / total + one, par[3])
                    for c in range(3):
                        s = zero
                        s2 = zero
                        k = 0
                        for yy in range(max(y - 1, 0), min(y + 2, H)):
                            for xx in range(max(x - 1, 0), min(x + 2, W)):
                                v = out[b, c, yy, xx]
                                s += v
                                s2 += v * v
                                k += 1
                        mean = s / np.float32(k)
                        sd = np.sqrt(max(s2 / np.float32(k) - mean * mean, zero))
                        old = min(max(acc[c] / total, mean - par[4] * sd), mean + par[4] * sd)
                        v = old + (out[b, c, y, x] - old) / count
                        result[b, c, y, x] = v
                        new_history[b, c, y, x] = v
                    new_history[b, 3, y, x] = count
                else:
                    done = True
            if done:
                for c in range(3):
                    result[b, c, y, x] = out[b, c, y, x]
                    new_history[b, c, y, x] = out[b, c, y, x]
                new_history[b, 3, y, x] = one


def edge_history(out, history, offset, prev_keys, cur_keys, tol, cap, gamma, no_history):
    """:func:`edge_history_planes` on float32 CPU tensors; returns (result, new history)."""
    b, _, h, w = out.shape
    dummy = out.new_zeros(1, 3, 1, 1)
    use = np.array([cur_keys.get(k) is not None for k in ("depth", "normal", "index")], np.int64)
    pick = lambda keys, k: dummy if keys.get(k) is None else keys[k]  # noqa: E731
    result = out.new_empty(b, 3, h, w)
    new_history = out.new_empty(b, 4, h, w)
    par = np.array([tol.depth, tol.normal, no_history, cap, gamma], np.float32)
    cur = [pick(cur_keys, k) for k in ("depth", "normal", "index")]
    flags = np.empty((b, h, w), np.uint8)
    edge_flags(*cur, par, use, flags)
    edge_history_planes(out, history, offset, pick(prev_keys, "depth"), pick(prev_keys, "normal"),
                        pick(prev_keys, "index"), *cur, par, use, flags, result, new_history)
    return result, new_history
