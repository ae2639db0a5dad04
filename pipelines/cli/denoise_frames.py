"""A ``vision denoise`` frame's files: what the headers alone refuse before torch loads (:func:`check_before_loading`),
a frame and its buffer files read (:func:`read_frame_file`), the output written atomically with the run's settings in
its header (:func:`write_output`), what an earlier run wrote read back (:func:`why_redo`, :func:`written_rgb`), and
FLNR weights loaded with one line for a bad file (:func:`load_weights`)."""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np
import OpenEXR  # noqa: F401  the [denoise] extra's EXR library: missing, the command says so before any work
from safetensors import SafetensorError

from vision.data.exr import EXR_MAGIC, one_type_per_layer, read_exr, read_exr_header, read_exr_part_headers, write_exr
from vision.data.fields import GUIDES
from vision.data.render_layers import check_readable, output_channels, read_render_file

from .denoise_io import SETTINGS_KEY, buffer_path, expand_frames, parse_settings, parse_shard


# --------------------------------------------------------------------------- before loading

def check_before_loading(args) -> None:
    """Refuse what the command line and the frames' headers alone show to be wrong, before torch and the denoiser
    load (seconds, and most of a run's memory, spent on a refusal otherwise): a frame that is missing or no frame
    file, a frame or buffer file with any part over the pixel limit (its header's data window), and a ``--scale``
    above the larger side of all that a frame reads (the frame and its buffer files). Only the files this shard
    reads are opened, headers only; a buffer file that is missing is left to the reader, which names its option."""
    frames = expand_frames(args.frames)
    index, count = parse_shard(args.shard)
    start, end = index * len(frames) // count, (index + 1) * len(frames) // count
    first = max(0, start - args.warmup) if args.temporal and args.warmup > 0 else start
    patterns = [p for p in (getattr(args, name) for name in GUIDES) if p]
    for frame in frames[first:end]:
        files = [frame] + [buffer_path(p, frame) for p in patterns]
        for path in files[:1] + [f for f in files[1:] if f.is_file()]:
            check_readable(path)
        if args.scale is not None and args.scale > 1:
            sides = [largest_side(f) for f in files]
            if None not in sides and args.scale > max(sides):
                raise ValueError(f"{frame}: scale must be at most the frame's larger side ({max(sides)} pixels), got "
                                 f"{args.scale}")


def largest_side(path: Path) -> int | None:
    """The larger side, in pixels, of the largest data window among an EXR file's parts, from its headers; None for
    a PFM, a missing file or a header that does not read (the reader reports those)."""
    try:
        if not path.is_file():
            return None
        with open(path, "rb") as f:
            if f.read(4) != EXR_MAGIC:
                return None
        windows = [header["dataWindow"] for header in read_exr_part_headers(path)]
        return max(max(int(hi[0]) - int(lo[0]), int(hi[1]) - int(lo[1])) + 1 for lo, hi in windows)
    except Exception:  # noqa: BLE001 - an unreadable header is the reader's to report, naming the file
        return None


# --------------------------------------------------------------------------- reading

def buffer_files(frame: Path, patterns: dict[str, str | None]) -> dict[str, Path]:
    """The separate buffer files of one frame (from the --BUFFER patterns), each checked to exist."""
    files = {}
    for name in GUIDES:
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
    return read_render_file(frame, buffer_files(frame, patterns))


# --------------------------------------------------------------------------- writing and resuming

def why_redo(target: Path, settings: dict[str, str]) -> str | None:
    """None when ``target`` was made with ``settings`` (skip it), else why it must be made again."""
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
    if isinstance(channels, np.ndarray):
        channels = {c: np.ascontiguousarray(channels[..., k], dtype=np.float32) for k, c in enumerate("RGB")}
    tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:8]}.tmp.exr")
    try:
        write_exr(tmp, channels, header)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_weights(load, path):
    """``load(path)``, with weights that are missing or not FLNR safetensors reported as one line."""
    try:
        return load(path)
    except FileNotFoundError:
        if path is None:
            raise
        raise FileNotFoundError(f"--weights {path}: no such file or save_pretrained folder") from None
    except (SafetensorError, ValueError, KeyError, RuntimeError, OSError) as err:
        if path is None:
            raise
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(f"--weights {path}: not FLNR weights from vision train-denoiser ({first})") from None


def write_output(target: Path, rf, results: list[np.ndarray], header: dict, only_rgb: bool, half: bool
                 ) -> list[str]:
    """The compositor's file: denoised RGB in each layer's beauty, alpha and (unless ``only_rgb``) every
    other channel of the input, the input's header attributes plus the run's. Returns notes on losses.

    Each layer holding denoised colour is written in the colour's type (float32, or half with ``half``): a half
    input's alpha beside float32 RGB would make readers that gather a layer's channels
    (``OpenEXR.File(out)``) refuse the file (:func:`vision.data.exr.one_type_per_layer`)."""
    channels, notes = output_channels(rf, results, only_rgb=only_rgb, half=half)
    colour = [n for layer in rf.layers for names in (layer.beauty, *layer.copies) for n in names]
    channels = one_type_per_layer(channels, colour)
    same_size = all(a.shape == results[0].shape[:2] for a in rf.channels.values())
    write_atomic(target, channels, {**rf.header, **(rf.windows if same_size else {}), **header})
    return notes


def written_rgb(target: Path, names: list[str]) -> np.ndarray | None:
    """The denoised RGB an earlier run wrote to ``target`` under the beauty channels ``names``, float32 (H, W, 3);
    None when it cannot be read (the frame is then denoised again)."""
    try:
        ch = read_exr(target, list(names))
        return np.stack([np.asarray(ch[n], dtype=np.float32) for n in names], -1)
    except (OSError, ValueError, KeyError):
        return None
