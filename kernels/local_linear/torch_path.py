"""PyTorch path of local linear regression: forward and closed-form backward of the fit and the apply.

Shapes: features f (B, K, H, W), target p (B, C, H, W), both raw; their per-image means cf (B, K) and
cp (B, C) are subtracted here on the fly (shift invariance, as in the guided filter) and added back
into the intercept, so the returned coefficients apply to the raw features. eps is (B, K).

Moments (:mod:`.torch_moments`). Every window quantity is a window mean of one of NM = K + C + K(K+1)/2 + KC
"moment" channels, stacked in the order of its ``Layout`` (f_k, p_c, f_i f_j for j <= i, f_k p_c), so one
batched box pass forms them all. At ``scale = s > 1`` the moments are first summed over s x s cells
straight from the centred inputs (the s rows of a cell with strided-row multiply-adds, then its s
columns), so the K(K+1)/2 + KC full-resolution product images are never stored.

Solve. Per grid pixel (Sigma + diag eps) a = cov is factorised as L D L^T right-looking, one tensor
op per column over a (B, K, K, n) block, and solved for all C right-hand sides at once. Eliminating
the constant term first is what reduces the (K+1) x (K+1) normal equations of the window to this
centred K x K system (its Schur complement), and b = mean(p) - a . mean(f) is the eliminated row.
The pivots are floored at eps_j: for a positive semi-definite Sigma the j-th pivot of Sigma + diag eps
is at least eps_j, so the floor only removes float32 rounding.

Engines. The path the registry chose names them (:class:`Engine`, ``local_linear/op.py``): ``box="opencv"``
(CPU float32) has OpenCV do the window sums in place, ``"torch"`` pools; ``numba=True`` (the torch+numba path,
CPU float32) runs the cell moments, the solve and the apply's upsampling as fused numba loops
(:mod:`.cpu_path`), and fits of small "valid" windows (:data:`FUSED_RADIUS`) in one pass that stores no moment
plane. Otherwise the grid is solved in bands of rows that fit in cache and the upsampling of
``apply`` at integer cell sizes is one strided lerp per phase of the cell.
Each stage's independent items (planes, bands, channels) go to worker threads
(:func:`vision.kernels.runtime.threads.own_threads`).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from ..runtime.threads import n_workers, parallel_for, threaded
from .torch_moments import (BAND_PIXELS, UPSAMPLE_PIXELS, box_mean_, box_mean_adjoint_, cell_moments,
                            cell_moments_adjoint, chunks, grid_shape, layout, pair_slots, pairs, rows_per_band)
from . import cpu_path


# ---------------------------------------------------------------------------------------------- solve

def _system(Xb, eps, lay):
    """(Sigma + diag eps) as a full (B, K, K, n) block, the raw variance sign (B, n, K) and cov (B, C, K, n)."""
    K, C = lay.K, lay.C
    B, _, n = Xb.shape
    mf, mp = Xb[:, :K], Xb[:, K:K + C]
    I, J, below, above = pair_slots(K, str(Xb.device))
    S = Xb.new_empty(B, K, K, n)
    low = Xb[:, lay.ff:lay.fp] - mf.index_select(1, I) * mf.index_select(1, J)
    S.view(B, K * K, n).index_copy_(1, below, low).index_copy_(1, above, low)
    diag = S.diagonal(dim1=1, dim2=2)  # (B, n, K) view
    pos = diag > 0
    diag.clamp_(min=0.0).add_(eps[:, None, :])
    cov = Xb[:, lay.fp:].view(B, C, K, n) - mp[:, :, None] * mf[:, None]
    return S, pos, cov


def ldl_(S, eps):
    """In-place L D L^T of the SPD blocks S (B, K, K, n): strict lower part L, diagonal D (pivots >= eps)."""
    K = S.shape[1]
    for j in range(K):
        dj = S[:, j, j]
        dj.clamp_(min=eps[:, j:j + 1])
        if j + 1 < K:
            col = S[:, j + 1:, j]
            lj = col / dj[:, None]
            S[:, j + 1:, j + 1:].addcmul_(lj[:, :, None], col[:, None, :], value=-1.0)
            col.copy_(lj)
    return S


def ldl_solve_(LD, Y):
    """Solve (L D L^T) X = Y in place for Y (B, C, K, n), LD from :func:`ldl_`."""
    K = LD.shape[1]
    for j in range(K - 1):
        Y[:, :, j + 1:].addcmul_(LD[:, None, j + 1:, j], Y[:, :, j:j + 1], value=-1.0)
    Y.div_(LD.diagonal(dim1=1, dim2=2).transpose(1, 2)[:, None])
    for j in range(K - 1, 0, -1):
        Y[:, :, :j].addcmul_(LD[:, None, j, :j], Y[:, :, j:j + 1], value=-1.0)
    return Y


def solve_band(Xb, eps, lay):
    """Window coefficients of one band: a (B, C, K, n), b (B, C, n), the factor and the variance signs."""
    S, pos, cov = _system(Xb, eps, lay)
    LD = ldl_(S, eps)
    a = ldl_solve_(LD, cov)
    mf, mp = Xb[:, :lay.K], Xb[:, lay.K:lay.K + lay.C]
    b = mp - (a * mf[:, None]).sum(2)
    return a, b, LD, pos


def _bands(X):
    B, _, h, w = X.shape
    rows = rows_per_band(BAND_PIXELS, B * w, X.device)
    rows = min(rows, -(-h // n_workers(X.device)))  # at least one band per worker
    for i0 in range(0, h, rows):
        yield i0, min(h, i0 + rows)


# ---------------------------------------------------------------------------------------------- fit

# Up to this window radius (in cells) the numba engine fits in one pass (:func:`.cpu_path.fit_small`): its windows
# are summed by direct adds, 2 r + 1 per axis, where OpenCV's running sums cost the same at any radius. At r = 1 (the
# input blend's sharp fit: K = 6, C = 3 on 2 x 2 cells of 1280 x 720) the call takes 27.6 ms where the moments, their
# window means, the solve and the coefficients' window means took 33.7 (BENCHMARKS.md); at FLNR's radii (1, 2 and 4
# cells, blended) the two were level.
FUSED_RADIUS = 2


def _fit_one(X, eps, lay, r: int, border: str, cf, cp, numba: bool = False, box: str = "torch"):
    """Window-averaged coefficients for the raw features from window-mean moments X (B, NM, h, w)."""
    B, K, C = X.shape[0], lay.K, lay.C
    h, w = X.shape[-2:]
    theta = X.new_empty(B, C, K + 1, h, w)

    def band(rows):
        i0, i1 = rows
        a, b, _, _ = solve_band(X[:, :, i0:i1].reshape(B, lay.NM, -1), eps, lay)
        theta[:, :, :K, i0:i1] = a.view(B, C, K, i1 - i0, w)
        theta[:, :, K, i0:i1] = b.view(B, C, i1 - i0, w)

    if numba:
        cpu_path.solve_rows(X.contiguous(), eps.contiguous(), K, C, theta)
    else:
        parallel_for(band, _bands(X), X.device)
    theta = box_mean_(theta, r, border, box=box)
    # back to raw features: a . (f - cf) + b + cp = a . f + (b - a . cf + cp)
    b = theta[:, :, K]
    b += cp[:, :, None, None]
    for k in range(K):
        b.addcmul_(theta[:, :, k], cf[:, None, k, None, None], value=-1.0)
    return theta


@threaded
def fit_forward(f, p, cf, cp, eps, radii, border: str, s: int, save: bool, weights=None, numba: bool = False,
                box: str = "torch"):
    """Coefficients (B, C, K + 1, H', W') for the raw features, and what the backward needs (engines: see the
    module docstring).

    ``radii`` is a tuple of R radii (R = 1 without ``weights``); with R > 1 the fits share one pass over the
    pixels (the cell moments) and are blended per cell, ``sum_j weights[:, j] * fit_j`` (``weights``
    (B, R, H', W')).
    """
    B, K = f.shape[:2]
    lay = layout(K, p.shape[1])
    if numba and not save and border == "valid" and 0 < min(radii) and max(radii) <= FUSED_RADIUS:
        theta = f.new_empty(B, p.shape[1], K + 1, *grid_shape(*f.shape[-2:], s))
        # bands of at least 16 times the widest radius in cell rows: each recomputes that radius' rows at its ends
        bands = max(1, min(2 * n_workers(f.device), theta.shape[-2] // (16 * max(radii))))
        w = f.new_empty(1, 1, 1, 1) if weights is None else weights.to(f.dtype).contiguous()
        cpu_path.fit_small(f.contiguous(), p.contiguous(), cf.contiguous(), cp.contiguous(), eps.contiguous(), s,
                           np.asarray(radii, np.int64), w, weights is not None, bands, theta)
        return theta, None
    X0 = cell_moments(f, p, cf, cp, s, numba=numba)
    theta, boxed, fits = None, [], []
    for j, r in enumerate(radii):
        X = box_mean_(X0, r, border, out=None if j == len(radii) - 1 else torch.empty_like(X0), box=box)  # X0 last
        boxed.append(X)
        theta = blend_add(theta, _fit_one(X, eps, lay, r, border, cf, cp, numba, box), weights, j, fits)
    saved = dict(X=boxed, fits=fits, weights=weights, f=f, p=p, cf=cf, cp=cp, radii=radii, border=border,
                 s=s) if save else None
    return theta, saved


def blend_add(total, fit, weights, j: int, fits: list):
    """``total + weights[:, j] * fit`` (``fit`` alone without weights), keeping ``fit`` in ``fits`` for
    :func:`weights_grad`."""
    if weights is None:
        return fit
    fits.append(fit)
    wt = weights[:, j, None, None].to(fit.dtype)
    return fit * wt if total is None else total.addcmul_(fit, wt)


def weights_grad(g, fits: list, weights):
    """d/dweights (B, R, H', W') of ``sum_j weights[:, j] * fits[j]`` given its gradient g (B, C, K + 1, H', W')."""
    return torch.stack([(g * t).sum((1, 2)) for t in fits], 1).to(weights.dtype)


def _moments_grad(X, gt, eps, lay, cf, r: int, border: str, need_eps: bool, box: str = "torch"):
    """Gradient w.r.t. the raw cell moments (before the window pass) of one radius's fit, and d eps."""
    B, K, C = X.shape[0], lay.K, lay.C
    h, w = X.shape[-2:]
    gt = gt.clone()
    gt[:, :, :K] -= gt[:, :, K:] * cf[:, None, :, None, None]  # the intercept's - a . cf
    gt = box_mean_adjoint_(gt, r, border, box)
    gX = torch.empty_like(X)
    I, J = (t.to(X.device) for t in pairs(K))
    bands = list(_bands(X))
    deps_parts = [None] * len(bands)

    def band(n):
        i0, i1 = bands[n]
        Xb = X[:, :, i0:i1].reshape(B, lay.NM, -1)
        a, _, LD, pos = solve_band(Xb, eps, lay)
        mf, mp = Xb[:, :K], Xb[:, K:K + C]
        ga = gt[:, :, :K, i0:i1].reshape(B, C, K, -1)
        gb = gt[:, :, K, i0:i1].reshape(B, C, -1)
        # b = mp - a . mf
        ga = ga - gb[:, :, None] * mf[:, None]
        g_mf = -(gb[:, :, None] * a).sum(1)
        g_mp = gb.clone()
        # a = S^-1 cov: g_cov = S^-1 g_a, dL/dS = G = -sum_c g_cov a^T
        g_cov = ldl_solve_(LD, ga)
        G = -(g_cov[:, :, :, None] * a[:, :, None, :]).sum(1)  # (B, K, K, n)
        Gd = G.diagonal(dim1=1, dim2=2)  # (B, n, K)
        if need_eps:
            deps_parts[n] = Gd.sum(1)
        Gd.mul_(pos)  # clamped variances pass no gradient to the moments
        Hs = G + G.transpose(1, 2)
        g_ff = Hs[:, I, J]
        g_ff[:, I == J] *= 0.5
        g_mf -= (Hs * mf[:, None]).sum(2) + (g_cov * mp[:, :, None]).sum(1)
        g_mp -= (g_cov * mf[:, None]).sum(2)
        gXb = torch.cat((g_mf, g_mp, g_ff, g_cov.reshape(B, C * K, -1)), 1)
        gX[:, :, i0:i1] = gXb.view(B, lay.NM, i1 - i0, w)

    parallel_for(band, range(len(bands)), X.device)
    return box_mean_adjoint_(gX, r, border, box), (torch.stack(deps_parts).sum(0) if need_eps else None)


