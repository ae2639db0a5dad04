"""FLNR's demodulation on CPU float32 (op ``denoise.flnr.prepare``, :mod:`.prepare`): the denoiser's one numba pass
(:mod:`vision.denoise.signal_numba`), which also writes the albedo and emission as the planes FLNR's later stages
read. Imported only where numba is available (the path's ``run`` loads it).
"""
from __future__ import annotations

import torch

from .. import buffers as B
from ..signal_numba import one_pass


def prepare(color: torch.Tensor, albedo, emission, fill_radius: int, floor: float):
    """FLNR's demodulation on CPU float32 (colour at the guides' resolution) by one numba pass, then
    :func:`~vision.denoise.buffers.fill_emitters` on the rows around emitter pixels: (target, factor, add, mask,
    albedo, emission) with the last two as planes (or None)."""
    target, factor, mask, albedo_p, emission_p, hits = one_pass(color, albedo, emission, floor)
    B.fill_rows(target, factor, albedo_p, mask, hits, fill_radius, floor)
    add = torch.zeros_like(target) if emission_p is None else emission_p  # planar, as the last steps read it
    return target, factor, add, mask, albedo_p, emission_p
