"""``vision denoise``: denoise path-traced EXR frames (or sequences of them) from a script or a render farm.

Each input frame is one EXR; its buffers are found by channel name (``vision render-scenes`` names,
Blender Cycles denoising passes, Mitsuba AOV names; see :func:`vision.denoise.find_fields`) or come
from separate files given as patterns. The output is ``OUTDIR/<stem><suffix>.exr`` with the denoised
radiance in ``R G B`` (float32).
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import sys
import uuid
import warnings
from pathlib import Path

import numpy as np

BUFFERS = ("albedo", "normal", "depth", "ao", "emission", "position")

EPILOG = """\
examples:
  vision denoise renders/frame_*.exr -o denoised/
  vision denoise shot/beauty.*.exr -o out/ --albedo 'shot/albedo.{frame}.exr' --normal 'shot/normal.{frame}.exr'
  vision denoise 'seq/*.exr' -o out/ --scale 2 --tile 1024 --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT
  vision denoise 'turntable/frame_*.exr' -o out/ --temporal      # static camera: no flicker
  vision denoise 'frames/*.exr' -o out/ --model flnr             # neural guides (bundled weights)
  vision denoise 'frames/*.exr' -o out/ --model flnr --weights my_flnr.safetensors   # from vision train-denoiser
  vision denoise 'half/*.exr' -o out/ --model flnr --albedo 'full/{stem}.exr' --normal 'full/{stem}.exr' --phase 0,0

