"""Pixels near discontinuities: where dense heads differ most (an object's outline, a depth step).

``edge_band(segment, depth, width=4)`` marks every pixel within ``width`` pixels (Chebyshev distance, i.e.
a (2 width + 1)^2 square) of an edge, where an edge pixel is one whose 4-neighbour has a different
instance id, or a depth that differs by more than ``rel_jump`` relative to the nearer of the two
(pixels without a surface, depth <= 0, count as a different surface).

    >>> band = edge_band(segment, depth, width=4)   # (B, 1, H, W) bool
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _batched(x: torch.Tensor, name: str) -> torch.Tensor:
    if x.dim() == 3:
        x = x[None]
    if x.dim() != 4 or x.shape[1] != 1:
        raise ValueError(f"{name} must be (1, H, W) or (B, 1, H, W), got {tuple(x.shape)}")
    return x


def edge_pixels(segment: torch.Tensor | None = None, depth: torch.Tensor | None = None,
                rel_jump: float = 0.05) -> torch.Tensor:
    """(B, 1, H, W) bool: pixels on an id or depth discontinuity with a right or lower neighbour (both
    pixels of each such pair are marked)."""
    if segment is None and depth is None:
        raise ValueError("edge_pixels needs a segment map, a depth map or both")
    ref = _batched(segment if segment is not None else depth, "segment" if segment is not None else "depth")
    out = torch.zeros(ref.shape, dtype=torch.bool, device=ref.device)

    def mark(diff_h: torch.Tensor, diff_v: torch.Tensor) -> None:
        out[..., :, 1:] |= diff_h
        out[..., :, :-1] |= diff_h
        out[..., 1:, :] |= diff_v
        out[..., :-1, :] |= diff_v

    if segment is not None:
        s = _batched(segment, "segment")
        mark(s[..., :, 1:] != s[..., :, :-1], s[..., 1:, :] != s[..., :-1, :])
    if depth is not None:
        d = _batched(depth, "depth").double()
        if d.shape != ref.shape:
            raise ValueError(f"segment {tuple(ref.shape)} and depth {tuple(d.shape)} differ in shape")

        def jump(a, b):
            hole = (a <= 0) != (b <= 0)
            near = torch.minimum(a, b).clamp_min(1e-12)
            return hole | (((a - b).abs() / near > rel_jump) & (a > 0) & (b > 0))

        mark(jump(d[..., :, 1:], d[..., :, :-1]), jump(d[..., 1:, :], d[..., :-1, :]))
    return out


def edge_band(segment: torch.Tensor | None = None, depth: torch.Tensor | None = None, width: int = 4,
              rel_jump: float = 0.05) -> torch.Tensor:
    """(B, 1, H, W) bool: pixels within ``width`` pixels (a square neighbourhood) of an edge pixel."""
    if width < 0:
        raise ValueError(f"width must be >= 0, got {width}")
    edges = edge_pixels(segment, depth, rel_jump).float()
    if width == 0:
        return edges > 0
    return F.max_pool2d(edges, 2 * width + 1, stride=1, padding=width) > 0
