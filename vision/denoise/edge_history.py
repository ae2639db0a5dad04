"""Temporal antialiasing of the denoised frame at the pixels whose footprint holds several surfaces.

One path-traced sample per pixel lands on one surface, and the guide buffers name that surface; the reference
averages every surface the pixel covers. So at an object's edge a regression on the buffers returns the light of
whichever surface this frame's sample hit, and the edge aliases and flickers (on the Blender sequences about
two thirds to nine tenths of the remaining error sat on the 11-17 % of pixels at object edges). Over frames the
samples land on each surface in proportion to its coverage, so the mean of the per-frame results at the same
place converges to the pixel's mean. This module keeps that mean at edge pixels only:

* **edge pixel**: some pixel of its 3 x 3 neighbourhood is not on its surface (the same-surface test of
  :mod:`.reproject`: object index, relative depth, normal);
* the previous frame's output history is read at the pixel's previous position with bilinear taps that show
  *any* surface of the pixel's 3 x 3 footprint (at an edge the history mixes both sides, as the reference does);
* the history is clipped to this frame's neighbourhood, mean +- ``gamma`` standard deviations per channel
  (variance clipping, Salvi 2016): what the footprint cannot contain now (a moved shadow, a lag) is cut off;
* it is blended with this frame's result with weight ``1 / n``, n frames at most ``cap`` (2 by default: the mean of
  this frame and the clipped history).

Elsewhere the result is the frame's own and the history restarts. Tensor ops, no host synchronisation; on the
CPU path (float32, no autograd) one numba loop (:mod:`.reproject_cpu`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from vision.kernels.runtime import decide, register_path

from .engines import NUMBA, TORCH, numba_takes
from .reproject import NO_HISTORY, Tolerances, _same_surface, bilinear_taps

CAP = 2       # frames an edge pixel's output history counts at most (2, 3 and 4 compared on the Blender sequences)
GAMMA = 1.0   # variance clipping: the history is kept within mean +- GAMMA sd of the frame's 3 x 3 neighbourhood
SHIFTS = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]


def _shift(t: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """``t`` (B, C, H, W) read at (y + dy, x + dx), the border replicated."""
    h, w = t.shape[-2:]
    return F.pad(t, (1, 1, 1, 1), mode="replicate")[..., 1 + dy:1 + dy + h, 1 + dx:1 + dx + w]


def _flat(keys: dict, b: int) -> dict:
    return {k: v.expand(b, -1, -1, -1).reshape(b, v.shape[1], -1) for k, v in keys.items()}


def edges(keys: dict, tol: Tolerances, b: int) -> torch.Tensor:
    """(B, 1, H, W) bool: pixels with a 3 x 3 neighbour that is not on their surface."""
    h, w = next(iter(keys.values())).shape[-2:]
    centre = _flat(keys, b)
    out = torch.zeros(b, 1, h * w, dtype=torch.bool, device=next(iter(keys.values())).device)
    for dy, dx in SHIFTS:
        if dy or dx:
            out |= ~_same_surface(_flat({k: _shift(v, dy, dx) for k, v in keys.items()}, b), centre, tol)
    return out.reshape(b, 1, h, w)


def edge_history(out: torch.Tensor, history: torch.Tensor | None, offset: torch.Tensor, prev_keys: dict | None,
                 cur_keys: dict, tol: Tolerances = Tolerances(), cap: int = CAP, gamma: float = GAMMA
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """This frame's denoised ``out`` (B, 3, H, W) with its edge pixels blended into their output history.

    ``history``: (B, 4, H, W), the previous call's second return (the output history and its frame count), or
    None; ``prev_keys`` / ``cur_keys``: the frames' ``depth`` / ``normal`` / ``index`` buffers (the same ones in
    both). Returns ``(result, history)``.
    """
    keys = {k: v for k, v in cur_keys.items() if v is not None}
    if history is None or not keys or prev_keys is None:
        return out, torch.cat([out, torch.ones_like(out[:, :1])], 1)
    tensors = (out, history, offset, *keys.values(), *(prev_keys[k] for k in keys))
    return decide("denoise.edge_history", out, tensors=tensors).run(out, history, offset, prev_keys, cur_keys, tol,
                                                                   cap, gamma)


def _edge_history_numba(out, history, offset, prev_keys, cur_keys, tol, cap, gamma):
    from . import reproject_cpu  # lazy: numba (about 200 modules) loads when this path first runs

    return reproject_cpu.edge_history(out, history, offset, prev_keys, cur_keys, tol, cap, gamma, NO_HISTORY)


def _edge_history_torch(out, history, offset, prev_keys, cur_keys, tol, cap, gamma):
    keys = {k: v for k, v in cur_keys.items() if v is not None}
    footprint = [{k: _shift(v.to(out.dtype), dy, dx) for k, v in keys.items()} for dy, dx in SHIFTS]
    prev, weight = bilinear_taps(history, offset, prev_keys, footprint, tol)
    has = weight > 0
    mean = F.avg_pool2d(out, 3, 1, 1, count_include_pad=False)
    sd = (F.avg_pool2d(out.square(), 3, 1, 1, count_include_pad=False) - mean.square()).clamp_min(0).sqrt()
    old = torch.minimum(torch.maximum(prev[:, :3], mean - gamma * sd), mean + gamma * sd)
    use = has & edges(keys, tol, out.shape[0])
    n = torch.where(use, (prev[:, 3:4] + 1).clamp_max(float(cap)), torch.ones_like(prev[:, 3:4]))
    result = torch.where(use, old + (out - old) / n, out)
    return result, torch.cat([result, n], 1)


register_path("denoise.edge_history", NUMBA, "torch", 5, supports=lambda tensors: numba_takes(*tensors),
              run=_edge_history_numba)
register_path("denoise.edge_history", TORCH, "torch", 0, run=_edge_history_torch)
