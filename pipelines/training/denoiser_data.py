"""The data side of FLNR training (``vision train-denoiser``, :func:`.denoiser.train`): frames read whole,
random crops with flips and an exposure factor, 1/u-resolution colour for joint upsampling, the HDR-aware loss
and the validation score."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from vision.data import RenderedScenes
from vision.data.fields import CHANNELS, FLNR_GUIDES, FLNR_LAYOUT, FLNR_TRAINING, RADIANCE
from vision.denoise.metrics import psnr


def load_frames(root: Path, split: str) -> list[dict]:
    """Every frame of ``split`` as a dict of (1, C, H, W) float32 tensors plus ``scene``."""
    ds = RenderedScenes(root, split=split, fields=list(FLNR_TRAINING))
    out = []
    for i in range(len(ds)):
        s = ds[i]
        out.append({**{k: s[k][None] for k in FLNR_TRAINING}, "scene": s["scene"]})
    return out


def tonemap(x):
    return (x.clamp(0, 1) + 1e-4) ** (1 / 2.2)


def loss_fn(out, ref, smape: float, tonemapped: str = "l1"):
    d = tonemap(out) - tonemap(ref)
    base = d.abs().mean() if tonemapped == "l1" else (d.square().mean() + 1e-12).sqrt()
    rel = ((out - ref).abs() / (out.abs() + ref.abs() + 1e-2)).mean()
    return base + smape * rel


# AO's channel in the network's guide layout (normal 3, log-depth 1, AO 1, albedo 3: fields.FLNR_LAYOUT): 4
AO_CHANNEL = sum(CHANNELS[n] for n in FLNR_LAYOUT[:FLNR_LAYOUT.index("ao")])


def scene_groups(frames) -> list[list[int]]:
    """For every frame, the indices of the frames of its scene and size (its noisy seeds, which can be averaged;
    the frame itself first)."""
    def key(f):
        return f["scene"], tuple(f["color"].shape)

    by: dict = {}
    for i, f in enumerate(frames):
        by.setdefault(key(f), []).append(i)
    return [[i] + [j for j in by[key(f)] if j != i] for i, f in enumerate(frames)]


SINGLE_SHARE = 0.25  # of the crops a --history run draws as single frames (history 1 everywhere)


def history_map(size: tuple[int, int], most: int, gen):
    """A random per-pixel history length (1, 1, H, W) in 1..``most``, as a temporal denoiser's looks: one length
    for most of the crop, younger rectangles where the history restarted (a disocclusion, an object that moved in);
    a share :data:`SINGLE_SHARE` of the maps is 1 everywhere (a first frame, or a single one)."""
    h, w = size
    if most <= 1 or float(torch.rand(1, generator=gen)) < SINGLE_SHARE:
        return torch.ones(1, 1, h, w)
    k = int(torch.randint(2, most + 1, (1,), generator=gen))
    n = torch.full((1, 1, h, w), float(k))
    for _ in range(int(torch.randint(0, 4, (1,), generator=gen))):
        y0, y1 = sorted(int(v) for v in torch.randint(h + 1, (2,), generator=gen))
        x0, x1 = sorted(int(v) for v in torch.randint(w + 1, (2,), generator=gen))
        n[..., y0:y1, x0:x1] = float(torch.randint(1, k + 1, (1,), generator=gen))
    return n


def averaged(colors, n):
    """Per pixel the mean of the first ``n`` of the (S, 1, 3, H, W) noisy ``colors``: what a history of n frames
    holds where the camera stood still (n a (1, 1, H, W) map of lengths 1..S)."""
    sums = colors.cumsum(0)
    index = (n.long() - 1).clamp(0, colors.shape[0] - 1).expand(1, 1, 3, *n.shape[-2:])
    return torch.gather(sums, 0, index)[0] / n


def sample_batch(frames, stats, batch: int, crop: int, gen, drop_ao: float = 0.0, history: int = 1, groups=None):
    """Random crops (with flips and an exposure factor) stacked into one batch dict, and their stats. With
    probability ``drop_ao`` a crop's AO buffer is zeroed and its standardisation made that of a missing buffer
    (mean 0), which is what a frame without AO gives the network. With ``history > 1`` the colour of a crop is,
    per pixel, the mean of the first n of its scene's noisy frames in a random order, n from :func:`history_map`
    (at most ``history`` and the scene's frames; ``groups``: :func:`scene_groups` of ``frames``), and the batch has
    ``"history"``: those n, (B, 1, c, c)."""
    picks = torch.randint(len(frames), (batch,), generator=gen).tolist()
    out = {k: [] for k in FLNR_TRAINING}
    if history > 1:
        out["history"] = []
    means, stds = [], []
    for i in picks:
        f = frames[i]
        h, w = f["color"].shape[-2:]
        c = min(crop, h, w)
        y = int(torch.randint(h - c + 1, (1,), generator=gen))
        x = int(torch.randint(w - c + 1, (1,), generator=gen))
        flips = [d for d, flip in ((-1, torch.rand(1, generator=gen) < 0.5), (-2, torch.rand(1, generator=gen) < 0.5))
                 if flip]
        exposure = float(2 ** (torch.rand(1, generator=gen) * 2 - 1))
        crop_of = {}
        if history > 1:
            same = groups[i]
            order = [i] + [same[1:][j] for j in torch.randperm(len(same) - 1, generator=gen).tolist()]
            n = history_map((c, c), min(history, len(order)), gen)
            colors = torch.stack([frames[j]["color"][..., y:y + c, x:x + c] for j in order[:int(n.max())]])
            crop_of = {"color": averaged(colors, n), "history": n}
        for k in out:
            v = crop_of[k] if k in crop_of else f[k][..., y:y + c, x:x + c]
            if flips:
                v = v.flip(flips)
            if k in RADIANCE:  # the colour, its reference and the emission scale with the exposure
                v = v * exposure
            out[k].append(v)
        mean, std = stats[i]
        if drop_ao > 0 and float(torch.rand(1, generator=gen)) < drop_ao:
            out["ao"][-1] = torch.zeros_like(out["ao"][-1])
            mean, std = mean.clone(), std.clone()
            mean[:, AO_CHANNEL], std[:, AO_CHANNEL] = 0.0, 1e-3
        means.append(mean)
        stds.append(std)
    return {k: torch.cat(v) for k, v in out.items()}, (torch.cat(means), torch.cat(stds))


def subsample(color, gen, factor: int = 2):
    """One sample of every u x u block (u = ``factor``), at a random phase: 1/u-resolution colour for joint
    upsampling. Returns the colour and the phase (dy, dx), the sample's pixel in its block."""
    phase = tuple(int(v) for v in torch.randint(factor, (2,), generator=gen))
    return pick(color, phase, factor).contiguous(), phase


def pick(color, phase, factor: int = 2):
    """Pixel ``(u i + dy, u j + dx)`` of every whole u x u block of (..., H, W) ``color``, ``phase = (dy, dx)``,
    u = ``factor``."""
    dy, dx = phase
    h, w = color.shape[-2:]
    return color[..., dy:h - h % factor:factor, dx:w - w % factor:factor]


def val_phases(factor: int = 2) -> tuple[tuple[int, int], ...]:
    """The 1/u-resolution validation's phases: one sample of every u x u block at its first and last pixel."""
    return (0, 0), (factor - 1, factor - 1)


VAL_HISTORY = 4  # frames averaged for the multi-frame half of a --history run's validation score


def validate(model, frames, upsample_prob: float = 0.0, factor: int = 2,
             history: int = 1) -> tuple[float, float | None]:
    """(score, 1/u-resolution PSNR or None): the mean validation PSNR at full resolution, or, when the run
    trains joint upsampling, from one colour sample of every u x u block (u = ``factor``; phases
    :func:`val_phases`, known to the model); the score weighs the two as the training steps do. Frames whose
    size u does not divide have no 1/u-resolution score; when no frame has one, the score is the
    full-resolution PSNR. With ``history > 1`` the full-resolution score is the mean of the single-frame PSNR and
    the PSNR from the mean of each frame and the next ``min(history, VAL_HISTORY) - 1`` of its scene, told that
    history length."""
    def score(color, f, phase=None, n=None):
        guides = {k: f[k] for k in FLNR_GUIDES}
        if n is not None:
            guides["history"] = torch.full_like(color[:, :1], float(n))
        out = model(color, guides, phase=phase)
        return psnr(out[0].permute(1, 2, 0).cpu().numpy(), f["reference"][0].permute(1, 2, 0).cpu().numpy())

    if history > 1 and upsample_prob == 0:
        single, _ = validate(model, frames, 0.0, factor)
        multi = []
        with torch.no_grad():
            for group in scene_groups(frames):
                same = [frames[j] for j in group]
                n = min(history, VAL_HISTORY, len(same))
                if n > 1:
                    multi.append(score(sum(g["color"] for g in same[:n]) / n, same[0], n=n))
        if multi:
            return (single + float(np.mean(multi))) / 2, None

    def divisible(f):
        h, w = f["color"].shape[-2:]
        return h % factor == 0 and w % factor == 0

    halves = upsample_prob > 0 and any(divisible(f) for f in frames)  # else: full resolution only (no NaN score)
    full, half = [], []
    with torch.no_grad():
        for f in frames:
            if upsample_prob < 1 or not halves:
                full.append(score(f["color"], f))
            if halves and divisible(f):
                half += [score(pick(f["color"], phase, factor), f, phase) for phase in val_phases(factor)]
    lo = float(np.mean(half)) if half else None
    if lo is None:
        return float(np.mean(full)), None
    if not full:
        return lo, lo
    return (1 - upsample_prob) * float(np.mean(full)) + upsample_prob * lo, lo
