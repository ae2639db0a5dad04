"""Public Structure Preservation Loss: validation, and the custom op ``vision::structure_loss`` with its autograd.

The op takes the images as they are (any strides, 1 or 3 channels); gray conversion and centring happen
inside it (fused into the first kernel on the Triton path). Being a ``torch.library`` custom op with a fake
kernel and a registered backward, it stays one node under ``torch.compile(fullgraph=True)``. Its paths
(``register_path``, each with its implementation): Triton ('valid', float32), PyTorch with OpenCV's window sums
(CPU float32), plain PyTorch; the op and :func:`value_and_grad` run the one ``runtime.choose`` names.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..border import check_border
from ..box.torch_path import opencv_available
from ..runtime import backend_of, choose, data_checks, implementation, register_path
from ..validate import check_all_finite, check_finite, check_flag, check_image, check_positive, check_radius
from . import torch_path
from .defaults import SPL_DEFAULTS

REDUCTIONS = ("mean", "none")
# Largest |value| the loss takes per working dtype: it squares centred intensities in window sums, so a float32
# image above ~1e18 overflows them (NaN), and its loss (~ value^2) overflows float32 well before that.
MAX_MAGNITUDE = {torch.float32: 1e15, torch.float64: 1e150}


def check_magnitude(*named: tuple[torch.Tensor, str], work: torch.dtype = torch.float32) -> None:
    """Refuse by name finite images so large that the loss cannot represent them in ``work`` (one host
    synchronisation for all of them), instead of returning NaN."""
    limit = MAX_MAGNITUDE[work]
    peaks = torch.stack([x.detach().abs().amax().to(torch.float64) for x, _ in named]).tolist()
    for (_, name), peak in zip(named, peaks):
        if peak > limit:
            raise ValueError(f"{name} has values up to {peak:.3g}; the structure loss squares intensities in "
                             f"{str(work).replace('torch.', '')}, so they must stay below {limit:.0e} (scale the "
                             "images first, or pass float64; HDR radiance in the thousands is fine)")


def _triton_takes(dtype: torch.dtype, border: str, **_) -> str | None:
    if dtype != torch.float32:
        return f"{str(dtype).replace('torch.', '')} runs the PyTorch path (the kernels are float32)"
    if border != "valid":
        return f"border {border!r} runs the PyTorch path (the kernels implement 'valid')"
    return None


def _opencv_takes(dtype: torch.dtype, device, **_) -> str | None:
    return None if opencv_available(device, dtype) else "needs CPU float32 and OpenCV"


def _kernels():
    """The Triton entry points, :mod:`.triton_path`, imported on first use: its kernels load Triton (which may be
    absent) and read ``TRITON_INTERPRET`` as they are defined."""
    from . import triton_path  # lazy: its kernels load Triton; `vision edit --help` and CPU runs go without them

    return triton_path


class _Triton:
    """The Triton kernels (imported on first use: Triton may be absent); 'valid' and float32 only."""

    @staticmethod
    def forward(source, edited, mask, radius, eps, bidirectional, detach, reduction, border, need_grad,
                need_source_grad):
        triton_path = _kernels()
        cS, cE = triton_path.centres(source, edited)
        out, planes, invw = triton_path.forward(source, edited, mask, cS, cE, eps, radius, bidirectional, detach,
                                                reduction, need_grad, need_source_grad)
        return out, planes, invw, cS, cE

    @staticmethod
    def backward(grad, source, edited, mask, cS, cE, planes, invw, radius, border, reduction):
        return _kernels().backward(grad, source, edited, mask, cS, cE, planes, invw, radius, reduction)

    @staticmethod
    def value_and_grad(S, E, w, radius, eps, bidirectional, detach, grad_scale):
        triton_path = _kernels()
        zero = torch.zeros(S.shape[0], device=S.device, dtype=torch.float32)
        M = triton_path.moments(S, E, w, zero, zero, radius)
        _, planes, part = triton_path.fit(M, w is not None, eps, radius, bidirectional, detach, False, 3, False)
        sums = part.sum((0, 1, 2))
        _, dE = triton_path.backward(grad_scale, S, E, w, zero, zero, planes, None, radius, "none")
        return sums[0], sums[1], dE


class _Torch:
    """The PyTorch formulas (:mod:`.torch_path`) on one window-sum engine, "opencv" or "torch"."""

    def __init__(self, box: str) -> None:
        self.box = box

    def forward(self, source, edited, mask, radius, eps, bidirectional, detach, reduction, border, need_grad,
                need_source_grad):
        cS = _gray(source, source.dtype).mean((1, 2, 3))
        cE = _gray(edited, edited.dtype).mean((1, 2, 3))
        res, saved = torch_path.forward(_torch_gray(source, cS), _torch_gray(edited, cE), mask, eps, radius, border,
                                        bidirectional, detach, reduction, need_grad, need_source_grad, self.box)
        weight = res["weight"]
        invw = torch.where(weight > 0, 1.0 / weight.clamp_min(1e-30), 0.0)
        out = res["map"] if reduction == "none" else res["total"] * invw
        return out, saved["planes"] if saved is not None else None, invw, cS, cE

    def backward(self, grad, source, edited, mask, cS, cE, planes, invw, radius, border, reduction):
        g = grad.contiguous() if reduction == "none" else grad * invw
        saved = dict(S=_torch_gray(source, cS), E=_torch_gray(edited, cE), w=mask, planes=planes, r=radius,
                     border=border, box=self.box)
        dS, dE = torch_path.backward(saved, g)
        dE = dE / edited.shape[1]
        return None if dS is None else dS / source.shape[1], dE

    def value_and_grad(self, S, E, w, radius, eps, bidirectional, detach, grad_scale):
        out, saved = torch_path.forward(S, E, w, eps, radius, "valid", bidirectional, detach, "mean", True, False,
                                        self.box)
        _, dE = torch_path.backward(saved, grad_scale)
        return out["total"], out["weight"], dE


register_path("structure_loss", "triton", "triton", 10, supports=_triton_takes, run=_Triton)
register_path("structure_loss", "torch+opencv", "torch", 5, supports=_opencv_takes, run=_Torch("opencv"))
register_path("structure_loss", "torch", "torch", 0, run=_Torch("torch"))


def _choose(x: torch.Tensor, dtype: torch.dtype, border: str) -> str:
    """The path :func:`vision.kernels.runtime.choose` takes for this call."""
    return choose("structure_loss", x, dtype=dtype, border=border, device=x.device)


def _torch_gray(x, c):
    return _gray(x, x.dtype) - c.view(-1, 1, 1, 1)


@torch.library.custom_op("vision::structure_loss", mutates_args=())
def _spl_op(source: torch.Tensor, edited: torch.Tensor, mask: Optional[torch.Tensor], radius: int, eps: float,
            bidirectional: bool, detach: bool, reduction: str, border: str, need_grad: bool,
            need_source_grad: bool, path: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                         torch.Tensor]:
    """(loss or map, coefficient planes (or an empty tensor), 1 / sum(omega), centre of S, centre of E)."""
    out, planes, invw, cS, cE = implementation("structure_loss", path).forward(
        source, edited, mask, radius, eps, bidirectional, detach, reduction, border, need_grad, need_source_grad)
    if planes is None:
        planes = source.new_empty(0)
    return out.clone() if out is source else out, planes, invw, cS, cE


@_spl_op.register_fake
def _(source, edited, mask, radius, eps, bidirectional, detach, reduction, border, need_grad, need_source_grad,
      path):
    b, _, h, w = source.shape
    out = source.new_empty((b, 1, h, w) if reduction == "none" else ())
    planes = source.new_empty((b, 5 if need_source_grad else 3, h, w) if need_grad else (0,))
    return out, planes, source.new_empty(()), source.new_empty((b,)), source.new_empty((b,))


@torch.library.custom_op("vision::structure_loss_backward", mutates_args=())
def _spl_backward_op(grad: torch.Tensor, source: torch.Tensor, edited: torch.Tensor, mask: Optional[torch.Tensor],
                     cS: torch.Tensor, cE: torch.Tensor, planes: torch.Tensor, invw: torch.Tensor, radius: int,
                     border: str, reduction: str, path: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(d gray(source) / C_S or an empty tensor, d gray(edited) / C_E), each (B, 1, H, W)."""
    dS, dE = implementation("structure_loss", path).backward(grad, source, edited, mask, cS, cE, planes, invw, radius,
                                                             border, reduction)
    return (source.new_empty(0) if dS is None else dS), dE