@threaded
def fit_backward(saved, g, eps, need_eps: bool, need_weights: bool = False, box: str = "torch"):
    """(df, dp, deps, dweights) from the gradient g (B, C, K + 1, H', W') of the coefficients."""
    f, p, cf, cp = saved["f"], saved["p"], saved["cf"], saved["cp"]
    weights, border, s = saved["weights"], saved["border"], saved["s"]
    lay = layout(f.shape[1], p.shape[1])
    gX = deps = dw = None
    if weights is not None and need_weights:
        dw = weights_grad(g, saved["fits"], weights)
    for j, (X, r) in enumerate(zip(saved["X"], saved["radii"])):
        gt = g if weights is None else g * weights[:, j, None, None]
        gXj, dej = _moments_grad(X, gt, eps, lay, cf, r, border, need_eps, box)
        gX = gXj if gX is None else gX.add_(gXj)
        if need_eps:
            deps = dej if deps is None else deps + dej
    df, dp = cell_moments_adjoint(gX, f, p, cf, cp, s)
    return df, dp, deps, dw


# ---------------------------------------------------------------------------------------------- apply

@lru_cache(maxsize=64)
def _lerp_table(n_in: int, n_out: int, scale: float):
    """Source rows i0, i1 and weight of i1 for every output row (align_corners=False, explicit scale)."""
    pos = np.clip((np.arange(n_out) + 0.5) / scale - 0.5, 0.0, n_in - 1)
    i0 = np.floor(pos).astype(np.int64)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, (pos - i0)


