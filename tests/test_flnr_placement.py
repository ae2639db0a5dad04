"""Denoising in another dtype (or on another device) never moves a model someone else holds: nn.Module.to moves
in place, and load_flnr() hands one model per weights file to every caller."""
import copy

import numpy as np
import torch

from vision.denoise import TemporalDenoiser, denoise
from vision.denoise.flnr import load_flnr


def _frame(rng, dtype):
    c = torch.tensor(rng.random((1, 3, 24, 32)), dtype=dtype)
    g = {"albedo": torch.tensor(rng.random((1, 3, 24, 32)), dtype=dtype),
         "normal": torch.tensor(rng.random((1, 3, 24, 32)) * 2 - 1, dtype=dtype),
         "depth": torch.tensor(rng.random((1, 1, 24, 32)) + 1, dtype=dtype)}
    return c, g


def _dtype(model):
    return next(model.parameters()).dtype


def test_a_float64_call_leaves_the_shared_model_in_float32():
    rng = np.random.default_rng(0)
    shared = load_flnr()
    c, g = _frame(rng, torch.float32)
    before = denoise(c, **g, model="flnr")
    c64, g64 = c.double(), {k: v.double() for k, v in g.items()}
    out64 = denoise(c64, **g64, model="flnr")
    assert out64.dtype == torch.float64 and _dtype(shared) == torch.float32 and load_flnr() is shared
    assert torch.equal(denoise(c, **g, model="flnr"), before)
    np.testing.assert_allclose(out64.numpy(), before.double().numpy(), atol=2e-4)


def test_a_callers_model_is_copied_not_moved():
    rng = np.random.default_rng(1)
    mine = copy.deepcopy(load_flnr())
    c, g = _frame(rng, torch.float64)
    denoise(c, **g, model="flnr", weights=mine)
    assert _dtype(mine) == torch.float32
    td = TemporalDenoiser(model="flnr", weights=mine)
    td(c, **g)
    assert _dtype(mine) == torch.float32 and _dtype(load_flnr()) == torch.float32
