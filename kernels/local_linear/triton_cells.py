"""Triton kernels between the pixels and the s x s cells of a low-resolution fit, in the matrix form of
:mod:`.triton_solve`: the cell means of the NM moments (forward) and their adjoint back to f and p.

K, C and the cell size S are runtime arguments (loops, not unrolled tuples), so one binary per padded
(KP, CP) serves every shipped configuration and compiles in about a second.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .triton_solve import plane_offsets, system_masks


@triton.jit(do_not_specialize=["H", "W", "gh", "gw", "K", "C", "S"])
def _cell_moments_kernel(f_ptr, p_ptr, cf_ptr, cp_ptr, X_ptr, H, W, gh, gw, K, C, S,
                         KP: tl.constexpr, CP: tl.constexpr, BLOCK: tl.constexpr):
    """X[b, m, i, j] = mean over the real pixels of cell (i, j) of moment m of the centred f, p."""
    b = tl.program_id(1)
    cell = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ghw = gh * gw
    valid = cell < ghw
    cy = cell // gw
    cx = cell - cy * gw
    HW = H * W
    NM = K + C + K * (K + 1) // 2 + K * C
    o_f, o_p, o_ff, o_fp = plane_offsets(K, C, KP, CP)
    m_ff, m_f, m_p, m_fp = system_masks(K, C, valid, KP, CP)
    kv = tl.arange(0, KP)
    cv = tl.arange(0, CP)
    low = kv[None, :, None] <= kv[:, None, None]
    cf = tl.load(cf_ptr + b * K + kv, mask=kv < K, other=0.0)[:, None]
    cp = tl.load(cp_ptr + b * C + cv, mask=cv < C, other=0.0)[:, None]
    Mff = tl.zeros([KP, KP, BLOCK], dtype=tl.float32)
    Mfp = tl.zeros([CP, KP, BLOCK], dtype=tl.float32)
    mf = tl.zeros([KP, BLOCK], dtype=tl.float32)
    mp = tl.zeros([CP, BLOCK], dtype=tl.float32)
    for dy in range(S):
        py = cy * S + dy
        for dx in range(S):
            px = cx * S + dx
            ok = ((py < H) & (px < W) & valid)[None, :]
            so = (py * W + px)[None, :]
            z = tl.where(m_f & ok, tl.load(f_ptr + (b * K + kv[:, None]) * HW + so, mask=m_f & ok, other=0.0) - cf,
                         0.0)
            q = tl.where(m_p & ok, tl.load(p_ptr + (b * C + cv[:, None]) * HW + so, mask=m_p & ok, other=0.0) - cp,
                         0.0)
            mf += z
            mp += q
            Mff += tl.where(low, z[:, None, :] * z[None, :, :], 0.0)
            Mfp += q[:, None, :] * z[None, :, :]
    ny = tl.minimum(H - cy * S, S)
    nx = tl.minimum(W - cx * S, S)
    inv = 1.0 / tl.maximum(ny * nx, 1).to(tl.float32)
    ob = X_ptr + b * NM * ghw
    tl.store(ob + o_ff * ghw + cell[None, None, :], Mff * inv[None, None, :], mask=m_ff)
    tl.store(ob + o_fp * ghw + cell[None, None, :], Mfp * inv[None, None, :], mask=m_fp)
    tl.store(ob + o_f * ghw + cell[None, :], mf * inv[None, :], mask=m_f)
    tl.store(ob + o_p * ghw + cell[None, :], mp * inv[None, :], mask=m_p)


@triton.jit(do_not_specialize=["H", "W", "gh", "gw", "K", "C", "S"])
def _cell_adjoint_kernel(gX_ptr, f_ptr, p_ptr, cf_ptr, cp_ptr, df_ptr, dp_ptr, H, W, gh, gw, K, C, S,
                         KP: tl.constexpr, CP: tl.constexpr, BLOCK: tl.constexpr):
    """Per pixel: dL/d(f, p) from dL/d(cell means of the moments) at the pixel's cell."""
    b = tl.program_id(1)
    pix = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    HW = H * W
    valid = pix < HW
    y = pix // W
    x = pix - y * W
    cy = y // S
    cx = x // S
    ny = tl.minimum(H - cy * S, S)
    nx = tl.minimum(W - cx * S, S)
    inv = 1.0 / tl.maximum(ny * nx, 1).to(tl.float32)
    ghw = gh * gw
    goff = cy * gw + cx
    NM = K + C + K * (K + 1) // 2 + K * C
    o_f, o_p, o_ff, o_fp = plane_offsets(K, C, KP, CP)
    m_ff, m_f, m_p, m_fp = system_masks(K, C, valid, KP, CP)
    kv = tl.arange(0, KP)
    cv = tl.arange(0, CP)
    i3 = kv[:, None, None]
    j3 = kv[None, :, None]
    cf = tl.load(cf_ptr + b * K + kv, mask=kv < K, other=0.0)[:, None]
    cp = tl.load(cp_ptr + b * C + cv, mask=cv < C, other=0.0)[:, None]
    p2 = pix[None, :]
    fc = tl.where(m_f, tl.load(f_ptr + (b * K + kv[:, None]) * HW + p2, mask=m_f, other=0.0) - cf, 0.0)
    pc = tl.where(m_p, tl.load(p_ptr + (b * C + cv[:, None]) * HW + p2, mask=m_p, other=0.0) - cp, 0.0)
    gb = gX_ptr + b * NM * ghw
    g3 = goff[None, None, :]
    g2 = goff[None, :]
    # the pair plane of (i, j) is that of (j, i): one gather loads the whole symmetric matrix
    m_sym = (i3 < K) & (j3 < K) & valid[None, None, :]
    Gff = tl.load(gb + o_ff * ghw + g3, mask=m_sym, other=0.0)
    Gfp = tl.load(gb + o_fp * ghw + g3, mask=m_fp, other=0.0)
    gf = tl.load(gb + o_f * ghw + g2, mask=m_f, other=0.0)
    gp = tl.load(gb + o_p * ghw + g2, mask=m_p, other=0.0)
    # d/df_k of f_i f_j: f_j for k = i, f_i for k = j; the diagonal f_k^2 gives 2 f_k
    diag = tl.sum(tl.where(i3 == j3, Gff, 0.0), axis=1)
    gf += tl.sum(Gff * fc[None, :, :], axis=1) + diag * fc + tl.sum(Gfp * pc[:, None, :], axis=0)
    gp += tl.sum(Gfp * fc[None, :, :], axis=1)
    tl.store(df_ptr + (b * K + kv[:, None]) * HW + p2, gf * inv[None, :], mask=m_f)
    tl.store(dp_ptr + (b * C + cv[:, None]) * HW + p2, gp * inv[None, :], mask=m_p)
