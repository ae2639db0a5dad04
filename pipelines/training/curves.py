"""A run's history as a picture: ``RUN/curves.png`` beside ``RUN/metrics.jsonl``, rewritten every epoch.

Without a tracker (``--log-with``) a run has no picture of how it went; this draws the training loss and the
validation metric against the epoch, each on its own panel with its range written on the axis, with Pillow only
(no plotting library). Example::

    write_history(run, rows, "abs_rel")   # metrics.jsonl and curves.png, both atomically
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from vision.figures import _font
from vision.io import write_image
from vision.outputs import atomic_path, in_run, write_text_atomic

PANEL = (360, 200)  # width, height of one panel in pixels
MARGIN = 48


def _panel(values: list[float], title: str, colour) -> np.ndarray:
    w, h = PANEL
    img = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(img)
    font = _font(12)
    x0, y0, x1, y1 = MARGIN, 20, w - 12, h - 24
    draw.rectangle((x0, y0, x1, y1), outline=(160, 160, 160))
    draw.text((x0, 4), title, fill="black", font=font)
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if finite:
        lo, hi = min(finite), max(finite)
        span = hi - lo or max(abs(hi), 1e-12)
        pts = [(x0 + (x1 - x0) * (i / max(len(values) - 1, 1)), y1 - (y1 - y0) * ((v - lo) / span))
               for i, v in enumerate(values) if v is not None and math.isfinite(v)]
        if len(pts) > 1:
            draw.line(pts, fill=colour, width=2)
        for x, y in pts:
            draw.ellipse((x - 2, y - 2, x + 2, y + 2), fill=colour)
        draw.text((4, y0), f"{hi:.4g}", fill="black", font=font)
        draw.text((4, y1 - 12), f"{lo:.4g}", fill="black", font=font)
    draw.text((x0, y1 + 6), "epoch 1", fill="black", font=font)
    draw.text((x1 - 60, y1 + 6), f"epoch {len(values)}", fill="black", font=font)
    return np.asarray(img)


def curves(rows: list[dict], metric: str) -> np.ndarray:
    """(H, W, 3) uint8: the training loss and ``metric`` of ``rows`` (one dict per epoch), side by side."""
    loss = [r.get("loss") for r in rows]
    val = [r.get(metric) for r in rows]
    return np.concatenate([_panel(loss, "training loss", (31, 119, 180)),
                           _panel(val, f"validation {metric}", (214, 39, 40))], 1)


def write_history(run: Path, rows: list[dict], metric: str) -> None:
    """``run/metrics.jsonl`` (one JSON object per epoch) and ``run/curves.png``, each written atomically and never
    through a link (:func:`vision.outputs.in_run`)."""
    write_text_atomic(in_run(run, "metrics.jsonl"), "".join(json.dumps(r) + "\n" for r in rows))
    with atomic_path(in_run(run, "curves.png")) as tmp:
        write_image(tmp, curves(rows, metric))
