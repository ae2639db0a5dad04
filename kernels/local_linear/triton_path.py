"""Triton kernels of local linear regression (CUDA; CI runs them in Triton's interpreter on CPU tensors).

Same maths, layouts and entry points as :mod:`.torch_path` (read its docstring first). Forward fit,
four launches per radius (plus one cell pass at s > 1):

1. scale 1: ``_moment_rows_kernel`` forms the NM moments (f_k, p_c, f_i f_j, f_k p_c) of the centred f, p
   tap by tap inside the horizontal window pass; s > 1: ``_cell_moments_kernel`` averages them over the
   s x s cells, then ``_taps_rows_kernel`` is the horizontal pass over the NM grid planes.
2. ``_solve_kernel``: vertical window pass fused with the per-pixel system (matrix form, runtime loops
   over K: :mod:`.triton_solve`); writes a and b.
3. ``_taps_rows_kernel`` on the C (K + 1) coefficient planes.
4. ``_coeff_cols_kernel``: vertical pass of the coefficients, plus the shift of the intercept back to
   the raw features.

Window passes are 1-D weighted taps ``out[x] = sum_e W[x, e] in[x - R + e]`` with a host-built (n, 2R + 1)
table per axis and border mode (see :func:`taps_table`). The same kernels with the transposed table
are the adjoint passes of the backward, so every border mode (and windows larger than the image) is
one code path. ``apply`` is one gather kernel (bilinear taps of the coefficients, dot with features).
Backward of the fit: adjoint passes, ``_fit_bwd_kernel`` (per pixel: refactorise, solve for the
gradient, the symmetric dL/dSigma) and ``_cell_adjoint_kernel`` (per pixel, back through the cell
means and products). The backward of ``apply`` uses the PyTorch path's tensor ops (any device).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import triton
import triton.language as tl

from ..border import source_index
from ..runtime import interpreting
from ..runtime.arch import device_arch
from . import torch_path
from .torch_moments import grid_shape, layout
from .triton_cells import _cell_adjoint_kernel, _cell_moments_kernel
from .triton_solve import _fit_bwd_kernel, _moment_rows_kernel, _solve_kernel, padded


def _solve_launch(n_pixels: int, K: int, C: int, arch: int | None = None, cells: bool = False):
    """(grid axis 0, constexprs, num_warps) of the per-pixel solve kernels on ``sm_<arch>`` (None: CPU/interpreter).

    One pixel's padded system (up to 8 x 8) per thread spills at 4 warps on sm_90 (255 registers, 408 B stack
    for K = 8); 8 warps over 128 pixels split each system over two threads and spill nothing (239 registers).
    ``cells``: the cell-moment pass, which at K <= 4 and 4 warps puts 16 B on the stack on sm_86 (not on sm_90;
    Triton 3.8's ptxas) and none at 8 warps on sm_80, sm_86 and sm_89: those take 8 there.
    """
    KP, CP = padded(K), padded(C)
    BLOCK = min(4096, triton.next_power_of_2(n_pixels)) if interpreting() else 128
    wide = KP >= 8 or (cells and arch is not None and arch < 90)
    return triton.cdiv(n_pixels, BLOCK), dict(KP=KP, CP=CP, BLOCK=BLOCK), 8 if wide else 4


def _tiles(kind: str):
    """(BH, BW, num_warps) per kernel kind; the interpreter wants few, large programs."""
    if interpreting():
        return (128, 64, 1) if kind == "taps" else (32, 64, 1)
    return {"taps": (8, 128, 4), "solve": (4, 32, 4), "apply": (4, 128, 4)}[kind]


# ---------------------------------------------------------------------------------------------- tables

def _window_counts(n: int, r: int, border: str) -> np.ndarray:
    """(n, n) float64: A[x, s] = how many of the 2r + 1 window positions around x read pixel s.

    O(n^2) whatever r: replicate adds the positions beyond each edge to the edge pixel; reflect and symmetric
    are periodic (period 2n - 2 and 2n), so a window is whole periods plus a part, counted by a cumulative
    table over one period. A radius of 10^6 on a 128-pixel axis costs what a radius of 127 costs.
    """
    x = np.arange(n)
    lo, hi = x - r, x + r + 1  # half-open window of positions
    s = np.arange(n)
    inside = ((s[None] >= lo[:, None]) & (s[None] < hi[:, None])).astype(np.float64)
    if border == "valid":
        return inside
    if border == "replicate":
        inside[:, 0] += np.maximum(0, np.minimum(hi, 0) - lo)
        inside[:, n - 1] += np.maximum(0, hi - np.maximum(lo, n))
        return inside
    if border == "reflect" and n == 1:
        return np.full((1, 1), 2.0 * r + 1)
    period = 2 * n - 2 if border == "reflect" else 2 * n
    src = source_index(np.arange(period), n, border)
    cum = np.zeros((period + 1, n))
    np.add.at(cum, (np.arange(1, period + 1), src), 1.0)
    cum = np.cumsum(cum, 0)

    def upto(t):  # positions in [0, t) of the infinite axis (t may be negative), per source pixel
        return (t // period)[:, None] * cum[period][None] + cum[t % period]

    return upto(hi) - upto(lo)


@lru_cache(maxsize=128)
def _taps_numpy(n: int, r: int, border: str, adjoint: bool):
    """(table (n, 2R + 1) float64, R): the 1-D window-mean operator A of one axis as taps, R = min(r, n - 1).

    Forward: out[x] = sum_e A[x, x - R + e] in[x - R + e]; adjoint: the same with A transposed.
    """
    R = min(r, n - 1)
    T = 2 * R + 1
    A = _window_counts(n, r, border)
    A /= A.sum(1, keepdims=True)  # valid: 1 / (taps inside); padded: 1 / (2r + 1)
    if adjoint:
        A = A.T
    x = np.arange(n)[:, None]
    src = x - R + np.arange(T)[None]
    ok = (src >= 0) & (src < n)
    table = np.where(ok, A[np.broadcast_to(x, src.shape), np.clip(src, 0, n - 1)], 0.0)
    return table, R


@lru_cache(maxsize=128)
def _taps_device(n: int, r: int, border: str, adjoint: bool, device: str):
    table, R = _taps_numpy(n, r, border, adjoint)
    return torch.as_tensor(table, dtype=torch.float32, device=device).contiguous(), R


def taps_table(n: int, r: int, border: str, device, adjoint: bool = False):
    """The (n, 2R + 1) float32 tap table of :func:`_taps_numpy` on ``device`` (cached) and R."""
    return _taps_device(n, r, border, adjoint, str(torch.device(device)))


# ---------------------------------------------------------------------------------------------- kernels

@triton.jit
def _taps_rows_kernel(x_ptr, w_ptr, out_ptr, n_rows, W, T, R, BH: tl.constexpr, BW: tl.constexpr):
    """out[y, x] = sum_e w[x, e] x[y, x - R + e] over the rows of all planes stacked, (n_rows, W)."""
    y = tl.program_id(1) * BH + tl.arange(0, BH)
    x = tl.program_id(0) * BW + tl.arange(0, BW)
    ym = y < n_rows
    xm = x < W
    acc = tl.zeros([BH, BW], dtype=tl.float32)
    for e in range(T):
        src = x - R + e
        sm = (src >= 0) & (src < W) & xm
        wv = tl.load(w_ptr + x * T + e, mask=xm, other=0.0)
        v = tl.load(x_ptr + y[:, None] * W + src[None, :], mask=ym[:, None] & sm[None, :], other=0.0)
        acc += v * wv[None, :]
    tl.store(out_ptr + y[:, None] * W + x[None, :], acc, mask=ym[:, None] & xm[None, :])


@triton.jit
def _taps_cols_kernel(x_ptr, w_ptr, out_ptr, n_rows, h, W, T, R, BH: tl.constexpr, BW: tl.constexpr):
    """out[plane, y, x] = sum_e w[y, e] x[plane, y - R + e, x]; a tile's rows may span planes of h rows."""
    row = tl.program_id(1) * BH + tl.arange(0, BH)
    x = tl.program_id(0) * BW + tl.arange(0, BW)
    rm = row < n_rows
    xm = x < W
    plane = row // h
    y = row - plane * h
    acc = tl.zeros([BH, BW], dtype=tl.float32)
    for e in range(T):
        src = y - R + e
        sm = (src >= 0) & (src < h) & rm
        wv = tl.load(w_ptr + y * T + e, mask=rm, other=0.0)
        v = tl.load(x_ptr + (plane * h + src)[:, None] * W + x[None, :], mask=sm[:, None] & xm[None, :], other=0.0)
        acc += v * wv[:, None]
    tl.store(out_ptr + row[:, None] * W + x[None, :], acc, mask=rm[:, None] & xm[None, :])


@triton.jit
def _load_moments(h_ptr, wy_ptr, b, y, x, ym, xm, h, w, T, R, NM: tl.constexpr, BH: tl.constexpr,
                  BW: tl.constexpr):
    """The NM window means at a tile: vertical taps over the horizontally filtered planes."""
    acc = ()
    for m in tl.static_range(NM):
        acc = acc + (tl.zeros([BH, BW], dtype=tl.float32),)
    for e in range(T):
        src = y - R + e
        sm = (src >= 0) & (src < h) & ym
        wv = tl.load(wy_ptr + y * T + e, mask=ym, other=0.0)[:, None]
        lm = sm[:, None] & xm[None, :]
        off = src[:, None] * w + x[None, :]
        new = ()
        for m in tl.static_range(NM):
            v = tl.load(h_ptr + (b * NM + m) * h * w + off, mask=lm, other=0.0)
            new = new + (acc[m] + v * wv,)
        acc = new
    return acc


@triton.jit
def _coeff_cols_kernel(t_ptr, wy_ptr, cf_ptr, cp_ptr, out_ptr, h, w, T, R,
                       K: tl.constexpr, C: tl.constexpr, BH: tl.constexpr, BW: tl.constexpr):
    """Vertical window pass of one channel's K + 1 coefficient planes; intercept back to raw features."""
    bc = tl.program_id(2)
    b = bc // C
    y = tl.program_id(1) * BH + tl.arange(0, BH)
    x = tl.program_id(0) * BW + tl.arange(0, BW)
    ym = y < h
    xm = x < w
    acc = _load_moments(t_ptr, wy_ptr, bc, y, x, ym, xm, h, w, T, R, K + 1, BH, BW)
    m2 = ym[:, None] & xm[None, :]
    off = y[:, None] * w + x[None, :]
    bb = acc[K] + tl.load(cp_ptr + bc)
    for k in tl.static_range(K):
        bb = bb - acc[k] * tl.load(cf_ptr + b * K + k)
        tl.store(out_ptr + (bc * (K + 1) + k) * h * w + off, acc[k], mask=m2)
    tl.store(out_ptr + (bc * (K + 1) + K) * h * w + off, bb, mask=m2)


@triton.jit(do_not_specialize=["H", "W", "h", "w", "K", "C"])
def _apply_kernel(f_ptr, co_ptr, q_ptr, H, W, h, w, inv_sh, inv_sw, K, C, BH: tl.constexpr, BW: tl.constexpr):
    """q[b, c] = sum_k up(a_ck) f_k + up(b_c); up = bilinear, align_corners=False, explicit scale.

    Runtime loops over C and K + 1 (f is re-read per channel from cache): one small binary for every K, C.
    A neighbour with bilinear weight 0 is not loaded, so at equal sizes only one load per coefficient remains.
    """
    b = tl.program_id(2)
    y = tl.program_id(1) * BH + tl.arange(0, BH)
    x = tl.program_id(0) * BW + tl.arange(0, BW)
    ym = y < H
    xm = x < W
    m2 = ym[:, None] & xm[None, :]
    sy = tl.maximum((y.to(tl.float32) + 0.5) * inv_sh - 0.5, 0.0)
    sx = tl.maximum((x.to(tl.float32) + 0.5) * inv_sw - 0.5, 0.0)
    y0 = tl.minimum(sy.to(tl.int32), h - 1)  # sy >= 0, so truncation is floor
    x0 = tl.minimum(sx.to(tl.int32), w - 1)
    y1 = tl.minimum(y0 + 1, h - 1)
    x1 = tl.minimum(x0 + 1, w - 1)
    ly = (sy - y0.to(tl.float32))[:, None]
    lx = (sx - x0.to(tl.float32))[None, :]
    o00 = y0[:, None] * w + x0[None, :]
    o01 = y0[:, None] * w + x1[None, :]
    o10 = y1[:, None] * w + x0[None, :]
    o11 = y1[:, None] * w + x1[None, :]
    m01 = m2 & (lx != 0.0)
    m10 = m2 & (ly != 0.0)
    m11 = m01 & (ly != 0.0)
    off = y[:, None] * W + x[None, :]
    hw = h * w
    HW = H * W
    for c in range(C):
        q = tl.zeros([BH, BW], dtype=tl.float32)
        for k in range(K + 1):
            base = co_ptr + ((b * C + c) * (K + 1) + k) * hw
            v00 = tl.load(base + o00, mask=m2, other=0.0)
            v01 = tl.load(base + o01, mask=m01, other=0.0)
            v10 = tl.load(base + o10, mask=m10, other=0.0)
            v11 = tl.load(base + o11, mask=m11, other=0.0)
            u = (1.0 - ly) * ((1.0 - lx) * v00 + lx * v01) + ly * ((1.0 - lx) * v10 + lx * v11)
            fk = tl.load(f_ptr + (b * K + k) * HW + off, mask=m2 & (k < K), other=1.0)  # k = K: the intercept
            q += u * fk
        tl.store(q_ptr + (b * C + c) * HW + off, q, mask=m2)


# ---------------------------------------------------------------------------------------------- launchers

def _check_size(*tensors):
    for t in tensors:
        if t.numel() >= 2**31:
            raise ValueError(f"tensor of {t.numel()} elements is too large for the int32 indexing of the "
                             "Triton kernels; split the batch")


def _grid(w, h, planes, BH, BW):
    return (triton.cdiv(w, BW), triton.cdiv(h, BH), planes)


def _rows_pass(x, table, R):
    """Horizontal taps over the planes (..., h, w) of a contiguous float32 tensor."""
    w = x.shape[-1]
    rows = x.numel() // w
    out = torch.empty_like(x)
    BH, BW, nw = _tiles("taps")
    _taps_rows_kernel[_grid(w, rows, 1, BH, BW)](x, table, out, rows, w, table.shape[1], R, BH=BH, BW=BW,
                                                  num_warps=nw)
    return out


def _cols_pass(x, table, R):
    """Vertical taps over the planes (..., h, w) of a contiguous float32 tensor."""
    h, w = x.shape[-2:]
    rows = x.numel() // w
    out = torch.empty_like(x)
    BH, BW, nw = _tiles("taps")
    _taps_cols_kernel[_grid(w, rows, 1, BH, BW)](x, table, out, rows, h, w, table.shape[1], R, BH=BH, BW=BW,
                                                  num_warps=nw)
    return out


def box_mean(x, r, border, adjoint: bool = False):
    """Window mean (or its adjoint) over the last two axes of a contiguous float32 tensor."""
    h, w = x.shape[-2:]
    tx, rx = taps_table(w, r, border, x.device, adjoint)
    ty, ry = taps_table(h, r, border, x.device, adjoint)
    return _cols_pass(_rows_pass(x.contiguous(), tx, rx), ty, ry)


def fit_forward(f, p, cf, cp, eps, radii, border: str, s: int, save: bool, weights=None):
    """As :func:`.torch_path.fit_forward`: one cell-moment pass, then per radius the window passes and solve."""
    if f.dtype != torch.float32:  # the kernels accumulate in float32; float64 (gradcheck) runs the torch path
        return torch_path.fit_forward(f, p, cf, cp, eps, radii, border, s, save, weights)
    B, K, H, W = f.shape
    C = p.shape[1]
    lay = layout(K, C)
    gh, gw = grid_shape(H, W, s)
    f, p = f.contiguous(), p.contiguous()
    cf, cp = cf.contiguous().float(), cp.contiguous().float()
    eps_c = eps.detach().float().contiguous()
    X0 = f.new_empty(B, lay.NM, gh, gw)
    _check_size(X0, f, p)
    if s > 1:
        n_blocks, const, warps = _solve_launch(gh * gw, K, C, device_arch(f.device), cells=True)
        _cell_moments_kernel[(n_blocks, B)](f, p, cf, cp, X0, H, W, gh, gw, K, C, s, **const, num_warps=warps)
    total, boxed, fits = None, [], []
    BH, BW, nw = _tiles("solve")
    for j, r in enumerate(radii):
        tx, rx = taps_table(gw, r, border, f.device)
        ty, ry = taps_table(gh, r, border, f.device)
        if s > 1:
            Xh = _rows_pass(X0, tx, rx)
        else:  # scale 1: moments formed inside the horizontal pass, never stored before it
            Xh = X0
            n_blocks, const, warps = _solve_launch(H * W, K, C)
            _moment_rows_kernel[(n_blocks, B)](f, p, cf, cp, tx, Xh, H, W, H * W, tx.shape[1], rx, K, C, **const,
                                               num_warps=warps)
        theta = f.new_empty(B, C, K + 1, gh, gw)
        X = f.new_empty(B, lay.NM, gh, gw) if save else theta  # X_ptr unused when SAVE is False
        n_blocks, const, warps = _solve_launch(gh * gw, K, C)
        _solve_kernel[(n_blocks, B)](Xh, ty, eps_c, theta, X, gh, gw, gh * gw, ty.shape[1], ry, K, C, int(save),
                                     **const, num_warps=warps)
        del Xh
        th = _rows_pass(theta, tx, rx)
        out = torch.empty_like(theta)
        _coeff_cols_kernel[_grid(gw, gh, B * C, BH, BW)](th, ty, cf, cp, out, gh, gw, ty.shape[1], ry, K=K, C=C,
                                                         BH=BH, BW=BW, num_warps=nw)
        boxed.append(X)
        total = torch_path.blend_add(total, out, weights, j, fits)
    saved = dict(X=boxed, fits=fits, weights=weights, f=f, p=p, cf=cf, cp=cp, radii=radii, border=border, s=s,
                 triton=True) if save else None
    return total, saved


def fit_backward(saved, g, eps, need_eps: bool, need_weights: bool = False):
    if not saved.get("triton"):
        return torch_path.fit_backward(saved, g, eps, need_eps, need_weights)
    f, p, cf, cp = saved["f"], saved["p"], saved["cf"], saved["cp"]
    weights, border, s = saved["weights"], saved["border"], saved["s"]
    B, K, H, W = f.shape
    C = p.shape[1]
    g = g.float()
    dw = None
    if weights is not None and need_weights:
        dw = torch_path.weights_grad(g, saved["fits"], weights)
    eps_c = eps.detach().float().contiguous()
    gX = deps = None
    for j, (X, r) in enumerate(zip(saved["X"], saved["radii"])):
        gj = g if weights is None else g * weights[:, j, None, None].float()
        gh, gw = X.shape[-2:]
        gt = gj.clone()
        gt[:, :, :K] -= gj[:, :, K:] * cf[:, None, :, None, None]  # the intercept's - a . cf
        gt = box_mean(gt, r, border, adjoint=True)
        gXj = torch.empty_like(X)
        n_blocks, const, warps = _solve_launch(gh * gw, K, C)
        deps_part = f.new_empty(B, n_blocks, K) if need_eps else f.new_empty(1)
        _fit_bwd_kernel[(n_blocks, B)](X, gt, eps_c, gXj, deps_part, gh * gw, K, C, int(need_eps), **const,
                                       num_warps=warps)
        gXj = box_mean(gXj, r, border, adjoint=True)
        gX = gXj if gX is None else gX.add_(gXj)
        if need_eps:
            dej = deps_part.sum(1).to(eps.dtype)
            deps = dej if deps is None else deps + dej
    gh, gw = gX.shape[-2:]
    df, dp = torch.empty_like(f), torch.empty_like(p)
    n_blocks, const, warps = _solve_launch(H * W, K, C)
    _cell_adjoint_kernel[(n_blocks, B)](gX, f, p, cf, cp, df, dp, H, W, gh, gw, K, C, s, **const, num_warps=warps)
    return df, dp, deps, dw


def apply_forward(f, coeffs, sh: float, sw: float):
    if f.dtype != torch.float32:
        return torch_path.apply_forward(f, coeffs, sh, sw)
    B, K, H, W = f.shape
    C, _, h, w = coeffs.shape[1:]
    q = f.new_empty(B, C, H, W)
    _check_size(f, coeffs, q)
    BH, BW, nw = _tiles("apply")
    # the source coordinate is (x + 1/2) / s - 1/2 with 1/s rounded to float32, as PyTorch computes it
    _apply_kernel[_grid(W, H, B, BH, BW)](f, coeffs, q, H, W, h, w, float(np.float32(1.0 / sh)),
                                          float(np.float32(1.0 / sw)), K, C, BH=BH, BW=BW, num_warps=nw)
    return q


def apply_backward(f, coeffs, g, sh: float, sw: float, need_f: bool, need_coeffs: bool):
    return torch_path.apply_backward(f, coeffs, g, sh, sw, need_f, need_coeffs)

