"""Denoising of sequences: :class:`TemporalDenoiser` (moving cameras and objects, motion vectors, FLNR or FLR) and
:class:`TemporalFLR` (a static camera, FLR statistics carried from frame to frame)."""
from __future__ import annotations

import contextlib
import math
import numbers

import torch
import torch.nn.functional as F

from vision.data import fields
from vision.kernels.validate import as_float, check_float_tensor, check_positive

from . import accumulate
from . import buffers as B
from .accumulate import History
from .flnr import load_flnr, placed
from .frame import MODELS, _check_color, _check_spp, _denoise, _positive_int, denoise
from .input_blend import blend_towards_input, blends
from .flr import DEFAULT_EPS, DEFAULT_RADIUS
from .edge_history import CAP as EDGE_CAP, edge_history
from .reproject import CONVENTIONS, SURFACE_KEYS, Tolerances, previous_offset

__all__ = ["TemporalFLR", "TemporalDenoiser"]


class TemporalFLR:
    r"""FLR over a static-camera sequence: the regression statistics are carried from frame to frame.

    The moments the local linear fit is built from, window sums of ``f p`` and ``p`` for guides ``f``
    and signal ``p``, are linear in ``p``; while the guides of a pixel do not change (static camera and
    scene), a running mean of those statistics is the statistics of the running mean of the signal.
    So each call blends the new noisy colour into a per-pixel history, ``h <- (1 - a) h + a c`` with
    ``a = max(1 / n, alpha)`` after n accepted frames, and fits FLR on ``h``. Where any guide of a
    pixel changes by more than ``threshold`` (albedo, normal, AO: absolute; depth, position, emission:
    relative to ``1 + |previous|``), that pixel's history is rejected (``n`` restarts at 1), so moving
    or changing content is not smeared. Successive outputs then differ far less than per-frame FLR
    (less flicker); ``alpha`` bounds how long an old frame keeps weight.

    Example:
        >>> tf = TemporalFLR()
        >>> outs = [tf(f["color"], albedo=f["albedo"], normal=f["normal"], depth=f["depth"]) for f in frames]
    """


    def __init__(self, radius: int = DEFAULT_RADIUS, eps: float = DEFAULT_EPS, scale: int = 1, alpha: float = 0.1,
                 threshold: float = 0.05, tile: int | None = None):
        radius, eps, scale, tile = _fit_settings(radius, eps, scale, tile)
        alpha = as_float(alpha, "alpha", "a number in (0, 1]")
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        threshold = check_positive(threshold, "threshold")
        self.radius, self.eps, self.scale, self.alpha, self.threshold, self.tile = radius, eps, scale, alpha, \
            threshold, tile
        self.reset()

    def reset(self) -> None:
        self.history = self.count = self.previous = None
        self.rejected = 0  # pixels whose history was rejected at the last call (a 0-dim tensor on the GPU)
        self.phase, self._mixed = None, False  # the history's sampling phase; whether phases were mixed

    def accumulate(self, color, phase=None, **guides) -> torch.Tensor:
        """Blend a frame into the history (without denoising it); returns the history (B, 3, h, w)."""
        ph = None if phase is None else tuple(int(v) for v in phase)
        c = B.to_bchw(color, "color", 3)
        c, _ = B.repair_nonfinite(c.float(), "color")
        g = {k: (None if guides.get(k) is None else B.to_bchw(guides[k], k, B.CHANNELS[k]).float().to(c.device))
             for k in fields.GUIDES}
        g = {k: (None if v is None else B.repair_nonfinite(v, k)[0]) for k, v in g.items()}
        if self.history is None or self.history.shape != c.shape or not self._same_buffers(g):
            self.history, self.count = c.clone(), torch.ones_like(c[:, :1])
            self.previous, self.rejected = g, 0
            self.phase, self._mixed = ph, False
            return self.history
        self._mixed |= ph != self.phase
        keep = torch.ones_like(c[:, :1], dtype=torch.bool)
        for k, v in g.items():
            if v is None:
                continue
            old = self.previous[k]
            diff = (v - old).abs()
            if k not in fields.BOUNDED:  # unbounded values (depth, position, light) change relatively
                diff = diff / (1 + old.abs())
            moved = (diff > self.threshold).any(1, keepdim=True)
            if moved.shape[-2:] != c.shape[-2:]:  # full-resolution guides, low-resolution colour
                u = moved.shape[-1] // c.shape[-1] if moved.shape[-1] != c.shape[-1] else 1
                moved = F.max_pool2d(moved.float(), u, u, ceil_mode=True) > 0
            keep &= ~moved
        self.count = torch.where(keep, self.count + 1, torch.ones_like(self.count))
        a = torch.clamp(1.0 / self.count, min=self.alpha)
        self.history = torch.where(keep, (1 - a) * self.history + a * c, c)
        rejected = (~keep).sum()
        # a count read on the host only where that is free (CPU): on the GPU a 0-dim tensor, read when wanted
        self.previous, self.rejected = g, int(rejected) if B.host_reads(rejected) else rejected
        return self.history

    def _same_buffers(self, g) -> bool:
        return all((v is None) == (self.previous.get(k) is None) and (v is None or v.shape == self.previous[k].shape)
                   for k, v in g.items())

    def __call__(self, color, phase=None, **guides):
        """Blend ``color`` into the history and denoise the history with this frame's guides.

        ``phase``: for colour smaller than the guides, the pixel of its block each sample was shaded at (as
        in :func:`~vision.denoise.denoise`). While every frame since the history started has the same phase
        the fit reads the guides there; once frames of different phases were blended, each history pixel
        mixes samples from several pixels of its block, so the fit averages the guides over the block
        (``phase=None``) until the history restarts."""
        acc = self.accumulate(color, phase=phase, **guides)
        out = denoise(acc, **{k: guides.get(k) for k in fields.GUIDES if guides.get(k) is not None}, model="flr",
                      radius=self.radius, eps=self.eps, scale=self.scale, tile=self.tile,
                      phase=None if self._mixed else self.phase, input_blend=False)
        return B.like(out, color)