Buffers are read from each frame by channel name: the layers vision render-scenes writes (R G B,
albedo.*, normal.*, depth.Z, ao.Y, emission.*, position.*), Blender Cycles passes (Combined or Noisy
Image, Denoising Albedo, Denoising Normal, Denoising Depth, Emit, AO; any view-layer prefix) and Mitsuba
AOV names (albedo, sh_normal/nn, depth/dd, position/pp). A --BUFFER PATTERN reads that buffer from a
separate EXR instead; the pattern may contain {stem} (the frame's file name without .exr), {frame}
(the last run of digits in the stem, as written) and {dir} (the frame's folder).

Colour smaller than the guides by an integer factor (rendered at 1/2 or 1/4 resolution) is denoised
and upsampled to the guides' size; --phase DY,DX says that colour pixel (i, j) was shaded at
full-resolution pixel (u i + DY, u j + DX) (e.g. 0,0 for the top-left pixel of every block), so the
guides are read there instead of averaged over the block (better edges and textures). With --model
flnr and no --weights, such colour takes the bundled weights trained for its factor (flnr_up2,
flnr_up4).

Frames whose output exists are skipped (--overwrite redoes them); outputs are written to a temporary
file and renamed, so an interrupted run leaves no partial file and can simply be restarted. --shard
I/N (I from 0) takes the I-th of N contiguous blocks of the sorted frame list, so array jobs split a
sequence without coordinating. NaN/Inf samples are repaired (mean of finite neighbours) with a warning
that counts them; albedo outside [0, 1], normals outside [-1, 1], missing or mis-sized buffers stop
with an error naming the frame.

--temporal runs the frames in sorted order; frames skipped as done are still read into the history.
Each shard starts its own history, so use contiguous shards of a few dozen frames or more. With
--phase (one phase for the whole sequence) the fit reads the guides at that pixel of every block.
"""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "denoise",
        help="denoise path-traced EXR frames with local regression on guide buffers",
        description="Denoise 1-spp path-traced EXR frames (single- or multi-layer) with Fast Local Regression "
                    "on albedo / normal / depth / AO / emission buffers.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("frames", nargs="+", metavar="FRAMES", help="EXR files or glob patterns (quote them for globs "
                                                              "the shell should not expand)")
    p.add_argument("-o", "--out", type=Path, required=True, metavar="OUTDIR", help="output folder (created)")
    for name in BUFFERS:
        p.add_argument(f"--{name}", metavar="PATTERN", default=None,
                       help=f"read {name} from a separate EXR per frame (placeholders {{stem}} {{frame}} {{dir}})")
    p.add_argument("--model", choices=("flr", "flnr"), default="flr",
                   help="denoiser: flr (local regression on the guides) or flnr (a trained network enhances the "
                        "guides first; default flr)")
    p.add_argument("--weights", type=Path, default=None, metavar="FILE",
                   help="--model flnr: weights from vision train-denoiser (default: the bundled ones)")
    p.add_argument("--radius", type=int, default=None, help="regression window radius in pixels (default 8; "
                                                            "flnr: the trained per-cell blend of its radii)")
    p.add_argument("--eps", type=float, default=None, help="ridge weight on standardised guides (default 0.01; "
                                                           "flnr: the learned ones)")
    p.add_argument("--scale", type=int, default=None, help="fit on scale x scale cells, apply at full resolution "
                                                           "(default 1; flnr: the trained one)")
    p.add_argument("--phase", default=None, metavar="DY,DX",
                   help="colour at 1/u resolution: the pixel of its u x u block each colour sample was shaded at "
                        "(default: anywhere, the guides are averaged over the block)")
    p.add_argument("--tile", type=int, default=1024, help="process tiles of about this many pixels a side "
                                                          "(exact overlap; bounds memory; default 1024, 0 = off)")
    p.add_argument("--temporal", action="store_true",
                   help="static-camera sequence: carry the regression statistics from frame to frame (in sorted "
                        "order, rejected where the guides change), so successive frames do not flicker")
    p.add_argument("--alpha", type=float, default=0.1, help="--temporal: smallest weight of the newest frame "
                                                            "(default 0.1)")
    p.add_argument("--shard", default=None, metavar="I/N", help="process only the I-th (0-based) of N blocks")
    p.add_argument("--suffix", default="", help="appended to each output file's stem (default none)")
    p.add_argument("--overwrite", action="store_true", help="redo frames whose output already exists")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


# --------------------------------------------------------------------------- frame lists

def natural_key(path: Path):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def expand_frames(patterns) -> list[Path]:
    """Files and glob patterns -> existing files, de-duplicated, in natural sort order."""
    found: dict[Path, None] = {}
    for pat in patterns:
        if any(ch in pat for ch in "*?["):
            hits = [Path(h) for h in glob.glob(pat)]
            if not hits:
                raise FileNotFoundError(f"no files match {pat!r}")
        else:
            hits = [Path(pat)]
            if not hits[0].is_file():
                raise FileNotFoundError(f"no such frame: {pat}")
        for h in hits:
            found[h] = None
    return sorted(found, key=natural_key)


def parse_shard(text: str | None) -> tuple[int, int]:
    if text is None:
        return 0, 1
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or int(m.group(2)) < 1 or int(m.group(1)) >= int(m.group(2)):
        raise ValueError(f"--shard must be I/N with 0 <= I < N, got {text!r}")
    return int(m.group(1)), int(m.group(2))


def shard(frames: list, index: int, count: int) -> list:
    """The index-th of count contiguous, near-equal blocks (sizes differ by at most one)."""
    n = len(frames)
    return frames[index * n // count:(index + 1) * n // count]


def buffer_path(pattern: str, frame: Path) -> Path:
    stem = frame.name[:-4] if frame.name.lower().endswith(".exr") else frame.stem
    digits = re.findall(r"\d+", stem)
    if "{frame}" in pattern and not digits:
        raise ValueError(f"{frame}: pattern {pattern!r} uses {{frame}} but the file name has no frame number")
    return Path(pattern.replace("{stem}", stem).replace("{frame}", digits[-1] if digits else "")
                .replace("{dir}", str(frame.parent)))


def output_path(out: Path, frame: Path, suffix: str) -> Path:
    """``out/<stem><suffix>.exr``; a suffix with a path separator, or a name that resolves outside ``out``
    (a link placed there), is refused: outputs stay in the output folder."""
    from vision.outputs import inside

    if any(sep and sep in suffix for sep in (os.sep, os.altsep, "\x00")):
        raise ValueError(f"--suffix {suffix!r} must not contain a path separator; outputs stay in -o {out}")
    stem = frame.name[:-4] if frame.name.lower().endswith(".exr") else frame.stem
    return inside(out, f"{stem}{suffix}.exr", "-o")


# --------------------------------------------------------------------------- reading

def _stack(stored: dict, names: list[str]) -> np.ndarray:
    return np.stack([np.asarray(stored[n], dtype=np.float32) for n in names], axis=-1)


def read_buffers(frame: Path, patterns: dict[str, str | None]) -> dict[str, np.ndarray]:
    """Colour and guide buffers of one frame as float32 (H, W, C) arrays."""
    from vision.data import read_exr
    from vision.denoise import find_fields
    from vision.denoise.buffers import CHANNELS

    stored = read_exr(frame)
    fields = find_fields(stored)
    if "color" not in fields:
        raise ValueError(f"{frame}: no colour channels found (looked for R G B, Combined.*, Noisy Image.*, ...); "
                         f"channels: {', '.join(sorted(stored))}")
    bufs = {"color": _stack(stored, fields["color"])}
    for name in BUFFERS:
        if patterns.get(name):
            path = buffer_path(patterns[name], frame)
            if not path.is_file():
                raise FileNotFoundError(f"{frame}: {name} buffer {path} does not exist (from --{name} "
                                        f"{patterns[name]!r})")
            other = read_exr(path)
            f2 = find_fields(other)
            names = f2.get(name) or f2.get("color")
            if names is None and len(other) == 1:
                names = list(other)
            if names is None and CHANNELS[name] == 1:
                names = next(([v[0]] for v in f2.values()), None)
            if names is None:
                raise ValueError(f"{path}: no {name} channels found; channels: {', '.join(sorted(other))}")
            arr = _stack(other, names)
            if CHANNELS[name] == 1:
                arr = arr[..., :1]
            bufs[name] = arr
        elif name in fields:
            bufs[name] = _stack(stored, fields[name])
    return bufs


def write_atomic(path: Path, rgb: np.ndarray, header: dict) -> None:
    """Write to a hidden temporary file in the same folder, then rename it over ``path``."""
    from vision.data import write_exr

    tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:8]}.tmp.exr")
    try:
        write_exr(tmp, {c: np.ascontiguousarray(rgb[..., k], dtype=np.float32) for k, c in enumerate("RGB")},
                  header)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _load_weights(load, path):
    """``load(path)``, with weights that are missing or not FLNR safetensors reported as one line."""
    from safetensors import SafetensorError

    try:
        return load(path)
    except FileNotFoundError:
        if path is None:
            raise
        raise FileNotFoundError(f"--weights {path}: no such file") from None
    except (SafetensorError, ValueError, KeyError, RuntimeError, OSError) as err:
        if path is None:
            raise
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(f"--weights {path}: not FLNR weights from vision train-denoiser ({first})") from None


def parse_phase(text):
    """``"DY,DX"`` -> (DY, DX) ints >= 0, or None; ValueError for anything else."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*,\s*(\d+)\s*", text)
    if not m:
        raise ValueError(f"--phase must be DY,DX (two integers >= 0, e.g. 0,0), got {text!r}")
    return int(m.group(1)), int(m.group(2))


# --------------------------------------------------------------------------- run

def run(args) -> int:
    import torch
    from tqdm import tqdm

    from vision.denoise import BufferWarning, TemporalFLR, denoise
    from vision.outputs import InputIndex, prepare_folder, refuse_inputs
    from vision.pipelines.cli import torch_device

    net = None
    if args.model == "flnr":
        from vision.denoise import load_flnr

        if args.temporal:
            raise ValueError("--temporal works with --model flr only")
        net = _load_weights(load_flnr, args.weights)
        defaults = (None, None, net.scale)  # radius None: the trained per-cell blend of its radii
    else:
        if args.weights is not None:
            raise ValueError("--weights is for --model flnr")
        defaults = (8, 1e-2, 1)
    args.radius = defaults[0] if args.radius is None else args.radius
    args.eps = defaults[1] if args.eps is None else args.eps
    args.scale = defaults[2] if args.scale is None else args.scale
    if ((args.radius is not None and args.radius < 0) or args.scale < 1 or (args.eps is not None and args.eps <= 0)
            or args.tile < 0):
        raise ValueError("--radius must be >= 0, --scale >= 1, --eps > 0 and --tile >= 0")
    phase = parse_phase(args.phase)
    device = torch_device(args.device)
    frames = expand_frames(args.frames)
    index, count = parse_shard(args.shard)
    mine = shard(frames, index, count)
    patterns = {name: getattr(args, name) for name in BUFFERS}
    out = Path(args.out)
    # never overwrite an input: no output may be, or link to, a frame, a buffer file or the weights
    inputs = InputIndex([("FRAMES", f) for f in frames] + [("--weights", args.weights)]
                        + [(f"--{name}", buffer_path(p, f)) for f in mine for name, p in patterns.items() if p])
    targets = [output_path(out, f, args.suffix) for f in mine]
    for t in targets:
        refuse_inputs(t, inputs, "-o")
    if len(set(targets)) != len(targets):
        raise ValueError("two frames map to the same output name; use frames with distinct file names")
    prepare_folder(out, "-o")  # before any compute
    eps_text = "learned" if args.eps is None else f"{args.eps:g}"
    radius_text = args.radius if args.radius is not None else "blend " + ",".join(map(str, net.config["radii"]))
    header = {"vision.denoiser": f"{args.model} radius={radius_text} eps={eps_text} scale={args.scale}"
                                 + ("" if phase is None else f" phase={phase[0]},{phase[1]}")}
    temporal = TemporalFLR(args.radius, args.eps, args.scale, alpha=args.alpha, tile=args.tile or None) \
        if args.temporal else None
    done = skipped = repaired = 0
    bar = tqdm(list(zip(mine, targets)), desc="denoise", unit="frame", disable=args.quiet, file=sys.stderr)
    for frame, target in bar:
        skip = target.exists() and not args.overwrite
        if skip and temporal is None:
            skipped += 1
            continue
        bufs = read_buffers(frame, patterns)
        t = {k: torch.from_numpy(v).to(device) for k, v in bufs.items()}
        guides = {k: t.get(k) for k in BUFFERS}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", BufferWarning)
            try:
                if skip:  # --temporal: the frame still feeds the history
                    temporal.accumulate(t["color"], phase=phase, **guides)
                elif temporal is not None:
                    res = temporal(t["color"], phase=phase, **guides)
                else:
                    res = denoise(t["color"], **guides, model=args.model, radius=args.radius,
                                  eps=args.eps, scale=args.scale, tile=args.tile or None,
                                  weights=net if args.weights else None, phase=phase)  # None: bundled, per size
            except ValueError as err:
                raise ValueError(f"{frame}: {err}") from None
        if skip:
            skipped += 1
            continue
        for w in caught:
            if issubclass(w.category, BufferWarning):
                repaired += 1
                tqdm.write(f"vision denoise: warning: {frame}: {w.message}", file=sys.stderr)
        write_atomic(target, res.detach().cpu().numpy(), header)
        done += 1
    print(f"denoised {done} frame(s), skipped {skipped} already done"
          + (f", repaired NaN/Inf in {repaired} buffer(s)" if repaired else "")
          + (f" (shard {index}/{count}: {len(mine)} of {len(frames)} frames)" if count > 1 else "")
          + f"; output in {out}")
    return 0
