"""The input blend: a denoised frame moved back towards its noisy input wherever the input is the better estimate.

A fixed smoother has a bias that does not fall with the noise: at 64 or 256 samples per pixel the input is often
closer to the truth than any window fit of it (silhouettes, thin geometry, reflected texture, shadow edges). The
blend keeps what the denoiser gained where the input is noisy and converges to the input as its noise falls:

    ``out' = out + s (y - out)``,   ``s = max(0, 1 - V / (sqrt(g) E))``

with ``E`` and ``V`` the means over a ``(2 radius + 1)^2`` window (3 channels summed) of the squared residual
``(y - out)^2`` and of the input's noise variance, and ``m`` is ``out`` moved part of the way towards a sharper
fit (below). ``E`` estimates the fit's squared bias plus ``V``, so with
``g = 1`` this is the positive-part James-Stein factor (as the temporal history's
:func:`~.accumulate.towards_history`): where the bias clearly exceeds the noise the input wins, where the noise
dominates the fit is kept.

``g`` (:func:`frame_share`) is the same factor for the frame as a whole, a median over its windows: the share of
the residual that is the fit's bias rather than noise. Path-traced noise at a few samples per pixel is so
heavy-tailed (fireflies, clusters of bright samples) that a window of 49 pixels often shows twice its expected
energy; a window's evidence against the fit must then be as much stronger as the frame's is weak. At 1 spp the
frame's residual is nearly all noise (``g ~ 0``) and the result is the fit's; as the noise falls ``g -> 1``. (The
square root, rather than ``g`` itself, was chosen on tuning scenes: ``g`` gave up a third of the gain at 16 spp.)

The noise variance comes from the frame itself, with no reference and no sample count: path-traced pixels
(box pixel filter, independent samples) carry independent noise, and the 3 x 3 kernel ``k k^T / 6`` with
``k = (1, -2, 1)`` has unit energy, so applied to independent noise of variance ``v`` it returns values of mean
square ``v``, while it cancels every constant, linear ramp and straight axis-aligned edge of the signal (its rows
and columns each sum to zero; Immerkaer 1996). It is applied, divided by the albedo, to the residual of a sharp
fit of the input in small windows on the guides (``sharp``: see :data:`SHARP_GUIDES`), so that neither the
albedo's texture nor the edges the guides explain count as noise. As the noise falls, ``V`` falls with it while
the bias stays, so ``s -> 1`` and the result goes to the input.

The second difference also passes signal that no guide explains: texture reflected in metal and glass, highlights.
Told the sample count, the estimate is capped where it exceeds its region's level by more than noise would
(:func:`noise_cap`, :func:`regional_noise`): the noise level relative to the light changes slowly from region to
region, such signal is local; a lone bright sample (a firefly) keeps its share (:data:`ISOLATION`), all of it up to
:data:`NOISE_CAP_SPP` samples and less above, where a lone bright pixel is more likely a glint (:func:`lone_share`).

Between the two, the sharp fit ``f`` is a third candidate: ``m = out + w (f - out)`` with the least-squares weight
of the window, ``w = (mean (y - out)(f - out) - h V) / mean (f - out)^2`` in [0, 1], times ``sqrt(g)``: the
residual's regression on the step towards ``f`` measures how much of the fit's error the step removes, less
what ``f`` owes to the noise it follows (``h``: its self-leverage, :data:`SHARP_LEVERAGE`). At a few samples it
takes the sharper fit where the main one smooths over detail; at many, ``s ~ 1`` and the input wins.

Below :data:`NOISE_CAP_SPP` samples per pixel (the count known), FLNR's ``s`` is the factor of ``m`` rather than
of ``out`` (:func:`blend_towards_input` says why FLR's is not): measured on the residual ``y - m``, whose window
mean is ``e' = E - 2 w rd + w^2 dd`` (``rd``, ``dd``: the window means of ``(y - out)(f - out)`` and
``(f - out)^2``) and whose noise is ``(1 - h w)`` of the input's once the step followed part of it,
``s = max(0, 1 - (1 - h w) V / (sqrt(g) e'))``: the factor that minimises the expected squared error of
``m + s (y - m)`` when ``m`` carries ``h w`` of the input's noise. Where the sharp fit recovers what the main one
smoothed away, the input is not needed there. From 16 samples up, and with an unknown count, ``s`` stays
``out``'s: the noise estimate then also holds signal the second difference lets through, and a residual the step
made small kept the sharp fit where the input was better (on the two tuning scenes: +0.20 dB at 4 spp, -0.30 /
-0.50 dB at 64 / 256 spp).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from vision.kernels import box_filter
from vision.kernels.runtime import decide, register_path
from vision.kernels.validate import as_float

from .accumulate import BIG
from .engines import NUMBA, TORCH, numba_takes
from .features import REGRESSION_ORDER, feature_stats, raw_features
from .flr import flr, flr_tiled
from .repair import QUANTILE_SAMPLES
from .signal import ALBEDO_FLOOR

DEFAULT_RADIUS = 3  # 7 x 7 pixels x 3 channels per window
# From NOISE_CAP_SPP samples per pixel up, 5 x 5: the fit's bias is local (a shadow between two books, a
# silhouette), and a smaller window gives each pixel the factor of its own neighbourhood, while 75 samples of light
# noise still steady the factor. On the two tuning scenes 2 was 0.1-0.3 dB above 3 at 16-256 spp and level at 4 spp;
# at 1 spp, and with an unknown sample count (the noise may be heavy-tailed), the 7 x 7 window keeps the fit better.
LOW_NOISE_RADIUS = 2
# The noise is measured on the residual of FLR on the normal and the albedo (emission taken out) in small windows
# (2 pixels' radius on 2 x 2 cells, ridge 0.1 in units of each standardised guide's variance): it follows the
# edges those guides explain (silhouettes, creases, texture borders), so they do not count as noise, and it is too
# stiff to follow the noise itself. Chosen on two tuning scenes rendered at 1-256 spp and the bundled 1-spp scenes,
# never on the evaluation scenes: depth, AO and full-resolution cells changed nothing there but the cost; without
# the albedo, or with the main fit's own residual, the noise was overestimated up to 5x at 256 spp.
SHARP_GUIDES = ("normal", "albedo", "emission")
SHARP_RADIUS = 2
SHARP_SCALE = 2
SHARP_EPS = 0.1
# The noise estimate's cap: where a window's estimate exceeds NOISE_CAP times its region's level (relative to the
# fit's own energy), the excess is taken for signal the 3 x 3 difference lets through (texture reflected in metal and
# glass, highlights) and the estimate is capped there. The region's level is the median, over CAP_CELLS x CAP_CELLS
# cells of CAP_CELL x CAP_CELL pixels, of each cell's mean log ratio of estimate to energy: a median, so that up to
# half a region may be such signal. Below NOISE_CAP_SPP samples per pixel the cap widens as NOISE_CAP_SPP / spp: the
# noise of a window is then heavy-tailed (clusters of bright samples), and a tight cap took it for signal. Chosen on
# the two tuning scenes at 4-256 spp: 2 gained 0.7 / 0.4 / 0.3 dB at 16 / 64 / 256 spp, and lost 0.1 dB at 4 spp
# before the widening; with an unknown sample count there is no cap.
NOISE_CAP = 2.0
NOISE_CAP_SPP = 16
# A firefly is noise however far above its region it stands, so the cap leaves a window's brightest lone sample in
# the estimate: a pixel whose noise energy is at least ISOLATION times each of its 8 neighbours' (one sample's 3 x 3
# second difference puts 4 times as much on its own pixel as on each edge neighbour, 16 times as on each diagonal
# one; 3 leaves room for the noise around it). A one-pixel glint looks the same and loses the cap's help: on the
# tuning scenes the cap then gained 0.1 / 0.1 / 0.3 dB at 16 / 64 / 256 spp instead of 0.7 / 0.4 / 0.3, but a
# 16-spp exterior no longer kept its fireflies. Above NOISE_CAP_SPP samples a lone pixel keeps only NOISE_CAP_SPP /
# spp of that share (:func:`lone_share`): one sample's excess over its pixel falls as 1 / spp while a glint's stays,
# so the odds that a lone bright pixel is a firefly rather than a glint fall as the samples grow (as 1 / spp for a
# tail whose variance is just finite). With the whole share, at Blender's default adaptive sampling (noise threshold
# 0.01) the tuning scenes' small highlights were smoothed away: 0.6 / 1.8 dB below the input at 256 / 1024 spp.
ISOLATION = 3.0
CAP_CELL = 4
CAP_CELLS = 5
# The sharp fit's self-leverage, the covariance of its output with the input's noise per unit of noise variance:
# it fits 7 coefficients (the normal's 3, the albedo's 3, a constant) in windows of 5 x 5 cells of 2 x 2 pixels,
# about 7 / 100; rounded up, to the cautious side
SHARP_LEVERAGE = 0.1

def noise_energy(x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
    """Per pixel and channel, the square of the unit-energy 3 x 3 second-difference ``k k^T / 6`` of ``x``
    (B, C, H, W), times ``scale ** 2`` (broadcast to ``x``; default 1): of mean ``v`` where ``x`` is a smooth signal
    plus independent noise of variance ``v``. Computed at the interior pixels and copied outwards at the border (no
    padding enters it). Frames under 3 x 3 give zeros. Separable: a second difference along rows, then along
    columns."""
    if x.shape[-2] < 3 or x.shape[-1] < 3:
        return torch.zeros_like(x)
    rows = x[..., :, 2:] + x[..., :, :-2] - 2 * x[..., :, 1:-1]
    both = rows[..., 2:, :] + rows[..., :-2, :]
    both.sub_(rows[..., 1:-1, :], alpha=2).div_(6.0)
    if scale is not None:
        both.mul_(scale.expand_as(x)[..., 1:-1, 1:-1])
    return F.pad(both.square_(), (1, 1, 1, 1), mode="replicate")


def sharp_fit_stats(guides: dict) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The mean and standard deviation of the sharp fit's guide features (:data:`SHARP_GUIDES`), (B, K, 1, 1) each,
    from a strided subsample of about :data:`~.repair.QUANTILE_SAMPLES` pixels (the whole frame's take 20 ms at
    1280 x 720; they only set the ridge's scale); None without guides."""
    shape = {k: guides.get(k) for k in REGRESSION_ORDER if k in SHARP_GUIDES and guides.get(k) is not None}
    if not shape:
        return None
    step = _subsample_step(*next(iter(shape.values())).shape[-2:])
    # the subsample taken before the guides are stacked (none of them is depth, whose log reads the whole frame)
    raw, _ = raw_features({k: v[..., ::step, ::step] for k, v in shape.items()})
    return feature_stats(raw)


