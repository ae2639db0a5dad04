"""Float64 NumPy reference of the guided filter (He, Sun, Tang, TPAMI 2013) and the fast guided filter
(He & Sun 2015): the formulas as written, per-pixel ``np.linalg.solve`` for the colour guide."""
from __future__ import annotations

import numpy as np

from ..box.reference import box_filter_reference as _box
from ..cells import low_res_radius  # noqa: F401 - also read from here by op.py and the bench


def subsample_index(n: int, scale: int) -> np.ndarray:
    """Pixels kept along an axis of length ``n`` by the fast guided filter's nearest-neighbour subsampling.

    ``max(n // scale, 1)`` pixels; pixel ``i`` is the one nearest to where a bilinear upsample with
    ``align_corners=False`` puts it back, less the ``(scale - 1) / 2`` offset of taking every
    ``scale``-th pixel (kornia 0.9's convention, so results can be compared).
    """
    m = max(n // scale, 1)
    i = np.arange(m)
    return np.clip(((2 * i + 1) * n + m * (1 - scale)) // (2 * m), 0, n - 1)


def upsample_bilinear(x: np.ndarray, h: int, w: int) -> np.ndarray:
    """Bilinear resize of the last two axes, half-pixel centres (PyTorch ``align_corners=False``)."""
    def axis(n_in, n_out):
        s = np.maximum((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0.0)
        i0 = np.minimum(np.floor(s).astype(np.int64), n_in - 1)
        i1 = np.minimum(i0 + 1, n_in - 1)
        return i0, i1, s - i0

    y0, y1, fy = axis(x.shape[-2], h)
    x0, x1, fx = axis(x.shape[-1], w)
    rows = x[..., y0, :] * (1 - fy)[:, None] + x[..., y1, :] * fy[:, None]
    return rows[..., x0] * (1 - fx) + rows[..., x1] * fx


def guided_filter_reference(guide, src, radius, eps, border="valid", scale=1) -> np.ndarray:
    """Guided filter of ``src`` (B, C, H, W) by ``guide`` (B, 1|3, H, W) in float64; ``eps`` scalar or (B,)."""
    guide = np.asarray(guide, dtype=np.float64)
    src = np.asarray(src, dtype=np.float64)
    b, cg, h, w = guide.shape
    eps = np.broadcast_to(np.asarray(eps, dtype=np.float64).reshape(-1), (b,))
    full_guide = guide
    if scale > 1:
        iy, ix = subsample_index(h, scale), subsample_index(w, scale)
        guide = guide[..., iy[:, None], ix[None, :]]
        src = src[..., iy[:, None], ix[None, :]]
        radius = low_res_radius(radius, scale)
    box = lambda t: _box(t, radius, border)  # noqa: E731
    mean_i, mean_p = box(guide), box(src)
    if cg == 1:
        var = box(guide * guide) - mean_i**2
        cov = box(guide * src) - mean_i * mean_p
        a = cov / (var + eps[:, None, None, None])
        bb = mean_p - a * mean_i
        mean_a, mean_b = box(a), box(bb)
        if scale > 1:
            mean_a, mean_b = (upsample_bilinear(t, h, w) for t in (mean_a, mean_b))
        return mean_a * full_guide + mean_b
    # colour guide: Sigma (3x3 per pixel) + eps*I solved against cov(I, p) for every src channel
    sigma = np.empty(mean_i.shape[:1] + mean_i.shape[2:] + (3, 3))
    for i in range(3):
        for j in range(3):
            sigma[..., i, j] = box(guide[:, i] * guide[:, j]) - mean_i[:, i] * mean_i[:, j]
    sigma += eps[:, None, None, None, None] * np.eye(3)
    out = []
    for c in range(src.shape[1]):
        cov = np.stack([box(guide[:, i] * src[:, c]) - mean_i[:, i] * mean_p[:, c] for i in range(3)], -1)
        a = np.linalg.solve(sigma, cov[..., None])[..., 0]  # (B, H, W, 3)
        a = np.moveaxis(a, -1, 1)
        bb = mean_p[:, c] - (a * mean_i).sum(1)
        mean_a, mean_b = box(a), box(bb)
        if scale > 1:
            mean_a, mean_b = upsample_bilinear(mean_a, h, w), upsample_bilinear(mean_b, h, w)
        out.append((mean_a * full_guide).sum(1) + mean_b)
    return np.stack(out, 1)