@_spl_backward_op.register_fake
def _(grad, source, edited, mask, cS, cE, planes, invw, radius, border, reduction, path):
    b, _, h, w = source.shape
    return source.new_empty((b, 1, h, w) if planes.shape[1] == 5 else (0,)), source.new_empty((b, 1, h, w))


def _setup_context(ctx, inputs, output):
    source, edited, mask, radius, _, _, _, reduction, border, need_grad, _, path = inputs
    _, planes, invw, cS, cE = output
    ctx.save_for_backward(source, edited, mask, cS, cE, planes, invw)
    ctx.args = (radius, border, reduction, path, need_grad)


def _backward(ctx, grad, *_):
    source, edited, mask, cS, cE, planes, invw = ctx.saved_tensors
    radius, border, reduction, path, need_grad = ctx.args
    if not need_grad:
        return (None,) * 12
    dS, dE = _spl_backward_op(grad, source, edited, mask, cS, cE, planes, invw, radius, border, reduction, path)
    dS = dS.expand(source.shape) if dS.dim() == 4 else None  # the gray mean spreads the gradient over the channels
    return dS, dE.expand(edited.shape), None, None, None, None, None, None, None, None, None, None


_spl_op.register_autograd(_backward, setup_context=_setup_context)


def value_and_grad(S: torch.Tensor, E: torch.Tensor, w: torch.Tensor | None, radius: int, eps: float,
                   bidirectional: bool = True, detach_coefficients: bool = True, grad_scale=1.0):
    """Fused loss and edit-gradient for optimisation loops: no autograd, no validation, no device sync.

    ``S``, ``E``: gray (B, 1, H, W) float32 or float64, each centred (``x - x.mean()``), contiguous;
    ``w``: checked mask or None. Returns ``(total, weight, dE)`` with ``total = sum_k omega_k D_k``,
    ``weight = sum_k omega_k`` (so the loss is ``total / weight``) and ``dE = grad_scale * d total / dE``
    (``grad_scale`` a float or a 0-d tensor on the device).
    """
    if not isinstance(grad_scale, torch.Tensor):
        grad_scale = torch.tensor(float(grad_scale), dtype=S.dtype, device=S.device)
    impl = implementation("structure_loss", _choose(S, S.dtype, "valid"))
    return impl.value_and_grad(S, E, w, radius, eps, bidirectional, detach_coefficients, grad_scale)


