"""H-ViG: the hierarchical ViG (Liao et al., AAAI 2025, arXiv 2405.18425; ``vig_h.py`` in hustvl/ViG).

Four stages at strides 4, 8, 16 and 32 (VMamba-style layout): a stride-4 two-convolution stem, and a
3x3 stride-2 convolution + LayerNorm2d at the start of stages 2-4. Blocks are the ViG token mixer and
SwiGLU under LayerNorm. The official code puts each downsampling at the *end* of the previous stage;
here it opens the next one, so stage i outputs stride 4 * 2**i, as timm's feature extraction expects
(``checkpoint_filter_fn`` moves the weights accordingly).
"""
from __future__ import annotations

from functools import partial
from typing import List, Optional, Sequence, Union

import torch
import torch.nn as nn
from timm.layers import LayerNorm2d
from timm.models._features import feature_take_indices
from torch.utils.checkpoint import checkpoint

from .layers import ClassifierHead, ConvStem, Downsample, GatedLinearAttention2D, GLABlock, swiglu_hidden


class HViGStage(nn.Module):
    """Optional downsampling, then blocks on a channels-last map. NCHW in and out."""

    def __init__(self, in_dim: int, dim: int, depth: int, num_heads: int, downsample: bool,
                 drop_path: Sequence[float], eps: float = 1e-5, **mixer_kwargs):
        super().__init__()
        self.downsample = Downsample(in_dim, dim, eps=eps) if downsample else nn.Identity()
        norm = partial(nn.LayerNorm, eps=eps)
        self.blocks = nn.Sequential(*[
            GLABlock(dim, num_heads, swiglu_hidden(dim, 32), norm_layer=norm, drop_path=drop_path[i], **mixer_kwargs)
            for i in range(depth)])
        self.grad_checkpointing = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.downsample(x).permute(0, 2, 3, 1)
        for blk in self.blocks:
            if self.grad_checkpointing and torch.is_grad_enabled() and not torch.jit.is_scripting():
                x = checkpoint(blk, x, use_reentrant=False)
            else:
                x = blk(x)
        return x.permute(0, 3, 1, 2)


