"""The denoiser's sample repair as one Triton kernel: :func:`vision.denoise.buffers.fill_from_neighbours` for
NaN/Inf samples (and flagged pixels) in a single pass that reads each sample's 3 x 3 neighbourhood once.

Composed from PyTorch ops the repair is about ten full passes per buffer (masks, two average pools, divisions,
selects): on a 1080p frame's seven buffers that is ~0.6 ms of memory traffic on an H200, most of FLR's budget.
This kernel reads every buffer once and writes it once, and counts the non-finite samples with one atomic add
per program, so the count never needs a host read to be formed.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_H, BLOCK_W = 4, 128  # rows of 128 for coalesced loads; 87 registers with flags, no spills on sm_90
FLOAT_MAX = tl.constexpr(3.4028234663852886e38)  # the largest finite float32: above it (or NaN), not finite


@triton.jit
def _fill_kernel(x_ptr, flag_ptr, out_ptr, count_ptr, C, H, W, sxb, sxc, sxh, sxw, sfb, sfh, sfw,
                 HAS_FLAG: tl.constexpr, BH: tl.constexpr, BW: tl.constexpr):
    bc = tl.program_id(0)
    b = bc // C
    c = bc - b * C
    ys = tl.program_id(1) * BH + tl.arange(0, BH)[:, None]
    xs = tl.program_id(2) * BW + tl.arange(0, BW)[None, :]
    base = x_ptr + b.to(tl.int64) * sxb + c.to(tl.int64) * sxc
    num = tl.zeros((BH, BW), tl.float32)
    den = tl.zeros((BH, BW), tl.float32)
    centre = tl.zeros((BH, BW), tl.float32)
    centre_ok = tl.zeros((BH, BW), tl.int1)
    centre_finite = tl.zeros((BH, BW), tl.int1)
    for dy in tl.static_range(3):
        for dx in tl.static_range(3):
            yy = ys + (dy - 1)
            xx = xs + (dx - 1)
            inside = (yy >= 0) & (yy < H) & (xx >= 0) & (xx < W)
            v = tl.load(base + yy * sxh + xx * sxw, mask=inside, other=0.0).to(tl.float32)
            finite = tl.abs(v) <= FLOAT_MAX  # false for NaN and +-Inf
            ok = inside & finite
            if HAS_FLAG:
                f = tl.load(flag_ptr + b.to(tl.int64) * sfb + yy * sfh + xx * sfw, mask=inside, other=1)
                ok = ok & (f == 0)
            num += tl.where(ok, v, 0.0)
            den += tl.where(ok, 1.0, 0.0)
            if dy == 1 and dx == 1:
                centre = v
                centre_ok = ok
                centre_finite = finite
    here = (ys < H) & (xs < W)
    fill = tl.where(den > 0, num / tl.maximum(den, 1e-12), 0.0)
    out = tl.where(centre_ok, centre, fill)
    tl.store(out_ptr + bc.to(tl.int64) * H * W + ys * W + xs, out.to(out_ptr.dtype.element_ty), mask=here)
    bad = tl.sum(tl.sum(tl.where(here & (centre_finite == 0), 1, 0), axis=1), axis=0)
    tl.atomic_add(count_ptr, bad)


def fill(x: torch.Tensor, flag: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(repaired, count)``: ``x`` (B, C, H, W; float32 / float16 / bfloat16) with every sample that is not
    finite, or lies in a pixel where ``flag`` (B, 1, H, W, nonzero = replace) is set, replaced by the mean of
    the finite, unflagged samples among its 3 x 3 neighbours inside the frame (0 if none); ``count`` is the
    number of non-finite samples, an int32 0-dim tensor on the device. The result is contiguous."""
    b, c, h, w = x.shape
    out = torch.empty((b, c, h, w), dtype=x.dtype, device=x.device)
    count = torch.zeros((), dtype=torch.int32, device=x.device)
    if flag is not None:
        flag = flag.to(torch.uint8).expand(b, 1, h, w)
        sf = (flag.stride(0), flag.stride(2), flag.stride(3))
    else:
        flag, sf = x, (0, 0, 0)
    grid = (b * c, triton.cdiv(h, BLOCK_H), triton.cdiv(w, BLOCK_W))
    _fill_kernel[grid](x, flag, out, count, c, h, w, *x.stride(), *sf, HAS_FLAG=flag is not x, BH=BLOCK_H,
                       BW=BLOCK_W)
    return out, count
