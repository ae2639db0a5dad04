"""FLNR's detail blend: the blend against float64 loops, adding it to trained weights, emitters kept exact,
the weights file and vision train-denoiser --detail."""
import shutil

import numpy as np
import pytest
import torch

from vision.bundled import asset_path
from vision.data import read_frame
from vision.denoise import FLNR, load_flnr
from vision.denoise.flnr import detail_blend, read_metadata
from vision.denoise.flnr.model import BLEND_BIAS, DETAIL_BIAS
from vision.denoise.flnr.surgery import head_rows

GUIDES = ("albedo", "normal", "depth", "ao", "emission")


@pytest.fixture(scope="module")
def frame():
    return read_frame(asset_path("scenes", "scene_00000", "frame_00.exr"))


def _tensors(frame, size=48):
    t = {k: torch.from_numpy(np.ascontiguousarray(frame[k][:size, :size])).permute(2, 0, 1)[None]
         for k in (*GUIDES, "color")}
    return t["color"], {k: t[k] for k in GUIDES}


def _oracle(res, add, factor, target, logit, mask):
    """float64 loops from the definition: res + w (D - res), D = factor m + add with m the mean of the 3 x 3
    samples max(target, 0) inside the frame without the largest, w = sigmoid(logit) (1 - mask) max(0, 1 - V /
    |D - res|^2), V = sum over channels of factor^2 (sample variance of those k samples) / k (w = 0 for k < 2)."""
    res, add, factor, target, logit, mask = (np.broadcast_to(np.asarray(v, np.float64), v.shape)
                                             for v in (res, add, factor, target, logit, mask))
    b, c, h, w = res.shape
    out = np.array(res, np.float64)
    for i in range(b):
        for y in range(h):
            for x in range(w):
                d, var = np.empty(c), 0.0
                for k in range(c):
                    win = np.sort(np.maximum(target[i, k, max(0, y - 1):y + 2, max(0, x - 1):x + 2], 0).ravel())
                    kept = win[:-1] if win.size > 1 else win
                    d[k] = factor[i, k, y, x] * kept.mean() + add[i, k, y, x]
                    var += factor[i, k, y, x] ** 2 * kept.var(ddof=1) / kept.size if kept.size >= 2 else np.inf
                diff2 = ((d - res[i, :, y, x]) ** 2).sum()
                shrink = max(0.0, 1 - var / diff2) if diff2 > 0 and np.isfinite(var) else 0.0
                wt = (1 - mask[i, 0, y, x]) / (1 + np.exp(-logit[i, 0, y, x])) * shrink
                out[i, :, y, x] = res[i, :, y, x] + wt * (d - res[i, :, y, x])
    return out


@pytest.mark.parametrize("path", ["numba", "autograd"])
@pytest.mark.parametrize("hw", [(13, 17), (1, 5), (4, 1), (1, 1)])
def test_detail_blend_against_float64_loops(path, hw):
    """The blend on a batch of 2 (emission shared by the batch, an emitter mask, negative targets that the mean
    clamps, logits from -9 to 9), in the numba pass (channels-last output, in place) and the autograd path."""
    g = torch.Generator().manual_seed(3)
    h, w = hw
    res = torch.rand(2, 3, h, w, generator=g)
    add = (torch.rand(1, 3, h, w, generator=g) * (torch.rand(1, 1, h, w, generator=g) > 0.7)).expand(2, -1, -1, -1)
    factor = torch.rand(2, 3, h, w, generator=g) + 0.1
    # a smooth signal with noise of varying size: the shrinkage is 0 in some pixels, near 1 in others
    target = torch.linspace(0, 4, h * w).reshape(1, 1, h, w) + torch.randn(2, 3, h, w, generator=g) * torch.rand(
        2, 1, h, w, generator=g) ** 3 * 2
    logit = torch.randn(2, 1, h, w, generator=g) * 3
    mask = (torch.rand(2, 1, h, w, generator=g) > 0.6).float()
    want = _oracle(res, add, factor, target, logit, mask)
    if path == "numba":
        out = res.clone().contiguous(memory_format=torch.channels_last)
        got = detail_blend(out, add, factor, target, logit, mask)
        assert got is out  # in place
    else:
        logit = logit.clone().requires_grad_(True)
        got = detail_blend(res, add, factor, target, logit, mask)
        got.sum().backward()
        assert logit.grad is not None and torch.isfinite(logit.grad).all()
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=0, atol=2e-6 * np.abs(want).max())


def test_with_detail_starts_from_the_weights_it_is_given(frame):
    """with_detail keeps every weight and adds one zero row with bias DETAIL_BIAS; with that bias far down the
    model is the old one. Adding antialias after detail moves the detail row behind the new blend row."""
    torch.manual_seed(4)
    old = FLNR(hidden=8).eval()
    new = old.with_detail()
    assert new.config == dict(old.config, detail=True)
    rows = head_rows(new.config)
    assert (rows["guides"], rows["detail"], rows["total"]) == (4, 4, 5) and "blend" not in rows
    assert float(new.head_out.bias[4].detach()) == DETAIL_BIAS and not new.head_out.weight[4].any()
    color, guides = _tensors(frame)
    with torch.no_grad():
        new.head_out.bias[4] = -60.0
        torch.testing.assert_close(new(color, guides), old(color, guides), rtol=1e-6, atol=1e-6)
    both = new.with_antialias()
    rows = head_rows(both.config)
    assert (rows["blend"], rows["detail"]) == (4, 5)
    torch.testing.assert_close(both.head_out.weight[[0, 1, 2, 3, 5]], new.head_out.weight)
    assert float(both.head_out.bias[4].detach()) == BLEND_BIAS and not both.head_out.weight[4].any()
    with pytest.raises(ValueError, match="hidden layer"):
        FLNR(hidden=0).with_detail()


