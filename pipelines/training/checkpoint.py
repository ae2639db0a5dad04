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
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


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
    except (OSError, ValueError, AttributeError):
        return not (folder.is_dir() and not any(folder.iterdir()))
