"""Triton entry points of the box filter and its adjoint: they run the sliding-window kernels of ``sliding.py``
(one warp per column strip walking down the rows with running window sums).

Radii above ``MAX_RADIUS`` and float64 inputs run the PyTorch path on the same device instead. This module loads
Triton (through ``sliding.py``): ``op.py`` imports it only when the Triton backend runs a call.
"""
from __future__ import annotations

import torch

from ..border import unpad_adjoint
from . import sliding
from .torch_path import box_mean as torch_box_mean, box_mean_adjoint as torch_adjoint

MODES = {"valid": 0, "reflect": 1, "replicate": 2, "symmetric": 3}
MAX_RADIUS = 16


def supported(r: int) -> bool:
    return r <= MAX_RADIUS


def box_mean(x: torch.Tensor, r: int, border: str) -> torch.Tensor:
    if r == 0:
        return x.float().clone()
    if not supported(r) or x.dtype == torch.float64:
        return torch_box_mean(x, r, border)
    return sliding.launch(x, r, MODES[border], 0, 0)


def box_mean_adjoint(g: torch.Tensor, r: int, border: str) -> torch.Tensor:
    if r == 0:
        return g.float().clone()
    if not supported(r) or g.dtype == torch.float64:
        return torch_adjoint(g, r, border)
    if border == "valid":
        return sliding.launch(g, r, 0, 1, 0)
    h, w = g.shape[-2:]
    z = sliding.launch(g, r, 0, 2, r)
    return unpad_adjoint(z, h, w, r, border) * (1.0 / (2 * r + 1) ** 2)
