"""Checkpoint folders that a kill at any moment leaves whole: the old one or the new one, never a mix.

A checkpoint is one folder (``FOLDER``). A new one is written into the hidden sibling ``.FOLDER.tmp``, its
files and the folder fsynced, a manifest (:data:`MANIFEST`: the name and size of every file, and the caller's
JSON state) written last and fsynced; then the old folder is renamed to ``.FOLDER.old``, the new one to
``FOLDER``, the parent fsynced, and the old one removed. So at every moment either ``FOLDER`` or, between the
two renames, ``.FOLDER.old`` is a complete checkpoint (:func:`latest` finds it), and a ``.FOLDER.tmp`` is only
ever a checkpoint being written: never read, and removed by the next save.

    >>> tmp = begin(folder)             # an empty staging folder
    >>> ...                              # write files into tmp (accelerator.save_state, safetensors)
    >>> publish(tmp, folder, {"epoch": 3})
    >>> where, state = latest(folder)    # (None, None) when there is no complete checkpoint
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
import math
import pickle
import random
import struct
import zipfile

import numpy as np
import torch
from safetensors import SafetensorError, safe_open

MANIFEST = "checkpoint.json"  # written last: a folder without it (or whose files differ from it) is incomplete


def staging(folder) -> Path:
    folder = Path(folder)
    return folder.with_name(f".{folder.name}.tmp")


def previous(folder) -> Path:
    folder = Path(folder)
    return folder.with_name(f".{folder.name}.old")


def begin(folder) -> Path:
    """An empty staging folder for the next checkpoint of ``folder`` (a leftover of a killed save is removed)."""
    tmp = staging(folder)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot fsync a directory: the rename is still atomic
        pass
    finally:
        os.close(fd)


def publish(tmp, folder, state: dict, format: str) -> Path:
    """Seal the staging folder ``tmp`` (manifest with ``state`` and ``format``, everything fsynced) and put it
    in the place of ``folder``; returns ``folder``."""
    tmp, folder = Path(tmp), Path(folder)
    files = {}
    for path in sorted(p for p in tmp.rglob("*") if p.is_file()):
        _fsync(path)
        files[path.relative_to(tmp).as_posix()] = path.stat().st_size
    for d in sorted({p.parent for p in tmp.rglob("*")} | {tmp}, key=lambda p: -len(p.parts)):
        _fsync(d)
    manifest = tmp / MANIFEST
    with open(manifest, "w") as fh:
        json.dump({"format": format, "files": files, "state": state}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    _fsync(tmp)
    old = previous(folder)
    if folder.exists():  # complete (only a sealed folder is ever renamed to this name): keep it until the swap
        shutil.rmtree(old, ignore_errors=True)
        os.rename(folder, old)
    os.rename(tmp, folder)
    _fsync(folder.parent)
    shutil.rmtree(old, ignore_errors=True)
    return folder


def read(folder, format: str) -> dict | None:
    """The state a complete checkpoint in ``folder`` holds, or None when ``folder`` is not one (absent,
    without its manifest, another format, or a file missing or of another size than the manifest says)."""
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        if manifest.get("format") != format:
            return None
        for name, size in manifest["files"].items():
            if (folder / name).stat().st_size != size:
                return None
        return manifest["state"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


def load_errors() -> tuple:
    """What loading a damaged state file raises: safetensors' errors, torch.load's refusals (weights_only
    unpickling), a truncated zip, and the usual I/O and lookup errors."""
    return (RuntimeError, ValueError, KeyError, OSError, EOFError, TypeError, IndexError, AttributeError,
            pickle.UnpicklingError, zipfile.BadZipFile, SafetensorError)


def first_line(err: BaseException) -> str:
    """The first line of an error's message (torch.load's refusals run to a page), or its type's name."""
    if isinstance(err, pickle.UnpicklingError):  # torch.load's refusal: a page about weights_only
        return "a state file is damaged or was not written by this program"
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


