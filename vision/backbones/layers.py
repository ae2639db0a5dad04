"""Building blocks shared by ViG, H-ViG and the Mamba-style variant.

The token mixer is ViG's (Liao et al., AAAI 2025, arXiv 2405.18425): a 3x3 depthwise convolution gives
every token its 2D neighbourhood; gated linear attention then runs over the flattened patch sequence in
both directions, each with its own forget gates ("direction-wise gating"); a sigmoid gate per channel
blends that global branch with the local (convolved) one ("2D gating locality injection").

Blocks work on channels-last maps (B, H, W, C), so the depthwise convolution sees the 2D grid and the
linear layers see tokens without reshaping copies.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import DropPath, LayerNorm2d, RmsNorm, SwiGLU

from vision.kernels.linear_attention import gla_bidirectional


def swiglu_hidden(dim: int, multiple_of: int) -> int:
    """ViG's SwiGLU width: 2/3 of 4*dim (so the MLP keeps 8*dim^2 weights), rounded up to ``multiple_of``."""
    hidden = int(dim * 4 * 2 / 3)
    return multiple_of * math.ceil(hidden / multiple_of)


class GatedLinearAttention2D(nn.Module):
    """ViG's bidirectional GLA token mixer with direction-wise gates and 2D gating locality injection.

    Args:
        dim: channels C (value width equals C: the local branch is blended channel by channel).
        num_heads: heads; key width per head is ``dim * expand_k / num_heads``.
        expand_k: key width over C (0.5 in every published ViG).
        gate: ``"vector"`` for GLA forget gates per key channel (ViG: ``logsigmoid(x) / 16`` from a rank-16
            projection), ``"scalar"`` for one gate per head and token (Mamba-2 / SSD style:
            ``log a = -exp(A_log) * softplus(dt)``, with the input scaled by dt).
        conv_act: SiLU after the depthwise convolution (ViG-T); out_act: SiLU before the output projection (ViG-T).
        gate_low_rank, gate_normalizer: rank and divisor of the vector gates.
        norm_eps: eps of the per-head RMSNorms.

    Shape: (B, H, W, C) -> (B, H, W, C).
    """

    def __init__(self, dim: int, num_heads: int, expand_k: float = 0.5, gate: str = "vector",
                 conv_act: bool = True, out_act: bool = False, gate_low_rank: int = 16,
                 gate_normalizer: float = 16.0, norm_eps: float = 1e-6):
        super().__init__()
        if gate not in ("vector", "scalar"):
            raise ValueError(f"gate must be 'vector' or 'scalar', got {gate!r}")
        key_dim = int(dim * expand_k)
        if key_dim % num_heads or dim % num_heads:
            raise ValueError(f"dim ({dim}) and key width ({key_dim}) must be divisible by num_heads ({num_heads})")
        self.num_heads, self.key_dim, self.value_dim = num_heads, key_dim, dim
        self.head_k, self.head_v = key_dim // num_heads, dim // num_heads
        self.gate, self.gate_normalizer = gate, gate_normalizer
        self.dwconv = nn.Conv2d(dim, dim, 3, padding=1, groups=dim, bias=False)
        self.conv_act = nn.SiLU() if conv_act else nn.Identity()
        self.qkv = nn.Linear(dim, 2 * key_dim + dim, bias=False)
        if gate == "vector":
            # one rank-16 projection gives both directions' gates: [forward | backward]
            self.gate_down = nn.Linear(dim, gate_low_rank, bias=False)
            self.gate_up = nn.Linear(gate_low_rank, 2 * key_dim, bias=True)
        else:
            self.dt_proj = nn.Linear(dim, 2 * num_heads, bias=True)  # [forward | backward] per head
            self.A_log = nn.Parameter(torch.zeros(2 * num_heads))
        self.out_gate = nn.Linear(dim, dim, bias=True)
        self.global_norm = RmsNorm(self.head_v, eps=norm_eps)
        self.local_norm = RmsNorm(self.head_v, eps=norm_eps)
        self.out_act = nn.SiLU() if out_act else nn.Identity()
        self.proj = nn.Linear(dim, dim, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # ViG's init: small Xavier weights keep the early residual branches near zero
        gain = 2 ** -2.5
        for lin in (self.dwconv, self.qkv, self.out_gate, self.proj):
            nn.init.xavier_uniform_(lin.weight, gain=gain)
        nn.init.zeros_(self.out_gate.bias)
        if self.gate == "vector":
            nn.init.xavier_uniform_(self.gate_down.weight, gain=gain)
            nn.init.xavier_uniform_(self.gate_up.weight, gain=gain)
            nn.init.zeros_(self.gate_up.bias)
        else:
            # Mamba-2's init: dt log-uniform in [1e-3, 1e-1] through softplus, A uniform in [1, 16]
            with torch.no_grad():
                nn.init.xavier_uniform_(self.dt_proj.weight, gain=gain)
                dt = torch.exp(torch.empty(2 * self.num_heads).uniform_(math.log(1e-3), math.log(1e-1)))
                self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))
                self.A_log.copy_(torch.empty(2 * self.num_heads).uniform_(1, 16).log())

    def _global(self, xs: torch.Tensor) -> torch.Tensor:
        """Bidirectional GLA over the token sequence xs (B, L, C) -> (B, L, heads, C / heads)."""
        B, L, _ = xs.shape
        nh = self.num_heads
        q, k, v = self.qkv(xs).split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q, k = q.reshape(B, L, nh, self.head_k), k.reshape(B, L, nh, self.head_k)
        v = v.reshape(B, L, nh, self.head_v)
        acc = torch.promote_types(xs.dtype, torch.float32)  # gates in float32 at least (bf16 models)
        if self.gate == "vector":
            g = F.logsigmoid(self.gate_up(self.gate_down(xs)).to(acc)) / self.gate_normalizer
            g_fwd, g_bwd = (t.reshape(B, L, nh, self.head_k) for t in g.chunk(2, dim=-1))
            return gla_bidirectional(q, k, v, g_fwd, g_bwd)
        dt = F.softplus(self.dt_proj(xs).to(acc))  # (B, L, 2 heads)
        g = dt * -self.A_log.to(acc).exp()
        dt_f, dt_b = (t.to(k.dtype).unsqueeze(-1) for t in dt.chunk(2, dim=-1))
        g_f, g_b = g.chunk(2, dim=-1)
        # the input is scaled by each direction's step dt, so the two scans differ in k as well
        return gla_bidirectional(q, k * dt_f, v, g_f, g_b, k_reverse=k * dt_b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, H, W, C = x.shape
        L, nh = H * W, self.num_heads
        xs = self.conv_act(self.dwconv(x.permute(0, 3, 1, 2))).permute(0, 2, 3, 1).reshape(B, L, C)
        o = self.global_norm(self._global(xs))
        local = self.local_norm(xs.reshape(B, L, nh, self.head_v))
        blend = self.out_gate(xs).reshape(B, L, nh, self.head_v)
        if torch.is_grad_enabled():
            o = local + blend.sigmoid() * (o - local)  # = blend * global + (1 - blend) * local
        else:  # same, in place: inference at high resolution keeps fewer token-sized tensors alive
            o = o.sub_(local).mul_(blend.sigmoid_()).add_(local)
        return self.proj(self.out_act(o.reshape(B, L, C))).reshape(B, H, W, C)


class SwiGLUMlp(SwiGLU):
    """timm's SwiGLU (``fc2(silu(fc1_g(x)) * fc1_x(x))``, no biases); without autograd the activation and
    the product run in place, so inference holds two hidden-width tensors instead of four."""

    def __init__(self, dim: int, hidden: int):
        super().__init__(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            return super().forward(x)
        h = F.silu(self.fc1_g(x), inplace=True).mul_(self.fc1_x(x))
        return self.drop2(self.fc2(self.norm(self.drop1(h))))


class GLABlock(nn.Module):
    """Pre-norm residual block: ``x + mixer(norm1(x))``, then ``x + SwiGLU(norm2(x))``. (B, H, W, C) in and out."""

    def __init__(self, dim: int, num_heads: int, mlp_hidden: int, norm_layer=RmsNorm, drop_path: float = 0.0,
                 **mixer_kwargs):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = GatedLinearAttention2D(dim, num_heads, **mixer_kwargs)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = SwiGLUMlp(dim, mlp_hidden)
        self.drop_path2 = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path1(self.attn(self.norm1(x)))
        return x + self.drop_path2(self.mlp(self.norm2(x)))


class ConvStem(nn.Module):
    """Overlapping two-convolution stem: conv -> LayerNorm2d -> act -> conv(3x3, stride 2) -> LayerNorm2d.

    ViG (stride 16): first conv 9x9 stride 8, SiLU. H-ViG (stride 4): first conv 3x3 stride 2, GELU.
    (B, in_chans, H, W) -> (B, dim, H/stride, W/stride).
    """

    def __init__(self, in_chans: int, dim: int, stride: int, act_layer=nn.SiLU, eps: float = 1e-5):
        super().__init__()
        first = stride // 2
        self.conv1 = nn.Conv2d(in_chans, dim // 2, kernel_size=first + 1, stride=first, padding=1)
        self.norm1 = LayerNorm2d(dim // 2, eps=eps)
        self.act = act_layer()
        self.conv2 = nn.Conv2d(dim // 2, dim, kernel_size=3, stride=2, padding=1)
        self.norm2 = LayerNorm2d(dim, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm2(self.conv2(self.act(self.norm1(self.conv1(x)))))


class Downsample(nn.Module):
    """H-ViG's downsampling between stages: conv 3x3 stride 2 -> LayerNorm2d. NCHW in and out."""

    def __init__(self, in_dim: int, out_dim: int, eps: float = 1e-5):
        super().__init__()
        self.conv = nn.Conv2d(in_dim, out_dim, kernel_size=3, stride=2, padding=1)
        self.norm = LayerNorm2d(out_dim, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x))


class ClassifierHead:
    """timm's classifier interface shared by the backbones: ``get_classifier`` / ``reset_classifier``
    over ``self.head`` (a Linear on ``self.num_features``), global pool "avg" or "" (none)."""

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        self.num_classes = num_classes
        if global_pool is not None:
            if global_pool not in ("avg", ""):
                raise ValueError(f"global_pool must be 'avg' or '', got {global_pool!r}")
            self.global_pool = global_pool
        self.head = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()
