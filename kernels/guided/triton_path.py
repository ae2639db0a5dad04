"""Triton path of the guided filter: two fused sliding-window kernels per call.

The forward runs ``sliding.py`` (gray guide) or ``sliding_color.py`` (colour guide): K1 walks guide and src
down column strips with running window sums, solves for a and b (gray: one division; colour: 3x3 cofactor
inverse per pixel) and stores them; K2 box-averages a and b the same way and either applies them to the guide
(q = mean(a) . I + mean(b)) or stores the averages (fast guided filter, which applies them after a bilinear
upsample). Each program centres its values on its own constants before any second moment is formed.

Training ("valid" border, q output): the forward also keeps mean(a), and the backward is two more sliding
kernels (``triton_backward.py``, ``triton_backward_color.py``). Other cases keep the window statistics by
running the PyTorch path's formulas on the Triton box kernels, and their backward is the PyTorch path's
closed form with every adjoint box filter a Triton kernel.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from ..box import triton_path as box
from ..box.triton_path import MODES
from . import sliding, sliding_color, torch_path, triton_backward, triton_backward_color

TRITON_BOX = SimpleNamespace(mean=box.box_mean, adjoint=box.box_mean_adjoint)


def supported(r: int, dtype: torch.dtype) -> bool:
    return box.supported(r) and dtype != torch.float64


def fused_forward(I, p, eps, r, border, apply: bool, keep_ma: bool = False):
    """K1 then K2. I (B, G, H, W), p (B, C, H, W) float32 contiguous, eps (B,) float32.

    Returns q (apply), or (mean a, mean b); ``keep_ma`` returns (q, mean a) for the fused backward."""
    mode = MODES[border]
    if I.shape[1] == 1:
        return sliding.forward_gray(I, p, eps.float().contiguous(), r, mode, apply, keep_ma)
    return sliding_color.forward_color(I, p, eps.float().contiguous(), r, mode, apply, keep_ma)


def forward(I, p, eps, r, border, apply: bool, need_grad: bool = False):
    if r == 0 or not supported(r, I.dtype):
        return torch_path.forward(I, p, eps, r, border, apply)
    I, p = I.contiguous(), p.contiguous()
    if not need_grad:
        return fused_forward(I, p, eps, r, border, apply), None
    if apply and border == "valid":  # fused backward: keep only the inputs and mean(a)
        q, ma = fused_forward(I, p, eps, r, border, apply, keep_ma=True)
        return q, dict(fused=True, I=I, p=p, ma=ma)
    return torch_path.forward(I, p, eps, r, border, apply, box=TRITON_BOX)


def backward(saved, grads, eps, r, border, apply: bool):
    if saved.get("fused"):
        fused = triton_backward if saved["I"].shape[1] == 1 else triton_backward_color
        return fused.backward(saved["I"], saved["p"], grads, saved["ma"], eps.float().contiguous(), r)
    return torch_path.backward(saved, grads, eps, r, border, apply, box=TRITON_BOX)
