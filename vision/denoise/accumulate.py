"""The per-pixel history of :class:`~vision.denoise.temporal.TemporalDenoiser`: reprojection, rejection, the update.

The history holds, per pixel, the running mean ``h`` of the demodulated signal ``L = (colour - emission) /
max(albedo, floor)`` (what FLR and FLNR fit: smooth light without texture, so resampling it bilinearly costs
little) and the number ``n`` of frames in it. Each frame:

1. the previous history is reprojected with the motion vectors (:func:`.reproject.reproject`); taps on
   another surface are dropped, and a pixel with no valid tap starts over (disocclusion);
2. **change test** (:func:`changed`): where the light itself changed (a lamp switched on, a shadow that
   moved), the guides agree but the history is wrong. Over windows of 12 and 28 pixels with history, the mean
   luminance of this frame's samples and of the history differ by more than ``sigmas`` standard errors (the
   samples' own spread in the window, over their count, plus the history's) only by chance once in ~15000
   windows for ``sigmas = 4``; there the history restarts;
3. ``n <- min(n + 1, max_history)``, ``h <- h + (L - h) / n``: the exact mean of the last n frames while ``n``
   grows, an exponential average with weight ``1 / max_history`` after. The mean of ``L^2`` is kept the same way
   (SVGF's second moment), so each pixel knows its samples' variance and :func:`towards_history` can weigh the
   history against a fit.

Tensor ops on the buffers' device only, no host synchronisation. On the CPU path the change test's cell statistics and
the update run as numba passes (:mod:`.accumulate_cpu`), the update into one stack of planes that the next frame
reprojects as it lies.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from vision import kernels  # the ops are looked up on the package when called: it loads them on first use
from vision.kernels.runtime import decide, register_path

from .engines import NUMBA, TORCH, numba_takes
from .flr import area_down
from .reproject import Tolerances, reproject

CELL = 4  # the change test works on the means of 4 x 4 pixel cells
CHANGE_RADII = (1, 3)  # its windows, in cells (12 and 28 pixels): small ones find a moved shadow, large ones a dim light
MIN_FRAMES = 4  # towards_history trusts a pixel's sample variance from this many frames on
BIG = 1e30  # the stand-in for a square that overflowed (:func:`finite`; window sums of it stay finite)


@dataclass
class History:
    planes: torch.Tensor  # (B, 4 or 7, H, W): :attr:`mean`, :attr:`count`, then :attr:`square` when kept
    keys: dict            # the frame's depth / normal / index, to test the next frame's taps against

    @property
    def mean(self) -> torch.Tensor:
        """(B, 3, H, W) running mean of the demodulated signal."""
        return self.planes[:, :3]

    @property
    def count(self) -> torch.Tensor:
        """(B, 1, H, W) frames in the history (float)."""
        return self.planes[:, 3:4]

    @property
    def square(self) -> torch.Tensor | None:
        """(B, 3, H, W) running mean of the signal's square, None where it is not kept."""
        return self.planes[:, 4:7] if self.planes.shape[1] == 7 else None

    def variance_of_mean(self) -> torch.Tensor:
        """(B, 3, H, W): the variance of :attr:`mean` as an estimate, ``s^2 / n`` with ``s^2`` the unbiased sample
        variance of the pixel's ``n`` frames (0 where ``n < 2``: see :func:`towards_history`)."""
        n = self.count
        return (self.square - self.mean.square()).clamp_min(0) / (n - 1).clamp_min(1)


def luminance(x: torch.Tensor) -> torch.Tensor:
    """Mean of the channels, (B, 1, H, W): the noise statistics only need a consistent scalar."""
    return x.mean(1, keepdim=True)


def _box(x: torch.Tensor, r: int) -> torch.Tensor:
    return kernels.box_filter(x.contiguous(), r)


def finite(x: torch.Tensor) -> torch.Tensor:
    """``x`` with NaN and values past +-:data:`BIG` (squares of radiance near 1e19 and up overflow float32) at +-BIG,
    so window sums stay finite: the tests and factors built on them come out decided (or 0), not as an error."""
    return torch.nan_to_num(x, nan=BIG, posinf=BIG, neginf=-BIG).clamp(-BIG, BIG)


