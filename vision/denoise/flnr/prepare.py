"""FLNR's signal (op ``denoise.flnr.prepare``): the colour demodulated by albedo and emission and the emitter mask.

The registry picks the engine per call: one numba pass over the buffers as they lie (:mod:`.prepare_numba`) on CPU
float32 with colour at the guides' resolution, else :func:`~vision.denoise.buffers.demodulate` in PyTorch on planar
copies.
"""
from __future__ import annotations

import torch

from vision.kernels.runtime import decide, register_path

from .. import buffers as B
from ..engines import NUMBA, TORCH, numba_takes
from ..flr import sample_down


def prepare(color, albedo, emission, u: int, phase, fill_radius: int):
    """FLNR's signal: ``(color, target, factor, add, mask, albedo, emission)``, the demodulated colour of
    :func:`~vision.denoise.buffers.demodulate` and the emitter mask; the registry picks the engine (op
    ``denoise.flnr.prepare``: one numba pass over the buffers as they lie, or PyTorch on planar copies)."""
    return decide("denoise.flnr.prepare", color, tensors=(color, albedo, emission), u=u).run(
        color, albedo, emission, u, phase, fill_radius)


def _prepare_numba(color, albedo, emission, u, phase, fill_radius):
    from . import prepare_numba  # lazy: numba (optional, about 200 modules) loads when this path first runs

    return (color, *prepare_numba.prepare(color, albedo, emission, fill_radius, B.ALBEDO_FLOOR))


def _prepare_torch(color, albedo, emission, u, phase, fill_radius):
    color = color.contiguous()
    albedo, emission = (None if v is None else v.contiguous() for v in (albedo, emission))
    emission_lo = sample_down(emission, u, phase)
    mask = B.emitter_mask(emission_lo, color)
    target, factor, add = B.demodulate(color, sample_down(albedo, u, phase), emission_lo, fill_radius, mask=mask)
    mask = torch.zeros_like(color[:, :1]) if mask is None else mask.expand(color.shape[0], -1, -1, -1)
    return color, target, factor, add, mask, albedo, emission


register_path("denoise.flnr.prepare", NUMBA, "torch", 5, run=_prepare_numba,
              supports=lambda tensors, u: "colour smaller than the guides" if u != 1 else numba_takes(*tensors))
register_path("denoise.flnr.prepare", TORCH, "torch", 0, run=_prepare_torch)