def _upsample_band(coeffs, y0, y1, H, W, sh, sw):
    """Coefficients bilinearly upsampled to output rows [y0, y1): (B, C, K + 1, y1 - y0, W)."""
    B, C, K1, h, w = coeffs.shape
    if (h, w) == (H, W) and sh == 1.0 and sw == 1.0:
        return coeffs[:, :, :, y0:y1]
    i0, i1, fy = _lerp_table(h, H, sh)
    i0, i1, fy = i0[y0:y1], i1[y0:y1], fy[y0:y1]
    lo, hi = int(i0[0]), int(i1[-1]) + 1
    dev, dt = coeffs.device, coeffs.dtype
    cb = coeffs[:, :, :, lo:hi]
    wy = torch.as_tensor(fy, device=dev, dtype=dt)[:, None]
    v0 = cb.index_select(3, torch.as_tensor(i0 - lo, device=dev))
    v1 = cb.index_select(3, torch.as_tensor(i1 - lo, device=dev))
    v = torch.lerp(v0, v1, wy)
    if w == W and sw == 1.0:
        return v
    n = y1 - y0
    up = torch.ops.aten.upsample_bilinear2d(v.reshape(B, C * K1, n, w), [n, W], False, 1.0, float(sw))
    return up.view(B, C, K1, n, W)


