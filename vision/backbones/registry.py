"""timm registration of the ViG family, and the mapping of the official checkpoints onto our modules.

Importing this module (``import vision`` does) registers the entrypoints, so
``timm.create_model("vig_tiny_patch16_224", features_only=True)`` works like any timm model. Official
weights (hustvl/ViG, MIT licence) load from a local file, after ``checkpoint_filter_fn`` renames them::

    timm.create_model("vig_small_patch16_224", pretrained=True,
                      pretrained_cfg_overlay=dict(file="vig_s.pth"))
"""
from __future__ import annotations

import re

import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.layers import resample_abs_pos_embed
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model

from .hvig import HierViG
from .vig import ViG

__all__ = ["checkpoint_filter_fn", "ViG", "HierViG"]

PAPER = "arXiv:2405.18425"
ORIGIN = "https://github.com/hustvl/ViG"


def _cfg(first_conv: str, **kwargs) -> dict:
    return {
        "url": "", "num_classes": 1000, "input_size": (3, 224, 224), "pool_size": None, "crop_pct": 0.875,
        "interpolation": "bicubic", "fixed_input_size": False, "mean": IMAGENET_DEFAULT_MEAN,
        "std": IMAGENET_DEFAULT_STD, "first_conv": first_conv, "classifier": "head", **kwargs,
    }


_official = dict(license="mit", paper_ids=PAPER, origin_url=ORIGIN,
                 notes=("official ImageNet-1k weights: https://huggingface.co/hustvl/ViG; load with "
                        "pretrained_cfg_overlay=dict(file=...)",))
_ours = dict(license="apache-2.0", notes=("Mamba-2 style scalar gates on ViG; no published weights",))

# must precede the @register_model functions: timm reads the module's default_cfgs at registration
default_cfgs = generate_default_cfgs({
    "vig_tiny_patch16_224.in1k": _cfg("patch_embed.conv1", **_official),
    "vig_small_patch16_224.in1k": _cfg("patch_embed.conv1", **_official),
    "vig_base_patch16_224.in1k": _cfg("patch_embed.conv1", **_official),
    "hvig_tiny_224.in1k": _cfg("stem.conv1", **_official),
    "hvig_small_224.in1k": _cfg("stem.conv1", **_official),
    "hvig_base_224.in1k": _cfg("stem.conv1", **_official),
    "vig_mamba_tiny_patch16_224": _cfg("patch_embed.conv1", **_ours),
    "vig_mamba_small_patch16_224": _cfg("patch_embed.conv1", **_ours),
})


# ----------------------------------------------------------------------------------------------------
# official names -> ours (hustvl/ViG classification/models/vig.py and vig_h.py)

_MIXER = [  # GatedLinearAttention / GLA2D submodules
    (r"in_proj\.0\.", "dwconv."), (r"qkv_proj\.", "qkv."), (r"gk_proj\.0\.", "gate_down."),
    (r"gk_proj\.1\.", "gate_up."), (r"g_proj\.", "out_gate."), (r"g_norm\.", "global_norm."),
    (r"l_norm\.", "local_norm."), (r"o_proj\.", "proj."),
]
_VIG = [
    (r"^patch_embed\.proj\.0\.", "patch_embed.conv1."), (r"^patch_embed\.proj\.1\.", "patch_embed.norm1."),
    (r"^patch_embed\.proj\.3\.", "patch_embed.conv2."), (r"^patch_embed\.proj\.4\.", "patch_embed.norm2."),
    (r"^blocks\.(\d+)\.attn_norm\.", r"blocks.\1.norm1."), (r"^blocks\.(\d+)\.mlp_norm\.", r"blocks.\1.norm2."),
    (r"^blocks\.(\d+)\.mlp\.down_proj\.", r"blocks.\1.mlp.fc2."),
] + [(r"^blocks\.(\d+)\.attn\." + a, r"blocks.\1.attn." + b) for a, b in _MIXER]
_HVIG = [
    (r"^patch_embed\.0\.", "stem.conv1."), (r"^patch_embed\.2\.", "stem.norm1."),
    (r"^patch_embed\.5\.", "stem.conv2."), (r"^patch_embed\.7\.", "stem.norm2."),
    (r"^layers\.(\d+)\.blocks\.(\d+)\.ln_1\.", r"layers.\1.blocks.\2.norm."),  # older official names
    (r"^layers\.(\d+)\.blocks\.(\d+)\.self_attention\.", r"layers.\1.blocks.\2.op."),
    (r"^layers\.(\d+)\.blocks\.(\d+)\.norm\.", r"stages.\1.blocks.\2.norm1."),
    (r"^layers\.(\d+)\.blocks\.(\d+)\.norm2\.", r"stages.\1.blocks.\2.norm2."),
    (r"^layers\.(\d+)\.blocks\.(\d+)\.mlp\.fc2\.", r"stages.\1.blocks.\2.mlp.fc2."),
    (r"^classifier\.norm\.", "norm."), (r"^classifier\.head\.", "head."),
] + [(r"^layers\.(\d+)\.blocks\.(\d+)\.op\." + a, r"stages.\1.blocks.\2.attn." + b) for a, b in _MIXER]
_FUSED_SWIGLU = re.compile(r"^(?:blocks\.(\d+)\.mlp\.gate_proj|layers\.(\d+)\.blocks\.(\d+)\.mlp\.fc1)\.weight$")
_DOWNSAMPLE = re.compile(r"^layers\.(\d+)\.downsample\.([13])\.(weight|bias)$")