def _window_cells(x: torch.Tensor, r: int) -> torch.Tensor:
    """(H, W): how many cells of ``x``'s grid lie in the (2 r + 1)^2 window around each (fewer at the borders,
    where the box filter's default border averages the cells inside the image only)."""
    h, w = x.shape[-2:]
    iy = torch.arange(h, device=x.device, dtype=x.dtype)
    ix = torch.arange(w, device=x.device, dtype=x.dtype)
    ny = torch.minimum(iy + r, torch.full_like(iy, h - 1)) - torch.clamp(iy - r, min=0) + 1
    nx = torch.minimum(ix + r, torch.full_like(ix, w - 1)) - torch.clamp(ix - r, min=0) + 1
    return ny[:, None] * nx[None, :]


def changed(signal: torch.Tensor, previous: torch.Tensor, valid: torch.Tensor, count: torch.Tensor,
            sigmas: float, radii=CHANGE_RADII, cell: int = CELL) -> torch.Tensor:
    """Where the window means of ``signal`` (this frame) and ``previous`` (the reprojected history of ``count``
    frames) differ by more than ``sigmas`` standard errors, over the pixels with history (``valid``); (B, 1, H, W)
    bool. Windows are ``(2 r + 1)^2`` cells of ``cell x cell`` pixels around each pixel's cell, for each ``r`` in
    ``radii`` (a change at any of them counts). The standard error is the frame's own spread of samples in the
    window over their count (which counts edges as noise: conservative), plus the history's over its length."""
    cells = decide("denoise.change_cells", signal, tensors=(signal, previous, count)).run(signal, previous, valid,
                                                                                          count, cell)
    out = None
    for r in radii:
        s = _box(cells, r)
        k = s[:, :1]  # fraction of the window with history
        safe = k.clamp_min(1e-6)
        m_new, m_old = s[:, 1:2] / safe, s[:, 2:3] / safe
        var = (s[:, 3:4] / safe - m_new.square()).clamp_min(0)
        n_pix = k * _window_cells(cells, r) * float(cell * cell)
        n_hist = (s[:, 4:5] / safe).clamp_min(1)
        se2 = var / n_pix.clamp_min(1) * (1 + 1 / n_hist)
        tiny = 1e-8 * (m_new.abs() + m_old.abs() + 1e-6)
        flag = ((m_new - m_old).square() > sigmas ** 2 * (se2 + tiny)) & (n_pix >= 4)
        out = flag if out is None else out | flag
    h, w = signal.shape[-2:]
    return out.repeat_interleave(cell, -2).repeat_interleave(cell, -1)[..., :h, :w]


def _cpu():
    """The numba loops of this module's paths, :mod:`.accumulate_cpu`."""
    from . import accumulate_cpu  # lazy: numba (about 200 modules) loads when a numba path first runs

    return accumulate_cpu


def _change_cells_torch(signal, previous, valid, count, cell):
    """(B, 5, ceil(H / cell), ceil(W / cell)): the cell means of the valid pixels' count, luminance, history
    luminance, squared luminance and history length (:func:`changed`), :func:`finite`."""
    v = valid.to(signal.dtype)
    lum, old = luminance(signal), luminance(previous)
    return finite(area_down(torch.cat([v, lum * v, old * v, lum.square() * v, count * v], 1), cell))


def _change_cells_numba(signal, previous, valid, count, cell):
    """The same in one numba pass (:mod:`.accumulate_cpu`): the PyTorch path forms five frame-sized planes."""
    return _cpu().change_cells(signal, previous, valid, count, cell, BIG)


register_path("denoise.change_cells", NUMBA, "torch", 5, supports=lambda tensors: numba_takes(*tensors),
              run=_change_cells_numba)
register_path("denoise.change_cells", TORCH, "torch", 0, run=_change_cells_torch)


