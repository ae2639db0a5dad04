"""Public box filter: function and ``nn.Module``."""
from __future__ import annotations

import torch
from torch import nn

from ..border import check_border
from ..runtime import backend_for
from ..validate import check_finite, check_image, check_radius
from . import torch_path


class _BoxMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, r, border, backend):
        ctx.r, ctx.border, ctx.backend = r, border, backend
        if backend == "triton":
            from .triton_path import box_mean as tri

            return tri(x, r, border)
        return torch_path.box_mean(x, r, border)

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous()
        if ctx.backend == "triton":
            from .triton_path import box_mean_adjoint as tri_adj

            return tri_adj(g, ctx.r, ctx.border), None, None, None
        return torch_path.box_mean_adjoint(g, ctx.r, ctx.border), None, None, None


def box_filter(x: torch.Tensor, radius: int, border: str = "valid") -> torch.Tensor:
    r"""Mean of every (2r+1) x (2r+1) window, O(1) per pixel whatever the radius.

    Args:
        x: (B, C, H, W) float32/float16/bfloat16; accumulation is float32, output in x's dtype.
        radius: window radius r >= 0 (r = 0 returns x).
        border: ``"valid"`` (mean over the pixels inside the image; default), ``"reflect"``
            (OpenCV BORDER_REFLECT_101, kornia), ``"replicate"``, ``"symmetric"`` (OpenCV BORDER_REFLECT).
            Windows larger than the image are fine in every mode.

    Returns:
        (B, C, H, W) window means. Differentiable (closed-form adjoint, no autograd through sums).

    Example:
        >>> x = torch.rand(2, 3, 64, 80)
        >>> box_filter(x, 4).shape
        torch.Size([2, 3, 64, 80])
    """
    x = check_image(x, "x")
    radius = check_radius(radius)
    border = check_border(border)
    check_finite(x, "x")
    backend = backend_for(x)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    return _BoxMean.apply(x.to(work), radius, border, backend).to(x.dtype)


class BoxFilter(nn.Module):
    r"""``nn.Module`` form of :func:`box_filter`.

    Example:
        >>> BoxFilter(radius=2, border="reflect")(torch.rand(1, 1, 16, 16)).shape
        torch.Size([1, 1, 16, 16])
    """

    def __init__(self, radius: int, border: str = "valid") -> None:
        super().__init__()
        self.radius = check_radius(radius)
        self.border = check_border(border)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return box_filter(x, self.radius, self.border)

    def extra_repr(self) -> str:
        return f"radius={self.radius}, border={self.border!r}"
