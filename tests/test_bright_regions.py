"""A lamp seen without an emission buffer: the region is taken as emission (put back as it is, left out of the
fit), so pixels far from it come out as they would without it, at 1e4 (a lamp) and at 1e8 and 1e20 (values whose
squares leave float32)."""
import warnings

import numpy as np
import pytest

from vision.denoise import BufferWarning, denoise


def _frame():
    rng = np.random.default_rng(0)
    h = w = 64
    albedo = np.full((h, w, 3), 0.5, np.float32)
    normal = np.zeros((h, w, 3), np.float32)
    normal[..., 2] = 1
    color = (0.38 * rng.exponential(1.0, (h, w, 1)) * np.ones((1, 1, 3))).astype(np.float32)
    return color, albedo, normal


@pytest.mark.parametrize("model, radius", [("flr", 8), ("flnr", 8)])
@pytest.mark.parametrize("value", [1e4, 1e8, 1e20])
def test_a_bright_region_without_emission_leaves_distant_pixels_alone(model, radius, value):
    color, albedo, normal = _frame()
    lamp = color.copy()
    lamp[10:19] = value  # nine rows of a lamp
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = denoise(lamp, albedo=albedo, normal=normal, model=model)
    want = denoise(color, albedo=albedo, normal=normal, model=model)
    far = slice(18 + 2 * radius + 1, None)
    change = np.abs(got[far] - want[far]).max() / want[far].mean()
    assert change < 0.02, change
    np.testing.assert_allclose(got[10:19], lamp[10:19], rtol=1e-3)  # the lamp itself as it was given
    said = [str(c.message) for c in caught if issubclass(c.category, BufferWarning)]
    assert any("576 pixel(s) in regions of light above 1000 x the frame's median taken as emitters" in m
               for m in said), said


def test_an_isolated_firefly_is_still_removed_not_kept_as_a_lamp():
    color, albedo, normal = _frame()
    color[30, 30] = 1e4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = denoise(color, albedo=albedo, normal=normal, model="flr")
    assert got[30, 30].max() < 5
