"""What ``vision restore-structure`` runs once its command line is parsed: the images read (8/16-bit PNG, JPEG,
TIFF or EXR), checked, restored with :func:`vision.restore_structure` and written, never over an input."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from vision.data.exr import read_exr, write_exr
from vision.io import check_exr_header, read_image, to_image, to_tensor, write_image
from vision.kernels import structure_loss
from vision.kernels.spl.config import SPLConfig
from vision.outputs import atomic_path, prepare_file, refuse_inputs
from vision.pipelines.cli import read_input, torch_device
from vision.pipelines.plugins import POSITIVE, QUALITY, check_numbers
from vision.restore import restore_structure

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tif", ".tiff")
EXTENSIONS = IMAGE_EXTENSIONS + (".exr",)


def read_any(path: Path) -> tuple[np.ndarray, bool]:
    """(H, W, C) float32 and whether the values are unbounded (EXR / float TIFF)."""
    ext = path.suffix.lower()
    if ext not in EXTENSIONS:
        raise ValueError(f"{path}: unsupported extension {path.suffix or '(none)'!r}; "
                         f"use one of {', '.join(EXTENSIONS)}")
    if ext == ".exr":
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such image file")
        check_exr_header(path)  # a huge data window is refused before any pixel is read
        ch = read_exr(path)
        for names in (("R", "G", "B"), ("Y",)):
            if all(n in ch for n in names):
                return np.stack([np.asarray(ch[n], dtype=np.float32) for n in names], -1), True
        raise ValueError(f"{path}: an EXR image needs channels R, G, B (or Y); it has {', '.join(sorted(ch))}")
    img = read_image(path)
    hdr = bool(img.size) and (float(img.min()) < 0.0 or float(img.max()) > 1.0)  # a float TIFF
    return img, hdr


def write_any(path: Path, img: np.ndarray, bits: int, quality: int) -> Path:
    if path.suffix.lower() == ".exr":
        names = ("R", "G", "B", "A")[: img.shape[2]] if img.shape[2] != 1 else ("Y",)
        with atomic_path(path) as tmp:
            write_exr(tmp, {n: np.ascontiguousarray(img[:, :, i], dtype=np.float32) for i, n in enumerate(names)})
        return path
    if path.suffix.lower() in (".jpg", ".jpeg"):
        return write_image(path, img[:, :, :3] if img.shape[2] == 4 else img, bits=8, quality=quality)
    return write_image(path, img, bits=bits)


def run(args) -> int:
    """``vision restore-structure``: check the options and files, restore, write; the exit code."""
    inputs = [("--source", args.source), ("--edited", args.edited)] + ([("--mask", args.mask)] if args.mask else [])
    out = Path(args.output)
    if out.suffix.lower() not in EXTENSIONS:
        raise ValueError(f"-o {out}: unsupported extension {out.suffix or '(none)'!r}; "
                         f"use one of {', '.join(EXTENSIONS)}")
    refuse_inputs(out, [(flag, Path(path)) for flag, path in inputs])
    prepare_file(out, "-o")  # before any compute: a folder, or an unwritable place, fails now
    if out.suffix.lower() in (".jpg", ".jpeg") and args.bits != 8:
        raise ValueError("JPEG output is 8-bit only; drop --bits 16 or write a .png/.tif")
    if args.steps < 0:
        raise ValueError(f"--steps must be >= 0, got {args.steps}")
    check_numbers(args, dict(lr=POSITIVE, quality=QUALITY))
    config = SPLConfig(radius=args.radius, eps=args.eps, spl_weight=args.spl_weight, color_weight=args.color_weight)
    device = torch_device(args.device)
    src, src_hdr = read_input(read_any, Path(args.source), "--source")
    edit, edit_hdr = read_input(read_any, Path(args.edited), "--edited")
    if src.shape[:2] != edit.shape[:2]:
        raise ValueError(f"--source is {src.shape[1]}x{src.shape[0]} but --edited is {edit.shape[1]}x{edit.shape[0]} "
                         "(width x height); they must be the same size")
    alpha = edit[:, :, 3:] if edit.shape[2] == 4 else None
    src, edit = src[:, :, :3], edit[:, :, :3]
    if src.shape[2] != edit.shape[2]:  # gray with colour: the loss sees gray anyway
        src = np.repeat(src, 3, axis=2) if src.shape[2] == 1 else src.mean(2, keepdims=True)
    mask = None
    if args.mask:
        m, _ = read_input(read_any, Path(args.mask), "--mask", "mask")
        if m.shape[:2] != src.shape[:2]:
            raise ValueError(f"--mask is {m.shape[1]}x{m.shape[0]} but the images are {src.shape[1]}x{src.shape[0]}")
        m = m[:, :, :3].mean(2)
        if float(m.min()) < 0 or float(m.max()) > 1:
            raise ValueError(f"--mask values must lie in [0, 1], got [{float(m.min()):g}, {float(m.max()):g}]")
        mask = m
    for flag, arr in (("--source", src), ("--edited", edit)):
        if not np.isfinite(arr).all():
            raise ValueError(f"{flag} image contains NaN or Inf values")
    s = to_tensor(src, device=device)
    e = to_tensor(edit, device=device)
    mk = None if mask is None else torch.from_numpy(np.ascontiguousarray(mask, dtype=np.float32)).to(device)
    hdr = src_hdr or edit_hdr
    restored = restore_structure(s, e, mask=mk, steps=args.steps, lr=args.lr, config=config, optimizer=args.optimizer,
                                 value_range=None if hdr else (0.0, 1.0), progress=not args.quiet)
    with torch.no_grad():
        before = float(structure_loss(s, e, config.radius, config.eps, mk))
        after = float(structure_loss(s, restored, config.radius, config.eps, mk))
    img = to_image(restored)
    if alpha is not None:
        img = np.concatenate([img, alpha], axis=2)
    write_any(out, img, args.bits, args.quality)
    if not args.quiet:
        print(f"structure loss {before:.4g} -> {after:.4g}; wrote {out}")
    return 0