def frame_share(energy: torch.Tensor, noise: torch.Tensor, exclude: torch.Tensor | None = None) -> torch.Tensor:
    """The share of a frame's residual that is the fit's bias rather than the input's noise, per image (B, 1, 1, 1):
    ``max(0, 1 - median(noise / energy))`` over the windows whose residual ``energy`` is at least the frame's median
    (the windows where the choice matters; the sky or a wall the fit gets right would otherwise speak for the
    frame), from a strided subsample of about :data:`~.repair.QUANTILE_SAMPLES` windows. A median, so that one
    firefly cannot decide it. 0 where nothing is known. ``energy`` and ``noise``: (B, 1, H, W) window means;
    ``exclude`` (B, 1, H, W) bool or None: windows that take no part (those centred on emitter pixels, which are put
    back as they are and say nothing about the fit), so that a lamp in view does not move the frame's share."""
    b, _, h, w = energy.shape
    step = _subsample_step(h, w)
    e = energy[..., ::step, ::step].reshape(b, -1)
    q = noise[..., ::step, ::step].reshape(b, -1) / e
    if exclude is not None:
        e = e.masked_fill(exclude[..., ::step, ::step].expand(b, -1, -1, -1).reshape(b, -1), math.nan)
    q = torch.where((e >= e.nanmedian(dim=1, keepdim=True).values) & torch.isfinite(q), q,
                    torch.full_like(q, math.nan))
    return (1 - torch.nanmedian(q, dim=1).values).nan_to_num(0.0).clamp(0, 1).view(b, 1, 1, 1)


