"""``vision denoise``: denoise path-traced EXR frames (or sequences of them) from a script or a render farm.

Each input frame is one EXR (or PFM); its view layers' buffers are found by channel name (``vision
render-scenes`` names, Blender Cycles passes, Mitsuba AOV names; see :mod:`vision.data.render_layers`) or
come from separate files given as patterns. The output is ``OUTDIR/<stem><suffix>.exr``: the input with
the denoised radiance in place of each layer's beauty (float32, or float16 with --half), alpha and the
other channels passed through (not with --only-rgb), and the run's settings in the header, which a rerun
compares to decide what to skip.
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

from vision.data.fields import GUIDES

BUFFERS = GUIDES  # the guide buffers a frame may hold, each also a --NAME option

EPILOG = """\
examples:
  vision denoise renders/frame_*.exr -o denoised/
  vision denoise shot/beauty.*.exr -o out/ --albedo 'shot/albedo.{frame}.exr' --normal 'shot/normal.{frame}.exr'
  vision denoise 'seq/*.exr' -o out/ --scale 2 --tile 1024 --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT
  vision denoise 'turntable/frame_*.exr' -o out/ --temporal      # static camera: no flicker
  vision denoise 'frames/*.exr' -o out/ --model flnr             # neural guides (bundled weights)
  vision denoise 'frames/*.exr' -o out/ --model flnr --weights my_flnr.safetensors   # from vision train-denoiser
  vision denoise 'half/*.exr' -o out/ --model flnr --albedo 'full/{stem}.exr' --normal 'full/{stem}.exr' --phase 0,0
  vision denoise 'blender/*.exr' -o out/ --only-rgb --half         # each view layer's beauty + alpha, float16
  vision denoise color.0001.pfm -o out/ --albedo 'albedo.{frame}.pfm' --normal 'normal.{frame}.pfm'   # OIDN-style PFM

Buffers are read from each frame by channel name: the layers vision render-scenes writes (R G B,
albedo.*, normal.*, depth.Z, ao.Y, emission.*, position.*), Blender Cycles passes (Noisy Image or
Combined, Denoising Albedo / Normal / Depth before Normal / Depth, Emit, AO; every view layer is denoised
on its own) and Mitsuba AOV names (albedo, sh_normal/nn, depth/dd, position/pp). One line per run says
which channels were used for what. A --BUFFER PATTERN reads that buffer from a separate EXR or PFM
instead; the pattern may contain {stem} (the frame's file name without .exr or .pfm), {frame} (the last
run of digits in the stem, as written) and {dir} (the frame's folder). Albedo above 1 (Cycles: emitters,
glossy tint) is clamped for demodulation after taking out the emission where a pixel sees one; sky depth
(1e10, inf) means no surface.

The output is the input with the denoised RGB in each layer's beauty (R G B, or Combined also when the
noisy colour was Noisy Image), alpha and every other channel passed through, the input's header kept;
--only-rgb keeps just the beauty and alpha, --half writes those as float16.

Colour smaller than the guides by an integer factor (rendered at 1/2 or 1/4 resolution) is denoised
and upsampled to the guides' size; --phase DY,DX says that colour pixel (i, j) was shaded at
full-resolution pixel (u i + DY, u j + DX) (e.g. 0,0 for the top-left pixel of every block), so the
guides are read there instead of averaged over the block (better edges and textures). With --model
flnr and no --weights, such colour takes the bundled weights trained for its factor (flnr_up2,
flnr_up4).

Frames whose output exists and was made with the same settings (recorded in its header) are skipped;
others are redone with a line saying why (--overwrite redoes all); outputs are written to a temporary
file and renamed, so an interrupted run leaves no partial file and can simply be restarted. --shard
I/N (I from 0) takes the I-th of N contiguous blocks of the sorted frame list, so array jobs split a
sequence without coordinating. NaN/Inf samples are repaired (mean of finite neighbours) with a warning
that counts them; negative albedo, normals outside [-1, 1], missing or mis-sized buffers, and empty,
non-EXR or truncated files stop with one line naming the file (no output folder is left behind).

--temporal runs the frames in sorted order; frames skipped as done are still read into the history.
Each shard starts its own history, so use contiguous shards of a few dozen frames or more. With
--phase (one phase for the whole sequence) the fit reads the guides at that pixel of every block.

