"""A run folder travels (it predicts and evaluates after the --pretrained file is
gone, its card's snippet reproduces its features, its adapters name their base), LoRA is never trained on
random weights silently, convolutional backbones take LoRA on their convolutions, and a failed start leaves
no run folder behind."""
from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from cli_checks import one_line_error
from test_dense_adapters import _write_data
from test_finetune import TINY
from vision.pipelines.cli import main

FAST = ["--epochs", "1", "--batch-size", "4", "--img-size", "32", "--threads", "1", "--quiet", "--ema", "0"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def _vig_weights(path):
    """A tiny ViG's full timm state dict as a local safetensors file: the '--pretrained FILE' of the tests."""
    import timm

    import vision  # noqa: F401

    torch.manual_seed(3)
    ref = timm.create_model("vig_tiny_patch16_224", img_size=32, **TINY)
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))
    return path


def _finetune(data, run, *extra):
    return main(["finetune", "--task", "depth", "--data", str(data), "-o", str(run), *FAST,
                 "--backbone-kwargs", json.dumps(TINY), *extra])


def _image(path, size=(48, 64)):
    from vision.io import write_image

    write_image(path, np.random.default_rng(0).uniform(size=(*size, 3)).astype(np.float32), bits=16)
    return path


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """A LoRA run on a tiny ViG whose --pretrained file has since been moved away."""
    root = tmp_path_factory.mktemp("portable")
    torch.set_num_threads(1)
    data = root / "data"
    _write_data(data)
    weights = _vig_weights(root / "w.safetensors")
    run = root / "run"
    assert _finetune(data, run, "--pretrained", str(weights), "--lora-rank", "4") == 0
    image = _image(root / "img.png")
    assert main(["predict", str(run), str(image), "-o", str(root / "before"), "--format", "npy"]) == 0
    weights.rename(root / "elsewhere.safetensors")
    return dict(root=root, data=data, run=run, image=image)


# ---------------------------------------------------------------- 1. a run folder is portable

def test_predict_and_evaluate_after_the_pretrained_file_is_gone(lora_run, capsys):
    from peft import PeftModel

    root, run = lora_run["root"], lora_run["run"]
    assert not (root / "w.safetensors").exists()
    assert main(["predict", str(run), str(lora_run["image"]), "-o", str(root / "after"), "--format", "npy"]) == 0
    before, after = np.load(root / "before" / "img.npy"), np.load(root / "after" / "img.npy")
    assert before.shape == (48, 64, 1) and np.array_equal(before, after)
    scores = root / "scores.json"
    assert main(["evaluate", str(run), "--data", str(lora_run["data"]), "--split", "all", "--json", str(scores)]) == 0
    assert "abs_rel" in json.loads(scores.read_text())[1]
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["pretrained"].endswith("w.safetensors")
    # the base weights are stored once, under timm's own names, and the adapters name them
    adapter_cfg = json.loads((run / "adapter" / "adapter_config.json").read_text())
    assert adapter_cfg["base_model_name_or_path"] == "../base.safetensors"
    assert (run / "adapter" / adapter_cfg["base_model_name_or_path"]).resolve() == (run / "base.safetensors").resolve()
    import timm

    from vision.pipelines.training.dense_model import load_run

    kwargs = load_run(run)[0].create_kwargs
    assert kwargs == dict(img_size=32, **TINY)
    fresh = timm.create_model("vig_tiny_patch16_224", features_only=True, **kwargs)
    fresh.load_state_dict(load_file(str(run / "base.safetensors")))  # strict: exactly the backbone
    assert isinstance(PeftModel.from_pretrained(fresh, str(run / "adapter")), PeftModel)
    moved = root / "moved" / "run"  # and the folder itself moves
    shutil.copytree(run, moved)
    # a timm tag or hf-hub: name whose cache is gone is the same case: config.json's pretrained is never read again
    cfg["pretrained"] = "hf-hub:nobody/not-in-any-cache"
    (moved / "config.json").write_text(json.dumps(cfg))
    assert main(["predict", str(moved), str(lora_run["image"]), "-o", str(root / "moved_out"), "--format", "npy"]) == 0
    assert np.array_equal(before, np.load(root / "moved_out" / "img.npy"))


# ---------------------------------------------------------------- 2. the card's snippet reproduces the run

def _snippet_features(run):
    from vision.pipelines.training.dense_model import load_run

    card = (run / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", card, re.S).group(1)
    assert "pretrained=False" in code
    assert "base.safetensors" in code or not (run / "base.safetensors").exists()
    namespace: dict = {}
    exec(compile(code, str(run / "README.md"), "exec"), namespace)  # the card as it stands
    model, _ = load_run(run)
    image = namespace["image"]
    with torch.no_grad():
        expected = model.backbone((image - model.mean) / model.std)
    return namespace["features"], expected


def test_card_snippet_gives_the_runs_own_features(lora_run):
    got, expected = _snippet_features(lora_run["run"])
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    # and the features are those of the pretrained base, not of a random one (the off-by-2.5 of the issue)
    card = (lora_run["run"] / "README.md").read_text()
    assert "load_file(f'{run}/base.safetensors')" in card and "w.safetensors" in card
    assert "neither that file nor the hub cache" in card


def test_card_snippet_of_a_full_finetuning_run(tmp_path):
    data = tmp_path / "data"
    _write_data(data)
    run = tmp_path / "run"
    assert _finetune(data, run, "--pretrained", str(_vig_weights(tmp_path / "w.safetensors")), "--lora-rank", "0",
                     "--limit", "4") == 0
    (tmp_path / "w.safetensors").unlink()
    got, expected = _snippet_features(run)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=0)


