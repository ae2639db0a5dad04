"""``save_pretrained`` / ``from_pretrained`` for :class:`~vision.denoise.flnr.FLNR`, on local folders only.

huggingface_hub's ``PyTorchModelHubMixin`` writes a folder of ``config.json`` (the network's constructor
arguments) and ``model.safetensors``, the layout diffusers, timm and transformers users know. Loading here is
stricter than the mixin's: the folder must exist on this machine (nothing downloads at run time), the sizes in
``config.json`` are checked against :data:`~.config.BOUNDS` before any network is built, the
weights file must be safetensors (never a pickle), and every error is one line naming the folder.

Example:
    >>> model = load_flnr()                 # the bundled weights
    >>> model.save_pretrained("my-flnr")    # my-flnr/config.json, my-flnr/model.safetensors
    >>> same = FLNR.from_pretrained("my-flnr")
"""
from __future__ import annotations

import json
from pathlib import Path

import safetensors.torch
from huggingface_hub import PyTorchModelHubMixin

from .config import check_config, check_weights_file

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"


def is_pretrained_folder(path) -> bool:
    """Whether ``path`` is a folder written by ``save_pretrained`` (it holds ``config.json``)."""
    return Path(path).is_dir() and (Path(path) / CONFIG_FILE).is_file()


class FLNRHubMixin(PyTorchModelHubMixin):
    """The mixin with local-only, checked loading (see the module docstring)."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs):
        """The model saved by :meth:`save_pretrained` in the local folder ``pretrained_model_name_or_path``."""
        folder = Path(pretrained_model_name_or_path)
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder}: no such folder (FLNR.from_pretrained reads local folders written "
                                    "by save_pretrained; nothing is downloaded)")
        for name in (CONFIG_FILE, WEIGHTS_FILE):
            if not (folder / name).is_file():
                raise FileNotFoundError(f"{folder}: no {name} (not a folder written by FLNR.save_pretrained)")
        try:
            config = json.loads((folder / CONFIG_FILE).read_text())
        except (ValueError, UnicodeDecodeError) as err:
            raise ValueError(f"{folder / CONFIG_FILE}: not JSON ({err})") from None
        if not isinstance(config, dict):
            raise ValueError(f"{folder / CONFIG_FILE}: not a JSON object")
        check_config(config, str(folder / CONFIG_FILE))
        check_weights_file(folder / WEIGHTS_FILE)
        return cls.from_state_dict(safetensors.torch.load_file(str(folder / WEIGHTS_FILE)), config)
