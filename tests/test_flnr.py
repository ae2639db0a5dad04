"""FLNR: the guide network, end-to-end gradients, weights files, the bundled weights, vision train-denoiser."""
import json
import math
import shutil

import numpy as np
import pytest
import torch

from vision.bundled import asset_path
from vision.data import read_frame
from vision.denoise import FLNR, denoise, load_flnr
from vision.denoise import metrics as M
from vision.denoise.flnr import FLNRNet, parameter_count, read_metadata

GUIDES = ("albedo", "normal", "depth", "ao", "emission")


@pytest.fixture(scope="module")
def frame():
    return read_frame(asset_path("scenes", "scene_00000", "frame_00.exr"))


def _random_model(seed=0, **kw):
    """An FLNR with a random (non-zero) output layer, so the network's code and radius logits matter."""
    torch.manual_seed(seed)
    m = FLNR(**kw)
    for p in m.net.out.parameters():
        torch.nn.init.normal_(p, std=0.05)
    return m.eval()


def test_parameter_count_is_small():
    assert parameter_count(FLNR()) < 1_000_000
    assert parameter_count(load_flnr()) < 200_000


@pytest.mark.parametrize("grad", [True, False], ids=["autograd", "banded"])
@pytest.mark.parametrize("radius", [8, None])
def test_linear_head_is_the_regression_on_standardised_guides(frame, radius, grad):
    """float64 oracle of the whole chain for a linear guide head (hidden=0) with the network's code and
    radius logits zeroed: guides = W (f - mean) / std + b with f = (normal, log depth, AO, albedo) and mean,
    std over the 4 x 4 cell means; the albedo-demodulated colour fitted on them by the reference fit at
    scale 4 (radius 8, or radii 4, 8, 16 blended with equal weights), applied, clamped at 0, remodulated."""
    from vision.denoise.buffers import ALBEDO_FLOOR
    from vision.kernels.local_linear.reference import local_linear_apply_reference, local_linear_fit_reference

    torch.manual_seed(5)
    model = FLNR(hidden=0, guides=3).double().eval()
    with torch.no_grad():
        model.net.out.weight.zero_()
        model.net.out.bias.zero_()
        model.log_eps.copy_(torch.log(torch.tensor([1e-2, 3e-2, 1e-1])))
    crop = {k: np.asarray(frame[k][32:96, 40:104], np.float64) for k in ("color", "albedo", "normal", "depth", "ao")}
    chw = {k: v.transpose(2, 0, 1)[None] for k, v in crop.items()}
    bufs = {k: torch.from_numpy(chw[k]) for k in ("albedo", "normal", "depth", "ao")}
    with torch.set_grad_enabled(grad):  # without a gradient, on CPU, the guide head runs band by band
        got = model(torch.from_numpy(chw["color"]), bufs, radius=radius).detach().numpy()

    f = np.concatenate([chw["normal"], np.log(chw["depth"]), chw["ao"], chw["albedo"]], 1)  # all depths > 0 here
    cells = f.reshape(1, 8, 16, 4, 16, 4).mean((3, 5))
    mean, std = cells.mean((2, 3), keepdims=True), np.maximum(cells.std((2, 3), keepdims=True), 1e-3)
    W, b = model.head_in.weight.detach().numpy(), model.head_in.bias.detach().numpy()
    g = np.einsum("qc,bchw->bqhw", W, (f - mean) / std) + b[None, :, None, None]
    factor = np.maximum(chw["albedo"], ALBEDO_FLOOR)
    eps = np.array([1e-2, 3e-2, 1e-1])
    radii = [8] if radius else [4, 8, 16]
    coeffs = sum(local_linear_fit_reference(g, chw["color"] / factor, r, eps, 4) for r in radii) / len(radii)
    want = np.maximum(local_linear_apply_reference(g, coeffs, 4, 4), 0) * factor
    assert np.abs(want).max() > 0.1
    # float64 throughout (the fit amplifies its rounding to ~1e-9); the float32 model differs by ~3e-7
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-8 * np.abs(want).max())


@pytest.fixture(params=["numba", "torch"])
def cpu_loops(request, monkeypatch):
    """FLNR's no-autograd CPU stages once with the numba loops (vision.denoise.flnr.*_numba), once without."""
    from vision.kernels.runtime import jit

    monkeypatch.setenv("VISION_NUMBA", "1" if request.param == "numba" else "0")
    assert jit.enabled(torch.zeros(1)) == (request.param == "numba")  # numba is a dependency: no silent skip
    return request.param


