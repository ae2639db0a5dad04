"""FLNR.widened: more learned guides, guide-head units or network channels, the same function to start from."""
import shutil

import numpy as np
import pytest
import torch

from vision.bundled import asset_path
from vision.data import read_frame
from vision.denoise import FLNR, load_flnr
from vision.denoise.flnr import parameter_count, read_metadata
from vision.denoise.flnr.surgery import head_rows

GUIDES = ("albedo", "normal", "depth", "ao", "emission")


@pytest.fixture(scope="module")
def crop():
    frame = read_frame(asset_path("scenes", "scene_00000", "frame_00.exr"))
    return {k: torch.from_numpy(np.ascontiguousarray(frame[k][16:80, 8:72], np.float64)).permute(2, 0, 1)[None]
            for k in (*GUIDES, "color")}


def _random_model(seed, **kw):
    """A float64 FLNR whose every weight is random (the network's code, radius logits and blends all matter)."""
    torch.manual_seed(seed)
    model = FLNR(**kw).double()
    with torch.no_grad():
        for p in model.net.out.parameters():
            p.normal_(std=0.05)
        if model.head_out is not None:
            model.head_out.bias[head_rows(model.config)["guides"]:] = 0.5
    return model.eval()


def _run(model, crop, grad=False):
    with torch.set_grad_enabled(grad):
        return model(crop["color"], {k: crop[k] for k in GUIDES})


@pytest.mark.parametrize("grad", [False, True], ids=["banded", "autograd"])
@pytest.mark.parametrize("grow", [{"guides": 6}, {"hidden": 12}, {"widths": [16, 24, 40, 64]},
                                  {"guides": 5, "hidden": 16, "widths": [20, 32, 48, 56]}],
                         ids=["guides", "hidden", "widths", "all"])
def test_widened_computes_the_same_function(crop, grow, grad):
    """The widened model against the model it came from (an independent computation: other shapes, other
    weights), float64, both the banded CPU path and the autograd path; the blends' rows keep their meaning."""
    old = _random_model(3, hidden=8, antialias=True, detail=True)
    new = old.widened(**grow)
    assert new.config == dict(old.config, **grow)
    assert parameter_count(new) > parameter_count(old)
    want, got = _run(old, crop, grad), _run(new, crop, grad)
    assert want.abs().max() > 0.1
    if "guides" in grow:  # a new guide starts small, not 0 (so it has a gradient): the result moves a little
        err = float((got - want).detach().abs().max() / want.detach().abs().max())
        assert 0 < err < 1e-3
    else:
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    rows = head_rows(new.config)  # the old blend rows moved behind the new guides, weights and biases intact
    torch.testing.assert_close(new.head_out.bias[rows["detail"]], old.head_out.bias[head_rows(old.config)["detail"]])


def test_a_new_guide_starts_small_and_gets_a_gradient(crop):
    """An added guide that is exactly 0 gets no gradient at all (slope 0 and guide 0: the fit's first-order change is
    0); the one widened writes is small (GUIDE_START of the old rows' scale) and its row has a gradient."""
    from vision.denoise.flnr.surgery import GUIDE_START

    old = _random_model(4, hidden=8)
    new = old.widened(guides=5).train()
    scale = float(old.head_out.weight.detach().pow(2).mean().sqrt())
    assert 0 < float(new.head_out.weight[4].detach().pow(2).mean().sqrt()) < 3 * GUIDE_START * scale
    out = _run(new, crop, grad=True)
    ((out - crop["color"]) ** 2).mean().backward()
    assert new.head_out.weight.grad[4].abs().max() > 1e-6 * new.head_out.weight.grad[:4].abs().max()
    dead = old.widened(guides=5).train()  # the same with the new row zeroed: no gradient reaches it
    with torch.no_grad():
        dead.head_out.weight[4] = 0.0
    ((_run(dead, crop, grad=True) - crop["color"]) ** 2).mean().backward()
    assert dead.head_out.weight.grad[4].abs().max() == 0
    assert float(new.log_eps[4].detach()) == pytest.approx(float(old.log_eps.detach().mean()))


def test_widened_linear_head_and_refusals(crop):
    old = _random_model(5, hidden=0, guides=3)
    new = old.widened(hidden=0, widths=[16, 24, 40, 48])
    torch.testing.assert_close(_run(new, crop), _run(old, crop), rtol=1e-10, atol=1e-10)
    want, got = _run(old, crop), _run(old.widened(guides=4), crop)
    assert 0 < float((got - want).abs().max() / want.abs().max()) < 1e-3
    for bad in ({"guides": 2}, {"guides": 0}, {"widths": [8, 24, 32, 48]}, {"widths": [16, 24, 32]}, {"guides": 9}):
        with pytest.raises(ValueError, match="only grows"):
            old.widened(**bad)
    with pytest.raises(ValueError, match="linear guide head"):
        old.widened(hidden=4)


def test_train_denoiser_widens_its_init(tmp_path, capsys):
    from vision.pipelines.cli import main

    data = tmp_path / "scenes"
    shutil.copytree(asset_path("scenes"), data)
    tiny = ["--data", str(data), "--epochs", "1", "--steps", "1", "--batch", "1", "--crop", "32", "--quiet"]
    small, big = tmp_path / "small.safetensors", tmp_path / "big.safetensors"
    assert main(["train-denoiser", *tiny, "--widths", "4,6,8", "--hidden", "4", "--detail", "-o", str(small)]) == 0
    assert main(["train-denoiser", *tiny, "--init", str(small), "--guides", "5", "--hidden", "6", "--widths", "4,6,12",
                 "--ema", "0.5", "-o", str(big)]) == 0
    assert "--ema 0.5 " in read_metadata(big)["vision.train.command"]
    model = load_flnr(big)
    assert (model.config["guides"], model.config["hidden"], model.config["widths"]) == (5, 6, [4, 6, 12])
    assert model.config["detail"] is True and model.head_out.out_features == 6
    capsys.readouterr()
    assert main(["train-denoiser", *tiny, "--init", str(small), "--widths", "2,6,8", "-o", str(tmp_path / "x.safetensors")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and "only grows" in err[0] and not (tmp_path / "x.safetensors").exists()
    for bad, says in ((["--init", str(small), "--ema", "1"], "--ema must be a decay in [0, 1)"),
                      (["--guides", "0"], "guides must be 1 to 8"),
                      (["--init", str(small), "--guides", "0"], "only grows"),
                      (["--widths", "16,x"], "--widths must be comma-separated integers")):
        assert main(["train-denoiser", *tiny, *bad, "-o", str(tmp_path / "x.safetensors")]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
        assert len(err) == 1 and says in err[0] and not (tmp_path / "x.safetensors").exists()
    before = small.read_bytes()  # -o naming the --init file: refused, the file untouched
    assert main(["train-denoiser", *tiny, "--init", str(small), "--guides", "5", "-o", str(small)]) == 2
    assert "is the --init file" in capsys.readouterr().err and small.read_bytes() == before


def test_widened_is_seeded_and_leaves_the_callers_random_state_alone():
    old = _random_model(6, hidden=8)
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b = old.widened(guides=5, hidden=12), old.widened(guides=5, hidden=12)
    assert torch.equal(torch.random.get_rng_state(), before)
    for (k, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), k
