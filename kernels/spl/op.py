"""Public Structure Preservation Loss: validation, gray conversion and centring, and the autograd Function."""
from __future__ import annotations

import math

import torch

from ..border import check_border
from ..runtime import backend_for
from ..validate import check_all_finite, check_finite, check_image, check_radius
from . import torch_path

REDUCTIONS = ("mean", "none")


def _impl(backend: str, border: str, radius: int, dtype: torch.dtype):
    if backend == "triton" and dtype == torch.float32:
        from . import triton_path

        if triton_path.supported(radius, border):
            return triton_path
    # float64 (gradcheck, references), padded border modes and very large windows run the PyTorch path
    return torch_path


class _StructureLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, S, E, w, eps, r, border, bidirectional, detach, reduction, backend):
        impl = _impl(backend, border, r, S.dtype)
        need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        out, saved = impl.forward(S, E, w, eps, r, border, bidirectional, detach, reduction, need_grad,
                                  ctx.needs_input_grad[0])
        ctx.impl, ctx.saved, ctx.reduction = impl, saved, reduction
        if reduction == "none":
            return out["map"]
        weight = out["weight"]
        ctx.weight = weight
        return torch.where(weight > 0, out["total"] / weight.clamp_min(1e-30), 0.0)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        if ctx.saved is None:
            return (None,) * 10
        if ctx.reduction == "none":
            g = grad.contiguous()
        else:
            weight = ctx.weight
            g = torch.where(weight > 0, grad / weight.clamp_min(1e-30), 0.0)
        dS, dE = ctx.impl.backward(ctx.saved, g)
        return dS, dE, None, None, None, None, None, None, None, None


def value_and_grad(S: torch.Tensor, E: torch.Tensor, w: torch.Tensor | None, radius: int, eps: float,
                   bidirectional: bool = True, detach_coefficients: bool = True, grad_scale=1.0):
    """Fused loss and edit-gradient for optimisation loops: no autograd, no validation, no device sync.

    ``S``, ``E``: gray (B, 1, H, W) float32 or float64, each centred (``x - x.mean()``), contiguous;
    ``w``: checked mask or None. Returns ``(total, weight, dE)`` with ``total = sum_k omega_k D_k``,
    ``weight = sum_k omega_k`` (so the loss is ``total / weight``) and ``dE = grad_scale * d total / dE``
    (``grad_scale`` a float or a 0-d tensor on the device).
    """
    impl = _impl(backend_for(S), "valid", radius, S.dtype)
    out, saved = impl.forward(S, E, w, eps, radius, "valid", bidirectional, detach_coefficients, "mean", True, False)
    if not isinstance(grad_scale, torch.Tensor):
        grad_scale = torch.tensor(float(grad_scale), dtype=S.dtype, device=S.device)
    _, dE = impl.backward(saved, grad_scale)
    return out["total"], out["weight"], dE


def _gray(x: torch.Tensor, work: torch.dtype) -> torch.Tensor:
    x = x.to(work)
    return x if x.shape[1] == 1 else x.mean(1, keepdim=True)


def check_mask(mask, like: torch.Tensor) -> torch.Tensor:
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
    check_finite(m, "mask")
    if bool((m < 0).any()) or bool((m > 1).any()):
        raise ValueError(f"mask values must lie in [0, 1], got min {float(m.min()):g}, max {float(m.max()):g}")
    return m


def structure_loss(source: torch.Tensor, edited: torch.Tensor, radius: int = 5, eps: float = 1e-4,
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
    try:
        eps = float(eps)
    except (TypeError, ValueError):
        raise ValueError(f"eps must be a positive float, got {eps!r}") from None
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be positive and finite (it regularises flat windows), got {eps}")
    check_all_finite((source, "source"), (edited, "edited"))
    work = torch.float64 if torch.float64 in (source.dtype, edited.dtype) else torch.float32
    w = None if mask is None else check_mask(mask, source).to(work).contiguous()
    S, E = _gray(source, work), _gray(edited, work)
    # The fits are shift invariant: removing each image's mean keeps the second moments small, so
    # m_SS - m_S^2 does not cancel catastrophically in float32.
    S = (S - S.detach().mean((2, 3), keepdim=True)).contiguous()
    E = (E - E.detach().mean((2, 3), keepdim=True)).contiguous()
    out = _StructureLoss.apply(S, E, w, eps, radius, border, bool(bidirectional), bool(detach_coefficients),
                               reduction, backend_for(S))
    out_dtype = edited.dtype if edited.dtype == source.dtype else work
    return out.to(out_dtype)
