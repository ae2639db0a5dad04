"""Public box filter: function and ``nn.Module``.

The paths (``register_path``): Triton, PyTorch with OpenCV's window sums (CPU float32 without autograd), plain
PyTorch (``avg_pool2d`` sums); each carries its forward and its adjoint, and the custom ops ``vision::box_filter``
and ``vision::box_filter_backward`` run the ones of the path named to them. The backward is decided on its own
(op ``box_filter_backward``): its gradient needs no autograd, so a CPU float32 backward takes OpenCV's sums.
"""
from __future__ import annotations

import torch
from torch import nn

from ..border import check_border
from ..runtime import backend_of, choose, implementation, register_path
from ..runtime.calls import run_op
from ..validate import check_finite, check_image, check_radius
from . import large_radius, torch_path


def _kernels():
    """The Triton entry points, :mod:`.triton_path`, imported on first use: its kernels load Triton (which may be
    absent) and read ``TRITON_INTERPRET`` as they are defined."""
    from . import triton_path  # lazy: its kernels load Triton; a `vision denoise` frame on CPU runs without them

    return triton_path


class _Triton:
    """The Triton kernels (imported on first use: Triton may be absent)."""

    @staticmethod
    def forward(x, radius, border):
        return _kernels().box_mean(x, radius, border)

    @staticmethod
    def backward(g, radius, border):
        return _kernels().box_mean_adjoint(g, radius, border)


class _Torch:
    """The PyTorch path on one window-sum engine (``torch_path.Engine``: "opencv" or "torch")."""

    def __init__(self, engine: str) -> None:
        self.forward = lambda x, radius, border: torch_path.box_mean(x, radius, border, engine)
        self.backward = lambda g, radius, border: torch_path.box_mean_adjoint(g, radius, border, engine)


def _triton_takes(dtype: torch.dtype, radius: int, **_) -> str | None:
    if dtype == torch.float64:
        return "float64 runs the PyTorch path (the kernels accumulate in float32)"
    return None if _kernels().supported(radius) else f"radius {radius} runs the PyTorch path"


def _opencv_takes(dtype: torch.dtype, radius: int, image: torch.Tensor, border: str) -> str | None:
    if image.requires_grad or not torch_path.opencv_available(image.device, dtype):
        return "needs a CPU float32 tensor without autograd, and OpenCV"
    h, w = image.shape[-2:]
    if large_radius.needs_reduction(h, w, radius, border):
        return f"radius {radius} is reduced in closed form (box.large_radius) by the PyTorch path"
    if not torch_path.opencv_folds(radius, "zero" if border == "valid" else border, h, w):
        return f"OpenCV's {border!r} border cannot fold a radius-{radius} window on a {h}x{w} image"
    return None


def _opencv_adjoint_takes(dtype: torch.dtype, radius: int, image: torch.Tensor, border: str) -> str | None:
    if image.requires_grad or not torch_path.opencv_available(image.device, dtype):
        return "needs a CPU float32 gradient without autograd, and OpenCV"
    # the adjoint sums with zero padding: OpenCV folds any radius (large radii run box.large_radius's closed forms)
    return None


register_path("box_filter", "triton", "triton", 10, supports=_triton_takes, run=_Triton)
register_path("box_filter", "torch+opencv", "torch", 5, supports=_opencv_takes, run=_Torch("opencv"))
register_path("box_filter", "torch", "torch", 0, run=_Torch("torch"))
# the backward is an op of its own: its gradient is a new tensor (no autograd, and on CPU float32 even when the
# forward's input required grad), so it may take another engine than the forward
register_path("box_filter_backward", "triton", "triton", 10, supports=_triton_takes, run=_Triton)
register_path("box_filter_backward", "torch+opencv", "torch", 5, supports=_opencv_adjoint_takes,
              run=_Torch("opencv"))
register_path("box_filter_backward", "torch", "torch", 0, run=_Torch("torch"))


def _box(x: torch.Tensor, radius: int, border: str, path: str) -> torch.Tensor:
    # the data check lives inside the op: torch.compile sees one opaque call, and the Triton path never reads x
    check_finite(x, "x", backend=backend_of("box_filter", path))
    return implementation("box_filter", path).forward(x, radius, border)


_box_op = torch.library.custom_op("vision::box_filter", mutates_args=())(_box)


@_box_op.register_fake
def _(x, radius, border, path):
    return torch.empty_like(x)


@torch.library.custom_op("vision::box_filter_backward", mutates_args=())
def _box_backward_op(g: torch.Tensor, radius: int, border: str, path: str) -> torch.Tensor:
    return implementation("box_filter_backward", path).backward(g, radius, border)


@_box_backward_op.register_fake
def _(g, radius, border, path):
    return torch.empty_like(g)


def _setup_context(ctx, inputs, output):
    ctx.r, ctx.border, _ = inputs[1:]


def _backward(ctx, g):
    g = g.contiguous()
    path = choose("box_filter_backward", g, dtype=g.dtype, radius=ctx.r, image=g, border=ctx.border)
    return _box_backward_op(g, ctx.r, ctx.border, path), None, None, None


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
    xw = x.to(work)
    path = choose("box_filter", x, dtype=work, radius=radius, image=xw, border=border)
    return run_op(_box_op, _box, xw, radius, border, path).to(x.dtype)


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
