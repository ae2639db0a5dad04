"""``vision demo`` section "denoise": a bundled 1-spp frame, FLR, FLNR, OIDN and the 2048-spp reference side by side.

FLR (Fast Local Regression) fits the albedo-demodulated radiance as a local linear function of the
normal, depth, AO and albedo buffers; FLNR (Fast Local Neural Regression, bundled weights) first lets a
small network enhance those guides. OIDN (``pyoidn``, HDR, albedo + normal, cleanAux) is shown when
it is installed; otherwise a line under the picture says how to get it. Images are tonemapped by clamping
to [0, 1] and gamma 1/2.2, the convention of the PSNR printed above each panel. Per scene it writes
``SCENE_flr.png``, ``SCENE_flnr.png`` and ``SCENE_comparison.png``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from vision.bundled import asset_path
from vision.data import read_frame
from vision.data.fields import FLNR_GUIDES
from vision.denoise import denoise
from vision.denoise.metrics import psnr, tonemap
from vision.figures import side_by_side
from vision.io import write_image
from vision.kernels.runtime import get_logger

TITLE = "render-frame denoising: 1-spp input, FLR, FLNR, OIDN, 2048-spp reference"

SCENES = ("scene_00000", "scene_00002")  # a room lit from the ceiling; one with a visible lamp


OIDN_MISSING = ('OIDN is not installed here: pip install pyoidn (or "locallinear-vision[bench]") adds its panel '
                'beside FLR and FLNR')


def oidn(frame: dict):
    """Open Image Denoise on ``frame`` (pyoidn: HDR colour, albedo and normal, cleanAux, high quality), or None
    when pyoidn is not installed."""
    try:
        import pyoidn  # lazy: OIDN is an optional peer (the [bench] extra); without it the demo runs on
    except ImportError:
        return None
    return pyoidn.denoise(frame["color"], frame["albedo"], frame["normal"], hdr=True, clean_aux=True, quality="high")


def _big(img, k: int = 2):
    """Nearest-neighbour enlargement, so 128-pixel panels stay readable under their labels."""
    return np.repeat(np.repeat(np.asarray(img, dtype=np.float32), k, 0), k, 1)


def run(out_dir: Path, device: str) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written, footer = [], None
    for scene in SCENES:
        d = read_frame(asset_path("scenes", scene, "frame_00.exr"))
        t = {k: torch.from_numpy(d[k]).to(device) for k in ("color", *FLNR_GUIDES)}
        with torch.no_grad():
            flr = denoise(t["color"], **{k: t[k] for k in FLNR_GUIDES}, model="flr").cpu().numpy()
            flnr = denoise(t["color"], **{k: t[k] for k in FLNR_GUIDES}, model="flnr").cpu().numpy()
        panels = [("1 spp", d["color"]), ("FLR", flr), ("FLNR", flnr)]
        peer = oidn(d)
        if peer is not None:
            panels.append(("OIDN high", peer))
        elif footer is None:
            footer = OIDN_MISSING
            get_logger("vision.demo").info(f"  {OIDN_MISSING}")
        images, labels = [], []
        for name, img in panels:
            img = np.asarray(img, dtype=np.float32)
            images.append(_big(tonemap(img)))
            labels.append(f"{name} {psnr(img, d['reference']):.1f} dB")
        images.append(_big(tonemap(d["reference"])))
        labels.append("reference 2048 spp")
        for name, img in (("flr", flr), ("flnr", flnr)):
            written.append(write_image(out_dir / f"{scene}_{name}.png", tonemap(img).astype(np.float32)))
        written.append(side_by_side(images, labels, out_dir / f"{scene}_comparison.png", footer=footer))
    return written
