"""Fused Triton backward of the guided filter ("valid" border): two kernels, like the forward.

B1 (``_grad_moments_*``): per tile, recompute the window statistics from guide and src (cheaper than
storing them), form the adjoint window sums M^T(g I) and M^T(g) and run the chain rule through
b = mean(p) - a mean(I) and a = cov / (var + eps) (colour: a = (Sigma + eps)^-1 cov) down to the
gradients of the four kinds of window means. B2 (``_grad_inputs_*``): adjoint window sums of those,
combined with I and p into dI and dp. Channel-shared terms are written per src channel and summed
afterwards, so no atomics are needed. The maths is exactly ``torch_path.backward``'s (same names).

M^T h at a pixel is the sum over its window of h / N, N the pixel count of the window centred on
each summed pixel; this is what "valid" means need. Padded border modes fold the adjoint back onto
the image and use the composite backward instead.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..box.triton_index import window_count
from ..box.triton_path import tile_box_sum, tile_mean, tile_program, tile_shape


@triton.jit
def _inv_counts(yi, xi, H, W, R: tl.constexpr):
    return 1.0 / tl.maximum(window_count(yi, H, R) * window_count(xi, W, R), 1).to(tl.float32)


@triton.jit
def _adj(h, inv_n_in, R: tl.constexpr, TH: tl.constexpr, TW: tl.constexpr):
    """M^T h at the tile's output pixels, h zero outside the image."""
    return tile_box_sum(h * inv_n_in, R, TH, TW)


@triton.jit
def _centred(t, inside):
    c = tile_mean(t, inside)
    return tl.where(inside, t - c, 0.0), c


@triton.jit
def _grad_moments_gray(I_ptr, p_ptr, g_ptr, eps_ptr, out_ptr, C, H, W, R: tl.constexpr, TH: tl.constexpr,
                       TW: tl.constexpr):
    pc, i, j, offs, inside, oy, ox, keep = tile_program(H, W, R, 0, TH, TW)
    bi = pc // C
    plane = H * W
    I = tl.load(I_ptr + bi * plane + offs, mask=inside, other=0.0)
    p = tl.load(p_ptr + pc * plane + offs, mask=inside, other=0.0)
    g = tl.load(g_ptr + pc * plane + offs, mask=inside, other=0.0)
    inv_in = _inv_counts(oy - R, ox - R, H, W, R)
    inv_n = _inv_counts(oy, ox, H, W, R)
    It, cI = _centred(I, inside)
    pt, cp = _centred(p, inside)
    mIt = tile_box_sum(It, R, TH, TW) * inv_n
    mpt = tile_box_sum(pt, R, TH, TW) * inv_n
    var_raw = tile_box_sum(It * It, R, TH, TW) * inv_n - mIt * mIt
    cov = tile_box_sum(It * pt, R, TH, TW) * inv_n - mIt * mpt
    denom = tl.maximum(var_raw, 0.0) + tl.load(eps_ptr + bi)
    a = cov / denom
    mI = mIt + cI
    mp = mpt + cp
    g_a = _adj(g * I, inv_in, R, TH, TW)
    g_b = _adj(g, inv_in, R, TH, TW)
    g_a = g_a - g_b * mI
    g_cov = g_a / denom
    g_var = tl.where(var_raw > 0, -g_cov * a, 0.0)
    g_mp = g_b - g_cov * mI
    g_mI = -g_b * a - g_cov * mp - 2.0 * g_var * mI
    pix = oy * W + ox
    n_out = C * 0 + tl.num_programs(0)  # planes per output kind: B * C
    base = out_ptr + pc * plane + pix
    tl.store(base, g_mI, mask=keep)
    tl.store(base + n_out * plane, g_var, mask=keep)
    tl.store(base + 2 * n_out * plane, g_mp, mask=keep)
    tl.store(base + 3 * n_out * plane, g_cov, mask=keep)
    tl.store(base + 4 * n_out * plane, -g_cov * a, mask=keep)


