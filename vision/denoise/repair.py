"""Sample repair of render buffers: NaN/Inf refilled from their neighbours, fireflies dropped, range checks."""
from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F

from vision.kernels.runtime import decide, register_path

from .layout import dense, host_reads

# tolerances of the range checks: renderers write albedo slightly above 1 and normals slightly off unit
ALBEDO_RANGE = (-1e-3, 1.05)
NORMAL_RANGE = 1.05


class BufferWarning(UserWarning):
    """A buffer held NaN/Inf samples that were repaired, or was otherwise adjusted."""


def repair_nonfinite(x: torch.Tensor, name: str, warn: bool = True) -> tuple[torch.Tensor, int | torch.Tensor]:
    """Replace NaN/Inf samples by the mean of the finite samples in their 3x3 neighbourhood (0 if none).

    Returns the repaired tensor and the number of repaired values; warns (:class:`BufferWarning`)
    with that count when there were any. Where :func:`host_reads` forbids reading ``x`` (CUDA, the Triton
    path) the repair runs unconditionally on the device (the same values: finite samples are kept as
    they are), nothing warns and the count is a 0-dim tensor (reading it is a host synchronisation).
    """
    reads = host_reads(x)
    if reads and bool(torch.isfinite(dense(x).sum(dtype=torch.float32))):  # one reduction in the common case
        return x, 0
    fixed, count = decide("denoise.repair", x, dtype=x.dtype, grad=_needs_grad(x), reads=reads).run(x, reads)
    if warn and reads and count:
        warnings.warn(f"{name}: {count} NaN/Inf value(s) repaired with the mean of their finite neighbours",
                      BufferWarning, stacklevel=3)
    return fixed, count


def _fill():
    """The Triton refill, :func:`.fill_triton.fill`."""
    from .fill_triton import fill  # lazy: Triton kernels read TRITON_INTERPRET as they load; CPU frames go without

    return fill


def _repair_triton(x: torch.Tensor, reads: bool):
    return _fill()(x)


def _repair_torch(x: torch.Tensor, reads: bool):
    bad = ~torch.isfinite(x)
    count = bad.sum()
    if reads:
        count = int(count)
        if not count:
            return x, 0
    return fill_from_neighbours(x, bad), count


def _needs_grad(x: torch.Tensor) -> bool:
    return x.requires_grad and torch.is_grad_enabled()


def _fill_takes(dtype: torch.dtype, grad: bool, **_) -> str | None:
    """Whether :mod:`.fill_triton` may do the repair (on the Triton backend): a float32/16 buffer, nothing to
    differentiate."""
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return "takes float32, float16 or bfloat16"
    return "autograd is on" if grad else None


def fill_from_neighbours(x: torch.Tensor, bad: torch.Tensor) -> torch.Tensor:
    """``x`` with its ``bad`` samples (a boolean mask broadcastable to ``x``) replaced by the mean of the good
    ones among their 3x3 neighbours inside the frame (0 if none); good samples are returned as they are. The
    registry picks the engine (op ``denoise.fill``: per-pixel flags in one Triton pass, else PyTorch)."""
    return decide("denoise.fill", x, dtype=x.dtype, grad=_needs_grad(x), flags=bad.shape[1]).run(x, bad)


def _fill_triton(x: torch.Tensor, bad: torch.Tensor) -> torch.Tensor:
    return _fill()(x, bad)[0]  # per-pixel flags: one pass (x is finite here)


def _fill_torch(x: torch.Tensor, bad: torch.Tensor) -> torch.Tensor:
    bad = bad.expand_as(x) if bad.shape[1] != x.shape[1] else bad
    good = (~bad).to(x.dtype)
    clean = torch.where(bad, torch.zeros_like(x), x)
    num = F.avg_pool2d(clean, 3, 1, 1, count_include_pad=False)
    den = F.avg_pool2d(good, 3, 1, 1, count_include_pad=False)
    fill = torch.where(den > 0, num / den.clamp_min(1e-12), torch.zeros_like(x))
    return torch.where(bad, fill, x)


# on the Triton backend, without a host read (VISION_CHECKS=on reads the count): one pass finds and fills
register_path("denoise.repair", "triton", "triton", 10, run=_repair_triton,
              supports=lambda reads, **call: "reads the count on the host" if reads else _fill_takes(**call))
register_path("denoise.repair", "torch", "torch", 0, run=_repair_torch)
register_path("denoise.fill", "triton", "triton", 10, run=_fill_triton,
              supports=lambda flags, **call: "takes per-pixel flags" if flags != 1 else _fill_takes(**call))
register_path("denoise.fill", "torch", "torch", 0, run=_fill_torch)


# Fireflies: a colour sample whose light (colour minus emission, largest channel) exceeds FIREFLY_RATIO times the 0.9
# quantile of the frame's positive light while at most one of its 8 neighbours does (the bundled 1-spp frames peak
# at ~50x the quantile), or BROKEN_RATIO times it whatever its neighbours (a float overflow, a ~0 pdf), is dropped and
# refilled from its neighbours, as renderer denoisers reject fireflies: one window's least squares fit would spread
# it over the whole window as a bright square. Bright regions (a light seen without an emission buffer, the sun, up
# to BROKEN_RATIO) stay whole: their pixels have bright neighbours.
FIREFLY_RATIO = 1e3
BROKEN_RATIO = 1e8
QUANTILE_SAMPLES = 1 << 16  # the quantile reads a strided subsample of at most about this many pixels


