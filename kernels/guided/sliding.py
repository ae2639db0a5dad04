"""Sliding-window Triton kernels of the gray-guide guided filter (the scheme of ``box/sliding.py``).

K1 (``_fit_gray_kernel``): a one-warp program owns a strip of columns and a chunk of rows; per step it
loads RB entering and RB leaving rows of guide and src, forms the horizontal window sums of I, p, I^2 and
I p by scans along the rows, updates four per-column running sums, and turns the RB rows of window
moments into a and b. K2 (``_apply_gray_kernel``): the same walk over a and b, then q = mean(a) I + mean(b)
(or the means themselves for the fast guided filter). Guide and src are centred on per-program constants
(shift invariance: a is unchanged, the shift is put back into b), and a guide whose centred values would
square past float32 is divided by its magnitude s with eps / s^2, the same filter.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..box.sliding import rows_per_step, strip_width, walk_grid
from ..runtime.arch import device_arch
from ..window_blocks import centre, load_rows, row_window_sums, strip_keep, strip_start, window_pixels

# rows per step: the fit keeps 4 moments of entering and leaving rows live, so it steps 2 rows at a time to stay
# within 255 registers of one warp without spilling; the apply keeps 2
FIT_RB = 2
APPLY_RB = 4


def fit_rows(mode: int, bwi: int, arch: int | None = None) -> int:
    """Rows per step of the fit on ``sm_<arch>`` (None: CPU/interpreter): FIT_RB, except the symmetric border at
    128 columns on sm_90, which puts 8 B on the stack at 2 rows (r = 16, Triton 3.8's ptxas) and none at 1."""
    return 1 if arch == 90 and mode == 3 and bwi == 128 else FIT_RB


@triton.jit
def _centred2(I_ptr, p_ptr, rows, cols, H, W, cI, cp, sc, MODE: tl.constexpr):
    I, inside = load_rows(I_ptr, rows, cols, H, W, MODE)
    p, _ = load_rows(p_ptr, rows, cols, H, W, MODE)
    return tl.where(inside, (I - cI) / sc, 0.0), tl.where(inside, p - cp, 0.0)


@triton.jit
def _fit_rows(I_ptr, p_ptr, rows, lrows, cols, H, W, cI, cp, sc, LEAVE: tl.constexpr, MODE: tl.constexpr,
              R: tl.constexpr, BWI: tl.constexpr):
    """Horizontal window sums of I, p, I^2, I p over rows ``rows`` less those over ``lrows`` (when LEAVE):
    the sums are linear, so one scan of the difference serves both."""
    I, p = _centred2(I_ptr, p_ptr, rows, cols, H, W, cI, cp, sc, MODE)
    if LEAVE:
        LI, Lp = _centred2(I_ptr, p_ptr, lrows, cols, H, W, cI, cp, sc, MODE)
    else:
        LI, Lp = I * 0.0, p * 0.0
    return (row_window_sums(I - LI, R, BWI), row_window_sums(p - Lp, R, BWI), row_window_sums(I * I - LI * LI, R, BWI),
            row_window_sums(I * p - LI * Lp, R, BWI))


@triton.jit
def _fit_gray_kernel(I_ptr, p_ptr, a_ptr, b_ptr, eps_ptr, C, H, W, R: tl.constexpr, MODE: tl.constexpr,
                     BWI: tl.constexpr, CH: tl.constexpr, RB: tl.constexpr):
    pc, bi, y0, k, j, cols, oc = strip_start(C, R, BWI, CH, RB)
    I_ptr += bi * H * W
    p_ptr += pc * H * W
    cI, mI0 = centre(I_ptr, y0 + k, cols, H, W)
    cp, _ = centre(p_ptr, y0 + k, cols, H, W)
    sc = tl.where(mI0 > 4294967296.0, mI0, 1.0)
    eps = tl.load(eps_ptr + bi)
    zero = tl.zeros([BWI], dtype=tl.float32)
    aI, ap, aII, aIp = zero, zero, zero, zero
    for w0 in range(0, 2 * R + 1, RB):  # window moments of row y0 - 1
        rows = y0 - 1 - R + w0 + k
        keep = ((w0 + k) < 2 * R + 1).to(tl.float32)
        hI, hp, hII, hIp = _fit_rows(I_ptr, p_ptr, rows, rows, cols, H, W, cI, cp, sc, False, MODE, R, BWI)
        aI += tl.sum(hI * keep, axis=0)
        ap += tl.sum(hp * keep, axis=0)
        aII += tl.sum(hII * keep, axis=0)
        aIp += tl.sum(hIp * keep, axis=0)
    for yb in range(y0, tl.minimum(y0 + CH, H), RB):
        dI, dp, dII, dIp = _fit_rows(I_ptr, p_ptr, yb + R + k, yb - R - 1 + k, cols, H, W, cI, cp, sc, True, MODE,
                                     R, BWI)
        oy = yb + k
        inv_n = 1.0 / window_pixels(oy, oc, H, W, R, MODE)
        mI = (aI[None, :] + tl.cumsum(dI, axis=0)) * inv_n
        mp = (ap[None, :] + tl.cumsum(dp, axis=0)) * inv_n
        var = tl.maximum((aII[None, :] + tl.cumsum(dII, axis=0)) * inv_n - mI * mI, 0.0)
        cov = (aIp[None, :] + tl.cumsum(dIp, axis=0)) * inv_n - mI * mp
        aI += tl.sum(dI, axis=0)
        ap += tl.sum(dp, axis=0)
        aII += tl.sum(dII, axis=0)
        aIp += tl.sum(dIp, axis=0)
        a = cov / (var * sc + eps / sc)
        b = mp + cp - a * (mI * sc + cI)
        keep = strip_keep(oy, oc, j, y0, H, W, R, BWI, CH)
        out = pc * H * W + oy * W + oc
        tl.store(a_ptr + out, a, mask=keep)
        tl.store(b_ptr + out, b, mask=keep)


@triton.jit
def _ab_rows(a_ptr, b_ptr, rows, lrows, cols, H, W, ca, cb, LEAVE: tl.constexpr, MODE: tl.constexpr,
             R: tl.constexpr, BWI: tl.constexpr):
    a, inside = load_rows(a_ptr, rows, cols, H, W, MODE)
    b, _ = load_rows(b_ptr, rows, cols, H, W, MODE)
    a = tl.where(inside, a - ca, 0.0)
    b = tl.where(inside, b - cb, 0.0)
    if LEAVE:
        la, linside = load_rows(a_ptr, lrows, cols, H, W, MODE)
        lb, _ = load_rows(b_ptr, lrows, cols, H, W, MODE)
        a -= tl.where(linside, la - ca, 0.0)
        b -= tl.where(linside, lb - cb, 0.0)
    return row_window_sums(a, R, BWI), row_window_sums(b, R, BWI)


@triton.jit
def _apply_gray_kernel(a_ptr, b_ptr, I_ptr, q_ptr, ma_ptr, mb_ptr, C, H, W, R: tl.constexpr, MODE: tl.constexpr,
                       APPLY: tl.constexpr, STORE_MA: tl.constexpr, BWI: tl.constexpr, CH: tl.constexpr,
                       RB: tl.constexpr):
    pc, bi, y0, k, j, cols, oc = strip_start(C, R, BWI, CH, RB)
    a_ptr += pc * H * W
    b_ptr += pc * H * W
    ca, _ = centre(a_ptr, y0 + k, cols, H, W)
    cb, _ = centre(b_ptr, y0 + k, cols, H, W)
    zero = tl.zeros([BWI], dtype=tl.float32)
    sa, sb = zero, zero
    for w0 in range(0, 2 * R + 1, RB):
        keep = ((w0 + k) < 2 * R + 1).to(tl.float32)
        rows = y0 - 1 - R + w0 + k
        ha, hb = _ab_rows(a_ptr, b_ptr, rows, rows, cols, H, W, ca, cb, False, MODE, R, BWI)
        sa += tl.sum(ha * keep, axis=0)
        sb += tl.sum(hb * keep, axis=0)
    for yb in range(y0, tl.minimum(y0 + CH, H), RB):
        da, db = _ab_rows(a_ptr, b_ptr, yb + R + k, yb - R - 1 + k, cols, H, W, ca, cb, True, MODE, R, BWI)
        oy = yb + k
        inv_n = 1.0 / window_pixels(oy, oc, H, W, R, MODE)
        ma = (sa[None, :] + tl.cumsum(da, axis=0)) * inv_n + ca
        mb = (sb[None, :] + tl.cumsum(db, axis=0)) * inv_n + cb
        sa += tl.sum(da, axis=0)
        sb += tl.sum(db, axis=0)
        keep = strip_keep(oy, oc, j, y0, H, W, R, BWI, CH)
        pix = oy * W + oc
        if APPLY:
            guide = tl.load(I_ptr + bi * H * W + pix, mask=keep, other=0.0).to(tl.float32)
            tl.store(q_ptr + pc * H * W + pix, ma * guide + mb, mask=keep)
        else:
            tl.store(mb_ptr + pc * H * W + pix, mb, mask=keep)
        if STORE_MA:
            tl.store(ma_ptr + pc * H * W + pix, ma, mask=keep)


def forward_gray(I, p, eps, r, mode: int, apply: bool, keep_ma: bool = False):
    """I (B, 1, H, W), p (B, C, H, W) float32 contiguous, eps (B,) float32: q, (q, mean a) or (mean a, mean b)."""
    bsz, _, h, w = I.shape
    c = p.shape[1]
    bwi = strip_width(r)
    grid, ch = walk_grid(bsz * c, h, w, r, bwi)
    a = torch.empty(bsz, c, h, w, device=I.device, dtype=torch.float32)
    b = torch.empty_like(a)
    _fit_gray_kernel[grid](I, p, a, b, eps, c, h, w, R=r, MODE=mode, BWI=bwi, CH=ch,
                           RB=rows_per_step(fit_rows(mode, bwi, device_arch(I.device))), num_warps=1)
    if apply:
        q = torch.empty_like(a)
        ma = torch.empty_like(a) if keep_ma else q
        _apply_gray_kernel[grid](a, b, I, q, ma, q, c, h, w, R=r, MODE=mode, APPLY=True, STORE_MA=keep_ma, BWI=bwi,
                                 CH=ch, RB=rows_per_step(APPLY_RB), num_warps=1)
        return (q, ma) if keep_ma else q
    ma, mb = torch.empty_like(a), torch.empty_like(a)
    _apply_gray_kernel[grid](a, b, I, mb, ma, mb, c, h, w, R=r, MODE=mode, APPLY=False, STORE_MA=True, BWI=bwi,
                             CH=ch, RB=rows_per_step(APPLY_RB), num_warps=1)
    return ma, mb
