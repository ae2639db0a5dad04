"""What timm, peft and accelerate users rely on: a ViT fine-tuned at one size predicts at any size, LoRA
adapters are peft-native (save_pretrained / PeftModel.from_pretrained / merge), resume is bit-identical,
mixed precision and gradient accumulation are Accelerate's and honoured, pretrained names never download."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from test_finetune import Crop, tiny_cfg
from vision.pipelines.training.dense_model import DenseConfig, build_model, load_run, predict_raw

VIT = dict(depth=2, embed_dim=32, num_heads=2, out_indices=2)


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def _quiet(*_):
    return None


def _write_data(root):
    from test_finetune import write_crops

    return write_crops(root)


def test_vit_lora_finetune_predicts_at_other_sizes_and_adapters_are_peft_native(tmp_path):
    import timm
    from peft import PeftModel

    from vision.dense import TASKS
    from vision.io import write_image
    from vision.pipelines.cli import main

    data = tmp_path / "data"
    _write_data(data)
    run = tmp_path / "run"
    weights = tmp_path / "vit.safetensors"  # LoRA needs pretrained weights: a local file stands in for them
    save_file({k: v.contiguous() for k, v in timm.create_model(
        "vit_small_patch16_224", img_size=32, **{k: v for k, v in VIT.items() if k != "out_indices"}).state_dict().items()},
        str(weights))
    assert main(["finetune", "--task", "depth", "--data", str(data), "-o", str(run), "--epochs", "1",
                 "--pretrained", str(weights),
                 "--batch-size", "4", "--img-size", "32", "--backbone", "vit_small_patch16_224", "--lora-rank", "4",
                 "--lora-alpha", "8", "--lora-targets", "qkv,proj,fc1,fc2", "--merge", "--threads", "1", "--quiet",
                 "--backbone-kwargs", json.dumps(VIT)]) == 0
    # trained at 32 px (a 2 x 2 token grid): predict at two other sizes, one not a multiple of 16
    rng = np.random.default_rng(1)
    for h, w in ((64, 48), (40, 72)):
        write_image(tmp_path / f"im_{h}x{w}.png", rng.uniform(size=(h, w, 3)).astype(np.float32), bits=16)
        out = tmp_path / f"pred_{h}x{w}"
        assert main(["predict", str(run), str(tmp_path / f"im_{h}x{w}.png"), "-o", str(out), "--format", "npy"]) == 0
        assert np.load(out / f"im_{h}x{w}.npy").shape == (h, w, 1)
    # evaluate runs it on the bundled 128 x 128 renders (4 x the training size)
    from vision.bundled import asset_path

    scores = tmp_path / "scores.json"
    assert main(["evaluate", str(run), "--data", str(asset_path("scenes")), "--split", "all", "--json",
                 str(scores)]) == 0
    assert "edge_abs_rel" in json.loads(scores.read_text())[1]
    # the adapter folder is what peft writes, and loads onto a fresh timm model
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in (run / "adapter").iterdir()}
    adapter_cfg = json.loads((run / "adapter" / "adapter_config.json").read_text())
    assert adapter_cfg["r"] == 4 and adapter_cfg["lora_alpha"] == 8
    assert sorted(adapter_cfg["target_modules"]) == ["fc1", "fc2", "proj", "qkv"]
    model, cfg = load_run(run)
    assert isinstance(model.backbone, PeftModel)
    fresh = timm.create_model("vit_small_patch16_224", features_only=True, img_size=32, dynamic_img_size=True, **VIT)
    fresh.load_state_dict(load_file(str(run / "base.safetensors")))  # the frozen weights, under timm's names
    loaded = PeftModel.from_pretrained(fresh, str(run / "adapter")).eval()
    x = torch.rand(2, 3, 48, 64)
    with torch.no_grad():
        ours = model.backbone((x - model.mean) / model.std)[-1]
        theirs = loaded((x - model.mean) / model.std)[-1]
    assert (ours - theirs).abs().max() <= 1e-5
    task = TASKS["depth"]
    model.backbone = loaded  # same head, peft-loaded backbone: same predictions
    again, _ = load_run(run)
    assert (predict_raw(model, task, x) - predict_raw(again, task, x)).abs().max() <= 1e-5
    # --merge: the adapters folded in, predictions the same without peft
    merged, mcfg = load_run(run / "merged")
    assert mcfg.lora_rank == 0 and not isinstance(merged.backbone, PeftModel)
    assert not any("lora_" in n for n, _ in merged.named_parameters())
    assert (predict_raw(merged, task, x) - predict_raw(again, task, x)).abs().max() <= 1e-5
    # the run folder is a model card with the exact command
    card = (run / "README.md").read_text()
    assert "vit_small_patch16_224" in card and "token-local" in card and "abs_rel" in card
    assert "near edges" in card and "edge" in card and "--lora-rank 4" in card.replace("'", "")


def _train(cfg, run, data, **kw):
    from vision.pipelines.training.finetune import train

    return train(cfg, run, train_set=data, val_set=data, progress=False, log=_quiet, **kw)


@pytest.mark.slow
def test_resume_is_bit_identical_to_training_in_one_go(tmp_path):
    data = Crop("depth")
    cfg = dict(epochs=2, lora_dropout=0.1)  # dropout and flips: the RNG must be restored too
    _train(tiny_cfg(**cfg), tmp_path / "once", data)
    # the same 2-epoch schedule, stopped after epoch 1, then resumed
    first = _train(tiny_cfg(**dict(cfg, stop_after=1)), tmp_path / "split", data)
    assert [r["epoch"] for r in first] == [1]
    history = _train(tiny_cfg(**cfg), tmp_path / "split", data, resume=True)
    assert [r["epoch"] for r in history] == [1, 2]
    for name in ("state/model.safetensors", "model.safetensors", "state/resume.safetensors"):
        a, b = (load_file(str(tmp_path / r / name)) for r in ("once", "split"))
        assert set(a) == set(b) and a
        for k in a:
            assert torch.equal(a[k], b[k]), (name, k)


@pytest.mark.slow
def test_cli_one_plus_one_epochs_with_resume_equals_two(tmp_path):
    from vision.pipelines.cli import main

    data = tmp_path / "data"
    _write_data(data)
    import timm

    weights = tmp_path / "vig.safetensors"  # LoRA needs pretrained weights: a local file stands in for them
    save_file({k: v.contiguous() for k, v in timm.create_model(
        "vig_tiny_patch16_224", img_size=32, **tiny_cfg().extra).state_dict().items()}, str(weights))
    args = ["finetune", "--task", "depth", "--data", str(data), "--epochs", "2", "--batch-size", "4",
            "--img-size", "32", "--lora-rank", "4", "--pretrained", str(weights), "--threads", "1", "--quiet", "--last",
            "--backbone-kwargs", json.dumps(tiny_cfg().extra)]
    assert main(args + ["-o", str(tmp_path / "once")]) == 0
    assert main(args + ["-o", str(tmp_path / "split"), "--stop-after", "1"]) == 0
    assert main(args + ["-o", str(tmp_path / "split"), "--resume"]) == 0
    for name in ("model.safetensors", "adapter/adapter_model.safetensors"):
        a, b = (load_file(str(tmp_path / r / name)) for r in ("once", "split"))
        assert a and all(torch.equal(a[k], b[k]) for k in a), name


def test_mixed_precision_is_accelerates_and_honoured(tmp_path):
    data = Crop("depth")
    seen = []
    import vision.pipelines.training.finetune as ft

    orig = ft.build_model

    def build(cfg):
        model = orig(cfg)
        # the attention projections: autocast runs linear layers in the low precision
        qkv = next(m for n, m in model.backbone.named_modules() if n.endswith("attn.qkv.base_layer"))
        qkv.register_forward_hook(lambda m, inp, out: seen.append(out.dtype) if m.training else None)
        return model

    ft.build_model = build
    try:
        # a timm ViT: CPU autocast covers its ops (the ViG GLA kernel's CPU path is float32 only)
        vit = dict(backbone="vit_small_patch16_224", extra=VIT, ema=0)
        _train(tiny_cfg(mixed_precision="bf16", **vit), tmp_path / "bf16", data)
        assert seen and set(seen) == {torch.bfloat16}
        seen.clear()
        _train(tiny_cfg(mixed_precision="no", **vit), tmp_path / "fp32", data)
        assert seen and set(seen) == {torch.float32}
    finally:
        ft.build_model = orig
    assert "mixed precision bf16" in (tmp_path / "bf16" / "README.md").read_text()
    with pytest.raises(ValueError, match="--mixed-precision fp17"):
        _train(tiny_cfg(mixed_precision="fp17"), tmp_path / "bad", data)


def test_gradient_accumulation_equals_the_larger_batch(tmp_path):
    data = Crop("depth")  # 12 images
    common = dict(ema=0, clip=0, lora_rank=0, mixed_precision="no")
    big = _train(tiny_cfg(batch_size=4, **common), tmp_path / "big", data)
    acc = _train(tiny_cfg(batch_size=2, grad_accum=2, **common), tmp_path / "acc", data)
    assert big[-1]["steps"] == acc[-1]["steps"] == 3  # 6 micro-batches of 2 = 3 optimiser steps
    a, b = (load_file(str(tmp_path / r / "state" / "model.safetensors")) for r in ("big", "acc"))
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-5
    plain = _train(tiny_cfg(batch_size=2, **common), tmp_path / "plain", data)
    assert plain[-1]["steps"] == 6
    with pytest.raises(ValueError, match="--grad-accum"):
        _train(tiny_cfg(grad_accum=0), tmp_path / "bad", data)


def test_timm_errors_and_pretrained_names_are_one_line(tmp_path):
    cfg = DenseConfig(task="depth", backbone="vit_small_patch16_224", img_size=32, lora_rank=0,
                      extra=dict(depth=2, embed_dim=32, num_heads=2))
    with pytest.raises(ValueError, match=r"last-n \(3\)") as info:
        build_model(cfg)
    assert len(str(info.value).splitlines()) == 1
    for spec, words in (("vit_small_patch16_224.no_such_tag", "no pretrained weights"),
                        ("hf-hub:nobody/no-such-model", "not in the local Hugging Face cache"),
                        ("not a name at all", "neither a file")):
        bad = DenseConfig(**dict(tiny_cfg().__dict__, pretrained=spec))
        with pytest.raises(ValueError, match=words) as info:
            build_model(bad)
        assert len(str(info.value).splitlines()) == 1


def test_pretrained_names_load_from_the_local_cache_only(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub
    import timm
    from safetensors.torch import save_file

    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))  # an empty cache with what we put in it
    torch.manual_seed(5)
    ref = timm.create_model("vit_small_patch16_224", img_size=32, **{k: v for k, v in VIT.items() if k != "out_indices"})

    def cache(repo, files):  # the layout huggingface_hub writes: refs/main -> snapshots/<rev>/<file>
        root = tmp_path / "hub" / ("models--" + repo.replace("/", "--"))
        (root / "refs").mkdir(parents=True)
        (root / "refs" / "main").write_text("0" * 40)
        snap = root / "snapshots" / ("0" * 40)
        snap.mkdir(parents=True)
        for name, write in files.items():
            write(snap / name)

    weights = {"model.safetensors": lambda p: save_file(ref.state_dict(), str(p))}
    cache("timm/vit_small_patch16_224.augreg_in21k", weights)
    cache("someone/tiny-vit", dict(weights, **{"config.json": lambda p: p.write_text(
        json.dumps({"architecture": "vit_small_patch16_224", "num_classes": 1000}))}))
    want = ref.state_dict()["blocks.1.attn.qkv.weight"]
    for spec in ("vit_small_patch16_224.augreg_in21k", "hf-hub:someone/tiny-vit"):
        cfg = DenseConfig(task="depth", backbone="vit_small_patch16_224", img_size=32, lora_rank=0, extra=VIT,
                          pretrained=spec)
        torch.manual_seed(99)  # another seed: only the cached file can make the weights equal
        got = dict(build_model(cfg).backbone.named_parameters())["model.blocks.1.attn.qkv.weight"]
        assert torch.equal(got, want), spec
    wrong = DenseConfig(task="depth", backbone="vig_tiny_patch16_224", img_size=32, pretrained="hf-hub:someone/tiny-vit")
    with pytest.raises(ValueError, match="holds vit_small_patch16_224 weights, not vig_tiny_patch16_224"):
        build_model(wrong)


def test_missing_tracker_is_one_line(tmp_path):
    from accelerate.tracking import get_available_trackers

    if "tensorboard" in {str(t) for t in get_available_trackers()}:
        pytest.skip("tensorboard is installed here")
    with pytest.raises(ValueError, match="--log-with tensorboard: that tracker is not installed"):
        _train(tiny_cfg(log_with="tensorboard"), tmp_path / "run", Crop("depth"))


def test_fixed_size_backbone_is_resized_and_dynamic_ones_are_not():
    from vision.dense import TASKS

    task = TASKS["depth"]
    beit = DenseConfig(task="depth", backbone="beit_base_patch16_224", img_size=32, lora_rank=4,
                       extra=dict(depth=2, embed_dim=32, num_heads=2, out_indices=2))
    torch.manual_seed(0)
    model = build_model(beit).eval()
    x = torch.rand(1, 3, 48, 40)
    out = predict_raw(model, task, x, tta=False)  # BEiT's relative position tables fix it to 32 x 32
    assert out.shape == (1, 1, 48, 40) and model.fixed_size
    F = torch.nn.functional
    with torch.no_grad():
        inner = F.interpolate(F.pad(x, (0, 8, 0, 0), mode="replicate"), size=(32, 32), mode="bilinear",
                              align_corners=False, antialias=True)
        want = F.interpolate(model(inner), size=(48, 48), mode="bilinear", align_corners=False)[..., :48, :40]
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    vit = build_model(DenseConfig(task="depth", backbone="vit_small_patch16_224", img_size=32, lora_rank=0,
                                  extra=VIT)).eval()
    assert vit.create_kwargs["dynamic_img_size"] and not hasattr(vit, "train_size")
    assert predict_raw(vit, task, torch.rand(1, 3, 48, 64), tta=False).shape[-2:] == (48, 64)


def test_runs_of_earlier_versions_with_unwrapped_adapters_still_load(tmp_path):
    from vision.dense import TASKS
    from vision.pipelines.training.dense_model import save_run_files
    from safetensors.torch import save_file

    cfg = tiny_cfg(lora_rank=4)
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_()  # non-zero adapters, so a missed adapter would show
    save_run_files(tmp_path, cfg, model)
    from vision.pipelines.training.dense_model import base_state

    for name in ("model.safetensors", "base.safetensors"):  # the key names peft's bare injection gave
        # (base.safetensors then held the frozen tensors under the model's names, with no format tag)
        state = load_file(str(tmp_path / name)) if name == "model.safetensors" else base_state(model)
        save_file({k.replace("backbone.base_model.model.", "backbone."): v for k, v in state.items()},
                  str(tmp_path / name))
    again, _ = load_run(tmp_path)
    x = torch.rand(1, 3, 32, 32)
    task = TASKS["depth"]
    assert torch.equal(predict_raw(again, task, x), predict_raw(model, task, x))


def test_precision_comes_from_the_flag_the_launcher_or_accelerate_config(tmp_path, monkeypatch):
    import accelerate.commands.config as config

    from vision.pipelines.training.finetune import configured_precision

    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    monkeypatch.setattr(config, "default_config_file", str(tmp_path / "missing.yaml"))
    assert configured_precision(None) == "no"
    path = tmp_path / "default_config.yaml"  # what `accelerate config` writes
    path.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nmixed_precision: bf16\n"
                    "use_cpu: true\ndebug: false\n")
    monkeypatch.setattr(config, "default_config_file", str(path))
    assert configured_precision(None) == "bf16"
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")  # accelerate launch --mixed_precision fp16
    assert configured_precision(None) == "fp16"
    assert configured_precision("no") == "no"
