"""vision.denoise: FLR against the bundled 2048-spp references, buffers, channel names and metrics."""
import warnings

import numpy as np
import pytest
import torch

from vision.bundled import asset_path
from vision.data import read_frame
from vision.denoise import BufferWarning, denoise, find_fields
from vision.denoise import metrics as M

GUIDES = ("albedo", "normal", "depth", "ao", "emission")
FRAMES = [(s, f) for s in range(3) for f in range(2)]


@pytest.fixture(scope="module")
def frames():
    return {(s, f): read_frame(asset_path("scenes", f"scene_{s:05d}", f"frame_{f:02d}.exr")) for s, f in FRAMES}


def _guides(d):
    return {k: d[k] for k in GUIDES}


def test_flr_gains_12db_over_1spp_on_bundled_scenes(frames):
    """The FLR target (12 dB over the input) on the bundled scenes (never used for fitting any parameter of a network)."""
    noisy, ours = [], []
    for d in frames.values():
        out = denoise(d["color"], **_guides(d), model="flr")
        noisy.append(M.psnr(d["color"], d["reference"]))
        ours.append(M.psnr(out, d["reference"]))
    gains = np.array(ours) - np.array(noisy)
    assert gains.mean() >= 12.0, gains
    assert gains.min() >= 10.0, gains
    # measured 2026-12-02: noisy 18.55 dB, FLR 33.88 dB on average (tonemap: clamp, gamma 1/2.2)
    assert np.mean(ours) > 33.0


