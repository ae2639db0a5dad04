"""Weights files and colour that would be read wrongly are refused in one line (a crafted configuration, integer
weights, integer colour for the temporal denoiser), never cast or run: each case failed with a traceback, or ran
silently, before."""
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from vision.bundled import asset_path
from vision.denoise import TemporalDenoiser, denoise, load_flnr
from vision.denoise.flnr import read_metadata

KEY = "vision.flnr.config"


def _crafted(tmp_path, name, config=None, raw=None, state=None):
    src = str(asset_path("weights", "flnr.safetensors"))
    meta = read_metadata(src)
    if config is not None:
        meta[KEY] = json.dumps(config)
    if raw is not None:
        meta[KEY] = raw
    path = tmp_path / f"{name}.safetensors"
    save_file(load_file(src) if state is None else state, str(path), metadata=meta)
    return path


def _config():
    return json.loads(read_metadata(str(asset_path("weights", "flnr.safetensors")))[KEY])


@pytest.mark.parametrize("name, change, message", [
    ("list", lambda c: [1, 2], "the configuration must be a JSON object, got list"),
    ("radii", lambda c: dict(c, radii=4), "config radii must be a list of integers, got 4"),
    ("widths", lambda c: dict(c, widths="16,24"), "config widths must be a list of integers"),
    ("flag", lambda c: dict(c, antialias="yes"), "config antialias must be true or false, got 'yes'"),
])
def test_a_crafted_configuration_is_one_line(tmp_path, name, change, message):
    path = _crafted(tmp_path, name, config=change(_config()))
    with pytest.raises(ValueError, match=message):
        load_flnr(path)


def test_a_configuration_that_is_not_json_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="its FLNR configuration is not JSON"):
        load_flnr(_crafted(tmp_path, "notjson", raw="{not json"))


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64])
def test_weights_that_are_not_floating_point_are_refused_not_cast(tmp_path, dtype):
    state = load_file(str(asset_path("weights", "flnr.safetensors")))
    first = next(iter(state))
    state[first] = state[first].to(dtype)
    with pytest.raises(ValueError, match="FLNR weights hold .* tensors; weights are floating point"):
        load_flnr(_crafted(tmp_path, str(dtype), state=state))


@pytest.mark.parametrize("color, message", [
    (np.zeros((8, 8, 3), np.int32), "color is int32"),
    (np.zeros((8, 8, 3), np.uint8), "color is uint8: pass linear float radiance, or convert with x/255"),
    (np.zeros((8, 8, 4), np.float32), "color has 4 channels"),
])
def test_temporal_denoiser_refuses_integer_and_rgba_colour_as_denoise_does(color, message):
    den = TemporalDenoiser(model="flr")
    with pytest.raises(ValueError, match=message):
        den(color)
    assert den.history_length is None  # nothing entered the history


@pytest.mark.parametrize("bad", [-1, 0, 0.5, float("nan"), float("inf")])
def test_history_below_one_frame_or_not_finite_is_refused_in_one_line(bad):
    rng = np.random.default_rng(0)
    c = rng.random((12, 12, 3), dtype=np.float32)
    history = np.full((12, 12), 2.0, np.float32)
    history[3, 4] = bad
    with pytest.raises(ValueError, match=r"history must be a count of frames per pixel >= 1 \(finite\), got .* at 1 pixel"):
        denoise(c, albedo=c, normal=c, history=history)
