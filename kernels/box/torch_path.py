"""PyTorch path of the box filter, and the window-sum engine every op's PyTorch path builds on.

Window sums are direct (separable, one add per window pixel per axis), never long prefix sums, so
nearly flat images keep their variance. On CPU float32 OpenCV's ``boxFilter`` does the sums (it
accumulates in float64 and runs O(1) per pixel), on channels-last images (up to 4 channels) in their
interleaved layout; elsewhere separable ``avg_pool2d`` does.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

from ..border import pad, unpad_adjoint, valid_count
from . import large_radius

try:  # OpenCV is a dependency, but the PyTorch path must not need it
    import cv2

    _CV2_BORDER = {"zero": cv2.BORDER_CONSTANT, "reflect": cv2.BORDER_REFLECT_101,
                   "replicate": cv2.BORDER_REPLICATE, "symmetric": cv2.BORDER_REFLECT}
except ImportError:  # pragma: no cover
    cv2 = None


def _use_cv2(x: torch.Tensor, r: int, mode: str) -> bool:
    if cv2 is None or x.device.type != "cpu" or x.dtype != torch.float32 or x.requires_grad:
        return False
    # OpenCV's borderInterpolate folds windows larger than the image only for the zero and replicate modes.
    return mode in ("zero", "replicate") or r < min(x.shape[-2:])


def window_sum(x: torch.Tensor, r: int, mode: str, normalize: bool = False) -> torch.Tensor:
    """Sum over the (2r+1)^2 window of every pixel of ``x`` (..., H, W); ``mode`` "zero" or a padded border.

    ``normalize``: the sum divided by (2r+1)^2 instead (OpenCV and the pooling path scale while they sum,
    which saves a pass over the result)."""
    if r == 0:
        return x.clone()
    h, w = x.shape[-2:]
    if _use_cv2(x, r, mode) and x.dim() == 4 and 1 < x.shape[1] <= 4 and \
            x.is_contiguous(memory_format=torch.channels_last):
        # interleaved pixels (HWC arrays seen as BCHW): OpenCV filters them as they lie, no reordering copy
        out = torch.empty_like(x, memory_format=torch.channels_last)
        k = 2 * r + 1
        for i in range(x.shape[0]):
            cv2.boxFilter(x[i].permute(1, 2, 0).numpy(), -1, (k, k), dst=out[i].permute(1, 2, 0).numpy(),
                          normalize=normalize, borderType=_CV2_BORDER[mode])
        return out
    if _use_cv2(x, r, mode):
        planes = x.reshape(-1, h, w)  # a view for bands of rows: OpenCV needs contiguous rows, not planes
        planes = planes if planes.stride(-1) == 1 else planes.contiguous()
        out = torch.empty(planes.shape, dtype=x.dtype)
        src, dst = planes.numpy(), out.numpy()
        k = 2 * r + 1
        for i in range(src.shape[0]):
            cv2.boxFilter(src[i], -1, (k, k), dst=dst[i], normalize=normalize, borderType=_CV2_BORDER[mode])
        return out.reshape(x.shape)
    k = 2 * r + 1
    lead = x.shape[:-2]
    t = x.reshape(-1, 1, h, w)
    t = F.pad(t, (r, r, r, r)) if mode == "zero" else pad(t, r, mode)
    t = F.avg_pool2d(t, (1, k), stride=1)
    t = F.avg_pool2d(t, (k, 1), stride=1)
    return (t if normalize else t * float(k * k)).reshape(*lead, h, w)


@lru_cache(maxsize=64)
def _inv_count(h: int, w: int, r: int) -> np.ndarray:
    return 1.0 / np.outer(valid_count(h, r), valid_count(w, r))


@lru_cache(maxsize=32)
def _inv_count_tensor(h: int, w: int, r: int, device: str, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(_inv_count(h, w, r)).to(device=device, dtype=dtype)


def inv_count(h: int, w: int, r: int, device, dtype=torch.float32) -> torch.Tensor:
    """1/N: the reciprocal of the number of in-image pixels in each window ("valid" mode). Cached: read only."""
    return _inv_count_tensor(h, w, r, str(torch.device(device)), dtype)


def box_mean(x: torch.Tensor, r: int, border: str) -> torch.Tensor:
    """The mean operator M of the guided filter: window mean of ``x`` (..., H, W) in float32."""
    h, w = x.shape[-2:]
    if large_radius.needs_reduction(h, w, r, border):
        return large_radius.box_mean(x, r, border)
    if border != "valid":
        return window_sum(x, r, border, normalize=True)
    if x.requires_grad:
        return window_sum(x, r, "zero") * inv_count(h, w, r, x.device, x.dtype)
    return valid_border_(window_sum(x, r, "zero", normalize=True), r)


@lru_cache(maxsize=32)
def _border_factor(h: int, w: int, r: int, device: str, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy((2 * r + 1) ** 2 * _inv_count(h, w, r)).to(device=device, dtype=dtype)


def valid_border_(m: torch.Tensor, r: int) -> torch.Tensor:
    """Zero-padded window sums / (2r+1)^2 (..., H, W) -> "valid" window means, in place: only the pixels within
    r of a border have fewer than (2r+1)^2 pixels in their window, so only those strips are rescaled."""
    h, w = m.shape[-2:]
    f = _border_factor(h, w, r, str(m.device), m.dtype)
    if h <= 2 * r or w <= 2 * r:
        return m.mul_(f)
    for rows, cols in ((slice(0, r), slice(None)), (slice(h - r, h), slice(None)),
                       (slice(r, h - r), slice(0, r)), (slice(r, h - r), slice(w - r, w))):
        m[..., rows, cols].mul_(f[rows, cols])
    return m


def box_mean_adjoint(g: torch.Tensor, r: int, border: str) -> torch.Tensor:
    """The adjoint M^T of :func:`box_mean` (what the backward pass applies to upstream gradients)."""
    h, w = g.shape[-2:]
    if large_radius.needs_reduction(h, w, r, border):
        return large_radius.box_mean_adjoint(g, r, border)
    if border == "valid":
        return window_sum(g * inv_count(h, w, r, g.device, g.dtype), r, "zero")
    # M = (1/k^2) B P with P the padding gather: M^T = P^T B^T / k^2, B^T a zero-outside sum on the padded grid.
    z = window_sum(F.pad(g, (r, r, r, r)), r, "zero")
    return unpad_adjoint(z, h, w, r, border) * (1.0 / (2 * r + 1) ** 2)
