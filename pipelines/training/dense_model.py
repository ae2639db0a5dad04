"""A dense-prediction model: a timm backbone (features_only), optional LoRA adapters, and one of our heads;
and the run folder that stores it (config, frozen base weights once, trainable tensors per checkpoint).

    >>> cfg = DenseConfig(task="depth", backbone="vig_tiny_patch16_224", head="token-local", lora_rank=16)
    >>> model = build_model(cfg)
    >>> raw = model(torch.rand(2, 3, 128, 128))      # (2, K, 128, 128) raw head output (e.g. log-depth)

Run folder (written by ``vision finetune``, read by ``vision predict`` and :func:`load_run`)::

    RUN/config.json            DenseConfig: task, backbone, head, LoRA rank, image size, ...
    RUN/base.safetensors       the frozen backbone tensors, written once. LoRA runs: the whole base
                               backbone under timm's own names (``timm.create_model(BACKBONE,
                               features_only=True, ...).load_state_dict`` takes it; format
                               vision-finetune-base/2); full fine-tuning: the frozen tensors (buffers)
                               under the model's names. With it the run loads without the ``--pretrained``
                               file or the hub cache (config.json's ``pretrained`` is a record only; a run
                               without base.safetensors reads that file again)
    RUN/model.safetensors      trainable tensors only (LoRA adapters and head; EMA weights when on) of
                               the best validation epoch (or the last one, select_best=False)
    RUN/adapter/               LoRA runs: the adapters as peft's save_pretrained writes them
                               (adapter_config.json, adapter_model.safetensors), same epoch as model.safetensors;
                               ``base_model_name_or_path`` is ``../base.safetensors``: the base weights,
                               relative to the adapter folder (peft records the string; timm builds the model)
    RUN/merged/                ``--merge``: a complete run with the adapters folded into the backbone (no peft)
    RUN/state/                 ``accelerator.save_state`` of the last epoch (+ EMA, epoch, history), for ``--resume``
    RUN/README.md              the model card: task, backbone, head, data, metrics, the command
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
import inspect
import shutil

import safetensors
import safetensors.torch  # its save_file and load_file looked up when called (tests stand in for them)
import torch
from torch import nn

from vision.dense import TASKS

from .dense_config import (  # noqa: F401 (the run folder's names and DenseConfig, re-exported)
    ADAPTER, BASE, BASE_FORMAT, BASE_REFERENCE, CONFIG, MERGED, WEIGHTS, DenseConfig)
from .run_config import check_head_kwargs


class DenseModel(nn.Module):
    """Backbone features -> head -> raw dense output at the input's resolution.

    ``forward(image)``: image (B, 3, H, W) in [0, 1] with H, W multiples of the backbone's stride-16
    patch; the backbone sees it normalised with its own mean / std; returns (B, K, H, W) raw head
    output (the task's ``decode`` turns it into values). Token heads read the last stride-16 feature
    map; the DPT-style head reads all of them.
    """

    def __init__(self, backbone: nn.Module, head: nn.Module, head_kind: str, index: int, mean, std, patch: int):
        super().__init__()
        self.backbone, self.head, self.head_kind, self.index, self.patch = backbone, head, head_kind, index, patch
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1), persistent=False)

    def train(self, mode: bool = True) -> "DenseModel":
        """``nn.Module.train``; a frozen backbone (LoRA runs: ``frozen_norms``) keeps its batch-norm layers in
        eval mode, so their running statistics stay those of the base weights that base.safetensors holds."""
        super().train(mode)
        if mode and getattr(self, "frozen_norms", False):
            for m in self.backbone.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.eval()
        return self

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        if image.dim() != 4 or image.shape[1] != 3:
            raise ValueError(f"image must be (B, 3, H, W), got {tuple(image.shape)}")
        h, w = image.shape[-2:]
        if h % self.patch or w % self.patch:
            raise ValueError(f"image size {h}x{w} must be a multiple of the backbone's patch {self.patch} (pad it first)")
        feats = self.backbone((image - self.mean) / self.std)
        if self.head_kind == "dpt":
            return self.head(feats, image_size=(h, w))
        f = feats[self.index]
        if self.head_kind == "local-linear":
            return self.head(f, image)
        return self.head(f)


from .backbone import add_lora, create_backbone, lora_config, lora_targets, plain_state  # noqa: E402,F401


def build_model(cfg: DenseConfig, base: dict | None = None) -> DenseModel:
    """The model a config describes, with freshly initialised head (and adapters); base weights as built, or
    ``base`` (a backbone state dict under timm's names, loaded before the adapters are added)."""
    # lazy: vision.heads loads numba loops (half a second); `vision finetune --help` imports this module (DenseConfig)
    from vision.heads import HEADS

    if cfg.task not in TASKS:
        raise ValueError(f"unknown task {cfg.task!r}; choose from {', '.join(TASKS)}")
    if cfg.head not in HEADS:
        raise ValueError(f"unknown head {cfg.head!r}; choose from {', '.join(HEADS)}")
    if cfg.lora_rank < 0:
        raise ValueError(f"--lora-rank must be >= 0, got {cfg.lora_rank}")
    task = TASKS[cfg.task]
    backbone = create_backbone(cfg)
    if base is not None:
        try:
            backbone.load_state_dict(base)
        except RuntimeError as err:
            raise ValueError(f"{BASE} does not fit {cfg.backbone} ({str(err).strip().splitlines()[0]})") from None
    info = backbone.feature_info
    channels, reductions = info.channels(), info.reduction()
    stride16 = [i for i, r in enumerate(reductions) if r == 16]
    if cfg.head != "dpt" and not stride16:
        raise ValueError(f"{cfg.backbone} has no stride-16 feature map (strides {reductions}); token heads need one")
    index = stride16[-1] if stride16 else len(channels) - 1
    dcfg = backbone.pretrained_cfg if hasattr(backbone, "pretrained_cfg") else {}
    mean, std = dcfg.get("mean", (0.485, 0.456, 0.406)), dcfg.get("std", (0.229, 0.224, 0.225))
    head_cls = HEADS[cfg.head]
    fixed = dict(in_dims=channels, out_channels=task.out_channels, patch_size=16, in_strides=reductions) \
        if cfg.head == "dpt" else dict(dim=channels[index], patch_size=16, out_channels=task.out_channels)
    clash = sorted(set(cfg.head_kwargs) & set(fixed))
    if clash:
        raise ValueError(f"head arguments {clash} are set by the backbone and task; remove them from --head-kwargs")

    check_head_kwargs(cfg.head, cfg.head_kwargs, "--head-kwargs", "")
    try:
        head = head_cls(**fixed, **cfg.head_kwargs)
    except TypeError as err:  # an unknown keyword: name the head's real arguments

        allowed = [n for n in inspect.signature(head_cls).parameters if n not in fixed]
        raise ValueError(f"--head-kwargs {cfg.head_kwargs} do not fit the {cfg.head} head ({err}); "
                         f"it takes {', '.join(allowed)}") from None
    create_kwargs = backbone.create_kwargs
    if cfg.lora_rank > 0:
        backbone = add_lora(backbone, lora_config(cfg, backbone))
    model = DenseModel(backbone, head, cfg.head, index, mean, std, patch=16)
    # inputs are padded to a multiple of every feature stride, so stride-32 stages see whole cells
    model.pad_to = math.lcm(16, *[int(r) for r in reductions])
    model.create_kwargs = create_kwargs
    model.frozen_norms = cfg.lora_rank > 0
    if "img_size" in create_kwargs and not create_kwargs.get("dynamic_img_size"):
        model.train_size = cfg.img_size  # maybe fixed to it: predict_raw finds out on another size
    return model


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The tensors a checkpoint holds: every parameter that requires grad (adapters, head, or all)."""
    return {n: p.detach().contiguous().cpu() for n, p in model.named_parameters() if p.requires_grad}


def base_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The frozen tensors (parameters without grad, and persistent buffers) that the run must also keep."""
    frozen = {n: p for n, p in model.named_parameters() if not p.requires_grad}
    frozen.update({n: b for n, b in model.named_buffers() if n in model.state_dict()})
    return {n: t.detach().contiguous().cpu() for n, t in frozen.items()}




def save_run_files(run: Path, cfg: DenseConfig, model: nn.Module, weights: dict[str, torch.Tensor] | None = None) -> None:
    """Write config.json, base.safetensors (once), model.safetensors and, for LoRA runs, adapter/ (peft's
    ``save_pretrained`` of the same ``weights``) into ``run``, each file atomically."""
    run.mkdir(parents=True, exist_ok=True)
    (run / CONFIG).write_text(cfg.to_json())
    backbone = getattr(model, "backbone", None)
    lora = hasattr(backbone, "save_pretrained")
    if not (run / BASE).exists():
        base = plain_state(backbone) if lora else base_state(model)
        meta = {"backbone": cfg.backbone, "pretrained": str(cfg.pretrained or "random init")}
        if lora:
            meta["format"] = BASE_FORMAT
        if base:
            safetensors.torch.save_file(base, str(run / (BASE + ".tmp")), metadata=meta)
            (run / (BASE + ".tmp")).replace(run / BASE)
    weights = trainable_state(model) if weights is None else weights
    safetensors.torch.save_file(weights, str(run / (WEIGHTS + ".tmp")), metadata={"task": cfg.task, "head": cfg.head,
                                                                 "backbone": cfg.backbone})
    (run / (WEIGHTS + ".tmp")).replace(run / WEIGHTS)
    if lora:
        live = trainable_state(model)
        model.load_state_dict(weights, strict=False)
        tmp = run / f".{ADAPTER}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        for config in backbone.peft_config.values():  # timm models have no name_or_path for peft to record
            config.base_model_name_or_path = BASE_REFERENCE
        try:  # no embedding layers are adapted: peft need not look the base up on the Hub
            backbone.save_pretrained(str(tmp), save_embedding_layers=False)
        finally:
            model.load_state_dict(live, strict=False)
        shutil.rmtree(run / ADAPTER, ignore_errors=True)
        tmp.replace(run / ADAPTER)


def merge_run(run, out=None) -> Path:
    """Fold a LoRA run's adapters into its backbone (peft ``merge_and_unload``) and write the result as a
    complete run folder (``RUN/merged`` by default) that loads and predicts without peft."""
    run = Path(run)
    out = run / MERGED if out is None else Path(out)
    model, cfg = load_run(run)
    if cfg.lora_rank == 0:
        raise ValueError(f"{run} has no LoRA adapters to merge (lora_rank 0)")
    model.backbone = model.backbone.merge_and_unload()
    for p in model.parameters():
        p.requires_grad_(True)
    merged = dataclasses.replace(cfg, lora_rank=0, lora_alpha=None, lora_targets=None, lora_dropout=0.0,
                                 pretrained=None)  # every backbone tensor is in model.safetensors
    if (out / BASE).exists():
        (out / BASE).unlink()
    save_run_files(out, merged, model)
    return out


def load_run(run, device="cpu") -> tuple[DenseModel, DenseConfig]:
    """Rebuild the model of a run folder and load its weights (EMA ones when the run used EMA). The base
    weights come from RUN/base.safetensors: the backbone is built without its ``pretrained`` weights, so the
    run loads after the original file and the hub cache are gone. The folder is data: config.json is checked
    key by key (:mod:`.run_config`), its ``pretrained`` is a record that is never read, and timm is asked for
    no weights (``pretrained=False``), so loading a run reads no file outside it and makes no network request."""
    run = Path(run)
    if not (run / CONFIG).is_file() or not (run / WEIGHTS).is_file():
        raise FileNotFoundError(f"{run} is not a finished `vision finetune` run (needs {CONFIG} and {WEIGHTS})")
    if (run / CONFIG).stat().st_size > (1 << 20):
        raise ValueError(f"{run / CONFIG} is over 1 MB; a run config is a few hundred bytes")
    try:
        text = (run / CONFIG).read_text()
    except UnicodeDecodeError:
        raise ValueError(f"{run / CONFIG} is not text (UTF-8 JSON)") from None
    cfg = DenseConfig.from_json(text, str(run / CONFIG))
    state, plain = {}, None
    if (run / BASE).is_file():
        with safetensors.safe_open(str(run / BASE), framework="pt") as fh:
            meta = fh.metadata() or {}
        if meta.get("format") == BASE_FORMAT:
            plain = safetensors.torch.load_file(str(run / BASE))
        else:
            state.update(safetensors.torch.load_file(str(run / BASE)))
    state.update(safetensors.torch.load_file(str(run / WEIGHTS)))
    if cfg.lora_rank > 0 and not any(k.startswith("backbone.base_model.model.") for k in state):
        # runs of earlier versions injected the adapters without peft's PeftModel wrapper
        state = {("backbone.base_model.model." + k[len("backbone."):] if k.startswith("backbone.") else k): v
                 for k, v in state.items()}
    model = build_model(dataclasses.replace(cfg, pretrained=None), base=plain)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if plain is not None:  # the base tensors were loaded into the backbone before the adapters were added
        covered = {n for n, p in model.named_parameters() if not p.requires_grad}
        covered |= {n for n, _ in model.named_buffers()}
        missing = [k for k in missing if k not in covered]
    if unexpected or missing:  # config.json's "pretrained" is a record: a run reads no file outside itself
        hint = f"; {BASE} is missing: the run holds no backbone weights" if not (run / BASE).is_file() else ""
        raise ValueError(f"{run}: weights do not match the model ({len(missing)} missing, {len(unexpected)} unexpected, "
                         f"e.g. {(missing + unexpected)[:3]}){hint}")
    return model.to(device).eval(), cfg


def _sized_forward(model: DenseModel, x: torch.Tensor) -> torch.Tensor:
    """``model(x)``; a backbone fixed to its training size (one that takes ``img_size`` but has no
    ``dynamic_img_size``: BEiT, MLP-Mixer, ...) sees ``x`` resized to that size instead, and its output is
    resized back. Which kind a backbone is shows on its first input of another size (a timm size assertion);
    ViG-style backbones interpolate their position embedding themselves and are never resized."""
    size = getattr(model, "train_size", None)
    if size is None or tuple(x.shape[-2:]) == (size, size):
        return model(x)
    if not getattr(model, "fixed_size", False):
        try:
            return model(x)
        except (AssertionError, RuntimeError):
            model.fixed_size = True
    h, w = x.shape[-2:]
    inner = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False,
                                            antialias=size < max(h, w))
    return torch.nn.functional.interpolate(model(inner), size=(h, w), mode="bilinear", align_corners=False)


@torch.no_grad()
def predict_raw(model: DenseModel, task, image: torch.Tensor, tta: bool = True) -> torch.Tensor:
    """Raw output for (B, 3, H, W) images in [0, 1], padded to the coarsest feature stride and cropped back
    (resized for backbones fixed to their training size); with ``tta`` the mean of the image's and its
    horizontal mirror's (mirrored back by ``task.flip``) raw outputs."""
    h, w = image.shape[-2:]
    p = getattr(model, "pad_to", model.patch)
    ph, pw = (-h) % p, (-w) % p
    x = torch.nn.functional.pad(image, (0, pw, 0, ph), mode="replicate") if ph or pw else image
    raw = _sized_forward(model, x)
    if tta:
        raw = 0.5 * (raw + task.flip(_sized_forward(model, x.flip(-1))))
    return raw[..., :h, :w]
