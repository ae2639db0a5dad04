"""Fused Triton backward of the guided filter ("valid" border, q output): two sliding-window kernels.

Both walk the image like the forward (``sliding.py``): a one-warp program owns a strip of columns and a chunk
of rows, loads the rows entering and leaving the window, takes horizontal window sums by a scan along the
row and keeps per-column running sums, so no 2-D tile and no axis-0 scan lives in registers.

B1 (``_grad_moments_gray``, colour in ``triton_backward_color.py``): recompute the window statistics of guide
and src (cheaper than storing them) next to the adjoint window sums M^T(g I) and M^T(g), and run the chain
rule through b = mean(p) - a mean(I) and a = cov / (var + eps) down to the gradients of the window means.
B2 (``_grad_inputs_gray``): adjoint window sums of those, combined with I and p into dI and dp.
Channel-shared terms are written per src channel and summed afterwards, so no atomics are needed. The maths
is ``torch_path.backward``'s (same names).

M^T h at a pixel is the sum over its window of h / N, N the pixel count of the window centred on each summed
pixel; this is what "valid" means need. Guide and src are centred on per-program constants before any
product is formed (g_a = M^T(g I) - g_b mean(I) is the same with centred I), and every adjoint running sum
is taken about a per-program constant, put back as constant times the window's pixel count. Padded border
modes fold the adjoint back onto the image and use the composite backward instead.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..box.sliding import rows_per_step, strip_width, walk_grid
from ..window_blocks import (adjoint_centre, adjoint_step, adjoint_warm, centre, frame, row_window_sums, strip_keep,
                             strip_start, window_pixels)

# rows per step: B1 keeps 6 running sums (4 statistics, 2 adjoint sums) and its chain rule in one warp, which
# at 2 rows needs all 255 registers; one row leaves room. B2 keeps 4 sums and takes 2 rows
MOMENTS_RB = 1
INPUTS_RB = 2
# (under Triton's interpreter both step box.sliding.INTERPRETED_RB rows: rows_per_step)


@triton.jit
def _vals_gray(I_ptr, p_ptr, g_ptr, offs, inside, inv, cI, cp, cg, cgI):
    It = tl.where(inside, tl.load(I_ptr + offs, mask=inside, other=0.0) - cI, 0.0)
    pt = tl.where(inside, tl.load(p_ptr + offs, mask=inside, other=0.0) - cp, 0.0)
    g = tl.load(g_ptr + offs, mask=inside, other=0.0) * inv
    return It, pt, tl.where(inside, g - cg, 0.0), tl.where(inside, g * It - cgI, 0.0)


@triton.jit
def _moment_rows_gray(I_ptr, p_ptr, g_ptr, rows, lrows, cols, H, W, cI, cp, cg, cgI, LEAVE: tl.constexpr,
                      R: tl.constexpr, BWI: tl.constexpr):
    """Horizontal window sums of I, p, I^2, I p, g / N and g I / N (centred) over ``rows`` less ``lrows``."""
    offs, inside, inv = frame(rows, cols, H, W, R)
    I, p, g, gI = _vals_gray(I_ptr, p_ptr, g_ptr, offs, inside, inv, cI, cp, cg, cgI)
    if LEAVE:
        offs, inside, inv = frame(lrows, cols, H, W, R)
        LI, Lp, Lg, LgI = _vals_gray(I_ptr, p_ptr, g_ptr, offs, inside, inv, cI, cp, cg, cgI)
    else:
        LI, Lp, Lg, LgI = I * 0.0, p * 0.0, g * 0.0, gI * 0.0
    return (row_window_sums(I - LI, R, BWI), row_window_sums(p - Lp, R, BWI), row_window_sums(I * I - LI * LI, R, BWI),
            row_window_sums(I * p - LI * Lp, R, BWI), row_window_sums(g - Lg, R, BWI), row_window_sums(gI - LgI, R, BWI))


@triton.jit
def _grad_moments_gray(I_ptr, p_ptr, g_ptr, eps_ptr, out_ptr, C, H, W, R: tl.constexpr, BWI: tl.constexpr,
                       CH: tl.constexpr, RB: tl.constexpr):
    pc, bi, y0, k, j, cols, oc = strip_start(C, R, BWI, CH, RB)
    plane = H * W
    I_ptr += bi * plane
    p_ptr += pc * plane
    g_ptr += pc * plane
    cI, _ = centre(I_ptr, y0 + k, cols, H, W)
    cp, _ = centre(p_ptr, y0 + k, cols, H, W)
    cg = adjoint_centre(g_ptr, I_ptr, cI, y0 + k, cols, H, W, R, False)
    cgI = adjoint_centre(g_ptr, I_ptr, cI, y0 + k, cols, H, W, R, True)
    eps = tl.load(eps_ptr + bi)
    z = tl.zeros([BWI], dtype=tl.float32)
    sI, sp, sII, sIp, sg, sgI = z, z, z, z, z, z
    for w0 in range(0, 2 * R + 1, RB):  # window sums of row y0 - 1
        rows = y0 - 1 - R + w0 + k
        kp = ((w0 + k) < 2 * R + 1).to(tl.float32)
        hI, hp, hII, hIp, hg, hgI = _moment_rows_gray(I_ptr, p_ptr, g_ptr, rows, rows, cols, H, W, cI, cp, cg, cgI,
                                                      False, R, BWI)
        sI += tl.sum(hI * kp, axis=0)
        sp += tl.sum(hp * kp, axis=0)
        sII += tl.sum(hII * kp, axis=0)
        sIp += tl.sum(hIp * kp, axis=0)
        sg += tl.sum(hg * kp, axis=0)
        sgI += tl.sum(hgI * kp, axis=0)
    step = (C * 0 + tl.num_programs(0)).to(tl.int64) * plane  # planes per output kind: B * C
    for yb in range(y0, tl.minimum(y0 + CH, H), RB):
        dI, dp, dII, dIp, dg, dgI = _moment_rows_gray(I_ptr, p_ptr, g_ptr, yb + R + k, yb - R - 1 + k, cols, H, W,
                                                      cI, cp, cg, cgI, True, R, BWI)
        oy = yb + k
        n = window_pixels(oy, oc, H, W, R, 0)
        inv_n = 1.0 / n
        mIt = (sI[None, :] + tl.cumsum(dI, axis=0)) * inv_n
        mpt = (sp[None, :] + tl.cumsum(dp, axis=0)) * inv_n
        var_raw = (sII[None, :] + tl.cumsum(dII, axis=0)) * inv_n - mIt * mIt
        cov = (sIp[None, :] + tl.cumsum(dIp, axis=0)) * inv_n - mIt * mpt
        g_b = sg[None, :] + tl.cumsum(dg, axis=0) + cg * n
        g_a = sgI[None, :] + tl.cumsum(dgI, axis=0) + cgI * n - g_b * mIt
        sI += tl.sum(dI, axis=0)
        sp += tl.sum(dp, axis=0)
        sII += tl.sum(dII, axis=0)
        sIp += tl.sum(dIp, axis=0)
        sg += tl.sum(dg, axis=0)
        sgI += tl.sum(dgI, axis=0)
        denom = tl.maximum(var_raw, 0.0) + eps
        a = cov / denom
        mI = mIt + cI
        g_cov = g_a / denom
        g_var = tl.where(var_raw > 0, -g_cov * a, 0.0)
        keep = strip_keep(oy, oc, j, y0, H, W, R, BWI, CH)
        base = out_ptr + pc * plane + oy * W + oc
        tl.store(base, -g_b * a - g_cov * (mpt + cp) - 2.0 * g_var * mI, mask=keep)
        tl.store(base + step, g_var, mask=keep)
        tl.store(base + 2 * step, g_b - g_cov * mI, mask=keep)
        tl.store(base + 3 * step, g_cov, mask=keep)
        tl.store(base + 4 * step, -g_cov * a, mask=keep)


@triton.jit
def _grad_inputs_gray(I_ptr, p_ptr, g_ptr, ma_ptr, mom_ptr, dI_ptr, dp_ptr, C, H, W, R: tl.constexpr,
                      BWI: tl.constexpr, CH: tl.constexpr, RB: tl.constexpr):
    pc, bi, y0, k, j, cols, oc = strip_start(C, R, BWI, CH, RB)
    plane = H * W
    step = (C * 0 + tl.num_programs(0)).to(tl.int64) * plane
    # per-image sums over channels of the shared terms sit at planes bi of the first two kinds
    s_mI = mom_ptr + bi * plane
    s_mII = s_mI + step
    o_mp = mom_ptr + 2 * step + pc * plane
    o_cov = o_mp + step
    c0 = adjoint_centre(s_mI, s_mI, 0.0, y0 + k, cols, H, W, R, False)
    c1 = adjoint_centre(s_mII, s_mII, 0.0, y0 + k, cols, H, W, R, False)
    c2 = adjoint_centre(o_mp, o_mp, 0.0, y0 + k, cols, H, W, R, False)
    c3 = adjoint_centre(o_cov, o_cov, 0.0, y0 + k, cols, H, W, R, False)
    s0 = adjoint_warm(s_mI, y0, k, cols, H, W, c0, R, BWI, RB)
    s1 = adjoint_warm(s_mII, y0, k, cols, H, W, c1, R, BWI, RB)
    s2 = adjoint_warm(o_mp, y0, k, cols, H, W, c2, R, BWI, RB)
    s3 = adjoint_warm(o_cov, y0, k, cols, H, W, c3, R, BWI, RB)
    first = (pc % C == 0).to(tl.float32)  # shared terms once per image
    for yb in range(y0, tl.minimum(y0 + CH, H), RB):
        eo, ei, en = frame(yb + R + k, cols, H, W, R)
        lo, li, ln = frame(yb - R - 1 + k, cols, H, W, R)
        oy = yb + k
        n = window_pixels(oy, oc, H, W, R, 0)
        t_mI, s0 = adjoint_step(s_mI, eo, ei, en, lo, li, ln, c0, s0, n, R, BWI)
        t_mII, s1 = adjoint_step(s_mII, eo, ei, en, lo, li, ln, c1, s1, n, R, BWI)
        t_mp, s2 = adjoint_step(o_mp, eo, ei, en, lo, li, ln, c2, s2, n, R, BWI)
        t_cov, s3 = adjoint_step(o_cov, eo, ei, en, lo, li, ln, c3, s3, n, R, BWI)
        keep = strip_keep(oy, oc, j, y0, H, W, R, BWI, CH)
        pix = oy * W + oc
        I = tl.load(I_ptr + bi * plane + pix, mask=keep, other=0.0)
        p = tl.load(p_ptr + pc * plane + pix, mask=keep, other=0.0)
        g = tl.load(g_ptr + pc * plane + pix, mask=keep, other=0.0)
        ma = tl.load(ma_ptr + pc * plane + pix, mask=keep, other=0.0)
        tl.store(dI_ptr + pc * plane + pix, first * (t_mI + 2.0 * I * t_mII) + p * t_cov + g * ma, mask=keep)
        tl.store(dp_ptr + pc * plane + pix, t_mp + I * t_cov, mask=keep)


def walk(I, p, g, ma, eps, r, bwi, moments, inputs, n_moments, guide_terms, rows=None):
    """The backward's two passes, gray or colour: ``moments`` writes ``n_moments`` gradient planes per src channel
    (the last: d/d eps), the first ``guide_terms`` of them are summed over the src channels (they touch the guide
    only), and ``inputs`` takes their adjoint window sums to dI (per src channel, summed here) and dp. ``rows``: the
    two kernels' rows per step (default this module's). Returns (dI (B, G, H, W), dp, deps (B,))."""
    rows = (MOMENTS_RB, INPUTS_RB) if rows is None else rows
    bsz, gch, h, w = I.shape
    c = p.shape[1]
    grid, ch = walk_grid(bsz * c, h, w, r, bwi)
    mom = torch.empty(n_moments, bsz * c, h, w, device=I.device, dtype=torch.float32)
    moments[grid](I, p, g, eps, mom, c, h, w, R=r, BWI=bwi, CH=ch, RB=rows_per_step(rows[0]), num_warps=1)
    deps = mom[-1].view(bsz, c * h * w).sum(1)
    mom[:guide_terms, :bsz] = mom[:guide_terms].view(guide_terms, bsz, c, h, w).sum(2)
    dI = torch.empty(bsz, c, gch, h, w, device=I.device, dtype=torch.float32)
    dp = torch.empty_like(p)
    inputs[grid](I, p, g, ma, mom, dI, dp, c, h, w, R=r, BWI=bwi, CH=ch, RB=rows_per_step(rows[1]), num_warps=1)
    return dI.sum(1), dp, deps


def backward(I, p, g, ma, eps, r):
    """(dI, dp, deps) of q = mean(a) I + mean(b) for a (B, 1, H, W) guide, "valid" border. All float32
    contiguous; ma from the forward."""
    return walk(I, p, g, ma, eps, r, strip_width(r), _grad_moments_gray, _grad_inputs_gray, 5, 2)
