"""Triton kernels that hold every pixel's moments as small matrices: the per-pixel ridge solve of local linear
regression (forward and backward) and, at scale 1, the moments' horizontal window pass straight from the inputs.

Every pixel's system is held as small matrices whose last axis is the pixel block: the window means
``Mff`` (KP, KP, BLOCK), ``mf`` (KP, BLOCK), ``mp`` (CP, BLOCK), ``Mfp`` (CP, KP, BLOCK), with KP / CP the
powers of two above K / C (padding is the identity system, so it solves to 0). With the pixel axis last
a thread holds whole matrices, so the reductions over K below stay in registers.

The L D L^T factorisation and the triangular solves are runtime ``for`` loops over K (one column per
step) rather than Python-unrolled tuples: the IR no longer grows as K^3 C, which is what made the
backward take 87.6 s to compile at K = 8 (Triton's coalescing pass is quadratic in the number of
memory operations times the ops that use them). K, C, sizes and the save / eps flags are runtime
arguments, not specialised, so one binary serves every shape with the same padded KP, CP.

Only the lower triangle (j <= i) of the symmetric matrices is loaded and factorised: the
right-looking LDL^T reads column j below the diagonal and row j left of it, nothing above.
"""
from __future__ import annotations

import triton
import triton.language as tl

@triton.jit
def _pair_plane(i3, j3):
    """Plane offset of the pair (i, j), j <= i, among the f_i f_j moments: i (i + 1) / 2 + j."""
    hi = tl.maximum(i3, j3)
    return hi * (hi + 1) // 2 + tl.minimum(i3, j3)


@triton.jit
def _extract(M, idx, n, axis: tl.constexpr):
    """M[..., n, ...] along ``axis`` (idx: the broadcastable index tensor of that axis); in-thread selects."""
    return tl.sum(tl.where(idx == n, M, 0.0), axis=axis)


@triton.jit
def _factor(Mff, mf, eps_ptr, b, K, KP: tl.constexpr):
    """L D L^T of Sigma + diag eps (Sigma = Mff - mf mf^T, variances clamped at 0), right-looking, in place.

    Returns (A, d, pos): A holds L strictly below the diagonal, d the pivots (1 on padding), pos whether the
    raw variance was positive (the clamp passes no gradient where it was not).
    """
    kv = tl.arange(0, KP)
    i3 = kv[:, None, None]
    j3 = kv[None, :, None]
    k2 = kv[:, None]
    low = j3 <= i3  # known per register at compile time: the upper triangle folds to constant zeros
    A = tl.where(low, Mff - mf[:, None, :] * mf[None, :, :], 0.0)
    raw = _extract(A, j3, i3, 1)  # (KP, BLOCK) diagonal: row i picks column i
    pos = raw > 0.0
    e = tl.load(eps_ptr + b * K + kv, mask=kv < K, other=1.0)[:, None]
    A = tl.where(i3 == j3, (tl.maximum(raw, 0.0) + e)[:, None, :], A)  # padding: Mff = mf = 0 -> identity
    d = tl.zeros_like(raw) + 1.0
    for j in range(K):
        col = _extract(A, j3, j, 1)  # (KP, BLOCK): A[:, j]
        ajj = _extract(col, k2, j, 0)
        dj = tl.maximum(ajj, tl.load(eps_ptr + b * K + j))  # the pivot of PSD + diag eps is >= eps_j: rounding only
        lv = tl.where(k2 > j, col / dj[None, :], 0.0)
        A = tl.where(low, tl.where((j3 == j) & (i3 > j), lv[:, None, :],
                                   A - (dj[None, :] * lv)[:, None, :] * lv[None, :, :]), 0.0)
        d = tl.where(k2 == j, dj[None, :], d)
    return A, d, pos


