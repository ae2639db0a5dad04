"""Comparison figures: images side by side, each under a text label, written as one PNG.

    >>> side_by_side([img, smooth, enhanced], ["input", "smoothed", "enhanced"], "compare.png")

Labels use Pillow's bundled default font (no font files are looked up or downloaded).
"""
from __future__ import annotations

import math

from pathlib import Path

import numpy as np
from PIL import ImageFont, Image, ImageDraw

from vision.io import write_image


def _font(size: int):
    try:
        return ImageFont.load_default(size=size)  # Pillow >= 10.1: scalable bundled font
    except TypeError:
        return ImageFont.load_default()  # older Pillow: fixed bitmap font


def _as_rgb8(image, index: int) -> np.ndarray:
    a = np.asarray(image)
    if a.ndim == 2:
        a = a[:, :, None]
    if a.ndim != 3 or a.shape[2] not in (1, 3, 4) or 0 in a.shape[:2]:
        raise ValueError(f"side_by_side: image {index} must be (H, W) or (H, W, C) with C in 1, 3, 4, got {a.shape}")
    if a.dtype == np.uint8:
        a = a.astype(np.float32) / 255.0
    elif a.dtype.kind != "f":
        raise ValueError(f"side_by_side: image {index} must be float in [0, 1] or uint8, got {a.dtype}")
    if not np.isfinite(a).all():
        raise ValueError(f"side_by_side: image {index} contains NaN or Inf")
    a = np.clip(a.astype(np.float32), 0.0, 1.0)
    if a.shape[2] == 4:  # composite over white: a figure has no transparency
        a = a[:, :, :3] * a[:, :, 3:] + (1.0 - a[:, :, 3:])
    if a.shape[2] == 1:
        a = np.repeat(a, 3, axis=2)
    return np.rint(a * 255.0).astype(np.uint8)


def side_by_side(images, labels, path, *, gap: int = 8, font_size: int = 18, footer: str | None = None) -> Path:
    """Write ``images`` in one row, each with its label above it, to the PNG ``path``; returns the path.

    Images are float ``(H, W[, C])`` arrays in [0, 1] (or uint8); images of a different height are
    resized to the tallest one's height, keeping their aspect ratio. A label wider than its image widens
    its column (the image centred in it), so every label shows whole. ``footer``: one line of text written
    under the row (a note about the figure). Raises ``ValueError`` when the counts differ, the list is
    empty, or an image is malformed.
    """
    images, labels = list(images), [str(s) for s in labels]
    if not images:
        raise ValueError("side_by_side: no images given")
    if len(images) != len(labels):
        raise ValueError(f"side_by_side: {len(images)} images but {len(labels)} labels")
    if Path(path).suffix.lower() != ".png":
        raise ValueError(f"side_by_side writes PNG; got {path}")
    tiles = [Image.fromarray(_as_rgb8(im, i)) for i, im in enumerate(images)]
    height = max(t.height for t in tiles)
    tiles = [t if t.height == height else
             t.resize((max(1, round(t.width * height / t.height)), height), Image.Resampling.LANCZOS)
             for t in tiles]
    font = _font(font_size)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    text_h = max(probe.textbbox((0, 0), s or " ", font=font)[3] for s in labels)
    band = text_h + 2 * gap
    # each column is as wide as its image or its label, whichever is wider: a label is never cut
    columns = [max(t.width, math.ceil(probe.textlength(s, font=font))) for t, s in zip(tiles, labels)]
    width = sum(columns) + gap * (len(tiles) + 1)
    foot = 0 if not footer else probe.textbbox((0, 0), footer, font=font)[3] + gap
    if footer:
        width = max(width, int(probe.textlength(footer, font=font)) + 2 * gap)
    canvas = Image.new("RGB", (width, band + height + gap + foot), "white")
    draw = ImageDraw.Draw(canvas)
    if footer:
        draw.text((gap, band + height + gap), footer, fill="black", font=font)
    x = gap
    for tile, label, column in zip(tiles, labels, columns):
        canvas.paste(tile, (x + (column - tile.width) // 2, band))
        tw = draw.textlength(label, font=font)
        draw.text((x + max(0.0, (column - tw) / 2), gap), label, fill="black", font=font)
        x += column + gap
    return write_image(path, np.asarray(canvas))
