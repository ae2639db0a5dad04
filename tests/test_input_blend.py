"""The input blend and the sample count: the denoiser converges to its input as the noise falls, never loses to its
own fit, and reads the samples per pixel from each kind of header (references: the noise-free image, the input,
the math of independent noise)."""
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from vision.bundled import asset_path
from vision.data import read_frame, write_frame
from vision.data.exr import read_exr_header
from vision.data.render_layers import samples_per_pixel
from vision.denoise import denoise
from vision.denoise import metrics as M
from vision.denoise.input_blend import noise_energy, towards_input
from vision.pipelines.cli import main



def _blender_file(name):
    return Path(__file__).parent / "data" / "blender" / name


def _scene(size=96):
    """A frame whose irradiance has a shadowed half with shading detail the guides do not explain (the fit's
    bias), a flat albedo and a flat normal: (clean radiance, albedo, normal), HWC float32."""
    yy, xx = np.mgrid[0:size, 0:size] / 64.0
    clean = np.stack([0.5 + 0.3 * np.sin(6 * xx) * (yy > 0.5)] * 3, -1).astype(np.float32)
    albedo = np.full((size, size, 3), 0.7, np.float32)
    normal = np.zeros((size, size, 3), np.float32)
    normal[..., 2] = 1
    return clean, albedo, normal


def _mse(x, y):
    return float(((np.asarray(x, np.float64) - y) ** 2).mean())


def test_noise_energy_is_the_variance_of_independent_noise_and_zero_on_ramps_and_straight_edges():
    g = torch.Generator().manual_seed(0)
    noise = 0.3 * torch.randn(1, 3, 256, 256, generator=g, dtype=torch.float64)
    assert abs(float(noise_energy(noise).mean()) / 0.09 - 1) < 0.03
    y, x = torch.meshgrid(torch.arange(40.0), torch.arange(40.0), indexing="ij")
    smooth = (0.02 * x - 0.01 * y + 0.7 * (x >= 17) + 0.3 * (y >= 9)).to(torch.float64).expand(1, 2, 40, 40)
    assert float(noise_energy(smooth).abs().max()) < 1e-12  # float64 rounding (the noise above: 0.09)
    assert torch.equal(noise_energy(torch.ones(1, 3, 2, 9)), torch.zeros(1, 3, 2, 9))  # under 3 x 3: no estimate


@pytest.mark.parametrize("model", ["flr", "flnr"])
def test_converges_to_the_input_as_the_noise_falls(model):
    clean, albedo, normal = _scene()
    rng = np.random.default_rng(0)
    errors = []
    for sigma in (0.3, 0.1, 0.03, 0.01, 0.001, 0.0):
        noisy = np.clip(clean + sigma * rng.standard_normal(clean.shape), 0, None).astype(np.float32)
        fit = denoise(noisy, albedo=albedo, normal=normal, model=model, input_blend=False)
        out = denoise(noisy, albedo=albedo, normal=normal, model=model)
        errors.append(_mse(out, clean))
        assert _mse(out, clean) <= _mse(fit, clean) * 1.01 + 1e-9, sigma  # never worse than the fit
        if sigma <= 0.03:  # the noise is below the fit's bias here: at or better than the input
            assert _mse(out, clean) <= _mse(noisy, clean) * 1.01 + 1e-9, sigma
        if sigma == 0.0:
            assert np.abs(out - noisy).max() < 1e-3  # the input itself, to the fit's float32 rounding
    assert errors == sorted(errors, reverse=True)  # less noise in, less error out


@pytest.mark.parametrize("model", ["flr", "flnr"])
def test_one_spp_frames_keep_the_fit(model):
    """At 1 spp the frame's residual is nearly all noise: the blend leaves the fit as it was (bundled scenes)."""
    for s in range(3):
        d = read_frame(asset_path("scenes", f"scene_{s:05d}", "frame_00.exr"))
        g = {k: d[k] for k in ("albedo", "normal", "depth", "ao", "emission")}
        fit = denoise(d["color"], **g, model=model, input_blend=False)
        out = denoise(d["color"], **g, model=model)
        assert M.psnr(out, d["reference"]) >= M.psnr(fit, d["reference"]) - 0.01
        assert np.array_equal(denoise(d["color"], **g, model=model, spp=1), fit)  # known 1 spp: skipped