@pytest.mark.parametrize("grad", [False, True])
def test_detail_weight_one_is_the_noisy_mean_and_keeps_emitters_exact(frame, grad):
    """With the detail row's bias at +60 the whole model matches the float64 blend of its own result (the head's
    weight 1, then the shrinkage), except at the pixels that see an emitter, which keep FLNR's own result."""
    from vision.denoise import buffers as B

    torch.manual_seed(5)
    base = FLNR(hidden=8, antialias=True).eval()
    model = base.with_detail()
    with torch.no_grad():
        model.head_out.bias[head_rows(model.config)["detail"]] = 60.0
    color, guides = _tensors(frame, 64)
    guides["emission"] = torch.zeros_like(color)
    guides["emission"][..., 10:14, 20:30] = 5.0
    with torch.set_grad_enabled(grad):
        got = model(color, guides).detach().double()
        plain = base(color, guides).detach().double()
    target, factor, add = B.demodulate(color.double(), guides["albedo"].double(), guides["emission"].double(),
                                       8)
    mask = (guides["emission"].amax(1, keepdim=True) > 0).double()
    want = _oracle(plain.numpy(), add.numpy(), factor.numpy(), target.numpy(), np.full(mask.shape, 60.0),
                   mask.numpy())
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=2e-5 * np.abs(want).max())
    assert torch.equal(got[..., 10:14, 20:30], plain[..., 10:14, 20:30])


def test_train_denoiser_detail_added_to_init_weights_and_round_trip(tmp_path):
    from vision.pipelines.cli import main

    data = tmp_path / "scenes"
    shutil.copytree(asset_path("scenes"), data)
    tiny = ["--data", str(data), "--epochs", "1", "--steps", "1", "--batch", "1", "--crop", "32", "--quiet"]
    plain, added = tmp_path / "plain.safetensors", tmp_path / "added.safetensors"
    assert main(["train-denoiser", *tiny, "--widths", "4,6,8", "--hidden", "4", "-o", str(plain)]) == 0
    assert main(["train-denoiser", *tiny, "--init", str(plain), "--detail", "-o", str(added)]) == 0
    model = load_flnr(added)
    assert model.config["detail"] is True and model.config["widths"] == [4, 6, 8]
    assert model.head_out.out_features == 5
    assert read_metadata(added)["vision.train.command"].endswith(f"--detail -o {added}")
    assert load_flnr(plain).config["detail"] is False
    # a file written before the blend existed (no "detail" in its configuration) loads without it
    assert "detail" not in read_metadata(asset_path("weights", "flnr_up2.safetensors"))["vision.flnr.config"]
    assert load_flnr(asset_path("weights", "flnr_up2.safetensors")).config["detail"] is False


def test_a_lone_firefly_does_not_pass_through_the_detail_blend():
    """A flat signal of 0.5 with one sample at 1e4: at full detail weight every pixel but the firefly's own gets
    0.5 exactly (the largest of each 3 x 3 neighbourhood is left out), in both paths."""
    target = torch.full((1, 3, 9, 9), 0.5)
    target[..., 4, 4] = 1e4
    ones, zeros = torch.ones_like(target), torch.zeros_like(target)
    logit, mask = torch.full((1, 1, 9, 9), 60.0), torch.zeros(1, 1, 9, 9)
    for grad in (False, True):
        res = torch.zeros(1, 3, 9, 9, requires_grad=grad)
        out = detail_blend(res if grad else res.clone(), zeros, ones, target, logit, mask).detach()
        keep = torch.ones(9, 9, dtype=torch.bool)
        keep[4, 4] = False
        assert torch.equal(out[..., keep], torch.full_like(out[..., keep], 0.5))


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 0.03), (torch.bfloat16, 0.08)])
def test_detail_model_in_half_precision_stays_near_float64(frame, dtype, tol):
    """A model with both blends in float16 / bfloat16 (the autograd path) against itself in float64, relative to
    the result's largest value."""
    torch.manual_seed(6)
    model = FLNR(hidden=8, antialias=True, detail=True).eval()
    with torch.no_grad():
        model.head_out.bias[head_rows(model.config)["detail"]] = 2.0  # a weight the blend actually uses
    color, guides = _tensors(frame, 40)
    with torch.no_grad():
        want = model.double()(color.double(), {k: v.double() for k, v in guides.items()})
        got = model.to(dtype)(color.to(dtype), {k: v.to(dtype) for k, v in guides.items()})
    assert got.dtype == dtype and torch.isfinite(got).all()
    assert float((got.double() - want).abs().max()) <= tol * float(want.abs().max())