def test_joint_upsampling_from_half_resolution(frames):
    """Colour at 1/2 resolution (same sample budget: the 2x2 mean of the 1-spp frame, i.e. 4 spp per
    low-res pixel), guides at full resolution: at most 1.5 dB below full-resolution FLR."""
    loss = []
    for d in frames.values():
        h, w, _ = d["color"].shape
        half = d["color"].reshape(h // 2, 2, w // 2, 2, 3).mean((1, 3))
        full = denoise(d["color"], **_guides(d), model="flr")
        up = denoise(half, **_guides(d), model="flr")
        assert up.shape == (h, w, 3)
        loss.append(M.psnr(full, d["reference"]) - M.psnr(up, d["reference"]))
    assert np.mean(loss) <= 1.5, loss


@pytest.mark.parametrize("phase", [(0, 0), (1, 0), (1, 1)])
def test_known_phase_reproduces_noise_free_shading_from_a_quarter_of_the_pixels(rng, phase):
    """Analytic oracle: colour = albedo * (a + b n_x) with a random per-pixel albedo texture, shaded only at
    pixel (2i + dy, 2j + dx) of every 2 x 2 block. With the phase known, the fit reads albedo and guides at
    the samples' own pixels, the signal is exactly linear in a guide, and the full-resolution frame comes back
    at every pixel; averaging the guides over the blocks instead (phase unknown) cannot."""
    h, w = 48, 40
    dy, dx = phase
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    nx = np.where(x < 0.55 * w, 0.6 * np.sin(y / 7.0), -0.3 + 0.02 * y)  # smooth, with an edge
    normal = np.dstack([nx, np.zeros_like(nx), np.sqrt(1 - nx * nx)]).astype(np.float32)
    albedo = rng.uniform(0.1, 0.9, (h, w, 3)).astype(np.float32)
    irradiance = np.array([0.8, 0.6, 0.4]) + np.array([0.5, 0.3, -0.2]) * nx[..., None]
    color = (albedo * irradiance).astype(np.float32)
    lo = np.ascontiguousarray(color[dy::2, dx::2])
    known = denoise(lo, albedo=albedo, normal=normal, eps=1e-7, phase=phase, model="flr")
    np.testing.assert_allclose(known, color, rtol=1e-4, atol=2e-5)  # measured: max error 3.4e-6
    unknown = denoise(lo, albedo=albedo, normal=normal, eps=1e-7, model="flr")
    assert np.abs(unknown - color).mean() > 50 * np.abs(known - color).mean()
    # FLNR takes the same samples: phase known beats averaged guides here too
    flnr_known = denoise(lo, albedo=albedo, normal=normal, model="flnr", phase=phase)
    flnr_unknown = denoise(lo, albedo=albedo, normal=normal, model="flnr")
    assert M.psnr(flnr_known, color) > M.psnr(flnr_unknown, color) + 3


def test_known_phase_on_the_bundled_frames(frames):
    """One sample of every 2 x 2 block of the 1-spp frames (top-left): knowing the phase beats averaging the
    guides over the block for FLR and FLNR (measured 2026-12-04 against full-resolution FLR: FLR -3.96 -> -2.93 dB;
    FLNR with the bundled upsampling weights -0.87 -> -0.69 dB), and tiles with a phase match the whole frame."""
    gain = {"flr": [], "flnr": []}
    for d in frames.values():
        lo = np.ascontiguousarray(d["color"][::2, ::2])
        for model in gain:
            known = M.psnr(denoise(lo, **_guides(d), model=model, phase=(0, 0)), d["reference"])
            gain[model].append(known - M.psnr(denoise(lo, **_guides(d), model=model), d["reference"]))
    assert np.mean(gain["flr"]) > 0.8 and np.mean(gain["flnr"]) > 0.1, gain
    d = frames[(2, 0)]
    lo = np.ascontiguousarray(d["color"][1::2, ::2])
    for model, tile in (("flr", 40), ("flnr", 64)):
        whole = denoise(lo, **_guides(d), model=model, phase=(1, 0))
        np.testing.assert_allclose(denoise(lo, **_guides(d), model=model, phase=(1, 0), tile=tile), whole,
                                   rtol=1e-4, atol=1e-4)


def test_flnr_from_a_quarter_of_the_samples_is_within_1_5_db_of_full_resolution_flr(frames):
    """The joint-upsampling target with one 1-spp sample of every 2 x 2 block (phase known), FLNR with the bundled upsampling
    weights (never trained on these scenes): measured 2026-12-04 -0.69 dB at phase (0, 0), -0.64 dB at (1, 1)."""
    loss = []
    for d in frames.values():
        full = M.psnr(denoise(d["color"], **_guides(d), model="flr"), d["reference"])
        for dy, dx in ((0, 0), (1, 1)):
            lo = np.ascontiguousarray(d["color"][dy::2, dx::2])
            loss.append(full - M.psnr(denoise(lo, **_guides(d), model="flnr", phase=(dy, dx)), d["reference"]))
    assert np.mean(loss) <= 1.0, loss


def test_flnr_from_one_sample_in_16_beats_flr_from_the_same_samples_by_3_db(frames):
    """Colour at 1/4 resolution, one 1-spp sample of every 4 x 4 block (phase known): FLNR with the bundled
    1/4-resolution weights (never trained on these scenes) against FLR from the same samples and against
    full-resolution FLR. Measured 2026-12-04: FLNR -3.81 / -3.55 dB and FLR -7.30 / -6.44 dB from
    full-resolution FLR at phases (0, 0) / (2, 1) (the full-resolution FLNR weights: -7.78 / -8.54)."""
    gain, loss = [], []
    for d in frames.values():
        full = M.psnr(denoise(d["color"], **_guides(d), model="flr"), d["reference"])
        for dy, dx in ((0, 0), (2, 1)):
            lo = np.ascontiguousarray(d["color"][dy::4, dx::4])
            net = M.psnr(denoise(lo, **_guides(d), model="flnr", phase=(dy, dx)), d["reference"])
            gain.append(net - M.psnr(denoise(lo, **_guides(d), phase=(dy, dx), model="flr"), d["reference"]))
            loss.append(full - net)
    assert np.mean(gain) >= 3.0 and np.mean(loss) <= 4.0, (gain, loss)


def test_low_resolution_fit_scale_2_stays_close(frames):
    d = frames[(0, 0)]
    full = M.psnr(denoise(d["color"], **_guides(d), model="flr"), d["reference"])
    fast = M.psnr(denoise(d["color"], **_guides(d), scale=2, model="flr"), d["reference"])
    assert fast > M.psnr(d["color"], d["reference"]) + 12 and fast > full - 1.5


@pytest.mark.parametrize("scale", [1, 2])
def test_tiles_match_the_whole_frame(frames, scale):
    d = frames[(2, 0)]  # the scene with a visible lamp: the emitter fill must be tiled exactly too
    whole = denoise(d["color"], **_guides(d), scale=scale, model="flr")
    tiled = denoise(d["color"], **_guides(d), scale=scale, tile=40, model="flr")
    np.testing.assert_allclose(tiled, whole, rtol=1e-5, atol=1e-5)


def test_noise_free_shading_is_reproduced_exactly(rng):
    """colour = albedo * constant irradiance + emission: the demodulated signal is constant, which the
    ridge fit reproduces exactly (slopes 0), so the output is the input whatever the texture (albedo at or
    above the demodulation floor, so that all of it is divided out)."""
    from vision.denoise.buffers import ALBEDO_FLOOR

    h = w = 40
    albedo = rng.uniform(ALBEDO_FLOOR, 0.9, (h, w, 3)).astype(np.float32)
    albedo[5:10, 5:10] = 0.0  # an emitter: no albedo
    emission = np.zeros((h, w, 3), np.float32)
    emission[5:10, 5:10] = [4.0, 3.0, 2.0]
    normal = np.dstack([np.zeros((h, w)), np.zeros((h, w)), np.ones((h, w))]).astype(np.float32)
    normal[:, 20:] = [1.0, 0.0, 0.0]
    irradiance = np.array([0.7, 0.5, 0.3], np.float32)
    color = albedo * irradiance + emission
    out = denoise(color, albedo=albedo, normal=normal, emission=emission, model="flr")
    np.testing.assert_allclose(out, color, rtol=1e-4, atol=1e-5)


def test_flr_with_given_statistics_is_the_float64_fit_on_the_standardised_guides(rng):
    """FLR told the guides' statistics (as the input blend's sharp fit is: each guide standardised in one pass, guides
    of batch 1 serving a batch of two colours) against the float64 reference fit of the demodulated colour on the
    standardised guides, applied and remodulated."""
    from vision.denoise.buffers import ALBEDO_FLOOR, guide_list
    from vision.denoise.flr import flr
    from vision.kernels.local_linear.reference import local_linear_apply_reference, local_linear_fit_reference

    h, w = 24, 30
    guides = {"normal": rng.uniform(-1, 1, (1, 3, h, w)), "albedo": rng.uniform(0.05, 0.9, (1, 3, h, w))}
    color = rng.uniform(0, 2, (2, 3, h, w))
    mean, std = rng.normal(size=(1, 6, 1, 1)), rng.uniform(0.5, 2, (1, 6, 1, 1))
    t32 = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    got = flr(t32(color), {k: t32(v) for k, v in guides.items()}, radius=2, eps=0.1, scale=2,
              stats=(t32(mean), t32(std))).numpy()
    feat = (np.concatenate([guides[k] for k in guide_list(guides)], 1) - mean) / std
    feat = np.broadcast_to(feat, (2, 6, h, w))
    factor = np.maximum(guides["albedo"], ALBEDO_FLOOR)
    coeffs = local_linear_fit_reference(feat, color / factor, 2, 0.1, 2)
    want = np.maximum(local_linear_apply_reference(feat, coeffs, 2, 2), 0) * factor
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("model, worst, mean", [("flr", 0.03, 0.05), ("flnr", 0.3, 0.1)])
def test_albedo_crossing_the_demodulation_floor_keeps_its_shading(model, worst, mean):
    """Noise-free colour = albedo * irradiance on a texture whose red albedo fades in from 0 to 0.3 (Cycles
    writes such dark channels for saturated colours) and whose blue albedo is 0.01 on half the frame: the
    result must stay the input. When channels below the floor were not divided at all, the target jumped by
    1 / floor where the albedo crossed it and the regression smeared the jump over its window: FLR's worst
    error was 0.83 on values below 0.6 (mean relative error 0.55), FLNR's mean relative error 0.48."""
    h, w = 48, 64
    x = np.linspace(0, 1, w, dtype=np.float32)
    albedo = np.empty((h, w, 3), np.float32)
    albedo[..., 0] = 0.3 * x ** 2
    albedo[..., 1] = 0.5
    albedo[..., 2] = np.where(np.arange(h)[:, None] < h // 2, 0.8, 0.01)
    normal = np.zeros((h, w, 3), np.float32)
    normal[..., 2] = 1.0
    color = albedo * np.array([2.0, 1.5, 1.0], np.float32)
    out = denoise(color, albedo=albedo, normal=normal, model=model)
    assert np.abs(out - color).max() < worst
    assert (np.abs(out - color) / (color + 0.01)).mean() < mean


def test_layouts_and_kinds_round_trip(frames):
    d = frames[(1, 0)]
    ref = denoise(d["color"], **_guides(d), model="flr")
    assert isinstance(ref, np.ndarray) and ref.dtype == np.float32 and ref.shape == d["color"].shape
    t = {k: torch.from_numpy(d[k]).permute(2, 0, 1)[None] for k in ("color", *GUIDES)}
    out = denoise(t["color"], **{k: t[k] for k in GUIDES}, model="flr")
    assert isinstance(out, torch.Tensor) and out.shape == t["color"].shape
    np.testing.assert_allclose(out[0].permute(1, 2, 0).numpy(), ref, atol=1e-5)
    # channels-last / non-contiguous input, and a 2-D depth buffer
    g = _guides(d)
    g["depth"] = d["depth"][..., 0]
    np.testing.assert_allclose(denoise(np.asfortranarray(d["color"]), **g, model="flr"), ref, atol=1e-5)


def test_batch_matches_single_frames(frames):
    ds = [frames[(0, 0)], frames[(0, 1)]]
    c = torch.stack([torch.from_numpy(d["color"]).permute(2, 0, 1) for d in ds])
    g = {k: torch.stack([torch.from_numpy(d[k]).permute(2, 0, 1) for d in ds]) for k in GUIDES}
    out = denoise(c, **g, model="flr")
    for i, d in enumerate(ds):
        np.testing.assert_allclose(out[i].permute(1, 2, 0).numpy(), denoise(d["color"], **_guides(d), model="flr"),
                                   atol=1e-5)


@pytest.mark.parametrize("path", ["torch", "torch+numba", "numba"])
def test_demodulate_fills_emitter_pixels_with_the_mean_of_their_emitter_free_neighbours(rng, path):
    """float64 loop oracle of demodulate's target: (colour - emission) / max(albedo, the floor),
    and at pixels that see an emitter the mean of that over the emitter-free pixels of the
    (2r+1)^2 window inside the image; factor 0 where an emitter pixel has no albedo. "torch" and "torch+numba":
    ``demodulate`` with numba off and on (the paths of op denoise.demodulate). "numba": FLNR's one-pass
    version on the HWC buffers as they lie (vision.denoise.flnr.prepare_numba.prepare), which also returns the emitter
    mask and the albedo and emission as planes, here for a batch of the frame and its mirror image (their own
    colour and albedo) sharing one emission buffer (batch 1)."""
    from vision.denoise.buffers import ALBEDO_FLOOR, demodulate
    from vision.kernels import runtime

    h, w, r = 23, 31, 3
    color = rng.uniform(0, 2, (h, w, 3))
    albedo = rng.uniform(0.05, 0.9, (h, w, 3))
    emission = np.zeros((h, w, 3))
    emission[2:9, 0:6] = [3.0, 2.0, 1.0]  # an emitter at the border, wider than the window: some windows have
    albedo[2:9, 0:6] = 0.0                # no emitter-free pixel
    emission[15:17, 20:22, 1] = 0.5       # a glowing surface that keeps its albedo
    light = color - emission
    factor = np.maximum(albedo, ALBEDO_FLOOR)
    base = light / factor
    lit = emission.max(-1) > 0
    want = base.copy()
    for y, x in zip(*np.nonzero(lit)):
        win = np.s_[max(0, y - r):y + r + 1, max(0, x - r):x + r + 1]
        free = ~lit[win]
        want[y, x] = base[win][free].mean(0) if free.any() else 0.0
    want_factor = np.where(lit[..., None] & (albedo < ALBEDO_FLOOR), 0.0, factor)
    t = {k: torch.from_numpy(v.astype(np.float32)).permute(2, 0, 1)[None] for k, v in
         (("color", color), ("albedo", albedo), ("emission", emission))}
    assert (lit.sum(), (~lit).sum()) > (30, 0)
    if path != "numba":
        with runtime.use_numba(path == "torch+numba"):
            target, fac, add = demodulate(t["color"], t["albedo"], t["emission"], r)
        np.testing.assert_allclose(target[0].permute(1, 2, 0).numpy(), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(fac[0].permute(1, 2, 0).numpy(), want_factor, rtol=1e-6)
        np.testing.assert_allclose(add[0].permute(1, 2, 0).numpy(), emission, rtol=1e-6)
        return
    from vision.denoise.flnr.prepare_numba import prepare

    mirror = lambda a: np.ascontiguousarray(a[:, ::-1])  # noqa: E731 - the second image: emitters elsewhere
    hwc = lambda *a: torch.from_numpy(np.stack(a).astype(np.float32)).permute(0, 3, 1, 2)  # noqa: E731
    target, fac, add, mask, alb, em = prepare(hwc(color, mirror(color)), hwc(albedo, mirror(albedo)),
                                              hwc(emission), r, ALBEDO_FLOOR)
    # the second image: its own colour and albedo, the first one's emission
    light2 = mirror(color) - emission
    factor2 = np.maximum(mirror(albedo), ALBEDO_FLOOR)
    base2, want2 = light2 / factor2, (light2 / factor2).copy()
    for y, x in zip(*np.nonzero(lit)):
        win = np.s_[max(0, y - r):y + r + 1, max(0, x - r):x + r + 1]
        free = ~lit[win]
        want2[y, x] = base2[win][free].mean(0) if free.any() else 0.0
    want_factor2 = np.where(lit[..., None] & (mirror(albedo) < ALBEDO_FLOOR), 0.0, factor2)
    for i, (wt, wf, a) in enumerate(((want, want_factor, albedo), (want2, want_factor2, mirror(albedo)))):
        np.testing.assert_allclose(target[i].permute(1, 2, 0).numpy(), wt, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(fac[i].permute(1, 2, 0).numpy(), wf, rtol=1e-6)
        np.testing.assert_allclose(add[i].permute(1, 2, 0).numpy(), emission, rtol=1e-6)
        np.testing.assert_allclose(em[i].permute(1, 2, 0).numpy(), emission, rtol=1e-6)
        np.testing.assert_array_equal(mask[i, 0].numpy(), lit.astype(np.float32))
        np.testing.assert_allclose(alb[i].permute(1, 2, 0).numpy(), a, rtol=1e-6)
        assert alb.is_contiguous() and em.is_contiguous() and target.is_contiguous()
    # no emission, no albedo: the colour as it is, factor 1, nothing to add, no mask
    target, fac, add, mask, alb, em = prepare(hwc(color), None, None, r, ALBEDO_FLOOR)
    np.testing.assert_allclose(target[0].permute(1, 2, 0).numpy(), color, rtol=1e-6)
    assert alb is None and em is None and float(fac.min()) == float(fac.max()) == 1.0
    assert not mask.any() and not add.any()


def test_emitter_pixels_keep_their_emission(frames):
    d = frames[(2, 0)]
    out = denoise(d["color"], **_guides(d), model="flr")
    lamp = (d["emission"].max(-1) > 0) & (d["albedo"].max(-1) < 0.02)
    assert lamp.sum() > 10
    np.testing.assert_array_equal(out[lamp], d["emission"][lamp])


def test_nan_inf_are_repaired_with_a_warning(frames):
    d = frames[(0, 0)]
    color = d["color"].copy()
    color[10, 10] = np.nan
    color[20, 30, 1] = np.inf
    with pytest.warns(BufferWarning, match="4 NaN/Inf"):
        out = denoise(color, **_guides(d), model="flr")
    assert np.isfinite(out).all()
    assert M.psnr(out, d["reference"]) > M.psnr(d["color"], d["reference"]) + 12
    with pytest.raises(ValueError, match="4 NaN or Inf"):
        denoise(color, **_guides(d), repair=False, model="flr")


def test_zero_albedo_and_no_guides_are_safe(rng):
    color = rng.exponential(0.3, (32, 32, 3)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = denoise(color, albedo=np.zeros_like(color), model="flr")
    assert np.isfinite(out).all()
    # without guides FLR is the local linear model with no slope: the window means (valid border)
    # averaged over the windows that cover a pixel, i.e. a 17x17 box mean applied twice
    def box(a, r=8):
        out = np.empty_like(a)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                out[i, j] = a[max(0, i - r):i + r + 1, max(0, j - r):j + r + 1].mean((0, 1))
        return out

    want = box(box(color.astype(np.float64)))  # the fit itself (the input blend has tests of its own)
    np.testing.assert_allclose(denoise(color, model="flr", input_blend=False), want, rtol=1e-4, atol=1e-6)


def _one_off(value, last):
    a = np.full((32, 32, 3), value, np.float32)
    a[-1, -1, -1] = last
    return a


@pytest.mark.parametrize("bad, match", [
    (dict(albedo=np.full((32, 32, 3), 2.0, np.float32)), "albedo must lie in"),
    (dict(normal=np.full((32, 32, 3), 3.0, np.float32)), "normal components"),
    # one value out of range in the last channel of the last pixel (the checks reduce the HWC memory in order)
    (dict(albedo=_one_off(0.5, 1.5)), "albedo must lie in.*1 value"),
    (dict(normal=_one_off(0.0, -1.2)), "normal components.*1 value"),
    (dict(albedo=np.zeros((16, 32, 3), np.float32)), "guides are|same size|color is"),
    (dict(albedo=np.zeros((32, 32, 2), np.float32)), "3 channel"),
    (dict(model="flnr", weights=42), "FLNR weights must be"),
    (dict(model="bm3d"), "unknown model"),
])
def test_clear_errors(bad, match):
    color = np.ones((32, 32, 3), np.float32)
    with pytest.raises(ValueError, match=match):
        denoise(color, **{"model": "flr", **bad})


@pytest.mark.parametrize("size, phase, match", [
    (16, (2, 0), r"phase \(2, 0\) is outside the 2 x 2 block"),
    (16, (0, -1), "outside the 2 x 2 block"),
    (32, (1, 0), "outside the 1 x 1 block"),
    (16, "ab", "pair of ints"),
])
def test_phase_errors(size, phase, match):
    with pytest.raises(ValueError, match=match):
        denoise(np.ones((size, size, 3), np.float32), albedo=np.full((32, 32, 3), 0.5, np.float32), phase=phase,
                model="flr")


def test_upsample_factor_must_be_integer():
    with pytest.raises(ValueError, match="integer factor"):
        denoise(np.ones((20, 20, 3), np.float32), albedo=np.ones((50, 50, 3), np.float32) * 0.5, model="flr")


# --------------------------------------------------------------------------- channel names

def test_find_fields_render_scenes_layout():
    from vision.data import LAYERS

    names = [c for f in LAYERS.values() for c in f[0]]
    found = find_fields(names)
    assert found["color"] == ["R", "G", "B"]
    assert found["albedo"] == ["albedo.R", "albedo.G", "albedo.B"]
    assert found["normal"] == ["normal.X", "normal.Y", "normal.Z"]
    assert found["depth"] == ["depth.Z"] and found["ao"] == ["ao.Y"]
    assert found["emission"][0] == "emission.R" and found["position"][2] == "position.Z"
    assert found["reference"] == ["reference.R", "reference.G", "reference.B"]


def test_find_fields_blender_and_mitsuba():
    blender = ["ViewLayer.Combined.R", "ViewLayer.Combined.G", "ViewLayer.Combined.B", "ViewLayer.Combined.A",
               "ViewLayer.Denoising Albedo.R", "ViewLayer.Denoising Albedo.G", "ViewLayer.Denoising Albedo.B",
               "ViewLayer.Denoising Normal.X", "ViewLayer.Denoising Normal.Y", "ViewLayer.Denoising Normal.Z",
               "ViewLayer.Denoising Depth.Z", "ViewLayer.Emit.R", "ViewLayer.Emit.G", "ViewLayer.Emit.B"]
    f = find_fields(blender)
    assert f["color"] == ["ViewLayer.Combined.R", "ViewLayer.Combined.G", "ViewLayer.Combined.B"]
    assert f["albedo"][0] == "ViewLayer.Denoising Albedo.R"
    assert f["normal"][2] == "ViewLayer.Denoising Normal.Z"
    assert f["depth"] == ["ViewLayer.Denoising Depth.Z"] and f["emission"][1] == "ViewLayer.Emit.G"
    mitsuba = ["R", "G", "B", "albedo.R", "albedo.G", "albedo.B", "nn.X", "nn.Y", "nn.Z", "dd.T"]
    f = find_fields(mitsuba)
    assert f["color"] == ["R", "G", "B"] and f["normal"] == ["nn.X", "nn.Y", "nn.Z"] and f["depth"] == ["dd.T"]
    assert "ao" not in f and "emission" not in f


# --------------------------------------------------------------------------- metrics

def test_psnr_and_relmse_by_hand():
    ref = np.array([[[0.25, 0.25, 0.25], [1.0, 1.0, 1.0]]])  # (1, 2, 3)
    test = np.array([[[0.25, 0.25, 0.25], [4.0, 4.0, 4.0]]])  # 4.0 clamps to 1: tonemapped equal
    assert M.psnr(test, ref) == float("inf")
    test2 = np.array([[[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]])
    mse = (0.25 ** (1 / 2.2)) ** 2 / 2
    assert M.psnr(test2, ref) == pytest.approx(10 * np.log10(1 / mse), abs=1e-9)
    # relMSE on linear values, per pixel and channel: (0-0.25)^2/(0.0625+0.01) and (4-1)^2/(1+0.01)
    assert M.relmse(test, ref) == pytest.approx((0 + 9 / 1.01) / 2)
    assert M.relmse(test2, ref) == pytest.approx((0.0625 / 0.0725) / 2)


def test_ssim_matches_an_independent_float64_implementation(rng):
    from scipy.ndimage import correlate

    x = rng.uniform(0, 1.5, (24, 30, 3))
    y = np.clip(x + rng.normal(0, 0.1, x.shape), 0, None)
    g = np.exp(-((np.arange(11) - 5) ** 2) / (2 * 1.5 ** 2))
    g = np.outer(g, g) / np.outer(g, g).sum()
    tx, ty = M.tonemap(x), M.tonemap(y)
    vals = []
    for c in range(3):
        def filt(a):
            return correlate(a, g, mode="constant")[5:-5, 5:-5]
        mx, my = filt(tx[..., c]), filt(ty[..., c])
        sxx = filt(tx[..., c] ** 2) - mx ** 2
        syy = filt(ty[..., c] ** 2) - my ** 2
        sxy = filt(tx[..., c] * ty[..., c]) - mx * my
        c1, c2 = 0.01 ** 2, 0.03 ** 2
        vals.append(((2 * mx * my + c1) * (2 * sxy + c2) / ((mx ** 2 + my ** 2 + c1) * (sxx + syy + c2))).mean())
    assert M.ssim(y, x) == pytest.approx(float(np.mean(vals)), abs=1e-6)
    assert M.ssim(x, x) == pytest.approx(1.0, abs=1e-9)


def test_flicker_by_hand():
    a = np.zeros((2, 2, 3))
    b = np.full((2, 2, 3), 1.0)
    assert M.flicker([a, b, a]) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        M.flicker([a])


# --------------------------------------------------------------------------- temporal

def test_temporal_halves_flicker_on_the_bundled_static_pairs(frames):
    """Each bundled scene has two 1-spp frames of a static camera (the references are identical, flicker
    0). Carrying the statistics makes the second output the fit of the 2-frame mean: flicker halves
    (longer sequences cut it further; see the report) and PSNR does not drop."""
    from vision.denoise import TemporalFLR

    for s in range(3):
        seq = [frames[(s, f)] for f in range(2)]
        per = [denoise(d["color"], **_guides(d), model="flr") for d in seq]
        tf = TemporalFLR()
        tem = [tf(d["color"], **_guides(d)) for d in seq]
        assert tf.rejected == 0
        assert M.flicker(tem) <= 0.52 * M.flicker(per)
        ref = seq[0]["reference"]
        assert np.mean([M.psnr(o, ref) for o in tem]) >= np.mean([M.psnr(o, ref) for o in per]) - 0.05
        # frame 1 of the temporal run is FLR of the mean of the two noisy frames (a history's noise is not
        # independent per pixel: the temporal filters leave the input blend out)
        mean = (seq[0]["color"] + seq[1]["color"]) / 2
        np.testing.assert_allclose(tem[1], denoise(mean, **_guides(seq[1]), model="flr", input_blend=False),
                                   atol=1e-5)


def test_temporal_with_half_resolution_colour_keeps_a_constant_phase_and_averages_mixed_ones(frames):
    """1/2-resolution colour through TemporalFLR: with the same phase every frame, frame 1 is FLR with that
    phase of the mean of the two low-resolution frames; once a frame of another phase is blended in, the
    history mixes pixels of each block, so the fit averages the guides over the block (phase None)."""
    from vision.denoise import TemporalFLR

    a, b = frames[(1, 0)], frames[(1, 1)]
    lo = [np.ascontiguousarray(d["color"][1::2, ::2]) for d in (a, b)]
    tf = TemporalFLR()
    tf(lo[0], phase=(1, 0), **_guides(a))
    got = tf(lo[1], phase=(1, 0), **_guides(b))
    mean = (lo[0] + lo[1]) / 2
    np.testing.assert_allclose(got, denoise(mean, **_guides(b), phase=(1, 0), model="flr"), atol=1e-5)
    assert np.abs(got - denoise(mean, **_guides(b), model="flr")).max() > 1e-3  # the phase matters
    other = np.ascontiguousarray(b["color"][::2, 1::2])
    got = tf(other, phase=(0, 1), **_guides(b))
    mean3 = mean + (other - mean) / 3
    np.testing.assert_allclose(got, denoise(mean3, **_guides(b), model="flr"), atol=1e-5)
    tf.reset()  # a new history takes the new phase again
    np.testing.assert_allclose(tf(other, phase=(0, 1), **_guides(b)),
                               denoise(other, **_guides(b), phase=(0, 1), model="flr"),
                               atol=1e-5)


def test_temporal_rejects_pixels_whose_guides_change(frames):
    from vision.denoise import TemporalFLR

    a, b = frames[(0, 0)], frames[(0, 1)]
    g1 = _guides(b)
    g1["albedo"] = b["albedo"].copy()
    g1["albedo"][40:60, 30:70] = 0.9 - g1["albedo"][40:60, 30:70] * 0.5  # an object changed colour
    moved = (np.abs(g1["albedo"] - b["albedo"]) > 0.05).any(-1)
    tf = TemporalFLR()
    tf.accumulate(a["color"], **_guides(a))
    hist = tf.accumulate(b["color"], **g1)[0].permute(1, 2, 0).numpy()
    assert tf.rejected == int(moved.sum()) > 0
    np.testing.assert_array_equal(hist[moved], b["color"][moved])  # history restarted: the new frame only
    np.testing.assert_allclose(hist[~moved], ((a["color"] + b["color"]) / 2)[~moved], rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError):
        TemporalFLR(alpha=0)


def test_bench_timing_interleaves_the_methods(frames, capsys):
    """--time-size: one warm-up call per method, then rounds that call every method once in turn (so load
    changes on a shared machine fall on all of them); medians per method; frames enlarged to the size."""
    import argparse

    from vision.pipelines.bench.denoise import time_large

    calls = []
    ms = {name: (lambda d, name=name: calls.append((name, d["color"].shape))) for name in
          ("flr", "flnr", "oidn fast aux", "box")}
    frame = [("s", 0, {k: frames[(0, 0)][k] for k in ("color", "reference", *GUIDES)})]
    res = time_large(argparse.Namespace(time_size="40x24", repeat=3), frame, ms)
    order = ["flr", "flnr", "oidn fast aux"]
    assert [c[0] for c in calls] == order * 4  # warm-up round + 3 timed rounds; "box" is not timed
    assert {c[1] for c in calls} == {(24, 40, 3)}
    assert set(res) == {*order, "temporal flnr"}  # with FLNR, a real temporal FLNR frame is timed beside it
    assert "ratio (ours / oidn fast aux)" in capsys.readouterr().out
    with pytest.raises(ValueError, match="1280x720"):
        time_large(argparse.Namespace(time_size="40by24", repeat=1), frame, ms)


def test_bench_timing_tells_every_method_the_sample_count_of_time_spp(frames, capsys, monkeypatch):
    """--time-spp N: the timed frame says N samples per pixel, to the single-frame methods (as a renderer file's
    count reaches them) and to the temporal denoiser's every call; refused below 1 or without --time-size, in one
    line, before any frame is measured."""
    import argparse

    from vision.pipelines.bench import denoise as bench

    told = []
    ms = {name: (lambda d, name=name: told.append((name, d.get("spp")))) for name in ("flr", "flnr")}

    class Spy:
        def __call__(self, color, motion=None, spp=None, **guides):
            told.append(("temporal flnr", spp))

    monkeypatch.setattr(bench, "TemporalDenoiser", Spy)
    frame = [("s", 0, {k: frames[(0, 0)][k] for k in ("color", "reference", *GUIDES)})]
    bench.time_large(argparse.Namespace(time_size="40x24", repeat=1, time_spp=16), frame, ms)
    assert set(told) == {("flr", 16.0), ("flnr", 16.0), ("temporal flnr", 16.0)} and len(told) == 6
    assert "said to be 16 spp" in capsys.readouterr().out
    with pytest.raises(ValueError, match="add --time-size"):
        bench.run(argparse.Namespace(threads=None, time_spp=4, time_size=None))  # before the frames are loaded
    from vision.pipelines.cli import main

    for bad in ("0", "-3", "x"):  # refused while parsing, in one line naming the option
        with pytest.raises(SystemExit) as done:
            main(["bench", "denoise", "--time-size", "64x64", "--time-spp", bad])
        assert done.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--time-spp" in err[0] and f"got {bad}" in err[0], err


def test_bench_device_timing_runs_every_method_on_resident_tensors(frames, capsys):
    """--cuda-size's timing (run here on the CPU device: the same code without CUDA): FLR at scales 1, 2, 4
    and FLNR on (1, C, H, W) tensors of the frame enlarged to the size, every result finite and on the
    device; without a GPU the flag is refused before any work, and a malformed size names the flag."""
    import argparse

    import torch

    from vision.denoise import denoise
    from vision.pipelines.bench.denoise import time_device
    from vision.pipelines.cli import main

    frame = [("s", 0, {k: frames[(0, 0)][k] for k in ("color", "reference", *GUIDES)})]
    args = argparse.Namespace(cuda_size="48x40", repeat=2, radius=8, eps=1e-2, no_flnr=False, weights=None)
    res = time_device(args, frame, torch.device("cpu"))
    assert set(res) == {"flr", "flr s=2", "flr s=4", "flnr"}
    assert all(isinstance(v, float) and v > 0 for v in res.values()), res
    assert "time per 48x40 frame" in capsys.readouterr().out
    color = torch.from_numpy(frames[(0, 0)]["color"]).permute(2, 0, 1)[None]
    out = denoise(color, **{k: torch.from_numpy(frames[(0, 0)][k]).permute(2, 0, 1)[None] for k in GUIDES},
                  model="flnr")
    assert isinstance(out, torch.Tensor) and out.shape == color.shape and torch.isfinite(out).all()
    if not torch.cuda.is_available():
        assert main(["bench", "denoise", "--no-oidn", "--cuda-size", "1920x1080"]) == 2
        assert "--cuda-size needs a CUDA device" in capsys.readouterr().err
    assert main(["bench", "denoise", "--no-oidn", "--cuda-size", "1920by1080"]) == 2
    assert "--cuda-size must look like 1280x720" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_denoise_rows_and_acceptance_lines(frames, tmp_path, capsys):
    """`vision bench denoise` on the bundled scenes: every row, the acceptance lines, and the joint-upsampling
    rows are FLR on the 2 x 2 means / the top-left samples of the 1-spp frame."""
    import json

    from vision.pipelines.cli import main

    out = tmp_path / "bench.json"
    assert main(["bench", "denoise", "--no-oidn", "--repeat", "1", "--threads", "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "target: FLR - noisy = +15.3" in text and "PASS" in text
    assert "target: full-resolution FLR - joint upsampling" in text
    rows = {(r["scene"], r["method"]): r for r in json.loads(out.read_text())["rows"]}
    for name in ("noisy", "box", "flr", "flr s=2", "flnr", "flr 1/2 mean", "flr 1/2 pick", "flnr 1/2 mean",
                 "flnr 1/2 pick", "flr 1/2 pick+phase", "flnr 1/2 pick+phase", "flr 1/4 pick+phase",
                 "flnr 1/4 pick+phase"):
        assert ("mean", name) in rows, name
    d0, d1 = frames[(0, 0)], frames[(0, 1)]
    want = []
    for d in (d0, d1):
        h, w, _ = d["color"].shape
        half = d["color"].reshape(h // 2, 2, w // 2, 2, 3).mean((1, 3))
        want.append(M.psnr(denoise(half, **_guides(d), position=d.get("position"), model="flr"), d["reference"]))
    assert rows[("scene_00000", "flr 1/2 mean")]["psnr"] == pytest.approx(np.mean(want), abs=1e-3)
    want = [M.psnr(denoise(np.ascontiguousarray(d["color"][::2, ::2]), **_guides(d), position=d.get("position"),
                           phase=(0, 0), model="flr"), d["reference"]) for d in (d0, d1)]
    assert rows[("scene_00000", "flr 1/2 pick+phase")]["psnr"] == pytest.approx(np.mean(want), abs=1e-3)
    want = [M.psnr(denoise(np.ascontiguousarray(d["color"][::4, ::4]), **_guides(d), model="flnr", phase=(0, 0)),
                   d["reference"]) for d in (d0, d1)]
    assert rows[("scene_00000", "flnr 1/4 pick+phase")]["psnr"] == pytest.approx(np.mean(want), abs=1e-3)
    assert "joint upsampling from 1/4-resolution colour" in text
    assert rows[("mean", "flr")]["psnr"] - rows[("mean", "flr 1/2 mean")]["psnr"] <= 1.5


@pytest.mark.parametrize("shape", [(2, 3, 12, 16), (1, 1, 8, 20), (1, 3, 10, 13), (2, 4, 8, 8)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_block_means_against_float64_loops(shape, channels_last):
    """area_down (OpenCV's area resize where it can, avg_pool2d elsewhere): u x u block means, the last partial
    blocks over their real pixels, in either memory layout, and differentiable."""
    from vision.denoise.flr import area_down

    x64 = torch.rand(*shape, dtype=torch.float64)
    x = x64.float().contiguous(memory_format=torch.channels_last) if channels_last else x64.float()
    for u in (2, 4):
        gh, gw = -(-shape[2] // u), -(-shape[3] // u)
        want = torch.empty(shape[0], shape[1], gh, gw, dtype=torch.float64)
        for i in range(gh):
            for j in range(gw):
                want[:, :, i, j] = x64[:, :, i * u:(i + 1) * u, j * u:(j + 1) * u].mean((2, 3))
        got = area_down(x, u)
        assert got.shape == want.shape
        np.testing.assert_allclose(got.double().numpy(), want.numpy(), rtol=0, atol=1e-6)
        leaf = x.clone().requires_grad_(True)
        area_down(leaf, u).sum().backward()
        np.testing.assert_allclose(leaf.grad.double().sum().item(), gh * gw * shape[0] * shape[1], rtol=1e-6)