def _subsample_step(h: int, w: int) -> int:
    """The stride along each axis of a strided subsample of about :data:`~.repair.QUANTILE_SAMPLES` of an H x W
    frame's pixels (or windows: those :func:`frame_share` reads)."""
    return max(1, math.ceil(math.sqrt(h * w / QUANTILE_SAMPLES)))


def noise_cap(spp: float | None) -> float | None:
    """The factor a window's noise estimate may exceed its region's level by, for a frame of ``spp`` samples per
    pixel: :data:`NOISE_CAP` from :data:`NOISE_CAP_SPP` samples up, wider below; None (no cap) when ``spp`` is
    unknown.

    Example:
        >>> noise_cap(64), noise_cap(4), noise_cap(None)
        (2.0, 8.0, None)
    """
    return None if spp is None else NOISE_CAP * max(1.0, NOISE_CAP_SPP / float(spp))


def lone_share(spp: float | None) -> float:
    """The share of a window's lone bright pixel (:data:`ISOLATION`) its capped noise estimate keeps, for a frame of
    ``spp`` samples per pixel: all of it up to :data:`NOISE_CAP_SPP` samples (and when ``spp`` is unknown, which has
    no cap), ``NOISE_CAP_SPP / spp`` above, where such a pixel is ever more likely a glint than a firefly.

    Example:
        >>> lone_share(4), lone_share(16), lone_share(256), lone_share(None)
        (1.0, 1.0, 0.0625, 1.0)
    """
    return 1.0 if spp is None or spp <= NOISE_CAP_SPP else NOISE_CAP_SPP / float(spp)