class TemporalDenoiser:
    r"""Denoise an animation frame by frame, reprojecting each pixel's history with the renderer's motion vectors.

    Per frame (see :mod:`.accumulate` and :mod:`.reproject`): the noisy colour is repaired, its fireflies
    suppressed, and its albedo and emission taken out (the history holds demodulated light, smooth and
    without texture, so resampling it costs little detail). The per-pixel history is reprojected with
    ``motion`` (Cycles' ``Vector`` pass by default), dropped where the surface is not the same (object index,
    depth, normal: disocclusions, thin objects) or where the light itself changed (window means of the frame
    against the history's, in units of the samples' own noise: a lamp switched on, a shadow that moved), and
    the frame blended in with weight ``1 / n`` (n frames of history, at most ``max_history``). FLNR (or FLR)
    then denoises the accumulated signal, remodulated by this frame's albedo: it has about n times less noise
    variance than one frame. FLNR weights trained with the history length (``"history": true``) are told n per
    pixel (:func:`~vision.denoise.denoise`'s ``history``), so they choose their windows and guides for that
    noise level. With ``shrink_radius > 0``, where the history has averaged its noise below the fit's bias, the result
    moves towards it (:func:`.accumulate.towards_history`: James-Stein shrinkage by the pixel's own sample variance
    over its frames). Last, at object edges, where a 1-spp sample names one surface of a pixel the reference averages
    over several, the result is averaged with its own reprojected history (:mod:`.edge_history`).

    Args:
        model: ``"flnr"`` (default; the bundled weights unless ``weights``) or ``"flr"``.
        weights, radius, eps, scale, tile: as for :func:`~vision.denoise.denoise`.
        max_history: the most frames a pixel's history counts (the newest frame weighs at least
            ``1 / max_history``).
        tolerances: :class:`~vision.denoise.reproject.Tolerances` of the same-surface test.
        change_sigmas: the light-change test's threshold in standard errors (0 = off).
        convention: the motion vectors' convention (:func:`~vision.denoise.reproject.previous_offset`).
        edge_frames: frames the edge pixels' output history counts (1 = off; :mod:`.edge_history`).
        input_blend: move each result back towards its frame's own colour where that colour is the better estimate
            (the input blend of :func:`~vision.denoise.denoise`; default True).
        shrink_radius: the window radius of :func:`.accumulate.towards_history`; 0 (the default) = off. At 2 it
            gained 0.16-0.30 dB on two of the three sequences it was tried on and lost 0.03-0.04 dB on both
            held-out ones (CHANGELOG.md, 0.4.0), so it is not on by default.

    Call it once per frame, in order: ``den(color, motion=..., index=..., albedo=..., normal=..., depth=...,
    ao=..., emission=..., position=...)``, buffers as for :func:`~vision.denoise.denoise` but all at the
    colour's size (no joint upsampling), ``motion`` (H, W, 4) / (B, 4, H, W) for Cycles (None: a static
    camera), ``index`` an object id per pixel (optional). It returns the denoised frame in the kind and layout
    of ``color``. :meth:`accumulate` takes a frame into the history without denoising it (a restarted run does
    that for the frames already written, and gets the frames an uninterrupted run would); :meth:`reset`
    forgets the history (a cut). On CUDA and the Triton path no call reads a tensor on the host.

    Example:
        >>> den = TemporalDenoiser()
        >>> for f in frames:    # dicts of (H, W, C) arrays, e.g. vision.data.render_layers.read_render_file
        ...     out = den(f["color"], motion=f["motion"], albedo=f["albedo"], normal=f["normal"], depth=f["depth"])
    """

    def __init__(self, model: str = "flnr", weights=None, radius: int | None = None, eps: float | None = None,
                 scale: int | None = None, tile: int | None = None, max_history: int = 32,
                 tolerances: Tolerances = Tolerances(), change_sigmas: float = 4.0, convention: str = "cycles",
                 edge_frames: int = EDGE_CAP, shrink_radius: int = 0, input_blend: bool = True):
        if model not in MODELS:
            raise ValueError(f"unknown model {model!r}; choose from {', '.join(MODELS)}")
        if isinstance(max_history, bool) or not isinstance(max_history, int) or max_history < 1:
            raise ValueError(f"max_history must be an int >= 1, got {max_history!r}")
        if isinstance(change_sigmas, bool) or not isinstance(change_sigmas, (int, float)) \
                or not math.isfinite(change_sigmas) or change_sigmas < 0:
            raise ValueError(f"change_sigmas must be a finite number >= 0, got {change_sigmas!r}")
        if convention not in CONVENTIONS:
            raise ValueError(f"convention must be one of {', '.join(CONVENTIONS)}, got {convention!r}")
        if isinstance(edge_frames, bool) or not isinstance(edge_frames, int) or edge_frames < 1:
            raise ValueError(f"edge_frames must be an int >= 1 (1 = off), got {edge_frames!r}")
        if isinstance(shrink_radius, bool) or not isinstance(shrink_radius, int) or shrink_radius < 0:
            raise ValueError(f"shrink_radius must be an int >= 0 (0 = off), got {shrink_radius!r}")
        if not isinstance(input_blend, bool):
            raise ValueError(f"input_blend must be True or False, got {input_blend!r}")
        radius, eps, scale, tile = _fit_settings(radius, eps, scale, tile)
        _check_tolerances(tolerances)
        self.edge_frames, self.shrink_radius, self.input_blend = edge_frames, shrink_radius, input_blend
        self.model, self.radius, self.eps, self.scale, self.tile = model, radius, eps, scale, tile
        self.max_history, self.tolerances, self.change_sigmas = max_history, tolerances, float(change_sigmas)
        self.convention = convention
        self.net = None
        if model == "flnr":
            self.net = load_flnr(weights)
        elif weights is not None:
            raise ValueError("weights are for model='flnr'")
        self.reset()

    def reset(self) -> None:
        """Forget the history: the next frame starts cold (a camera cut)."""
        self._history: History | None = None
        self._edges: torch.Tensor | None = None  # the output history of the edge pixels (.edge_history)
        self._layout = None

    @property
    def history_length(self) -> torch.Tensor | None:
        """(B, 1, H, W) float: frames in each pixel's history after the last call (None before the first)."""
        return None if self._history is None else self._history.count

    def accumulate(self, color, motion=None, index=None, **guides) -> torch.Tensor:
        """Take a frame into the history without denoising it; returns the accumulated colour (B, 3, H, W). The
        edge pixels' output history starts over at the next frame (pass ``denoised=`` to :meth:`__call__`
        instead to keep it)."""
        with self._all_or_nothing():
            signal, floor, add, mv, keys, _ = self._prepare(color, motion, index, guides)
            self._step(signal, mv, keys)
            self._edges = None
            return self._history.mean * floor + add

    def __call__(self, color, motion=None, index=None, denoised=None, spp=None, **guides):
        """Take ``color`` into the history and return the denoised frame (same kind and layout as ``color``).

        ``denoised``: this frame's result from an earlier run (what a restarted run reads back from its output):
        it is returned as given and taken into the history instead of denoising the frame again, so the frames
        after it come out as in an uninterrupted run.

        ``spp``: the frame's samples per pixel (a number >= 1, or None: unknown): the network is told frames x
        samples.

        The result is moved back towards this frame's own colour where that colour's noise is below the fit's bias
        (the input blend of :func:`~vision.denoise.denoise`, with ``input_blend``): its noise is independent from
        pixel to pixel, the reprojected history's is not. Where the history lags, was rejected (disocclusions) or
        has blurred a texture through its resampling, the frame wins back. On a 10-frame Cycles sequence this lifted
        ``--temporal`` by 2.8 dB PSNR and 2.6 dB stability at 16 spp a frame, and by 0.3 and 0.2 dB at 1 spp
        (CHANGELOG.md, Unreleased); as for single frames, a frame known to be 1 spp skips it, since it costs as much as the
        rest of the frame (0.31 -> 0.50 of OIDN fast's CPU time at 1280 x 720).

        A call that raises (a bad buffer, an interrupt, memory) leaves the denoiser as it was before it: the history
        has not taken the frame, so the caller may skip the frame or pass it again."""
        with self._all_or_nothing():
            return self._frame(color, motion, index, denoised, spp, guides)

    @contextlib.contextmanager
    def _all_or_nothing(self):
        """The history, its layout and the edge pixels' history put back as they were if the block raises."""
        state = (self._history, self._layout, self._edges)
        try:
            yield
        except BaseException:
            self._history, self._layout, self._edges = state
            raise

    def _frame(self, color, motion, index, denoised, spp, guides):
        """:meth:`__call__`'s work: the frame into the history, then its result."""
        spp = _check_spp(spp)  # every argument is checked before the history takes the frame
        signal, floor, add, mv, keys, g = self._prepare(color, motion, index, guides)
        if denoised is not None:
            out = _take_denoised(denoised, signal)
        prev_keys, offset = self._step(signal, mv, keys)
        if denoised is None:
            acc = self._history.mean * floor + add
            if self.net is not None:  # placed once: a copy of the shared model on the frames' device and dtype
                self.net = placed(self.net, acc.device, acc.dtype)
            # the history's noise is not independent per pixel, so no input blend here (see below); its buffers were
            # repaired and its fireflies suppressed as the frame came in
            out = _denoise(acc, **g, model=self.model, weights=self.net, radius=self.radius, eps=self.eps,
                           scale=self.scale, tile=self.tile, history=self._history.count, spp=spp,
                           input_blend=False, prepared=True)
            if self.shrink_radius > 0:
                out = accumulate.towards_history(out, acc, self._history, floor, self.shrink_radius)
        blend = denoised is None and self.input_blend and blends(spp)
        if self.edge_frames > 1:
            result, self._edges = edge_history(out, self._edges, offset, prev_keys, keys, self.tolerances,
                                               self.edge_frames)
            if denoised is None:
                out = result
        if blend:  # towards this frame's colour, whose noise is independent per pixel
            out = blend_towards_input(out, signal * floor + add, g, self.tile, spp, self.model)
        if self.edge_frames > 1 and (blend or denoised is not None):  # the frame as returned (or written) is the
            self._edges = torch.cat([out, self._edges[:, 3:]], 1)    # edges' history
        return B.like(out, color)

    def _step(self, signal, mv, keys):
        """Take the demodulated signal into the history; returns the previous frame's keys (None when the history
        started over) and the offset to the previous frame."""
        layout = (tuple(signal.shape), signal.device, signal.dtype, tuple(k for k, v in keys.items() if v is not None))
        offset = torch.zeros_like(signal[:, :2]) if mv is None else previous_offset(mv, self.convention)
        if self._history is None or layout != self._layout:
            self._history = accumulate.start(signal, keys, square=self.shrink_radius > 0)
            self._layout, self._edges = layout, None
            return None, offset
        prev_keys = self._history.keys
        self._history, _ = accumulate.update(self._history, signal, offset, keys, self.tolerances, self.max_history,
                                             self.change_sigmas)
        return prev_keys, offset

    def _prepare(self, color, motion, index, guides):
        """Validated, repaired (B, C, H, W) buffers; the demodulated signal and how to remodulate it."""
        unknown = set(guides) - set(fields.GUIDES)
        if unknown:
            raise ValueError(f"unknown buffer(s) {', '.join(sorted(unknown))}; the temporal denoiser takes "
                             f"{', '.join(fields.GUIDES)}, motion and index")
        _check_color(color)  # 8/16-bit codes and RGBA: refused in one line, as denoise() does
        c = B.to_bchw(color, "color", 3)
        work = torch.float64 if c.dtype == torch.float64 else torch.float32
        c, _ = B.repair_nonfinite(c.to(work), "color")
        size = tuple(c.shape[-2:])
        g = {}
        for k in fields.GUIDES:
            if guides.get(k) is not None:
                t = B.to_bchw(guides[k], k, B.CHANNELS[k]).to(device=c.device, dtype=work)
                g[k] = B.repair_nonfinite(t, k)[0]
        extra = {"index": None if index is None else B.to_bchw(index, "index", 1),
                 "motion": None if motion is None else B.to_bchw(motion, "motion",
                                                                 4 if self.convention == "cycles" else 2)}
        extra = {k: (None if t is None else B.repair_nonfinite(t.to(device=c.device, dtype=work), k)[0])
                 for k, t in extra.items()}
        for k, t in [*g.items(), *extra.items()]:
            if t is not None and tuple(t.shape[-2:]) != size:
                raise ValueError(f"{k} is {t.shape[-2]}x{t.shape[-1]} (HxW) but color is {size[0]}x{size[1]}: the "
                                 "temporal denoiser needs every buffer at the colour's size")
            if t is not None and t.shape[0] not in (1, c.shape[0]):
                raise ValueError(f"{k} has batch {t.shape[0]}, color has {c.shape[0]}")
        if B.host_reads(c):
            B.check_ranges(g.get("albedo"), g.get("normal"))
        c = B.suppress_fireflies(c, g.get("emission"))
        floor = torch.ones_like(c) if "albedo" not in g else g["albedo"].clamp_min(B.ALBEDO_FLOOR).expand_as(c)
        add = torch.zeros_like(c) if "emission" not in g else g["emission"].expand_as(c)
        keys = {k: (extra["index"] if k == "index" else g.get(k)) for k in SURFACE_KEYS}
        return (c - add) / floor, floor, add, extra["motion"], keys, g


