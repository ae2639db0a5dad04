"""Float64 NumPy reference of local linear regression: every window's ridge least-squares problem,
set up from the pixels it covers and solved with ``np.linalg.lstsq``. Slow and obviously right.

The problem in window w (see :func:`window_weights` for which pixels it covers and how much each
counts) is the weighted ridge regression

    minimise over (a, b):  sum_q  omega_q (a . f_q + b - p_q)^2  +  sum_k eps_k a_k^2,   sum_q omega_q = 1,

one per target channel. It is solved as the stacked least-squares system
``[sqrt(omega) F, sqrt(omega); sqrt(diag eps), 0] (a, b) = [sqrt(omega) p; 0]``: no moments, no covariance
formula, so it checks the fast paths' algebra rather than repeating it.
"""
from __future__ import annotations

import numpy as np

from ..border import source_index
from ..box.reference import box_filter_reference
from ..cells import low_res_radius


def grid_size(n: int, scale: int) -> int:
    """Cells along an axis of length ``n``: ``ceil(n / scale)``, the last one possibly partial."""
    return -(-n // scale)


def window_weights(h: int, w: int, radius: int, scale: int, border: str, i: int, j: int) -> np.ndarray:
    """Weight omega_q of every pixel q of an ``h x w`` image in the window centred on cell (i, j).

    The window is ``(2r' + 1)^2`` cells of the ``ceil(h/s) x ceil(w/s)`` grid (``r' = radius`` at scale 1,
    else the fast guided filter's ``round(radius / s)``); taps outside the grid follow ``border`` (dropped
    for "valid", else mapped into the grid, repeats counting again). Each tap weighs 1 / (number of taps
    kept) and spreads evenly over the real pixels of its cell. The weights sum to 1.
    """
    r = low_res_radius(radius, scale)
    gh, gw = grid_size(h, scale), grid_size(w, scale)
    iy = source_index(np.arange(i - r, i + r + 1), gh, border)
    ix = source_index(np.arange(j - r, j + r + 1), gw, border)
    taps = [(y, x) for y in iy for x in ix if y >= 0 and x >= 0]
    omega = np.zeros((h, w))
    for y, x in taps:
        cell = (slice(y * scale, min((y + 1) * scale, h)), slice(x * scale, min((x + 1) * scale, w)))
        omega[cell] += 1.0 / (len(taps) * omega[cell].size)
    return omega


def window_fit(f: np.ndarray, p: np.ndarray, omega: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """Ridge least squares of p (C, H, W) on f (K, H, W) plus a constant, weights omega (H, W).

    Returns (C, K + 1): the K slopes, then the intercept (which is not regularised).
    """
    k = f.shape[0]
    keep = omega > 0
    sw = np.sqrt(omega[keep])
    design = np.concatenate([f[:, keep].T, np.ones((keep.sum(), 1))], 1) * sw[:, None]
    ridge = np.concatenate([np.diag(np.sqrt(eps)), np.zeros((k, 1))], 1)
    lhs = np.concatenate([design, ridge], 0)
    rhs = np.concatenate([p[:, keep].T * sw[:, None], np.zeros((k, p.shape[0]))], 0)
    theta, *_ = np.linalg.lstsq(lhs, rhs, rcond=None)
    return theta.T


def local_linear_fit_reference(features, target, radius: int, eps, scale: int = 1, border: str = "valid"):
    """Coefficients (B, C, K + 1, H', W') of :func:`vision.kernels.local_linear_fit` in float64.

    Every window's (a, b) comes from :func:`window_fit`; the coefficients are then averaged over the
    overlapping windows, i.e. box-filtered on the grid with the same radius and border.
    """
    f = np.asarray(features, dtype=np.float64)
    p = np.asarray(target, dtype=np.float64)
    bsz, k, h, w = f.shape
    c = p.shape[1]
    eps = np.broadcast_to(np.asarray(eps, dtype=np.float64), (bsz, k))  # scalar, (K,) or (B, K)
    gh, gw = grid_size(h, scale), grid_size(w, scale)
    theta = np.empty((bsz, c, k + 1, gh, gw))
    for i in range(gh):
        for j in range(gw):
            omega = window_weights(h, w, radius, scale, border, i, j)
            for n in range(bsz):
                theta[n, :, :, i, j] = window_fit(f[n], p[n], omega, eps[n])
    return box_filter_reference(theta, low_res_radius(radius, scale), border)


def upsample_cells(x: np.ndarray, h: int, w: int, scale_h: float, scale_w: float) -> np.ndarray:
    """Bilinear resize of the last two axes to (h, w) with value (i, j) at pixel ((i + 1/2) s - 1/2, ...).

    Beyond the first and last centres the edge value is kept (PyTorch ``align_corners=False``
    with an explicit scale factor ``s``).
    """
    def axis(n_in, n_out, s):
        pos = np.clip((np.arange(n_out) + 0.5) / s - 0.5, 0.0, n_in - 1)
        i0 = np.floor(pos).astype(np.int64)
        i1 = np.minimum(i0 + 1, n_in - 1)
        return i0, i1, pos - i0

    y0, y1, fy = axis(x.shape[-2], h, scale_h)
    x0, x1, fx = axis(x.shape[-1], w, scale_w)
    rows = x[..., y0, :] * (1 - fy)[:, None] + x[..., y1, :] * fy[:, None]
    return rows[..., x0] * (1 - fx) + rows[..., x1] * fx


def local_linear_apply_reference(features, coeffs, scale_h: float | None = None, scale_w: float | None = None):
    """``sum_k up(a_k) f_k + up(b)`` in float64; default scales are the size ratios H / H', W / W'."""
    f = np.asarray(features, dtype=np.float64)
    co = np.asarray(coeffs, dtype=np.float64)
    h, w = f.shape[-2:]
    sh = h / co.shape[-2] if scale_h is None else scale_h
    sw = w / co.shape[-1] if scale_w is None else scale_w
    up = upsample_cells(co, h, w, sh, sw)  # (B, C, K + 1, H, W)
    return (up[:, :, :-1] * f[:, None]).sum(2) + up[:, :, -1]