@triton.jit
def _grad_inputs_gray(I_ptr, p_ptr, g_ptr, ma_ptr, mom_ptr, dI_ptr, dp_ptr, C, H, W, R: tl.constexpr,
                      TH: tl.constexpr, TW: tl.constexpr):
    pc, i, j, offs, inside, oy, ox, keep = tile_program(H, W, R, 0, TH, TW)
    bi = pc // C
    plane = H * W
    n_out = C * 0 + tl.num_programs(0)
    inv_in = _inv_counts(oy - R, ox - R, H, W, R)
    # per-image sums over channels of the shared terms sit at planes bi of the first two kinds
    t_mI = _adj(tl.load(mom_ptr + bi * plane + offs, mask=inside, other=0.0), inv_in, R, TH, TW)
    t_mII = _adj(tl.load(mom_ptr + (n_out + bi) * plane + offs, mask=inside, other=0.0), inv_in, R, TH, TW)
    t_mp = _adj(tl.load(mom_ptr + (2 * n_out + pc) * plane + offs, mask=inside, other=0.0), inv_in, R, TH, TW)
    t_cov = _adj(tl.load(mom_ptr + (3 * n_out + pc) * plane + offs, mask=inside, other=0.0), inv_in, R, TH, TW)
    pix = oy * W + ox
    I = tl.load(I_ptr + bi * plane + pix, mask=keep, other=0.0)
    p = tl.load(p_ptr + pc * plane + pix, mask=keep, other=0.0)
    g = tl.load(g_ptr + pc * plane + pix, mask=keep, other=0.0)
    ma = tl.load(ma_ptr + pc * plane + pix, mask=keep, other=0.0)
    first = (pc % C == 0).to(tl.float32)  # shared terms once per image
    dI = first * (t_mI + 2.0 * I * t_mII) + p * t_cov + g * ma
    tl.store(dI_ptr + pc * plane + pix, dI, mask=keep)
    tl.store(dp_ptr + pc * plane + pix, t_mp + I * t_cov, mask=keep)


