"""The denoiser's signal model: the colour split into what the regression fits (albedo and emission out) and back."""
from __future__ import annotations

import numpy as np
import torch

from vision import kernels  # the ops are looked up on the package when called: it loads them on first use
from vision.kernels.runtime import decide, register_path

from .engines import NUMBA, TORCH, numba_takes
from .layout import host_reads

# demodulation divides by max(albedo, ALBEDO_FLOOR) per channel: dividing by ~0 would blow up the noise. The
# clamp is continuous on purpose: not dividing below a floor (factor 1 there) made the target jump by 1 / floor
# between neighbouring pixels of a dark or saturated-colour surface, and the regression smeared the jump (cyan
# and magenta bands on Cycles' blue floors, 2-3 dB on Blender validation scenes). 0.1 was chosen on the Blender
# training set's validation and test splits (0.02, 0.05, 0.1, 0.2), never on the evaluation scenes.
ALBEDO_FLOOR = 0.1


def emitter_mask(emission: torch.Tensor | None, like_t: torch.Tensor) -> torch.Tensor | None:
    """1 where a pixel sees an emitter directly (any emission channel > 0), as (B, 1, H, W)."""
    if emission is None:
        return None
    top = emission[:, :1]
    for c in range(1, emission.shape[1]):  # elementwise maxima: 1.7x faster than amax(1) over HWC-backed channels
        top = torch.maximum(top, emission[:, c:c + 1])
    return (top > 0).to(like_t.dtype)


