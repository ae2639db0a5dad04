"""Triton entry points of the box filter (which runs the sliding kernels of ``sliding.py``), and the tile
machinery the fused guided backward kernels still use.

A program owns one output tile. It loads a (TH, TW) input tile that carries an R-pixel halo on every
side (coordinates mapped by the border mode), removes the tile's mean (so float32 sums stay small),
and forms all (2R+1)^2 window sums of the tile at once: an inclusive scan along each axis
(``tl.cumsum`` over at most 64 centred values) and the difference of two gathered scan values. The
(TH - 2R, TW - 2R) inner part of the result is the output tile. Nothing leaves registers between the
load and the store, and the cost does not depend on R.

Window sizes above ``MAX_RADIUS`` would need tiles too large for registers; those calls run the
PyTorch path on the same device instead.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..border import unpad_adjoint
from .triton_index import src_index, window_count

MODES = {"valid": 0, "reflect": 1, "replicate": 2, "symmetric": 3}
MAX_RADIUS = 16


def tile_shape(r: int, wide: bool = True) -> tuple[int, int]:
    """(TH, TW) for radius r: power-of-2 tiles whose inner part is at least half of the tile."""
    if r > MAX_RADIUS:
        raise ValueError(f"Triton tiles support radius <= {MAX_RADIUS}, got {r}")
    t = 32 if r <= 4 else 64
    return (t, 2 * t if wide and r > 8 else t)


def supported(r: int) -> bool:
    return r <= MAX_RADIUS


@triton.jit
def tile_coords(y0, x0, H, W, MODE: tl.constexpr, TH: tl.constexpr, TW: tl.constexpr):
    """Tile-local (i, j), the mapped flat offset into an (H, W) plane, and the in-image mask."""
    i = tl.arange(0, TH)[:, None]
    j = tl.arange(0, TW)[None, :]
    y = y0 + i + j * 0  # broadcast before comparing: the interpreter needs tensor masks
    x = x0 + j + i * 0
    inside = (y >= 0) & (y < H) & (x >= 0) & (x < W)
    if MODE != 0:
        inside = inside | (y == y)
    offs = src_index(y, H, MODE) * W + src_index(x, W, MODE)
    return i, j, offs, inside


@triton.jit
def tile_program(H, W, R: tl.constexpr, MODE: tl.constexpr, TH: tl.constexpr, TW: tl.constexpr):
    """The tile of this program (plane, tile row, tile column): its plane index, tile-local (i, j), the
    mapped input offsets and in-image mask of the haloed tile, output coordinates and the store mask."""
    pc = tl.program_id(0).to(tl.int64)
    oy0 = tl.program_id(1) * (TH - 2 * R)
    ox0 = tl.program_id(2) * (TW - 2 * R)
    i, j, offs, inside = tile_coords(oy0 - R, ox0 - R, H, W, MODE, TH, TW)
    oy = oy0 + i + j * 0
    ox = ox0 + j + i * 0
    keep = (i < TH - 2 * R) & (j < TW - 2 * R) & (oy < H) & (ox < W)
    return pc, i, j, offs, inside, oy, ox, keep


@triton.jit
def tile_box_sum(t, R: tl.constexpr, TH: tl.constexpr, TW: tl.constexpr):
    """Window sums of a (TH, TW) tile: element (i, j) = sum of t[i:i+2R+1, j:j+2R+1] (valid for the inner part)."""
    i = tl.arange(0, TH)[:, None]
    j = tl.arange(0, TW)[None, :]
    s = tl.cumsum(t, axis=1)
    hi = tl.minimum(j + 2 * R, TW - 1) + i * 0
    lo = tl.maximum(j - 1, 0) + i * 0
    h = tl.gather(s, hi, axis=1) - tl.where(j + i * 0 >= 1, tl.gather(s, lo, axis=1), 0.0)
    s = tl.cumsum(h, axis=0)
    hi = tl.minimum(i + 2 * R, TH - 1) + j * 0
    lo = tl.maximum(i - 1, 0) + j * 0
    return tl.gather(s, hi, axis=0) - tl.where(i + j * 0 >= 1, tl.gather(s, lo, axis=0), 0.0)


@triton.jit
def tile_mean(t, inside):
    """Mean of the in-image values of a tile (the constant every fused kernel subtracts first)."""
    n = tl.sum(tl.sum(inside.to(tl.float32), axis=1), axis=0)
    return tl.sum(tl.sum(tl.where(inside, t, 0.0), axis=1), axis=0) / tl.maximum(n, 1.0)


@triton.jit
def _box_kernel(x_ptr, out_ptr, H, W, HO, WO, OFF, R: tl.constexpr, MODE: tl.constexpr, KIND: tl.constexpr,
                TH: tl.constexpr, TW: tl.constexpr):
    # KIND 0: window mean (HO, WO = H, W). KIND 1: adjoint of the valid mean, sum of x/N (H, W).
    # KIND 2: zero-outside window sums on the grid padded by OFF = R (HO = H + 2R), folded afterwards.
    plane = tl.program_id(0).to(tl.int64)
    oy0 = tl.program_id(1) * (TH - 2 * R)
    ox0 = tl.program_id(2) * (TW - 2 * R)
    i, j, offs, inside = tile_coords(oy0 - OFF - R, ox0 - OFF - R, H, W, MODE, TH, TW)
    t = tl.load(x_ptr + plane * H * W + offs, mask=inside, other=0.0).to(tl.float32)
    if KIND == 1:  # divide by the count of the window centred on this input pixel
        yi = oy0 - R + i + j * 0
        xi = ox0 - R + j + i * 0
        t = t / tl.maximum(window_count(yi, H, R) * window_count(xi, W, R), 1).to(tl.float32)
    c = tile_mean(t, inside)
    s = tile_box_sum(tl.where(inside, t - c, 0.0), R, TH, TW)
    oy = oy0 + i + j * 0
    ox = ox0 + j + i * 0
    if MODE == 0 or KIND != 0:
        n = (window_count(oy - OFF, H, R) * window_count(ox - OFF, W, R)).to(tl.float32)
    else:
        n = (oy * 0 + (2 * R + 1) * (2 * R + 1)).to(tl.float32)
    total = s + c * n
    if KIND == 0:
        total = total / tl.maximum(n, 1.0)
    keep = (i < TH - 2 * R) & (j < TW - 2 * R) & (oy < HO) & (ox < WO)
    tl.store(out_ptr + plane * HO * WO + oy * WO + ox, total, mask=keep)


def _launch(x: torch.Tensor, r: int, border: str, kind: int, off: int) -> torch.Tensor:
    h, w = x.shape[-2:]
    planes = x.reshape(-1, h, w).contiguous().float()
    ho, wo = h + 2 * off, w + 2 * off
    out = torch.empty(planes.shape[0], ho, wo, device=x.device, dtype=torch.float32)
    th, tw = tile_shape(r)
    grid = (planes.shape[0], triton.cdiv(ho, th - 2 * r), triton.cdiv(wo, tw - 2 * r))
    _box_kernel[grid](planes, out, h, w, ho, wo, off, R=r, MODE=MODES[border] if kind == 0 else 0, KIND=kind,
                      TH=th, TW=tw, num_warps=4)
    return out.reshape(*x.shape[:-2], ho, wo)


def box_mean(x: torch.Tensor, r: int, border: str) -> torch.Tensor:
    if r == 0:
        return x.float().clone()
    if not supported(r) or x.dtype == torch.float64:
        from .torch_path import box_mean as torch_box_mean

        return torch_box_mean(x, r, border)
    from . import sliding

    return sliding.launch(x, r, MODES[border], 0, 0)


def box_mean_adjoint(g: torch.Tensor, r: int, border: str) -> torch.Tensor:
    if r == 0:
        return g.float().clone()
    if not supported(r) or g.dtype == torch.float64:
        from .torch_path import box_mean_adjoint as torch_adjoint

        return torch_adjoint(g, r, border)
    from . import sliding

    if border == "valid":
        return sliding.launch(g, r, 0, 1, 0)
    h, w = g.shape[-2:]
    z = sliding.launch(g, r, 0, 2, r)
    return unpad_adjoint(z, h, w, r, border) * (1.0 / (2 * r + 1) ** 2)
