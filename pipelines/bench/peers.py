"""A Deep-Guided-Filter-style guided filter in plain PyTorch: the cumsum baseline of ``vision bench``.

This is the project's own code, written from the description of He's reference code and of Deep
Guided Filter (Wu et al., CVPR 2018): the window *sum* comes from a prefix sum and a difference
along rows, then along columns, with pixels outside the image counted as absent, and every window
mean divides that sum by the number N of pixels the window covers inside the image (the "valid"
border rule). Gradients are plain autograd through cumsum and indexing, as in DGF. It is a timing
and correctness peer, not a product path: long float32 prefix sums lose the variance of flat
images (see ARCHITECTURE.md, "Numerics"), which is one of the things our kernels fix.
"""
from __future__ import annotations

import torch


def _window_sum_1d(x: torch.Tensor, r: int, dim: int) -> torch.Tensor:
    n = x.shape[dim]
    # S has a leading zero, so the sum over [i - r, i + r] clipped to [0, n) is S[hi] - S[lo].
    zero = torch.zeros_like(x.narrow(dim, 0, 1))
    s = torch.cat([zero, torch.cumsum(x, dim=dim)], dim=dim)
    i = torch.arange(n, device=x.device)
    hi = (i + r + 1).clamp(max=n)
    lo = (i - r).clamp(min=0)
    return s.index_select(dim, hi) - s.index_select(dim, lo)


def cumsum_box_sum(x: torch.Tensor, r: int) -> torch.Tensor:
    """Sum over the (2r+1) x (2r+1) window of each pixel of ``x`` (B, C, H, W), zero outside the image."""
    return _window_sum_1d(_window_sum_1d(x, r, -2), r, -1)


def cumsum_box_mean(x: torch.Tensor, r: int, count: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over the in-image part of each pixel's window (divide by the valid count N)."""
    if count is None:
        count = window_count(x, r)
    return cumsum_box_sum(x, r) / count


def window_count(x: torch.Tensor, r: int) -> torch.Tensor:
    """N: how many pixels of each (2r+1)^2 window lie inside an H x W image, shape (1, 1, H, W)."""
    ones = torch.ones((1, 1, *x.shape[-2:]), dtype=x.dtype, device=x.device)
    return cumsum_box_sum(ones, r)


def cumsum_guided_filter(guide: torch.Tensor, src: torch.Tensor, r: int, eps: float) -> torch.Tensor:
    """Gray (channel-wise) guided filter, DGF style: guide (B, 1 or C, H, W), src (B, C, H, W).

    A multi-channel guide is used one channel per src channel (each a gray guided filter), which is
    what Deep Guided Filter does; it is a different filter from the 3x3 colour one.
    """
    if guide.shape[1] not in (1, src.shape[1]):
        raise ValueError(f"guide has {guide.shape[1]} channels; expected 1 or src's {src.shape[1]}")
    n = window_count(src, r)
    mean_i = cumsum_box_mean(guide, r, n)
    mean_p = cumsum_box_mean(src, r, n)
    cov_ip = cumsum_box_mean(guide * src, r, n) - mean_i * mean_p
    var_i = cumsum_box_mean(guide * guide, r, n) - mean_i * mean_i
    a = cov_ip / (var_i + eps)
    b = mean_p - a * mean_i
    return cumsum_box_mean(a, r, n) * guide + cumsum_box_mean(b, r, n)


def cumsum_guided_filter_color(guide: torch.Tensor, src: torch.Tensor, r: int, eps: float) -> torch.Tensor:
    """Colour guided filter (He et al., TPAMI 2013, 3x3 covariance per window) on cumsum box means.

    guide (B, 3, H, W), src (B, C, H, W). The 3x3 system (Sigma + eps U) a = cov(I, p) is solved in
    closed form with the adjugate of the symmetric matrix.
    """
    if guide.shape[1] != 3:
        raise ValueError(f"the colour guided filter needs a 3-channel guide, got {guide.shape[1]}")
    n = window_count(src, r)
    box = lambda t: cumsum_box_mean(t, r, n)  # noqa: E731
    i0, i1, i2 = guide[:, 0:1], guide[:, 1:2], guide[:, 2:3]
    m0, m1, m2 = box(i0), box(i1), box(i2)
    v00 = box(i0 * i0) - m0 * m0 + eps
    v01 = box(i0 * i1) - m0 * m1
    v02 = box(i0 * i2) - m0 * m2
    v11 = box(i1 * i1) - m1 * m1 + eps
    v12 = box(i1 * i2) - m1 * m2
    v22 = box(i2 * i2) - m2 * m2 + eps
    # Adjugate (cofactors) of the symmetric matrix [[v00 v01 v02] [v01 v11 v12] [v02 v12 v22]].
    c00 = v11 * v22 - v12 * v12
    c01 = v02 * v12 - v01 * v22
    c02 = v01 * v12 - v02 * v11
    c11 = v00 * v22 - v02 * v02
    c12 = v01 * v02 - v00 * v12
    c22 = v00 * v11 - v01 * v01
    det = v00 * c00 + v01 * c01 + v02 * c02
    mp = box(src)
    q0 = box(i0 * src) - m0 * mp
    q1 = box(i1 * src) - m1 * mp
    q2 = box(i2 * src) - m2 * mp
    a0 = (c00 * q0 + c01 * q1 + c02 * q2) / det
    a1 = (c01 * q0 + c11 * q1 + c12 * q2) / det
    a2 = (c02 * q0 + c12 * q1 + c22 * q2) / det
    b = mp - a0 * m0 - a1 * m1 - a2 * m2
    return box(a0) * i0 + box(a1) * i1 + box(a2) * i2 + box(b)