@triton.jit
def _ldl_solve(A, d, Y, K, KP: tl.constexpr):
    """Solve (L D L^T) x = y for every row of Y (CP, KP, BLOCK) at once; returns x in Y's shape."""
    kv = tl.arange(0, KP)
    i3 = kv[:, None, None]
    j3 = kv[None, :, None]
    y3 = kv[None, :, None]
    for j in range(K):  # forward: L z = y, column by column
        yj = _extract(Y, y3, j, 1)  # (CP, BLOCK)
        lj = tl.sum(tl.where((j3 == j) & (i3 > j), A, 0.0), axis=1)  # (KP, BLOCK): L[:, j] below the diagonal
        Y = Y - yj[:, None, :] * lj[None, :, :]
    Y = Y / d[None, :, :]
    for t in range(K):  # backward: L^T x = z, from the last row up
        j = K - 1 - t
        xj = _extract(Y, y3, j, 1)
        rj = tl.sum(tl.where((i3 == j) & (j3 < j), A, 0.0), axis=0)  # (KP, BLOCK): L[j, :j]
        Y = Y - xj[:, None, :] * rj[None, :, :]
    return Y


@triton.jit
def system_masks(K, C, valid, KP: tl.constexpr, CP: tl.constexpr):
    kv = tl.arange(0, KP)
    cv = tl.arange(0, CP)
    i3 = kv[:, None, None]
    j3 = kv[None, :, None]
    c3 = cv[:, None, None]
    v3 = valid[None, None, :]
    m_ff = (j3 <= i3) & (i3 < K) & v3
    m_f = (kv < K)[:, None] & valid[None, :]
    m_p = (cv < C)[:, None] & valid[None, :]
    m_fp = (c3 < C) & (j3 < K) & v3
    return m_ff, m_f, m_p, m_fp


@triton.jit
def plane_offsets(K, C, KP: tl.constexpr, CP: tl.constexpr):
    """Plane numbers of f_k (KP, 1), p_c (CP, 1), f_i f_j (KP, KP, 1) and f_k p_c (CP, KP, 1)."""
    kv = tl.arange(0, KP)
    cv = tl.arange(0, CP)
    FF = K + C
    FP = FF + K * (K + 1) // 2
    o_ff = FF + _pair_plane(kv[:, None, None], kv[None, :, None])
    o_fp = FP + cv[:, None, None] * K + kv[None, :, None]
    return kv[:, None], K + cv[:, None], o_ff, o_fp


@triton.jit(do_not_specialize=["h", "w", "hw", "T", "R", "K", "C", "save"])
def _solve_kernel(h_ptr, wy_ptr, eps_ptr, theta_ptr, X_ptr, h, w, hw, T, R, K, C, save,
                  KP: tl.constexpr, CP: tl.constexpr, BLOCK: tl.constexpr):
    """Vertical window pass of the row-filtered moments -> per-pixel ridge solve -> theta = (a, b) planes.

    ``save``: also store the window means (NM planes at X) for the backward.
    """
    b = tl.program_id(1)
    pix = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = pix < hw
    y = pix // w
    x = pix - y * w
    NM = K + C + K * (K + 1) // 2 + K * C
    o_f, o_p, o_ff, o_fp = plane_offsets(K, C, KP, CP)
    m_ff, m_f, m_p, m_fp = system_masks(K, C, valid, KP, CP)
    base = h_ptr + b * NM * hw
    low = tl.arange(0, KP)[None, :, None] <= tl.arange(0, KP)[:, None, None]
    Mff = tl.zeros([KP, KP, BLOCK], dtype=tl.float32)
    Mfp = tl.zeros([CP, KP, BLOCK], dtype=tl.float32)
    mf = tl.zeros([KP, BLOCK], dtype=tl.float32)
    mp = tl.zeros([CP, BLOCK], dtype=tl.float32)
    for e in range(T):
        src = y - R + e
        ok = (src >= 0) & (src < h) & valid
        wv = tl.load(wy_ptr + y * T + e, mask=valid, other=0.0)
        so = src * w + x
        o3 = so[None, None, :]
        o2 = so[None, :]
        ok3 = ok[None, None, :]
        ok2 = ok[None, :]
        Mff += tl.where(low, wv[None, None, :], 0.0) * tl.load(base + o_ff * hw + o3, mask=m_ff & ok3, other=0.0)
        Mfp += wv[None, None, :] * tl.load(base + o_fp * hw + o3, mask=m_fp & ok3, other=0.0)
        mf += wv[None, :] * tl.load(base + o_f * hw + o2, mask=m_f & ok2, other=0.0)
        mp += wv[None, :] * tl.load(base + o_p * hw + o2, mask=m_p & ok2, other=0.0)
    if save:
        xb = X_ptr + b * NM * hw
        tl.store(xb + o_ff * hw + pix[None, None, :], Mff, mask=m_ff)
        tl.store(xb + o_fp * hw + pix[None, None, :], Mfp, mask=m_fp)
        tl.store(xb + o_f * hw + pix[None, :], mf, mask=m_f)
        tl.store(xb + o_p * hw + pix[None, :], mp, mask=m_p)
    A, d, pos = _factor(Mff, mf, eps_ptr, b, K, KP)
    a = _ldl_solve(A, d, Mfp - mp[:, None, :] * mf[None, :, :], K, KP)  # (CP, KP, BLOCK) slopes
    bb = mp - tl.sum(a * mf[None, :, :], axis=1)
    cv = tl.arange(0, CP)
    kv = tl.arange(0, KP)
    tb = theta_ptr + (b * C + cv[:, None, None]) * (K + 1) * hw
    tl.store(tb + kv[None, :, None] * hw + pix[None, None, :], a, mask=m_fp)
    tl.store(theta_ptr + ((b * C + cv[:, None]) * (K + 1) + K) * hw + pix[None, :], bb, mask=m_p)


