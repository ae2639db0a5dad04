"""Reprojection of a per-pixel history into the current frame with the renderer's motion vectors.

Motion conventions (:func:`previous_offset`), in pixels, image rows counted downwards:

* ``"cycles"``: Blender Cycles' ``Vector`` pass, 4 channels. ``X, Y`` is the sample's position in the
  *previous* frame minus its position in this one, in Blender's raster space (y up); ``Z, W`` is its position
  in this frame minus its position in the *next* one, also y up. So the previous position of pixel (row i,
  column j) is ``(i - Y, j + X)``. Checked against a float64 projection of Cycles' Position pass through the
  recorded camera and object matrices (``tests/test_reproject.py``, ``tests/data/blender/seq``).
* ``"offset"``: 2 channels, the previous position minus the current one as (columns, rows), rows down.

:func:`reproject` reads a previous-frame buffer at those positions with bilinear weights, keeping only the
four taps whose surface is the current pixel's: same object index (when given), depth within a relative
tolerance, normals within an angle, both or neither a surface (the sky). Taps
outside the frame or on another surface (a disocclusion, a thin object that moved away) get weight 0; a
pixel whose taps all fail has no history. Everything runs as tensor ops on the buffers' device with no host
synchronisation, so it fits the Triton path and CUDA graphs; on the CPU path, float32 without autograd, one numba
loop does it (:mod:`.reproject_cpu`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from vision.kernels.runtime import decide, register_path

from .engines import NUMBA, TORCH, numba_takes

CONVENTIONS = ("cycles", "offset")
# the buffers that tell surfaces apart (the history is demodulated light, continuous across albedo edges), in the
# order the numba loops take them
SURFACE_KEYS = ("depth", "normal", "index")
NO_HISTORY = 1e-4  # a pixel whose valid taps weigh less than this in total has no history


@dataclass(frozen=True)
class Tolerances:
    """When a previous-frame tap shows the current pixel's surface: ``|d0 - d1| <= depth * max(d0, d1)``
    (relative depth) and ``cos(n0, n1) >= normal``."""

    depth: float = 0.1
    normal: float = 0.9


def previous_offset(motion: torch.Tensor, convention: str = "cycles") -> torch.Tensor:
    """(B, 2, H, W) offset (columns, rows; rows down) from each pixel to where its surface was in the previous frame.

    Args:
        motion: (B, 4, H, W) Cycles ``Vector`` pass (``convention="cycles"``) or (B, 2, H, W) offsets
            (``"offset"``).

    Example:
        >>> off = previous_offset(vector)          # vector: (1, 4, H, W) from a Cycles EXR
        >>> prev_row = torch.arange(H)[:, None] + off[0, 1]
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"motion convention must be one of {', '.join(CONVENTIONS)}, got {convention!r}")
    need = 4 if convention == "cycles" else 2
    if motion.dim() != 4 or motion.shape[1] < 2 or (convention == "cycles" and motion.shape[1] != need):
        raise ValueError(f"motion ({convention}) must be (B, {need}, H, W), got shape {tuple(motion.shape)}")
    if convention == "cycles":
        return torch.cat([motion[:, :1], -motion[:, 1:2]], 1)
    return motion[:, :2]


def _same_surface(prev: dict, cur: dict, tol: Tolerances) -> torch.Tensor:
    """Per tap: whether the gathered previous-frame keys ``prev`` show the surface of ``cur`` (both (B, C, N))."""
    ok = None

    def both(a, b):
        return b if a is None else a & b

    if cur.get("index") is not None:
        ok = both(ok, (prev["index"] - cur["index"]).abs() < 0.5)
    if cur.get("depth") is not None:
        d0, d1 = prev["depth"], cur["depth"]
        s0, s1 = d0 > 0, d1 > 0
        close = (d0 - d1).abs() <= tol.depth * torch.maximum(d0, d1)
        ok = both(ok, (s0 & s1 & close) | (~s0 & ~s1))
    if cur.get("normal") is not None:
        n0, n1 = prev["normal"], cur["normal"]
        dot = (n0 * n1).sum(1, keepdim=True)
        norm = (n0.square().sum(1, keepdim=True) * n1.square().sum(1, keepdim=True)).sqrt()
        # a zero normal (no surface: the sky) leaves the decision to depth and index
        ok = both(ok, (dot >= tol.normal * norm) | (norm <= 0))
    return ok