def checkpoint_filter_fn(state_dict: dict, model: torch.nn.Module) -> dict:
    """Map an official ViG / H-ViG state dict (or one of ours) onto ``model``'s names and layouts.

    - unwraps ``{"model": ...}`` training checkpoints and strips ``module.`` (DDP) prefixes;
    - renames (see ``_VIG`` / ``_HVIG``); the fused SwiGLU input projection ``[gate | value]``
      (``mlp.gate_proj`` in ViG, ``mlp.fc1`` in H-ViG) is split into timm's ``fc1_g`` / ``fc1_x``;
    - H-ViG: ``layers.i.downsample`` (end of stage i) becomes ``stages.{i+1}.downsample`` (start of
      stage i+1); 1x1-conv layouts (out, in, 1, 1) of its ``Linear2d`` layers become (out, in);
      the detection backbone's ``outnorm*`` layers are dropped;
    - ViG: the position embedding is resized (bicubic) when the model was built for another size.
    Keys already in our naming pass through unchanged.
    """
    if "model" in state_dict and isinstance(state_dict["model"], dict):
        state_dict = state_dict["model"]
    hier = isinstance(model, HierViG)
    rules = _HVIG if hier else _VIG
    out = {}
    for key, value in state_dict.items():
        key = key[len("module."):] if key.startswith("module.") else key
        if hier and key.startswith("outnorm"):
            continue
        fused = _FUSED_SWIGLU.match(key)
        if fused:
            prefix = f"blocks.{fused.group(1)}" if fused.group(1) is not None else \
                f"stages.{fused.group(2)}.blocks.{fused.group(3)}"
            value = value.reshape(value.shape[0], -1) if value.dim() == 4 else value
            gate, val = value.chunk(2, dim=0)
            out[f"{prefix}.mlp.fc1_g.weight"], out[f"{prefix}.mlp.fc1_x.weight"] = gate, val
            continue
        down = _DOWNSAMPLE.match(key)
        if hier and down:
            part = "conv" if down.group(2) == "1" else "norm"
            out[f"stages.{int(down.group(1)) + 1}.downsample.{part}.{down.group(3)}"] = value
            continue
        for pattern, repl in rules:
            key = re.sub(pattern, repl, key)
        if hier and value.dim() == 4 and value.shape[-2:] == (1, 1) and re.search(
                r"\.(attn\.(qkv|gate_down|gate_up|out_gate|proj)|mlp\.fc2)\.weight$", key):
            value = value.reshape(value.shape[0], value.shape[1])
        out[key] = value
    if not hier and "pos_embed" in out and hasattr(model, "pos_embed") and out["pos_embed"].shape != model.pos_embed.shape:
        old = out["pos_embed"]
        side = int(round(old.shape[1] ** 0.5))
        out["pos_embed"] = resample_abs_pos_embed(old, new_size=model.grid_size, old_size=(side, side),
                                                  num_prefix_tokens=0, interpolation="bicubic", antialias=False)
    return out


# ----------------------------------------------------------------------------------------------------
# entrypoints

