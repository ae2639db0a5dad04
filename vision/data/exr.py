"""Multi-layer OpenEXR frames with named channels: what ``vision render-scenes`` writes and the denoiser reads.

One file per frame, one part, scanlines, ZIP compression (lossless), every channel full resolution.
Float channels are stored as 32-bit float and ids as 32-bit unsigned int, so reading a file back gives
the very bits that were written (NaN payloads, signed zeros and denormals included).

Channel names follow the EXR layer convention ``layer.channel``; a *field* is one layer read as an
``(H, W, C)`` array. :data:`LAYERS` (field -> channel names, type, meaning) is derived from the one table of render
buffers, :data:`vision.data.fields.TABLE` (its ``exr``, ``dtype`` and ``meaning`` columns); docs/render-scenes.md
lists it for users. Float channels are ``float32``; the instance and class ids ``segment.id`` and ``segment.class``
are ``uint32``.

Example:
    >>> LAYERS["albedo"]
    (('albedo.R', 'albedo.G', 'albedo.B'), 'float32', 'diffuse reflectance at the first (non-specular) hit')
"""
from __future__ import annotations

import contextlib
import ctypes
import io
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from .fields import TABLE

# field -> (channel names, dtype, meaning): the fields the table gives channels of a vision render-scenes frame
LAYERS: dict[str, tuple[tuple[str, ...], str, str]] = {f.name: (f.exr, f.dtype, f.meaning) for f in TABLE if f.exr}

_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.uint32))


def _openexr():
    import OpenEXR  # lazy: the optional denoise / dense extra

    return OpenEXR


def write_exr(path, channels: Mapping[str, np.ndarray], header: Mapping | None = None) -> Path:
    """Write 2-D arrays (float32, float16 or uint32, all the same shape) as named channels of one EXR.

    ``header`` adds attributes (str, int or float values). Nothing is converted: a float64 or int64
    array is refused, so what is read back is bit for bit what was passed in.
    """
    if not channels:
        raise ValueError("write_exr needs at least one channel")
    shape = None
    data = {}
    for name, arr in channels.items():
        arr = np.asarray(arr)
        if arr.dtype not in _DTYPES:
            raise ValueError(f"channel {name!r} has dtype {arr.dtype}; EXR stores float32, float16 or uint32 "
                             f"(convert explicitly, e.g. .astype(np.float32))")
        if arr.ndim != 2:
            raise ValueError(f"channel {name!r} must be 2-D (H, W), got shape {arr.shape}")
        if shape is None:
            shape = arr.shape
        elif arr.shape != shape:
            raise ValueError(f"channel {name!r} has shape {arr.shape}, others {shape}")
        data[str(name)] = np.ascontiguousarray(arr).copy()  # OpenEXR.File takes ownership of the dict values
    OpenEXR = _openexr()
    hdr = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    for key, value in (header or {}).items():
        hdr[str(key)] = value
    path = Path(path)
    OpenEXR.File(hdr, data).write(str(path))
    return path


# the channels EXR readers gather into one array per layer (OpenEXR's File: "layer.RGBA"), which therefore must
# share one pixel type: a float32 R G B beside a half A raises "cannot coalesce channels"
COALESCED = frozenset("RGBA")


def layer_of(name: str) -> str:
    """The layer of a channel name: everything before its last dot (``""`` for ``R``)."""
    return name.rpartition(".")[0]


def one_type_per_layer(channels: Mapping[str, np.ndarray], colour: Iterable[str]) -> dict[str, np.ndarray]:
    """``channels`` with each layer that holds a ``colour`` channel (a result written in its own type, e.g. the
    denoised RGB) in that colour's float type: its ``R G B A`` always (readers gather them into one array, so a
    half alpha beside float32 RGB makes the file unreadable for them), its other float channels where that
    widens them (half -> float32 is exact; narrowing a passed-through channel would lose what it holds, and
    readers do not gather those). Integer channels (ids) keep their type. Nothing else changes."""
    out = dict(channels)
    types: dict[str, np.dtype] = {}
    for name in colour:
        dtype = np.asarray(channels[name]).dtype
        if types.setdefault(layer_of(name), dtype) != dtype:
            raise ValueError(f"colour channels of layer {layer_of(name)!r} differ in type: "
                             f"{types[layer_of(name)]} and {dtype} ({name})")
    for name, arr in channels.items():
        want = types.get(layer_of(name))
        arr = np.asarray(arr)
        if want is None or arr.dtype == want or arr.dtype.kind != "f":
            continue
        if name.rpartition(".")[2] in COALESCED or arr.dtype.itemsize < want.itemsize:
            out[name] = arr.astype(want)
    return out


