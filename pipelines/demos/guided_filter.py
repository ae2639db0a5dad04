"""``vision demo`` section "guided-filter": edge-preserving smoothing and detail enhancement of a photo.

The bundled photo is filtered by itself with the colour guided filter (He, Sun and Tang), which
flattens texture while keeping the edges of the guide; adding back k times the removed detail,
``I + k (I - smoothed)``, sharpens without the halos of an unsharp mask at strong edges.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from vision.bundled import asset_path
from vision.figures import side_by_side
from vision.io import read_image, to_image, to_tensor, write_image
from vision.kernels import guided_filter

TITLE = "guided filter: edge-preserving smoothing and detail enhancement (He et al. 2010)"

PHOTO = ("photos", "coffee.png")
RADIUS = 8
EPS = 0.02  # squared intensity units for images in [0, 1]
BOOST = 4.0  # detail gain k


def run(out_dir: Path, device: str) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    img = read_image(asset_path(*PHOTO))[:, :, :3]
    x = to_tensor(img, device=device)
    with torch.no_grad():
        smooth = guided_filter(x, x, RADIUS, EPS)  # colour guide = the image itself
    smoothed = np.clip(to_image(smooth), 0.0, 1.0)
    enhanced = np.clip(img + BOOST * (img - smoothed), 0.0, 1.0)
    written = [
        write_image(out_dir / "smoothed.png", smoothed),
        write_image(out_dir / "enhanced.png", enhanced),
        side_by_side([img, smoothed, enhanced],
                     ["input", f"smoothed (r={RADIUS}, eps={EPS:g})", f"enhanced (k={BOOST:g})"],
                     out_dir / "comparison.png"),
    ]
    return written