def _gray(x: torch.Tensor, work: torch.dtype) -> torch.Tensor:
    x = x.to(work)
    return x if x.shape[1] == 1 else x.mean(1, keepdim=True)


def check_mask(mask, like: torch.Tensor, backend: str = "torch") -> torch.Tensor:
    """``mask`` checked against images ``like`` (B, C, H, W): a float (B or 1, 1, H, W) tensor in [0, 1]."""
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    b, _, h, w = like.shape
    m = mask
    if m.dim() == 2:
        m = m[None, None]
    elif m.dim() == 3 and m.shape[0] in (1, b):
        m = m[:, None]
    if m.dim() != 4 or m.shape[1] != 1 or m.shape[0] not in (1, b) or tuple(m.shape[2:]) != (h, w):
        raise ValueError(f"mask must have shape (H, W) or (1 or B, 1, H, W) = (.., 1, {h}, {w}) to match the "
                         f"images {tuple(like.shape)}; got {tuple(mask.shape)}")
    if m.device != like.device:
        raise ValueError(f"mask is on {m.device} but the images on {like.device}")
    if m.dtype == torch.bool:
        m = m.to(like.dtype)
    if not m.is_floating_point():
        raise ValueError(f"mask must be a float or bool tensor with values in [0, 1], got {m.dtype}")
    if not data_checks(backend):
        return m
    check_finite(m, "mask", backend)
    if bool((m < 0).any()) or bool((m > 1).any()):
        raise ValueError(f"mask values must lie in [0, 1], got min {float(m.min()):g}, max {float(m.max()):g}")
    return m


