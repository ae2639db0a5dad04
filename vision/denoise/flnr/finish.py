"""FLNR's last steps (op ``denoise.flnr.finish``): the fit clamped and remodulated, the light blended towards its 3 x 3
mean at albedo edges when the model has ``antialias``, the emission added back.

The registry picks the engine per call: on CPU without autograd one numba pass per row (:mod:`.finish_numba`) or
PyTorch band by band of rows (:func:`_finish_rows`), else PyTorch on the whole frame. The blend itself
(:func:`antialias`) and the ops it builds on, the 3 x 3 mean (``denoise.flnr.mean3``) and the local contrast
(``denoise.flnr.contrast``), run in OpenCV on CPU float32 planes, else in PyTorch; the detail blend
(:mod:`.detail`) shares the 3 x 3 mean.
"""
from __future__ import annotations

import torch

from vision import kernels  # the ops are looked up on the package when called: it loads them on first use
from vision.kernels.box.torch_path import box_mean
from vision.kernels.runtime import decide, register_path
from vision.kernels.runtime.threads import own_threads, parallel_for

from .. import buffers as B
from ..engines import BANDS, NUMBA, OPENCV, TORCH, numba_takes, opencv_takes

FINISH_BAND_PIXELS = 1 << 17  # output pixels per band of :func:`_finish_rows`
# The antialias blend makes up for guide buffers that are one ray through each pixel (:func:`antialias`). A renderer's
# guide passes at s samples per pixel are means over s rays spread over the pixel, like its colour: their mismatch
# with the pixel's mean (the covered share of each surface, estimated from s rays) has a variance that falls as
# 1 / s, and so does the blend's weight from ANTIALIAS_SPP samples up. Below that the blend also smooths the fit's
# noise at edges, where each surface has few samples, and keeps its learned weight, as it does when the sample count
# is unknown or when many frames of one sample each are averaged (a temporal history: its guides are still one
# ray). Chosen on the two tuning scenes, rendered with a one-pixel box filter and with Blender's default pixel filter
# (1.5 px Blackman-Harris): 1 / s gained 0.6-1.2 / 0.6-0.7 / 0.2-0.5 dB at 16 / 64 / 256 spp on both, and at 4 spp
# +0.3 dB with the box filter, -0.5 dB with Blender's.
ANTIALIAS_SPP = 16


def antialias_share(spp: float | None) -> float:
    """The share of the antialias blend's learned weight that a frame rendered with ``spp`` samples per pixel keeps:
    1 when unknown (None) or below :data:`ANTIALIAS_SPP`, ``1 / spp`` from there up.

    Example:
        >>> antialias_share(None), antialias_share(4), antialias_share(64)
        (1.0, 1.0, 0.015625)
    """
    return 1.0 if spp is None or spp < ANTIALIAS_SPP else 1.0 / float(spp)


def scaled_top(top: torch.Tensor, share: float) -> torch.Tensor:
    """The blend's ceiling ``top`` (a logit: the weight is at most ``sigmoid(top)``) with ``share`` of that weight:
    ``logit(share sigmoid(top))`` (``top`` itself for a share of 1)."""
    if share == 1.0:
        return top
    return torch.logit(torch.sigmoid(top) * share)


def finish(fitted, factor, add, blend, albedo, edge_gain, blend_max, out):
    """FLNR's last steps: ``antialias(max(fitted, 0) factor, blend + edge_gain local_contrast(albedo), blend_max)
    + add`` (``max(fitted, 0) factor + add`` without ``blend``; then ``edge_gain`` and ``blend_max``, the blend's
    learned scalars, may be None), written into ``out`` when it is given (any layout). The registry picks the
    engine (op ``denoise.flnr.finish``): without autograd on CPU numba rows or PyTorch bands
    (:func:`_finish_rows`), else PyTorch on the whole frame."""
    return decide("denoise.flnr.finish", fitted, tensors=(fitted, factor, add, blend, out, albedo)).run(
        fitted, factor, add, blend, albedo, edge_gain, blend_max, out)


