"""The sequence denoisers' settings are checked when they are built: a wrong type or value is one ValueError naming
the argument at construction, not an error at the first or second frame (the history's update reads
``tolerances`` only from the second frame on, ``radius`` / ``eps`` / ``scale`` / ``tile`` reach the fit only at the
first)."""
from __future__ import annotations

import math

import pytest
import torch

from vision.denoise import TemporalDenoiser, TemporalFLR
from vision.denoise.reproject import Tolerances

BAD_TEMPORAL = [
    ("tolerances", "x"),
    ("tolerances", {"depth": 0.1, "normal": 0.9}),
    ("tolerances", Tolerances(depth="x")),
    ("tolerances", Tolerances(depth=math.nan)),
    ("tolerances", Tolerances(depth=-0.1)),
    ("tolerances", Tolerances(depth=True)),
    ("tolerances", Tolerances(normal=1.5)),
    ("tolerances", Tolerances(normal=math.inf)),
    ("radius", "x"), ("radius", 0), ("radius", 2.5), ("radius", True),
    ("eps", "x"), ("eps", -1.0), ("eps", 0.0), ("eps", math.nan), ("eps", math.inf), ("eps", True),
    ("scale", "x"), ("scale", 0), ("scale", 1.5),
    ("tile", "x"), ("tile", 0), ("tile", -1),
    ("max_history", "x"), ("change_sigmas", "x"), ("convention", 3), ("edge_frames", 0), ("shrink_radius", -1),
    ("input_blend", "yes"), ("model", "oidn"),
]


def _one_line(err, name):
    message = str(err.value)
    assert len(message.splitlines()) == 1 and name in message, message


@pytest.mark.parametrize("name, value", BAD_TEMPORAL, ids=[f"{n}={v!r}" for n, v in BAD_TEMPORAL])
def test_temporal_denoiser_refuses_a_bad_setting_when_built(name, value):
    with pytest.raises(ValueError) as err:
        TemporalDenoiser(model="flr", **{name: value}) if name != "model" else TemporalDenoiser(model=value)
    _one_line(err, name)


def test_temporal_denoiser_takes_good_settings_and_runs_two_frames():
    """The checks let through what the denoiser accepts: numbers of either kind, a tensor eps, edge tolerances."""
    den = TemporalDenoiser(model="flr", radius=2, eps=1e-2, scale=1, tile=64, tolerances=Tolerances(0.0, -1.0))
    g = torch.Generator().manual_seed(0)
    for _ in range(2):
        out = den(torch.rand(1, 3, 16, 16, generator=g), albedo=torch.rand(1, 3, 16, 16, generator=g))
        assert out.shape == (1, 3, 16, 16) and bool(torch.isfinite(out).all())
    assert float(den.history_length.max()) == 2.0
    TemporalDenoiser(model="flr", eps=torch.tensor(1e-2), scale=2, radius=4)


BAD_FLR = [("alpha", "x"), ("alpha", 0.0), ("alpha", math.nan), ("alpha", 1.5), ("threshold", "x"),
           ("threshold", 0.0), ("threshold", math.inf), ("radius", "x"), ("radius", -1), ("eps", "x"),
           ("eps", 0.0), ("scale", 0), ("tile", "x")]


@pytest.mark.parametrize("name, value", BAD_FLR, ids=[f"{n}={v!r}" for n, v in BAD_FLR])
def test_temporal_flr_refuses_a_bad_setting_when_built(name, value):
    with pytest.raises(ValueError) as err:
        TemporalFLR(**{name: value})
    _one_line(err, name)
