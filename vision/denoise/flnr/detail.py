"""FLNR's detail blend (op ``denoise.flnr.detail``): the result moved per pixel towards the noisy signal's own trimmed
3 x 3 mean, remodulated, where the fit's bias clearly exceeds those samples' noise (a mirror, glass, a caustic, a
texture the buffers miss).

The registry picks the engine per call: one numba pass per row (:mod:`.detail_numba`) on CPU float32 without
autograd, else PyTorch.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from vision.kernels.runtime import decide, register_path

from ..engines import NUMBA, TORCH, numba_takes
from .finish import mean3


def detail_blend(res: torch.Tensor, add: torch.Tensor, factor: torch.Tensor, target: torch.Tensor,
                 logit: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """FLNR's detail blend: ``res + w (D - res)``, in place when nothing needs a gradient, with

    * ``D = factor m + add``: ``m`` the mean of the noisy demodulated samples ``max(target, 0)`` of the 3 x 3
      neighbourhood (inside the frame) without the largest one, so a lone firefly never passes through, and
      taken in demodulated space, so the albedo's texture stays sharp;
    * ``w = sigmoid(logit) (1 - mask) s``: the guide head's weight, none at pixels that see an emitter (their
      emission stays exact), times the positive-part James-Stein shrinkage ``s = max(0, 1 - V / |D - res|^2)``
      with ``V = sum_c factor_c^2 var_c / k``, the variance of ``D`` from the spread of the k = n - 1 samples it
      averages (s = 0 for k < 2). ``|D - res|^2`` estimates the fit's squared bias plus ``V``, so the samples
      win only where the fit's bias clearly exceeds their own noise: at 1 spp a cluster of fireflies has a
      large spread and is left out, a mirror's reflection or a sharp caustic has a small one and comes
      through. (Without the shrinkage, held-out dark or glassy Blender frames lost 2-5 dB to FLR.)

    ``res`` (B, 3, H, W) is the denoised result (the shrinkage treats it as a constant: no gradient flows
    through ``s``), ``target``, ``factor`` and ``add`` are :func:`~vision.denoise.buffers.demodulate`'s, ``logit``
    and ``mask`` (B, 1, H, W). Moments in float32 here (the numba pass accumulates in float64); where they overflow the
    shrinkage is 0. The registry picks the engine (op ``denoise.flnr.detail``: one numba pass on CPU float32
    without autograd, else PyTorch)."""
    grad = res.requires_grad or logit.requires_grad
    return decide("denoise.flnr.detail", res, tensors=(res, add, factor, target, logit, mask), grad=grad).run(
        res, add, factor, target, logit, mask, grad)


def _detail_numba(res, add, factor, target, logit, mask, grad):
    from . import detail_numba  # lazy: numba (optional, about 200 modules) loads when this path first runs

    b = res.shape[0]
    detail_numba.detail(res, *(t.expand(b, -1, -1, -1).contiguous() for t in (add, factor, target, logit, mask)))
    return res


def _detail_torch(res, add, factor, target, logit, mask, grad):
    t = target.clamp_min(0)
    n = F.avg_pool2d(torch.ones_like(t[:, :1]), 3, 1, 1, count_include_pad=True) * 9  # pixels inside the frame
    k = n - 1
    top = F.max_pool2d(t, 3, 1, 1)
    s1 = mean3(t) * n - top
    s2 = mean3(t * t) * n - top * top
    m = s1 / k.clamp_min(1)
    var = (s2 - s1 * m).clamp_min(0) / (k - 1).clamp_min(1) / k.clamp_min(1)  # of the trimmed mean
    smooth = (m * factor).add_(add)
    diff2 = ((smooth - res.detach()) ** 2).sum(1, keepdim=True)
    shrink = (1 - (factor * factor * var).sum(1, keepdim=True) / diff2).clamp_min(0)
    shrink = torch.where((k >= 2) & (diff2 > 0) & torch.isfinite(shrink), shrink, torch.zeros_like(shrink))
    w = torch.sigmoid(logit.to(res.dtype)) * (1 - mask.to(res.dtype)) * shrink
    return torch.lerp(res, smooth, w) if grad else res.lerp_(smooth, w)


def _numba_details(tensors, grad) -> str | None:
    if grad:
        return "the result or the weight requires grad"
    return numba_takes(*tensors) if tensors[0].shape[1] == 3 else "takes 3 channels"


register_path("denoise.flnr.detail", NUMBA, "torch", 5, supports=_numba_details, run=_detail_numba)
register_path("denoise.flnr.detail", TORCH, "torch", 0, run=_detail_torch)