On CPU the command sets OMP_WAIT_POLICY=PASSIVE (unless set) and lets glibc keep freed memory for the next
frame: FLNR's numba stages then get the cores PyTorch's idle OpenMP workers would spin on, and frames reuse
memory instead of page-faulting it in (1280x720 on 2 threads: 67 ms -> 46 ms per frame).
"""


HELP = "denoise path-traced EXR frames with local regression on guide buffers"
DESCRIPTION = ("Denoise 1-spp path-traced EXR frames (single- or multi-layer) by local regression on albedo / "
               "normal / depth / AO / emission buffers: FLNR (guides written by a small trained network, the "
               "default) or FLR.")


def add_arguments(p) -> None:
    p.add_argument("frames", nargs="+", metavar="FRAMES", help="EXR (or PFM) files or glob patterns (quote them "
                                                              "for globs the shell should not expand)")
    p.add_argument("-o", "--out", type=Path, required=True, metavar="OUTDIR", help="output folder (created)")
    for name in BUFFERS:
        p.add_argument(f"--{name}", metavar="PATTERN", default=None,
                       help=f"read {name} from a separate EXR or PFM per frame (placeholders {{stem}} {{frame}} {{dir}})")
    p.add_argument("--model", choices=("flr", "flnr"), default=None,
                   help="denoiser: flnr (a trained network writes the regression's guides; ahead of flr on every "
                        "evaluation set, BENCHMARKS.md) or flr (local regression on the buffers themselves, no "
                        "weights); default flnr, or flr with --temporal")
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
    p.add_argument("--overwrite", action="store_true",
                   help="redo frames whose output exists (outputs made with other settings are always redone)")
    p.add_argument("--only-rgb", action="store_true",
                   help="write only the denoised RGB and its alpha (default: every other channel of the input "
                        "passes through)")
    p.add_argument("--half", action="store_true",
                   help="write the denoised RGB and alpha as half float (passed-through channels keep their type)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


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

def buffer_files(frame: Path, patterns: dict[str, str | None]) -> dict[str, Path]:
    """The separate buffer files of one frame (from the --BUFFER patterns), each checked to exist."""
    files = {}
    for name in BUFFERS:
        if patterns.get(name):
            path = buffer_path(patterns[name], frame)
            if not path.is_file():
                raise FileNotFoundError(f"{frame}: {name} buffer {path} does not exist (from --{name} "
                                        f"{patterns[name]!r})")
            files[name] = path
    return files


def read_frame_file(frame: Path, patterns: dict[str, str | None]):
    """The frame as :class:`vision.data.render_layers.RenderFile`: its view layers' buffers (renderer
    conventions already mapped: albedo above 1, sky depth), every stored channel and the header."""
    from vision.data.render_layers import read_render_file

    return read_render_file(frame, buffer_files(frame, patterns))


def read_buffers(frame: Path, patterns: dict[str, str | None]) -> dict[str, np.ndarray]:
    """Colour and guide buffers of one frame (its first view layer) as float32 (H, W, C) arrays."""
    return read_frame_file(frame, patterns).layers[0].buffers


# --------------------------------------------------------------------------- writing and resuming

SETTINGS_KEY = "vision.denoise.settings"


def run_settings(args, phase, patterns: dict[str, str | None]) -> dict[str, str]:
    """Everything that changes an output's pixels, as text: recorded in each output's header and compared
    on a rerun (the tile size and the device are left out: they do not change the result)."""
    import hashlib

    weights = "bundled"
    if args.model == "flnr" and args.weights is not None:
        weights = f"{Path(args.weights).name}#sha256:{hashlib.sha256(Path(args.weights).read_bytes()).hexdigest()[:16]}"
    settings = {"model": args.model}
    if args.model == "flnr":
        settings["weights"] = weights
    settings.update(radius="default" if args.radius is None else str(args.radius),
                    eps="learned" if args.eps is None else f"{args.eps:g}", scale=str(args.scale),
                    phase="none" if phase is None else f"{phase[0]},{phase[1]}",
                    temporal=f"alpha {args.alpha:g}" if args.temporal else "off",
                    only_rgb=str(bool(args.only_rgb)).lower(), half=str(bool(args.half)).lower())
    for name in BUFFERS:
        if patterns.get(name):
            settings[name] = patterns[name]
    return settings


def format_settings(settings: dict[str, str]) -> str:
    """JSON: buffer patterns may hold any character."""
    import json

    return json.dumps(settings)


def parse_settings(text: str) -> dict[str, str]:
    import json

    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def why_redo(target: Path, settings: dict[str, str]) -> str | None:
    """None when ``target`` was made with ``settings`` (skip it), else why it must be made again."""
    from vision.data.exr import read_exr_header

    try:
        header = read_exr_header(target)
    except (ValueError, OSError) as err:
        return f"the existing output cannot be read ({err})"
    recorded = header.get(SETTINGS_KEY)
    if not isinstance(recorded, str):
        return "the existing output records no settings"
    old = parse_settings(recorded)
    changed = [f"{k} {old.get(k, 'unset')} -> {v}" for k, v in settings.items() if old.get(k) != v]
    changed += [f"{k} {v} -> unset" for k, v in old.items() if k not in settings]
    return f"made with other settings ({', '.join(changed)})" if changed else None


def write_atomic(path: Path, channels, header: dict) -> None:
    """Write to a hidden temporary file in the same folder, then rename it over ``path``.

    ``channels``: name -> 2-D array (written in its type), or a float (H, W, 3) array written as ``R G B``.
    """
    from vision.data import write_exr

    if isinstance(channels, np.ndarray):
        channels = {c: np.ascontiguousarray(channels[..., k], dtype=np.float32) for k, c in enumerate("RGB")}
    tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:8]}.tmp.exr")
    try:
        write_exr(tmp, channels, header)
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


def write_output(target: Path, rf, results: list[np.ndarray], header: dict, only_rgb: bool, half: bool
                 ) -> list[str]:
    """The compositor's file: denoised RGB in each layer's beauty, alpha and (unless ``only_rgb``) every
    other channel of the input, the input's header attributes plus the run's. Returns notes on losses."""
    from vision.data.render_layers import output_channels

    channels, notes = output_channels(rf, results, only_rgb=only_rgb, half=half)
    same_size = all(a.shape == results[0].shape[:2] for a in rf.channels.values())
    write_atomic(target, channels, {**rf.header, **(rf.windows if same_size else {}), **header})
    return notes


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

    if args.model is None:  # FLNR beats FLR on every evaluation family; the temporal filter is FLR's
        args.model = "flr" if args.temporal else "flnr"
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
    from vision import __version__
    from vision.data.render_layers import check_readable, describe, missing_guides

    for f in mine:  # a bad file stops the run before anything is made, with one line naming it
        check_readable(f)
    created = not out.exists()
    prepare_folder(out, "-o")  # before any compute
    eps_text = "learned" if args.eps is None else f"{args.eps:g}"
    radius_text = args.radius if args.radius is not None else "blend " + ",".join(map(str, net.config["radii"]))
    settings = run_settings(args, phase, patterns)
    header = {"vision.denoiser": f"{args.model} radius={radius_text} eps={eps_text} scale={args.scale}"
                                 + ("" if phase is None else f" phase={phase[0]},{phase[1]}"),
              SETTINGS_KEY: format_settings(settings), "vision.version": __version__}
    temporal = {} if args.temporal else None  # one history per view layer
    done = skipped = repaired = 0
    said = None
    bar = tqdm(list(zip(mine, targets)), desc="denoise", unit="frame", disable=args.quiet, file=sys.stderr)
    try:
        for frame, target in bar:
            skip = target.exists() and not args.overwrite
            if skip:
                reason = why_redo(target, settings)
                if reason:
                    tqdm.write(f"vision denoise: redoing {target}: {reason}", file=sys.stdout)
                    skip = False
            if skip and temporal is None:
                skipped += 1
                continue
            rf = read_frame_file(frame, patterns)
            line = describe(rf, args.only_rgb)
            if line != said:  # once per run, again only when a frame is laid out differently
                tqdm.write(f"vision denoise: {'' if said is None else f'from {frame.name} on: '}{line}",
                           file=sys.stdout)
                said = line
                bare = missing_guides(rf)
                if bare:
                    tqdm.write(f"vision denoise: warning: {frame}: {bare}", file=sys.stderr)
            results = []
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", BufferWarning)
                for layer in rf.layers:
                    t = {k: torch.from_numpy(v).to(device) for k, v in layer.buffers.items()}
                    guides = {k: t.get(k) for k in BUFFERS}
                    try:
                        if temporal is not None:
                            history = temporal.get(layer.name)
                            if history is None:
                                history = temporal[layer.name] = TemporalFLR(
                                    args.radius, args.eps, args.scale, alpha=args.alpha, tile=args.tile or None)
                            if skip:  # the frame still feeds the history
                                history.accumulate(t["color"], phase=phase, **guides)
                                continue
                            res = history(t["color"], phase=phase, **guides)
                        else:
                            res = denoise(t["color"], **guides, model=args.model, radius=args.radius,
                                          eps=args.eps, scale=args.scale, tile=args.tile or None,
                                          weights=net if args.weights else None, phase=phase)  # None: bundled
                    except ValueError as err:
                        raise ValueError(f"{frame}: {err}") from None
                    results.append(res.detach().cpu().numpy())
            if skip:
                skipped += 1
                continue
            notes = [n for layer in rf.layers for n in layer.notes]
            for w in caught:
                if issubclass(w.category, BufferWarning):
                    repaired += 1
                    notes.append(str(w.message))
            notes += write_output(target, rf, results, header, args.only_rgb, args.half)
            for note in notes:
                tqdm.write(f"vision denoise: warning: {frame}: {note}", file=sys.stderr)
            done += 1
    except BaseException:
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # a run that made nothing leaves nothing behind
        raise
    print(f"denoised {done} frame(s), skipped {skipped} already done"
          + (f", repaired NaN/Inf in {repaired} buffer(s)" if repaired else "")
          + (f" (shard {index}/{count}: {len(mine)} of {len(frames)} frames)" if count > 1 else "")
          + f"; output in {out}")
    return 0
