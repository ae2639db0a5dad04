"""Colourised previews of dense targets and predictions, as (H, W, 3) float arrays in [0, 1].

- depth: inverse depth normalised over the valid pixels, OpenCV's TURBO colour map; no surface is black;
- normals: ``(n + 1) / 2`` (x right = red, y up = green, z to the viewer = blue), the usual convention;
- alpha, binary, albedo: shown as they are (gray or RGB);
- semantic / segment ids: a fixed palette (label 0 black).

    >>> rgb = colourise("depth", depth)      # depth (1, H, W) tensor or (H, W) array
"""
from __future__ import annotations

import numpy as np
import cv2

from vision.data.fields import ID_LAYERS


def _hwc(x) -> np.ndarray:
    a = x.detach().float().cpu().numpy() if hasattr(x, "detach") else np.asarray(x, dtype=np.float32)
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3:
        raise ValueError(f"colourise expects (C, H, W) or (H, W), got shape {a.shape}")
    return np.transpose(a, (1, 2, 0))


def _palette(ids: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(12345)
    table = rng.uniform(0.15, 1.0, size=(int(ids.max()) + 1, 3)).astype(np.float32)
    table[0] = 0
    return table[ids]


def colourise(task: str, value) -> np.ndarray:
    """(H, W, 3) float32 preview of a (C, H, W) tensor / array for ``task`` (see the module docstring)."""
    a = _hwc(value)
    if task == "depth":
        d = a[:, :, 0]
        valid = d > 0
        inv = np.zeros_like(d)
        inv[valid] = 1.0 / d[valid]
        if valid.any():
            lo, hi = np.percentile(inv[valid], [1, 99])
            inv = np.clip((inv - lo) / max(hi - lo, 1e-12), 0, 1)
        codes = cv2.applyColorMap(np.rint(inv * 255).astype(np.uint8), cv2.COLORMAP_TURBO)[:, :, ::-1]
        out = codes.astype(np.float32) / 255.0
        out[~valid] = 0
        return out
    if task == "normals":
        return np.clip((a[:, :, :3] + 1) / 2, 0, 1).astype(np.float32)
    if task in ID_LAYERS:  # class and instance ids
        ids = a[:, :, 0].astype(np.int64) if a.shape[2] == 1 else np.argmax(a, axis=2)
        return _palette(np.clip(ids, 0, None))
    if a.shape[2] == 1:
        return np.repeat(np.clip(a, 0, 1), 3, axis=2).astype(np.float32)
    return np.clip(a[:, :, :3], 0, 1).astype(np.float32)