def _take_denoised(denoised, signal: torch.Tensor) -> torch.Tensor:
    """``denoised`` (a frame's result from an earlier run) as (B, 3, H, W) on ``signal``'s device and dtype, refused
    in one line naming it when it is no RGB frame of values (a meta tensor too), or not of the colour's size and
    batch."""
    out = B.to_bchw(denoised, "denoised", 3).to(device=signal.device, dtype=signal.dtype)
    if out.shape[-2:] != signal.shape[-2:]:
        raise ValueError(f"denoised is {out.shape[-2]}x{out.shape[-1]} (HxW) but color is "
                         f"{signal.shape[-2]}x{signal.shape[-1]}")
    if out.shape[0] != signal.shape[0]:
        raise ValueError(f"denoised has batch {out.shape[0]}, color has {signal.shape[0]}")
    return out


def _fit_settings(radius, eps, scale, tile) -> tuple:
    """The fit's settings as :func:`~vision.denoise.denoise` takes them (ints >= 1 or None; eps a positive finite
    number, a float tensor or None), refused at construction in one line naming the argument, not at a frame."""
    radius, scale, tile = (_positive_int(v, n) for v, n in ((radius, "radius"), (scale, "scale"), (tile, "tile")))
    if isinstance(eps, torch.Tensor):
        check_float_tensor(eps, "eps")
    elif eps is not None:
        eps = check_positive(eps, "eps", "a ridge weight")
    return radius, eps, scale, tile


def _check_tolerances(tolerances) -> None:
    """``tolerances``: a :class:`Tolerances` whose relative depth is a finite number >= 0 and whose normal cosine lies
    in [-1, 1] (the history's update reads them from the second frame on)."""
    if not isinstance(tolerances, Tolerances):
        raise ValueError(f"tolerances must be a vision.denoise.reproject.Tolerances(depth=..., normal=...), got "
                         f"{type(tolerances).__name__} {tolerances!r}")
    for field, low, high in (("depth", 0.0, math.inf), ("normal", -1.0, 1.0)):
        v = getattr(tolerances, field)
        ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and low <= v <= high
        if not ok:
            bound = "a finite number >= 0" if field == "depth" else "a cosine in [-1, 1]"
            raise ValueError(f"tolerances.{field} must be {bound}, got {v!r}")