@triton.jit
def _grad_moments_color(I_ptr, p_ptr, g_ptr, eps_ptr, out_ptr, C, H, W, R: tl.constexpr, TH: tl.constexpr,
                        TW: tl.constexpr):
    pc, i, j, offs, inside, oy, ox, keep = tile_program(H, W, R, 0, TH, TW)
    bi = pc // C
    plane = H * W
    n_out = C * 0 + tl.num_programs(0)
    I0 = tl.load(I_ptr + (bi * 3 + 0) * plane + offs, mask=inside, other=0.0)
    I1 = tl.load(I_ptr + (bi * 3 + 1) * plane + offs, mask=inside, other=0.0)
    I2 = tl.load(I_ptr + (bi * 3 + 2) * plane + offs, mask=inside, other=0.0)
    p = tl.load(p_ptr + pc * plane + offs, mask=inside, other=0.0)
    g = tl.load(g_ptr + pc * plane + offs, mask=inside, other=0.0)
    inv_in = _inv_counts(oy - R, ox - R, H, W, R)
    inv_n = _inv_counts(oy, ox, H, W, R)
    J0, c0 = _centred(I0, inside)
    J1, c1 = _centred(I1, inside)
    J2, c2 = _centred(I2, inside)
    pt, cp = _centred(p, inside)
    m0 = tile_box_sum(J0, R, TH, TW) * inv_n
    m1 = tile_box_sum(J1, R, TH, TW) * inv_n
    m2 = tile_box_sum(J2, R, TH, TW) * inv_n
    mpt = tile_box_sum(pt, R, TH, TW) * inv_n
    eps = tl.load(eps_ptr + bi)
    r00 = tile_box_sum(J0 * J0, R, TH, TW) * inv_n - m0 * m0
    r11 = tile_box_sum(J1 * J1, R, TH, TW) * inv_n - m1 * m1
    r22 = tile_box_sum(J2 * J2, R, TH, TW) * inv_n - m2 * m2
    s00 = tl.maximum(r00, 0.0) + eps
    s11 = tl.maximum(r11, 0.0) + eps
    s22 = tl.maximum(r22, 0.0) + eps
    s01 = tile_box_sum(J0 * J1, R, TH, TW) * inv_n - m0 * m1
    s02 = tile_box_sum(J0 * J2, R, TH, TW) * inv_n - m0 * m2
    s12 = tile_box_sum(J1 * J2, R, TH, TW) * inv_n - m1 * m2
    v0 = tile_box_sum(J0 * pt, R, TH, TW) * inv_n - m0 * mpt
    v1 = tile_box_sum(J1 * pt, R, TH, TW) * inv_n - m1 * mpt
    v2 = tile_box_sum(J2 * pt, R, TH, TW) * inv_n - m2 * mpt
    inv_det = 1.0 / (s00 * (s11 * s22 - s12 * s12) + s01 * (s02 * s12 - s01 * s22) + s02 * (s01 * s12 - s02 * s11))
    k00 = (s11 * s22 - s12 * s12) * inv_det
    k01 = (s02 * s12 - s01 * s22) * inv_det
    k02 = (s01 * s12 - s02 * s11) * inv_det
    k11 = (s00 * s22 - s02 * s02) * inv_det
    k12 = (s01 * s02 - s00 * s12) * inv_det
    k22 = (s00 * s11 - s01 * s01) * inv_det
    a0 = k00 * v0 + k01 * v1 + k02 * v2
    a1 = k01 * v0 + k11 * v1 + k12 * v2
    a2 = k02 * v0 + k12 * v1 + k22 * v2
    mI0 = m0 + c0
    mI1 = m1 + c1
    mI2 = m2 + c2
    mp = mpt + cp
    g_b = _adj(g, inv_in, R, TH, TW)
    e0 = _adj(g * I0, inv_in, R, TH, TW) - g_b * mI0
    e1 = _adj(g * I1, inv_in, R, TH, TW) - g_b * mI1
    e2 = _adj(g * I2, inv_in, R, TH, TW) - g_b * mI2
    u0 = k00 * e0 + k01 * e1 + k02 * e2  # g_cov = S^-1 g_a
    u1 = k01 * e0 + k11 * e1 + k12 * e2
    u2 = k02 * e0 + k12 * e1 + k22 * e2
    # G = -g_cov a^T with clamped diagonal variances masked; H = G + G^T
    G00 = tl.where(r00 > 0, -u0 * a0, 0.0)
    G11 = tl.where(r11 > 0, -u1 * a1, 0.0)
    G22 = tl.where(r22 > 0, -u2 * a2, 0.0)
    H01 = -(u0 * a1 + u1 * a0)
    H02 = -(u0 * a2 + u2 * a0)
    H12 = -(u1 * a2 + u2 * a1)
    gI0 = -g_b * a0 - (2.0 * G00 * mI0 + H01 * mI1 + H02 * mI2) - u0 * mp
    gI1 = -g_b * a1 - (H01 * mI0 + 2.0 * G11 * mI1 + H12 * mI2) - u1 * mp
    gI2 = -g_b * a2 - (H02 * mI0 + H12 * mI1 + 2.0 * G22 * mI2) - u2 * mp
    g_mp = g_b - (u0 * mI0 + u1 * mI1 + u2 * mI2)
    base = out_ptr + pc * plane + oy * W + ox
    step = n_out * plane
    tl.store(base, gI0, mask=keep)
    tl.store(base + step, gI1, mask=keep)
    tl.store(base + 2 * step, gI2, mask=keep)
    tl.store(base + 3 * step, G00, mask=keep)
    tl.store(base + 4 * step, H01, mask=keep)
    tl.store(base + 5 * step, H02, mask=keep)
    tl.store(base + 6 * step, G11, mask=keep)
    tl.store(base + 7 * step, H12, mask=keep)
    tl.store(base + 8 * step, G22, mask=keep)
    tl.store(base + 9 * step, g_mp, mask=keep)
    tl.store(base + 10 * step, u0, mask=keep)
    tl.store(base + 11 * step, u1, mask=keep)
    tl.store(base + 12 * step, u2, mask=keep)
    tl.store(base + 13 * step, -(u0 * a0 + u1 * a1 + u2 * a2), mask=keep)


