"""Fused Triton backward of the colour-guide guided filter ("valid" border, q output): the walk of
``triton_backward.py`` with a 3-channel guide.

B1 (``_grad_moments_color``) keeps 17 running sums per strip column: the 13 window moments of the forward fit
(3 guide means, 6 guide products, src, 3 guide-src products) and the adjoint sums M^T(g) and M^T(g I_k);
per pixel it inverts Sigma + eps by cofactors and runs the chain rule down to 14 planes of gradients of window
means. B2 (``_grad_inputs_color``) takes the adjoint window sums of 13 of them and forms dI and dp. One row per
step keeps a warp's sums and per-pixel algebra in registers without spilling.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..window_blocks import (adjoint_centre, adjoint_step, adjoint_warm, centre, frame, row_window_sums, strip_keep,
                             strip_start, sym3_adjugate, sym3_times, window_pixels)
from .triton_backward import walk

MOMENTS_RB = 1
INPUTS_RB = 1


def width(r: int) -> int:
    """BWI of the colour backward walk (the strip plus its 2r halo): 64 columns for every radius, since at 128
    the 17 running sums and the per-pixel 3x3 algebra of one warp spill past 255 registers on sm_90."""
    return 64


@triton.jit
def _vals8(I_ptr, p_ptr, g_ptr, plane, offs, inside, inv, c0, c1, c2, cp, cg, cg0, cg1, cg2):
    """Centred guide channels and src, and g / N with its products with the centred guide (each centred)."""
    J0 = tl.where(inside, tl.load(I_ptr + offs, mask=inside, other=0.0) - c0, 0.0)
    J1 = tl.where(inside, tl.load(I_ptr + plane + offs, mask=inside, other=0.0) - c1, 0.0)
    J2 = tl.where(inside, tl.load(I_ptr + 2 * plane + offs, mask=inside, other=0.0) - c2, 0.0)
    p = tl.where(inside, tl.load(p_ptr + offs, mask=inside, other=0.0) - cp, 0.0)
    g = tl.load(g_ptr + offs, mask=inside, other=0.0) * inv
    return (J0, J1, J2, p, tl.where(inside, g - cg, 0.0), tl.where(inside, g * J0 - cg0, 0.0),
            tl.where(inside, g * J1 - cg1, 0.0), tl.where(inside, g * J2 - cg2, 0.0))


@triton.jit
def _rows17(I_ptr, p_ptr, g_ptr, plane, rows, lrows, cols, H, W, c0, c1, c2, cp, cg, cg0, cg1, cg2,
            LEAVE: tl.constexpr, R: tl.constexpr, BWI: tl.constexpr):
    """Horizontal window sums of the 13 moments and 4 adjoint terms over ``rows`` less ``lrows`` (when LEAVE)."""
    offs, inside, inv = frame(rows, cols, H, W, R)
    J0, J1, J2, p, g, gJ0, gJ1, gJ2 = _vals8(I_ptr, p_ptr, g_ptr, plane, offs, inside, inv, c0, c1, c2, cp, cg,
                                             cg0, cg1, cg2)
    if LEAVE:
        offs, inside, inv = frame(lrows, cols, H, W, R)
        L0, L1, L2, lp, lg, lg0, lg1, lg2 = _vals8(I_ptr, p_ptr, g_ptr, plane, offs, inside, inv, c0, c1, c2, cp,
                                                   cg, cg0, cg1, cg2)
    else:
        L0, L1, L2, lp, lg, lg0, lg1, lg2 = J0 * 0.0, J1 * 0.0, J2 * 0.0, p * 0.0, g * 0.0, g * 0.0, g * 0.0, g * 0.0
    return (row_window_sums(J0 - L0, R, BWI), row_window_sums(J1 - L1, R, BWI), row_window_sums(J2 - L2, R, BWI), row_window_sums(p - lp, R, BWI),
            row_window_sums(J0 * J0 - L0 * L0, R, BWI), row_window_sums(J0 * J1 - L0 * L1, R, BWI), row_window_sums(J0 * J2 - L0 * L2, R, BWI),
            row_window_sums(J1 * J1 - L1 * L1, R, BWI), row_window_sums(J1 * J2 - L1 * L2, R, BWI), row_window_sums(J2 * J2 - L2 * L2, R, BWI),
            row_window_sums(J0 * p - L0 * lp, R, BWI), row_window_sums(J1 * p - L1 * lp, R, BWI), row_window_sums(J2 * p - L2 * lp, R, BWI),
            row_window_sums(g - lg, R, BWI), row_window_sums(gJ0 - lg0, R, BWI), row_window_sums(gJ1 - lg1, R, BWI), row_window_sums(gJ2 - lg2, R, BWI))


@triton.jit
def _add17(s0, s1, s2, sp, s00, s01, s02, s11, s12, s22, s0p, s1p, s2p, sg, sg0, sg1, sg2,
           d0, d1, d2, dp, d00, d01, d02, d11, d12, d22, d0p, d1p, d2p, dg, dg0, dg1, dg2, kp):
    """The 17 running sums plus the column sums of their RB-row changes, each row weighted by ``kp``."""
    return (s0 + tl.sum(d0 * kp, axis=0), s1 + tl.sum(d1 * kp, axis=0), s2 + tl.sum(d2 * kp, axis=0),
            sp + tl.sum(dp * kp, axis=0), s00 + tl.sum(d00 * kp, axis=0), s01 + tl.sum(d01 * kp, axis=0),
            s02 + tl.sum(d02 * kp, axis=0), s11 + tl.sum(d11 * kp, axis=0), s12 + tl.sum(d12 * kp, axis=0),
            s22 + tl.sum(d22 * kp, axis=0), s0p + tl.sum(d0p * kp, axis=0), s1p + tl.sum(d1p * kp, axis=0),
            s2p + tl.sum(d2p * kp, axis=0), sg + tl.sum(dg * kp, axis=0), sg0 + tl.sum(dg0 * kp, axis=0),
            sg1 + tl.sum(dg1 * kp, axis=0), sg2 + tl.sum(dg2 * kp, axis=0))


@triton.jit
def _solve_store(base, step, keep, eps, r00, r11, r22, q01, q02, q12, v0, v1, v2, e0, e1, e2, g_b, mI0, mI1, mI2,
                 mp):
    """Per pixel of the RB rows: invert Sigma + eps by cofactors (the clamped variances plus ``eps`` on the
    diagonal), form a = S^-1 cov(I, p) and g_cov = S^-1 g_a, and store the 14 gradient planes at ``base`` (one
    every ``step``) where ``keep``. ``mI*``, ``mp``: the window means of the guide and src (centres added back)."""
    q00 = tl.maximum(r00, 0.0) + eps
    q11 = tl.maximum(r11, 0.0) + eps
    q22 = tl.maximum(r22, 0.0) + eps
    k00, k01, k02, k11, k12, k22, det = sym3_adjugate(q00, q01, q02, q11, q12, q22)
    inv_det = 1.0 / det
    k00 *= inv_det
    k01 *= inv_det
    k02 *= inv_det
    k11 *= inv_det
    k12 *= inv_det
    k22 *= inv_det
    a0, a1, a2 = sym3_times(k00, k01, k02, k11, k12, k22, v0, v1, v2)
    u0, u1, u2 = sym3_times(k00, k01, k02, k11, k12, k22, e0, e1, e2)  # g_cov = S^-1 g_a
    # G = -g_cov a^T with clamped diagonal variances masked; H = G + G^T
    G00 = tl.where(r00 > 0, -u0 * a0, 0.0)
    G11 = tl.where(r11 > 0, -u1 * a1, 0.0)
    G22 = tl.where(r22 > 0, -u2 * a2, 0.0)
    H01 = -(u0 * a1 + u1 * a0)
    H02 = -(u0 * a2 + u2 * a0)
    H12 = -(u1 * a2 + u2 * a1)
    tl.store(base, -g_b * a0 - (2.0 * G00 * mI0 + H01 * mI1 + H02 * mI2) - u0 * mp, mask=keep)
    tl.store(base + step, -g_b * a1 - (H01 * mI0 + 2.0 * G11 * mI1 + H12 * mI2) - u1 * mp, mask=keep)
    tl.store(base + 2 * step, -g_b * a2 - (H02 * mI0 + H12 * mI1 + 2.0 * G22 * mI2) - u2 * mp, mask=keep)
    tl.store(base + 3 * step, G00, mask=keep)
    tl.store(base + 4 * step, H01, mask=keep)
    tl.store(base + 5 * step, H02, mask=keep)
    tl.store(base + 6 * step, G11, mask=keep)
    tl.store(base + 7 * step, H12, mask=keep)
    tl.store(base + 8 * step, G22, mask=keep)
    tl.store(base + 9 * step, g_b - (u0 * mI0 + u1 * mI1 + u2 * mI2), mask=keep)
    tl.store(base + 10 * step, u0, mask=keep)
    tl.store(base + 11 * step, u1, mask=keep)
    tl.store(base + 12 * step, u2, mask=keep)
    tl.store(base + 13 * step, -(u0 * a0 + u1 * a1 + u2 * a2), mask=keep)


@triton.jit
def _grad_moments_color(I_ptr, p_ptr, g_ptr, eps_ptr, out_ptr, C, H, W, R: tl.constexpr, BWI: tl.constexpr,
                        CH: tl.constexpr, RB: tl.constexpr):
    pc, bi, y0, k, j, cols, oc = strip_start(C, R, BWI, CH, RB)
    plane = H * W
    I_ptr += bi * 3 * plane
    p_ptr += pc * plane
    g_ptr += pc * plane
    c0, _ = centre(I_ptr, y0 + k, cols, H, W)
    c1, _ = centre(I_ptr + plane, y0 + k, cols, H, W)
    c2, _ = centre(I_ptr + 2 * plane, y0 + k, cols, H, W)
    cp, _ = centre(p_ptr, y0 + k, cols, H, W)
    cg = adjoint_centre(g_ptr, I_ptr, 0.0, y0 + k, cols, H, W, R, False)
    cg0 = adjoint_centre(g_ptr, I_ptr, c0, y0 + k, cols, H, W, R, True)
    cg1 = adjoint_centre(g_ptr, I_ptr + plane, c1, y0 + k, cols, H, W, R, True)
    cg2 = adjoint_centre(g_ptr, I_ptr + 2 * plane, c2, y0 + k, cols, H, W, R, True)
    eps = tl.load(eps_ptr + bi)
    z = tl.zeros([BWI], dtype=tl.float32)
    s0, s1, s2, sp, s00, s01, s02, s11, s12, s22, s0p, s1p, s2p = z, z, z, z, z, z, z, z, z, z, z, z, z
    sg, sg0, sg1, sg2 = z, z, z, z
    for w0 in range(0, 2 * R + 1, RB):  # window sums of row y0 - 1
        kp = ((w0 + k) < 2 * R + 1).to(tl.float32)
        rows = y0 - 1 - R + w0 + k
        h0, h1, h2, hp, h00, h01, h02, h11, h12, h22, h0p, h1p, h2p, hg, hg0, hg1, hg2 = _rows17(
            I_ptr, p_ptr, g_ptr, plane, rows, rows, cols, H, W, c0, c1, c2, cp, cg, cg0, cg1, cg2, False, R, BWI)
        s0, s1, s2, sp, s00, s01, s02, s11, s12, s22, s0p, s1p, s2p, sg, sg0, sg1, sg2 = _add17(
            s0, s1, s2, sp, s00, s01, s02, s11, s12, s22, s0p, s1p, s2p, sg, sg0, sg1, sg2,
            h0, h1, h2, hp, h00, h01, h02, h11, h12, h22, h0p, h1p, h2p, hg, hg0, hg1, hg2, kp)
    step = (C * 0 + tl.num_programs(0)).to(tl.int64) * plane  # planes per output kind: B * C
    for yb in range(y0, tl.minimum(y0 + CH, H), RB):
        d0, d1, d2, dp, d00, d01, d02, d11, d12, d22, d0p, d1p, d2p, dg, dg0, dg1, dg2 = _rows17(
            I_ptr, p_ptr, g_ptr, plane, yb + R + k, yb - R - 1 + k, cols, H, W, c0, c1, c2, cp, cg, cg0, cg1, cg2,
            True, R, BWI)
        oy = yb + k
        n = window_pixels(oy, oc, H, W, R, 0)
        inv_n = 1.0 / n
        # window means of the RB rows: running sum before the step plus the scan of this step's changes
        m0 = (s0[None, :] + tl.cumsum(d0, axis=0)) * inv_n
        m1 = (s1[None, :] + tl.cumsum(d1, axis=0)) * inv_n
        m2 = (s2[None, :] + tl.cumsum(d2, axis=0)) * inv_n
        mpt = (sp[None, :] + tl.cumsum(dp, axis=0)) * inv_n
        r00 = (s00[None, :] + tl.cumsum(d00, axis=0)) * inv_n - m0 * m0
        r11 = (s11[None, :] + tl.cumsum(d11, axis=0)) * inv_n - m1 * m1
        r22 = (s22[None, :] + tl.cumsum(d22, axis=0)) * inv_n - m2 * m2
        q01 = (s01[None, :] + tl.cumsum(d01, axis=0)) * inv_n - m0 * m1
        q02 = (s02[None, :] + tl.cumsum(d02, axis=0)) * inv_n - m0 * m2
        q12 = (s12[None, :] + tl.cumsum(d12, axis=0)) * inv_n - m1 * m2
        v0 = (s0p[None, :] + tl.cumsum(d0p, axis=0)) * inv_n - m0 * mpt
        v1 = (s1p[None, :] + tl.cumsum(d1p, axis=0)) * inv_n - m1 * mpt
        v2 = (s2p[None, :] + tl.cumsum(d2p, axis=0)) * inv_n - m2 * mpt
        g_b = sg[None, :] + tl.cumsum(dg, axis=0) + cg * n
        # g_a - g_b mean(I): the same with the centred guide
        e0 = sg0[None, :] + tl.cumsum(dg0, axis=0) + cg0 * n - g_b * m0
        e1 = sg1[None, :] + tl.cumsum(dg1, axis=0) + cg1 * n - g_b * m1
        e2 = sg2[None, :] + tl.cumsum(dg2, axis=0) + cg2 * n - g_b * m2
        s0, s1, s2, sp, s00, s01, s02, s11, s12, s22, s0p, s1p, s2p, sg, sg0, sg1, sg2 = _add17(
            s0, s1, s2, sp, s00, s01, s02, s11, s12, s22, s0p, s1p, s2p, sg, sg0, sg1, sg2,
            d0, d1, d2, dp, d00, d01, d02, d11, d12, d22, d0p, d1p, d2p, dg, dg0, dg1, dg2, 1.0)
        keep = strip_keep(oy, oc, j, y0, H, W, R, BWI, CH)
        _solve_store(out_ptr + pc * plane + oy * W + oc, step, keep, eps, r00, r11, r22, q01, q02, q12, v0, v1, v2,
                     e0, e1, e2, g_b, m0 + c0, m1 + c1, m2 + c2, mpt + cp)


@triton.jit
def _grad_inputs_color(I_ptr, p_ptr, g_ptr, ma_ptr, mom_ptr, dI_ptr, dp_ptr, C, H, W, R: tl.constexpr,
                       BWI: tl.constexpr, CH: tl.constexpr, RB: tl.constexpr):
    pc, bi, y0, k, j, cols, oc = strip_start(C, R, BWI, CH, RB)
    plane = H * W
    step = (C * 0 + tl.num_programs(0)).to(tl.int64) * plane
    shared = mom_ptr + bi * plane  # channel sums of the guide-only terms sit at planes bi
    own = mom_ptr + pc * plane
    fr = y0 + k
    c0 = adjoint_centre(shared, shared, 0.0, fr, cols, H, W, R, False)
    c1 = adjoint_centre(shared + step, shared, 0.0, fr, cols, H, W, R, False)
    c2 = adjoint_centre(shared + 2 * step, shared, 0.0, fr, cols, H, W, R, False)
    c00 = adjoint_centre(shared + 3 * step, shared, 0.0, fr, cols, H, W, R, False)
    c01 = adjoint_centre(shared + 4 * step, shared, 0.0, fr, cols, H, W, R, False)
    c02 = adjoint_centre(shared + 5 * step, shared, 0.0, fr, cols, H, W, R, False)
    c11 = adjoint_centre(shared + 6 * step, shared, 0.0, fr, cols, H, W, R, False)
    c12 = adjoint_centre(shared + 7 * step, shared, 0.0, fr, cols, H, W, R, False)
    c22 = adjoint_centre(shared + 8 * step, shared, 0.0, fr, cols, H, W, R, False)
    cmp = adjoint_centre(own + 9 * step, own, 0.0, fr, cols, H, W, R, False)
    cw0 = adjoint_centre(own + 10 * step, own, 0.0, fr, cols, H, W, R, False)
    cw1 = adjoint_centre(own + 11 * step, own, 0.0, fr, cols, H, W, R, False)
    cw2 = adjoint_centre(own + 12 * step, own, 0.0, fr, cols, H, W, R, False)
    s0 = adjoint_warm(shared, y0, k, cols, H, W, c0, R, BWI, RB)
    s1 = adjoint_warm(shared + step, y0, k, cols, H, W, c1, R, BWI, RB)
    s2 = adjoint_warm(shared + 2 * step, y0, k, cols, H, W, c2, R, BWI, RB)
    s00 = adjoint_warm(shared + 3 * step, y0, k, cols, H, W, c00, R, BWI, RB)
    s01 = adjoint_warm(shared + 4 * step, y0, k, cols, H, W, c01, R, BWI, RB)
    s02 = adjoint_warm(shared + 5 * step, y0, k, cols, H, W, c02, R, BWI, RB)
    s11 = adjoint_warm(shared + 6 * step, y0, k, cols, H, W, c11, R, BWI, RB)
    s12 = adjoint_warm(shared + 7 * step, y0, k, cols, H, W, c12, R, BWI, RB)
    s22 = adjoint_warm(shared + 8 * step, y0, k, cols, H, W, c22, R, BWI, RB)
    smp = adjoint_warm(own + 9 * step, y0, k, cols, H, W, cmp, R, BWI, RB)
    sw0 = adjoint_warm(own + 10 * step, y0, k, cols, H, W, cw0, R, BWI, RB)
    sw1 = adjoint_warm(own + 11 * step, y0, k, cols, H, W, cw1, R, BWI, RB)
    sw2 = adjoint_warm(own + 12 * step, y0, k, cols, H, W, cw2, R, BWI, RB)
    first = (pc % C == 0).to(tl.float32)  # shared terms once per image
    for yb in range(y0, tl.minimum(y0 + CH, H), RB):
        eo, ei, en = frame(yb + R + k, cols, H, W, R)
        lo, li, ln = frame(yb - R - 1 + k, cols, H, W, R)
        oy = yb + k
        n = window_pixels(oy, oc, H, W, R, 0)
        t0, s0 = adjoint_step(shared, eo, ei, en, lo, li, ln, c0, s0, n, R, BWI)
        t1, s1 = adjoint_step(shared + step, eo, ei, en, lo, li, ln, c1, s1, n, R, BWI)
        t2, s2 = adjoint_step(shared + 2 * step, eo, ei, en, lo, li, ln, c2, s2, n, R, BWI)
        q00, s00 = adjoint_step(shared + 3 * step, eo, ei, en, lo, li, ln, c00, s00, n, R, BWI)
        q01, s01 = adjoint_step(shared + 4 * step, eo, ei, en, lo, li, ln, c01, s01, n, R, BWI)
        q02, s02 = adjoint_step(shared + 5 * step, eo, ei, en, lo, li, ln, c02, s02, n, R, BWI)
        q11, s11 = adjoint_step(shared + 6 * step, eo, ei, en, lo, li, ln, c11, s11, n, R, BWI)
        q12, s12 = adjoint_step(shared + 7 * step, eo, ei, en, lo, li, ln, c12, s12, n, R, BWI)
        q22, s22 = adjoint_step(shared + 8 * step, eo, ei, en, lo, li, ln, c22, s22, n, R, BWI)
        t_mp, smp = adjoint_step(own + 9 * step, eo, ei, en, lo, li, ln, cmp, smp, n, R, BWI)
        w0, sw0 = adjoint_step(own + 10 * step, eo, ei, en, lo, li, ln, cw0, sw0, n, R, BWI)
        w1, sw1 = adjoint_step(own + 11 * step, eo, ei, en, lo, li, ln, cw1, sw1, n, R, BWI)
        w2, sw2 = adjoint_step(own + 12 * step, eo, ei, en, lo, li, ln, cw2, sw2, n, R, BWI)
        keep = strip_keep(oy, oc, j, y0, H, W, R, BWI, CH)
        pix = oy * W + oc
        I0 = tl.load(I_ptr + (bi * 3 + 0) * plane + pix, mask=keep, other=0.0)
        I1 = tl.load(I_ptr + (bi * 3 + 1) * plane + pix, mask=keep, other=0.0)
        I2 = tl.load(I_ptr + (bi * 3 + 2) * plane + pix, mask=keep, other=0.0)
        p = tl.load(p_ptr + pc * plane + pix, mask=keep, other=0.0)
        g = tl.load(g_ptr + pc * plane + pix, mask=keep, other=0.0)
        ma = ma_ptr + pc * 3 * plane + pix
        out = dI_ptr + pc * 3 * plane + pix
        tl.store(out, first * (t0 + 2.0 * I0 * q00 + I1 * q01 + I2 * q02) + p * w0
                 + g * tl.load(ma, mask=keep, other=0.0), mask=keep)
        tl.store(out + plane, first * (t1 + I0 * q01 + 2.0 * I1 * q11 + I2 * q12) + p * w1
                 + g * tl.load(ma + plane, mask=keep, other=0.0), mask=keep)
        tl.store(out + 2 * plane, first * (t2 + I0 * q02 + I1 * q12 + 2.0 * I2 * q22) + p * w2
                 + g * tl.load(ma + 2 * plane, mask=keep, other=0.0), mask=keep)
        tl.store(dp_ptr + pc * plane + pix, t_mp + I0 * w0 + I1 * w1 + I2 * w2, mask=keep)


def backward(I, p, g, ma, eps, r):
    """(dI, dp, deps) of q = mean(a) . I + mean(b) for a (B, 3, H, W) guide, "valid" border. All float32
    contiguous; ma (B, C, 3, H, W) from the forward."""
    return walk(I, p, g, ma, eps, r, width(r), _grad_moments_color, _grad_inputs_color, 14, 9,
                rows=(MOMENTS_RB, INPUTS_RB))