def test_extremes_stay_finite():
    clean, albedo, normal = _scene(48)
    t = {k: torch.from_numpy(v).permute(2, 0, 1)[None] for k, v in dict(color=clean, albedo=albedo).items()}
    fit = torch.full_like(t["color"], 0.4)
    for bad in (1e30, 3e38):
        c = t["color"].clone()
        c[..., 30, 30] = bad
        assert torch.isfinite(towards_input(fit, c, t["albedo"])).all()
        assert torch.isfinite(towards_input(fit, c, t["albedo"], sharp=fit)).all()
        c = clean.copy()
        c[30, 30] = bad  # through denoise(): replaced as a broken sample, the neighbours untouched
        out = denoise(c, albedo=albedo, normal=normal, model="flr")
        assert np.isfinite(out).all() and out[25:36, 25:36].max() < 2


def test_half_precision_input_matches_float32():
    clean, albedo, normal = _scene(48)
    noisy = np.clip(clean + 0.01 * np.random.default_rng(2).standard_normal(clean.shape), 0, None)
    full = denoise(noisy.astype(np.float32), albedo=albedo, normal=normal, model="flr")
    half = denoise(torch.from_numpy(noisy.astype(np.float16)).permute(2, 0, 1)[None], model="flr",
                   albedo=torch.from_numpy(albedo).permute(2, 0, 1)[None].half(),
                   normal=torch.from_numpy(normal).permute(2, 0, 1)[None].half())
    assert half.dtype == torch.float16
    assert np.abs(half[0].permute(1, 2, 0).float().numpy() - full).max() < 5e-3


# --------------------------------------------------------------------------- the sample count

def test_samples_per_pixel_from_each_kind_of_header():
    assert samples_per_pixel(read_exr_header(_blender_file("cycles_float.exr")), "ViewLayer") == \
        (2.0, "EXR header cycles.ViewLayer.samples")
    two = read_exr_header(_blender_file("cycles_half_2layers.exr"))
    assert samples_per_pixel(two, "Layer2")[0] == 2.0
    assert samples_per_pixel({"cycles.ViewLayer.samples": "256"}, "")[0] == 256.0  # a file without layers
    assert samples_per_pixel({"vision.spp": 1}, "") == (1.0, "EXR header vision.spp")
    assert samples_per_pixel({}, "ViewLayer") == (None, "not in the EXR header")
    for bad in ("abc", "0", "nan", "-4"):
        value, why = samples_per_pixel({"cycles.ViewLayer.samples": bad}, "ViewLayer")
        assert value is None and "cycles.ViewLayer.samples" in why


def test_spp_tells_flnr_the_noise_level_and_bad_values_are_refused():
    d = read_frame(asset_path("scenes", "scene_00000", "frame_00.exr"))
    g = {k: d[k] for k in ("albedo", "normal", "depth", "ao", "emission")}
    h, w = d["color"].shape[:2]
    told = denoise(d["color"], **g, spp=8, input_blend=False)  # the fit: the network is told 8 samples
    assert np.array_equal(told, denoise(d["color"], **g, history=np.full((h, w), 8.0), input_blend=False))
    assert not np.array_equal(told, denoise(d["color"], **g, input_blend=False))
    assert np.array_equal(denoise(d["color"], **g, history=np.full((h, w), 2.0), spp=4, input_blend=False),
                          told)  # 2 frames x 4
    # from 16 spp up the antialias blend also weighs less (tests/test_flnr_antialias_spp.py): not a history's effect
    assert not np.array_equal(denoise(d["color"], **g, spp=16, input_blend=False),
                              denoise(d["color"], **g, history=np.full((h, w), 16.0), input_blend=False))
    assert np.array_equal(denoise(d["color"], **g, model="flr", spp=64, input_blend=False),
                          denoise(d["color"], **g, model="flr", input_blend=False))  # FLR's fit is not told
    for bad in (0, 0.5, -1, float("nan"), float("inf"), "64", True):
        with pytest.raises(ValueError, match="^spp must be"):
            denoise(d["color"], **g, spp=bad)
    with pytest.raises(ValueError, match="^input_blend must be True or False"):
        denoise(d["color"], **g, input_blend="yes")


