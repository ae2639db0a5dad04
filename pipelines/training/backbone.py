"""The backbone of a dense model: a timm ``features_only`` network that takes any input size, its
pretrained weights found locally (never downloaded), and peft LoRA adapters on it.

    >>> backbone = create_backbone(cfg)                       # timm.create_model(..., features_only=True)
    >>> backbone = add_lora(backbone, lora_config(cfg, backbone))  # a peft.PeftModel; save_pretrained() works on it

An adapter folder written by ``save_pretrained`` loads onto a fresh backbone made the same way, given the
run's base weights (RUN/base.safetensors, :func:`plain_state`; no ``--pretrained`` file or hub cache needed)::

    fresh = timm.create_model(cfg.backbone, features_only=True, **backbone.create_kwargs)
    fresh.load_state_dict(safetensors.torch.load_file("RUN/base.safetensors"))
    model = peft.PeftModel.from_pretrained(fresh, "RUN/adapter")
"""
from __future__ import annotations

import os
import re
from pathlib import Path
import json

from torch import nn
import torch.hub

from .run_config import _NAME, check_backbone_kwargs


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def backbone_kwargs(cfg) -> list[dict]:
    """The ``timm.create_model`` arguments to try, in order, besides ``features_only``: the training size
    with ``dynamic_img_size=True`` (so a ViT trained at 64 px predicts at any size: its position embedding
    is interpolated per input), the size alone, then neither (convolutional models take no size); each
    with ``cfg.extra`` on top."""
    extra = check_backbone_kwargs(cfg.extra, "backbone settings (extra)", "")
    tries = [dict(img_size=cfg.img_size, dynamic_img_size=True), dict(img_size=cfg.img_size), {}]
    return [dict(t, **extra) for t in tries]


def resolve_pretrained(spec: str) -> tuple[str | None, str]:
    """(timm architecture or None, local weights file) for ``--pretrained``: a file path, a timm model
    name (``vit_small_patch16_224.augreg_in21k``) or an ``hf-hub:org/repo`` name, the last two read from
    the local Hugging Face / torch hub cache only. Anything else is one ValueError line."""
    if Path(spec).is_file():
        return None, spec

    # lazy: the [dense] extra's (timm takes seconds); `vision finetune --help` imports this module via dense_model
    import timm
    from huggingface_hub import try_to_load_from_cache  # lazy: as above

    def cached(repo: str, names) -> str | None:
        for name in names:
            hit = try_to_load_from_cache(repo, name)
            if isinstance(hit, str):
                return hit
        return None

    weights = ("model.safetensors", "open_clip_model.safetensors", "pytorch_model.bin")
    if spec.startswith("hf-hub:"):
        repo = spec[len("hf-hub:"):].split("@")[0]
        config, file = cached(repo, ["config.json"]), cached(repo, weights)
        if config is None or file is None:
            raise ValueError(f"--pretrained {spec}: not in the local Hugging Face cache (nothing is downloaded); "
                             f"fetch it once with `huggingface-cli download {repo}` or give a local file")
        arch = json.loads(Path(config).read_text()).get("architecture")
        return arch, file
    if timm.is_model(spec.split(".")[0]) and "/" not in spec:
        try:
            pcfg = timm.models.get_pretrained_cfg(spec, allow_unregistered=False)
        except (RuntimeError, ValueError):
            pcfg = None
        if pcfg is None:
            raise ValueError(f"--pretrained {spec}: timm has no pretrained weights of that name "
                             f"(e.g. {', '.join(timm.list_pretrained(spec.split('.')[0] + '*')[:3]) or 'none'})")
        file = None
        if pcfg.hf_hub_id:
            repo = pcfg.hf_hub_id
            file = cached(repo, [pcfg.hf_hub_filename] if pcfg.hf_hub_filename else weights)
        if file is None and pcfg.url:
            local = os.path.join(torch.hub.get_dir(), "checkpoints", os.path.basename(pcfg.url.split("?")[0]))
            file = local if os.path.isfile(local) else None
        if file is None:
            raise ValueError(f"--pretrained {spec}: its weights are not in the local cache (nothing is downloaded; "
                             f"HF offline); fetch {pcfg.hf_hub_id or pcfg.url} once, or give a local file")
        return spec.split(".")[0], file
    raise ValueError(f"--pretrained {spec}: neither a file, a timm model name nor an hf-hub: name")


