"""Triton kernels of the Structure Preservation Loss: one fused forward and one fused backward.

The math is the PyTorch path's (see ``torch_path.py``), in the "valid" border mode and written with
window *sums*: ``W_k = sum w`` over the window's in-image pixels (the pixel count N_k without a mask),
means ``m_x = sum(w x) / W_k``, window weight ``omega_k = W_k / N_k``.

Forward, one program per (T, T) output tile: load the gray source and edit (and the mask) on the tile
plus an R-pixel halo, a (BP, BP) block with zeros outside the image; form the five (six with a mask)
window sums of the tile at once as two matrix products with 0/1 band matrices, ``V = Bv @ (P @ Bh)``
(direct sums, exact in float32 with ``input_precision="ieee"``; no prefix sums); then the moments,
both fits, the residual, and the per-window backward coefficients, all in registers. It writes the
tile's partial sums of ``omega D`` and ``omega``, the residual map when asked, and the coefficient
planes the backward needs (5, or 3 when the source needs no gradient).

Backward, one program per (T, T) tile: load the coefficient planes on the tile plus halo, scale them by
the upstream gradient (a scalar passed as a stride-0 tensor, or a map), form their window sums with the
same band products (the adjoint of a zero-outside window sum is itself), and combine with the pixels:
``dE = w (U_E + 2 E U_EE + S U_SE)``, ``dS = w (U_S + 2 S U_SS + E U_SE)``.

Other border modes, float64, and radii above ``MAX_RADIUS`` run the PyTorch path.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .reference import EMPTY_WEIGHT

TILE = 32
MAX_RADIUS = 48  # T + 2R <= 128: the (BP, BP) block stays a register tile


def supported(r: int, border: str) -> bool:
    return border == "valid" and r <= MAX_RADIUS


def _block(r: int) -> int:
    return max(TILE, triton.next_power_of_2(TILE + 2 * r))


@triton.jit
def _hband(BK: tl.constexpr, BN: tl.constexpr, R: tl.constexpr):
    """(BK, BN) 0/1 matrix: column n sums rows n .. n + 2R (a horizontal window sum as X @ band)."""
    d = tl.arange(0, BK)[:, None] - tl.arange(0, BN)[None, :]
    return ((d >= 0) & (d <= 2 * R)).to(tl.float32)


@triton.jit
def _vband(BM: tl.constexpr, BK: tl.constexpr, R: tl.constexpr):
    """(BM, BK) 0/1 matrix: row m sums columns m .. m + 2R (a vertical window sum as band @ X)."""
    d = tl.arange(0, BK)[None, :] - tl.arange(0, BM)[:, None]
    return ((d >= 0) & (d <= 2 * R)).to(tl.float32)


@triton.jit
def _wsum(x, bv, bh):
    return tl.dot(bv, tl.dot(x, bh, input_precision="ieee"), input_precision="ieee")


@triton.jit
def _count(c, n, R: tl.constexpr):
    return (tl.minimum(c + R, n - 1) - tl.maximum(c - R, 0) + 1).to(tl.float32)


@triton.jit
def _spl_forward_kernel(S_ptr, E_ptr, W_ptr, D_ptr, P_ptr, part_ptr, H, W, eps, empty,
                        R: tl.constexpr, T: tl.constexpr, BP: tl.constexpr, MASKED: tl.constexpr,
                        BIDIR: tl.constexpr, DETACH: tl.constexpr, WRITE_D: tl.constexpr,
                        NPLANES: tl.constexpr, PER_WEIGHT: tl.constexpr):
    pid_x = tl.program_id(0)
    pid_y = tl.program_id(1)
    b = tl.program_id(2)
    hw = H * W
    base = b.to(tl.int64) * hw
    y0 = pid_y * T
    x0 = pid_x * T
    # input block: rows y0 - R .. y0 - R + BP - 1 (broadcast before comparing, for the interpreter)
    iy = y0 - R + tl.arange(0, BP)[:, None] + tl.arange(0, BP)[None, :] * 0
    ix = x0 - R + tl.arange(0, BP)[None, :] + tl.arange(0, BP)[:, None] * 0
    inside = (iy >= 0) & (iy < H) & (ix >= 0) & (ix < W)
    offs = iy * W + ix
    s = tl.load(S_ptr + base + offs, mask=inside, other=0.0)
    e = tl.load(E_ptr + base + offs, mask=inside, other=0.0)
    bh = _hband(BP, T, R)
    bv = _vband(T, BP, R)
    oy = y0 + tl.arange(0, T)[:, None] + tl.arange(0, T)[None, :] * 0
    ox = x0 + tl.arange(0, T)[None, :] + tl.arange(0, T)[:, None] * 0
    out_in = (oy < H) & (ox < W)
    n = tl.maximum(_count(oy, H, R) * _count(ox, W, R), 1.0)
    if MASKED:
        wt = tl.load(W_ptr + base + offs, mask=inside, other=0.0)
        ws = wt * s
        we = wt * e
        sw = _wsum(wt, bv, bh)
        omega = sw / n
        good = (omega > empty) & out_in
        inv = tl.where(good, 1.0 / tl.maximum(sw, 1e-30), 0.0)
        mS = _wsum(ws, bv, bh) * inv
        mE = _wsum(we, bv, bh) * inv
        mSS = _wsum(ws * s, bv, bh) * inv
        mEE = _wsum(we * e, bv, bh) * inv
        mSE = _wsum(ws * e, bv, bh) * inv
    else:
        good = out_in
        inv = tl.where(good, 1.0 / n, 0.0)
        mS = _wsum(s, bv, bh) * inv
        mE = _wsum(e, bv, bh) * inv
        mSS = _wsum(s * s, bv, bh) * inv
        mEE = _wsum(e * e, bv, bh) * inv
        mSE = _wsum(s * e, bv, bh) * inv
    vS_raw = mSS - mS * mS
    vE_raw = mEE - mE * mE
    vS = tl.maximum(vS_raw, 0.0)
    vE = tl.maximum(vE_raw, 0.0)
    c = mSE - mS * mE
    dS = vS + eps
    a = c / dS
    D = vE - a * (c + a * eps)
    if BIDIR:
        dE = vE + eps
        a2 = c / dE
        D += vS - a2 * (c + a2 * eps)
    D = tl.where(good, tl.maximum(D, 0.0), 0.0)
    if MASKED:
        wsum_tile = tl.sum(tl.sum(tl.where(out_in, omega, 0.0), axis=1), axis=0)
        dsum_tile = tl.sum(tl.sum(omega * D, axis=1), axis=0)
    else:
        wsum_tile = tl.sum(tl.sum(out_in.to(tl.float32), axis=1), axis=0)
        dsum_tile = tl.sum(tl.sum(D, axis=1), axis=0)
    part = part_ptr + ((b * tl.num_programs(1) + pid_y) * tl.num_programs(0) + pid_x) * 2
    tl.store(part, dsum_tile)
    tl.store(part + 1, wsum_tile)
    ooffs = oy * W + ox
    if WRITE_D:
        tl.store(D_ptr + base + ooffs, D, mask=out_in)
    if NPLANES > 0:
        # per-window coefficients (G_vS, G_vE, G_c) of the residual w.r.t. (var_S, var_E, c)
        if DETACH:
            G_vS = a * a
            G_vE = a * 0.0 + 1.0
            G_c = -2.0 * a
            if BIDIR:
                G_vS += 1.0
                G_vE += a2 * a2
                G_c -= 2.0 * a2
        else:
            fs = eps / dS
            G_vS = a * a * (1.0 + 2.0 * fs)
            G_vE = a * 0.0 + 1.0
            G_c = -2.0 * a * (1.0 + fs)
            if BIDIR:
                fe = eps / dE
                G_vS += 1.0
                G_vE += a2 * a2 * (1.0 + 2.0 * fe)
                G_c -= 2.0 * a2 * (1.0 + fe)
            G_vS = tl.where(vS_raw > 0, G_vS, 0.0)
            G_vE = tl.where(vE_raw > 0, G_vE, 0.0)
        # "mean": upstream omega_k / sum(omega) times 1/W_k -> 1/N_k; "none": upstream g_k times 1/W_k
        if PER_WEIGHT:
            scale = inv
        else:
            scale = tl.where(good, 1.0 / n, 0.0)
        G_vS = G_vS * scale
        G_vE = G_vE * scale
        G_c = G_c * scale
        pbase = P_ptr + b.to(tl.int64) * NPLANES * hw + ooffs
        tl.store(pbase, -(2.0 * mE * G_vE + mS * G_c), mask=out_in)
        tl.store(pbase + hw, G_vE, mask=out_in)
        tl.store(pbase + 2 * hw, G_c, mask=out_in)
        if NPLANES == 5:
            tl.store(pbase + 3 * hw, -(2.0 * mS * G_vS + mE * G_c), mask=out_in)
            tl.store(pbase + 4 * hw, G_vS, mask=out_in)


@triton.jit
def _spl_backward_kernel(P_ptr, G_ptr, g_sb, g_sy, g_sx, S_ptr, E_ptr, W_ptr, dS_ptr, dE_ptr, H, W,
                         R: tl.constexpr, T: tl.constexpr, BG: tl.constexpr, MASKED: tl.constexpr,
                         NPLANES: tl.constexpr):
    pid_x = tl.program_id(0)
    pid_y = tl.program_id(1)
    b = tl.program_id(2)
    hw = H * W
    base = b.to(tl.int64) * hw
    y0 = pid_y * T
    x0 = pid_x * T
    iy = y0 - R + tl.arange(0, BG)[:, None] + tl.arange(0, BG)[None, :] * 0
    ix = x0 - R + tl.arange(0, BG)[None, :] + tl.arange(0, BG)[:, None] * 0
    inside = (iy >= 0) & (iy < H) & (ix >= 0) & (ix < W)
    offs = iy * W + ix
    g = tl.load(G_ptr + b.to(tl.int64) * g_sb + iy * g_sy + ix * g_sx, mask=inside, other=0.0)
    bh = _hband(BG, T, R)
    bv = _vband(T, BG, R)
    pbase = P_ptr + b.to(tl.int64) * NPLANES * hw + offs
    uE = _wsum(tl.load(pbase, mask=inside, other=0.0) * g, bv, bh)
    uEE = _wsum(tl.load(pbase + hw, mask=inside, other=0.0) * g, bv, bh)
    uSE = _wsum(tl.load(pbase + 2 * hw, mask=inside, other=0.0) * g, bv, bh)
    oy = y0 + tl.arange(0, T)[:, None] + tl.arange(0, T)[None, :] * 0
    ox = x0 + tl.arange(0, T)[None, :] + tl.arange(0, T)[:, None] * 0
    out_in = (oy < H) & (ox < W)
    ooffs = base + oy * W + ox
    s = tl.load(S_ptr + ooffs, mask=out_in, other=0.0)
    e = tl.load(E_ptr + ooffs, mask=out_in, other=0.0)
    dE = uE + 2.0 * e * uEE + s * uSE
    if MASKED:
        wt = tl.load(W_ptr + ooffs, mask=out_in, other=0.0)
        dE = dE * wt
    tl.store(dE_ptr + ooffs, dE, mask=out_in)
    if NPLANES == 5:
        uS = _wsum(tl.load(pbase + 3 * hw, mask=inside, other=0.0) * g, bv, bh)
        uSS = _wsum(tl.load(pbase + 4 * hw, mask=inside, other=0.0) * g, bv, bh)
        dS = uS + 2.0 * s * uSS + e * uSE
        if MASKED:
            dS = dS * wt
        tl.store(dS_ptr + ooffs, dS, mask=out_in)


def forward(S, E, w, eps: float, r: int, border: str, bidirectional: bool, detach: bool, reduction: str,
            need_grad: bool, need_source_grad: bool):
    """Same contract as ``torch_path.forward``; S, E contiguous float32 (B, 1, H, W)."""
    if not supported(r, border):
        raise ValueError(f"the Triton path needs border 'valid' and radius <= {MAX_RADIUS}")
    bsz, _, h, wd = S.shape
    if w is not None:
        w = w.expand(bsz, 1, h, wd).contiguous()
    nplanes = (5 if need_source_grad else 3) if need_grad else 0
    grid = (triton.cdiv(wd, TILE), triton.cdiv(h, TILE), bsz)
    part = torch.empty((bsz, grid[1], grid[0], 2), device=S.device, dtype=torch.float32)
    D = torch.empty_like(S) if reduction == "none" else S
    planes = torch.empty((bsz, nplanes, h, wd), device=S.device, dtype=torch.float32) if nplanes else S
    _spl_forward_kernel[grid](
        S, E, S if w is None else w, D, planes, part, h, wd, float(eps), EMPTY_WEIGHT,
        R=r, T=TILE, BP=_block(r), MASKED=w is not None, BIDIR=bool(bidirectional), DETACH=bool(detach),
        WRITE_D=reduction == "none", NPLANES=nplanes, PER_WEIGHT=reduction == "none", num_warps=4)
    sums = part.sum((0, 1, 2))
    out = dict(total=sums[0], weight=sums[1])
    if reduction == "none":
        out["map"] = D
    if not nplanes:
        return out, None
    return out, dict(S=S, E=E, w=w, planes=planes, r=r)


def backward(saved, g):
    """Same contract as ``torch_path.backward``: ``g`` a 0-d tensor or a (B, 1, H, W) map."""
    S, E, w, planes, r = saved["S"], saved["E"], saved["w"], saved["planes"], saved["r"]
    bsz, _, h, wd = S.shape
    g = g.to(torch.float32).expand(bsz, 1, h, wd)  # a scalar becomes a stride-0 view: no copy
    nplanes = planes.shape[1]
    dE = torch.empty_like(E)
    dS = torch.empty_like(S) if nplanes == 5 else dE
    grid = (triton.cdiv(wd, TILE), triton.cdiv(h, TILE), bsz)
    _spl_backward_kernel[grid](
        planes, g, g.stride(0), g.stride(2), g.stride(3), S, E, S if w is None else w, dS, dE, h, wd,
        R=r, T=TILE, BG=_block(r), MASKED=w is not None, NPLANES=nplanes, num_warps=4)
    return (dS if nplanes == 5 else None), dE