def test_command_says_where_the_sample_count_came_from(tmp_path, capsys):
    frames = tmp_path / "frames"
    frames.mkdir()
    shutil.copy(_blender_file("cycles_float.exr"), frames / "cycles.exr")
    assert main(["denoise", str(frames / "cycles.exr"), "-o", str(tmp_path / "a"), "-q"]) == 0
    assert "samples per pixel: 2 (EXR header cycles.ViewLayer.samples)" in capsys.readouterr().out
    assert main(["denoise", str(frames / "cycles.exr"), "-o", str(tmp_path / "b"), "-q", "--spp", "64",
                 "--no-input-blend"]) == 0
    assert "samples per pixel: 64 (--spp)" in capsys.readouterr().out
    d = read_frame(asset_path("scenes", "scene_00000", "frame_00.exr"))
    write_frame(frames / "bare.exr", {k: d[k] for k in ("color", "albedo", "normal")})
    assert main(["denoise", str(frames / "bare.exr"), "-o", str(tmp_path / "c"), "-q", "--model", "flr"]) == 0
    assert "samples per pixel: unknown (not in the EXR header)" in capsys.readouterr().out
    for value in ("0", "0.5", "nan", "inf"):  # refused while the command line is parsed: argparse's exit 2
        with pytest.raises(SystemExit) as stop:
            main(["denoise", str(frames / "bare.exr"), "-o", str(tmp_path / "d"), "-q", "--spp", value])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert "--spp" in err and len(err.strip().splitlines()) == 1


def test_a_batch_is_blended_image_by_image():
    """The frame's share of bias is per image: a batch gives each image what it gets alone."""
    clean, albedo, normal = _scene(48)
    rng = np.random.default_rng(3)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, np.float32)).permute(2, 0, 1)[None]  # noqa: E731
    colors = [np.clip(clean + s * rng.standard_normal(clean.shape), 0, None) for s in (0.3, 0.003)]
    both = denoise(torch.cat([t(c) for c in colors]), albedo=t(albedo).expand(2, -1, -1, -1),
                   normal=t(normal).expand(2, -1, -1, -1), model="flr")
    for i, c in enumerate(colors):
        assert torch.equal(both[i:i + 1], denoise(t(c), albedo=t(albedo), normal=t(normal), model="flr"))


def test_temporal_results_converge_to_each_frame_as_its_noise_falls():
    """--temporal moves its result towards each frame's own colour: with little noise left in the frames, the result
    is at or better than a frame, and far better than the history's fit alone; bad ``spp`` is refused by name."""
    from vision.denoise import TemporalDenoiser

    clean, albedo, normal = _scene(64)
    rng = np.random.default_rng(4)
    frames = [np.clip(clean + 0.003 * rng.standard_normal(clean.shape), 0, None).astype(np.float32) for _ in range(3)]
    on, off = TemporalDenoiser(model="flr"), TemporalDenoiser(model="flr", input_blend=False)
    for f in frames:
        a = on(f, albedo=albedo, normal=normal, spp=256)
        b = off(f, albedo=albedo, normal=normal, spp=256)
    assert _mse(a, clean) <= _mse(frames[-1], clean) * 1.01
    assert _mse(a, clean) < 0.1 * _mse(b, clean)
    with pytest.raises(ValueError, match="^spp must be"):
        on(frames[0], albedo=albedo, normal=normal, spp="many")
    with pytest.raises(ValueError, match="^input_blend must be True or False"):
        TemporalDenoiser(model="flr", input_blend=1)


def test_the_blend_is_differentiable_in_the_fit_with_the_factors_held():
    """Gradients flow through the result into the fit (the factors are data estimates, held constant): d out' / d
    out = (1 - s)(1 - w) elementwise, checked against finite differences in float64."""
    g = torch.Generator().manual_seed(5)
    y = torch.rand(1, 3, 12, 12, generator=g, dtype=torch.float64)
    sharp = y + 0.05 * torch.randn(1, 3, 12, 12, generator=g, dtype=torch.float64)
    for with_sharp in (None, sharp):
        fit = (0.5 + 0.1 * torch.rand(1, 3, 12, 12, generator=g, dtype=torch.float64)).requires_grad_()
        out = towards_input(fit, y, sharp=with_sharp)
        assert out.requires_grad
        grad, = torch.autograd.grad(out.sum(), fit)
        eps = 1e-6
        with torch.no_grad():  # the same factors: a step small enough not to move them measurably
            bump = fit.clone()
            bump[0, 1, 5, 5] += eps
            numeric = (towards_input(bump, y, sharp=with_sharp) - towards_input(fit, y, sharp=with_sharp))[0, 1, 5, 5]
        assert abs(float(grad[0, 1, 5, 5]) - float(numeric) / eps) < 1e-3


