"""Render buffers for the denoiser, one name space over the modules that hold each job (``from . import buffers as
B; B.demodulate(...)``):

* :mod:`.layout`: NumPy / torch and HW / HWC / BCHW in and out (``to_bchw``, ``like``), which code a tensor takes
  (``host_reads``, ``cpu_path``), size checks;
* :mod:`.repair`: NaN/Inf repair, firefly suppression, the neighbour fill, range checks, :class:`BufferWarning`;
* :mod:`.signal`: the signal model (``demodulate``, ``emitter_mask``, ``fill_emitters``, ``fill_rows``,
  ``ALBEDO_FLOOR``);
* :mod:`.features`: the regression's guide features (``guide_list``, ``log_depth``, ``raw_features``,
  ``standardised_features``, ``feature_stats``);
* :mod:`vision.data.fields`: the buffer names, channel counts and renderer channel names (``find_fields``,
  ``CHANNELS``, ``INPUTS``, ``REGRESSION_ORDER``), the one table every list of buffers is derived from.
"""
from __future__ import annotations

from vision.data.fields import ALIASES, CHANNELS, INPUTS, REGRESSION_ORDER, find_fields  # noqa: F401

from .features import feature_stats, guide_list, log_depth, raw_features, standardised_features  # noqa: F401
from .layout import check_sizes, cpu_path, dense, host_reads, like, to_bchw  # noqa: F401
from .repair import (ALBEDO_RANGE, BROKEN_RATIO, FIREFLY_RATIO, NORMAL_RANGE, QUANTILE_SAMPLES,  # noqa: F401
                     BufferWarning, bright_regions, check_ranges, fill_from_neighbours, light_level, repair_nonfinite,
                     suppress_fireflies)
from .signal import ALBEDO_FLOOR, demodulate, emitter_mask, fill_emitters, fill_rows  # noqa: F401
