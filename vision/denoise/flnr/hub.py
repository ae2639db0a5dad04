"""``save_pretrained`` / ``from_pretrained`` for :class:`~vision.denoise.flnr.FLNR`, on local folders only.

A saved model is a folder of ``config.json`` (the network's constructor arguments, sorted, indented by 2) and
``model.safetensors``, the layout huggingface_hub's ``PyTorchModelHubMixin`` writes and diffusers, timm and
transformers users know. The folder is written here without huggingface_hub: importing that package takes a
quarter of a second, which every ``vision denoise`` would pay for a method it does not call. To publish a folder,
upload it (``huggingface_hub.upload_folder``). Loading is stricter than the mixin's: the folder must exist on this
machine (nothing downloads at run time), the sizes in ``config.json`` are checked against :data:`~.config.BOUNDS`
before any network is built, the weights file must be safetensors (never a pickle), and every error is one line
naming the folder.

Example:
    >>> model = load_flnr()                 # the bundled weights
    >>> model.save_pretrained("my-flnr")    # my-flnr/config.json, my-flnr/model.safetensors
    >>> same = FLNR.from_pretrained("my-flnr")
"""
from __future__ import annotations

import json
from pathlib import Path

import safetensors.torch

from .config import check_config, check_weights_file

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"


def is_pretrained_folder(path) -> bool:
    """Whether ``path`` is a folder written by ``save_pretrained`` (it holds ``config.json``)."""
    return Path(path).is_dir() and (Path(path) / CONFIG_FILE).is_file()


class FLNRHubMixin:
    """``save_pretrained`` and local-only, checked ``from_pretrained`` (see the module docstring); mixed into a
    ``torch.nn.Module`` with a ``config`` dict of its constructor arguments."""

    def save_pretrained(self, save_directory, *, push_to_hub: bool = False) -> None:
        """Write ``save_directory``/``config.json`` (``self.config``) and ``model.safetensors`` (the weights), making
        the folder if needed; an earlier ``config.json`` there is replaced. ``push_to_hub`` is not supported: save,
        then upload the folder (``huggingface_hub.upload_folder``)."""
        if push_to_hub:
            self.push_to_hub(str(save_directory))
        folder = Path(save_directory)
        folder.mkdir(parents=True, exist_ok=True)
        safetensors.torch.save_model(self, str(folder / WEIGHTS_FILE))
        (folder / CONFIG_FILE).write_text(json.dumps(self.config, sort_keys=True, indent=2))

    def push_to_hub(self, repo_id: str, **kwargs):
        """Not supported: ``save_pretrained(folder)``, then ``huggingface_hub.upload_folder(repo_id=...,
        folder_path=folder)``."""
        raise NotImplementedError(f"FLNR.push_to_hub({repo_id!r}) is not supported: save the model with "
                                  "save_pretrained(folder), then upload the folder with huggingface_hub.upload_folder")

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
