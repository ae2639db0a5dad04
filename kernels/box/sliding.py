"""Sliding-window box filter kernel: a program owns a strip of columns and walks down a chunk of rows.

Every step loads RB entering rows and the RB rows leaving the window (both BWI wide: the strip plus an
R-pixel halo on each side, coordinates mapped by the border mode), forms their horizontal window sums by a
scan along the row, and updates per-column running sums: V(y) = V(y - 1) + h(y + R) - h(y - R - 1), the RB
rows at once through a scan over the rows each thread holds. One warp per program keeps both scans inside
the warp (no barriers, no axis-0 scan across warps, no 2-D gathers), the halo is only 2R columns of BWI, and
the running sums restart every CH rows, which bounds float32 drift and gives the grid enough programs.
Values are centred on a per-program constant before summing, so the sums stay small.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..runtime import interpreting
from ..window_blocks import load_rows, row_window_sums, strip_keep, strip_start, window_count

RB = 8          # rows per step
# Triton's interpreter pays per operation and per helper call, not per register: under it every sliding walk (box,
# guided forward and backward) steps INTERPRETED_RB rows at a time. The kernels are the same for any RB, and the
# tests run the GPU's row counts too (0 here keeps them).
INTERPRETED_RB = 16
CHUNKS = (64, 32, 16)  # output rows per program (the running sums restart there), longest first
MIN_PROGRAMS = 2048    # about 16 one-warp programs per SM of an H100/H200: shorter chunks below that


def chunk_rows(planes: int, rows: int, strips: int) -> int:
    """Longest chunk that still gives the grid MIN_PROGRAMS programs (a 1 MP plane needs short chunks)."""
    for ch in CHUNKS:
        if planes * strips * triton.cdiv(rows, ch) >= MIN_PROGRAMS:
            return ch
    return CHUNKS[-1]


def rows_per_step(gpu_rb: int) -> int:
    """RB for a launch: the GPU's ``gpu_rb``, or INTERPRETED_RB rows under Triton's interpreter."""
    return max(gpu_rb, INTERPRETED_RB) if INTERPRETED_RB and interpreting() else gpu_rb


def strip_width(r: int) -> int:
    """BWI, the loaded width of a strip (power of two); BWI - 2r output columns."""
    return 64 if r <= 4 else 128


def walk_grid(planes: int, h: int, w: int, r: int, bwi: int) -> tuple[tuple[int, int, int], int]:
    """(grid, CH) of a sliding walk over ``planes`` planes of h x w outputs: one program per (plane, chunk of CH
    rows, strip of bwi - 2r output columns), the order ``window_blocks.strip_start`` reads."""
    strips = triton.cdiv(w, bwi - 2 * r)
    ch = chunk_rows(planes, h, strips)
    return (planes, triton.cdiv(h, ch), strips), ch


@triton.jit
def _row_vals(x_ptr, rows, cols, rmask, H, W, cvals, MODE: tl.constexpr, KIND: tl.constexpr, R: tl.constexpr):
    """Centred input values of rows ``rows`` ([RB, 1], unmapped) at strip columns ``cols``, 0 where absent."""
    t, inside = load_rows(x_ptr, rows, cols, H, W, MODE)
    inside = inside & rmask
    if KIND == 1:  # the valid adjoint sums x / N, N the count of the window centred on each input pixel
        t = t / tl.maximum(window_count(rows, H, R) * window_count(cols, W, R), 1).to(tl.float32)
    return tl.where(inside, t - cvals, 0.0)


@triton.jit
def _row_sums(x_ptr, rows, lrows, cols, rmask, H, W, cvals, MODE: tl.constexpr, KIND: tl.constexpr,
              R: tl.constexpr, BWI: tl.constexpr, LEAVE: tl.constexpr):
    """Horizontal window sums of rows ``rows``, less those of ``lrows`` when LEAVE (the sums are linear, so
    one scan of the difference serves both)."""
    t = _row_vals(x_ptr, rows, cols, rmask, H, W, cvals, MODE, KIND, R)
    if LEAVE:
        t = t - _row_vals(x_ptr, lrows, cols, rmask, H, W, cvals, MODE, KIND, R)
    return row_window_sums(t, R, BWI)


@triton.jit
def _sliding_box_kernel(x_ptr, out_ptr, H, W, HO, WO, OFF, R: tl.constexpr, MODE: tl.constexpr,
                        KIND: tl.constexpr, BWI: tl.constexpr, CH: tl.constexpr, RB: tl.constexpr):
    # KIND 0: window mean (HO, WO = H, W). KIND 1: adjoint of the valid mean, sum of x/N (H, W).
    # KIND 2: zero-outside window sums on the grid padded by OFF = R (HO = H + 2R), folded afterwards.
    plane, _, y0, k, j, cols, oc = strip_start(1, R, BWI, CH, RB)
    cols -= OFF                       # input columns of the strip: output column oc sits at lane j + R
    x_ptr += plane * H * W
    out_ptr += plane * HO * WO
    # per-program centre: mean of the in-image pixels of the first rows this program reads
    first = tl.minimum(tl.maximum(y0 - OFF, 0), H - 1) + k
    cmask = (first >= 0) & (first < H) & (cols >= 0) & (cols < W)
    cv = tl.load(x_ptr + tl.minimum(tl.maximum(first, 0), H - 1) * W + tl.minimum(tl.maximum(cols, 0), W - 1),
                 mask=cmask, other=0.0).to(tl.float32)
    if KIND == 1:
        cv = cv / tl.maximum(window_count(first, H, R) * window_count(cols, W, R), 1).to(tl.float32)
    c = tl.sum(tl.sum(cv, axis=1), axis=0) / tl.maximum(tl.sum(tl.sum(cmask.to(tl.float32), axis=1), axis=0), 1.0)
    # warm-up: V(y0 - 1) = sum of h over input rows y0 - 1 - R .. y0 - 1 + R (shifted by OFF)
    acc = tl.zeros([BWI], dtype=tl.float32)
    for w0 in range(0, 2 * R + 1, RB):
        rows = y0 - OFF - 1 - R + w0 + k
        h = _row_sums(x_ptr, rows, rows, cols, (w0 + k) < 2 * R + 1, H, W, c, MODE, KIND, R, BWI, False)
        acc += tl.sum(h, axis=0)
    for yb in range(y0, tl.minimum(y0 + CH, HO), RB):
        ent = yb - OFF + R + k
        lev = yb - OFF - R - 1 + k
        d = _row_sums(x_ptr, ent, lev, cols, k >= 0, H, W, c, MODE, KIND, R, BWI, True)
        v = acc[None, :] + tl.cumsum(d, axis=0)
        acc = acc + tl.sum(d, axis=0)
        oy = yb + k
        if MODE == 0 or KIND != 0:
            n = (window_count(oy - OFF, H, R) * window_count(oc - OFF, W, R)).to(tl.float32)
        else:
            n = (oy * 0 + oc * 0 + (2 * R + 1) * (2 * R + 1)).to(tl.float32)
        total = v + c * n
        if KIND == 0:
            total = total / tl.maximum(n, 1.0)
        keep = strip_keep(oy, oc, j, y0, HO, WO, R, BWI, CH)
        tl.store(out_ptr + oy * WO + oc, total, mask=keep)


def launch(x: torch.Tensor, r: int, mode: int, kind: int, off: int) -> torch.Tensor:
    """Window means / sums of every (H, W) plane of x; output (..., H + 2 off, W + 2 off) float32."""
    h, w = x.shape[-2:]
    planes = x.reshape(-1, h, w).contiguous().float()
    ho, wo = h + 2 * off, w + 2 * off
    out = torch.empty(planes.shape[0], ho, wo, device=x.device, dtype=torch.float32)
    bwi = strip_width(r)
    grid, ch = walk_grid(planes.shape[0], ho, wo, r, bwi)
    _sliding_box_kernel[grid](planes, out, h, w, ho, wo, off, R=r, MODE=mode, KIND=kind, BWI=bwi, CH=ch,
                              RB=rows_per_step(RB), num_warps=1)
    return out.reshape(*x.shape[:-2], ho, wo)
