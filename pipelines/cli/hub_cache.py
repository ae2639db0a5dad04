"""Models from this machine only, for ``vision edit``: a ``--model`` that names a folder or a Hub id in the local
Hugging Face cache (:func:`check_model`, before torch or diffusers load), and the hub client kept offline
(:func:`hub_offline`), so that nothing is ever downloaded.

    >>> check_model("./sd15")   # doctest: +SKIP
    FileNotFoundError: --model ./sd15: no such folder (a folder written by save_pretrained)
"""
from __future__ import annotations

import os
import sys
from pathlib import Path


def _looks_like_path(model: str) -> bool:
    """A folder rather than a Hub id ("org/name" or "name"): it exists, starts like a path, or has more slashes."""
    return (Path(os.path.expanduser(model)).exists() or model.startswith((".", "~", "/")) or "\\" in model
            or model.endswith("/") or model.count("/") > 1)


def check_model(model: str) -> None:
    """Fail fast, before torch or diffusers load: a path that does not exist, or a Hub id that is not in the
    local cache, is one clear line (the model loads only from this machine)."""
    if _looks_like_path(model):
        path = Path(os.path.expanduser(model))
        if not path.exists():
            raise FileNotFoundError(f"--model {model}: no such folder (a folder written by save_pretrained)")
        if not (path / "model_index.json").is_file():
            raise FileNotFoundError(f"--model {model}: not a diffusers model folder (no model_index.json); "
                                    "write one with pipeline.save_pretrained(folder)")
        return
    from huggingface_hub import constants  # lazy: the [edit] extra's; `vision edit --help` is there without it

    cache = Path(constants.HF_HUB_CACHE) / ("models--" + model.replace("/", "--")) / "snapshots"
    if not any(cache.glob("*/model_index.json")):
        raise FileNotFoundError(missing_model_message(model))


def missing_model_message(model: str) -> str:
    """The one line for a Hub id that is not in the local cache: how to get it there, or to give a folder."""
    return (f"model {model!r} is neither a local folder nor in the local Hugging Face cache; download it once "
            f"with `hf download {model}` (or pass --model with a folder written by save_pretrained)")


def hub_offline() -> None:
    """Put the Hugging Face hub client in offline mode for this process, so that loading by Hub id reads
    the local cache and never opens a connection. The client reads ``HF_HUB_OFFLINE`` when it is first
    imported, and libraries copy the flag at their own import, so modules already loaded get it set too."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in ("huggingface_hub", "diffusers", "transformers") and \
                isinstance(getattr(module, "HF_HUB_OFFLINE", None), bool):
            module.HF_HUB_OFFLINE = True