@pytest.mark.parametrize("hidden,antialias", [(16, False), (0, False), (16, True), (0, True)])
@pytest.mark.parametrize("hw", [(64, 96), (37, 50)])
def test_banded_guide_head_matches_a_float64_oracle(frame, hw, hidden, antialias, cpu_loops):
    """The guide head without autograd (numba rows, or torch bands with strided lerps for the code's
    upsampling) against float64: g = W2 leaky(up(code) + W1 (f - mean) / std + b1) + b2 with up =
    F.interpolate (bilinear, x4), for a batch of two frames (each standardised by its own statistics),
    HWC-layout buffers, AO missing."""
    from vision.denoise.flnr import cells as FL

    model = _random_model(3, hidden=hidden, guides=4, antialias=antialias)
    h, w = hw
    crops = [{k: np.ascontiguousarray(frame[k][y:y + h, x:x + w]) for k in GUIDES + ("color",)}
             for y, x in ((0, 0), (40, 20))]
    bufs = {k: torch.from_numpy(np.stack([c[k] for c in crops])).permute(0, 3, 1, 2) for k in GUIDES}
    bufs["ao"] = None
    color = torch.from_numpy(np.stack([c["color"] for c in crops])).permute(0, 3, 1, 2).contiguous()
    target = color.clone()
    mask = torch.zeros_like(color[:, :1])
    buffers = FL.guide_buffers(bufs, color)
    with torch.no_grad():
        assert model._whole_frame(target) is None
        g, _ = model.learned_guides(buffers, target, mask)
    # the oracle, in float64 from the same network code
    m64 = _random_model(3, hidden=hidden, guides=4, antialias=antialias).double()
    b64 = [None if v is None else v.double() for v in buffers]
    cells = FL.cell_guides(b64, color.double(), (h, w))
    mean, std = FL.guide_stats(cells)
    x = FL.cell_inputs((cells - mean) / std, target.double(), mask.double())
    with torch.no_grad():
        out = m64.net(x)
    width = m64.head_in.out_features
    up = torch.nn.functional.interpolate(out[:, :width], scale_factor=4, mode="bilinear")[..., :h, :w]
    f = torch.cat([torch.zeros_like(b64[0][:, :1]) if v is None else v.expand(2, -1, -1, -1) for v in b64[:2]]
                  + [torch.zeros(2, 1, h, w, dtype=torch.float64)] + [b64[3]], 1)
    hid = up + torch.einsum("kc,bchw->bkhw", m64.head_in.weight, (f - mean) / std) \
        + m64.head_in.bias[None, :, None, None]
    if hidden:
        hid = torch.einsum("qk,bkhw->bqhw", m64.head_out.weight, torch.nn.functional.leaky_relu(hid, 0.1)) \
            + m64.head_out.bias[None, :, None, None]
    assert hid.abs().max() > 0.1 and not torch.equal(g[0], g[1]) and g.shape[1] == 4 + antialias
    # float32 network
    torch.testing.assert_close(g.double(), hid.detach(), rtol=0, atol=1e-4 * float(hid.detach().abs().max()))


@pytest.mark.parametrize("hw", [(64, 96), (37, 50)])
def test_network_shapes(hw):
    net = FLNRNet()
    out = net(torch.rand(2, 13, *hw))
    assert out.shape == (2, 19, *hw)  # code 16 + 3 radius logits, on the cell grid it is given


def _net_oracle(net, x):
    """FLNRNet written out with plain float64 convolutions on the concatenations (no 1 x 1 folding)."""
    import torch.nn.functional as F

    def conv(c, t):
        return F.conv2d(t, c.weight.double(), c.bias.double(), padding=c.padding)

    def act(t):
        return F.leaky_relu(t, 0.1)

    def up(t, like):
        return F.interpolate(t, size=like.shape[-2:], mode="bilinear", align_corners=False)

    h, w = x.shape[-2:]
    m = net.multiple
    x = F.pad(x, (0, -w % m, 0, -h % m), mode="replicate")
    top = act(conv(net.stem[0], x))
    skips, y = [], top
    for down in net.down:
        y = act(conv(down[2], act(conv(down[0], F.avg_pool2d(y, 2)))))
        skips.append(y)
    for u, skip in zip(net.up, reversed(skips[:-1])):
        y = act(conv(u[0], torch.cat([up(y, skip), skip], 1)))
    y = act(conv(net.top[0], torch.cat([up(y, top), top], 1)))
    return conv(net.out, y)[..., :h, :w]


@pytest.mark.parametrize("hw", [(24, 40), (19, 33)])
def test_network_matches_plain_convolutions_in_float64(hw):
    """The 1 x 1 layers run as matrix products and the top one is moved before the upsampling
    (``W up(y) = up(W y)``): the same function as the convolutions on the concatenations."""
    torch.manual_seed(3)
    net = FLNRNet().eval()
    for name, p in net.named_parameters():
        if name.endswith("bias"):  # default weights keep the activations O(1); biases non-zero
            torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(2, 13, *hw, dtype=torch.float64)
    with torch.no_grad():
        ref = _net_oracle(net, x)
        got = net(x.float().contiguous(memory_format=torch.channels_last)).double()
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-5 * float(ref.abs().max()))


