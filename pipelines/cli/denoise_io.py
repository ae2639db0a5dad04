"""Files of ``vision denoise`` that need no frame decoder: frame lists and shards, buffer file names, output names,
the settings an output records (what a rerun compares to decide what to skip), and SIGTERM during a run. Reading and
writing the frames themselves is :mod:`vision.pipelines.cli.denoise_frames`."""
from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import re
import signal
import stat
import sys
import threading
import time
from pathlib import Path

from vision.data.fields import GUIDES
from vision.outputs import inside


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
    try:
        os.stat(name)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise ValueError(f"FRAMES {name}: symbolic links that lead to each other (a loop)") from None


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
    if any(sep and sep in suffix for sep in (os.sep, os.altsep, "\x00")):
        raise ValueError(f"--suffix {suffix!r} must not contain a path separator; outputs stay in -o {out}")
    stem = frame.name[:-4] if frame.name.lower().endswith(".exr") else frame.stem
    name = f"{stem}{suffix}.exr"
    # the output is written under a temporary name beside it (denoise_frames.write_atomic): refuse before any work
    # a name whose temporary file the file system could not hold
    temporary = len(f".{stem}{suffix}.00000000.tmp.exr".encode())
    if temporary > NAME_MAX:
        raise ValueError(f"{frame}: the output name {name[:40]}... is too long ({len(name.encode())} bytes; with the "
                         f"temporary name it is written under first, {temporary} > {NAME_MAX}): rename the frame or "
                         "give a shorter --suffix")
    return inside(out, name, "-o")


# --------------------------------------------------------------------------- settings and resuming

SETTINGS_KEY = "vision.denoise.settings"


def run_settings(args, phase, patterns: dict[str, str | None]) -> dict[str, str]:
    """Everything that changes an output's pixels, as text: recorded in each output's header and compared
    on a rerun (the tile size and the device are left out: they do not change the result)."""
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
    return json.dumps(settings)


def parse_settings(text: str) -> dict[str, str]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def remove_stale_temps(out: Path, targets, age: float = 60.0) -> int:
    """Remove the temporary files :func:`~vision.pipelines.cli.denoise_frames.write_atomic` left in ``out`` when a
    run was killed: only names of exactly its pattern (``.<stem>.<8 hex>.tmp.exr``) for a stem of ``targets`` (this
    run's outputs), and only when older than ``age`` seconds (a run writing the same frame now keeps its file).
    Returns how many."""
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
    """SIGTERM during a run: unwinds like Ctrl-C (every ``finally`` runs: ``denoise_frames.write_atomic`` removes its
    temporary file), then exits 143. ``leave_now``: once it has unwound to the command line's ``main`` in a
    process of its own, the process ends there (``os._exit``) without the interpreter's shutdown, whose exit
    handlers include native thread pools' finalizers (numba's TBB layer can spin in them for ever)."""

    leave_now = True


class SigtermWatch:
    """What :func:`exit_on_sigterm` yields: ``requested`` once SIGTERM came, and :meth:`check` for the loop's safe
    points."""

    def __init__(self):
        self.requested = False

    def check(self) -> None:
        """Raise :class:`Terminated` if SIGTERM came and its exception did not unwind the block: a handler that runs
        inside a callback which prints exceptions and carries on (ctypes callbacks do; llvmlite calls one while numba
        compiles, so a fresh install's first frame is such a moment) raises into nothing."""
        if self.requested:
            raise Terminated(143)


def _say(line: str) -> None:
    """``line`` on stderr from a signal handler: through ``sys.stderr`` (what the caller may have redirected), else
    straight to descriptor 2. A handler that runs while the interrupted code was itself writing to stderr (a
    progress bar's write cut short by the signal) finds the stream busy: printing raises "reentrant call", which
    would replace the handler's own exception and end the run with a traceback instead of its exit code."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (RuntimeError, OSError, ValueError, AttributeError):  # busy, closed or gone
        try:
            os.write(2, (line + "\n").encode())
        except OSError:
            pass


@contextlib.contextmanager
def exit_on_sigterm(command: str):
    """While the block runs, SIGTERM raises :class:`Terminated` (one line on stderr, exit code 143) instead of
    killing the process where it stands; the block gets a :class:`SigtermWatch` to call ``check()`` on between
    units of work, so a SIGTERM whose exception was swallowed still stops it there. Only the main thread can
    install a handler: elsewhere, a watch that never fires."""
    watch = SigtermWatch()
    if threading.current_thread() is not threading.main_thread():
        yield watch
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
        watch.requested = True
        _say(f"vision {command}: terminated (SIGTERM); unfinished outputs removed")
        raise Terminated(143)

    def unraisable(info):  # a Terminated dropped by such a callback: said in one line already, the watch stops
        if not isinstance(info.exc_value, Terminated):
            previous(info)

    previous = sys.unraisablehook
    before = signal.signal(signal.SIGTERM, handler)
    sys.unraisablehook = unraisable
    try:
        yield watch
    finally:
        signal.signal(signal.SIGTERM, before)
        sys.unraisablehook = previous


def parse_phase(text):
    """``"DY,DX"`` -> (DY, DX) ints >= 0, or None; ValueError for anything else."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*,\s*(\d+)\s*", text)
    if not m:
        raise ValueError(f"--phase must be DY,DX (two integers >= 0, e.g. 0,0), got {text!r}")
    return int(m.group(1)), int(m.group(2))
