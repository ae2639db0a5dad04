"""numba loops for the CPU float32 forward of local linear regression (see :mod:`vision.kernels.runtime.jit`).

Same functions as the cell moments of :func:`torch_path.cell_moments` (s > 1), the grid solve of
:func:`torch_path.solve_band` and the apply of :func:`torch_path._apply_cells`, row by row: a row's sums,
systems or upsampled coefficients stay in cache through every step instead of each step being a tensor op
over the whole grid. :func:`fit_small` chains the moments, their window means, the solve and the coefficients'
window means for small "valid" windows, a few rows of each in rings. The loops run over the pixels of a row
innermost, so they vectorise.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange  # imported only where vision.kernels.runtime.jit.enabled() found numba

from ..runtime.jit import kernel


@njit(cache=True, inline="always")
def solve_row(X, bx, y, eps, b, K, C, S, Y, theta, bt, yt):
    """theta[bt, :, :, yt] (C, K + 1, w) = the centred window coefficients (a, then b = mean p - a . mean f) of the
    window-mean moments X[bx, :, y] (NM, w) in :class:`torch_path.Layout` order; eps[b] (K,); S (K, K, w) and
    Y (C, K, w) scratch.

    (Sigma + diag eps) a = cov per pixel by L D L^T (pivots floored at eps, variances clamped at 0 first), as
    :func:`torch_path.solve_band`."""
    ff = K + C
    fp = ff + K * (K + 1) // 2
    zero = np.float32(0.0)
    w = X.shape[3]
    for i in range(K):
        mi = X[bx, i, y]
        for j in range(i + 1):
            s, src, mj = S[i, j], X[bx, ff + i * (i + 1) // 2 + j, y], X[bx, j, y]
            for x in range(w):
                s[x] = src[x] - mi[x] * mj[x]
        d, e = S[i, i], eps[b, i]
        for x in range(w):
            d[x] = max(d[x], zero) + e
    for c in range(C):
        mp = X[bx, K + c, y]
        for k in range(K):
            yk, src, mk = Y[c, k], X[bx, fp + c * K + k, y], X[bx, k, y]
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
        bc, mp = theta[bt, c, K, yt], X[bx, K + c, y]
        for x in range(w):
            bc[x] = mp[x]
        for k in range(K):
            t, yk, mk = theta[bt, c, k, yt], Y[c, k], X[bx, k, y]
            for x in range(w):
                t[x] = yk[x]
                bc[x] -= yk[x] * mk[x]


@kernel("void(float32[:, :, :, ::1], float32[:, ::1], int64, int64, float32[:, :, :, :, ::1])")
def solve_rows(X, eps, K, C, theta):
    """theta (B, C, K + 1, h, w) = :func:`solve_row` of every row of the window-mean moments X (B, NM, h, w);
    eps (B, K)."""
    B, NM, h, w = X.shape
    for n in prange(B * h):
        b = n // h
        y = n - b * h
        S = np.empty((K, K, w), np.float32)
        Y = np.empty((C, K, w), np.float32)
        solve_row(X, b, y, eps, b, K, C, S, Y, theta, b, y)


@njit(cache=True, inline="always")
def moment_row(f, p, cf, cp, s, b, i, z, acc, X, bx, ix):
    """X[bx, :, ix] (NM, gw) = the means over each s x s cell of cell row i (its real pixels) of the moment channels
    of the centred f[b] - cf[b] (K, H, W) and p[b] - cp[b] (C, H, W), in :class:`torch_path.Layout` order: the
    centred rows and every product summed down the cell's rows in row buffers, then across each cell's columns.
    z (K + C, W) and acc (NM, W) scratch."""
    K, H, W = f.shape[1], f.shape[2], f.shape[3]
    C, gw, nm = p.shape[1], X.shape[3], X.shape[1]
    ff = K + C
    fp = ff + K * (K + 1) // 2
    for m in range(nm):
        a = acc[m]
        for x in range(W):
            a[x] = np.float32(0.0)
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
        a, o = acc[m], X[bx, m, ix]
        if s == 2 and W == 2 * gw:  # pairs of columns, vectorised (FLNR's cells, the input blend's sharp fit)
            inv = np.float32(1.0 / (rows * 2))
            for j in range(gw):
                o[j] = (a[2 * j] + a[2 * j + 1]) * inv
        elif s == 1:
            for j in range(gw):
                o[j] = a[j]
        else:
            for j in range(gw):
                x0, x1 = j * s, min(W, j * s + s)
                t = np.float32(0.0)
                for x in range(x0, x1):
                    t += a[x]
                o[j] = t / np.float32(rows * (x1 - x0))


@kernel("void(float32[:, :, :, ::1], float32[:, :, :, ::1], float32[:, ::1], float32[:, ::1], int64, "
        "float32[:, :, :, ::1])")
def cell_moments(f, p, cf, cp, s, X):
    """X (B, NM, gh, gw) = the means over every s x s cell's real pixels of the moment channels of the centred
    f - cf (B, K, H, W) and p - cp (B, C, H, W), in :class:`torch_path.Layout` order, as
    :func:`torch_path.cell_moments`: :func:`moment_row` of every cell row."""
    B, K, H, W = f.shape
    C, gh, nm = p.shape[1], X.shape[2], X.shape[1]
    for n in prange(B * gh):
        b = n // gh
        i = n - b * gh
        z = np.empty((K + C, W), np.float32)
        acc = np.empty((nm, W), np.float32)
        moment_row(f, p, cf, cp, s, b, i, z, acc, X, b, i)


@njit(cache=True, inline="always")
def window_row(ring, i, slots, m, r, inv_rows, inv_cols, v, out):
    """out (gw,) = the "valid" window mean over the cells of rows ``slots`` of ``ring[i, m]`` (rows, gw) and
    columns within r: the rows summed, then 2 r + 1 shifted adds, times ``inv_rows`` and ``inv_cols[j]`` (the
    reciprocal counts of in-grid rows and columns). v (gw,) scratch."""
    gw = out.shape[0]
    first = ring[i, m, slots[0]]
    for j in range(gw):
        v[j] = first[j]
    for q in range(1, slots.shape[0]):
        row = ring[i, m, slots[q]]
        for j in range(gw):
            v[j] += row[j]
    for j in range(gw):
        out[j] = v[j]
    for d in range(1, r + 1):
        for j in range(gw - d):
            out[j] += v[j + d]
        for j in range(d, gw):
            out[j] += v[j - d]
    for j in range(gw):
        out[j] *= inv_rows * inv_cols[j]


@njit(cache=True, inline="always")
def coefficient_row(coeffs, q, c, o, r, n, gh, inv_cols, cf, cp, b, v, one):
    """one (K + 1, gw) = output row o's coefficients of target channel c for the raw features: the "valid" window
    mean over radius r of the ring ``coeffs[q]`` of window coefficients (rows in slots row % n), its intercept moved
    back from the centred features (``a . (f - cf) + b + cp = a . f + (b - a . cf + cp)``). v (gw,) scratch."""
    K1, gw = one.shape
    lo, hi = max(0, o - r), min(gh, o + r + 1)
    slots = np.arange(lo, hi) % n
    for k in range(K1):
        window_row(coeffs, q, slots, c * K1 + k, r, np.float32(1.0) / np.float32(hi - lo), inv_cols, v, one[k])
    bias, off = one[K1 - 1], cp[b, c]
    for j in range(gw):
        bias[j] += off
    for k in range(K1 - 1):
        a, m = one[k], cf[b, k]
        for j in range(gw):
            bias[j] -= a[j] * m


@kernel("void(float32[:, :, :, ::1], float32[:, :, :, ::1], float32[:, ::1], float32[:, ::1], float32[:, ::1], "
        "int64, int64[::1], float32[:, :, :, ::1], boolean, int64, float32[:, :, :, :, ::1])")
def fit_small(f, p, cf, cp, eps, s, radii, weights, blend, bands, theta):
    """theta (B, C, K + 1, gh, gw) = the window-averaged coefficients for the raw f (B, K, H, W) at small radii
    (in cells of s x s pixels, "valid" border), blended per cell by ``weights`` (B, R, gh, gw) when ``blend``
    (else one radius): :func:`cell_moments`, their window means, :func:`solve_rows` and the window mean of the
    coefficients in one pass down ``bands`` bands of cell rows per image. Each band keeps the last 2 max(r) + 1 rows
    of cell moments and of each radius' window coefficients in rings, so no moment plane is stored; it recomputes
    the rows it shares with each neighbour. eps (B, K); cf (B, K), cp (B, C) the centring means."""
    B, K, H, W = f.shape
    C, gh, gw, R = p.shape[1], theta.shape[3], theta.shape[4], radii.shape[0]
    K1, nm = K + 1, K + C + K * (K + 1) // 2 + K * C
    far = 0
    for j in range(R):
        far = max(far, radii[j])
    n = 2 * far + 1
    per = -(-gh // bands)
    inv_cols = np.empty((R, gw), np.float32)
    for q in range(R):
        for j in range(gw):
            inv_cols[q, j] = np.float32(1.0) / np.float32(min(gw - 1, j + radii[q]) - max(0, j - radii[q]) + 1)
    for job in prange(B * bands):
        b = job // bands
        i0 = (job - b * bands) * per
        i1 = min(gh, i0 + per)
        if i0 >= i1:
            continue
        z = np.empty((K + C, W), np.float32)
        acc = np.empty((nm, W), np.float32)
        moments = np.empty((1, nm, n, gw), np.float32)  # ring of cell-moment rows (row t in slot t % n)
        ring = np.empty((R, C, K1, n, gw), np.float32)  # per radius, a ring of window-coefficient rows
        coeffs = ring.reshape((R, C * K1, n, gw))  # the same, one plane per (c, k)
        X = np.empty((1, nm, 1, gw), np.float32)  # one row of window means
        S = np.empty((K, K, gw), np.float32)
        Y = np.empty((C, K, gw), np.float32)
        v = np.empty(gw, np.float32)
        one = np.empty((K1, gw), np.float32)  # one radius' averaged coefficients of an output row
        t0, t1 = max(0, i0 - far), min(gh, i1 + far)
        made = max(0, t0 - far)  # the next cell-moment row to compute
        for t in range(t0, t1):
            while made < min(gh, t + far + 1):
                moment_row(f, p, cf, cp, s, b, made, z, acc, moments, 0, made % n)
                made += 1
            for q in range(R):
                r = radii[q]
                lo, hi = max(0, t - r), min(gh, t + r + 1)
                slots = np.arange(lo, hi) % n
                for m in range(nm):
                    window_row(moments, 0, slots, m, r, np.float32(1.0) / np.float32(hi - lo), inv_cols[q], v,
                               X[0, m, 0])
                solve_row(X, 0, 0, eps, b, K, C, S, Y, ring, q, t % n)
            # output rows whose coefficient windows end by t (all the band's remaining rows at the grid's end)
            last = t - far + 1 if t < gh - 1 else i1
            for o in range(max(i0, t - far), min(i1, last)):
                for c in range(C):
                    for q in range(R):
                        coefficient_row(coeffs, q, c, o, radii[q], n, gh, inv_cols[q], cf, cp, b, v, one)
                        for k in range(K1):
                            out, src = theta[b, c, k, o], one[k]
                            if not blend:
                                for j in range(gw):
                                    out[j] = src[j]
                            elif q == 0:
                                wt = weights[b, 0, o]
                                for j in range(gw):
                                    out[j] = src[j] * wt[j]
                            else:
                                wt = weights[b, q, o]
                                for j in range(gw):
                                    out[j] += src[j] * wt[j]


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
