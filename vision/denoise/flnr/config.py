"""Sanity bounds on an FLNR configuration read from a weights file, checked before the network is built: a
crafted file asking for ``widths [1e8, ...]`` is one line, not gigabytes of allocation. And a cheap check that a
weights file is a safetensors file at all (a pickle is refused by name, never loaded)."""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path

# documented bounds (generous: the bundled networks use widths 16..48, hidden 16, guides 4, radii 4..16)
BOUNDS = {"widths": (1, 1024), "hidden": (0, 1024), "guides": (1, 64), "radii": (1, 256), "scale": (1, 64),
          "fit_down": (1, 64)}
MAX_LEVELS = 8  # entries in widths / radii
LISTS = ("widths", "radii")
FLAGS = ("antialias", "detail", "history")
MAX_HEADER = 64 << 20  # bytes of a safetensors JSON header


def check_config(cfg: dict, where: str = "FLNR weights") -> dict:
    """``cfg`` when it is a JSON object whose sizes lie within :data:`BOUNDS`, whose lists are lists and whose flags
    are true or false; otherwise a one-line ValueError naming ``where``, the key and the bound."""
    if not isinstance(cfg, dict):
        raise ValueError(f"{where}: the configuration must be a JSON object, got {type(cfg).__name__}")
    for key in LISTS:
        if key in cfg and not isinstance(cfg[key], (list, tuple)):
            raise ValueError(f"{where}: config {key} must be a list of integers, got {cfg[key]!r}")
    for key in FLAGS:
        if key in cfg and not isinstance(cfg[key], bool):
            raise ValueError(f"{where}: config {key} must be true or false, got {cfg[key]!r}")
    for key, (lo, hi) in BOUNDS.items():
        if key not in cfg:
            continue
        value = cfg[key]
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if isinstance(value, (list, tuple)) and not 1 <= len(values) <= MAX_LEVELS:
            raise ValueError(f"{where}: config {key} has {len(values)} entries; at most {MAX_LEVELS} are allowed")
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v) \
                    or not lo <= v <= hi:
                raise ValueError(f"{where}: config {key} {value!r} is out of bounds (integers in [{lo}, {hi}])")
    eps = cfg.get("eps", 1.0)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"{where}: config eps {eps!r} must be a positive finite number")
    return cfg


def check_weights_file(path) -> None:
    """Refuse ``path`` in one line unless it starts like a safetensors file (an 8-byte header length that fits
    the file, then a JSON object), before any loader reads it."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(9)
    n = struct.unpack("<Q", head[:8])[0] if len(head) >= 8 else -1
    if len(head) < 9 or not 2 <= n <= min(size - 8, MAX_HEADER) or head[8:9] != b"{":
        raise ValueError(f"{path}: not a safetensors weights file (only .safetensors are loaded, never pickles)")
    with open(path, "rb") as f:
        f.seek(8)
        try:
            json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ValueError(f"{path}: not a safetensors weights file (its header is not JSON)") from None
