"""Messages of locallinear-vision: one ``vision`` logger and a verbosity switch.

Every note the library or the ``vision`` command prints that is not a result (a one-time compile notice, a frame
order note, a fallback) goes through the ``logging`` logger ``vision`` (children ``vision.<module>``), written to
the process's stderr as the bare message. The verbosity is a runtime switch like the others (ARCHITECTURE.md): the
``VISION_VERBOSITY`` environment variable (``error``, ``warning``, ``info``, ``debug``; default ``info``), the
setter :func:`set_verbosity` and the context manager :func:`verbosity`; ``vision COMMAND -q`` sets ``warning`` and
``-v`` ``debug``. Errors stay exceptions (the command line prints them as one line); results (tables, "wrote X")
stay on stdout.

Example::

    from vision.kernels.runtime import get_logger, set_verbosity, verbosity
    set_verbosity("warning")          # quiet for the whole process
    with verbosity("debug"):          # or more for a block
        ...
    get_logger(__name__).info("a note")   # in your own code, under the same switch
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys

LEVELS = {"error": logging.ERROR, "warning": logging.WARNING, "info": logging.INFO, "debug": logging.DEBUG}
ROOT = "vision"
_forced: list[int] = []


class _Stderr(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is at each record (a redirect or pytest's capture included)."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # logging assigns it once in __init__; the property reads sys.stderr instead
        pass


def _level(value) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value in LEVELS.values():
        return value
    name = str(value).strip().lower()
    if name not in LEVELS:
        raise ValueError(f"verbosity must be one of {', '.join(LEVELS)}, got {value!r}")
    return LEVELS[name]


def get_verbosity() -> int:
    """The level in force (a ``logging`` level): the innermost :func:`verbosity` block, else ``VISION_VERBOSITY``
    (read at every call; an unknown value counts as ``info``)."""
    if _forced:
        return _forced[-1]
    try:
        return _level(os.environ.get("VISION_VERBOSITY", "info") or "info")
    except ValueError:
        return logging.INFO


def set_verbosity(level) -> None:
    """Set the verbosity for the process (``"error"``, ``"warning"``, ``"info"``, ``"debug"`` or a logging level)."""
    name = next(k for k, v in LEVELS.items() if v == _level(level))
    os.environ["VISION_VERBOSITY"] = name


@contextlib.contextmanager
def verbosity(level):
    """The verbosity inside a ``with`` block."""
    _forced.append(_level(level))
    try:
        yield
    finally:
        _forced.pop()


class _Switch(logging.Filter):
    def filter(self, record) -> bool:
        return record.levelno >= get_verbosity()


def get_logger(name: str = ROOT) -> logging.Logger:
    """The logger ``name`` under ``vision`` (``vision.<name>`` unless it starts with ``vision``), whose records the
    verbosity switch lets through to stderr."""
    root = logging.getLogger(ROOT)
    if not any(isinstance(h, _Stderr) for h in root.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.addFilter(_Switch())
        root.addHandler(handler)
        root.setLevel(logging.DEBUG)  # the switch decides, at the handler, at every record
        root.propagate = False  # an application's own root handlers would print each message twice
    return logging.getLogger(name if name == ROOT or name.startswith(ROOT + ".") else f"{ROOT}.{name}")
