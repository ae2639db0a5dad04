"""Window means for radii at least as large as the image, at the cost of the image, exactly.

Along one axis of length n, the window of radius R grows past the image in a way every border mode makes
regular, so R can be reduced to a radius r' below about twice the axis length plus a correction that is a
fixed linear functional of the row (or column):

``"valid"``      the window holds the whole axis once R >= n - 1: the mean equals the mean with r' = n - 1.
``"reflect"``    the padded axis is periodic with period P = 2n - 2 (P = 1 when n = 1): a window 2P longer
                 holds two more periods, so sum_R = sum_{R - kP} + 2k T with T = 2 sum(x) - x_0 - x_{n-1}.
``"symmetric"``  the same with P = 2n and T = 2 sum(x).
``"replicate"``  once R >= n - 1 each extra unit of radius adds one x_0 and one x_{n-1}: P = 1,
                 T = (x_0 + x_{n-1}) / 2.

So the 1-D mean is ``A_R x = c1 A_{r'} x + c2 T(x)`` with c1 = (2r'+1)/(2R+1), c2 = 2k/(2R+1), and the 2-D
mean is the row operator followed by the column operator. Nothing larger than the image is allocated.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..border import pad_index, valid_count


def axis_plan(n: int, r: int, border: str) -> tuple[int, float, float, torch.Tensor | None]:
    """(r', c1, c2, weights w of T) for one axis: A_R x = c1 A_{r'} x + c2 (w . x)."""
    if border == "valid":
        return min(r, max(n - 1, 0)), 1.0, 0.0, None
    w = torch.zeros(n, dtype=torch.float64)
    if n == 1 or border == "replicate":
        w[0] += 0.5
        w[-1] += 0.5
        k = max(0, r - (n - 1))  # each unit of radius past n - 1 adds x_0 + x_{n-1} = 2 T
    else:
        period = 2 * n - 2 if border == "reflect" else 2 * n
        w += 2.0
        if border == "reflect":
            w[0] -= 1.0
            w[-1] -= 1.0
        k = r // period
        rr = r - k * period
        return rr, (2 * rr + 1) / (2 * r + 1), 2 * k / (2 * r + 1), w
    rr = r - k
    return rr, (2 * rr + 1) / (2 * r + 1), 2 * k / (2 * r + 1), w


def needs_reduction(h: int, w: int, r: int, border: str) -> bool:
    """Whether r is large enough for the reduction to change the work (else the ordinary path runs)."""
    return any(axis_plan(n, r, border)[0] != r for n in (h, w))


def _sum_along(x: torch.Tensor, k: int, dim: int) -> torch.Tensor:
    """Sums of every length-k run along ``dim`` of x (..., H, W) (direct sums, no prefix sums)."""
    lead = x.shape[:-2]
    t = x.reshape(-1, 1, *x.shape[-2:])
    size = (k, 1) if dim == -2 else (1, k)
    t = F.avg_pool2d(t, size, stride=1) * float(k)
    return t.reshape(*lead, *t.shape[-2:])


def _pad_axis(x: torch.Tensor, r: int, border: str, dim: int) -> torch.Tensor:
    n = x.shape[dim]
    if border == "valid":
        pads = (0, 0, r, r) if dim == -2 else (r, r)
        return F.pad(x, pads)
    return x.index_select(dim, pad_index(n, r, border, x.device))


def _axis_mean(x: torch.Tensor, r: int, border: str, dim: int) -> torch.Tensor:
    """1-D window mean of radius r along ``dim`` (the ordinary definition, padding r on each side)."""
    n = x.shape[dim]
    s = _sum_along(_pad_axis(x, r, border, dim), 2 * r + 1, dim)
    if border == "valid":
        cnt = torch.as_tensor(valid_count(n, r), dtype=x.dtype, device=x.device)
        return s / (cnt[:, None] if dim == -2 else cnt)
    return s * (1.0 / (2 * r + 1))


def _axis_mean_adjoint(g: torch.Tensor, r: int, border: str, dim: int) -> torch.Tensor:
    n = g.shape[dim]
    if border == "valid":
        cnt = torch.as_tensor(valid_count(n, r), dtype=g.dtype, device=g.device)
        return _sum_along(_pad_axis(g / (cnt[:, None] if dim == -2 else cnt), r, "valid", dim), 2 * r + 1, dim)
    z = _sum_along(_pad_axis(g, 2 * r, "valid", dim), 2 * r + 1, dim) * (1.0 / (2 * r + 1))
    out = torch.zeros_like(g)
    return out.index_add_(dim, pad_index(n, r, border, g.device), z)


def _axis_op(x: torch.Tensor, r: int, border: str, dim: int, adjoint: bool) -> torch.Tensor:
    n = x.shape[dim]
    rr, c1, c2, w = axis_plan(n, r, border)
    out = (_axis_mean_adjoint if adjoint else _axis_mean)(x, rr, border, dim)
    if c2 == 0.0:
        return out if c1 == 1.0 else out * c1
    w = w.to(device=x.device, dtype=x.dtype)
    wv = w[:, None] if dim == -2 else w
    if adjoint:  # T^T g = w times the sum of g along the axis
        t = x.sum(dim, keepdim=True) * wv
    else:
        t = (x * wv).sum(dim, keepdim=True)
    return out * c1 + t * c2


def box_mean(x: torch.Tensor, r: int, border: str) -> torch.Tensor:
    """Window mean of x (..., H, W) for any radius, exactly, at a cost bounded by the image."""
    return _axis_op(_axis_op(x, r, border, -1, False), r, border, -2, False)


def box_mean_adjoint(g: torch.Tensor, r: int, border: str) -> torch.Tensor:
    return _axis_op(_axis_op(g, r, border, -2, True), r, border, -1, True)