def blend_radius(spp: float | None) -> int:
    """The blend's window radius for a frame of ``spp`` samples per pixel (None: unknown): :data:`LOW_NOISE_RADIUS`
    from :data:`NOISE_CAP_SPP` samples up, else :data:`DEFAULT_RADIUS`.

    Example:
        >>> blend_radius(64), blend_radius(4), blend_radius(None)
        (2, 3, 3)
    """
    return DEFAULT_RADIUS if spp is None or spp < NOISE_CAP_SPP else LOW_NOISE_RADIUS


def shrinks_after_step(spp: float | None) -> bool:
    """Whether the factor ``s`` of a frame of ``spp`` samples per pixel (None: unknown) is measured after the step
    towards the sharp fit (module docstring): below :data:`NOISE_CAP_SPP` samples, where the noise, not the fits'
    bias, makes most of the residual, and not when the sample count is unknown.

    Example:
        >>> shrinks_after_step(4), shrinks_after_step(16), shrinks_after_step(None)
        (True, False, False)
    """
    return spp is not None and spp < NOISE_CAP_SPP


def regional_noise(noise: torch.Tensor, energy: torch.Tensor) -> torch.Tensor:
    """The noise level of each window's region, (B, 1, H, W): ``energy`` times the exponential of the median, over
    :data:`CAP_CELLS` x :data:`CAP_CELLS` cells of :data:`CAP_CELL` x :data:`CAP_CELL` pixels around it, of the
    cells' mean ``log(noise / energy)`` (a geometric mean: one bright window moves it little), interpolated
    bilinearly between cell centres (the frame extended by its border rows and columns to whole cells, and by its
    border cells around the edge). ``noise``: window means of the noise estimate; ``energy``: window means of the
    fit's squared values (so that the level follows the light from region to region); both (B, 1, H, W), >= 0.
    Tensor operations and a numba pass on the CPU (no host synchronisation).

    Example:
        >>> v = torch.full((1, 1, 40, 40), 0.01); v[..., 20:24, 20:24] = 5.0   # a highlight's leak in flat noise
        >>> round(float(regional_noise(v, torch.ones_like(v))[..., 22, 22]), 4)
        0.01
    """
    tiny = torch.finfo(noise.dtype).tiny
    h, w = noise.shape[-2:]
    level = decide("denoise.noise_cells", noise, tensors=(noise, energy)).run(noise, energy, CAP_CELL, CAP_CELLS)
    level = F.interpolate(level.exp_(), scale_factor=CAP_CELL, mode="bilinear", align_corners=False)[..., :h, :w]
    return level * (energy + tiny)


def _noise_cells_torch(noise: torch.Tensor, energy: torch.Tensor, cell: int, n: int) -> torch.Tensor:
    """(B, 1, ceil(H / cell), ceil(W / cell)): per cell of ``cell`` x ``cell`` pixels, the (lower) median over the
    ``n`` x ``n`` cells around it (border cells repeated) of the cells' mean ``log(noise / energy)``."""
    tiny = torch.finfo(noise.dtype).tiny
    h, w = noise.shape[-2:]
    ratio = torch.log((noise + tiny) / (energy + tiny))
    grid = F.avg_pool2d(F.pad(ratio, (0, (-w) % cell, 0, (-h) % cell), mode="replicate"), cell)
    k = n // 2
    around = F.pad(grid, (k, k, k, k), mode="replicate").unfold(2, n, 1).unfold(3, n, 1)
    return around.reshape(*around.shape[:4], -1).median(-1).values


