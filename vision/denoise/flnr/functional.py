"""FLNR as functions: :func:`flnr` (a model on the colour's device and dtype, applied) and :func:`flnr_tiled` (the
same over overlapping tiles, with the whole frame's guide statistics).
"""
from __future__ import annotations

import math

import torch

from ..flr import fit_radius, full_size, run_tiles, upsample_factor
from .cells import CELL, frame_stats
from .loading import placed
from .model import FLNR

# receptive field of the default FLNRNet in full-resolution pixels: two 3 x 3 convolutions at each of 1/8,
# 1/16 and 1/32 resolution and one at 1/16 and 1/8 on the way up (8 (2 + 1) + 16 (2 + 1) + 32 * 2 = 136),
# plus the pooling and bilinear taps of every level (about a cell each, 60): about 200, rounded up
NET_MARGIN = 256


def flnr(color: torch.Tensor, guides: dict, model: FLNR, radius: int | None = None, eps=None,
         scale: int | None = None, stats=None, phase=None, spp: float | None = None) -> torch.Tensor:
    """FLNR on (B, 3, h, w) colour and full-resolution guides with ``model`` (see :class:`FLNR`); ``spp``: the
    samples per pixel the guide buffers average (None: unknown), for the antialias blend's weight."""
    model = placed(model, color.device, color.dtype)
    return model(color, guides, radius, eps, scale, stats, phase, spp)


def flnr_tiled(color: torch.Tensor, guides: dict, model: FLNR, radius: int | None, eps, scale: int | None,
               tile: int, phase=None, spp: float | None = None) -> torch.Tensor:
    """:func:`flnr` over tiles of about ``tile`` pixels with an overlap margin covering the regression's reach
    and the network's receptive field; tiles use the whole frame's guide statistics. The network pads
    with replication at tile borders, so the result matches the whole frame to within float rounding where
    the margin covers the receptive field (:data:`NET_MARGIN` pixels) and very nearly elsewhere."""
    h, w = color.shape[-2:]
    hf, wf = full_size(color, guides)
    if hf <= tile and wf <= tile:
        return flnr(color, guides, model, radius, eps, scale, phase=phase, spp=spp)
    u = upsample_factor((h, w), (hf, wf))
    reach = model.radius if radius is None else int(radius)
    scale = model.scale if scale is None else int(scale)
    stats = frame_stats(guides, color, (hf, wf))
    r = fit_radius(reach, u)
    r_cells = max(1, round(r / scale)) if scale > 1 else r
    # regression reach as in flr_tiled, plus the network's receptive field; origins on a common grid
    unit = math.lcm(u * scale, CELL * model.net.multiple * u)
    margin = (r + (2 * r_cells + 2) * scale) * u + NET_MARGIN
    margin = int(math.ceil(margin / unit)) * unit
    return run_tiles(color, guides, (hf, wf), u, margin, unit, tile,
                     lambda c, sub: flnr(c, sub, model, radius, eps, scale, stats=stats, phase=phase, spp=spp))
