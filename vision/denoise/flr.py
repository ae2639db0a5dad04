"""Fast Local Regression (FLR): a local linear model of the demodulated radiance on guide buffers.

Per frame (Bauszat et al. 2011; BMFR, Koskela et al. 2019; the FLR core of Salmi, Csefalvay and Imber,
"Fast Local Neural Regression", 2024):

1. subtract the directly visible emission and divide out the albedo (where it is not ~0), so the
   signal left is smooth irradiance that guides can explain (see :func:`.buffers.demodulate`);
2. standardise the guide channels (normal, log-depth, AO, albedo, position; at most 8) per frame, so
   ``eps`` is in units of a guide's standard deviation;
3. in every ``(2r+1)^2`` window fit the signal as an affine function of the guides
   (:func:`vision.kernels.local_linear_fit`, ridge ``eps``), on ``scale x scale`` cells when
   ``scale > 1``, average the coefficients over the overlapping windows and evaluate them at full
   resolution (:func:`vision.kernels.local_linear_apply`);
4. clamp at 0, remodulate by the albedo and add the emission back.

Joint denoising and upsampling: when ``color`` is smaller than the guides by an integer factor u
(colour path-traced at 1/u resolution, guides rasterised at full resolution), the guides, albedo and
emission are area-averaged to the colour's size for the fit (or, when the caller knows where in its u x u
block each colour sample was taken, ``phase``, read at the samples' own pixels) and the coefficients are
applied to the full-resolution guides.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from vision import kernels  # the ops are looked up on the package when called: it loads them on first use
from vision.kernels.runtime import decide, register_path

from . import buffers as B
from .engines import OPENCV, TORCH, opencv_takes

DEFAULT_RADIUS = 8
DEFAULT_EPS = 1e-2


def area_down(x: torch.Tensor | None, u: int) -> torch.Tensor | None:
    """Mean over u x u blocks (the last partial blocks average their real pixels); the registry picks the engine
    (op ``denoise.area_down``: OpenCV's area resize, or ``avg_pool2d``)."""
    if x is None or u == 1:
        return x
    grad = x.requires_grad and torch.is_grad_enabled()
    return decide("denoise.area_down", x, tensors=(x,), u=u, grad=grad).run(x, u)


def _area_down_opencv(x, u):
    """OpenCV's area resize by an integer factor is this block mean, 2-3x faster than avg_pool2d, and it reads HWC
    buffers (channels-last tensors) as they lie."""
    import cv2  # lazy: here only, OpenCV is this registry path's engine, never a call site's choice

    h, w = x.shape[-2:]
    size = (w // u, h // u)
    if _interleaved(x):
        out = torch.empty(x.shape[0], x.shape[1], h // u, w // u, dtype=x.dtype, memory_format=torch.channels_last)
        for i in range(x.shape[0]):
            cv2.resize(x[i].detach().permute(1, 2, 0).numpy(), size, dst=out[i].permute(1, 2, 0).numpy(),
                       interpolation=cv2.INTER_AREA)
        return out
    out = x.new_empty(*x.shape[:2], h // u, w // u)
    planes, dst = x.detach().view(-1, h, w).numpy(), out.view(-1, h // u, w // u).numpy()
    for i in range(planes.shape[0]):
        cv2.resize(planes[i], size, dst=dst[i], interpolation=cv2.INTER_AREA)
    return out


def _area_down_torch(x, u):
    return F.avg_pool2d(x, u, u, ceil_mode=True, count_include_pad=False)


def _interleaved(x: torch.Tensor) -> bool:
    """Whether OpenCV reads ``x`` as HWC images (2-4 channels, channels-last); else as planes."""
    return 1 < x.shape[1] <= 4 and x.is_contiguous(memory_format=torch.channels_last)


def _opencv_areas(tensors, u: int, grad: bool) -> str | None:
    x = tensors[0]
    if reason := opencv_takes(x, grad):
        return reason
    if x.dim() != 4:
        return "takes (B, C, H, W)"
    if x.shape[-2] % u or x.shape[-1] % u:
        return f"partial {u} x {u} blocks at the edges"
    if not (_interleaved(x) or x.is_contiguous()):
        return "needs contiguous planes or 2-4 channels-last channels"
    return None


register_path("denoise.area_down", OPENCV, "torch", 5, supports=_opencv_areas, run=_area_down_opencv)
register_path("denoise.area_down", TORCH, "torch", 0, run=_area_down_torch)


def sample_down(x: torch.Tensor | None, u: int, phase=None) -> torch.Tensor | None:
    """A full-resolution buffer at the colour's sample positions: the u x u block means when ``phase`` is None
    (a sample anywhere in its block), else the pixel ``(u i + dy, u j + dx)`` for ``phase = (dy, dx)``; the
    last partial blocks take their last pixel when the phase falls outside them."""
    if x is None or u == 1 or phase is None:
        return area_down(x, u)
    dy, dx = phase
    h, w = x.shape[-2:]
    if h % u == 0 and w % u == 0:
        return x[..., dy::u, dx::u]
    iy = (torch.arange(-(-h // u), device=x.device) * u + dy).clamp_max(h - 1)
    ix = (torch.arange(-(-w // u), device=x.device) * u + dx).clamp_max(w - 1)
    return x.index_select(-2, iy).index_select(-1, ix)


def check_phase(phase, u: int):
    """``phase`` as a (dy, dx) pair of ints in [0, u), or None; ValueError otherwise."""
    if phase is None:
        return None
    try:
        dy, dx = (int(v) for v in phase)
    except (TypeError, ValueError):
        raise ValueError(f"phase must be a (row, column) pair of ints, got {phase!r}") from None
    if not (0 <= dy < u and 0 <= dx < u):
        raise ValueError(f"phase {(dy, dx)} is outside the {u} x {u} block of full-resolution pixels each colour "
                         f"pixel covers (colour at 1/{u} of the guides' size): each must be in 0..{u - 1}")
    return dy, dx


def fit_radius(radius: int, u: int) -> int:
    return radius if u == 1 else max(1, round(radius / u))


def _solve(feat_lo, target, feat_full, radius, eps, scale, u):
    coeffs = kernels.local_linear_fit(feat_lo, target, radius, eps, scale=scale)
    # coefficient (i, j) belongs at the centre of its cell of (scale * u) full-resolution pixels
    cell = scale * u
    h, w = feat_full.shape[-2:]
    if -(-h // cell) == coeffs.shape[-2] and -(-w // cell) == coeffs.shape[-1]:
        return kernels.local_linear_apply(feat_full, coeffs, scale=cell)
    return kernels.local_linear_apply(feat_full, coeffs)


def flr(color: torch.Tensor, guides: dict[str, torch.Tensor | None], radius: int = DEFAULT_RADIUS,
        eps: float = DEFAULT_EPS, scale: int = 1, stats=None, phase=None) -> torch.Tensor:
    """FLR on (B, C, h, w) colour and full-resolution (B, *, H, W) guides; returns (B, C, H, W).

    ``guides`` holds ``albedo, normal, depth, ao, emission, position`` (any may be None). ``stats``
    (mean, std) standardise the guide features; by default they come from these guides (pass the
    whole frame's when denoising a tile, so tiles match the whole-frame result). ``phase`` (dy, dx): for
    colour at 1/u resolution, where in its u x u block each colour sample was taken (None: anywhere).
    """
    h, w = color.shape[-2:]
    hf, wf = full_size(color, guides)
    u = upsample_factor((h, w), (hf, wf))
    phase = check_phase(phase, u)
    albedo, emission = guides.get("albedo"), guides.get("emission")
    buffers = {k: guides.get(k) for k in B.REGRESSION_ORDER}
    b = color.shape[0]
    grad = torch.is_grad_enabled() and any(v is not None and v.requires_grad for v in buffers.values())
    feat = None if stats is None or grad else B.standardised_features(buffers, stats, b)
    if feat is None:
        raw, _ = B.raw_features(buffers)
        if raw is None:
            # no guides: the local linear model degenerates to the window mean (a box filter)
            raw = torch.zeros(b, 1, hf, wf, dtype=color.dtype, device=color.device)
            stats = None
        mean, std = stats if stats is not None else B.feature_stats(raw)
        if raw.shape[0] == b and not raw.requires_grad:  # the stacked copy is ours: standardised in place
            feat = raw.sub_(mean).div_(std)
        else:
            feat = ((raw - mean) / std).expand(b, -1, -1, -1).contiguous()
    r = fit_radius(radius, u)
    target, factor, add = B.demodulate(color, sample_down(albedo, u, phase), sample_down(emission, u, phase), r)
    # the fit itself runs at the colour's resolution: the features are taken at its samples (or averaged)
    feat_lo = sample_down(feat, u, phase)
    fitted = _solve(feat_lo, target.contiguous(), feat, r, eps, scale, u)
    if u == 1:
        if fitted.requires_grad:
            return fitted.clamp_min(0) * factor + add
        return fitted.clamp_min_(0).mul_(factor).add_(add)  # in place: three fewer frame-sized buffers
    fitted = fitted.clamp_min(0)
    _, factor_full, add_full = B.demodulate(torch.zeros(b, color.shape[1], hf, wf, dtype=color.dtype,
                                                        device=color.device), albedo, emission, 0)
    return fitted * factor_full + add_full


def full_size(color, guides) -> tuple[int, int]:
    sizes = {tuple(t.shape[-2:]) for t in guides.values() if t is not None}
    if len(sizes) > 1:
        names = {k: f"{t.shape[-2]}x{t.shape[-1]}" for k, t in guides.items() if t is not None}
        raise ValueError(f"guide buffers must all have the same size (HxW), got {names}")
    return sizes.pop() if sizes else tuple(color.shape[-2:])


def upsample_factor(small: tuple[int, int], full: tuple[int, int]) -> int:
    if small == full:
        return 1
    for u in range(2, 17):
        if -(-full[0] // u) == small[0] and -(-full[1] // u) == small[1]:
            return u
    raise ValueError(f"color is {small[0]}x{small[1]} (HxW) but the guides are {full[0]}x{full[1]}: for joint "
                     "upsampling the colour must be the guides' size divided by an integer factor (2, 4, ...)")


def flr_tiled(color: torch.Tensor, guides: dict, radius: int, eps: float, scale: int, tile: int,
              phase=None, stats=None) -> torch.Tensor:
    """:func:`flr` over tiles of about ``tile`` full-resolution pixels with an overlap margin that makes
    every tile's interior equal to the whole-frame result, so memory is bounded by the tile size. ``stats``: as
    :func:`flr`'s (default: the whole frame's)."""
    h, w = color.shape[-2:]
    hf, wf = full_size(color, guides)
    u = upsample_factor((h, w), (hf, wf))
    raw, _ = B.raw_features({k: guides.get(k) for k in B.REGRESSION_ORDER})
    if raw is None or (hf <= tile and wf <= tile):
        return flr(color, guides, radius, eps, scale, stats=stats, phase=phase)
    stats = B.feature_stats(raw) if stats is None else stats
    del raw
    # what influences a pixel: emitter fill (r) + fit window (r) + coefficient averaging (r) + one cell
    # each for the cell grid and the bilinear apply, all in colour pixels; aligned to whole cells
    r = fit_radius(radius, u)
    unit = u * scale  # tile origins on the cell grid, in full-resolution pixels
    r_cells = max(1, round(r / scale)) if scale > 1 else r
    margin_lo = r + (2 * r_cells + 2) * scale
    margin = int(math.ceil(margin_lo * u / unit)) * unit
    return run_tiles(color, guides, (hf, wf), u, margin, unit, tile,
                     lambda c, sub: flr(c, sub, radius, eps, scale, stats=stats, phase=phase))


def run_tiles(color: torch.Tensor, guides: dict, full: tuple[int, int], u: int, margin: int, unit: int, tile: int,
              fn) -> torch.Tensor:
    """Apply ``fn(color_tile, guides_tile)`` to overlapping tiles and keep each tile's interior.

    Tiles of about ``tile`` full-resolution pixels start on multiples of ``unit`` and read ``margin``
    more pixels on every side (both in full-resolution pixels; colour may be ``u`` times smaller).
    Returns the (B, C, H, W) result at the guides' full size ``full``."""
    hf, wf = full
    step = max(unit, (tile // unit) * unit)
    out = torch.empty(color.shape[0], color.shape[1], hf, wf, dtype=color.dtype, device=color.device)
    for y0 in range(0, hf, step):
        for x0 in range(0, wf, step):
            y1, x1 = min(y0 + step, hf), min(x0 + step, wf)
            ya, xa = max(0, y0 - margin), max(0, x0 - margin)
            yb, xb = min(hf, y1 + margin), min(wf, x1 + margin)
            sub = {k: (None if v is None else v[..., ya:yb, xa:xb]) for k, v in guides.items()}
            c = color[..., ya // u:-(-yb // u), xa // u:-(-xb // u)]
            res = fn(c, sub)
            out[..., y0:y1, x0:x1] = res[..., y0 - ya:y1 - ya, x0 - xa:x1 - xa]
    return out
