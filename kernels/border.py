"""Border modes shared by every op: how a window that leaves the image is completed.

``"valid"``      mean over the pixels inside the image (divide by the true count N; He's reference code,
                 Deep Guided Filter). The default.
``"reflect"``    mirror without repeating the edge pixel: ``dcb|abcd|cba`` (PyTorch reflect, OpenCV
                 BORDER_REFLECT_101, kornia's default).
``"replicate"``  repeat the edge pixel: ``aaa|abcd|ddd`` (OpenCV BORDER_REPLICATE).
``"symmetric"``  mirror repeating the edge pixel: ``cba|abcd|dcb`` (OpenCV BORDER_REFLECT, what
                 ``cv2.ximgproc.guidedFilter`` hard-codes).

Padded modes are defined for any window size: reflections repeat when the window is larger than the
image, as OpenCV's ``borderInterpolate`` does.
"""
from __future__ import annotations

import numpy as np
import torch

BORDERS = ("valid", "reflect", "replicate", "symmetric")


def check_border(border: str) -> str:
    if border not in BORDERS:
        raise ValueError(f"border must be one of {BORDERS}, got {border!r}")
    return border


def source_index(i: np.ndarray, n: int, border: str) -> np.ndarray:
    """Map (possibly out-of-range) integer coordinates ``i`` to coordinates in ``[0, n)``.

    For ``"valid"`` the result is ``-1`` where ``i`` is outside the image (no pixel there).
    """
    i = np.asarray(i, dtype=np.int64)
    if border == "valid":
        return np.where((i >= 0) & (i < n), i, -1)
    if border == "replicate":
        return np.clip(i, 0, n - 1)
    if border == "reflect":
        if n == 1:
            return np.zeros_like(i)
        period = 2 * n - 2
        j = np.abs(i) % period  # reflect-101 is even about 0, so |i| folds the negative side
        return np.where(j >= n, period - j, j)
    if border == "symmetric":
        period = 2 * n
        j = np.where(i < 0, -i - 1, i) % period  # symmetric is even about -1/2
        return np.where(j >= n, period - 1 - j, j)
    raise ValueError(f"border must be one of {BORDERS}, got {border!r}")


def pad_index(n: int, r: int, border: str, device=None) -> torch.Tensor:
    """Indices that gather a padded axis of length ``n + 2r`` from an axis of length ``n`` (padded modes)."""
    idx = source_index(np.arange(-r, n + r), n, border)
    return torch.as_tensor(idx, device=device)


def pad(x: torch.Tensor, r: int, border: str) -> torch.Tensor:
    """Pad the last two axes of ``x`` by ``r`` with a padded border mode (any ``r``, also ``r >= n``)."""
    h, w = x.shape[-2:]
    x = x.index_select(-2, pad_index(h, r, border, x.device))
    return x.index_select(-1, pad_index(w, r, border, x.device))


def unpad_adjoint(z: torch.Tensor, h: int, w: int, r: int, border: str) -> torch.Tensor:
    """Adjoint of :func:`pad`: fold a padded ``(..., h+2r, w+2r)`` tensor back onto ``(..., h, w)``."""
    iy = pad_index(h, r, border, z.device)
    ix = pad_index(w, r, border, z.device)
    out = z.new_zeros(*z.shape[:-2], h, w + 2 * r).index_add_(-2, iy, z)
    return out.new_zeros(*z.shape[:-2], h, w).index_add_(-1, ix, out)


def valid_count(n: int, r: int) -> np.ndarray:
    """Number of in-image pixels in each length-(2r+1) window along an axis of length ``n``."""
    i = np.arange(n)
    return (np.minimum(i + r, n - 1) - np.maximum(i - r, 0) + 1).astype(np.float64)
