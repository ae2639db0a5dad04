"""FLNR's antialias blend at many samples per pixel: from 16 spp up it keeps 1 / spp of its learned weight, because
the renderer's guide passes are then means over the pixel rather than one ray through it."""
import math

import numpy as np
import pytest
import torch

from vision.denoise.flnr import FLNR
from vision.denoise.flnr.finish import ANTIALIAS_SPP, antialias_share, scaled_top


@pytest.mark.parametrize("spp, share", [(None, 1.0), (1, 1.0), (4, 1.0), (15.9, 1.0), (16, 1 / 16), (64, 1 / 64),
                                        (1024, 1 / 1024)])
def test_the_share_is_one_below_16_spp_and_one_over_spp_from_there(spp, share):
    assert ANTIALIAS_SPP == 16
    assert antialias_share(spp) == pytest.approx(share, rel=1e-15)


@pytest.mark.parametrize("top", [-3.0, 0.0, 0.7, 4.0])
@pytest.mark.parametrize("share", [1.0, 0.5, 1 / 16, 1 / 1024])
def test_the_scaled_ceiling_is_that_share_of_the_weight(top, share):
    """sigmoid(scaled_top(t, k)) = k sigmoid(t), against the closed form in float64."""
    got = torch.sigmoid(scaled_top(torch.tensor(top, dtype=torch.float64), share)).item()
    assert got == pytest.approx(share / (1 + math.exp(-top)), rel=1e-12)


def _frame(rng, h=24, w=32):
    albedo = np.where(np.arange(w)[None, :, None] < w // 2, 0.8, 0.2) * np.ones((h, 1, 3))  # an albedo edge
    return {"color": torch.from_numpy(rng.gamma(1.0, 0.5, (1, 3, h, w)).astype(np.float32)),
            "albedo": torch.from_numpy(albedo.transpose(2, 0, 1)[None].astype(np.float32)),
            "normal": torch.nn.functional.normalize(torch.from_numpy(rng.normal(size=(1, 3, h, w)).astype(np.float32)),
                                                    dim=1),
            "depth": torch.from_numpy(rng.uniform(1, 5, (1, 1, h, w)).astype(np.float32))}


def test_the_result_moves_by_that_share_of_the_antialias_step(rng):
    """The blend is linear in its weight: with the same inputs, the result at s >= 16 spp lies ``1 - 1 / s`` of the
    way from the result at an unknown count (the whole learned weight) to the one with no weight (spp huge); below
    16 spp it is the unknown count's, bit for bit. (A model without the detail blend, which is not linear in its
    input, and with the ceiling at its largest.)"""
    torch.manual_seed(0)
    model = FLNR(widths=(8, 8, 8, 8), hidden=4, guides=2, radii=(4, 8), antialias=True, detail=False).eval()
    with torch.no_grad():
        model.blend_max.fill_(4.0)
    f = _frame(rng)
    color = f.pop("color")
    with torch.no_grad():
        run = {spp: model(color, dict(f), spp=spp).double() for spp in (None, 8, 64, 1e30)}
    full, none = run[None], run[1e30]
    step = full - none
    assert step.abs().max() > 1e-3  # the edge gives the blend something to do
    assert torch.equal(run[8], run[None].to(run[8].dtype))
    np.testing.assert_allclose(run[64].numpy(), (full - (1 - 1 / 64) * step).numpy(), atol=2e-6)
