"""Loading FLNR weights: :func:`load_flnr` (the bundled files, a weights file, a ``save_pretrained`` folder, a state
dict or a model), each file's model loaded once and shared, :func:`placed` (a model on a device without moving the
caller's), and :func:`read_metadata` (a weights file's header).
"""
from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

import torch
from safetensors import safe_open

from vision.bundled import asset_path

from .hub import is_pretrained_folder
from .model import FLNR

BUNDLED = ("weights", "flnr.safetensors")
# trained on 1/2- and 1/4-resolution colour (one sample of every 2 x 2 / 4 x 4 block, phase known)
BUNDLED_UPSAMPLE = {2: ("weights", "flnr_up2.safetensors"), 4: ("weights", "flnr_up4.safetensors")}


def read_metadata(path) -> dict[str, str]:
    """The safetensors header metadata of a weights file (configuration, training command, val PSNR)."""
    with safe_open(str(path), "pt") as f:
        return dict(f.metadata() or {})


@lru_cache(maxsize=8)
def _cached(path: str, mtime: float, device: str | None, dtype: str | None) -> FLNR:
    model = FLNR.from_file(path)
    return model if device is None else model.to(device=torch.device(device), dtype=getattr(torch, dtype))


def placed(model: FLNR, device=None, dtype=None) -> FLNR:
    """``model`` on ``device`` in ``dtype`` (None: as it is), moving a copy: ``nn.Module.to`` moves a module in
    place, and the model may be a caller's, or the one :func:`load_flnr` hands to every caller of a file."""
    p = next(model.parameters())
    if (device is None or p.device == torch.device(device)) and (dtype is None or p.dtype == dtype):
        return model
    return copy.deepcopy(model).to(device=device, dtype=dtype)


def load_flnr(weights=None, upsample: int = 1, device=None, dtype=None) -> FLNR:
    """An :class:`FLNR` from ``weights``: None (the bundled file), a weights file, a ``save_pretrained`` folder, a
    state dict or an FLNR; on ``device`` in ``dtype`` when given (a model passed in is copied, never moved).

    With ``weights=None`` and colour at 1/``upsample`` of the guides' size, the bundled weights trained for
    that factor (:data:`BUNDLED_UPSAMPLE`) when there are such, else the full-resolution ones. A file's model
    is loaded once per (file, device, dtype) and shared by every caller: treat it as read-only."""
    if isinstance(weights, FLNR):
        return placed(weights, device, dtype)
    if isinstance(weights, dict):
        return FLNR.from_state_dict(weights).to(device=device, dtype=dtype)
    if weights is None:
        weights = asset_path(*BUNDLED)
        if int(upsample) in BUNDLED_UPSAMPLE:
            try:
                weights = asset_path(*BUNDLED_UPSAMPLE[int(upsample)])
            except FileNotFoundError:
                pass
    if not isinstance(weights, (str, Path)):
        raise ValueError(f"FLNR weights must be None, a path, a state dict or an FLNR, got {type(weights).__name__}")
    path = Path(weights)
    if is_pretrained_folder(path):
        return FLNR.from_pretrained(path).to(device=device, dtype=dtype)
    if not path.is_file():
        raise FileNotFoundError(f"no FLNR weights file or save_pretrained folder at {path}")
    dev = None if device is None and dtype is None else str(torch.device(device or "cpu"))
    dt = None if dev is None else str(dtype or torch.float32).replace("torch.", "")
    return _cached(str(path.resolve()), path.stat().st_mtime, dev, dt)