def unreadable_file(folder) -> tuple[Path, str] | None:
    """Before a resume loads anything: ``folder``'s first state file whose container is not what it claims, and why;
    None when each one looks whole. Safetensors: the 8-byte length of a JSON header that fits the file, and every
    tensor's byte range within it. ``.bin`` / ``.pkl`` (``torch.save``'s files, Accelerate's too): a zip archive with
    a ``data.pkl``. Reads headers and zip directories only, without torch or the training stack, so a file of random
    bytes is refused in a second instead of after the trainer has been built; what only loading can tell (a whole
    file of other tensors) is still found by :func:`damaged_file`."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    for path in sorted(p for p in folder.iterdir() if p.is_file() and p.name != MANIFEST):
        if path.suffix == ".safetensors":
            why = _safetensors_header_fault(path)
        elif path.suffix in (".bin", ".pkl"):
            try:
                with zipfile.ZipFile(path) as z:
                    why = None if any(n.endswith("/data.pkl") or n == "data.pkl" for n in z.namelist()) else \
                        "not a torch file (no data.pkl in the archive)"
            except (zipfile.BadZipFile, OSError, ValueError, EOFError) as err:
                why = f"not a torch file ({first_line(err)})"
        else:
            continue
        if why:
            return path, why
    return None


def _safetensors_header_fault(path: Path) -> str | None:
    """Why ``path`` is not a safetensors file as its header says (None: the header and the byte ranges fit)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return "shorter than a safetensors header"
            (n,) = struct.unpack("<Q", head)
            if n > size - 8 or n > 100_000_000:
                return f"its header claims {n} bytes, more than the file holds"
            header = json.loads(fh.read(n))
        if not isinstance(header, dict):
            return "its header is not a JSON object"
        data = size - 8 - n
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            start, end = entry["data_offsets"]
            if not (isinstance(start, int) and isinstance(end, int) and 0 <= start <= end <= data):
                return f"tensor {name!r} lies outside the file"
    except (OSError, ValueError, UnicodeDecodeError, KeyError, TypeError, RecursionError) as err:
        return f"not a safetensors file ({first_line(err)})"
    return None


def damaged_file(folder) -> tuple[Path, str] | None:
    """After loading ``folder`` failed: its first state file that does not load on its own (safetensors read
    whole, ``.bin`` / ``.pkl`` as Accelerate reads them: weights only), and the first line of why; None when each
    file loads (then the checkpoint does not fit the model or its settings). Reads every file, so it runs on the
    failure path only: a good checkpoint never pays for it."""
    def order(path: Path):  # what a resume reads first: weights, optimiser, schedule, then the rest
        rank = next((k for k, stem in enumerate(("model", "optimizer", "scheduler")) if path.name.startswith(stem)), 3)
        return rank, path.name

    if not Path(folder).is_dir():
        return None
    for path in sorted((p for p in Path(folder).iterdir() if p.is_file() and p.name != MANIFEST), key=order):
        try:
            if path.suffix == ".safetensors":
                with safe_open(str(path), framework="pt", device="cpu") as fh:
                    for key in fh.keys():
                        fh.get_tensor(key)
            elif path.suffix in (".bin", ".pkl"):
                _weights_only_load()(str(path), map_location="cpu", weights_only=True)
        except load_errors() as err:
            why = ("not a weights-only torch file" if isinstance(err, pickle.UnpicklingError) else first_line(err))
            return path, why
    return None


def _weights_only_load():
    """Accelerate's ``load`` (``torch.load`` that lets the RNG and NumPy states of its save folders through with
    ``weights_only=True``), or ``torch.load`` where Accelerate is not installed."""
    try:
        from accelerate.utils import load  # lazy: accelerate is optional here (the checks run without it)
    except ImportError:
        return torch.load
    return load


RNG_STATES = "random_states_{}.pkl"  # Accelerate's file of one process's RNG states in a save_state folder


