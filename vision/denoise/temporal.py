"""FLR over a static-camera sequence (:class:`TemporalFLR`): regression statistics carried from frame to frame."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import buffers as B
from .frame import denoise
from .flr import DEFAULT_EPS, DEFAULT_RADIUS

__all__ = ["TemporalFLR"]


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

    GUIDES = ("albedo", "normal", "depth", "ao", "emission", "position")
    _ABSOLUTE = ("albedo", "normal", "ao")

    def __init__(self, radius: int = DEFAULT_RADIUS, eps: float = DEFAULT_EPS, scale: int = 1, alpha: float = 0.1,
                 threshold: float = 0.05, tile: int | None = None):
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if threshold <= 0:
            raise ValueError(f"threshold must be positive, got {threshold}")
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
             for k in self.GUIDES}
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
            if k not in self._ABSOLUTE:
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
        out = denoise(acc, **{k: guides.get(k) for k in self.GUIDES if guides.get(k) is not None},
                      radius=self.radius, eps=self.eps, scale=self.scale, tile=self.tile,
                      phase=None if self._mixed else self.phase)
        return B.like(out, color)