# ---------------------------------------------------------------- 3. no LoRA on random weights, silently

def test_lora_on_a_random_backbone_is_refused_and_the_default_trains_it_whole(tmp_path, capsys):
    data = tmp_path / "data"
    _write_data(data)
    run = tmp_path / "refused"
    assert _finetune(data, run, "--lora-rank", "4") == 2
    one_line_error(capsys, "--lora-rank 4", "--pretrained")
    assert not run.exists()
    assert _finetune(data, run, "--lora-rank", "4", "--merge") == 2  # one line too, whatever else is asked
    one_line_error(capsys, "--lora-rank 4", "--pretrained")
    # the help's own example (no --lora-rank, no --pretrained): the whole backbone, said so
    run = tmp_path / "default"
    assert _finetune(data, run, "--limit", "4") == 0
    out = capsys.readouterr().out
    assert "training the whole backbone from random weights" in out
    assert json.loads((run / "config.json").read_text())["lora_rank"] == 0
    assert not (run / "adapter").exists()
    # the help says what the command does
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "vision finetune --task depth --backbone vig_tiny_patch16_224 --data data/scenes -o runs/depth" in text
    assert "(no --pretrained: the whole backbone is trained from random weights)" in text
    assert "--lora-rank R > 0 is refused" in text and "then use --lora-rank 0" not in text
    # from Python, LoRA on random weights warns (and the failed start below leaves nothing)
    from test_finetune import tiny_cfg
    from vision.pipelines.training.finetune import train

    with pytest.warns(UserWarning, match="without pretrained weights"), pytest.raises(ValueError, match="empty"):
        train(tiny_cfg(lora_rank=4), tmp_path / "py", train_set=[], val_set=[], progress=False, log=lambda *a: None)
    assert not (tmp_path / "py").exists()


# ---------------------------------------------------------------- 4. LoRA on convolutions (ResNet)

@pytest.mark.slow
def test_resnet_takes_lora_on_its_convolutions(tmp_path):
    import timm

    from vision.pipelines.training.dense_model import build_model, load_run, lora_targets

    data = tmp_path / "data"
    _write_data(data)
    torch.manual_seed(5)
    ref = timm.create_model("resnet18", pretrained=False)  # offline: weights from a local file
    with torch.no_grad():
        for name, b in ref.named_buffers():
            if name.endswith("running_mean"):
                b.normal_(0, 0.1)  # non-trivial statistics, to show they stay frozen under LoRA
    path = tmp_path / "r18.safetensors"
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))
    plain = timm.create_model("resnet18", pretrained=False, features_only=True)
    targets = lora_targets(plain)
    assert "conv1" in targets and "layer1.0.conv1" in targets and "layer2.0.downsample.0" in targets
    run = tmp_path / "run"
    assert main(["finetune", "--task", "depth", "--data", str(data), "-o", str(run), *FAST, "--limit", "4",
                 "--backbone", "resnet18", "--pretrained", str(path), "--lora-rank", "2", "--ema", "0.5"]) == 0
    adapted = {n.split(".lora_A")[0] for n, _ in load_run(run)[0].named_parameters() if ".lora_A" in n}
    assert adapted == {"backbone.base_model.model." + t for t in targets}  # every ungrouped Conv2d
    base = load_file(str(run / "base.safetensors"))
    torch.testing.assert_close(base["bn1.running_mean"], ref.state_dict()["bn1.running_mean"], rtol=0, atol=0)
    image = _image(tmp_path / "img.png", (40, 56))
    assert main(["predict", str(run), str(image), "-o", str(tmp_path / "a"), "--format", "npy"]) == 0
    path.unlink()
    assert main(["predict", str(run), str(image), "-o", str(tmp_path / "b"), "--format", "npy"]) == 0
    assert np.array_equal(np.load(tmp_path / "a" / "img.npy"), np.load(tmp_path / "b" / "img.npy"))
    model, cfg = load_run(run)
    assert cfg.lora_rank == 2 and any("lora_A" in n for n, _ in model.backbone.named_parameters())
    built = build_model(cfg.__class__(**dict(cfg.__dict__, pretrained=None)))
    assert built.frozen_norms and not any(m.training for m in built.train().backbone.modules()
                                          if isinstance(m, torch.nn.BatchNorm2d))


# ---------------------------------------------------------------- 5. a failed start leaves nothing behind

def test_a_failed_start_leaves_no_run_folder(tmp_path, capsys):
    data = tmp_path / "data"
    _write_data(data)
    run = tmp_path / "run"
    assert _finetune(data, run, "--backbone", "no_such_model") == 2
    one_line_error(capsys, "unknown backbone")
    assert not run.exists()
    empty = tmp_path / "empty"
    (empty / "images").mkdir(parents=True)
    (empty / "targets").mkdir()
    assert _finetune(empty, run) == 2
    capsys.readouterr()
    assert not run.exists()
    # a folder that was there before is the user's: it stays
    run.mkdir()
    assert _finetune(data, run, "--backbone", "no_such_model") == 2
    capsys.readouterr()
    assert run.is_dir() and not any(run.iterdir())
