"""ViG: isotropic vision backbone on bidirectional gated linear attention (Liao et al., AAAI 2025, arXiv 2405.18425).

A stride-16 overlapping conv stem, a learned absolute position embedding (bicubically resized for other
input sizes), 12 pre-RMSNorm blocks of the ViG token mixer and SwiGLU, a final RMSNorm and average
pooling. With ``gate="scalar"`` the same network uses one forget gate per head (the Mamba-2 / SSD form)
instead of GLA's gates per key channel: that is the Mamba-style variant.
"""
from __future__ import annotations

from typing import List, Optional, Tuple, Union

import torch
import torch.nn as nn
from timm.layers import RmsNorm, resample_abs_pos_embed, trunc_normal_
from timm.models._features import feature_take_indices
from torch.utils.checkpoint import checkpoint

from .layers import ClassifierHead, ConvStem, GatedLinearAttention2D, GLABlock, swiglu_hidden

PATCH = 16


class ViG(ClassifierHead, nn.Module):
    """Isotropic ViG.

    Args:
        img_size: training input size (sets the position-embedding grid; other sizes are resized to).
        patch_size: must be 16 (the stem's stride).
        in_chans, num_classes, global_pool (``"avg"`` or ``""``): as in timm.
        embed_dim, depth, num_heads: width, blocks, heads (ViG-T 192/12/3, S 384/12/6, B 768/12/12).
        mlp_hidden: SwiGLU width, by default 8/3 * embed_dim rounded up to 256 (as published).
        expand_k, gate, conv_act, out_act: see ``GatedLinearAttention2D``.
        drop_rate, pos_drop_rate, drop_path_rate: head dropout, position dropout, stochastic depth.
        norm_eps: RMSNorm eps.

    ``forward_features`` returns tokens (B, N, C) in row-major order; ``forward_intermediates`` gives
    (B, C, H/16, W/16) maps.
    """

    def __init__(self, img_size: Union[int, Tuple[int, int]] = 224, patch_size: int = PATCH, in_chans: int = 3,
                 num_classes: int = 1000, global_pool: str = "avg", embed_dim: int = 192, depth: int = 12,
                 num_heads: int = 3, mlp_hidden: Optional[int] = None, expand_k: float = 0.5,
                 gate: str = "vector", conv_act: bool = True, out_act: bool = False, drop_rate: float = 0.0,
                 pos_drop_rate: float = 0.0, drop_path_rate: float = 0.0, norm_eps: float = 1e-6):
        super().__init__()
        if patch_size != PATCH:
            raise ValueError(f"ViG's stem has stride 16; patch_size must be 16, got {patch_size}")
        if global_pool not in ("avg", ""):
            raise ValueError(f"global_pool must be 'avg' or '', got {global_pool!r}")
        img_size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        self.num_classes = num_classes
        self.global_pool = global_pool
        self.num_features = self.head_hidden_size = self.embed_dim = embed_dim
        self.grid_size = (img_size[0] // PATCH, img_size[1] // PATCH)
        self.grad_checkpointing = False

        self.patch_embed = ConvStem(in_chans, embed_dim, stride=PATCH, act_layer=nn.SiLU)
        self.pos_embed = nn.Parameter(torch.zeros(1, self.grid_size[0] * self.grid_size[1], embed_dim))
        self.pos_drop = nn.Dropout(pos_drop_rate)
        dpr = [drop_path_rate * i / max(depth - 1, 1) for i in range(depth)]  # stochastic depth, linear in depth
        hidden = mlp_hidden or swiglu_hidden(embed_dim, 256)
        norm = lambda d: RmsNorm(d, eps=norm_eps)  # noqa: E731
        self.blocks = nn.Sequential(*[
            GLABlock(embed_dim, num_heads, hidden, norm_layer=norm, drop_path=dpr[i], expand_k=expand_k,
                     gate=gate, conv_act=conv_act, out_act=out_act, norm_eps=norm_eps)
            for i in range(depth)])
        self.norm = norm(embed_dim)
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()
        self.feature_info = [dict(module=f"blocks.{i}", num_chs=embed_dim, reduction=PATCH) for i in range(depth)]
        self.init_weights()

    def init_weights(self) -> None:
        # ViG's scheme: linear layers N(0, 0.02), then the token mixers' own small Xavier init
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        for m in self.modules():
            if isinstance(m, GatedLinearAttention2D):
                m.reset_parameters()
        trunc_normal_(self.pos_embed, std=0.02)

    # timm model API
    @torch.jit.ignore
    def no_weight_decay(self) -> set:
        return {"pos_embed"} | {n for n, _ in self.named_parameters() if n.endswith("A_log")}

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict:
        return dict(stem=r"^pos_embed|^patch_embed", blocks=[(r"^blocks\.(\d+)", None), (r"^norm", (99999,))])

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        """Image (B, 3, H, W) -> token map (B, H/16, W/16, C) with position embedding added."""
        x = self.patch_embed(x)
        B, C, h, w = x.shape
        pos = self.pos_embed
        if (h, w) != self.grid_size:
            pos = resample_abs_pos_embed(pos, new_size=(h, w), old_size=self.grid_size, num_prefix_tokens=0,
                                         interpolation="bicubic", antialias=False)
        x = x.flatten(2).transpose(1, 2) + pos.to(x.dtype)
        return self.pos_drop(x).reshape(B, h, w, C)

    def _run(self, blk: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.grad_checkpointing and torch.is_grad_enabled() and not torch.jit.is_scripting():
            return checkpoint(blk, x, use_reentrant=False)
        return blk(x)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self._embed(x)
        for blk in self.blocks:
            x = self._run(blk, x)
        return self.norm(x.flatten(1, 2))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if self.global_pool == "avg":
            x = x.mean(dim=1)
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def forward_intermediates(self, x: torch.Tensor, indices: Optional[Union[int, List[int]]] = None,
                              norm: bool = False, stop_early: bool = False, output_fmt: str = "NCHW",
                              intermediates_only: bool = False):
        """Outputs of the blocks in ``indices`` (last n if int, all if None), as (B, C, H/16, W/16) maps
        (``output_fmt="NCHW"``) or (B, N, C) tokens (``"NLC"``); ``norm`` applies the final RMSNorm to them.
        Returns the list, or ``(final_features, list)`` unless ``intermediates_only``."""
        if output_fmt not in ("NCHW", "NLC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        x = self._embed(x)
        B, h, w, C = x.shape
        blocks = self.blocks[:max_index + 1] if stop_early else self.blocks
        intermediates = []
        for i, blk in enumerate(blocks):
            x = self._run(blk, x)
            if i in take_indices:
                y = x.reshape(B, h * w, C)
                y = self.norm(y) if norm else y
                intermediates.append(y.transpose(1, 2).reshape(B, C, h, w) if output_fmt == "NCHW" else y)
        if intermediates_only:
            return intermediates
        return self.norm(x.reshape(B, h * w, C)), intermediates

    def prune_intermediate_layers(self, indices: Union[int, List[int]] = 1, prune_norm: bool = False,
                                  prune_head: bool = True) -> List[int]:
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[:max_index + 1]
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.reset_classifier(0, "")
        return take_indices
