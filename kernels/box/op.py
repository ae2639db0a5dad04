"""Public box filter: function and ``nn.Module``."""
from __future__ import annotations

import torch
from torch import nn

from ..border import check_border
from ..runtime import choose, register_path
from ..validate import check_finite, check_image, check_radius
from . import torch_path


def _triton_takes(dtype: torch.dtype, radius: int) -> str | None:
    from .triton_path import supported

    if dtype == torch.float64:
        return "float64 runs the PyTorch path (the kernels accumulate in float32)"
    return None if supported(radius) else f"radius {radius} runs the PyTorch path"


def _opencv_takes(dtype: torch.dtype, radius: int, image: torch.Tensor, border: str) -> str | None:
    return None if torch_path._use_cv2(image, radius, border) else "needs a CPU float32 tensor and OpenCV"


register_path("box_filter", "triton", "triton", 10, supports=lambda dtype, radius, **_: _triton_takes(dtype, radius))
register_path("box_filter", "torch+opencv", "torch", 5, supports=_opencv_takes)
register_path("box_filter", "torch", "torch", 0)


@torch.library.custom_op("vision::box_filter", mutates_args=())
def _box_op(x: torch.Tensor, radius: int, border: str, backend: str) -> torch.Tensor:
    # the data check lives inside the op: torch.compile sees one opaque call, and the Triton path never reads x
    check_finite(x, "x", backend=backend)
    if backend == "triton":
        from .triton_path import box_mean as tri

        return tri(x, radius, border)
    return torch_path.box_mean(x, radius, border)


@_box_op.register_fake
def _(x, radius, border, backend):
    return torch.empty_like(x)


@torch.library.custom_op("vision::box_filter_backward", mutates_args=())
def _box_backward_op(g: torch.Tensor, radius: int, border: str, backend: str) -> torch.Tensor:
    if backend == "triton":
        from .triton_path import box_mean_adjoint as tri_adj

        return tri_adj(g, radius, border)
    return torch_path.box_mean_adjoint(g, radius, border)


@_box_backward_op.register_fake
def _(g, radius, border, backend):
    return torch.empty_like(g)


def _setup_context(ctx, inputs, output):
    ctx.r, ctx.border, ctx.backend = inputs[1:]


def _backward(ctx, g):
    return _box_backward_op(g.contiguous(), ctx.r, ctx.border, ctx.backend), None, None, None


_box_op.register_autograd(_backward, setup_context=_setup_context)


def effective_radius(radius: int, h: int, w: int, border: str) -> int:
    """The radius that gives the same means: in "valid" mode a window of radius max(H, W) - 1 already holds
    the whole image, so larger radii are clamped there (padded modes reduce large radii exactly inside the
    PyTorch path, see ``large_radius``)."""
    return min(radius, max(h, w) - 1) if border == "valid" else radius


def box_filter(x: torch.Tensor, radius: int, border: str = "valid") -> torch.Tensor:
    r"""Mean of every (2r+1) x (2r+1) window, O(1) per pixel whatever the radius.

    Args:
        x: (B, C, H, W) float32/float16/bfloat16; accumulation is float32, output in x's dtype.
        radius: window radius r >= 0 (r = 0 returns x).
        border: ``"valid"`` (mean over the pixels inside the image; default), ``"reflect"``
            (OpenCV BORDER_REFLECT_101, kornia), ``"replicate"``, ``"symmetric"`` (OpenCV BORDER_REFLECT).
            Windows larger than the image are fine in every mode, and cost what the image costs:
            in "valid" mode a radius >= max(H, W) gives the means of radius max(H, W) - 1; in the padded
            modes the extra reflections (whole periods, or repeated edge pixels for "replicate") are
            added in closed form, so the result is exact for any radius.

    Returns:
        (B, C, H, W) window means. Differentiable (closed-form adjoint, no autograd through sums).
        Registered as the custom op ``torch.ops.vision.box_filter`` (with its backward), so
        ``torch.compile(fullgraph=True)`` and CUDA graphs take it whole.

    Example:
        >>> x = torch.rand(2, 3, 64, 80)
        >>> box_filter(x, 4).shape
        torch.Size([2, 3, 64, 80])
    """
    x = check_image(x, "x")
    radius = check_radius(radius)
    border = check_border(border)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    radius = effective_radius(radius, x.shape[-2], x.shape[-1], border)
    path = choose("box_filter", x, dtype=work, radius=radius, image=x.to(work), border=border)
    backend = "triton" if path == "triton" else "torch"
    return _box_op(x.to(work), radius, border, backend).to(x.dtype)


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