def _upsample_band_adjoint(gu, coeffs_shape, y0, y1, H, W, sh, sw, out):
    """Accumulate the adjoint of :func:`_upsample_band` of gu (B, C, K + 1, y1 - y0, W) into out."""
    B, C, K1, h, w = coeffs_shape
    n = y1 - y0
    if (h, w) == (H, W) and sh == 1.0 and sw == 1.0:
        out[:, :, :, y0:y1] += gu
        return
    if not (w == W and sw == 1.0):
        gu = torch.ops.aten.upsample_bilinear2d_backward(
            gu.reshape(B, C * K1, n, W).contiguous(), [n, W], [B, C * K1, n, w], False, 1.0, float(sw)
        ).view(B, C, K1, n, w)
    i0, i1, fy = _lerp_table(h, H, sh)
    i0, i1, fy = i0[y0:y1], i1[y0:y1], fy[y0:y1]
    wy = torch.as_tensor(fy, device=gu.device, dtype=gu.dtype)[:, None]
    out.index_add_(3, torch.as_tensor(i0, device=gu.device), gu * (1 - wy))
    out.index_add_(3, torch.as_tensor(i1, device=gu.device), gu * wy)


def _apply_bands(f, coeffs, sh, sw):
    B, K, H, W = f.shape
    if coeffs.shape[-2:] == (H, W) and sh == 1.0 and sw == 1.0:
        return [(0, H)]
    if f.device.type != "cpu":
        return [(0, H)]
    rows = max(1, UPSAMPLE_PIXELS // (B * W))
    return [(y0, min(H, y0 + rows)) for y0 in range(0, H, rows)]


def _phases(s: int):
    """For output index s j + t: (first padded source offset, weight of the second) per phase t.

    With the source padded by one replicated entry at each end, output s j + t is
    ``lerp(src_pad[j + o_t], src_pad[j + o_t + 1], w_t)``: its position ``j + (t + 1/2) / s - 1/2`` lies
    between entries j - 1 and j (o_t = 0) or j and j + 1 (o_t = 1), and the clamping of
    ``align_corners=False`` at the ends is what the replicated entries give.
    """
    out = []
    for t in range(s):
        delta = (t + 0.5) / s - 0.5
        out.append((0, 1.0 + delta) if delta < 0 else (1, delta))
    return out


def cells_horizontal(coeffs, s_w: int):
    """Coefficient rows upsampled along x (1 / s_h of the output), with one replicated row above and below."""
    B, C, K1, gh, gw = coeffs.shape
    co = coeffs.reshape(B, C * K1, gh, gw)
    cp = torch.cat((co[..., :1], co, co[..., -1:]), -1)  # replicated ends give align_corners=False's clamping
    hp = co.new_empty(B, C * K1, gh + 2, gw * s_w)
    mid = hp[:, :, 1:gh + 1].view(B, C * K1, gh, gw, s_w)

    def some(ch):  # a chunk of the planes per worker
        ch = slice(ch.start, ch.stop)
        for t, (o, wt) in enumerate(_phases(s_w)):
            torch.lerp(cp[:, ch, :, o:o + gw], cp[:, ch, :, o + 1:o + 1 + gw], wt, out=mid[:, ch, ..., t])
        hp[:, ch, 0] = hp[:, ch, 1]
        hp[:, ch, gh + 1] = hp[:, ch, gh]

    parallel_for(some, chunks(C * K1, co.device), co.device)
    return hp


def cells_band(hp, i0, i1, s_h, shape):
    """Upsampled coefficients (B, C, K + 1, rows, W) for output rows [i0 s_h, min(H, i1 s_h))."""
    B, C, K1, H, W = shape
    u = hp.new_empty(B, C * K1, i1 - i0, s_h, hp.shape[-1])
    for t, (o, wt) in enumerate(_phases(s_h)):
        torch.lerp(hp[:, :, i0 + o:i1 + o], hp[:, :, i0 + o + 1:i1 + o + 1], wt, out=u[:, :, :, t])
    y0, y1 = i0 * s_h, min(H, i1 * s_h)
    return u.view(B, C, K1, (i1 - i0) * s_h, hp.shape[-1])[:, :, :, : y1 - y0, :W]


def _cell_rows(B, C, K1, gh, gw, s_h, s_w):
    return max(1, UPSAMPLE_PIXELS // (B * s_h * gw * s_w * max(1, C * K1 // 4)))


def _apply_cells(f, coeffs, s_h: int, s_w: int, numba: bool = False):
    """apply_forward for integer cell sizes: the upsampling as strided lerps, never a full-size gather."""
    B, K, H, W = f.shape
    C, K1, gh, gw = coeffs.shape[1:]
    q = f.new_empty(B, C, H, W)
    if numba:
        cpu_path.apply_cells(f.contiguous(), coeffs.contiguous(), s_h, s_w, q)
        return q
    hp = cells_horizontal(coeffs, s_w)
    rows = _cell_rows(B, C, K1, gh, gw, s_h, s_w)

    def one(i0):
        i1 = min(gh, i0 + rows)
        u = cells_band(hp, i0, i1, s_h, (B, C, K1, H, W))
        y0, y1 = i0 * s_h, min(H, i1 * s_h)
        qb = q[:, :, y0:y1]
        qb.copy_(u[:, :, K])
        fb = f[:, None, :, y0:y1]
        for k in range(K):
            qb.addcmul_(u[:, :, k], fb[:, :, k])

    parallel_for(one, range(0, gh, rows), f.device)
    return q


def _apply_cells_backward(f, coeffs, g, s_h: int, s_w: int, need_f: bool, need_coeffs: bool):
    """Adjoint of :func:`_apply_cells`: df = sum_c g_c up(a_c); d coeffs = up^T(g f_k), up^T(g)."""
    B, K, H, W = f.shape
    C, K1, gh, gw = coeffs.shape[1:]
    rows = _cell_rows(B, C, K1, gh, gw, s_h, s_w)
    starts = list(range(0, gh, rows))
    df = torch.empty_like(f) if need_f else None
    hp = cells_horizontal(coeffs, s_w) if need_f else None
    parts = [None] * len(starts)  # per band: gradient of its rows of hp (band rows + 2), summed after

    def one(n):
        i0 = starts[n]
        i1 = min(gh, i0 + rows)
        y0, y1 = i0 * s_h, min(H, i1 * s_h)
        gb, fb = g[:, :, y0:y1], f[:, :, y0:y1]
        if need_f:
            u = cells_band(hp, i0, i1, s_h, (B, C, K1, H, W))
            dfb = df[:, :, y0:y1]
            torch.mul(u[:, 0, :K], gb[:, :1], out=dfb)
            for c in range(1, C):
                dfb.addcmul_(u[:, c, :K], gb[:, c:c + 1])
        if need_coeffs:
            gu = g.new_zeros(B, C, K1, (i1 - i0) * s_h, gw * s_w)
            torch.mul(gb[:, :, None], fb[:, None], out=gu[:, :, :K, : y1 - y0, :W])
            gu[:, :, K, : y1 - y0, :W] = gb
            gu = gu.view(B, C * K1, i1 - i0, s_h, gw * s_w)
            part = g.new_zeros(B, C * K1, i1 - i0 + 2, gw * s_w)
            for t, (o, wt) in enumerate(_phases(s_h)):
                part[:, :, o:o + i1 - i0].add_(gu[:, :, :, t], alpha=1.0 - wt)
                part[:, :, o + 1:o + 1 + i1 - i0].add_(gu[:, :, :, t], alpha=wt)
            parts[n] = part

    parallel_for(one, range(len(starts)), f.device)
    dco = None
    if need_coeffs:
        dhp = g.new_zeros(B, C * K1, gh + 2, gw * s_w)
        for i0, part in zip(starts, parts):
            dhp[:, :, i0:i0 + part.shape[2]] += part
        dhp[:, :, 1] += dhp[:, :, 0]  # the replicated rows
        dhp[:, :, gh] += dhp[:, :, gh + 1]
        mid = dhp[:, :, 1:gh + 1].view(B, C * K1, gh, gw, s_w)
        dcp = g.new_zeros(B, C * K1, gh, gw + 2)
        for t, (o, wt) in enumerate(_phases(s_w)):
            dcp[..., o:o + gw].add_(mid[..., t], alpha=1.0 - wt)
            dcp[..., o + 1:o + 1 + gw].add_(mid[..., t], alpha=wt)
        dcp[..., 1] += dcp[..., 0]  # the replicated columns
        dcp[..., gw] += dcp[..., gw + 1]
        dco = dcp[..., 1:gw + 1].reshape(B, C, K1, gh, gw)
    return df, dco


@threaded
def apply_forward(f, coeffs, sh: float, sw: float, numba: bool = False):
    """q (B, C, H, W) = sum_k up(a_k) f_k + up(b); ``numba``: the fused loops at integer cell sizes."""
    B, K, H, W = f.shape
    C = coeffs.shape[1]
    if float(sh).is_integer() and float(sw).is_integer() and coeffs.shape[-2:] != (H, W):
        return _apply_cells(f, coeffs, int(sh), int(sw), numba)
    q = f.new_empty(B, C, H, W)
    for y0, y1 in _apply_bands(f, coeffs, sh, sw):
        u = _upsample_band(coeffs, y0, y1, H, W, sh, sw)
        qb = q[:, :, y0:y1]
        qb.copy_(u[:, :, K])
        fb = f[:, None, :, y0:y1]
        for k in range(K):
            qb.addcmul_(u[:, :, k], fb[:, :, k])
    return q


@threaded
def apply_backward(f, coeffs, g, sh: float, sw: float, need_f: bool, need_coeffs: bool):
    B, K, H, W = f.shape
    C = coeffs.shape[1]
    if float(sh).is_integer() and float(sw).is_integer() and coeffs.shape[-2:] != (H, W):
        return _apply_cells_backward(f, coeffs, g, int(sh), int(sw), need_f, need_coeffs)
    df = torch.empty_like(f) if need_f else None
    dco = torch.zeros_like(coeffs) if need_coeffs else None
    for y0, y1 in _apply_bands(f, coeffs, sh, sw):
        gb = g[:, :, y0:y1]
        fb = f[:, :, y0:y1]
        if need_f:
            u = _upsample_band(coeffs, y0, y1, H, W, sh, sw)
            df[:, :, y0:y1] = (u[:, :, :K] * gb[:, :, None]).sum(1)
        if need_coeffs:
            gu = torch.cat((gb[:, :, None] * fb[:, None], gb[:, :, None]), 2)
            _upsample_band_adjoint(gu, coeffs.shape, y0, y1, H, W, sh, sw, dco)
    return df, dco


class Engine:
    """This path's entry points on one set of engines: ``box`` "opencv" or "torch" window sums, ``numba`` fused
    CPU loops. What ``local_linear/op.py`` registers as the implementation of its PyTorch paths."""

    def __init__(self, box: str, numba: bool) -> None:
        self.box, self.numba = box, numba

    def fit_forward(self, f, p, cf, cp, eps, radii, border, s, save, weights=None):
        return fit_forward(f, p, cf, cp, eps, radii, border, s, save, weights, numba=self.numba, box=self.box)

    def fit_backward(self, saved, g, eps, need_eps, need_weights=False):
        return fit_backward(saved, g, eps, need_eps, need_weights, box=self.box)

    def apply_forward(self, f, coeffs, sh, sw):
        return apply_forward(f, coeffs, sh, sw, numba=self.numba)

    def apply_backward(self, f, coeffs, g, sh, sw, need_f, need_coeffs):
        return apply_backward(f, coeffs, g, sh, sw, need_f, need_coeffs)

    def __repr__(self) -> str:
        return f"local_linear.Engine(box={self.box!r}, numba={self.numba})"
