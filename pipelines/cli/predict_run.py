"""What ``vision predict`` runs once its command line is parsed: a ``vision finetune`` run folder loaded (one line
when it does not load), each image predicted and written with its colourised preview (:func:`write_prediction`)."""
from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from tqdm.auto import tqdm

from vision.data.exr import write_exr
from vision.dense import TASKS
from vision.dense.colourise import colourise
from vision.io import read_image, write_image
from vision.outputs import InputIndex, atomic_path, inside, output_stems, prepare_folder
from vision.pipelines.cli import read_input, torch_device
from vision.pipelines.training import dense_model


def _expand(patterns) -> list[Path]:
    out = []
    for pat in patterns:
        hits = sorted(glob.glob(pat)) if any(c in pat for c in "*?[") else [pat]
        if not hits:
            raise FileNotFoundError(f"IMAGES {pat}: no files match")
        missing = [h for h in hits if not Path(h).is_file()]
        if missing:  # before any output is written
            raise FileNotFoundError(f"IMAGES {missing[0]}: no such image file")
        out += [Path(h) for h in hits]
    return out


def write_prediction(path: Path, task: str, value, fmt: str) -> Path:
    """Write a decoded (C, H, W) prediction as 16-bit PNG, float EXR or NPY at ``path`` + ``.fmt`` (the
    extension is appended, so a stem with dots keeps them), atomically; returns the path. A PNG states how its
    codes decode in its text chunks: ``vision.decode`` (the formula) and, for depth, ``vision.depth_scale``
    (the image's largest depth, which code 65535 stands for)."""
    a = np.transpose(value.detach().float().cpu().numpy(), (1, 2, 0))
    path = path.with_name(f"{path.name}.{fmt}")
    with atomic_path(path) as tmp:
        if fmt == "npy":
            np.save(tmp, a.astype(np.float32))
        elif fmt == "exr":
            names = ["Y"] if a.shape[2] == 1 else ["R", "G", "B", "A"][: a.shape[2]] if task != "normals" else ["X", "Y", "Z"]
            write_exr(tmp, {n: a[:, :, i].astype(np.float32) for i, n in enumerate(names)})
        else:
            text = {"vision.task": task}
            if task == "depth":
                scale = max(float(a.max()), 1e-12)
                a = a / scale
                text.update({"vision.depth_scale": f"{scale:.9g}", "vision.decode": "depth = code / 65535 * scale"})
            elif task == "normals":
                a = (a + 1) / 2
                text["vision.decode"] = "normal = 2 * code / 65535 - 1"
            elif task in ("semantic",):
                a = a / 65535.0
                text["vision.decode"] = "label = code"
            else:
                text["vision.decode"] = "value = code / 65535"
            write_image(tmp, np.clip(a, 0, 1), bits=16, text=text)
    return path


def load_run_for_cli(run_dir: Path, device="cpu"):
    """:func:`load_run`, with a missing, damaged or foreign run folder reported as one line naming RUN."""
    if not (run_dir / dense_model.CONFIG).is_file() or not (run_dir / dense_model.WEIGHTS).is_file():
        raise FileNotFoundError(f"RUN {run_dir} is not a finished `vision finetune` run (needs {dense_model.CONFIG} "
                                f"and {dense_model.WEIGHTS})")
    try:
        return dense_model.load_run(run_dir, device)
    except (SafetensorError, ValueError, TypeError, KeyError, OSError) as err:
        raise ValueError(f"RUN {run_dir}: cannot load this run ({err})") from None


def run(args) -> int:
    """``vision predict``: check the images and outputs, load the run, write each prediction and its preview."""
    device = torch_device(args.device)
    paths = _expand(args.images)
    run_dir = Path(args.run)
    inputs = InputIndex([("IMAGES", p) for p in paths] + [("RUN", run_dir / name) for name in (
        dense_model.CONFIG, dense_model.BASE, dense_model.WEIGHTS)])
    names = [(inside(args.out, f"{stem}.{args.format}", "-o", inputs),
              inside(args.out, f"{stem}_preview.png", "-o", inputs)) for stem in output_stems(paths, "IMAGES")]
    owner: dict[Path, Path] = {}
    for path, pair in zip(paths, names):
        for target in pair:  # x.png's preview and an input named x_preview.png would share a file
            if owner.setdefault(target, path) != path:
                raise ValueError(f"IMAGES {owner[target]} and {path} would both write {target}; rename one")
    existing = [t for pair in names for t in pair if t.exists() or t.is_symlink()]
    if existing and not args.overwrite:  # before any work: photo.jpg must not silently replace photo.png
        more = f" (and {len(existing) - 1} more)" if len(existing) > 1 else ""
        raise FileExistsError(f"-o {args.out}: {existing[0].name} exists{more}; pass --overwrite to replace")
    model, cfg = load_run_for_cli(run_dir, device)  # a run that does not load leaves no -o folder behind
    prepare_folder(args.out, "-o")
    task = TASKS[cfg.task]
    for path, (out, preview) in tqdm(list(zip(paths, names)), desc="predict", disable=len(paths) < 2 or args.quiet):
        img = read_input(read_image, path, "IMAGES")
        img = img[:, :, :3] if img.shape[2] >= 3 else img.repeat(3, axis=2)
        x = torch.from_numpy(img).permute(2, 0, 1)[None].to(device)
        pred = task.decode(dense_model.predict_raw(model, task, x, tta=not args.no_tta).float())[0]
        out = write_prediction(out.with_name(out.stem), cfg.task, pred, args.format)
        with atomic_path(preview) as tmp:  # a link at the preview's name is replaced, never written through
            write_image(tmp, colourise(cfg.task, pred))
        if not args.quiet:
            print(f"wrote {out}")
    return 0