class HierViG(ClassifierHead, nn.Module):
    """Hierarchical ViG.

    Args:
        in_chans, num_classes, global_pool (``"avg"`` or ``""``): as in timm.
        dims: widths of the four stages (T/S 96-768, B 128-1024); an int doubles per stage.
        depths: blocks per stage (T [2, 2, 5, 2], S and B [2, 2, 17, 2]).
        num_heads: heads per stage (T/S [3, 6, 12, 24], B [4, 8, 16, 32]).
        expand_k, gate, conv_act, out_act: see ``GatedLinearAttention2D`` (published: 0.5, vector, off, off).
        drop_rate, drop_path_rate: head dropout and stochastic depth.

    ``forward_features`` returns the final (B, C, H/32, W/32) map; stage outputs are NCHW.
    """

    def __init__(self, in_chans: int = 3, num_classes: int = 1000, global_pool: str = "avg",
                 dims: Union[int, Sequence[int]] = 96, depths: Sequence[int] = (2, 2, 5, 2),
                 num_heads: Sequence[int] = (3, 6, 12, 24), expand_k: float = 0.5, gate: str = "vector",
                 conv_act: bool = False, out_act: bool = False, drop_rate: float = 0.0,
                 drop_path_rate: float = 0.0, norm_eps: float = 1e-5, img_size=None):
        super().__init__()
        del img_size  # accepted for timm's create_model(img_size=...); the network is fully convolutional
        if global_pool not in ("avg", ""):
            raise ValueError(f"global_pool must be 'avg' or '', got {global_pool!r}")
        if isinstance(dims, int):
            dims = [dims * 2 ** i for i in range(len(depths))]
        dims = list(dims)
        if not (len(dims) == len(depths) == len(num_heads)):
            raise ValueError(f"dims, depths and num_heads must have one entry per stage, got {dims}, {depths}, {num_heads}")
        self.num_classes = num_classes
        self.global_pool = global_pool
        self.dims = dims
        self.num_features = self.head_hidden_size = dims[-1]

        self.stem = ConvStem(in_chans, dims[0], stride=4, act_layer=nn.GELU, eps=1e-5)
        total = sum(depths)
        dpr = [drop_path_rate * i / max(total - 1, 1) for i in range(total)]  # stochastic depth, linear in depth
        stages, start = [], 0
        for i, (dim, depth, heads) in enumerate(zip(dims, depths, num_heads)):
            stages.append(HViGStage(dims[max(i - 1, 0)], dim, depth, heads, downsample=i > 0,
                                    drop_path=dpr[start:start + depth], eps=norm_eps, expand_k=expand_k,
                                    gate=gate, conv_act=conv_act, out_act=out_act))
            start += depth
        self.stages = nn.Sequential(*stages)
        self.norm = LayerNorm2d(dims[-1], eps=norm_eps)
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(dims[-1], num_classes) if num_classes > 0 else nn.Identity()
        self.feature_info = [dict(num_chs=d, reduction=4 * 2 ** i, module=f"stages.{i}") for i, d in enumerate(dims)]
        self.init_weights()

    def init_weights(self) -> None:
        # the official H-ViG ends with trunc_normal(0.02) on every linear layer, after the mixers' own init
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        for m in self.modules():  # scalar (Mamba-style) gates keep their dt / A initialisation
            if isinstance(m, GatedLinearAttention2D) and m.gate == "scalar":
                m.reset_parameters()

    @torch.jit.ignore
    def no_weight_decay(self) -> set:
        return {n for n, _ in self.named_parameters() if n.endswith("A_log")}

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict:
        return dict(stem=r"^stem", blocks=r"^stages\.(\d+)" if coarse else [
            (r"^stages\.(\d+)\.downsample", (0,)), (r"^stages\.(\d+)\.blocks\.(\d+)", None), (r"^norm", (99999,))])

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        for s in self.stages:
            s.grad_checkpointing = enable

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.stages(self.stem(x)))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if self.global_pool == "avg":
            x = x.mean(dim=(2, 3))
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def forward_intermediates(self, x: torch.Tensor, indices: Optional[Union[int, List[int]]] = None,
                              norm: bool = False, stop_early: bool = False, output_fmt: str = "NCHW",
                              intermediates_only: bool = False):
        """Outputs of the stages in ``indices`` (last n if int, all if None) at strides 4, 8, 16, 32, as NCHW
        (or NHWC) maps; ``norm`` applies the final norm to the last stage's output when it is taken."""
        if output_fmt not in ("NCHW", "NHWC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NHWC', got {output_fmt!r}")
        take_indices, max_index = feature_take_indices(len(self.stages), indices)
        x = self.stem(x)
        stages = self.stages[:max_index + 1] if stop_early else self.stages
        last = len(self.stages) - 1
        intermediates = []
        for i, stage in enumerate(stages):
            x = stage(x)
            if i in take_indices:
                y = self.norm(x) if norm and i == last else x
                intermediates.append(y.permute(0, 2, 3, 1) if output_fmt == "NHWC" else y)
        if intermediates_only:
            return intermediates
        return self.norm(x), intermediates

    def prune_intermediate_layers(self, indices: Union[int, List[int]] = 1, prune_norm: bool = False,
                                  prune_head: bool = True) -> List[int]:
        take_indices, max_index = feature_take_indices(len(self.stages), indices)
        self.stages = self.stages[:max_index + 1]
        if max_index < len(self.feature_info) - 1 or prune_norm:
            self.norm = nn.Identity()
            self.num_features = self.head_hidden_size = self.feature_info[max_index]["num_chs"]
        if prune_head or max_index < len(self.feature_info) - 1:
            self.reset_classifier(0, "")
        return take_indices