def _regional_reference(v, energy, cell=4, cells=5):
    """The region's noise level written out with loops in float64: per cell of cell x cell pixels (the frame
    extended by repeating its last row and column) the mean log ratio, the median over the cells x cells cells
    around (repeating the border cells), its exponential bilinear between cell centres (half-pixel centres,
    clamped), times the energy."""
    tiny = torch.finfo(torch.float32).tiny
    nv, en = v.double()[0, 0], energy.double()[0, 0]
    h, w = nv.shape
    ch, cw = -(-h // cell), -(-w // cell)
    grid = torch.empty(ch, cw, dtype=torch.float64)
    for i in range(ch):
        for j in range(cw):
            ys = [min(y, h - 1) for y in range(i * cell, i * cell + cell)]
            xs = [min(x, w - 1) for x in range(j * cell, j * cell + cell)]
            grid[i, j] = torch.log((nv[ys][:, xs] + tiny) / (en[ys][:, xs] + tiny)).mean()
    k = cells // 2
    med = torch.empty_like(grid)
    for i in range(ch):
        for j in range(cw):
            vals = [grid[min(max(a, 0), ch - 1), min(max(b, 0), cw - 1)]
                    for a in range(i - k, i + k + 1) for b in range(j - k, j + k + 1)]
            med[i, j] = torch.stack(vals).sort().values[(len(vals) - 1) // 2].exp()  # the lower median
    out = torch.empty(h, w, dtype=torch.float64)
    for y in range(h):
        for x in range(w):
            fy = min(max((y + 0.5) / cell - 0.5, 0.0), ch - 1.0)
            fx = min(max((x + 0.5) / cell - 0.5, 0.0), cw - 1.0)
            y0, x0 = int(fy), int(fx)
            y1, x1 = min(y0 + 1, ch - 1), min(x0 + 1, cw - 1)
            ay, ax = fy - y0, fx - x0
            out[y, x] = ((1 - ay) * ((1 - ax) * med[y0, x0] + ax * med[y0, x1])
                         + ay * ((1 - ax) * med[y1, x0] + ax * med[y1, x1]))
    return out * (en + tiny)


def test_regional_noise_matches_loops_in_float64():
    from vision.denoise.input_blend import regional_noise
    from vision.kernels import runtime

    g = torch.Generator().manual_seed(5)
    for h, w in ((23, 30), (4, 4), (1, 7)):
        v = torch.rand(1, 1, h, w, generator=g) ** 4 * 10
        energy = torch.rand(1, 1, h, w, generator=g) + 0.1
        want = _regional_reference(v, energy).numpy()
        for numba in (True, False):  # each path the registry may run (tests/test_registry_denoise.py: which)
            with runtime.use_numba(numba):
                np.testing.assert_allclose(regional_noise(v, energy)[0, 0].double().numpy(), want, rtol=2e-5)


def test_numba_cell_median_is_the_lower_median_with_ties_infinities_and_nans():
    """The numba loop counts, for all cells of a row at once, how many of the window's values lie below each; a row
    whose window holds a NaN is sorted cell by cell (NaN as the largest). Both against Python's sort."""
    pytest.importorskip("numba")
    from vision.denoise import input_blend_cpu as cpu

    g = torch.Generator().manual_seed(7)
    for h, w in ((9, 13), (1, 1), (2, 6)):
        grid = (torch.randint(0, 4, (2, 1, h, w), generator=g) / 2).float()  # few distinct values: many ties
        grid[0, 0, 0, 0] = -math.inf
        grid[1, 0, -1, -1] = math.inf
        if h > 2:
            grid[1, 0, 4, 2:5] = math.nan  # rows 2-6 of image 1 take the sorting path
        out = torch.empty_like(grid)
        cpu.cell_median_planes(grid, 5, out)
        for b in range(2):
            for y in range(h):
                for x in range(w):
                    vals = [float(grid[b, 0, min(max(y + dy, 0), h - 1), min(max(x + dx, 0), w - 1)])
                            for dy in range(-2, 3) for dx in range(-2, 3)]
                    vals.sort(key=lambda v: (math.isnan(v), v))
                    want, got = vals[12], float(out[b, 0, y, x])
                    assert got == want or (math.isnan(got) and math.isnan(want)), (b, y, x, got, want)


def test_lone_peaks_match_loops_in_float64():
    from vision.denoise.input_blend import ISOLATION, lone_peaks
    from vision.kernels import runtime

    g = torch.Generator().manual_seed(6)
    for h, w in ((17, 23), (1, 5), (3, 3)):
        ne = torch.rand(1, 1, h, w, generator=g) ** 6
        ne[0, 0, h // 2, w // 2] = 5.0  # one certain peak
        x = ne.double()[0, 0]
        lone = torch.zeros_like(x)
        for y in range(h):
            for c in range(w):
                around = max(float(x[min(max(y + a, 0), h - 1), min(max(c + b, 0), w - 1)])
                             for a in (-1, 0, 1) for b in (-1, 0, 1) if (a, b) != (0, 0))
                lone[y, c] = x[y, c] if x[y, c] >= ISOLATION * around else 0
        want = torch.zeros_like(x)
        for y in range(h):
            for c in range(w):
                want[y, c] = lone[max(y - 3, 0):y + 4, max(c - 3, 0):c + 4].max()
        for numba in (True, False):
            with runtime.use_numba(numba):
                np.testing.assert_allclose(lone_peaks(ne, 3)[0, 0].double().numpy(), want.numpy(), rtol=1e-6)


def test_capped_noise_keeps_reflected_texture_at_high_sample_counts():
    """A patch of fine texture no guide explains (a reflection), on a smooth shaded wall, rendered with little
    noise: the uncapped estimate takes the texture for noise and smooths it; told the sample count, the texture is
    kept and the result is about as close to the truth as the input."""
    g = torch.Generator().manual_seed(11)
    h = w = 64
    yy, xx = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32),
                            indexing="ij")
    truth = (0.3 + 0.2 * xx / w).expand(1, 3, h, w).clone()
    patch = (slice(24, 40), slice(24, 40))
    truth[..., patch[0], patch[1]] += 0.3 * torch.sin(1.5 * xx + 1.1 * yy)[patch]
    noisy = truth + 0.01 * torch.randn(1, 3, h, w, generator=g)
    albedo = torch.full((1, 3, h, w), 0.8)
    normal = torch.zeros(1, 3, h, w)
    normal[:, 2] = 1
    def err(x):
        return float((x - truth).square().mean())
    blind = denoise(noisy, albedo=albedo, normal=normal, model="flr")
    told = denoise(noisy, albedo=albedo, normal=normal, model="flr", spp=256)
    # within 5 % of the input (a few texture pixels stand alone like fireflies), far from the smoothed fit
    assert err(told) <= 1.05 * err(noisy) and err(told) < 0.8 * err(blind)


def test_capped_noise_still_takes_fireflies_for_noise():
    """Single bright samples (fireflies) on a flat wall at 16 spp: however far above their region's noise they
    stand, they are noise, and the blend must not bring them back."""
    g = torch.Generator().manual_seed(12)
    h = w = 48
    truth = torch.full((1, 3, h, w), 0.3)
    noisy = truth + 0.01 * torch.randn(1, 3, h, w, generator=g)
    spots = [(8, 9), (20, 30), (33, 14), (40, 41)]
    for y, x in spots:
        noisy[..., y, x] += 3.0
    albedo = torch.full((1, 3, h, w), 0.8)
    normal = torch.zeros(1, 3, h, w)
    normal[:, 2] = 1
    told = denoise(noisy, albedo=albedo, normal=normal, model="flr", spp=16)
    for y, x in spots:
        assert float(told[0, :, y, x].max()) < 0.3 + 0.1, (y, x)


def test_a_lone_bright_pixel_is_a_glint_at_many_samples_and_a_firefly_at_few():
    """The same one-pixel spots on a flat wall: told 16 spp they are fireflies (removed, the test above); told 1024 spp
    a lone pixel that bright is far likelier a glint (one sample's share of a pixel falls as 1 / spp, a highlight's
    does not), so the blend gives the input back there, within 10 % of its excess."""
    g = torch.Generator().manual_seed(12)
    h = w = 48
    truth = torch.full((1, 3, h, w), 0.3)
    spots = [(8, 9), (20, 30), (33, 14), (40, 41)]
    for y, x in spots:
        truth[..., y, x] += 3.0
    noisy = truth + 0.01 * torch.randn(1, 3, h, w, generator=g)
    albedo = torch.full((1, 3, h, w), 0.8)
    normal = torch.zeros(1, 3, h, w)
    normal[:, 2] = 1
    few = denoise(noisy, albedo=albedo, normal=normal, model="flr", spp=16)
    many = denoise(noisy, albedo=albedo, normal=normal, model="flr", spp=1024)
    for y, x in spots:
        assert float(few[0, :, y, x].max()) < 0.3 + 0.1, (y, x)
        assert float(many[0, :, y, x].min()) > 0.3 + 0.9 * 3.0, (y, x, many[0, :, y, x])
    # and elsewhere the wall is as smooth as at 16 spp: only the lone pixels changed their reading
    away = torch.ones(h, w, dtype=torch.bool)
    for y, x in spots:
        away[max(0, y - 1):y + 2, max(0, x - 1):x + 2] = False
    assert float((many - truth)[..., away].square().mean()) < 1.5 * float((few - truth)[..., away].square().mean())


@pytest.mark.parametrize("spp, share", [(None, 1.0), (1, 1.0), (16, 1.0), (64, 0.25), (1024, 1 / 64)])
def test_lone_share_is_whole_to_16_spp_then_falls_as_one_over_spp(spp, share):
    from vision.denoise.input_blend import lone_share

    assert lone_share(spp) == pytest.approx(share)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), True, "1"])