def test_layouts_hwc_numpy_and_bchw_torch(frame):
    model = _random_model()
    g = {k: frame[k] for k in GUIDES}
    hwc = denoise(frame["color"], **g, model="flnr", weights=model)
    assert isinstance(hwc, np.ndarray) and hwc.shape == frame["color"].shape and hwc.dtype == np.float32
    t = {k: torch.from_numpy(v).permute(2, 0, 1)[None] for k, v in frame.items() if k in (*GUIDES, "color")}
    bchw = denoise(t["color"], **{k: t[k] for k in GUIDES}, model="flnr", weights=model)
    assert isinstance(bchw, torch.Tensor) and bchw.shape == (1, 3, *frame["color"].shape[:2])
    np.testing.assert_allclose(bchw[0].permute(1, 2, 0).numpy(), hwc, rtol=1e-5, atol=1e-6)
    # a batch of two equals the frames one by one; odd sizes work
    two = denoise(t["color"][..., :45, :70].repeat(2, 1, 1, 1), **{k: t[k][..., :45, :70] for k in GUIDES},
                  model="flnr", weights=model)
    one = denoise(t["color"][..., :45, :70], **{k: t[k][..., :45, :70] for k in GUIDES}, model="flnr",
                  weights=model)
    assert two.shape == (2, 3, 45, 70)
    torch.testing.assert_close(two[1:], one, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("antialias", [False, True])
def test_tiles_match_the_whole_frame(frame, antialias, radii=(4, 8, 16)):
    """On a 384 x 384 frame (the bundled frame mirrored 3 x 3) tiles of 96 really are smaller than the frame
    even with the overlap that covers the regression's reach and the network's receptive field."""
    model = _random_model(radii=radii, antialias=antialias)

    def big(a):
        row = np.concatenate([a, a[:, ::-1], a], 1)
        return np.ascontiguousarray(np.concatenate([row, row[::-1], row], 0))

    g = {k: big(frame[k]) for k in GUIDES}
    c = big(frame["color"])
    whole = denoise(c, **g, model="flnr", weights=model)
    tiled = denoise(c, **g, model="flnr", weights=model, tile=96)
    np.testing.assert_allclose(tiled, whole, rtol=1e-4, atol=1e-5)


def test_joint_upsampling_runs(frame):
    import torch.nn.functional as F

    g = {k: frame[k] for k in GUIDES}
    c = torch.from_numpy(frame["color"]).permute(2, 0, 1)[None]
    half = F.avg_pool2d(c, 2)[0].permute(1, 2, 0).numpy()
    out = denoise(half, **g, model="flnr")
    assert out.shape == frame["color"].shape and np.isfinite(out).all()
    assert M.psnr(out, frame["reference"]) > M.psnr(frame["color"], frame["reference"]) + 8


def test_gradients_flow_end_to_end_through_the_regression(frame):
    model = _random_model(scale=2)
    model.train()
    t = {k: torch.from_numpy(v).permute(2, 0, 1)[None][..., :48, :48].contiguous()
         for k, v in frame.items() if k in (*GUIDES, "color", "reference")}
    out = model(t["color"], {k: t[k] for k in GUIDES})
    (out - t["reference"]).abs().mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    # every layer of the network and the learned ridge weights receive a gradient from the regression
    assert model.log_eps.grad.abs().sum() > 0
    assert model.net.stem[0].weight.grad.abs().sum() > 0
    # and through denoise() as well, to the colour
    c = t["color"].clone().requires_grad_(True)
    denoise(c, **{k: t[k] for k in GUIDES}, model="flnr", weights=model).sum().backward()
    assert c.grad is not None and torch.isfinite(c.grad).all() and c.grad.abs().sum() > 0


@pytest.mark.parametrize("antialias", [False, True])
def test_safetensors_round_trip_bit_for_bit(tmp_path, antialias):
    model = _random_model(seed=3, widths=(8, 12, 16), radii=(6,), scale=2, hidden=0, antialias=antialias)
    path = model.save(tmp_path / "m.safetensors", note="hello")
    back = FLNR.from_file(path)
    assert back.config == model.config
    for (k, a), (k2, b) in zip(model.state_dict().items(), back.state_dict().items()):
        assert k == k2 and a.dtype == b.dtype and torch.equal(a, b), k
    meta = read_metadata(path)
    assert json.loads(meta["vision.flnr.config"])["radii"] == [6] and meta["note"] == "hello"
    x = torch.rand(1, 3, 40, 40)
    g = {"normal": torch.rand(1, 3, 40, 40) * 2 - 1, "depth": torch.rand(1, 1, 40, 40) + 1}
    assert torch.equal(model(x, g), back(x, g))
    # the state-dict and path forms of weights= agree
    assert torch.equal(denoise(x, **g, model="flnr", weights=str(path)), denoise(x, **g, model="flnr", weights=back))


def test_weights_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        denoise(np.ones((16, 16, 3), np.float32), model="flnr", weights=tmp_path / "missing.safetensors")
    with pytest.raises(ValueError, match="do not match"):
        FLNR.from_state_dict({"log_eps": torch.zeros(8)})
    with pytest.raises(ValueError, match="retrain them with vision train-denoiser"):
        FLNR.from_state_dict({}, {"radius": 8})  # a configuration of the earlier FLNR design
    with pytest.raises(ValueError, match="guides must be 1 to 8"):
        FLNR(guides=9)
    with pytest.raises(ValueError, match="fit_down >= 1 dividing scale"):
        FLNR(scale=4, fit_down=3)


def _mean3(x):
    """float64 oracle: the mean of each pixel's 3 x 3 neighbourhood inside the frame, (..., H, W)."""
    h, w = x.shape[-2:]
    out = np.empty_like(x)
    for i in range(h):
        for j in range(w):
            out[..., i, j] = x[..., max(i - 1, 0):i + 2, max(j - 1, 0):j + 2].mean((-2, -1))
    return out


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def test_antialias_and_local_contrast_against_float64_loops():
    from vision.denoise.flnr import antialias, local_contrast

    rng = np.random.default_rng(4)
    x, logit = rng.normal(size=(2, 3, 7, 9)), rng.normal(size=(2, 1, 7, 9)) * 3
    got = antialias(torch.from_numpy(x), torch.from_numpy(logit), 0.7).numpy()
    w = _sigmoid(0.7) * _sigmoid(logit)
    np.testing.assert_allclose(got, x + w * (_mean3(x) - x), rtol=0, atol=1e-12)
    np.testing.assert_allclose(local_contrast(torch.from_numpy(x)).numpy(),
                               np.abs(x - _mean3(x)).sum(1, keepdims=True), rtol=0, atol=1e-12)
    # the float32 inference path (OpenCV, on interleaved pixels for channels-last), 1 or 3 channels
    from vision.kernels import box_filter
    for c in (1, 3):
        x32 = torch.from_numpy(rng.random((2, c, 6, 9), np.float32))
        for t in (x32, x32.contiguous(memory_format=torch.channels_last)):
            np.testing.assert_allclose(box_filter(t, 1).numpy(), _mean3(x32.double().numpy()), rtol=0, atol=1e-6)
            want = np.abs(x32.double().numpy() - _mean3(x32.double().numpy())).sum(1, keepdims=True)
            np.testing.assert_allclose(local_contrast(t).numpy(), want, rtol=0, atol=1e-5)
        got32 = antialias(x32, torch.from_numpy(logit[:, :, :6]).float(), 0.7).numpy()
        xd = x32.double().numpy()
        np.testing.assert_allclose(got32, xd + _sigmoid(0.7) * _sigmoid(logit[:, :, :6]) * (_mean3(xd) - xd),
                                   rtol=0, atol=1e-6)
    # flat and linear ramps have no contrast inside the frame; a step has it on both sides only
    ramp = np.add.outer(np.arange(6.0), 2 * np.arange(8.0))[None, None]
    assert np.abs(local_contrast(torch.from_numpy(ramp)).numpy()[..., 1:-1, 1:-1]).max() < 1e-12
    step = np.zeros((1, 1, 5, 8))
    step[..., 4:] = 1
    c = local_contrast(torch.from_numpy(step)).numpy()[0, 0]
    np.testing.assert_allclose(c[2], [0, 0, 0, 1 / 3, 1 / 3, 0, 0, 0], atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_antialias_half_precision_and_degenerate_frames(dtype):
    from vision.denoise.flnr import antialias, local_contrast

    rng = np.random.default_rng(8)
    x, logit = rng.random((1, 3, 9, 12)), rng.normal(size=(1, 1, 9, 12))
    got = antialias(torch.from_numpy(x).to(dtype), torch.from_numpy(logit).to(dtype)).double().numpy()
    want = x + 0.5 * _sigmoid(logit) * (_mean3(x) - x)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-2 if dtype == torch.bfloat16 else 3e-3)
    # one-pixel-high and one-pixel-wide frames, and flat frames (no contrast, the blend changes nothing)
    for shape in ((1, 3, 1, 7), (1, 3, 5, 1), (2, 3, 4, 4)):
        x = torch.from_numpy(rng.random(shape, np.float32))
        np.testing.assert_allclose(antialias(x, torch.full((shape[0], 1, *shape[2:]), 30.0), 30.0).numpy(),
                                   _mean3(x.double().numpy()), rtol=0, atol=1e-6)
    flat = torch.full((1, 3, 6, 6), 0.3).contiguous(memory_format=torch.channels_last)
    assert local_contrast(flat).abs().max() < 1e-6
    torch.testing.assert_close(antialias(flat, torch.full((1, 1, 6, 6), 5.0)), flat)


def test_antialias_model_without_albedo_or_emission(frame):
    """No albedo: the blend's weight is the guide head's alone; no emission: nothing is added back."""
    model = _random_model(11, antialias=True)
    g = {k: frame[k][:40, :40] for k in ("normal", "depth", "ao")}
    out = denoise(np.ascontiguousarray(frame["color"][:40, :40]), **g, model="flnr", weights=model)
    assert out.shape == (40, 40, 3) and np.isfinite(out).all() and out.min() >= 0


@pytest.mark.parametrize("grad,band,loops", [(True, None, "0"), (False, None, "0"), (False, 64 * 7, "0"),
                                              (False, None, "1")],
                         ids=["autograd", "banded", "banded-7-rows", "numba"])
def test_antialias_model_blends_the_light_where_the_buffers_have_edges(frame, grad, band, loops, monkeypatch):
    """FLNR(antialias=True) = the same network without it, its light (result minus emission) blended towards
    the 3 x 3 mean with weight sigmoid(m) sigmoid(l + v c(albedo)), l the guide head's extra output; the
    emission is added back unblended. Without autograd the last steps run band by band (here also in bands of
    7 rows, the last one partial: the 3 x 3 means at their edges must see the neighbouring bands) or, with
    numba, row by row."""
    from vision.denoise.flnr import cells as FL, finish

    monkeypatch.setenv("VISION_NUMBA", loops)
    if band:
        monkeypatch.setattr(finish, "FINISH_BAND_PIXELS", band)

    aa = _random_model(7, antialias=True)
    with torch.no_grad():
        aa.edge_gain.fill_(30.0)
        aa.blend_max.fill_(0.4)
    plain = FLNR(**dict(aa.config, antialias=False)).eval()
    state = {k: (v[:4] if k.startswith("head_out.") else v) for k, v in aa.state_dict().items()
             if k not in ("edge_gain", "blend_max")}
    plain.load_state_dict(state)
    crop = {k: torch.from_numpy(np.ascontiguousarray(frame[k][20:84, 30:94])).permute(2, 0, 1)[None]
            for k in (*GUIDES, "color")}
    g = {k: crop[k] for k in GUIDES}
    with torch.set_grad_enabled(grad):
        got = aa(crop["color"], g).detach().double().numpy()
        base = plain(crop["color"], g).detach().double().numpy()
        target = crop["color"].clone()
        head, _ = aa.learned_guides(FL.guide_buffers(g, crop["color"]), target, torch.zeros_like(target[:, :1]))
    em = crop["emission"].double().numpy()
    light = base - em
    a = crop["albedo"].double().numpy()
    logit = head[:, 4:].detach().double().numpy() + 30 * np.abs(a - _mean3(a)).sum(1, keepdims=True)
    w = _sigmoid(0.4) * _sigmoid(logit)
    assert w.max() > 0.3 and w.min() < 0.05  # the weight really varies across the crop
    want = light + w * (_mean3(light) - light) + em
    assert np.abs(want - base).max() > 0.01
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("shape", [(2, 3, 9, 13), (1, 3, 1, 7), (1, 3, 5, 1), (2, 3, 2, 2)])
@pytest.mark.parametrize("albedo", ["per-image", "shared", None])
def test_finish_against_float64_loops(shape, albedo, cpu_loops):
    """FLNR's last steps without autograd (numba rows or torch bands): out = lerp(L, mean3(L), sigmoid(m)
    sigmoid(l + v contrast(albedo))) + emission, L = max(fitted, 0) factor, written into a channels-last
    output (HWC arrays), for batches whose albedo is per image or shared (batch 1), no albedo, and frames one
    pixel high or wide. mean3 and contrast are written here as float64 loops over the neighbours."""
    from vision.denoise.flnr.finish import finish

    rng = np.random.default_rng(12)
    b, c, h, w = shape

    def mean3(x):
        out = np.empty_like(x)
        for y in range(h):
            for i in range(w):
                out[:, :, y, i] = x[:, :, max(y - 1, 0):y + 2, max(i - 1, 0):i + 2].mean((2, 3))
        return out

    model = _random_model(2, antialias=True)
    with torch.no_grad():
        model.edge_gain.fill_(20.0)
        model.blend_max.fill_(0.8)
    fitted, factor, add = (rng.normal(size=shape).astype(np.float32) for _ in range(3))
    blend = rng.normal(size=(b, 1, h, w)).astype(np.float32)
    alb = None if albedo is None else rng.random((b if albedo == "per-image" else 1, 3, h, w)).astype(np.float32)
    out = torch.empty(shape).contiguous(memory_format=torch.channels_last)
    args = [torch.from_numpy(v) for v in (fitted, factor, add, blend)]
    with torch.no_grad():
        finish(*args, None if alb is None else torch.from_numpy(alb).expand(b, -1, -1, -1), model.edge_gain,
               model.blend_max, out)
    light = np.maximum(fitted.astype(np.float64), 0) * factor
    logit = blend.astype(np.float64)
    if alb is not None:
        a = np.broadcast_to(alb.astype(np.float64), shape)
        logit = logit + 20.0 * np.abs(a - mean3(a)).sum(1, keepdims=True)
    wt = _sigmoid(0.8) * _sigmoid(logit)
    want = light + wt * (mean3(light) - light) + add
    np.testing.assert_allclose(out.numpy(), want, rtol=0, atol=2e-6 * np.abs(want).max())


def test_with_antialias_starts_from_the_weights_it_is_given(frame):
    """with_antialias keeps every weight; with the blend's bias far down it is the old model."""
    old = _random_model(9)
    new = old.with_antialias()
    assert new.config == dict(old.config, antialias=True) and old.config["antialias"] is False
    assert parameter_count(new) == parameter_count(old) + 16 + 1 + 1 + 1  # logit row, its bias, gain, top
    with torch.no_grad():
        new.head_out.bias[-1] = -60.0
    t = {k: torch.from_numpy(np.ascontiguousarray(frame[k][:48, :48])).permute(2, 0, 1)[None]
         for k in (*GUIDES, "color")}
    torch.testing.assert_close(new(t["color"], {k: t[k] for k in GUIDES}),
                               old(t["color"], {k: t[k] for k in GUIDES}), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="hidden layer"):
        FLNR(hidden=0).with_antialias()


def test_pruned_keeps_the_most_useful_units_and_folds_the_rest_into_the_bias(frame):
    """pruned(h) = the same model with the dropped units' activations replaced by their mean over the frames
    (checked through the full-width model with those output columns zeroed and the bias moved), and it drops
    the units that cannot matter: here two whose output column is zero and two that never vary."""
    from vision.denoise import buffers as B
    from vision.denoise.flnr import cells as FL

    model = _random_model(11, hidden=8, antialias=True)
    with torch.no_grad():
        model.head_out.weight[:, [1, 6]] = 0.0  # these two units reach no output
        model.head_in.weight[[2, 5]] = 0.0  # these two see no buffer and no code: constant activations
        model.net.out.weight[[2, 5]] = 0.0
        model.net.out.bias[[2, 5]] = 0.0
    crops = [{k: torch.from_numpy(np.ascontiguousarray(frame[k][y:y + 48, x:x + 64])).permute(2, 0, 1)[None]
              for k in (*GUIDES, "color")} for y, x in ((0, 0), (30, 40))]
    frames = [(c["color"], {k: c[k] for k in GUIDES}) for c in crops]
    small = model.pruned(4, frames, fit_down=2)
    assert small.config == dict(model.config, hidden=4, fit_down=2) and small.head_out.in_features == 4
    assert small.net.out.out_channels == 4 + 3
    with torch.no_grad():
        assert model._whole_frame(crops[0]["color"]) is None  # no hook left: the model's fast paths are back
    # the oracle: every 7th pixel's hidden activations, from the float64 head on the same inputs
    acts = []
    for color, g in frames:
        m64 = _random_model(11, hidden=8, antialias=True).double()
        m64.load_state_dict(model.state_dict())
        target = color.double()
        buffers = FL.guide_buffers({k: (None if v is None else v.double()) for k, v in g.items()}, target)
        cells = FL.cell_guides(buffers, target, target.shape[-2:])
        mean, std = FL.guide_stats(cells)
        tgt, _, _ = B.demodulate(target, buffers[3], g["emission"].double(), 8)
        mask = B.emitter_mask(g["emission"].double(), target)
        with torch.no_grad():
            out = m64.net(FL.cell_inputs((cells - mean) / std, tgt, mask))
        up = torch.nn.functional.interpolate(out[:, :8], scale_factor=4, mode="bilinear")
        f = torch.cat([b for b in buffers], 1)
        hid = up + torch.einsum("kc,bchw->bkhw", m64.head_in.weight, (f - mean) / std) + m64.head_in.bias[:, None, None]
        acts.append(torch.nn.functional.leaky_relu(hid, 0.1).detach().permute(0, 2, 3, 1).reshape(-1, 8)[::7])
    acts = torch.cat(acts)
    use = acts.std(0) * model.head_out.weight.detach().double().norm(dim=0)
    keep = sorted(torch.argsort(use, descending=True)[:4].tolist())
    assert not {1, 6, 2, 5} & set(keep), (keep, use)
    drop = [j for j in range(8) if j not in keep]
    ref = FLNR(**dict(model.config, fit_down=2)).eval()
    ref.load_state_dict(model.state_dict())
    with torch.no_grad():
        w2 = model.head_out.weight.double()
        ref.head_out.bias += (w2[:, drop] @ acts.mean(0)[drop]).float()
        ref.head_out.weight[:, drop] = 0.0
        for color, g in frames:
            torch.testing.assert_close(small(color, g), ref(color, g), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="hidden"):
        model.pruned(9, frames)
    with pytest.raises(ValueError, match="hidden"):
        FLNR(hidden=0).pruned(1, frames)


@pytest.mark.parametrize("loops", ["1", "0"], ids=["numba", "bands"])
def test_forward_hooks_on_the_guide_head_see_its_hidden_layer(frame, loops, monkeypatch):
    """A forward hook on the guide head's output layer sees the hidden activations leaky(up(code) + W1 (f - mean) /
    std + b1) (a float64 oracle) and gives W2 h + b2, also on CPU without autograd, where the head otherwise runs in
    numba or in bands of rows that never call the layer (how pruning measures the units); with the hook removed
    the model takes those paths again, and both results agree."""
    from vision.denoise import buffers as B
    from vision.denoise.flnr import cells as FL

    monkeypatch.setenv("VISION_NUMBA", loops)
    model = _random_model(5, hidden=8)
    crop = {k: torch.from_numpy(np.ascontiguousarray(frame[k][8:56, 16:80])).permute(2, 0, 1)[None]
            for k in (*GUIDES, "color")}
    color, g = crop["color"], {k: crop[k] for k in GUIDES}
    seen = []
    hook = model.head_out.register_forward_hook(lambda layer, args, out: seen.append((args[0].clone(), out.clone())))
    assert model._whole_frame(color) == "forward hooks watch the guide head's output layer"
    with torch.no_grad():
        hooked = model(color, g)
    hook.remove()
    with torch.no_grad():
        assert model._whole_frame(color) is None
        plain = model(color, g)
    assert len(seen) == 1 and seen[0][0].shape == (48 * 64, 8)
    # the oracle, float64 from the definitions
    m64 = _random_model(5, hidden=8).double()
    target = color.double()
    buffers = FL.guide_buffers({k: v.double() for k, v in g.items()}, target)
    cells = FL.cell_guides(buffers, target, target.shape[-2:])
    mean, std = FL.guide_stats(cells)
    tgt, _, _ = B.demodulate(target, buffers[3], g["emission"].double(), 8)
    with torch.no_grad():
        out = m64.net(FL.cell_inputs((cells - mean) / std, tgt, B.emitter_mask(g["emission"].double(), target)))
        up = torch.nn.functional.interpolate(out[:, :8], scale_factor=4, mode="bilinear")
        f = torch.cat(buffers, 1)
        hid = up + torch.einsum("kc,bchw->bkhw", m64.head_in.weight, (f - mean) / std) + m64.head_in.bias[:, None, None]
        acts = torch.nn.functional.leaky_relu(hid, 0.1).permute(0, 2, 3, 1).reshape(-1, 8)
        outs = acts @ m64.head_out.weight.t() + m64.head_out.bias
    assert acts.std(0).min() > 1e-3  # every unit varies over the crop
    torch.testing.assert_close(seen[0][0].double(), acts, rtol=0, atol=1e-4 * float(acts.abs().max()))
    torch.testing.assert_close(seen[0][1].double(), outs, rtol=0, atol=1e-4 * float(outs.abs().max()))
    torch.testing.assert_close(hooked, plain, rtol=0, atol=1e-5 * float(plain.abs().max()))


def test_bundled_weights_beat_flr_on_a_held_out_scene():
    """The bundled scenes were never trained on: FLNR must beat FLR against their 2048-spp references."""
    meta = read_metadata(asset_path("weights", "flnr.safetensors"))
    assert "vision.train.command" in meta and "bundled" not in meta["vision.train.data"]
    gains = []
    for s in (0, 2):
        d = read_frame(asset_path("scenes", f"scene_{s:05d}", "frame_01.exr"))
        g = {k: d[k] for k in GUIDES}
        flr = M.psnr(denoise(d["color"], **g, model="flr"), d["reference"])
        flnr = M.psnr(denoise(d["color"], **g, model="flnr"), d["reference"])
        gains.append(flnr - flr)
    assert min(gains) > 0, gains


def test_train_denoiser_one_tiny_epoch(tmp_path, capsys):
    from vision.pipelines.cli import main

    data = tmp_path / "scenes"
    shutil.copytree(asset_path("scenes"), data)
    out = tmp_path / "w.safetensors"
    rc = main(["train-denoiser", "--data", str(data), "--epochs", "1", "--steps", "2", "--batch", "2",
               "--crop", "32", "--widths", "4,6,8", "--hidden", "0", "--quiet", "-o", str(out)])
    assert rc == 0 and out.is_file()
    model = load_flnr(out)
    assert model.config["widths"] == [4, 6, 8] and model.config["radii"] == [4, 8, 16]
    assert model.config["hidden"] == 0 and model.head_out is None
    meta = read_metadata(out)
    assert meta["vision.train.epochs"] == "1" and float(meta["vision.train.val_psnr"]) > 20
    assert meta["vision.train.command"].startswith("vision train-denoiser --data")
    err = capsys.readouterr().err
    assert "val PSNR" in err


def test_train_denoiser_antialias_from_scratch_and_added_to_init_weights(tmp_path):
    from vision.pipelines.cli import main

    data = tmp_path / "scenes"
    shutil.copytree(asset_path("scenes"), data)
    tiny = ["--data", str(data), "--epochs", "1", "--steps", "1", "--batch", "1", "--crop", "32", "--quiet"]
    plain, added, scratch = (tmp_path / f"{n}.safetensors" for n in ("plain", "added", "scratch"))
    assert main(["train-denoiser", *tiny, "--widths", "4,6,8", "-o", str(plain)]) == 0
    assert main(["train-denoiser", *tiny, "--init", str(plain), "--antialias", "-o", str(added)]) == 0
    assert main(["train-denoiser", *tiny, "--widths", "4,6,8", "--antialias", "-o", str(scratch)]) == 0
    assert load_flnr(plain).config["antialias"] is False
    for path in (added, scratch):
        model = load_flnr(path)
        assert model.config["antialias"] is True and model.config["widths"] == [4, 6, 8]
        assert model.head_out.out_features == 5 and model.edge_gain.shape == ()
        assert read_metadata(path)["vision.train.command"].endswith(f"--antialias -o {path}")


def test_train_denoiser_prunes_the_init_head_with_a_smaller_hidden(tmp_path, capsys):
    from vision.pipelines.cli import main

    data = tmp_path / "scenes"
    shutil.copytree(asset_path("scenes"), data)
    tiny = ["--data", str(data), "--epochs", "1", "--steps", "1", "--batch", "1", "--crop", "32", "--quiet"]
    wide, small = tmp_path / "wide.safetensors", tmp_path / "small.safetensors"
    assert main(["train-denoiser", *tiny, "--widths", "4,6,8", "--hidden", "6", "-o", str(wide)]) == 0
    assert main(["train-denoiser", *tiny, "--init", str(wide), "--hidden", "3", "--fit-down", "2",
                 "-o", str(small)]) == 0
    assert "pruned the init's guide head to 3 units" in capsys.readouterr().err
    model = load_flnr(small)
    assert model.config == dict(load_flnr(wide).config, hidden=3, fit_down=2)
    assert "--hidden 3 --fit-down 2" in read_metadata(small)["vision.train.command"]
    assert main(["train-denoiser", *tiny, "--init", str(wide), "--hidden", "0", "-o", str(small)]) != 0
    assert "has 6 units; a smaller width (> 0) prunes it, a larger one widens it" in capsys.readouterr().err


def test_train_denoiser_help(capsys):
    from vision.pipelines.cli import main

    with pytest.raises(SystemExit):
        main(["train-denoiser", "--help"])
    text = capsys.readouterr().out
    assert "examples:" in text and "vision train-denoiser --data" in text


@pytest.mark.parametrize("tonemapped", ["l1", "rmse"])
def test_training_loss_against_hand_computed_values(tonemapped):
    from vision.pipelines.training.denoiser_data import loss_fn

    out = torch.tensor([0.25, 2.0, 0.0, 0.5], dtype=torch.float64)
    ref = torch.tensor([0.5, 0.75, 0.0, 0.5], dtype=torch.float64)
    # tonemap clamp(x, 0, 1) + 1e-4, ** (1 / 2.2): 2.0 and 0.75 clamp to 1 and 0.75
    tm = lambda v: (min(max(v, 0.0), 1.0) + 1e-4) ** (1 / 2.2)  # noqa: E731
    d = [tm(a) - tm(b) for a, b in zip(out.tolist(), ref.tolist())]
    base = sum(abs(x) for x in d) / 4 if tonemapped == "l1" else math.sqrt(sum(x * x for x in d) / 4)
    rel = (0.25 / (0.75 + 0.01) + 1.25 / (2.75 + 0.01) + 0.0 + 0.0) / 4
    got = loss_fn(out, ref, 0.3, tonemapped)
    assert got.item() == pytest.approx(base + 0.3 * rel, rel=1e-9)  # rmse: sqrt(mse + 1e-12)


@pytest.mark.parametrize("u", [2, 4])
def test_subsample_takes_one_sample_of_every_block_at_a_random_phase(u):
    from vision.pipelines.training.denoiser_data import subsample

    h, w = 2 * u + 1, 3 * u + 1  # the partial last blocks are dropped
    x = torch.arange(h * w * 1.0).view(1, 1, h, w)
    gen = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(30 * u * u):
        y, phase = subsample(x, gen, u)
        assert y.shape == (1, 1, 2, 3)
        oy, ox = divmod(int(y[0, 0, 0, 0]), w)
        assert 0 <= oy < u and 0 <= ox < u and phase == (oy, ox)
        expect = [[(u * i + oy) * w + u * j + ox for j in range(3)] for i in range(2)]
        assert y[0, 0].tolist() == expect
        seen.add((oy, ox))
    assert len(seen) == u * u


def test_train_denoiser_with_half_resolution_colour_steps(tmp_path, capsys):
    from vision.pipelines.cli import main

    data = tmp_path / "scenes"
    shutil.copytree(asset_path("scenes"), data)
    out = tmp_path / "w.safetensors"
    args = ["train-denoiser", "--data", str(data), "--epochs", "1", "--steps", "2", "--batch", "2", "--crop", "32",
            "--widths", "4,6,8", "--hidden", "0", "--quiet", "--upsample-prob", "1", "--tonemapped", "rmse"]
    assert main(args + ["-o", str(out)]) == 0
    assert "--upsample-prob 1.0 " in read_metadata(out)["vision.train.command"]
    err = capsys.readouterr().err
    assert "epoch 1: train loss" in err and "dB (from 1/2-resolution colour)" in err
    assert main([("33" if a == "32" else a) for a in args] + ["-o", str(out)]) == 2
    assert "--upsample-prob needs a --crop divisible by --upsample-factor 2, got 33" in capsys.readouterr().err
    assert main(args + ["--upsample-factor", "4", "-o", str(out)]) == 0
    assert "--upsample-factor 4 " in read_metadata(out)["vision.train.command"]
    assert "dB (from 1/4-resolution colour)" in capsys.readouterr().err
    assert main([("34" if a == "32" else a) for a in args] + ["--upsample-factor", "4", "-o", str(out)]) == 2
    assert "divisible by --upsample-factor 4, got 34" in capsys.readouterr().err


def test_train_denoiser_ctrl_c_still_writes_the_best_weights(tmp_path, monkeypatch, capsys):
    from vision.pipelines.cli import train_denoiser_run as T
    from vision.pipelines.cli import main

    calls = {"n": 0}
    real = T.loss_fn

    def interrupted(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:  # in the second epoch (2 steps per epoch)
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(T, "loss_fn", interrupted)
    data = tmp_path / "scenes"
    shutil.copytree(asset_path("scenes"), data)
    out = tmp_path / "w.safetensors"
    assert main(["train-denoiser", "--data", str(data), "--epochs", "5", "--steps", "2", "--batch", "2", "--crop",
                 "32", "--widths", "4,6,8", "--hidden", "0", "--quiet", "-o", str(out)]) == 0
    meta = read_metadata(out)
    assert meta["vision.train.epochs"] == "1" and len(json.loads(meta["vision.train.val_history"])) == 1
    assert "interrupted in epoch 2" in capsys.readouterr().err


def test_half_resolution_colour_takes_the_bundled_upsampling_weights_when_there_are_such(tmp_path, monkeypatch):
    """weights=None: colour at 1/2 of the guides' size loads BUNDLED_UPSAMPLE[2] if that file exists (else the
    full-resolution weights); full-resolution colour always the full-resolution ones."""
    from vision.denoise.flnr import loading as F

    d = read_frame(asset_path("scenes", "scene_00000", "frame_00.exr"))
    g = {k: d[k] for k in ("albedo", "normal", "depth", "ao", "emission")}
    lo = np.ascontiguousarray(d["color"][::2, ::2])
    bundled = denoise(lo, **g, model="flnr", weights=asset_path("weights", "flnr.safetensors"))
    monkeypatch.setattr(F, "BUNDLED_UPSAMPLE", {2: ("no_such_file.safetensors",)})
    np.testing.assert_array_equal(denoise(lo, **g, model="flnr"), bundled)  # missing: the full-resolution ones
    other = load_flnr(asset_path("weights", "flnr.safetensors"))
    other = FLNR.from_state_dict({k: v * 1.01 for k, v in other.state_dict().items()}, other.config)
    path = other.save(tmp_path / "up2.safetensors")
    monkeypatch.setattr(F, "BUNDLED_UPSAMPLE", {2: (str(path),)})  # an absolute path joins as itself
    got = denoise(lo, **g, model="flnr")
    np.testing.assert_array_equal(got, denoise(lo, **g, model="flnr", weights=path))
    assert np.abs(got - bundled).max() > 1e-4
    full = denoise(d["color"], **g, model="flnr")
    np.testing.assert_array_equal(full, denoise(d["color"], **g, model="flnr",
                                                weights=asset_path("weights", "flnr.safetensors")))


@pytest.mark.parametrize("size, prob, u, want", [
    ((8, 12), 0.0, 2, ("full", None)),
    ((8, 12), 0.25, 2, ("mix", "half")),
    ((8, 12), 1.0, 2, ("half", "half")),
    ((8, 12), 0.5, 4, ("mix", "half")),
    ((7, 12), 1.0, 2, ("full", None)),  # no frame can be halved: the full-resolution score, not NaN
    ((8, 10), 1.0, 4, ("full", None)),  # 4 does not divide 10
])
def test_validation_score_weighs_full_and_low_resolution_as_the_training_steps(size, prob, u, want):
    """validate() against hand-computed PSNRs: a stub model returns grey 0.25 from full-resolution colour
    and grey 0.5 from 1/u-resolution colour; the reference is grey 0.25 + a ramp."""
    from vision.pipelines.training.denoiser_data import validate

    h, w = size
    ref = 0.25 + 0.01 * torch.arange(h * w, dtype=torch.float32).reshape(1, 1, h, w).expand(1, 3, h, w)
    frame = {k: torch.zeros(1, 3 if k in ("albedo", "normal", "emission") else 1, h, w) for k in GUIDES}
    frame.update(color=torch.ones(1, 3, h, w), reference=ref)
    seen = []

    def model(color, guides, phase=None):
        low = color.shape[-2:] != (h, w)
        if low:
            assert color.shape[-2:] == (h // u, w // u)
        seen.append(phase if low else "full")
        return torch.full((1, 3, h, w), 0.5 if low else 0.25)

    def psnr(value):  # tonemap clamp + gamma 1/2.2, by hand
        r = np.clip(ref[0].permute(1, 2, 0).numpy().astype(np.float64), 0, 1) ** (1 / 2.2)
        return 10 * math.log10(1 / np.mean((value ** (1 / 2.2) - r) ** 2))

    full, half = psnr(0.25), psnr(0.5)
    expect = {"full": full, "half": half, "mix": (1 - prob) * full + prob * half, None: None}
    score, lo = validate(model, [frame], prob, u)
    assert score == pytest.approx(expect[want[0]], rel=1e-5)
    assert lo == (None if want[1] is None else pytest.approx(half, rel=1e-5))
    if want[1] is not None:
        assert [p for p in seen if p != "full"] == [(0, 0), (u - 1, u - 1)]


def test_drop_ao_crops_look_like_frames_without_ao():
    """--drop-ao: a crop whose AO is dropped gets what a frame with no AO buffer gives the network (zeros,
    standardised as a missing buffer), and the probability is honoured."""
    import torch

    from vision.denoise.flnr.cells import FLNR_LAYOUT, frame_stats
    from vision.pipelines.training.denoiser_data import AO_CHANNEL, FLNR_TRAINING, sample_batch

    assert sum({"normal": 3, "depth": 1}[g] for g in FLNR_LAYOUT[:FLNR_LAYOUT.index("ao")]) == AO_CHANNEL
    g = torch.Generator().manual_seed(0)
    frame = {k: torch.rand(1, 1 if k in ("depth", "ao") else 3, 32, 32, generator=g) + 0.1 for k in FLNR_TRAINING}
    guides = {k: frame[k] for k in ("albedo", "normal", "depth", "ao", "emission")}
    stats = [frame_stats(guides, frame["color"], (32, 32))]
    no_ao = frame_stats({k: v for k, v in guides.items() if k != "ao"}, frame["color"], (32, 32))
    gen = torch.Generator().manual_seed(1)
    dropped = 0
    for _ in range(40):
        b, (mean, std) = sample_batch([frame], stats, 1, 32, gen, drop_ao=0.5)
        if not b["ao"].any():
            dropped += 1
            torch.testing.assert_close(mean[:, AO_CHANNEL], no_ao[0][:, AO_CHANNEL])
            torch.testing.assert_close(std[:, AO_CHANNEL], no_ao[1][:, AO_CHANNEL])
            torch.testing.assert_close(mean[:, :AO_CHANNEL], stats[0][0][:, :AO_CHANNEL])
        else:
            torch.testing.assert_close(mean, stats[0][0])
    assert 10 <= dropped <= 30
    b, _ = sample_batch([frame], stats, 1, 32, gen)  # default: never
    assert b["ao"].any()