def blended_light(fitted, factor, blend, albedo, edge_gain, blend_max):
    """The light ``max(fitted, 0) factor`` after :func:`antialias` with the weight ``sigmoid(blend_max)
    sigmoid(blend + edge_gain local_contrast(albedo))``, on the whole frame or a band of rows."""
    light = fitted.clamp_min(0)
    light = light * factor if light.requires_grad else light.mul_(factor)
    logit = blend.to(light.dtype)
    if albedo is not None:
        logit = logit + edge_gain.to(light.dtype) * local_contrast(albedo.to(light.dtype))
    return antialias(light, logit, blend_max)


def _finish_numba(fitted, factor, add, blend, albedo, edge_gain, blend_max, out):
    from . import finish_numba  # lazy: numba (optional, about 200 modules) loads when this path first runs

    return finish_numba.finish_frame(fitted, factor, add, blend, albedo, edge_gain, blend_max, out)


def _finish_rows(fitted, factor, add, blend, albedo, edge_gain, blend_max, out):
    """FLNR's last steps without autograd, band by band of rows, into ``out``.

    :func:`blended_light` band by band (the 3 x 3 means of every band see one row of its neighbours, so
    they equal the frame's): each band's light, contrast, weights and
    means stay in cache between these ten or so per-pixel steps instead of each one streaming full frames
    through memory (on 2 cores these stages were memory bound); bands go to the workers of
    :func:`vision.kernels.runtime.threads.own_threads`."""
    h, w = fitted.shape[-2:]
    rows = max(1, FINISH_BAND_PIXELS // max(w, 1))

    def one(y0):
        y1 = min(h, y0 + rows)
        e0, e1 = max(0, y0 - 1), min(h, y1 + 1)  # one row of halo for the 3 x 3 means
        band = blended_light(fitted[:, :, e0:e1], factor[:, :, e0:e1], blend[:, :, e0:e1],
                             None if albedo is None else albedo[:, :, e0:e1], edge_gain, blend_max)
        torch.add(band[:, :, y0 - e0:y1 - e0], add[:, :, y0:y1], out=out[:, :, y0:y1])

    with own_threads(fitted.device):
        parallel_for(one, range(0, h, rows), fitted.device)
    return out


def _finish_frame(fitted, factor, add, blend, albedo, edge_gain, blend_max, out):
    if blend is None:
        fitted = fitted.clamp_min_(0) if not fitted.requires_grad else fitted.clamp_min(0)
        return torch.addcmul(add, fitted, factor, out=out)
    # the emission buffer is a pixel mean already: only the light is blended
    return torch.add(blended_light(fitted, factor, blend, albedo, edge_gain, blend_max), add, out=out)


def _rows_take(tensors) -> str | None:
    fitted, factor, add, blend, out, albedo = tensors
    if blend is None:
        return "no antialias blend: one product, nothing to band"
    if out is None:
        return "autograd is on"
    return None if B.cpu_path(out) else "needs the CPU path (a CPU tensor on the PyTorch backend)"


def _numba_finishes(tensors) -> str | None:
    return _rows_take(tensors) or (numba_takes(*tensors) if tensors[0].shape[1] == 3 else "takes 3 channels")


register_path("denoise.flnr.finish", NUMBA, "torch", 5, supports=_numba_finishes, run=_finish_numba)
register_path("denoise.flnr.finish", BANDS, "torch", 3, supports=_rows_take, run=_finish_rows)
register_path("denoise.flnr.finish", TORCH, "torch", 0, run=_finish_frame)


def antialias(x: torch.Tensor, logit: torch.Tensor, top=0.0) -> torch.Tensor:
    """``x + sigmoid(top) sigmoid(logit) (mean3(x) - x)``: (B, C, H, W) blended per pixel towards its 3 x 3 mean
    (the mean of the pixels inside the frame at its borders) with the weight of the (B, 1, H, W) ``logit``,
    at most ``sigmoid(top)`` (a scalar; 0 gives at most 0.5).

    FLNR's last step when it has ``antialias``: a 1-spp frame's colour sample falls anywhere in its pixel,
    and the reference averages the whole pixel, but the guide buffers are one ray through the centre, so
    at an edge they describe one surface (one albedo) only and the regression and the remodulation paint
    the pixel with that surface's light. Mixing in the neighbours at edges restores the partial coverage
    (on the bundled frames, FLNR's light blended with a fixed weight of 0.5 wherever the albedo differs
    from a neighbour's by more than 0.05 gains 0.38 dB; the learned weight does the same job)."""
    top = torch.as_tensor(top, dtype=x.dtype, device=x.device)
    w = torch.sigmoid(logit.to(x.dtype)) * torch.sigmoid(top)
    return torch.lerp(x, mean3(x), w)


def local_contrast(x: torch.Tensor) -> torch.Tensor:
    """``sum over channels |x - mean3(x)|``, (B, C, H, W) -> (B, 1, H, W): how far each pixel is from the mean
    of its 3 x 3 neighbourhood (inside the frame); zero on flat and linear regions, large at edges. The registry
    picks the engine (op ``denoise.flnr.contrast``: OpenCV plane by plane, or PyTorch)."""
    return decide("denoise.flnr.contrast", x, tensors=(x,)).run(x)


def _contrast_opencv(x):
    import cv2  # lazy: here only, OpenCV is this registry path's engine, never a call site's choice

    # per plane in OpenCV: the mean, |difference| and channel sum without torch's per-op passes
    out = x.new_empty(x.shape[0], 1, *x.shape[2:])
    diff = _mean3_opencv(x).detach().numpy()
    for i in range(x.shape[0]):
        planes, o = x[i].detach().numpy(), out[i, 0].numpy()
        for k in range(x.shape[1]):
            cv2.absdiff(planes[k], diff[i, k], dst=diff[i, k])
        if x.shape[1] == 1:
            o[...] = diff[i, 0]
            continue
        cv2.add(diff[i, 0], diff[i, 1], dst=o)
        for k in range(2, x.shape[1]):
            cv2.add(o, diff[i, k], dst=o)
    return out


def _contrast_torch(x):
    return (x - _mean3_torch(x)).abs().sum(1, keepdim=True)


def _opencv_planes(tensors) -> str | None:
    """Why OpenCV may not take ``tensors[0]`` plane by plane (None: it may): CPU float32, nothing to
    differentiate, rows contiguous."""
    x = tensors[0]
    return opencv_takes(x, x.requires_grad) or (None if x.stride(-1) == 1 else "needs contiguous rows")


def mean3(x: torch.Tensor) -> torch.Tensor:
    """The 3 x 3 mean of the pixels inside the frame (``box_filter(x, 1)``), (B, C, H, W); the registry picks the
    engine (op ``denoise.flnr.mean3``: on CPU planes the box path's OpenCV sums directly, without the box filter's
    op dispatch, as FLNR calls this on many small bands; else :func:`~vision.kernels.box_filter`)."""
    return decide("denoise.flnr.mean3", x, tensors=(x,)).run(x)


def _mean3_opencv(x):
    return box_mean(x, 1, "valid", "opencv")


def _mean3_torch(x):
    return kernels.box_filter(x, 1)


register_path("denoise.flnr.contrast", OPENCV, "torch", 5, supports=_opencv_planes, run=_contrast_opencv)
register_path("denoise.flnr.contrast", TORCH, "torch", 0, run=_contrast_torch)
register_path("denoise.flnr.mean3", OPENCV, "torch", 5, supports=_opencv_planes, run=_mean3_opencv)
register_path("denoise.flnr.mean3", TORCH, "torch", 0, run=_mean3_torch)