def test_towards_input_refuses_a_lone_share_outside_0_1(bad):
    y = torch.rand(1, 3, 8, 8)
    with pytest.raises(ValueError, match="lone must be a number in"):
        towards_input(y, y, sharp=y, cap=2.0, lone=bad)


def _blend_reference(out, color, albedo, sharp, radius=None, cap=None, after_step=False, lone=1.0):
    """The blend written out in float64 from its definition (module docstring of input_blend): window sums by
    explicit shifts, the noise energy as the 3 x 3 second difference k k^T / 6 at interior pixels, copied outwards."""
    from vision.denoise.input_blend import DEFAULT_RADIUS

    radius = DEFAULT_RADIUS if radius is None else radius
    o, y, f = out.double(), color.double(), albedo.double().clamp_min(0.1)
    sh = sharp.double()
    r, d = y - o, sh - o
    rough = (y - sh) / f
    k = torch.tensor([1.0, -2.0, 1.0], dtype=torch.float64)
    kern = (k[:, None] * k[None, :] / 6).expand(3, 1, 3, 3)
    if min(rough.shape[-2:]) < 3:  # no interior pixel: no noise measured
        ne = torch.zeros_like(rough[:, :1])
    else:
        inner = torch.nn.functional.conv2d(rough, kern, groups=3) * f[..., 1:-1, 1:-1]
        ne = torch.nn.functional.pad(inner.square(), (1, 1, 1, 1), mode="replicate").sum(1, keepdim=True)
    planes = torch.cat([(r * r).sum(1, keepdim=True), ne, (r * d).sum(1, keepdim=True), (d * d).sum(1, keepdim=True)], 1)
    n = 2 * radius + 1
    padded = torch.nn.functional.pad(planes, (radius,) * 4)
    ones = torch.nn.functional.pad(torch.ones_like(planes[:, :1]), (radius,) * 4)
    box = torch.nn.functional.avg_pool2d(padded, n, 1) / torch.nn.functional.avg_pool2d(ones, n, 1)
    from vision.denoise.input_blend import SHARP_LEVERAGE, frame_share

    e, v = box[:, :1], box[:, 1:2]
    if cap is not None:
        level = torch.nn.functional.avg_pool2d(torch.nn.functional.pad((o * o).sum(1, keepdim=True), (radius,) * 4),
                                               n, 1) / torch.nn.functional.avg_pool2d(ones, n, 1)
        # a sample that stands 2x above each of its 8 neighbours' noise energy is a firefly: its share of the
        # window (its own pixel holds 16/36 of its energy) stays in the estimate
        h, w = ne.shape[-2:]
        padded_ne = torch.nn.functional.pad(ne, (1, 1, 1, 1), mode="replicate")
        around = torch.stack([padded_ne[..., a:a + h, b:b + w] for a in range(3) for b in range(3) if (a, b) != (1, 1)
                              ]).amax(0)
        alone = torch.where(ne >= 3.0 * around, ne, torch.zeros_like(ne))
        peak = torch.nn.functional.max_pool2d(alone, n, 1, radius) * 36 / 16 / (n * n) * lone
        v = torch.minimum(v, cap * torch.stack([_regional_reference(v[i:i + 1].float(), level[i:i + 1].float())
                                                for i in range(len(v))])[:, None] + peak)
    trust = frame_share(e.float(), v.float()).double().sqrt()
    w = ((box[:, 2:3] - SHARP_LEVERAGE * v) / box[:, 3:4]).nan_to_num(0, 0, 0).clamp(0, 1) * trust
    if after_step:  # the factor of each window's m = out + w d (w the window's own): the window mean of (y - m)^2,
        # summed over channels and taken pixel by pixel over the window (clipped at the frame's edge), and the noise
        # (1 - h w) v the step leaves in it
        b, _, hh, ww = o.shape
        e = torch.zeros_like(v)
        for i in range(hh):
            for j in range(ww):
                rows, cols = slice(max(0, i - radius), i + radius + 1), slice(max(0, j - radius), j + radius + 1)
                wc = w[:, :, i, j][..., None, None]
                e[:, 0, i, j] = ((r[..., rows, cols] - wc * d[..., rows, cols]) ** 2).sum(1).mean((-2, -1))
        v = (1 - SHARP_LEVERAGE * w) * v
    s = (1 - v / (e * trust)).nan_to_num(0, 0, 0).clamp(0, 1)
    return o + s * r + w * (1 - s) * d