def reproject(history: torch.Tensor, offset: torch.Tensor, prev_keys: dict, cur_keys: dict,
              tol: Tolerances = Tolerances()) -> tuple[torch.Tensor, torch.Tensor]:
    """Read ``history`` (B, C, H, W, the previous frame's) at each pixel's previous position.

    ``prev_keys`` / ``cur_keys``: the previous and current frames' ``depth``, ``normal`` and ``index`` buffers
    (any may be None, but the same ones in both) that decide which taps show the same surface. Returns ``(values, weight)``: the bilinear mean of the valid taps (0 where there is none) and
    the total bilinear weight of those taps (B, 1, H, W), 0 at a disocclusion, 1 where every tap is valid.

    Example:
        >>> vals, w = reproject(prev_history, previous_offset(vector), prev_guides, guides)
        >>> has_history = w > 0
    """
    unknown = (set(cur_keys) | set(prev_keys)) - set(SURFACE_KEYS)
    if unknown:
        raise ValueError(f"unknown key buffer(s) {', '.join(sorted(unknown))}: depth, normal and index tell surfaces apart")
    keys = [k for k, v in cur_keys.items() if v is not None]
    if any(prev_keys.get(k) is None for k in keys):
        raise ValueError(f"the previous frame lacks key buffer(s) the current one has ({', '.join(keys)})")
    tensors = (history, offset, *(cur_keys[k] for k in keys), *(prev_keys[k] for k in keys))
    return decide("denoise.reproject", history, tensors=tensors).run(history, offset, prev_keys, cur_keys, tol)


def _reproject_numba(history, offset, prev_keys, cur_keys, tol):
    from . import reproject_cpu  # lazy: numba (about 200 modules) loads when this path first runs

    return reproject_cpu.reproject(history, offset, prev_keys, cur_keys, tol, NO_HISTORY)


def _reproject_torch(history, offset, prev_keys, cur_keys, tol):
    return bilinear_taps(history, offset, prev_keys, [{k: v for k, v in cur_keys.items() if v is not None}], tol)


register_path("denoise.reproject", NUMBA, "torch", 5, supports=lambda tensors: numba_takes(*tensors),
              run=_reproject_numba)
register_path("denoise.reproject", TORCH, "torch", 0, run=_reproject_torch)


def bilinear_taps(history: torch.Tensor, offset: torch.Tensor, prev_keys: dict, surfaces: list[dict],
                  tol: Tolerances) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`reproject`'s PyTorch path, for any set of surfaces: a tap counts when it lies in the frame and shows
    one of ``surfaces`` (dicts of current-frame key buffers, (B or 1, C, H, W); one dict for the pixel's own
    surface, nine shifted ones for its 3 x 3 footprint in :mod:`.edge_history`)."""
    b, c, h, w = history.shape
    dev, dt = history.device, history.dtype
    off = offset.to(dt)
    ys = torch.arange(h, device=dev, dtype=dt).view(1, 1, h, 1) + off[:, 1:2]
    xs = torch.arange(w, device=dev, dtype=dt).view(1, 1, 1, w) + off[:, :1]
    x0, y0 = xs.floor(), ys.floor()
    fx, fy = xs - x0, ys - y0
    flat = [{k: v.to(dt).expand(b, -1, -1, -1).reshape(b, -1, h * w) for k, v in keys.items()} for keys in surfaces]
    prev_flat = {k: prev_keys[k].to(dt).expand(b, -1, -1, -1).reshape(b, -1, h * w) for k in surfaces[0]}
    hist = history.reshape(b, c, h * w)
    total = torch.zeros(b, 1, h * w, device=dev, dtype=dt)
    acc = torch.zeros(b, c, h * w, device=dev, dtype=dt)
    zero = torch.zeros((), device=dev, dtype=dt)
    for dx, dy in ((0, 0), (1, 0), (0, 1), (1, 1)):
        xi, yi = x0 + dx, y0 + dy
        wt = (fx if dx else 1 - fx) * (fy if dy else 1 - fy)
        ok = ((xi >= 0) & (xi <= w - 1) & (yi >= 0) & (yi <= h - 1)).reshape(b, 1, h * w)
        idx = (yi.clamp(0, h - 1) * w + xi.clamp(0, w - 1)).long().reshape(b, 1, h * w)
        if prev_flat:
            tap = {k: v.gather(2, idx.expand(-1, v.shape[1], -1)) for k, v in prev_flat.items()}
            shown = torch.zeros_like(ok)
            for cur in flat:
                shown |= _same_surface(tap, cur, tol)
            ok = ok & shown
        wt = torch.where(ok, wt.reshape(b, 1, h * w), zero)
        total = total + wt
        acc = acc + wt * hist.gather(2, idx.expand(-1, c, -1))
    has = total > NO_HISTORY
    values = torch.where(has, acc / total.clamp_min(NO_HISTORY), zero)
    return values.reshape(b, c, h, w), torch.where(has, total, zero).reshape(b, 1, h, w)
