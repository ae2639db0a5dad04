"""Public guided filter: validation, centring, the fast (subsampled) variant, and the autograd Function."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..border import check_border
from ..runtime import backend_for
from ..validate import check_all_finite, check_eps, check_image, check_radius, check_scale
from . import cpu_banded, torch_path
from .reference import low_res_radius, subsample_index


def _impl(backend: str):
    if backend == "triton":
        from . import triton_path

        return triton_path
    return torch_path


class _GuidedFit(torch.autograd.Function):
    """One Function for the whole filter: forward and closed-form backward of either the output q
    (``apply=True``) or the box-averaged coefficients (mean a, mean b) (``apply=False``)."""

    @staticmethod
    def forward(ctx, I, p, eps, r, border, apply, backend):
        impl = _impl(backend)
        if impl is torch_path:
            out, saved = impl.forward(I, p, eps, r, border, apply)
        else:
            out, saved = impl.forward(I, p, eps, r, border, apply, need_grad=any(ctx.needs_input_grad[:3]))
        ctx.impl, ctx.r, ctx.border, ctx.apply_q = impl, r, border, apply
        ctx.saved = saved  # backward runs once; plain attributes avoid save_for_backward's version checks
        ctx.save_for_backward(eps)
        return out

    @staticmethod
    def backward(ctx, *grads):
        (eps,) = ctx.saved_tensors
        grads = tuple(None if g is None else g.to(eps.dtype).contiguous() for g in grads)
        dI, dp, deps = ctx.impl.backward(ctx.saved, grads[0] if ctx.apply_q else grads, eps, ctx.r, ctx.border,
                                         ctx.apply_q)
        return dI, dp, deps, None, None, None, None


def guided_filter(guide: torch.Tensor, src: torch.Tensor, radius: int, eps, border: str = "valid",
                  scale: int = 1) -> torch.Tensor:
    r"""Guided filter of He, Sun and Tang (ECCV 2010 / TPAMI 2013): ``src`` smoothed as a local linear
    function of ``guide`` in every (2r+1)^2 window, so edges of the guide survive.

    In every window, ``a = cov(I, p) / (var(I) + eps)`` (colour guide: ``(Sigma + eps U)^-1 cov(I, p)``)
    and ``b = mean(p) - a mean(I)``; the output is ``mean(a) * I + mean(b)``.

    Args:
        guide: (B, 1, H, W) gray guide (applied to every channel of ``src``) or (B, 3, H, W) colour guide.
        src: (B, C, H, W) image to filter; same B, H, W as ``guide``. ``src is guide`` filters an image by itself.
        radius: window radius r >= 0.
        eps: regularisation (> 0), in squared intensity units (1e-4 .. 1e-1 for images in [0, 1]); a
            float or a per-batch tensor of shape (B,). Differentiable.
        border: ``"valid"`` (default; mean over in-image pixels, as He's code), ``"reflect"`` /
            ``"replicate"`` (kornia's ``guided_blur`` modes), ``"symmetric"`` (``cv2.ximgproc.guidedFilter``).
        scale: ``s > 1`` is the fast guided filter (He & Sun 2015): the coefficients are fitted and
            box-averaged on the images subsampled by ``s`` (nearest pixel, ``max(H // s, 1)`` rows) with
            radius ``round(r / s)``, upsampled bilinearly and applied to the full-resolution guide.

    Returns:
        (B, C, H, W) in ``src``'s dtype. float16/bfloat16 inputs are computed in float32.
        Differentiable w.r.t. guide, src and eps (closed-form backward through adjoint box filters).

    Example:
        >>> img = torch.rand(1, 3, 64, 64)
        >>> smooth = guided_filter(img, img, radius=4, eps=1e-2)
        >>> gray = guided_filter(img.mean(1, keepdim=True), img, radius=4, eps=1e-2, scale=2)
        >>> smooth.shape, gray.shape
        (torch.Size([1, 3, 64, 64]), torch.Size([1, 3, 64, 64]))
    """
    guide = check_image(guide, "guide", channels=(1, 3))
    src = check_image(src, "src")
    if guide.shape[0] != src.shape[0] or guide.shape[-2:] != src.shape[-2:]:
        raise ValueError(f"guide {tuple(guide.shape)} and src {tuple(src.shape)} must share batch, height and width")
    if guide.device != src.device:
        raise ValueError(f"guide is on {guide.device} but src on {src.device}")
    radius = check_radius(radius)
    scale = check_scale(scale)
    border = check_border(border)
    check_all_finite((guide, "guide"), *(() if src is guide else ((src, "src"),)))
    eps_t = check_eps(eps, guide.shape[0], guide.device)
    # float32 accumulation for every input dtype; float64 stays float64 (gradcheck, references)
    work = torch.float64 if src.dtype == torch.float64 else torch.float32
    if isinstance(eps, torch.Tensor) and eps.requires_grad:
        eps_t = eps.to(work).reshape(-1).expand(guide.shape[0])
    eps_t = eps_t.to(work)
    out_dtype = src.dtype
    I, p = guide.to(work), src.to(work)
    backend = backend_for(I)
    if scale == 1 and backend == "torch" and cpu_banded.supported(I, p, radius, border) and not eps_t.requires_grad:
        ci, cp = I.mean((2, 3), keepdim=True), p.mean((2, 3), keepdim=True)
        return cpu_banded.forward(I.contiguous(), p.contiguous(), ci, cp, eps_t, radius, border).to(out_dtype)
    # Shift invariance: subtracting each image's mean leaves a unchanged and only shifts q, and keeps
    # the second moments small, so M(I^2) - M(I)^2 does not cancel catastrophically in float32.
    ci = I.detach().mean((2, 3), keepdim=True)
    cp = p.detach().mean((2, 3), keepdim=True)
    I, p = I - ci, p - cp
    if scale == 1:
        q = _GuidedFit.apply(I.contiguous(), p.contiguous(), eps_t, radius, border, True, backend)
        return (q + cp).to(out_dtype)
    h, w = I.shape[-2:]
    iy = torch.as_tensor(subsample_index(h, scale), device=I.device)
    ix = torch.as_tensor(subsample_index(w, scale), device=I.device)
    I_lo = I.index_select(2, iy).index_select(3, ix).contiguous()
    p_lo = p.index_select(2, iy).index_select(3, ix).contiguous()
    ma, mb = _GuidedFit.apply(I_lo, p_lo, eps_t, low_res_radius(radius, scale), border, False, backend)
    up = lambda t: F.interpolate(t, size=(h, w), mode="bilinear", align_corners=False)  # noqa: E731
    if I.shape[1] == 1:
        q = up(ma) * I + up(mb)
    else:
        c = ma.shape[1]
        q = (up(ma.flatten(1, 2)).unflatten(1, (c, 3)) * I[:, None]).sum(2) + up(mb)
    return (q + cp).to(out_dtype)


class GuidedFilter(nn.Module):
    r"""``nn.Module`` form of :func:`guided_filter` (He, Sun, Tang, "Guided Image Filtering", TPAMI 2013).

    Example:
        >>> gf = GuidedFilter(radius=8, eps=1e-2)
        >>> img = torch.rand(1, 3, 64, 64)
        >>> gf(img, img).shape
        torch.Size([1, 3, 64, 64])
    """

    def __init__(self, radius: int, eps: float, border: str = "valid", scale: int = 1) -> None:
        super().__init__()
        self.radius, self.eps = check_radius(radius), eps
        self.border, self.scale = check_border(border), check_scale(scale)

    def forward(self, guide: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return guided_filter(guide, src, self.radius, self.eps, self.border, self.scale)

    def extra_repr(self) -> str:
        return f"radius={self.radius}, eps={self.eps}, border={self.border!r}, scale={self.scale}"