@pytest.mark.parametrize("size", [(29, 41), (3, 17), (2, 9), (70, 23)])
def test_fused_cpu_blend_matches_the_float64_definition(size):
    """The CPU path (two numba passes around the box filter; 70 rows: the window sums' pass in bands of rows) against
    the blend written out in float64."""
    from vision.kernels.runtime import explain, use_numba

    g = torch.Generator().manual_seed(3)
    h, w = size
    truth = torch.rand(2, 3, h, w, generator=g)
    color = truth + 0.2 * torch.randn(2, 3, h, w, generator=g)
    out = truth + 0.05 * torch.randn(2, 3, h, w, generator=g)
    sharp = color + 0.1 * torch.randn(2, 3, h, w, generator=g)
    sharp[0, :, : h // 2] = color[0, :, : h // 2]  # noise-free windows: the input wins there
    albedo = torch.rand(2, 3, h, w, generator=g)
    assert "torch+numba" in str(explain("denoise.input_blend", out, tensors=(out, color, sharp, albedo)))
    for cap, after_step, lone in ((None, False, 1.0), (2.0, False, 1.0), (None, True, 1.0), (8.0, True, 1.0),
                                  (2.0, False, 0.0625)):
        want = _blend_reference(out, color, albedo, sharp, cap=cap, after_step=after_step, lone=lone)
        got = towards_input(out, color, albedo, sharp, cap=cap, after_step=after_step, lone=lone)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
        with use_numba(False):  # the PyTorch path
            got = towards_input(out, color, albedo, sharp, cap=cap, after_step=after_step, lone=lone)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("spp, radius", [(None, 3), (1.5, 3), (4, 3), (16, 2), (256, 2)])
def test_the_window_shrinks_once_the_noise_is_known_to_be_light(spp, radius, monkeypatch):
    """From 16 spp up the blend's windows are 5 x 5 (the bias it corrects is local); below, and with an unknown
    sample count, 7 x 7."""
    import vision.denoise.input_blend as IB

    seen = []
    real = IB.towards_input
    monkeypatch.setattr(IB, "towards_input", lambda *a, **k: seen.append(k["radius"]) or real(*a, **k))
    clean, albedo, normal = _scene(32)
    denoise(clean, albedo=albedo, normal=normal, model="flr", spp=spp)
    assert seen == [radius]



@pytest.mark.parametrize("model, spp, after", [("flnr", None, False), ("flnr", 4, True), ("flnr", 16, False),
                                               ("flr", 4, False), ("flr", None, False)])
def test_flnr_measures_its_factor_after_the_step_below_16_spp(model, spp, after, monkeypatch):
    """Below 16 spp (the count known) FLNR's factor towards the input is measured after its step towards the sharp
    fit; FLR's, and any frame's from 16 spp up or of unknown count, on the fit's own residual."""
    import vision.denoise.input_blend as IB

    seen = []
    real = IB.towards_input
    monkeypatch.setattr(IB, "towards_input", lambda *a, **k: seen.append(k["after_step"]) or real(*a, **k))
    clean, albedo, normal = _scene(32)
    denoise(clean, albedo=albedo, normal=normal, model=model, spp=spp)
    assert seen == [after]
