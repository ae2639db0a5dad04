"""FLNR ``save_pretrained`` / ``from_pretrained`` (huggingface_hub's mixin layout), local folders only, checked."""
import json
import pickle

import numpy as np
import pytest
import torch

from vision.denoise import denoise
from vision.denoise.flnr import FLNR, load_flnr


def _frame(rng, h=24, w=32):
    return {"color": torch.from_numpy(rng.gamma(1.0, 0.5, (h, w, 3)).astype(np.float32)),
            "albedo": torch.from_numpy(rng.uniform(0.1, 0.9, (h, w, 3)).astype(np.float32)),
            "normal": torch.nn.functional.normalize(torch.from_numpy(rng.normal(size=(h, w, 3)).astype(np.float32)), dim=-1),
            "depth": torch.from_numpy(rng.uniform(1, 5, (h, w, 1)).astype(np.float32))}


@pytest.mark.slow  # two FLNR frames and a save: ~15 s on 2 cores
def test_round_trip_gives_the_bundled_files_results(tmp_path, rng):
    from vision.bundled import asset_path
    from vision.denoise.flnr.loading import BUNDLED

    bundled = FLNR.from_file(asset_path(*BUNDLED))  # the safetensors file loader: the independent reference
    bundled.save_pretrained(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "config.json").read_text())["widths"] == bundled.config["widths"]
    loaded = FLNR.from_pretrained(tmp_path / "m")
    assert loaded.config == bundled.config and not loaded.training
    for k, v in bundled.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k]), k
    f = _frame(rng)
    a = denoise(f.pop("color"), **f, model="flnr", weights=bundled)
    f = _frame(np.random.default_rng(0))
    b = denoise(f.pop("color"), **f, model="flnr", weights=str(tmp_path / "m"))  # load_flnr takes the folder
    assert torch.equal(a, b)  # the rng fixture is default_rng(0): the same frame


def test_a_pruned_model_keeps_its_own_config(tmp_path):
    small = FLNR(widths=(8, 8, 8, 8), hidden=4, guides=2, radii=(4,))
    small.save_pretrained(tmp_path / "s")
    back = load_flnr(tmp_path / "s")
    assert back.config["widths"] == [8, 8, 8, 8] and back.config["guides"] == 2


def test_hostile_folders_fail_in_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        FLNR.from_pretrained(tmp_path / "no-such-folder")  # a hub id is not fetched either
    with pytest.raises(FileNotFoundError, match="no config.json"):
        FLNR.from_pretrained(tmp_path)
    FLNR(widths=(8, 8, 8, 8), hidden=4, guides=2, radii=(4,)).save_pretrained(tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps(dict(cfg, widths=[100_000_000, 8, 8, 8])))
    with pytest.raises(ValueError, match="config.json") as err:  # refused before anything is allocated
        FLNR.from_pretrained(tmp_path / "m")
    assert "\n" not in str(err.value)
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "m" / "model.safetensors").write_bytes(pickle.dumps({"x": 1}))
    with pytest.raises(ValueError):
        FLNR.from_pretrained(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text("[1, 2")
    with pytest.raises(ValueError, match="not JSON"):
        FLNR.from_pretrained(tmp_path / "m")


def test_the_folder_is_what_huggingface_hubs_mixin_writes(tmp_path):
    hub = pytest.importorskip("huggingface_hub")

    class MixinFLNR(FLNR, hub.PyTorchModelHubMixin):  # the mixin's own save and load: the independent reference
        pass

    model = FLNR(widths=(8, 8, 8, 8), hidden=4, guides=2, radii=(4,), antialias=True)
    model.save_pretrained(tmp_path / "ours")
    reference = MixinFLNR(widths=(8, 8, 8, 8), hidden=4, guides=2, radii=(4,), antialias=True)
    reference.load_state_dict(model.state_dict())
    hub.PyTorchModelHubMixin.save_pretrained(reference, tmp_path / "mixin")
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "mixin" / name).read_bytes(), name
    back = hub.PyTorchModelHubMixin.from_pretrained.__func__(MixinFLNR, str(tmp_path / "ours"))
    for k, v in model.state_dict().items():
        assert torch.equal(v, back.state_dict()[k]), k


def test_push_to_hub_says_how_to_publish(tmp_path):
    model = FLNR(widths=(8, 8, 8, 8), hidden=4, guides=2, radii=(4,))
    for call in (lambda: model.push_to_hub("me/flnr"), lambda: model.save_pretrained(tmp_path / "m", push_to_hub=True)):
        with pytest.raises(NotImplementedError, match="upload_folder"):
            call()
    assert not (tmp_path / "m").exists()