def _cpu():
    """The numba loops of this module's paths, :mod:`.input_blend_cpu`."""
    from . import input_blend_cpu as cpu  # lazy: numba (about 200 modules) loads when a numba path first runs

    return cpu


def _noise_cells_numba(noise: torch.Tensor, energy: torch.Tensor, cell: int, n: int) -> torch.Tensor:
    """The same in two numba passes (:mod:`.input_blend_cpu`): on a 1280 x 720 frame PyTorch's logarithm and median
    take 70 ms, these 3."""
    return _cpu().noise_cells(noise, energy, cell, n)


register_path("denoise.noise_cells", NUMBA, "torch", 5, supports=lambda tensors: numba_takes(*tensors),
              run=_noise_cells_numba)
register_path("denoise.noise_cells", TORCH, "torch", 0, run=_noise_cells_torch)


def lone_peaks(ne: torch.Tensor, radius: int) -> torch.Tensor:
    """(B, 1, H, W): the largest value of ``ne`` (B, 1, H, W, >= 0) over each ``(2 radius + 1)^2`` window (clipped at
    the frame's edge) among the pixels that are at least :data:`ISOLATION` times each of their 8 neighbours (the
    border repeated), 0 where none is: the window's brightest lone sample."""
    return decide("denoise.lone_peaks", ne, tensors=(ne,)).run(ne, radius)


def _lone_peaks_torch(ne: torch.Tensor, radius: int) -> torch.Tensor:
    h, w = ne.shape[-2:]
    pad = F.pad(ne, (1, 1, 1, 1), mode="replicate")
    around = torch.stack([pad[..., dy:dy + h, dx:dx + w] for dy in range(3) for dx in range(3) if (dy, dx) != (1, 1)]
                         ).amax(0)
    lone = torch.where(ne >= ISOLATION * around, ne, torch.zeros_like(ne))
    n = 2 * radius + 1  # zeros outside the frame: the maximum of values >= 0 is that of the clipped window
    return F.max_pool2d(F.pad(lone, (radius,) * 4), n, 1)


def _lone_peaks_numba(ne: torch.Tensor, radius: int) -> torch.Tensor:
    """The same in one numba pass (:mod:`.input_blend_cpu`): PyTorch's 8 shifted copies and window max pool take
    300 ms on a 1280 x 720 frame."""
    return _cpu().lone_peaks(ne, ISOLATION, radius)


register_path("denoise.lone_peaks", NUMBA, "torch", 5, supports=lambda tensors: numba_takes(*tensors),
              run=_lone_peaks_numba)
register_path("denoise.lone_peaks", TORCH, "torch", 0, run=_lone_peaks_torch)


def _capped(raw: torch.Tensor, radius: int, cap: float | None, out: torch.Tensor, lone: float = 1.0
            ) -> torch.Tensor:
    """The window means of ``raw`` (B, K, H, W: per pixel ``r r``, the noise, then the sharp step's sums), the
    noise's capped at ``cap`` times :func:`regional_noise` plus ``lone`` times the window's strongest lone pixel's share
    (unchanged when ``cap`` is None). The region's level is relative to the window means of ``out``'s squares (the
    fit, (B, 3, H, W)), read only here. A firefly is noise however far it stands above its region, so only energy
    spread over the window is capped: one sample's 3 x 3 second difference puts 16/36 of its energy on its own pixel,
    so that pixel's value times 36/16 over the window's pixel count is the sample's share of the window mean
    (``lone``: how much of it counts, :func:`lone_share`)."""
    sums = box_filter(raw, radius)
    if cap is not None:
        v = sums[:, 1:2]
        n = 2 * radius + 1
        peak = lone_peaks(raw[:, 1:2], radius) * (lone * 36 / 16 / (n * n))
        o = out.detach()  # squares past the float range: BIG, as the other sums
        energy = box_filter(torch.nan_to_num_(_dot(o, o), nan=BIG, posinf=BIG).clamp_(max=BIG)[:, None], radius)
        torch.minimum(v, cap * regional_noise(v, energy) + peak, out=v)
    return sums