@triton.jit(do_not_specialize=["hw", "K", "C", "need_eps"])
def _fit_bwd_kernel(X_ptr, gt_ptr, eps_ptr, gX_ptr, deps_ptr, hw, K, C, need_eps,
                    KP: tl.constexpr, CP: tl.constexpr, BLOCK: tl.constexpr):
    """Per pixel: from dL/d(a, b) (already through the adjoint window pass) to dL/d(window means).

    Also, when ``need_eps``, this block's sum of dL/d eps_k (the diagonal of dL/dSigma) at deps[b, block, k].
    """
    b = tl.program_id(1)
    pid = tl.program_id(0)
    pix = pid * BLOCK + tl.arange(0, BLOCK)
    valid = pix < hw
    NM = K + C + K * (K + 1) // 2 + K * C
    o_f, o_p, o_ff, o_fp = plane_offsets(K, C, KP, CP)
    m_ff, m_f, m_p, m_fp = system_masks(K, C, valid, KP, CP)
    kv = tl.arange(0, KP)
    cv = tl.arange(0, CP)
    i3 = kv[:, None, None]
    j3 = kv[None, :, None]
    c3 = cv[:, None, None]
    xb = X_ptr + b * NM * hw
    p3 = pix[None, None, :]
    p2 = pix[None, :]
    Mff = tl.where(j3 <= i3, tl.load(xb + o_ff * hw + p3, mask=m_ff, other=0.0), 0.0)
    Mfp = tl.load(xb + o_fp * hw + p3, mask=m_fp, other=0.0)
    mf = tl.load(xb + o_f * hw + p2, mask=m_f, other=0.0)
    mp = tl.load(xb + o_p * hw + p2, mask=m_p, other=0.0)
    A, d, pos = _factor(Mff, mf, eps_ptr, b, K, KP)
    a = _ldl_solve(A, d, Mfp - mp[:, None, :] * mf[None, :, :], K, KP)
    gtb = gt_ptr + (b * C + c3) * (K + 1) * hw
    ga = tl.load(gtb + j3 * hw + p3, mask=m_fp, other=0.0)
    gb = tl.load(gt_ptr + ((b * C + cv[:, None]) * (K + 1) + K) * hw + p2, mask=m_p, other=0.0)
    # b = mp - a . mf
    ga = ga - gb[:, None, :] * mf[None, :, :]
    g_mf = -tl.sum(gb[:, None, :] * a, axis=0)
    # a = S^-1 cov  =>  g_cov = S^-1 g_a and dL/dS = G = -sum_c g_cov_c a_c^T; Hs = G + G^T
    g_cov = _ldl_solve(A, d, ga, K, KP)
    Hs = tl.zeros([KP, KP, BLOCK], dtype=tl.float32)
    Gd = tl.zeros([KP, BLOCK], dtype=tl.float32)
    for c in range(C):
        gc = _extract(g_cov, c3, c, 0)
        ac = _extract(a, c3, c, 0)
        Hs -= tl.where(j3 < i3, gc[:, None, :] * ac[None, :, :] + ac[:, None, :] * gc[None, :, :], 0.0)
        Gd -= gc * ac
    part = tl.sum(tl.where(valid[None, :], Gd, 0.0), axis=1)
    tl.store(deps_ptr + (b * tl.num_programs(0) + pid) * K + kv, part, mask=(kv < K) & (need_eps != 0))
    gm = tl.where(pos, Gd, 0.0)  # a clamped variance passes no gradient to the moments
    # S_ij = M(f_i f_j) - mf_i mf_j, stored once per pair j <= i (the diagonal's own derivative is gm);
    # Hs holds the strict lower triangle of the symmetric G + G^T, whose diagonal is 2 gm
    tl.store(gX_ptr + b * NM * hw + o_ff * hw + p3, tl.where(i3 == j3, gm[:, None, :], Hs), mask=m_ff)
    g_mf -= (tl.sum(Hs * mf[None, :, :], axis=1) + tl.sum(Hs * mf[:, None, :], axis=0) + 2.0 * gm * mf
             + tl.sum(g_cov * mp[:, None, :], axis=0))
    g_mp = gb - tl.sum(g_cov * mf[None, :, :], axis=1)
    gb_ptr = gX_ptr + b * NM * hw
    tl.store(gb_ptr + o_fp * hw + p3, g_cov, mask=m_fp)
    tl.store(gb_ptr + o_f * hw + p2, g_mf, mask=m_f)
    tl.store(gb_ptr + o_p * hw + p2, g_mp, mask=m_p)


