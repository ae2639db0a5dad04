"""``vision predict``: run a fine-tuned dense head (a ``vision finetune`` run folder) on images."""
from __future__ import annotations

import argparse
import glob
from pathlib import Path

EPILOG = """\
examples:
  vision predict runs/depth photos/*.png -o predictions/
  vision predict runs/normals frame.png -o out/ --format exr --no-tta

For each IMAGE it writes OUT/NAME.<format> (the decoded prediction: depth in the training data's
units, unit normals, alpha / albedo in [0, 1], label ids for segmentation) and OUT/NAME_preview.png
(colourised). Formats: png (16-bit; depth as 65535 * d / max d, normals as (n + 1) / 2), exr
(float32), npy (float32, (H, W, C)). Images of any size are padded to the backbone's 16-pixel patch
and cropped back. Existing outputs are replaced.
"""


def add_parser(sub) -> None:
    p = sub.add_parser("predict", help="predict depth / normals / ... with a `vision finetune` run",
                       description="Run a fine-tuned dense-prediction model on images; write predictions and previews.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, metavar="RUN", help="run folder written by vision finetune")
    p.add_argument("images", nargs="+", metavar="IMAGES", help="image files or glob patterns")
    p.add_argument("-o", "--out", type=Path, required=True, help="output folder (created)")
    p.add_argument("--format", choices=("png", "exr", "npy"), default="png", help="prediction file format "
                                                                                 "(default png, 16-bit)")
    p.add_argument("--no-tta", action="store_true", help="no horizontal-flip test-time augmentation")
    p.add_argument("--device", default=None, help="torch device (default cuda if available, else cpu)")
    p.set_defaults(func=run)


def _expand(patterns) -> list[Path]:
    out = []
    for pat in patterns:
        hits = sorted(glob.glob(pat)) if any(c in pat for c in "*?[") else [pat]
        if not hits:
            raise FileNotFoundError(f"no files match {pat}")
        out += [Path(h) for h in hits]
    return out


def write_prediction(path: Path, task: str, value, fmt: str) -> Path:
    """Write a decoded (C, H, W) prediction as 16-bit PNG, float EXR or NPY; returns the path."""
    import numpy as np

    a = np.transpose(value.detach().float().cpu().numpy(), (1, 2, 0))
    path = path.with_suffix("." + fmt)
    if fmt == "npy":
        np.save(path, a.astype(np.float32))
    elif fmt == "exr":
        from vision.data.exr import write_exr

        names = ["Y"] if a.shape[2] == 1 else ["R", "G", "B", "A"][: a.shape[2]] if task != "normals" else ["X", "Y", "Z"]
        write_exr(path, {n: a[:, :, i].astype(np.float32) for i, n in enumerate(names)})
    else:
        from vision.io import write_image

        if task == "depth":
            a = a / max(float(a.max()), 1e-12)
        elif task == "normals":
            a = (a + 1) / 2
        elif task in ("semantic",):
            a = a / 65535.0
        write_image(path, np.clip(a, 0, 1), bits=16)
    return path


def run(args) -> int:
    import torch

    from vision.dense import TASKS
    from vision.dense.colourise import colourise
    from vision.io import read_image, write_image
    from vision.pipelines.training.dense_model import load_run, predict_raw

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    model, cfg = load_run(args.run, device)
    task = TASKS[cfg.task]
    paths = _expand(args.images)
    args.out.mkdir(parents=True, exist_ok=True)
    from tqdm.auto import tqdm

    for path in tqdm(paths, desc="predict", disable=len(paths) < 2):
        img = read_image(path)
        img = img[:, :, :3] if img.shape[2] >= 3 else img.repeat(3, axis=2)
        x = torch.from_numpy(img).permute(2, 0, 1)[None].to(device)
        pred = task.decode(predict_raw(model, task, x, tta=not args.no_tta).float())[0]
        out = write_prediction(args.out / path.stem, cfg.task, pred, args.format)
        write_image(args.out / f"{path.stem}_preview.png", colourise(cfg.task, pred))
        print(f"wrote {out}")
    return 0