def blends(spp: float | None) -> bool:
    """Whether a frame of ``spp`` samples per pixel (None: unknown) takes the blend. At one sample per pixel the fit's
    residual is nearly all noise and the blend leaves the fit as it is (the held-out Cycles set: +0.01 dB on
    average), at about twice the cost: a frame known to be 1 spp skips it."""
    return spp != 1


def blend_towards_input(out: torch.Tensor, color: torch.Tensor, guides: dict, tile: int | None = None,
                        spp: float | None = None, model: str = "flnr") -> torch.Tensor:
    """:func:`towards_input` with its sharp fit: FLR of ``color`` on :data:`SHARP_GUIDES` of ``guides`` (a dict of
    (B, C, H, W) buffers, any missing), over tiles of about ``tile`` pixels when given, the noise estimate capped
    and the window and the factor ``s`` chosen for ``spp`` samples per pixel (:func:`noise_cap`,
    :func:`blend_radius`, :func:`shrinks_after_step`, :func:`lone_share`). What
    :func:`~vision.denoise.denoise` and :class:`~vision.denoise.TemporalDenoiser` run after their fit, ``model``
    (``"flnr"`` or ``"flr"``) named: FLR's own fit is a fit on the same guides as the sharp one in larger windows, so
    the step between them removes little of its error, and its ``s`` stays measured on its own residual (on the
    tuning scenes at 4 spp the step's ``s`` changed FLR by -0.02 dB, FLNR by +0.20 dB)."""
    shape = {k: guides.get(k) for k in SHARP_GUIDES}
    stats = sharp_fit_stats(shape)
    sharp = (flr(color, shape, SHARP_RADIUS, SHARP_EPS, SHARP_SCALE, stats=stats) if tile is None else
             flr_tiled(color, shape, SHARP_RADIUS, SHARP_EPS, SHARP_SCALE, tile, stats=stats))
    return towards_input(out, color, guides.get("albedo"), sharp, radius=blend_radius(spp),
                         emitters=_emitter_windows(guides.get("emission")), cap=noise_cap(spp),
                         after_step=model == "flnr" and shrinks_after_step(spp), lone=lone_share(spp))


def _emitter_windows(emission: torch.Tensor | None) -> torch.Tensor | None:
    """(B, 1, H, W) bool: the windows centred on a pixel that sees an emitter (``emission`` > 0 in any channel), at
    the windows :func:`frame_share` reads (False elsewhere: it reads no other); None without an emission buffer."""
    if emission is None:
        return None
    h, w = emission.shape[-2:]
    step = _subsample_step(h, w)
    out = torch.zeros(emission.shape[0], 1, h, w, dtype=torch.bool, device=emission.device)
    out[..., ::step, ::step] = emission[..., ::step, ::step].amax(1, keepdim=True) > 0
    return out


def towards_input(out: torch.Tensor, color: torch.Tensor, albedo: torch.Tensor | None = None,
                 sharp: torch.Tensor | None = None, radius: int = DEFAULT_RADIUS,
                 emitters: torch.Tensor | None = None, cap: float | None = None,
                 after_step: bool = False, lone: float = 1.0) -> torch.Tensor:
    """``out`` (B, 3, H, W), the denoised ``color`` (B, 3, H, W, the noisy input after repair), first moved towards
    ``sharp`` as far as the window's residual says, then towards ``color`` by the factor ``s`` of each ``(2 radius +
    1)^2`` window (module docstring).

    ``albedo`` (B, 3, H, W) as given to the denoiser, or None: the noise is estimated on residuals divided by
    ``max(albedo, ALBEDO_FLOOR)``, so that the albedo's texture does not count as noise. ``sharp`` (B, 3, H, W): a
    fit of ``color`` in small windows on the guides (:data:`SHARP_GUIDES`), whose residual the noise is estimated
    on, and a third candidate between ``out`` and ``color``; None: ``out``'s residual, no third candidate. Every
    pixel takes part, those that see an emitter too: at a few samples their noise keeps the fit, at many the input
    wins (a pixel that shows only an emitter has the emission as its colour, so it stays as it is). ``emitters``
    (B, 1, H, W) bool or None: windows left out of the frame's share (:func:`frame_share`).
    ``cap``: a window's noise estimate is at most ``cap`` times its region's (:func:`regional_noise`), plus ``lone``
    times the share of its brightest lone pixel (a firefly; :func:`lone_share`); None: no cap.
    ``after_step``: ``s`` measured on the residual left after the step towards ``sharp`` (module docstring) rather
    than on ``out``'s; without ``sharp`` it changes nothing.
    Tensor operations only: no host synchronisation, differentiable in ``out``.

    Example:
        >>> import torch
        >>> y = torch.linspace(0, 1, 32).expand(1, 3, 32, 32).clone()
        >>> y[..., 16:] += 0.5                     # a ramp and an edge with no noise left ...
        >>> fit = torch.full_like(y, 0.5)          # ... and a fit that smooths them away
        >>> torch.allclose(towards_input(fit, y), y)
        True
    """
    expected = "a number in [0, 1] (the share of a lone bright pixel kept as noise)"
    lone = as_float(lone, "lone", expected)
    if not 0 <= lone <= 1:  # NaN too
        raise ValueError(f"lone must be {expected}, got {lone!r}")
    factor = torch.ones_like(color[:, :1]) if albedo is None else albedo.clamp_min(ALBEDO_FLOOR)
    if sharp is None:
        return _towards_input_torch(out, color, factor, sharp, radius, emitters, cap, lone=lone)
    return decide("denoise.input_blend", out, tensors=(out, color, sharp, factor)).run(out, color, factor, sharp,
                                                                                     radius, emitters, cap, after_step,
                                                                                     lone)


