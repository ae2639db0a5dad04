"""The output policy every command follows, so that no run destroys what it reads or dies after the work.

- An output never replaces an input: a path that is, resolves to (symbolic link) or shares its inode with
  (hard link) any file the command reads is refused (:func:`refuse_inputs`).
- Output names come from the whole stem of their input (``shot.v1.png`` -> ``shot.v1.<ext>``), and two
  inputs that would write the same name are refused, not left to overwrite each other (:func:`output_stems`).
- Every output path built from data or flags stays inside its output folder (:func:`inside`).
- The output folder (or a file's folder) is created and proven writable before any compute
  (:func:`prepare_folder`, :func:`prepare_file`); a file where a folder is expected, or the reverse, is
  one clear error.
- Files appear complete or not at all: they are written to a hidden temporary name beside the target and
  renamed over it (:func:`atomic_path`).

Every refusal is a ``ValueError`` whose message names the argument and the path as the user gave them.
"""
from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable
from pathlib import Path


def same_file(a, b) -> bool:
    """Whether ``a`` and ``b`` name the same file: equal after resolving links, or the same inode."""
    a, b = Path(a), Path(b)
    try:
        if a.exists() and b.exists() and os.path.samefile(a, b):
            return True
    except OSError:
        pass
    return a.resolve() == b.resolve()


class InputIndex:
    """The files a command reads, by resolved path and by inode, so that checking each of many outputs
    against all inputs costs one lookup (a sequence of thousands of frames stays fast)."""

    def __init__(self, inputs: Iterable[tuple[str, object]]):
        self.paths: dict[Path, tuple[str, Path]] = {}
        self.inodes: dict[tuple[int, int], tuple[str, Path]] = {}
        for name, path in inputs:
            if path is None:
                continue
            path = Path(path)
            self.paths.setdefault(path.resolve(), (name, path))
            with contextlib.suppress(OSError):
                st = path.stat()
                self.inodes.setdefault((st.st_dev, st.st_ino), (name, path))

    def find(self, output) -> tuple[str, Path] | None:
        """(argument name, path) of the input ``output`` is or links to, else None."""
        output = Path(output)
        hit = self.paths.get(output.resolve())
        if hit is None and self.inodes:
            with contextlib.suppress(OSError):
                st = output.stat()
                hit = self.inodes.get((st.st_dev, st.st_ino))
        return hit


def refuse_inputs(output, inputs, flag: str = "-o") -> None:
    """Refuse ``output`` when it is, or links to, any of ``inputs`` (pairs of argument name and path, or an
    :class:`InputIndex` of them)."""
    index = inputs if isinstance(inputs, InputIndex) else InputIndex(inputs)
    hit = index.find(output)
    if hit is not None:
        name, path = hit
        raise ValueError(f"{flag} {output} would overwrite the input {path} ({name}); refusing to overwrite an "
                         "input, choose another output")


def output_stems(paths: Iterable, name: str = "input") -> list[str]:
    """The whole stem of each path (the name without its last extension), refusing two that coincide,
    since their outputs would overwrite each other."""
    seen: dict[str, Path] = {}
    stems = []
    for p in map(Path, paths):
        stem = p.stem
        if stem in seen and not same_file(seen[stem], p):
            raise ValueError(f"{seen[stem]} and {p} ({name}) would write outputs of the same name {stem!r}; "
                             "rename one or run them separately")
        seen.setdefault(stem, p)
        stems.append(stem)
    return stems


def inside(folder, name: str, flag: str = "-o", inputs=()) -> Path:
    """``folder / name``, refused unless it is a file name that stays inside ``folder`` once resolved and
    is none of ``inputs`` (see :func:`refuse_inputs`)."""
    folder = Path(folder)
    if not name or "\x00" in name or os.sep in name or (os.altsep and os.altsep in name) or name in (".", ".."):
        raise ValueError(f"output name {name!r} is not a plain file name inside {flag} {folder}")
    path = folder / name
    refuse_inputs(path, inputs, flag)
    root, target = folder.resolve(), path.resolve()
    if target == root or root not in target.parents:
        raise ValueError(f"output {path} resolves to {target}, outside {flag} {folder}; refusing to write there")
    return path


def _probe(folder: Path) -> None:
    probe = folder / f".vision-write-test-{uuid.uuid4().hex}"
    with open(probe, "xb"):
        pass
    probe.unlink()


def prepare_folder(folder, flag: str = "-o") -> Path:
    """Create ``folder`` if needed and prove it writable; a clear ``ValueError`` otherwise."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{flag} {folder} is a file, not a folder; give a folder (it is created if missing)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _probe(folder)
    except OSError as err:
        raise ValueError(f"cannot write to {flag} {folder}: {err.strerror or err}") from None
    return folder


def prepare_file(path, flag: str = "-o") -> Path:
    """Make sure ``path`` can be written as a file: not a folder, its folder created and writable."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a folder; give a file name (for example {path / 'out.png'})")
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise ValueError(f"{flag} {path}: {parent} is a file, not a folder")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        _probe(parent)
    except OSError as err:
        raise ValueError(f"cannot write {flag} {path}: {err.strerror or err} ({parent})") from None
    return path


@contextlib.contextmanager
def atomic_path(path):
    """Yield a hidden temporary path beside ``path`` (same extension, so writers that pick the format from
    the name still work); on success it is renamed over ``path``, on failure removed."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_text_atomic(path, text: str) -> Path:
    """Write ``text`` to ``path`` through :func:`atomic_path`."""
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)
    return Path(path)


def in_run(run, relative: str, flag: str = "-o") -> Path:
    """``run / relative`` for a file a command writes inside its run folder, refused (one line naming the path
    and ``flag``) when it, or any folder between it and ``run``, is a symbolic link, or when it resolves outside
    ``run``: a run folder someone sent you must not make a resumed run write elsewhere."""
    run = Path(run)
    path = run
    for part in Path(relative).parts:
        if part in ("", ".", "..") or "\x00" in part:
            raise ValueError(f"output name {relative!r} is not a path inside {flag} {run}")
        path = path / part
        if path.is_symlink():
            raise ValueError(f"{path} is a symbolic link (to {os.readlink(path)}) inside {flag} {run}; refusing "
                             "to write through it: remove the link or choose another run folder")
    root, target = run.resolve(), path.resolve()
    if root not in target.parents:
        raise ValueError(f"output {path} resolves to {target}, outside {flag} {run}; refusing to write there")
    return path


@contextlib.contextmanager
def run_lock(run, flag: str = "-o", command: str = "vision"):
    """Hold an exclusive lock on ``run/.lock`` while the block runs; a second run into the same folder is refused
    in one line (``fcntl.flock``, non-blocking: released by the system when the process dies, even by SIGKILL)."""
    import fcntl  # lazy: POSIX only; the rest of this module (every command's outputs) works without it

    path = in_run(run, ".lock", flag)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ValueError(f"{flag} {run} is in use by another {command} run (locked: {path}); wait for it to "
                             "end or choose another folder") from None
        yield path
    finally:
        os.close(fd)