def demodulate(color: torch.Tensor, albedo: torch.Tensor | None, emission: torch.Tensor | None,
               fill_radius: int, floor: float = ALBEDO_FLOOR, mask: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split ``color`` into what the regression fits and how to put the result back together.

    Returns ``(target, factor, add)`` with ``result = factor * fitted(target) + add``:

    * ``add`` is the directly visible emission (0 without an emission buffer);
    * the target is ``(color - emission) / max(albedo, floor)``, the albedo-demodulated (irradiance-like)
      signal; the clamp keeps the division from amplifying the noise of dark channels, and is continuous
      so that the target does not jump where an albedo crosses the floor;
    * pixels that see an emitter carry the emitter's noise (a 1-spp sample either hits the light or
      not, the emission buffer is the pixel mean), so their target is replaced by the mean target of
      the emitter-free pixels within ``fill_radius``; where such a pixel has no albedo (the emitter
      itself, the sky) the factor is 0, so the result there is the emission buffer exactly.

    ``mask``: :func:`emitter_mask` of ``emission`` when the caller has it already (it is a full pass).

    The registry picks the engine (op ``denoise.demodulate``): on CPU float32 one numba pass over the buffers as
    they lie (:mod:`.signal_numba`, the loop FLNR's own demodulation runs), else the PyTorch formulas.
    """
    if mask is not None:  # the caller's mask: the PyTorch formulas take it as it is
        return _demodulate_torch(color, albedo, emission, fill_radius, floor, mask)
    return decide("denoise.demodulate", color, tensors=(color, albedo, emission)).run(
        color, albedo, emission, fill_radius, floor)


def _demodulate_torch(color: torch.Tensor, albedo: torch.Tensor | None, emission: torch.Tensor | None,
                      fill_radius: int, floor: float = ALBEDO_FLOOR, mask: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The PyTorch formulas of :func:`demodulate`."""
    add = torch.zeros_like(color) if emission is None else emission.expand_as(color)
    # few passes over the frame (on CPU these steps are memory bound): scalar fills, in-place division
    target = color.clone() if emission is None else color - add
    factor = torch.ones_like(color) if albedo is None else albedo.clamp_min(floor).expand_as(color)
    target.div_(factor)
    mask = emitter_mask(emission, color) if mask is None else mask
    # the fill leaves a frame without emitter pixels as it is: skipping it is only worth a host read on CPU
    if mask is not None and (not host_reads(mask) or bool(mask.any())):
        target, factor = fill_emitters(target, factor, albedo, mask, fill_radius, floor)
    return target, factor, add


def _demodulate_numba(color, albedo, emission, fill_radius, floor=ALBEDO_FLOOR):
    """:func:`demodulate` in one numba pass (:mod:`.signal_numba`), the emitter fill on the rows around emitters only
    (1280 x 720 with a lamp in view: 42 against 91 ms of CPU time)."""
    from . import signal_numba  # lazy: numba (optional, about 200 modules) loads when this path first runs

    # the emission as given is the term to add back (as the PyTorch formulas' view of it): no planar copy
    target, factor, mask, _, _, hits = signal_numba.one_pass(color, albedo, emission, floor, planes=False)
    fill_rows(target, factor, albedo, mask, hits, fill_radius, floor)
    return target, factor, (torch.zeros_like(target) if emission is None else emission.expand_as(target))


def fill_rows(target: torch.Tensor, factor: torch.Tensor, albedo: torch.Tensor | None, mask: torch.Tensor, hits,
              fill_radius: int, floor: float = ALBEDO_FLOOR) -> None:
    """:func:`fill_emitters` in place, on the band of rows that holds every emitter pixel of the batch (``hits``
    (B, H): emitter pixels per row, a NumPy array) and ``fill_radius`` rows around it, cut at the frame's true
    border: only those rows change, and each fill reads ``fill_radius`` rows around its pixel, so every window is the
    one the whole frame would give (a light or a sky often covers a few rows of the frame). ``albedo`` (B or 1, C,
    H, W) or None."""
    rows = np.flatnonzero(hits.any(0))
    if not rows.size:
        return
    h = target.shape[-2]
    y0, y1 = max(0, int(rows[0]) - fill_radius), min(h, int(rows[-1]) + 1 + fill_radius)
    band = (slice(None), slice(None), slice(y0, y1))
    t_band, f_band = fill_emitters(target[band], factor[band], None if albedo is None else albedo[band],
                                   mask[band], fill_radius, floor)
    target[band], factor[band] = t_band, f_band


def _numba_demodulates(tensors) -> str | None:
    """None when the numba loop takes the call: buffers of the colour's channels and size, as the loop indexes them
    (the PyTorch formulas broadcast a one-channel albedo), then :func:`~.engines.numba_takes`."""
    color = tensors[0]
    if color.dim() != 4 or any(t is not None and (t.dim() != 4 or t.shape[1:] != color.shape[1:]
                                                  or t.shape[0] not in (1, color.shape[0])) for t in tensors[1:]):
        return "needs albedo and emission of the colour's channels and size"
    return numba_takes(*tensors)


register_path("denoise.demodulate", NUMBA, "torch", 5, supports=_numba_demodulates, run=_demodulate_numba)
register_path("denoise.demodulate", TORCH, "torch", 0,
              run=lambda color, albedo, emission, fill_radius, floor: _demodulate_torch(color, albedo, emission,
                                                                                         fill_radius, floor))


def fill_emitters(target: torch.Tensor, factor: torch.Tensor, albedo: torch.Tensor | None, mask: torch.Tensor,
                  fill_radius: int, floor: float = ALBEDO_FLOOR) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`demodulate`'s last step: at the pixels of ``mask`` (1 = sees an emitter) the target becomes the mean
    target of the emitter-free pixels within ``fill_radius``, and the factor 0 where the albedo is below
    ``floor`` (or missing)."""
    keep = 1 - mask
    # the mean over emitter-free pixels is box(target keep) / box(keep): the window counts cancel, and the
    # box filter costs O(1) per pixel (a 17 x 17 avg_pool2d cost 289 taps)
    num = kernels.box_filter(target * keep, fill_radius)
    den = kernels.box_filter(keep.expand(-1, 1, -1, -1).contiguous(), fill_radius)
    if num.requires_grad:
        fill = (num / den.clamp_min(1e-12)).masked_fill(den <= 0, 0.0)
    else:
        fill = num.div_(den.clamp_min(1e-12)).masked_fill_(den <= 0, 0.0)
    hit = mask > 0
    target = torch.where(hit, fill, target)
    return target, factor.masked_fill(hit & (albedo < floor) if albedo is not None else hit, 0.0)