@triton.jit
def _grad_inputs_color(I_ptr, p_ptr, g_ptr, ma_ptr, mom_ptr, dI_ptr, dp_ptr, C, H, W, R: tl.constexpr,
                       TH: tl.constexpr, TW: tl.constexpr):
    pc, i, j, offs, inside, oy, ox, keep = tile_program(H, W, R, 0, TH, TW)
    bi = pc // C
    plane = H * W
    step = (C * 0 + tl.num_programs(0)) * plane
    inv_in = _inv_counts(oy - R, ox - R, H, W, R)
    shared = mom_ptr + bi * plane + offs  # channel sums of the guide-only terms sit at planes bi
    own = mom_ptr + pc * plane + offs
    t0 = _adj(tl.load(shared, mask=inside, other=0.0), inv_in, R, TH, TW)
    t1 = _adj(tl.load(shared + step, mask=inside, other=0.0), inv_in, R, TH, TW)
    t2 = _adj(tl.load(shared + 2 * step, mask=inside, other=0.0), inv_in, R, TH, TW)
    q00 = _adj(tl.load(shared + 3 * step, mask=inside, other=0.0), inv_in, R, TH, TW)
    q01 = _adj(tl.load(shared + 4 * step, mask=inside, other=0.0), inv_in, R, TH, TW)
    q02 = _adj(tl.load(shared + 5 * step, mask=inside, other=0.0), inv_in, R, TH, TW)
    q11 = _adj(tl.load(shared + 6 * step, mask=inside, other=0.0), inv_in, R, TH, TW)
    q12 = _adj(tl.load(shared + 7 * step, mask=inside, other=0.0), inv_in, R, TH, TW)
    q22 = _adj(tl.load(shared + 8 * step, mask=inside, other=0.0), inv_in, R, TH, TW)
    t_mp = _adj(tl.load(own + 9 * step, mask=inside, other=0.0), inv_in, R, TH, TW)
    w0 = _adj(tl.load(own + 10 * step, mask=inside, other=0.0), inv_in, R, TH, TW)
    w1 = _adj(tl.load(own + 11 * step, mask=inside, other=0.0), inv_in, R, TH, TW)
    w2 = _adj(tl.load(own + 12 * step, mask=inside, other=0.0), inv_in, R, TH, TW)
    pix = oy * W + ox
    I0 = tl.load(I_ptr + (bi * 3 + 0) * plane + pix, mask=keep, other=0.0)
    I1 = tl.load(I_ptr + (bi * 3 + 1) * plane + pix, mask=keep, other=0.0)
    I2 = tl.load(I_ptr + (bi * 3 + 2) * plane + pix, mask=keep, other=0.0)
    p = tl.load(p_ptr + pc * plane + pix, mask=keep, other=0.0)
    g = tl.load(g_ptr + pc * plane + pix, mask=keep, other=0.0)
    first = (pc % C == 0).to(tl.float32)
    ma = ma_ptr + pc * 3 * plane + pix
    d0 = first * (t0 + 2.0 * I0 * q00 + I1 * q01 + I2 * q02) + p * w0 + g * tl.load(ma, mask=keep, other=0.0)
    d1 = first * (t1 + I0 * q01 + 2.0 * I1 * q11 + I2 * q12) + p * w1 + g * tl.load(ma + plane, mask=keep, other=0.0)
    d2 = first * (t2 + I0 * q02 + I1 * q12 + 2.0 * I2 * q22) + p * w2 + g * tl.load(ma + 2 * plane, mask=keep,
                                                                                   other=0.0)
    out = dI_ptr + pc * 3 * plane + pix
    tl.store(out, d0, mask=keep)
    tl.store(out + plane, d1, mask=keep)
    tl.store(out + 2 * plane, d2, mask=keep)
    tl.store(dp_ptr + pc * plane + pix, t_mp + I0 * w0 + I1 * w1 + I2 * w2, mask=keep)


def backward(I, p, g, ma, eps, r):
    """(dI, dp, deps) of q = mean(a) I + mean(b), "valid" border. All float32 contiguous; ma from the forward."""
    bsz, gc, h, w = I.shape
    c = p.shape[1]
    th, tw = tile_shape(r, wide=False)
    grid = (bsz * c, triton.cdiv(h, th - 2 * r), triton.cdiv(w, tw - 2 * r))
    kinds = 5 if gc == 1 else 14
    mom = torch.empty(kinds, bsz * c, h, w, device=I.device, dtype=torch.float32)
    moments, inputs = (_grad_moments_gray, _grad_inputs_gray) if gc == 1 else (_grad_moments_color,
                                                                               _grad_inputs_color)
    moments[grid](I, p, g, eps, mom, c, h, w, R=r, TH=th, TW=tw, num_warps=4 if gc == 1 else 8)
    deps = mom[-1].view(bsz, c * h * w).sum(1)
    shared = 2 if gc == 1 else 9  # guide-only terms: summed over the src channels, stored at plane b
    mom[:shared, :bsz] = mom[:shared].view(shared, bsz, c, h, w).sum(2)
    dI = torch.empty(bsz, c, gc, h, w, device=I.device, dtype=torch.float32)
    dp = torch.empty_like(p)
    inputs[grid](I, p, g, ma, mom, dI, dp, c, h, w, R=r, TH=th, TW=tw, num_warps=4 if gc == 1 else 8)
    return dI.sum(1), dp, deps