def read_exr(path, channels: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Read named channels (all when ``channels`` is None) as 2-D arrays in their stored type.

    A file that is empty, not an OpenEXR file, truncated or damaged raises one ValueError naming it.
    """
    path = Path(path)
    with _open(path, separate_channels=True) as f:
        stored = f.channels()
        names = list(stored) if channels is None else list(channels)
        missing = [n for n in names if n not in stored]
        if missing:
            raise _Missing(f"{path} has no channel(s) {', '.join(missing)}; it has {', '.join(sorted(stored))}")
        return {n: np.array(stored[n].pixels) for n in names}


def read_exr_parts(path) -> dict[str, np.ndarray]:
    """Every channel of every part of a (multi-part) EXR, in its stored type. Channel names are kept; a
    name that occurs in more than one part is prefixed with its part's name (``part.channel``), as
    compositors show parts as layers. A single-part file reads as :func:`read_exr`."""
    path = Path(path)
    with _open(path, separate_channels=True) as f:
        parts = [(p.name() or f"part{k}", {n: np.array(c.pixels) for n, c in p.channels.items()})
                 for k, p in enumerate(f.parts)]
        if not parts or not all(chans for _, chans in parts):
            # the bindings report unreadable pixel data by printing and returning no parts
            raise RuntimeError("no readable pixel data")
    seen: dict[str, int] = {}
    for _, chans in parts:
        for n in chans:
            seen[n] = seen.get(n, 0) + 1
    return {(f"{part}.{n}" if seen[n] > 1 else n): arr for part, chans in parts for n, arr in chans.items()}


def read_exr_header(path) -> dict:
    """The header attributes of an EXR file (the ``vision.*`` ones are written by render-scenes); of its first part
    when it has several (:func:`read_exr_part_headers` gives them all)."""
    with _open(Path(path), header_only=True) as f:
        return dict(f.header())


def read_exr_part_headers(path) -> list[dict]:
    """The header attributes of every part of an EXR file, in file order (one for a single-part file). Reads the
    headers only: a part's ``dataWindow`` says how many pixels reading it would decode.

    Example:
        >>> [h["dataWindow"][1].tolist() for h in read_exr_part_headers("beauty_and_aovs.exr")]
        [[1919, 1079], [1919, 1079]]
    """
    with _open(Path(path), header_only=True) as f:
        return [dict(part.header) for part in f.parts]


# header attributes that describe the stored pixels: written afresh for every file, never copied over
STRUCTURAL = frozenset({"channels", "compression", "dataWindow", "displayWindow", "lineOrder", "pixelAspectRatio",
                        "screenWindowCenter", "screenWindowWidth", "type", "tiles", "chunkCount", "name", "version"})


def copyable_header(header: Mapping) -> dict:
    """The attributes of a read header worth carrying into a derived file: text and numbers only (a
    renderer's metadata, e.g. Blender's ``BlenderMultiChannel`` tag by which Blender recognises its
    multi-layer files), without the ones that describe the pixels."""
    return {k: v for k, v in header.items()
            if k not in STRUCTURAL and isinstance(v, (str, int, float)) and not isinstance(v, bool)}


EXR_MAGIC = b"\x76\x2f\x31\x01"


class _Missing(ValueError):
    """A channel asked for is absent (passed on as is, not reported as a damaged file)."""


@contextlib.contextmanager
def _open(path: Path, **options):
    """``OpenEXR.File(path, **options)`` inside :class:`_openexr_errors`: a missing, empty, non-EXR or damaged
    file (and any failure while reading it in the block) is one error naming it."""
    if not path.is_file():
        raise FileNotFoundError(f"no EXR file at {path}")
    OpenEXR = _openexr()
    with _openexr_errors(path):
        with OpenEXR.File(str(path), **options) as f:
            yield f


class _openexr_errors:
    """Turn OpenEXR's failures on a bad file into one ValueError that names the file and says what is wrong.

    The library also prints its own diagnostics below Python (on file descriptors 1 and 2); those are
    caught here and become the reason in the message instead of stray lines. The redirection is
    process-wide for the duration of one read: what other threads print meanwhile is re-emitted on
    stderr after a successful read (and folded into the error of a failed one). Ctrl-C and SIGTERM
    are held from before the streams are swapped until after they are back (:class:`_SignalsHeld`):
    a handler run half-way through the swap would print into the capture and unwind with the
    descriptors still pointing at it, so its one line would never reach the user.
    """

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self._held = _SignalsHeld()
        # the bindings print through Python's sys.stdout, the core library through the descriptors
        self._streams = (sys.stdout, sys.stderr)
        self._python = io.StringIO()
        sys.stdout = sys.stderr = self._python
        self._saved = {}
        try:
            self._log = tempfile.TemporaryFile()
            for stream in self._streams:
                stream.flush()
            for fd in (1, 2):
                self._saved[fd] = os.dup(fd)
                os.dup2(self._log.fileno(), fd)
        except (OSError, ValueError, AttributeError):  # no usable descriptors (embedded interpreters)
            self._restore_fds()
        return self

    def _restore(self) -> str:
        sys.stdout, sys.stderr = self._streams
        return self._python.getvalue() + self._restore_fds()

    def _restore_fds(self) -> str:
        if not self._saved:
            return ""
        try:  # C stdio buffers when not writing to a terminal: flush it into the log first
            ctypes.CDLL(None).fflush(None)
        except (OSError, AttributeError):
            pass
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)
            os.close(saved)
        self._saved = {}
        self._log.seek(0)
        text = self._log.read().decode("utf-8", "replace")
        self._log.close()
        return text

    def __exit__(self, kind, err, tb):
        try:
            return self._report(self._restore(), err)
        finally:
            self._held.release()  # a signal that came meanwhile is handled now, with the streams back

    def _report(self, said: str, err: BaseException | None) -> bool:
        # a successful read that still complained, or an interrupt (Ctrl-C, SIGTERM's exit) whose handler printed
        # into the capture (the one line a terminated run says): let the user see it
        if err is None or not isinstance(err, Exception):
            if said:
                sys.stderr.write(said)
            return False
        if isinstance(err, (_Missing, FileNotFoundError)):
            return False
        raise ValueError(describe_bad_file(self.path, said or str(err))) from None


class _SignalsHeld:
    """Hold SIGINT and SIGTERM from construction until :meth:`release`, then raise each one that came, so its
    handler (Ctrl-C's KeyboardInterrupt, ``vision denoise``'s exit 143, or the default action) runs as it would
    have, only later. Only the main thread can set handlers: elsewhere (and for a handler not set from Python,
    which could not be put back) nothing is held."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self._came: list[int] = []
        self._before: dict[int, object] = {}
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            for signum in self.SIGNALS:
                if signal.getsignal(signum) is not None:
                    self._before[signum] = signal.signal(signum, self._hold)
        except BaseException:  # one came before the last was held: its handler ran; put the others back
            self.release()
            raise

    def _hold(self, signum, frame):
        if signum not in self._came:
            self._came.append(signum)

    def release(self) -> None:
        before, self._before = self._before, {}
        for signum, handler in before.items():
            signal.signal(signum, handler)
        for signum in self._came:
            signal.raise_signal(signum)


def describe_bad_file(path: Path, reason: str = "") -> str:
    """One line saying why ``path`` cannot be read as OpenEXR: empty, not EXR at all, or truncated / damaged."""
    size = path.stat().st_size if path.is_file() else 0
    if size == 0:
        return f"{path}: the file is empty (0 bytes), not an OpenEXR image"
    with open(path, "rb") as f:
        head = f.read(4)
    if head != EXR_MAGIC:
        kind = {b"\x89PNG": "a PNG image", b"PF\n": "a PFM image", b"Pf\n": "a PFM image"}.get(
            head if head == b"\x89PNG" else head[:3], "")
        return (f"{path}: not an OpenEXR file" + (f" (it is {kind})" if kind else " (no EXR signature at its start)"))
    # the core library's own line (path: (CODE) text) says most; the C++ layer's summary adds little
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    reason = " ".join([ln for ln in lines if ln.startswith(str(path))] or lines)
    reason = reason.replace(str(path) + ":", "").strip()
    return f"{path}: truncated or damaged OpenEXR file ({size} bytes)" + (f": {reason[:200]}" if reason else "")


def write_frame(path, fields: Mapping[str, np.ndarray], header: Mapping | None = None) -> Path:
    """Write fields (``(H, W)`` or ``(H, W, C)`` arrays keyed by the names in :data:`LAYERS`) to one EXR."""
    channels = {}
    for field, arr in fields.items():
        if field not in LAYERS:
            raise ValueError(f"unknown field {field!r}; known fields: {', '.join(LAYERS)}")
        names, dtype, _ = LAYERS[field]
        arr = np.asarray(arr)
        if arr.ndim == 2:
            arr = arr[..., None]
        if arr.ndim != 3 or arr.shape[2] != len(names):
            raise ValueError(f"field {field!r} needs shape (H, W, {len(names)}), got {arr.shape}")
        if arr.dtype != np.dtype(dtype):
            raise ValueError(f"field {field!r} must be {dtype}, got {arr.dtype}")
        for k, name in enumerate(names):
            channels[name] = arr[..., k]
    return write_exr(path, channels, header)


def read_frame(path, fields: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Read fields of a frame as ``(H, W, C)`` arrays; all fields present in the file when ``fields`` is None."""
    everything = fields is None
    fields = list(LAYERS) if everything else list(fields)
    unknown = [f for f in fields if f not in LAYERS]
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; known fields: {', '.join(LAYERS)}")
    if everything:
        stored = read_exr(path)
        fields = [f for f in fields if all(c in stored for c in LAYERS[f][0])]
    else:
        stored = read_exr(path, [c for f in fields for c in LAYERS[f][0]])
    return {f: np.stack([stored[c] for c in LAYERS[f][0]], axis=-1) for f in fields}
