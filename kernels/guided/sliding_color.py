"""Sliding-window Triton kernels of the colour-guide guided filter (the walk of ``sliding.py``).

K1 forms, per step of RB rows, the horizontal window sums of the 13 moments (3 guide means, 6 guide
products, src, 3 guide-src products) of entering and leaving rows, updates 13 per-column running sums and
solves the 3x3 system per pixel by cofactors. K2 box-averages a (3 planes) and b and applies them. One row
per fit step keeps all 13 moments of a warp in registers without spilling.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..box.sliding import rows_per_step, strip_width, walk_grid
from ..window_blocks import (centre, load_rows, row_window_sums, strip_keep, strip_start, sym3_adjugate, sym3_times,
                             window_pixels)

FIT_RB = 1
APPLY_RB = 2


@triton.jit
def _centred4(I_ptr, p_ptr, plane, rows, cols, H, W, c0, c1, c2, cp, sc, MODE: tl.constexpr):
    I0, inside = load_rows(I_ptr, rows, cols, H, W, MODE)
    I1, _ = load_rows(I_ptr + plane, rows, cols, H, W, MODE)
    I2, _ = load_rows(I_ptr + 2 * plane, rows, cols, H, W, MODE)
    p, _ = load_rows(p_ptr, rows, cols, H, W, MODE)
    return (tl.where(inside, (I0 - c0) / sc, 0.0), tl.where(inside, (I1 - c1) / sc, 0.0),
            tl.where(inside, (I2 - c2) / sc, 0.0), tl.where(inside, p - cp, 0.0))


@triton.jit
def _rows13(I_ptr, p_ptr, plane, rows, lrows, cols, H, W, c0, c1, c2, cp, sc, LEAVE: tl.constexpr,
            MODE: tl.constexpr, R: tl.constexpr, BWI: tl.constexpr):
    """Horizontal window sums of the 13 moments of rows ``rows`` less those of ``lrows`` (when LEAVE): the sums
    are linear, so one scan of the difference serves both."""
    I0, I1, I2, p = _centred4(I_ptr, p_ptr, plane, rows, cols, H, W, c0, c1, c2, cp, sc, MODE)
    if LEAVE:
        L0, L1, L2, lp = _centred4(I_ptr, p_ptr, plane, lrows, cols, H, W, c0, c1, c2, cp, sc, MODE)
    else:
        L0, L1, L2, lp = I0 * 0.0, I1 * 0.0, I2 * 0.0, p * 0.0
    return (row_window_sums(I0 - L0, R, BWI), row_window_sums(I1 - L1, R, BWI), row_window_sums(I2 - L2, R, BWI), row_window_sums(p - lp, R, BWI),
            row_window_sums(I0 * I0 - L0 * L0, R, BWI), row_window_sums(I0 * I1 - L0 * L1, R, BWI), row_window_sums(I0 * I2 - L0 * L2, R, BWI),
            row_window_sums(I1 * I1 - L1 * L1, R, BWI), row_window_sums(I1 * I2 - L1 * L2, R, BWI), row_window_sums(I2 * I2 - L2 * L2, R, BWI),
            row_window_sums(I0 * p - L0 * lp, R, BWI), row_window_sums(I1 * p - L1 * lp, R, BWI), row_window_sums(I2 * p - L2 * lp, R, BWI))


@triton.jit
def _fit_color_kernel(I_ptr, p_ptr, a_ptr, b_ptr, eps_ptr, C, H, W, R: tl.constexpr, MODE: tl.constexpr,
                      BWI: tl.constexpr, CH: tl.constexpr, RB: tl.constexpr):
    pc, bi, y0, k, j, cols, oc = strip_start(C, R, BWI, CH, RB)
    plane = H * W
    I_ptr += bi * 3 * plane
    p_ptr += pc * plane
    c0, m0 = centre(I_ptr, y0 + k, cols, H, W)
    c1, m1 = centre(I_ptr + plane, y0 + k, cols, H, W)
    c2, m2 = centre(I_ptr + 2 * plane, y0 + k, cols, H, W)
    cp, _ = centre(p_ptr, y0 + k, cols, H, W)
    mx = tl.maximum(tl.maximum(m0, m1), m2)
    sc = tl.where(mx > 4294967296.0, mx, 1.0)
    eps = tl.load(eps_ptr + bi) / sc / sc
    z = tl.zeros([BWI], dtype=tl.float32)
    s0, s1, s2, sp, s00, s01, s02, s11, s12, s22, s0p, s1p, s2p = z, z, z, z, z, z, z, z, z, z, z, z, z
    for w0 in range(0, 2 * R + 1, RB):
        kp = ((w0 + k) < 2 * R + 1).to(tl.float32)
        rows = y0 - 1 - R + w0 + k
        h0, h1, h2, hp, h00, h01, h02, h11, h12, h22, h0p, h1p, h2p = _rows13(
            I_ptr, p_ptr, plane, rows, rows, cols, H, W, c0, c1, c2, cp, sc, False, MODE, R, BWI)
        s0 += tl.sum(h0 * kp, axis=0)
        s1 += tl.sum(h1 * kp, axis=0)
        s2 += tl.sum(h2 * kp, axis=0)
        sp += tl.sum(hp * kp, axis=0)
        s00 += tl.sum(h00 * kp, axis=0)
        s01 += tl.sum(h01 * kp, axis=0)
        s02 += tl.sum(h02 * kp, axis=0)
        s11 += tl.sum(h11 * kp, axis=0)
        s12 += tl.sum(h12 * kp, axis=0)
        s22 += tl.sum(h22 * kp, axis=0)
        s0p += tl.sum(h0p * kp, axis=0)
        s1p += tl.sum(h1p * kp, axis=0)
        s2p += tl.sum(h2p * kp, axis=0)
    for yb in range(y0, tl.minimum(y0 + CH, H), RB):
        d0, d1, d2, dp, d00, d01, d02, d11, d12, d22, d0p, d1p, d2p = _rows13(
            I_ptr, p_ptr, plane, yb + R + k, yb - R - 1 + k, cols, H, W, c0, c1, c2, cp, sc, True, MODE, R, BWI)
        oy = yb + k
        inv_n = 1.0 / window_pixels(oy, oc, H, W, R, MODE)
        # window means of the RB rows: running sum before the step plus the scan of this step's changes
        v0 = (s0[None, :] + tl.cumsum(d0, axis=0)) * inv_n
        v1 = (s1[None, :] + tl.cumsum(d1, axis=0)) * inv_n
        v2 = (s2[None, :] + tl.cumsum(d2, axis=0)) * inv_n
        vp = (sp[None, :] + tl.cumsum(dp, axis=0)) * inv_n
        q00 = tl.maximum((s00[None, :] + tl.cumsum(d00, axis=0)) * inv_n - v0 * v0, 0.0) + eps
        q11 = tl.maximum((s11[None, :] + tl.cumsum(d11, axis=0)) * inv_n - v1 * v1, 0.0) + eps
        q22 = tl.maximum((s22[None, :] + tl.cumsum(d22, axis=0)) * inv_n - v2 * v2, 0.0) + eps
        q01 = (s01[None, :] + tl.cumsum(d01, axis=0)) * inv_n - v0 * v1
        q02 = (s02[None, :] + tl.cumsum(d02, axis=0)) * inv_n - v0 * v2
        q12 = (s12[None, :] + tl.cumsum(d12, axis=0)) * inv_n - v1 * v2
        u0 = (s0p[None, :] + tl.cumsum(d0p, axis=0)) * inv_n - v0 * vp
        u1 = (s1p[None, :] + tl.cumsum(d1p, axis=0)) * inv_n - v1 * vp
        u2 = (s2p[None, :] + tl.cumsum(d2p, axis=0)) * inv_n - v2 * vp
        s0 += tl.sum(d0, axis=0)
        s1 += tl.sum(d1, axis=0)
        s2 += tl.sum(d2, axis=0)
        sp += tl.sum(dp, axis=0)
        s00 += tl.sum(d00, axis=0)
        s01 += tl.sum(d01, axis=0)
        s02 += tl.sum(d02, axis=0)
        s11 += tl.sum(d11, axis=0)
        s12 += tl.sum(d12, axis=0)
        s22 += tl.sum(d22, axis=0)
        s0p += tl.sum(d0p, axis=0)
        s1p += tl.sum(d1p, axis=0)
        s2p += tl.sum(d2p, axis=0)
        k00, k01, k02, k11, k12, k22, det = sym3_adjugate(q00, q01, q02, q11, q12, q22)
        inv_det = 1.0 / (det * sc)
        a0, a1, a2 = sym3_times(k00, k01, k02, k11, k12, k22, u0, u1, u2)
        a0 *= inv_det
        a1 *= inv_det
        a2 *= inv_det
        b = vp + cp - a0 * (v0 * sc + c0) - a1 * (v1 * sc + c1) - a2 * (v2 * sc + c2)
        keep = strip_keep(oy, oc, j, y0, H, W, R, BWI, CH)
        pix = oy * W + oc
        tl.store(a_ptr + (pc * 3 + 0) * plane + pix, a0, mask=keep)
        tl.store(a_ptr + (pc * 3 + 1) * plane + pix, a1, mask=keep)
        tl.store(a_ptr + (pc * 3 + 2) * plane + pix, a2, mask=keep)
        tl.store(b_ptr + pc * plane + pix, b, mask=keep)


@triton.jit
def _rows4(a_ptr, b_ptr, plane, rows, cols, H, W, c0, c1, c2, cb, MODE: tl.constexpr, R: tl.constexpr,
           BWI: tl.constexpr):
    a0, inside = load_rows(a_ptr, rows, cols, H, W, MODE)
    a1, _ = load_rows(a_ptr + plane, rows, cols, H, W, MODE)
    a2, _ = load_rows(a_ptr + 2 * plane, rows, cols, H, W, MODE)
    b, _ = load_rows(b_ptr, rows, cols, H, W, MODE)
    return (row_window_sums(tl.where(inside, a0 - c0, 0.0), R, BWI), row_window_sums(tl.where(inside, a1 - c1, 0.0), R, BWI),
            row_window_sums(tl.where(inside, a2 - c2, 0.0), R, BWI), row_window_sums(tl.where(inside, b - cb, 0.0), R, BWI))


@triton.jit
def _apply_color_kernel(a_ptr, b_ptr, I_ptr, q_ptr, ma_ptr, mb_ptr, C, H, W, R: tl.constexpr, MODE: tl.constexpr,
                        APPLY: tl.constexpr, STORE_MA: tl.constexpr, BWI: tl.constexpr, CH: tl.constexpr,
                        RB: tl.constexpr):
    pc, bi, y0, k, j, cols, oc = strip_start(C, R, BWI, CH, RB)
    plane = H * W
    a_ptr += pc * 3 * plane
    b_ptr += pc * plane
    c0, _ = centre(a_ptr, y0 + k, cols, H, W)
    c1, _ = centre(a_ptr + plane, y0 + k, cols, H, W)
    c2, _ = centre(a_ptr + 2 * plane, y0 + k, cols, H, W)
    cb, _ = centre(b_ptr, y0 + k, cols, H, W)
    z = tl.zeros([BWI], dtype=tl.float32)
    s0, s1, s2, sb = z, z, z, z
    for w0 in range(0, 2 * R + 1, RB):
        kp = ((w0 + k) < 2 * R + 1).to(tl.float32)
        h0, h1, h2, hb = _rows4(a_ptr, b_ptr, plane, y0 - 1 - R + w0 + k, cols, H, W, c0, c1, c2, cb, MODE, R, BWI)
        s0 += tl.sum(h0 * kp, axis=0)
        s1 += tl.sum(h1 * kp, axis=0)
        s2 += tl.sum(h2 * kp, axis=0)
        sb += tl.sum(hb * kp, axis=0)
    for yb in range(y0, tl.minimum(y0 + CH, H), RB):
        e0, e1, e2, eb = _rows4(a_ptr, b_ptr, plane, yb + R + k, cols, H, W, c0, c1, c2, cb, MODE, R, BWI)
        l0, l1, l2, lb = _rows4(a_ptr, b_ptr, plane, yb - R - 1 + k, cols, H, W, c0, c1, c2, cb, MODE, R, BWI)
        d0 = e0 - l0
        d1 = e1 - l1
        d2 = e2 - l2
        oy = yb + k
        inv_n = 1.0 / window_pixels(oy, oc, H, W, R, MODE)
        ma0 = (s0[None, :] + tl.cumsum(d0, axis=0)) * inv_n + c0
        ma1 = (s1[None, :] + tl.cumsum(d1, axis=0)) * inv_n + c1
        ma2 = (s2[None, :] + tl.cumsum(d2, axis=0)) * inv_n + c2
        mb = (sb[None, :] + tl.cumsum(eb - lb, axis=0)) * inv_n + cb
        s0 += tl.sum(d0, axis=0)
        s1 += tl.sum(d1, axis=0)
        s2 += tl.sum(d2, axis=0)
        sb += tl.sum(eb - lb, axis=0)
        keep = strip_keep(oy, oc, j, y0, H, W, R, BWI, CH)
        pix = oy * W + oc
        if APPLY:
            g0 = tl.load(I_ptr + (bi * 3 + 0) * plane + pix, mask=keep, other=0.0).to(tl.float32)
            g1 = tl.load(I_ptr + (bi * 3 + 1) * plane + pix, mask=keep, other=0.0).to(tl.float32)
            g2 = tl.load(I_ptr + (bi * 3 + 2) * plane + pix, mask=keep, other=0.0).to(tl.float32)
            tl.store(q_ptr + pc * plane + pix, ma0 * g0 + ma1 * g1 + ma2 * g2 + mb, mask=keep)
        else:
            tl.store(mb_ptr + pc * plane + pix, mb, mask=keep)
        if STORE_MA:
            tl.store(ma_ptr + (pc * 3 + 0) * plane + pix, ma0, mask=keep)
            tl.store(ma_ptr + (pc * 3 + 1) * plane + pix, ma1, mask=keep)
            tl.store(ma_ptr + (pc * 3 + 2) * plane + pix, ma2, mask=keep)


def forward_color(I, p, eps, r, mode: int, apply: bool, keep_ma: bool = False):
    """I (B, 3, H, W), p (B, C, H, W) float32 contiguous, eps (B,) float32: q, (q, mean a) or (mean a, mean b)."""
    bsz, _, h, w = I.shape
    c = p.shape[1]
    bwi = strip_width(r)
    grid, ch = walk_grid(bsz * c, h, w, r, bwi)
    a = torch.empty(bsz, c, 3, h, w, device=I.device, dtype=torch.float32)
    b = torch.empty(bsz, c, h, w, device=I.device, dtype=torch.float32)
    _fit_color_kernel[grid](I, p, a, b, eps, c, h, w, R=r, MODE=mode, BWI=bwi, CH=ch, RB=rows_per_step(FIT_RB),
                            num_warps=1)
    if apply:
        q = torch.empty_like(b)
        ma = torch.empty_like(a) if keep_ma else q
        _apply_color_kernel[grid](a, b, I, q, ma, q, c, h, w, R=r, MODE=mode, APPLY=True, STORE_MA=keep_ma,
                                  BWI=bwi, CH=ch, RB=rows_per_step(APPLY_RB), num_warps=1)
        return (q, ma) if keep_ma else q
    ma, mb = torch.empty_like(a), torch.empty_like(b)
    _apply_color_kernel[grid](a, b, I, mb, ma, mb, c, h, w, R=r, MODE=mode, APPLY=False, STORE_MA=True, BWI=bwi,
                              CH=ch, RB=rows_per_step(APPLY_RB), num_warps=1)
    return ma, mb