def light_level(light: torch.Tensor, quantile: float = 0.9) -> torch.Tensor:
    """The ``quantile`` (default 0.9) of the positive values of ``light`` (B, 1, H, W) per image, (B, 1, 1, 1), on
    the device (from a strided subsample); +inf where the subsample has no positive value."""
    b, _, h, w = light.shape
    step = max(1, math.ceil(math.sqrt(h * w / QUANTILE_SAMPLES)))
    sub = light[..., ::step, ::step].reshape(b, -1).float()
    sub = torch.where(sub > 0, sub, torch.full_like(sub, float("nan")))  # the quantile of the lit pixels only
    q = torch.nanquantile(sub, quantile, dim=1)
    return torch.where(torch.isnan(q), torch.full_like(q, float("inf")), q).view(b, 1, 1, 1).to(light.dtype)


def suppress_fireflies(color: torch.Tensor, emission: torch.Tensor | None = None, name: str = "color"
                       ) -> torch.Tensor:
    """Negative colour samples clamped to 0; samples whose light (colour minus ``emission``, at the colour's size,
    largest channel) exceeds :data:`FIREFLY_RATIO` times :func:`light_level` with at most one such neighbour, or
    :data:`BROKEN_RATIO` times it, replaced by the mean of their other 3x3 neighbours. Branch-free on the device;
    where :func:`host_reads` allows (CPU) the steps with nothing to do are skipped (the same values) and one
    :class:`BufferWarning` gives the counts."""
    reads = host_reads(color)
    neg = 0
    if reads:
        # one reduction without a mask in the common case (no negative sample), the count only when needed
        neg = int((color < 0).sum()) if float(dense(color).detach().amin()) < 0 else 0
        x = color.clamp_min(0) if neg else color
    else:
        x = color.clamp_min(0)
    light = x if emission is None else x - emission
    top = light.amax(1, keepdim=True)
    level = light_level(top)
    bright = (top > FIREFLY_RATIO * level).to(top.dtype)
    hits = 0
    # on CPU nothing bright (the broken samples are bright too) means nothing to replace: skip the 3x3 count
    if not reads or bool(bright.any()):
        lit = F.avg_pool2d(bright, 3, 1, 1, count_include_pad=True) * 9  # bright pixels in the 3x3 block, centre incl.
        hot = ((bright > 0) & (lit < 2.5)) | (top > BROKEN_RATIO * level)
        if reads:
            hits = int(hot.sum())
            if hits:
                x = fill_from_neighbours(x, hot)
        else:
            x = fill_from_neighbours(x, hot)
    if neg or hits:
        parts = ([f"{neg} negative value(s) clamped to 0"] if neg else []) + \
            ([f"{hits} extreme sample(s) (isolated light above {FIREFLY_RATIO:g} x the frame's 0.9 quantile, or any "
              f"above {BROKEN_RATIO:g} x) replaced by the mean of their neighbours"] if hits else [])
        warnings.warn(f"{name}: {'; '.join(parts)}", BufferWarning, stacklevel=3)
    return x


def bright_regions(color: torch.Tensor, name: str = "color") -> torch.Tensor:
    """The emission of a frame that has no emission buffer, where it shows: ``color`` (B, C, H, W) at the pixels
    whose light (largest channel) exceeds :data:`FIREFLY_RATIO` times :func:`light_level` with at least two such
    neighbours (a lamp, the sun: what :func:`suppress_fireflies` leaves whole), 0 elsewhere. The level here is the
    median of the frame's positive light, not its 0.9 quantile: a lamp may fill a tenth of the frame.

    Taken as emission, such a region is put back as it is and left out of the regression, whose window moments
    would otherwise carry values 1e3 to 1e20 times the rest of the frame and, in float32, lose the light of every
    window they pass through (a lamp at 1e4 darkened pixels 20 rows away by a quarter). One
    :class:`BufferWarning` with the count where :func:`host_reads` allows (CPU). Branch-free on the device."""
    top = color.amax(1, keepdim=True)
    bright = (top > FIREFLY_RATIO * light_level(top, 0.5)).to(top.dtype)
    lit = F.avg_pool2d(bright, 3, 1, 1, count_include_pad=True) * 9
    region = (bright > 0) & (lit > 2.5)
    if host_reads(color):
        n = int(region.sum())
        if n:
            warnings.warn(f"{name}: {n} pixel(s) in regions of light above {FIREFLY_RATIO:g} x the frame's median "
                          "taken as emitters (no emission buffer given): kept as they are and left out of "
                          "the fit", BufferWarning, stacklevel=3)
    return torch.where(region, color, torch.zeros_like(color))


def check_ranges(albedo: torch.Tensor | None, normal: torch.Tensor | None) -> None:
    """Raise a ValueError when albedo leaves [0, 1] or normal components leave [-1, 1] (with tolerances)."""
    if albedo is not None:
        lo, hi = ALBEDO_RANGE
        amin, amax = torch.aminmax(dense(albedo))
        n = int(((albedo < lo) | (albedo > hi)).sum()) if float(amin) < lo or float(amax) > hi else 0
        if n:
            raise ValueError(f"albedo must lie in [0, 1]: {n} value(s) outside (min {float(albedo.min()):.4g}, "
                             f"max {float(albedo.max()):.4g}); is this a colour or emission pass passed as albedo?"
                             + (" A renderer's albedo above 1 (Cycles counts emitters and glossy tint in): map it "
                                "with vision.data.render_layers.renderer_albedo(albedo, emission), as vision "
                                "denoise does" if float(amax) > hi else ""))
    if normal is not None:
        nmin, nmax = torch.aminmax(dense(normal))
        n = int((normal.abs() > NORMAL_RANGE).sum()) if max(-float(nmin), float(nmax)) > NORMAL_RANGE else 0
        if n:
            raise ValueError(f"normal components must lie in [-1, 1]: {n} value(s) outside (max |n| "
                             f"{float(normal.abs().max()):.4g}); pass unit normals, not 0-1 encoded or position data")
