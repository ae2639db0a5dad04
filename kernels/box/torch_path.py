"""PyTorch path of the box filter, and the window-sum engine every op's PyTorch path builds on.

Window sums are direct (separable, one add per window pixel per axis), never long prefix sums, so
nearly flat images keep their variance. Two engines do them, named by the caller (``engine=``), which takes it
from the path the registry chose (``runtime.paths``): ``"opencv"``, OpenCV's ``boxFilter`` on CPU float32 (it
accumulates in float64 and runs O(1) per pixel; channels-last images of up to 4 channels in their interleaved
layout), and ``"torch"``, separable ``avg_pool2d`` on any device and dtype. The OpenCV engine is defined by
what OpenCV's borders can do: it sums every window whose border OpenCV folds (zero and replicate padding, and
reflections of a radius below the image size, :func:`opencv_folds`), and the few it cannot (and the closed
forms of ``large_radius``) by ``avg_pool2d``. ``engine=None`` (a caller that was handed no engine by a
registry path) takes OpenCV where :func:`opencv_takes` says it may run; the denoiser's stages name theirs.
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


def opencv_available(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the OpenCV engine can take tensors of this device and dtype (OpenCV imports; CPU float32)."""
    return cv2 is not None and device.type == "cpu" and dtype == torch.float32


def opencv_folds(r: int, mode: str, h: int, w: int) -> bool:
    """Whether OpenCV's borderInterpolate folds a window of radius r in this mode on an h x w image: windows
    larger than the image only for the zero and replicate modes."""
    return mode in ("zero", "replicate") or r < min(h, w)


def opencv_takes(x: torch.Tensor, r: int, mode: str) -> bool:
    """Whether OpenCV may sum the windows of ``x``: CPU float32, nothing to differentiate, a border it folds. What
    the ops' ``supports`` checks ask, and the engine of callers that pass ``engine=None``."""
    return opencv_available(x.device, x.dtype) and not x.requires_grad and opencv_folds(r, mode, *x.shape[-2:])


def _engine(x: torch.Tensor, r: int, mode: str, engine: str | None) -> str:
    if engine is None:  # a caller handed no engine (see the module docstring)
        return "opencv" if opencv_takes(x, r, mode) else "torch"
    if engine not in ("opencv", "torch"):
        raise ValueError(f"engine must be 'opencv' or 'torch', got {engine!r}")
    return engine


def _cv2_sums(x: torch.Tensor, r: int, mode: str, engine: str | None) -> bool:
    """Whether these sums run through OpenCV: the engine is OpenCV's and its borders fold the window."""
    return _engine(x, r, mode, engine) == "opencv" and opencv_folds(r, mode, *x.shape[-2:])


def window_sum(x: torch.Tensor, r: int, mode: str, normalize: bool = False, engine: str | None = None) -> torch.Tensor:
    """Sum over the (2r+1)^2 window of every pixel of ``x`` (..., H, W); ``mode`` "zero" or a padded border.

    ``normalize``: the sum divided by (2r+1)^2 instead (OpenCV and the pooling path scale while they sum,
    which saves a pass over the result). ``engine``: "opencv" or "torch" (see the module docstring)."""
    if r == 0:
        return x.clone()
    h, w = x.shape[-2:]
    cv = _cv2_sums(x, r, mode, engine)
    if cv and x.dim() == 4 and 1 < x.shape[1] <= 4 and x.is_contiguous(memory_format=torch.channels_last):
        # interleaved pixels (HWC arrays seen as BCHW): OpenCV filters them as they lie, no reordering copy
        out = torch.empty_like(x, memory_format=torch.channels_last)
        k = 2 * r + 1
        for i in range(x.shape[0]):
            cv2.boxFilter(x[i].detach().permute(1, 2, 0).numpy(), -1, (k, k), dst=out[i].permute(1, 2, 0).numpy(),
                          normalize=normalize, borderType=_CV2_BORDER[mode])
        return out
    if cv:
        planes = x.reshape(-1, h, w)  # a view for bands of rows: OpenCV needs contiguous rows, not planes
        planes = planes if planes.stride(-1) == 1 else planes.contiguous()
        out = torch.empty(planes.shape, dtype=x.dtype)
        src, dst = planes.detach().numpy(), out.numpy()
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


def box_mean(x: torch.Tensor, r: int, border: str, engine: str | None = None) -> torch.Tensor:
    """The mean operator M of the guided filter: window mean of ``x`` (..., H, W) in float32; ``engine`` as in
    :func:`window_sum`."""
    h, w = x.shape[-2:]
    if large_radius.needs_reduction(h, w, r, border):
        return large_radius.box_mean(x, r, border)
    if border != "valid":
        return window_sum(x, r, border, normalize=True, engine=engine)
    if x.requires_grad:
        return window_sum(x, r, "zero", engine=engine) * inv_count(h, w, r, x.device, x.dtype)
    return valid_border_(window_sum(x, r, "zero", normalize=True, engine=engine), r)


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


def box_mean_adjoint(g: torch.Tensor, r: int, border: str, engine: str | None = None) -> torch.Tensor:
    """The adjoint M^T of :func:`box_mean` (what the backward pass applies to upstream gradients)."""
    h, w = g.shape[-2:]
    if large_radius.needs_reduction(h, w, r, border):
        return large_radius.box_mean_adjoint(g, r, border)
    if border == "valid":
        return window_sum(g * inv_count(h, w, r, g.device, g.dtype), r, "zero", engine=engine)
    # M = (1/k^2) B P with P the padding gather: M^T = P^T B^T / k^2, B^T a zero-outside sum on the padded grid.
    z = window_sum(F.pad(g, (r, r, r, r)), r, "zero", engine=engine)
    return unpad_adjoint(z, h, w, r, border) * (1.0 / (2 * r + 1) ** 2)


class Engine:
    """The PyTorch path's mean operator and its adjoint on one engine ("opencv" or "torch"): what the ops'
    paths hand down to the helpers that take a ``box=`` (``mean(x, r, border)``, ``adjoint(g, r, border)``)."""

    def __init__(self, engine: str) -> None:
        self.engine = _engine(torch.empty(0), 0, "zero", engine)

    def mean(self, x: torch.Tensor, r: int, border: str) -> torch.Tensor:
        return box_mean(x, r, border, self.engine)

    def adjoint(self, g: torch.Tensor, r: int, border: str) -> torch.Tensor:
        return box_mean_adjoint(g, r, border, self.engine)

    def __repr__(self) -> str:
        return f"box.Engine({self.engine!r})"


OPENCV, TORCH = Engine("opencv"), Engine("torch")