def padded(n: int) -> int:
    return triton.next_power_of_2(max(int(n), 1))



@triton.jit(do_not_specialize=["H", "W", "HW", "T", "R", "K", "C"])
def _moment_rows_kernel(f_ptr, p_ptr, cf_ptr, cp_ptr, wx_ptr, out_ptr, H, W, HW, T, R, K, C,
                        KP: tl.constexpr, CP: tl.constexpr, BLOCK: tl.constexpr):
    """Scale 1: horizontal window means of the NM moments of the centred f, p, formed tap by tap from the inputs.

    Replaces the cell-moment pass plus the horizontal pass over its NM planes: the moments never go through
    memory before their first window pass (71 planes written and read again for K = 8, C = 3).
    """
    b = tl.program_id(1)
    pix = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = pix < HW
    y = pix // W
    x = pix - y * W
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
    for e in range(T):
        src = x - R + e
        ok = ((src >= 0) & (src < W) & valid)[None, :]
        wv = tl.load(wx_ptr + x * T + e, mask=valid, other=0.0)[None, :]
        so = (y * W + src)[None, :]
        z = tl.where(m_f & ok, tl.load(f_ptr + (b * K + kv[:, None]) * HW + so, mask=m_f & ok, other=0.0) - cf, 0.0)
        q = tl.where(m_p & ok, tl.load(p_ptr + (b * C + cv[:, None]) * HW + so, mask=m_p & ok, other=0.0) - cp, 0.0)
        wz = wv * z
        mf += wz
        mp += wv * q
        Mff += tl.where(low, wz[:, None, :] * z[None, :, :], 0.0)
        Mfp += (wv * q)[:, None, :] * z[None, :, :]
    ob = out_ptr + b * NM * HW
    tl.store(ob + o_ff * HW + pix[None, None, :], Mff, mask=m_ff)
    tl.store(ob + o_fp * HW + pix[None, None, :], Mfp, mask=m_fp)
    tl.store(ob + o_f * HW + pix[None, :], mf, mask=m_f)
    tl.store(ob + o_p * HW + pix[None, :], mp, mask=m_p)