def _create(cls, variant: str, pretrained: bool, feature_cfg: dict, **kwargs):
    return build_model_with_cfg(cls, variant, pretrained, pretrained_filter_fn=checkpoint_filter_fn,
                                feature_cfg=feature_cfg, **kwargs)


def _vig(variant: str, pretrained: bool, **kwargs) -> ViG:
    depth = kwargs.get("depth", 12)
    # features_only: four evenly spaced blocks (stride 16), read through forward_intermediates
    # (fewer when depth < 4: the indices must be distinct and non-negative)
    out_indices = kwargs.pop("out_indices", tuple(sorted({max(0, depth * (i + 1) // 4 - 1) for i in range(4)})))
    return _create(ViG, variant, pretrained, dict(out_indices=out_indices, feature_cls="getter"), **kwargs)


def _hvig(variant: str, pretrained: bool, **kwargs) -> HierViG:
    return _create(HierViG, variant, pretrained, dict(out_indices=(0, 1, 2, 3), flatten_sequential=True), **kwargs)


@register_model
def vig_tiny_patch16_224(pretrained: bool = False, **kwargs) -> ViG:
    """ViG-T (6M params published, 77.2% IN-1k): 192 wide, 12 blocks, 3 heads."""
    args = dict(embed_dim=192, depth=12, num_heads=3, conv_act=True, out_act=True)
    return _vig("vig_tiny_patch16_224", pretrained, **dict(args, **kwargs))


@register_model
def vig_small_patch16_224(pretrained: bool = False, **kwargs) -> ViG:
    """ViG-S (23M, 81.7%): 384 wide, 12 blocks, 6 heads."""
    args = dict(embed_dim=384, depth=12, num_heads=6, conv_act=False, out_act=False)
    return _vig("vig_small_patch16_224", pretrained, **dict(args, **kwargs))


@register_model
def vig_base_patch16_224(pretrained: bool = False, **kwargs) -> ViG:
    """ViG-B (89M, 82.6%): 768 wide, 12 blocks, 12 heads."""
    args = dict(embed_dim=768, depth=12, num_heads=12, conv_act=False, out_act=False)
    return _vig("vig_base_patch16_224", pretrained, **dict(args, **kwargs))


@register_model
def hvig_tiny_224(pretrained: bool = False, **kwargs) -> HierViG:
    """H-ViG-T (29M, 82.8%): widths 96-768, depths [2, 2, 5, 2], heads [3, 6, 12, 24]."""
    args = dict(dims=96, depths=(2, 2, 5, 2), num_heads=(3, 6, 12, 24))
    return _hvig("hvig_tiny_224", pretrained, **dict(args, **kwargs))


@register_model
def hvig_small_224(pretrained: bool = False, **kwargs) -> HierViG:
    """H-ViG-S (50M, 83.8%): widths 96-768, depths [2, 2, 17, 2], heads [3, 6, 12, 24]."""
    args = dict(dims=96, depths=(2, 2, 17, 2), num_heads=(3, 6, 12, 24))
    return _hvig("hvig_small_224", pretrained, **dict(args, **kwargs))


@register_model
def hvig_base_224(pretrained: bool = False, **kwargs) -> HierViG:
    """H-ViG-B (89M, 84.2%): widths 128-1024, depths [2, 2, 17, 2], heads [4, 8, 16, 32]."""
    args = dict(dims=128, depths=(2, 2, 17, 2), num_heads=(4, 8, 16, 32))
    return _hvig("hvig_base_224", pretrained, **dict(args, **kwargs))


@register_model
def vig_mamba_tiny_patch16_224(pretrained: bool = False, **kwargs) -> ViG:
    """ViG-T with Mamba-2 style per-head scalar gates (ours; no published weights)."""
    args = dict(embed_dim=192, depth=12, num_heads=3, gate="scalar", conv_act=True, out_act=True)
    return _vig("vig_mamba_tiny_patch16_224", pretrained, **dict(args, **kwargs))


@register_model
def vig_mamba_small_patch16_224(pretrained: bool = False, **kwargs) -> ViG:
    """ViG-S with Mamba-2 style per-head scalar gates (ours; no published weights)."""
    args = dict(embed_dim=384, depth=12, num_heads=6, gate="scalar", conv_act=False, out_act=False)
    return _vig("vig_mamba_small_patch16_224", pretrained, **dict(args, **kwargs))