def _towards_input_torch(out, color, factor, sharp, radius, emitters=None, cap=None, after_step=False, lone=1.0):
    residual = color - out
    step = None if sharp is None else sharp - out
    with torch.no_grad():  # the factors are estimates from the data: no gradient flows through them
        r = residual.detach()
        rough = (r if step is None else color - sharp).detach() / factor
        sums = [_dot(r, r), noise_energy(rough, factor).sum(1)]
        if step is not None:
            st = step.detach()
            sums += [_dot(r, st), _dot(st, st)]
        sums = torch.stack(sums, 1)  # squares past the float range: BIG, so that window sums stay finite
        sums = _capped(torch.nan_to_num_(sums, nan=BIG, posinf=BIG, neginf=-BIG).clamp_(-BIG, BIG), radius, cap, out,
                       lone)
        e, v = sums[:, :1], sums[:, 1:2]
        trust = frame_share(e, v, emitters).sqrt()
        if step is not None:
            w = _unit((sums[:, 2:3] - SHARP_LEVERAGE * v) / sums[:, 3:4]) * trust
            if after_step:  # the residual of out + w (sharp - out), and the noise that step leaves in it
                e = (e - 2 * w * sums[:, 2:3] + w.square() * sums[:, 3:4]).clamp_min(0)
                v = (1 - SHARP_LEVERAGE * w) * v
        s = _unit(1 - v / (e * trust))
    if step is None:
        return out + s * residual
    # out moved towards the sharp fit by w, then towards the input by s
    return out + s * residual + (w * (1 - s)) * step


def _towards_input_numba(out, color, factor, sharp, radius, emitters=None, cap=None, after_step=False, lone=1.0):
    """The same in two numba passes (:mod:`.input_blend_cpu`) around the box filter, the cap and the frame's
    share."""
    cpu = _cpu()
    sums = _capped(cpu.blend_sums(out, color, sharp, factor), radius, cap, out, lone)
    trust = frame_share(sums[:, :1], sums[:, 1:2], emitters).sqrt()
    return cpu.blend_apply(out, color, sharp, sums, trust, SHARP_LEVERAGE, after_step)


register_path("denoise.input_blend", NUMBA, "torch", 5, supports=lambda tensors: numba_takes(*tensors),
              run=_towards_input_numba)
register_path("denoise.input_blend", TORCH, "torch", 0, run=_towards_input_torch)


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per pixel sum over channels of ``a b``, (B, C, H, W) -> (B, H, W), as a chain of fused multiply-adds (on
    CPU 2x faster than ``(a * b).sum(1)``, 6x than einsum)."""
    out = a[:, 0] * b[:, 0]
    for c in range(1, a.shape[1]):
        out = torch.addcmul(out, a[:, c], b[:, c])
    return out


def _unit(x: torch.Tensor) -> torch.Tensor:
    """``x`` clamped into [0, 1] in place, NaN and inf (empty windows, overflow) as 0."""
    return torch.nan_to_num_(x, nan=0.0, posinf=0.0, neginf=0.0).clamp_(0, 1)
