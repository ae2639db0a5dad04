"""Files of ``vision denoise``: frame lists and shards, buffer files, output names, the settings an output records
(what a rerun compares to decide what to skip), atomic writes."""
from __future__ import annotations

import contextlib
import glob
import os
import re
import stat
import sys
import uuid
from pathlib import Path

import numpy as np

from vision.data.fields import GUIDES


# --------------------------------------------------------------------------- frame lists

def natural_key(path: Path):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def expand_frames(patterns) -> list[Path]:
    """Files and glob patterns -> existing files, de-duplicated, in natural sort order. A name that exists as a
    file is that file, even when it holds glob characters (``f[1].exr`` is not ``f1.exr``)."""
    found: dict[Path, None] = {}
    for pat in patterns:
        if any(ch in pat for ch in "*?[") and not Path(pat).is_file():
            hits = [Path(h) for h in glob.glob(pat)]
            if not hits:
                raise FileNotFoundError(f"no files match {pat!r}")
        else:
            hits = [Path(pat)]
            if not hits[0].is_file():
                _refuse_link_loop(pat)  # is_file() says False for a loop too: say what it is
                raise FileNotFoundError(f"no such frame: {pat}")
        for h in hits:
            found[h] = None
    frames = sorted(found, key=natural_key)
    for f in frames:
        if not f.is_file():
            _refuse_link_loop(str(f))  # a pattern matches a link of a loop too
    return frames


def _refuse_link_loop(name: str) -> None:
    """A ValueError naming ``name`` when it is a symbolic link whose chain leads back to itself."""
    import errno

    try:
        os.stat(name)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise ValueError(f"FRAMES {name}: symbolic links that lead to each other (a loop)") from None


def check_before_loading(args) -> None:
    """Refuse what the command line and the frames' headers alone show to be wrong, before torch and the denoiser
    load (seconds, and most of a run's memory, spent on a refusal otherwise): a frame that is missing or no frame
    file, a frame or buffer file with any part over the pixel limit (its header's data window), and a ``--scale``
    above the larger side of all that a frame reads (the frame and its buffer files). Only the files this shard
    reads are opened, headers only; a buffer file that is missing is left to the reader, which names its option."""
    from vision.data.render_layers import check_readable

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
    from vision.data.exr import EXR_MAGIC

    try:
        if not path.is_file():
            return None
        with open(path, "rb") as f:
            if f.read(4) != EXR_MAGIC:
                return None
        import OpenEXR

        with OpenEXR.File(str(path), header_only=True) as exr:
            windows = [part.header["dataWindow"] for part in exr.parts]
        return max(max(int(hi[0]) - int(lo[0]), int(hi[1]) - int(lo[1])) + 1 for lo, hi in windows)
    except Exception:  # noqa: BLE001 - an unreadable header is the reader's to report, naming the file
        return None


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


NAME_MAX = 255  # bytes in one file name on Linux, macOS and Windows file systems


def output_path(out: Path, frame: Path, suffix: str) -> Path:
    """``out/<stem><suffix>.exr``; a suffix with a path separator, or a name that resolves outside ``out``
    (a link placed there), is refused: outputs stay in the output folder."""
    from vision.outputs import inside

    if any(sep and sep in suffix for sep in (os.sep, os.altsep, "\x00")):
        raise ValueError(f"--suffix {suffix!r} must not contain a path separator; outputs stay in -o {out}")
    stem = frame.name[:-4] if frame.name.lower().endswith(".exr") else frame.stem
    name = f"{stem}{suffix}.exr"
    # the output is written under a temporary name beside it (write_atomic): refuse before any work a name whose
    # temporary file the file system could not hold
    temporary = len(f".{stem}{suffix}.00000000.tmp.exr".encode())
    if temporary > NAME_MAX:
        raise ValueError(f"{frame}: the output name {name[:40]}... is too long ({len(name.encode())} bytes; with the "
                         f"temporary name it is written under first, {temporary} > {NAME_MAX}): rename the frame or "
                         "give a shorter --suffix")
    return inside(out, name, "-o")


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
    from vision.data.render_layers import read_render_file

    return read_render_file(frame, buffer_files(frame, patterns))


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
                    temporal=f"max-history {args.max_history}" if args.temporal else "off",
                    only_rgb=str(bool(args.only_rgb)).lower(), half=str(bool(args.half)).lower(),
                    spp="header" if args.spp is None else f"{args.spp:g}",
                    input_blend="off" if args.no_input_blend else "on")
    for name in GUIDES:
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


def remove_stale_temps(out: Path, targets, age: float = 60.0) -> int:
    """Remove the temporary files :func:`write_atomic` left in ``out`` when a run was killed: only names of
    exactly its pattern (``.<stem>.<8 hex>.tmp.exr``) for a stem of ``targets`` (this run's outputs), and only
    when older than ``age`` seconds (a run writing the same frame now keeps its file). Returns how many."""
    import time

    stems = {Path(t).stem for t in targets}
    pattern = re.compile(r"\.(?P<stem>.+)\.[0-9a-f]{8}\.tmp\.exr")
    removed = 0
    try:
        entries = list(os.scandir(out))
    except OSError:
        return 0
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if not m or m.group("stem") not in stems:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and time.time() - st.st_mtime > age:
                os.unlink(entry.path)
                removed += 1
        except OSError:
            pass
    return removed


class Terminated(SystemExit):
    """SIGTERM during a run: unwinds like Ctrl-C (every ``finally`` runs: :func:`write_atomic` removes its
    temporary file), then exits 143. ``leave_now``: once it has unwound to the command line's ``main`` in a
    process of its own, the process ends there (``os._exit``) without the interpreter's shutdown, whose exit
    handlers include native thread pools' finalizers (numba's TBB layer can spin in them for ever)."""

    leave_now = True


@contextlib.contextmanager
def exit_on_sigterm(command: str):
    """While the block runs, SIGTERM raises :class:`Terminated` (one line on stderr, exit code 143) instead of
    killing the process where it stands. Only the main thread can install a handler: elsewhere, nothing."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
        print(f"vision {command}: terminated (SIGTERM); unfinished outputs removed", file=sys.stderr)
        raise Terminated(143)

    before = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _load_weights(load, path):
    """``load(path)``, with weights that are missing or not FLNR safetensors reported as one line."""
    from safetensors import SafetensorError

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
    from vision.data.exr import one_type_per_layer
    from vision.data.render_layers import output_channels

    channels, notes = output_channels(rf, results, only_rgb=only_rgb, half=half)
    colour = [n for layer in rf.layers for names in (layer.beauty, *layer.copies) for n in names]
    channels = one_type_per_layer(channels, colour)
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


def written_rgb(target: Path, names: list[str]) -> np.ndarray | None:
    """The denoised RGB an earlier run wrote to ``target`` under the beauty channels ``names``, float32 (H, W, 3);
    None when it cannot be read (the frame is then denoised again)."""
    from vision.data import read_exr

    try:
        ch = read_exr(target, list(names))
        return np.stack([np.asarray(ch[n], dtype=np.float32) for n in names], -1)
    except (OSError, ValueError, KeyError):
        return None