def structure_loss(source: torch.Tensor, edited: torch.Tensor, radius: int = SPL_DEFAULTS.radius, eps: float = SPL_DEFAULTS.eps,
                   mask: torch.Tensor | None = None, bidirectional: bool = True, detach_coefficients: bool = True,
                   reduction: str = "mean", border: str = "valid") -> torch.Tensor:
    r"""Structure Preservation Loss (Gong, Ryu, Ok, Cho, WACV 2026): how far ``edited`` is from being a
    locally affine function of ``source``.

    Both images are reduced to gray (plain RGB mean). In every (2r+1)^2 window the edit is fitted from
    the source, ``E ~ a S + b`` with ``a = cov(S, E) / (var(S) + eps)``, ``b = mean(E) - a mean(S)``,
    and the window's value is the mean squared residual of that fit; ``bidirectional`` adds the
    reverse fit (S from E), which catches structure the edit adds where the source is flat. The loss
    is the mean over all windows. A tone or colour edit is (nearly) free; lost or added edges are not.

    Args:
        source, edited: (B, C, H, W), C in {1, 3}, values in [0, 1] (``eps`` is in those units);
            float32/float16/bfloat16 (computed in float32) or float64. Same B, H, W.
        radius: window radius r (window 2r+1; default 5 as in the paper). Images smaller than the window are fine.
        eps: ridge regulariser of the fits (> 0, default 1e-4).
        mask: optional weights in [0, 1], (H, W) or (1 or B, 1, H, W). They weight every pixel inside
            every window fit and the loss (weighted local linear regression: pixels with weight 0 take
            no part), the loss being ``sum_k omega_k D_k / sum_k omega_k`` with ``omega_k`` the mean
            weight of window k. The mask gets no gradient.
        bidirectional: add the reverse fit (default True).
        detach_coefficients: treat a, b (and a', b') as constants in the backward pass, as the
            published code does (default); False gives the true gradient of the loss.
        reduction: ``"mean"`` (a scalar) or ``"none"``: the (B, 1, H, W) map of window residuals
            (0 in windows without mask weight) -- useful to look at.
        border: how windows are completed at the border: ``"valid"`` (only pixels inside the image;
            the paper's rule, default), or ``"reflect"``, ``"replicate"``, ``"symmetric"``.

    Returns:
        A scalar or a (B, 1, H, W) map in the input dtype. Differentiable w.r.t. both images
        (closed-form backward: five adjoint box filters, no autograd through sums).

    Example:
        >>> src = torch.rand(1, 3, 64, 64)
        >>> structure_loss(src, 0.5 * src + 0.2).item() < 1e-4   # an affine tone edit is free
        True
        >>> structure_loss(src, torch.rand(1, 3, 64, 64), reduction="none").shape
        torch.Size([1, 1, 64, 64])
    """
    source = check_image(source, "source", channels=(1, 3))
    edited = check_image(edited, "edited", channels=(1, 3))
    if source.shape[0] != edited.shape[0] or source.shape[-2:] != edited.shape[-2:]:
        raise ValueError(f"source {tuple(source.shape)} and edited {tuple(edited.shape)} must have the same "
                         "batch size, height and width")
    if source.device != edited.device:
        raise ValueError(f"source is on {source.device} but edited on {edited.device}")
    radius = check_radius(radius)
    border = check_border(border)
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    eps = check_positive(eps, "eps", "it regularises flat windows")  # symbolic under torch.compile: torch._check
    bidirectional = check_flag(bidirectional, "bidirectional")  # a truthy "no" would add the reverse fit
    detach_coefficients = check_flag(detach_coefficients, "detach_coefficients")
    work = torch.float64 if torch.float64 in (source.dtype, edited.dtype) else torch.float32
    path = _choose(source, work, border)
    backend = backend_of("structure_loss", path)
    # compiled graphs cannot read tensor values either: check there as on the Triton path
    # (and meta tensors hold shapes only: no value to check)
    checks = "triton" if torch.compiler.is_compiling() or source.is_meta or edited.is_meta else backend
    check_all_finite((source, "source"), (edited, "edited"), backend=checks)
    if data_checks(checks):
        check_magnitude((source, "source"), (edited, "edited"), work=work)
    w = None if mask is None else check_mask(mask, source, checks).to(work)
    out_dtype = edited.dtype if edited.dtype == source.dtype else work
    source, edited = source.to(work), edited.to(work)
    need_source = source.requires_grad and torch.is_grad_enabled()
    need_grad = need_source or (edited.requires_grad and torch.is_grad_enabled())
    # The fits are shift invariant: each image is centred by its mean (inside the op), which keeps the second
    # moments small, so m_SS - m_S^2 does not cancel catastrophically in float32.
    out = _spl_op(source, edited, w, radius, eps, bidirectional, detach_coefficients, reduction, border,
                  need_grad, need_source, path)[0]
    return out.to(out_dtype)