def create_backbone(cfg) -> nn.Module:
    """``timm.create_model(cfg.backbone, features_only=True, ...)`` with :func:`backbone_kwargs`, loading
    ``cfg.pretrained`` (see :func:`resolve_pretrained`). timm's own errors become one ValueError line."""
    import timm  # lazy: as in resolve_pretrained

    if not timm.is_model(cfg.backbone.split(".")[0]):
        raise ValueError(f"unknown backbone {cfg.backbone!r}; e.g. vig_tiny_patch16_224, hvig_tiny_224, "
                         "vit_small_patch16_224 (any timm model with features_only)")

    if not _NAME.match(cfg.backbone):  # no hub prefix or path: timm would fetch a config for one
        raise ValueError(f"--backbone {cfg.backbone!r:.80} is not a timm model name")
    extra = dict(features_only=True, pretrained=False)  # timm never downloads: weights come from a local file
    if cfg.pretrained:
        looks_like_path = not cfg.pretrained.startswith("hf-hub:") and re.search(
            r"[\\/]|\.(pth?|bin|safetensors|ckpt)$", cfg.pretrained)
        if not Path(cfg.pretrained).is_file() and looks_like_path:
            raise FileNotFoundError(f"no backbone checkpoint at {cfg.pretrained}")
        arch, file = resolve_pretrained(cfg.pretrained)
        if arch is not None and arch != cfg.backbone.split(".")[0]:
            raise ValueError(f"--pretrained {cfg.pretrained} holds {arch} weights, not {cfg.backbone}; "
                             f"pass --backbone {arch}")
        extra.update(pretrained=True, pretrained_cfg_overlay=dict(file=str(file)))
    err = None
    for tried in backbone_kwargs(cfg):
        kwargs = dict(tried, **extra)
        try:
            model = timm.create_model(cfg.backbone, **kwargs)
        except TypeError as e:  # a size keyword this model does not take: try the next set
            err = e
            if "unexpected keyword" in str(e) and any(k in str(e) for k in ("img_size", "dynamic_img_size")):
                continue
            break
        except (AssertionError, ValueError, RuntimeError, KeyError, IndexError) as e:
            err = e
            break
        model.create_kwargs = tried  # what a fresh copy needs: timm.create_model(name, features_only=True, **it)
        return model
    hint = ("; choose feature blocks with --backbone-kwargs '{\"out_indices\": N}'"
            if "out of range" in str(err) else "")
    raise ValueError(f"{cfg.backbone} with {kwargs_text(kwargs)}: {_first_line(err)}{hint}") from None


def kwargs_text(kwargs: dict) -> str:
    shown = {k: v for k, v in kwargs.items() if k not in ("pretrained_cfg_overlay", "features_only")}
    return ", ".join(f"{k}: {v}" for k, v in shown.items()) or "defaults"


def lora_targets(backbone: nn.Module) -> list[str]:
    """Names of the modules that receive LoRA adapters by default: every ``nn.Linear`` (the attention / MLP
    projections of transformers and ViG); a convolutional network without one (ResNet, ...) gets them on
    every ungrouped ``nn.Conv2d`` instead, which peft adapts as well (grouped / depthwise convolutions are
    left frozen)."""
    linear = [n for n, m in backbone.named_modules() if isinstance(m, nn.Linear)]
    if linear:
        return linear
    return [n for n, m in backbone.named_modules() if isinstance(m, nn.Conv2d) and m.groups == 1]


def lora_config(cfg, backbone: nn.Module):
    """peft's ``LoraConfig`` of a run: rank, alpha (default = rank), dropout, and targets: every linear
    projection (every convolution where there is none), or ``cfg.lora_targets`` (a list of module-name
    suffixes as peft matches them, or one regular expression that must match whole module names)."""
    from peft import LoraConfig  # lazy: LoRA runs only; a merged run loads and predicts without peft

    targets = cfg.lora_targets if cfg.lora_targets else lora_targets(backbone)
    if not targets:
        raise ValueError("the backbone has no nn.Linear or nn.Conv2d layers to adapt; use --lora-rank 0 "
                         "(full fine-tuning)")
    if not 0 <= cfg.lora_dropout < 1:
        raise ValueError(f"--lora-dropout must be in [0, 1), got {cfg.lora_dropout}")
    return LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha or cfg.lora_rank, target_modules=targets,
                      lora_dropout=cfg.lora_dropout, bias="none")


def plain_state(backbone: nn.Module) -> dict:
    """The base weights of a (peft-wrapped) backbone under the plain timm names, without adapters: what
    ``timm.create_model(NAME, features_only=True, ...).load_state_dict`` takes."""
    inner = backbone.get_base_model() if hasattr(backbone, "get_base_model") else backbone
    return {k.replace(".base_layer.", "."): v.detach().contiguous().cpu() for k, v in inner.state_dict().items()
            if ".lora_" not in k}


def add_lora(backbone: nn.Module, config) -> nn.Module:
    """Freeze ``backbone`` and wrap it as a ``peft.PeftModel`` with LoRA adapters (``config``)."""
    from peft import get_peft_model  # lazy: LoRA runs only; a merged run loads and predicts without peft

    try:
        model = get_peft_model(backbone, config)
    except ValueError as err:  # e.g. targets that match nothing
        raise ValueError(f"--lora-targets {config.target_modules if isinstance(config.target_modules, str) else ','.join(sorted(config.target_modules))}: "
                         f"{_first_line(err)}") from None
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    return model