def restore_rng(folder, rank: int) -> tuple[Path, str] | None:
    """Set this process's Python, NumPy and torch RNGs from the states Accelerate saved for process ``rank`` in
    ``folder``; when that file does not load (weights only) or does not hold them, set nothing and return it and
    the first line of why. ``Accelerator.load_state`` reads the same file but carries on without a word when it
    cannot, and the resumed run then draws other random numbers than an uninterrupted one: called before it, this
    stops such a resume. A folder without the file (a save without RNG states) is left to ``load_state``."""
    path = Path(folder) / RNG_STATES.format(rank)
    if not path.exists():
        return None
    load = _weights_only_load()
    saved = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    try:
        states = load(str(path), map_location="cpu", weights_only=True)
        if not isinstance(states, dict):
            raise TypeError(f"it holds {type(states).__name__}, not the RNG states")
        missing = [k for k in ("random_state", "numpy_random_seed", "torch_manual_seed") if k not in states]
        if missing:
            raise KeyError(f"no {', '.join(missing)}")
        random.setstate(states["random_state"])
        np.random.set_state(states["numpy_random_seed"])
        torch.set_rng_state(states["torch_manual_seed"])
    except load_errors() as err:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.set_rng_state(saved[2])
        return path, ("not a weights-only torch file" if isinstance(err, pickle.UnpicklingError) else first_line(err))
    return None


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _record(r) -> bool:
    """An epoch record of a training history: its epoch (and steps) counts, its metrics numbers, flags, text or
    objects of them (the baseline's metrics)."""
    def count(v):
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    def leaf(v):
        return _number(v) or isinstance(v, (bool, str)) or v is None

    return (isinstance(r, dict) and count(r.get("epoch")) and count(r.get("steps", 0))
            and all(leaf(v) or (isinstance(v, dict) and all(leaf(x) for x in v.values())) for v in r.values()))


# what a field of a checkpoint's state may hold: "count" (an int >= 0), "number" (finite), "numbers" (a list of
# them), "records" (a list of JSON objects of finite numbers or short strings / flags), "object", "flag"
_KINDS = {
    "count": (lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**53, "an integer >= 0"),
    "number": (_number, "a finite number"),
    "numbers": (lambda v: isinstance(v, list) and all(_number(x) for x in v), "a list of finite numbers"),
    "records": (lambda v: isinstance(v, list) and all(_record(r) for r in v),
                "a list of epoch records (JSON objects with an integer epoch, and numbers)"),
    "object": (lambda v: isinstance(v, dict), "a JSON object"),
    "flag": (lambda v: isinstance(v, bool), "true or false"),
}


def check_state(state, spec: dict, where) -> dict:
    """``state`` (a checkpoint's state, as read from JSON) when it is an object whose fields named in ``spec``
    (name -> kind of :data:`_KINDS`) are present and of their kind; otherwise one ValueError line naming
    ``where`` (the file) and the field. A checkpoint is untrusted input: a hand-edited one must not fail
    later, half-way through loading, with a traceback."""
    if not isinstance(state, dict):
        raise ValueError(f"{where}: the checkpoint state must be a JSON object, got {type(state).__name__}; "
                         "start a new run")
    for name, kind in spec.items():
        ok, text = _KINDS[kind]
        if name not in state:
            raise ValueError(f"{where}: the checkpoint state has no {name!r}; start a new run")
        if not ok(state[name]):
            raise ValueError(f"{where}: the checkpoint state's {name!r} must be {text}, got {state[name]!r:.60}; "
                             "start a new run")
    return state


def latest(folder, format: str) -> tuple[Path | None, dict | None]:
    """The complete checkpoint of ``folder`` and its state: ``folder`` itself, else ``.FOLDER.old`` (a kill
    between the two renames of :func:`publish`); ``(None, None)`` when neither is complete."""
    for where in (Path(folder), previous(folder)):
        state = read(where, format)
        if state is not None:
            return where, state
    return None, None


def foreign(folder, format: str) -> bool:
    """Whether ``folder`` exists and is something other than a checkpoint of ``format`` (a save would
    replace it: callers refuse instead)."""
    folder = Path(folder)
    if not folder.exists():
        return False
    if not folder.is_dir():
        return True
    try:
        return json.loads((folder / MANIFEST).read_text()).get("format") != format
    except (OSError, ValueError, AttributeError, RecursionError):
        return not (folder.is_dir() and not any(folder.iterdir()))
