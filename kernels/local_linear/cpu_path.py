"""numba loops for the CPU float32 forward of local linear regression (see :mod:`vision.kernels.runtime.jit`).

Same functions as the cell moments of :func:`torch_path.cell_moments` (s > 1), the grid solve of
:func:`torch_path.solve_band` and the apply of :func:`torch_path._apply_cells`, row by row: a row's sums,
systems or upsampled coefficients stay in cache through every step instead of each step being a tensor op
over the whole grid. The loops run over the pixels of a row innermost, so they vectorise.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange  # imported only where vision.kernels.runtime.jit.enabled() found numba

from ..runtime.jit import kernel


@kernel("void(float32[:, :, :, ::1], float32[:, ::1], int64, int64, float32[:, :, :, :, ::1])")
def solve_rows(X, eps, K, C, theta):
    """theta (B, C, K + 1, h, w) = the centred window coefficients (a, then b = mean p - a . mean f) from the
    window-mean moments X (B, NM, h, w) in :class:`torch_path.Layout` order; eps (B, K).

    (Sigma + diag eps) a = cov per pixel by L D L^T (pivots floored at eps, variances clamped at 0 first), as
    :func:`torch_path.solve_band`."""
    B, NM, h, w = X.shape
    ff = K + C
    fp = ff + K * (K + 1) // 2
    zero = np.float32(0.0)
    for n in prange(B * h):
        b = n // h
        y = n - b * h
        S = np.empty((K, K, w), np.float32)
        Y = np.empty((C, K, w), np.float32)
        for i in range(K):
            mi = X[b, i, y]
            for j in range(i + 1):
                s, src, mj = S[i, j], X[b, ff + i * (i + 1) // 2 + j, y], X[b, j, y]
                for x in range(w):
                    s[x] = src[x] - mi[x] * mj[x]
            d, e = S[i, i], eps[b, i]
            for x in range(w):
                d[x] = max(d[x], zero) + e
        for c in range(C):
            mp = X[b, K + c, y]
            for k in range(K):
                yk, src, mk = Y[c, k], X[b, fp + c * K + k, y], X[b, k, y]
                for x in range(w):
                    yk[x] = src[x] - mp[x] * mk[x]
        for j in range(K):  # right-looking L D L^T in the lower triangle: S[i, j] becomes l_ij, S[j, j] d_j
            d, e = S[j, j], eps[b, j]
            for x in range(w):
                d[x] = max(d[x], e)
            for i in range(j + 1, K):
                col = S[i, j]
                for x in range(w):
                    col[x] = col[x] / d[x]
            for i in range(j + 1, K):
                li = S[i, j]
                for m in range(j + 1, i + 1):
                    lm, t = S[m, j], S[i, m]
                    for x in range(w):
                        t[x] -= li[x] * lm[x] * d[x]
        for c in range(C):
            for j in range(K - 1):  # L z = cov
                yj = Y[c, j]
                for i in range(j + 1, K):
                    yi, lij = Y[c, i], S[i, j]
                    for x in range(w):
                        yi[x] -= lij[x] * yj[x]
            for j in range(K):  # D
                yj, d = Y[c, j], S[j, j]
                for x in range(w):
                    yj[x] /= d[x]
            for j in range(K - 1, 0, -1):  # L^T a = z
                yj = Y[c, j]
                for i in range(j):
                    yi, lji = Y[c, i], S[j, i]
                    for x in range(w):
                        yi[x] -= lji[x] * yj[x]
            bc, mp = theta[b, c, K, y], X[b, K + c, y]
            for x in range(w):
                bc[x] = mp[x]
            for k in range(K):
                t, yk, mk = theta[b, c, k, y], Y[c, k], X[b, k, y]
                for x in range(w):
                    t[x] = yk[x]
                    bc[x] -= yk[x] * mk[x]


@kernel("void(float32[:, :, :, ::1], float32[:, :, :, ::1], float32[:, ::1], float32[:, ::1], int64, "
        "float32[:, :, :, ::1])")
def cell_moments(f, p, cf, cp, s, X):
    """X (B, NM, gh, gw) = the means over every s x s cell's real pixels of the moment channels of the centred
    f - cf (B, K, H, W) and p - cp (B, C, H, W), in :class:`torch_path.Layout` order, as
    :func:`torch_path.cell_moments`: per cell row, the centred rows and every product summed down the cell's
    rows in row buffers, then across each cell's columns."""
    B, K, H, W = f.shape
    C, gh, gw, nm = p.shape[1], X.shape[2], X.shape[3], X.shape[1]
    ff = K + C
    fp = ff + K * (K + 1) // 2
    for n in prange(B * gh):
        b = n // gh
        i = n - b * gh
        z = np.empty((K + C, W), np.float32)
        acc = np.zeros((nm, W), np.float32)
        y1 = min(H, i * s + s)
        for y in range(i * s, y1):
            for k in range(K):
                src, m, zk = f[b, k, y], cf[b, k], z[k]
                for x in range(W):
                    zk[x] = src[x] - m
            for c in range(C):
                src, m, zc = p[b, c, y], cp[b, c], z[K + c]
                for x in range(W):
                    zc[x] = src[x] - m
            for k in range(K + C):
                a, zk = acc[k], z[k]
                for x in range(W):
                    a[x] += zk[x]
            for k in range(K):
                zk = z[k]
                for j in range(k + 1):
                    a, zj = acc[ff + k * (k + 1) // 2 + j], z[j]
                    for x in range(W):
                        a[x] += zk[x] * zj[x]
            for c in range(C):
                zc = z[K + c]
                for k in range(K):
                    a, zk = acc[fp + c * K + k], z[k]
                    for x in range(W):
                        a[x] += zc[x] * zk[x]
        rows = y1 - i * s
        for m in range(nm):
            a, o = acc[m], X[b, m, i]
            if s == 2 and W == 2 * gw:  # FLNR's cells: pairs of columns, vectorised
                inv = np.float32(1.0 / (rows * 2))
                for j in range(gw):
                    o[j] = (a[2 * j] + a[2 * j + 1]) * inv
            else:
                for j in range(gw):
                    x0, x1 = j * s, min(W, j * s + s)
                    t = np.float32(0.0)
                    for x in range(x0, x1):
                        t += a[x]
                    o[j] = t / np.float32(rows * (x1 - x0))


@njit(cache=True, inline="always")
def cell_row(y, s, gh):
    """Cell rows (r0, r1) and the weight of r1 for output row y of an x s upsampling (``align_corners=False``:
    row y lies between cell rows i - 1 and i, or i and i + 1, clamped at the ends)."""
    i, t = y // s, y % s
    d = (t + 0.5) / s - 0.5
    r0 = i - 1 if d < 0 else i
    wt = np.float32(1.0 + d if d < 0 else d)
    return max(r0, 0), min(r0 + 1, gh - 1), wt


@njit(cache=True, inline="always")
def upsample_row(a0, a1, wy, s, row, out):
    """out[:gw s] = the lerp of cell rows a0, a1 (weight wy of a1) upsampled x s along x (``align_corners=False``,
    clamped at the ends); row: a (gw + 2,) scratch."""
    gw = a0.shape[0]
    for j in range(gw):
        row[j + 1] = a0[j] + wy * (a1[j] - a0[j])
    row[0] = row[1]
    row[gw + 1] = row[gw]
    if s == 4:  # the four phases in one loop body: its stores interleave into whole vectors
        q1, q3 = np.float32(0.625), np.float32(0.125)  # phases at -3/8, -1/8, +1/8, +3/8 of a cell
        q2, q4 = np.float32(0.875), np.float32(0.375)
        for j in range(gw):
            lo, mid, hi = row[j], row[j + 1], row[j + 2]
            out[4 * j] = lo + q1 * (mid - lo)
            out[4 * j + 1] = lo + q2 * (mid - lo)
            out[4 * j + 2] = mid + q3 * (hi - mid)
            out[4 * j + 3] = mid + q4 * (hi - mid)
        return
    if s == 2:  # the two phases, at -1/4 and +1/4 of a cell, in one loop body (the input blend's sharp fit)
        h1, h2 = np.float32(0.75), np.float32(0.25)
        for j in range(gw):
            lo, mid, hi = row[j], row[j + 1], row[j + 2]
            out[2 * j] = lo + h1 * (mid - lo)
            out[2 * j + 1] = mid + h2 * (hi - mid)
        return
    for p in range(s):
        dx = (p + 0.5) / s - 0.5
        o = 0 if dx < 0 else 1
        wx = np.float32(1.0 + dx if dx < 0 else dx)
        for j in range(gw):
            out[j * s + p] = row[j + o] + wx * (row[j + o + 1] - row[j + o])


@kernel("void(float32[:, :, :, ::1], float32[:, :, :, :, ::1], int64, int64, float32[:, :, :, ::1])")
def apply_cells(f, coeffs, s_h, s_w, out):
    """out (B, C, H, W) = sum_k up(a_k) f_k + up(b) for f (B, K, H, W) and coeffs (B, C, K + 1, gh, gw) on
    s_h x s_w cells: ``up`` is the bilinear upsampling of ``align_corners=False`` (clamped at the ends), as
    :func:`torch_path._apply_cells`: per output row, the two coefficient rows are lerped, then each cell's
    s_w phases along x."""
    B, K, H, W = f.shape
    C, K1, gh, gw = coeffs.shape[1], coeffs.shape[2], coeffs.shape[3], coeffs.shape[4]
    for n in prange(B * H):
        b = n // H
        y = n - b * H
        r0, r1, wy = cell_row(y, s_h, gh)
        row = np.empty(gw + 2, np.float32)  # one coefficient row, one replicated entry at each end
        up = np.empty((K1, gw * s_w), np.float32)
        for c in range(C):
            for k in range(K1):
                upsample_row(coeffs[b, c, k, r0], coeffs[b, c, k, r1], wy, s_w, row, up[k])
            q = out[b, c, y]
            bias = up[K1 - 1]
            for x in range(W):
                q[x] = bias[x]
            for k in range(K1 - 1):
                fk, u = f[b, k, y], up[k]
                for x in range(W):
                    q[x] += u[x] * fk[x]