def start(signal: torch.Tensor, keys: dict, square: bool = False) -> History:
    """A history of one frame; ``square``: also keep the second moment (for :func:`towards_history`)."""
    return History(torch.cat([signal, torch.ones_like(signal[:, :1])] + ([signal.square()] if square else []), 1), keys)


def update(hist: History, signal: torch.Tensor, offset: torch.Tensor, keys: dict, tol: Tolerances,
           max_history: int, sigmas: float) -> tuple[History, torch.Tensor]:
    """The history after blending in this frame's demodulated ``signal``; also the reprojection weight map."""
    vals, weight = reproject(hist.planes, offset, hist.keys, keys, tol)
    valid = weight > 0
    if sigmas > 0:
        valid = valid & ~changed(signal, vals[:, :3], valid, vals[:, 3:4], sigmas)
    return decide("denoise.take_frame", signal, tensors=(vals, signal)).run(vals, signal, valid, keys, max_history
                                                                             ), weight


def _take_frame_numba(vals, signal, valid, keys, max_history) -> History:
    """:func:`update`'s last step in one numba pass (:mod:`.accumulate_cpu`), into one tensor whose channels the
    history's fields are (the next frame reprojects it as it lies)."""
    return History(_cpu().take_frame(vals, signal, valid, max_history), keys)


def _take_frame_torch(vals, signal, valid, keys, max_history) -> History:
    """:func:`update`'s last step: the count, then the means, towards ``signal`` by ``1 / count``."""
    mean, count, square = vals[:, :3], vals[:, 3:4], (vals[:, 4:7] if vals.shape[1] == 7 else None)
    count = torch.where(valid, count, torch.zeros_like(count))
    count = (count + 1).clamp_max(float(max_history))
    a = 1 / count
    mean = torch.where(valid, mean, signal)
    mean = mean + a * (signal - mean)
    if square is not None:
        sq = signal.square()
        square = torch.where(valid, square, sq)
        square = square + a * (sq - square)
    return History(torch.cat([mean, count] + ([] if square is None else [square]), 1), keys)


register_path("denoise.take_frame", NUMBA, "torch", 5, supports=lambda tensors: numba_takes(*tensors),
              run=_take_frame_numba)
register_path("denoise.take_frame", TORCH, "torch", 0, run=_take_frame_torch)


def towards_history(out: torch.Tensor, acc: torch.Tensor, hist: History, floor: torch.Tensor, radius: int = 2,
                    min_frames: int = MIN_FRAMES) -> torch.Tensor:
    """The denoised frame ``out`` moved towards the accumulated colour ``acc`` as far as the history's own noise
    allows: ``out + s (acc - out)`` with the positive-part James-Stein factor, per window of ``(2 radius + 1)^2``
    pixels x 3 channels,

        ``s = max(0, 1 - sum V / sum (acc - out)^2)``,  ``V = floor^2 hist.variance_of_mean()``

    (``floor`` the remodulation factor, so ``V`` is the variance of ``acc``). ``(acc - out)^2`` estimates the fit's
    squared bias plus ``V``: where the history has averaged its noise down below the fit's bias (long histories,
    detail the fit smooths away: glossy highlights, fine shading, thin shadows) the history wins; where it is still
    noisy, the fit. A sample variance from fewer than ``min_frames`` frames is too rough to trust: there ``s = 0``.
    The same shrinkage as FLNR's detail blend (:func:`~.flnr.detail.detail_blend`), with the pixel's own frames
    for samples instead of its 3 x 3 neighbours. All (B, C, H, W); tensor ops, no host synchronisation."""
    d = acc - out
    v = (hist.variance_of_mean() * floor.square()).sum(1, keepdim=True)
    # squares past the float range become BIG: the window's factor is then about 0 or NaN (the fit is kept)
    e = torch.cat([d.square().sum(1, keepdim=True), v], 1)
    sums = _box(finite(e), radius)
    s = (1 - sums[:, 1:2] / sums[:, :1]).clamp(0, 1)
    s = torch.where((hist.count >= min_frames) & torch.isfinite(s), s, torch.zeros_like(s))
    return out + s * d
