"""Denoising of low-sample path-traced frames with local linear models on guide buffers.

    >>> from vision.denoise import denoise
    >>> out = denoise(color, albedo=albedo, normal=normal, depth=depth, ao=ao, emission=emission)

``model="flnr"``, the default (as for ``vision denoise``), is Fast Local Neural Regression (see
:mod:`vision.denoise.flnr`): a small network enhances the guides before the regression; its trained weights are
bundled (``assets/weights/flnr.safetensors``). ``model="flr"`` is Fast Local Regression on the guides as they
are (see :mod:`vision.denoise.flr`), no weights. As OIDN, colour is linear HDR radiance unless ``hdr=False``
(linear LDR in [0, 1], result clamped into [0, 1]); integer (uint8) and RGBA colour are refused in one line.
Metrics with their conventions are in :mod:`vision.denoise.metrics`.
"""
from __future__ import annotations

from . import buffers, graphs
from .buffers import BufferWarning, find_fields
from .flr import DEFAULT_EPS, DEFAULT_RADIUS, check_phase, flr, flr_tiled
from .flnr import FLNR, load_flnr
from .frame import MODELS, denoise
from .temporal import TemporalDenoiser, TemporalFLR

__all__ = ["denoise", "MODELS", "TemporalDenoiser", "TemporalFLR", "FLNR", "load_flnr", "flr", "flr_tiled", "find_fields", "BufferWarning",
           "DEFAULT_EPS", "DEFAULT_RADIUS", "buffers", "graphs", "check_phase"]

