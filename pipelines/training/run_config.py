"""What a dense run's settings may hold: every key of a run folder's ``config.json`` (and of ``--backbone-kwargs``,
``--head-kwargs``, ``--task-kwargs``) checked against an allow-list with its type and bounds, before anything is
built. A run folder is data, never instructions: nothing in it can turn on timm's ``pretrained`` download, name a
URL, a hub id, a file or a cache folder, or ask for a network of any size; anything outside the lists is one
ValueError line naming the file (or option) and the key.

    >>> check_backbone_kwargs({"depth": 4, "embed_dim": 32, "num_heads": 2}, "--backbone-kwargs")
    {'depth': 4, 'embed_dim': 32, 'num_heads': 2}
    >>> check_backbone_kwargs({"pretrained": True}, "RUN/config.json")
    Traceback (most recent call last):
    ValueError: RUN/config.json: "extra" key "pretrained" is not allowed (a run's backbone settings are: depth, ...)
"""
from __future__ import annotations

import json
import math
import re

MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few hundred bytes
MAX_PARAMETERS = 1_200_000_000  # estimated backbone parameters a config may ask for (ViT-g has about 1.0e9)

# (kind, low, high): "int" / "float" in [low, high]; "ints": an int or a list of at most `high_len` ints;
# "bool"; ("choice", values); "float?" / "int?": also None
_INT, _FLOAT, _BOOL = "int", "float", "bool"
BACKBONE_KWARGS = {
    "depth": (_INT, 1, 48), "embed_dim": (_INT, 1, 2048), "num_heads": ("ints", 1, 64), "mlp_hidden": (_INT, 1, 8192),
    "mlp_ratio": (_FLOAT, 0.0, 16.0), "dims": ("ints", 1, 2048), "depths": ("ints", 1, 48),
    "out_indices": ("ints", 0, 64), "patch_size": (_INT, 1, 64), "expand_k": (_FLOAT, 0.0, 4.0),
    "gate": ("choice", ("vector", "scalar")), "output_stride": ("choice", (8, 16, 32)), "reg_tokens": (_INT, 0, 16),
    "norm_eps": (_FLOAT, 0.0, 1.0), "init_values": ("float?", 0.0, 1.0),
    **{k: (_FLOAT, 0.0, 1.0) for k in ("drop_rate", "pos_drop_rate", "drop_path_rate", "attn_drop_rate",
                                       "proj_drop_rate", "patch_drop_rate")},
    **{k: (_BOOL,) for k in ("dynamic_img_size", "dynamic_img_pad", "class_token", "no_embed_class", "qkv_bias",
                             "qk_norm", "conv_act", "out_act", "pre_norm", "fc_norm")},
}
HEAD_KWARGS = {
    "token-local": {"bias": (_BOOL,)},
    "local-linear": {"guide_channels": (_INT, 1, 16), "detail": (_BOOL,), "bias": (_BOOL,), "cells": (_INT, 1, 16),
                     "learned_guides": (_INT, 0, 64)},
    "dpt": {"features": (_INT, 2, 1024)},
}
TASK_VALUE = (_FLOAT, -1e6, 1e6)  # every task setting is a weight or a bound (task_of checks the names)

_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,200}$")  # a timm model name: no hub prefix, no path
_CONFIG = {  # DenseConfig's fields
    "task": ("name",), "backbone": ("name",), "head": ("name",), "img_size": (_INT, 16, 4096),
    "lora_rank": (_INT, 0, 1024), "lora_alpha": ("float?", 0.0, 1e6), "lora_dropout": (_FLOAT, 0.0, 1.0),
    "lora_targets": ("targets",), "pretrained": ("text?",), "epochs": (_INT, 1, 1_000_000),
    "batch_size": (_INT, 1, 65536), "lr": (_FLOAT, 0.0, 1e3), "backbone_lr": ("float?", 0.0, 1e3),
    "weight_decay": (_FLOAT, 0.0, 1e3), "warmup": (_FLOAT, 0.0, 1.0), "ema": (_FLOAT, 0.0, 1.0),
    "clip": (_FLOAT, 0.0, 1e6), "tta": (_BOOL,), "select_best": (_BOOL,), "seed": (_INT, 0, 2**63 - 1),
    "limit": ("int?", 1, 2**31), "max_minutes": ("float?", 0.0, 1e9), "stop_after": ("int?", 1, 1_000_000),
    "grad_accum": (_INT, 1, 65536), "mixed_precision": ("choice?", ("no", "fp16", "bf16", "fp8")),
    "val_fraction": (_FLOAT, 0.0, 0.9), "test_fraction": (_FLOAT, 0.0, 0.9),
    "cpu": (_BOOL,), "log_with": ("text?",), "data": ("text?",), "extra": ("dict",), "head_kwargs": ("dict",),
    "task_kwargs": ("dict",),
}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def _check(value, spec, what: str):
    """``value`` if it fits ``spec``, else a ValueError naming ``what``."""
    kind = spec[0]
    if kind.endswith("?"):
        if value is None:
            return None
        kind = kind[:-1]
    if kind == _BOOL:
        if not isinstance(value, bool):
            raise ValueError(f"{what} must be true or false, got {value!r:.60}")
        return value
    if kind in (_INT, _FLOAT):
        ok = _is_int(value) if kind == _INT else _is_number(value)
        if not ok or not spec[1] <= value <= spec[2]:
            raise ValueError(f"{what} must be {'an integer' if kind == _INT else 'a number'} in "
                             f"[{spec[1]:g}, {spec[2]:g}], got {value!r:.60}")
        return value
    if kind == "ints":
        items = value if isinstance(value, list) else [value]
        if not 1 <= len(items) <= 16 or not all(_is_int(v) and spec[1] <= v <= spec[2] for v in items):
            raise ValueError(f"{what} must be an integer in [{spec[1]}, {spec[2]}] or a list of at most 16 of them, "
                             f"got {value!r:.60}")
        return value
    if kind == "choice":
        if isinstance(value, bool) or value not in spec[1]:
            raise ValueError(f"{what} must be one of {', '.join(map(str, spec[1]))}, got {value!r:.60}")
        return value
    if kind == "name":
        if not isinstance(value, str) or not _NAME.match(value):
            raise ValueError(f"{what} must be a plain name (letters, digits, _ . -), got {value!r:.60}")
        return value
    if kind == "text":
        if not isinstance(value, str) or len(value) > 4096:
            raise ValueError(f"{what} must be a string of at most 4096 characters, got {value!r:.60}")
        return value
    if kind == "targets":
        if value is None or (isinstance(value, str) and len(value) <= 4096):
            return value
        if isinstance(value, list) and len(value) <= 4096 and all(isinstance(v, str) and len(v) <= 200 for v in value):
            return value
        raise ValueError(f"{what} must be a list of module names or one regular expression, got {value!r:.60}")
    if kind == "dict":
        if not isinstance(value, dict):
            raise ValueError(f"{what} must be a JSON object, got {value!r:.60}")
        return value
    raise AssertionError(kind)


def _prefix(where: str, label: str) -> str:
    """'RUN/config.json: "extra"' for a key of a file, '--backbone-kwargs' for an option (empty label)."""
    return f"{where}: {label}" if label else where


def _checked(values: dict, allowed: dict, where: str, label: str, family: str) -> dict:
    if not isinstance(values, dict):
        raise ValueError(f"{_prefix(where, label)} must be a JSON object, got {values!r:.60}")
    for key, value in values.items():
        if key not in allowed:
            raise ValueError(f"{_prefix(where, label)} key {json_text(key)} is not allowed ({family} "
                             f"{', '.join(allowed) or 'none'})")
        _check(value, allowed[key], f"{_prefix(where, label)} key {json_text(key)}")
    return dict(values)


def json_text(key) -> str:
    return '"' + str(key)[:60].replace('"', '\\"') + '"'


def estimated_parameters(extra: dict) -> int:
    """A bound on the transformer-style blocks ``extra`` asks for: depth x 12 x width^2 summed over stages
    (a ViT block holds about 12 width^2 weights); 0 when ``extra`` sets no width."""
    total = 0
    if "embed_dim" in extra:
        total += 12 * int(extra.get("depth", 12)) * int(extra["embed_dim"]) ** 2
    if "dims" in extra:  # a hierarchical backbone: one width per stage, or the first, doubled per stage
        dims = extra["dims"] if isinstance(extra["dims"], list) else [extra["dims"] * 2 ** i for i in range(4)]
        depths = extra.get("depths", [12])
        depths = depths if isinstance(depths, list) else [depths]
        total += sum(12 * depths[min(i, len(depths) - 1)] * d ** 2 for i, d in enumerate(dims))
    return total


def check_backbone_kwargs(extra, where: str, label: str = '"extra"') -> dict:
    """``extra`` (timm.create_model keywords of a run) when every key is allowed and in bounds, and the network
    it asks for is below :data:`MAX_PARAMETERS`; otherwise one ValueError line naming ``where`` and the key."""
    extra = _checked(extra, BACKBONE_KWARGS, where, label, "a run's backbone settings are:")
    if estimated_parameters(extra) > MAX_PARAMETERS:
        raise ValueError(f"{_prefix(where, label)} asks for a backbone of about {estimated_parameters(extra):.3g} weights, "
                         f"over the bound of {MAX_PARAMETERS:.3g}; lower depth / embed_dim / dims")
    return extra


def check_head_kwargs(head: str, kwargs, where: str, label: str = '"head_kwargs"') -> dict:
    """``kwargs`` of the ``head`` when every key is allowed for it and in bounds (one line otherwise)."""
    return _checked(kwargs, HEAD_KWARGS.get(head, {}), where, label, f"the {head} head: it takes")


def check_task_kwargs(kwargs, where: str, label: str = '"task_kwargs"') -> dict:
    """``kwargs`` when every value is a finite number in bounds (which names a task takes, ``task_of`` checks)."""
    if not isinstance(kwargs, dict):
        raise ValueError(f"{_prefix(where, label)} must be a JSON object, got {kwargs!r:.60}")
    for key, value in kwargs.items():
        _check(value, TASK_VALUE, f"{_prefix(where, label)} key {json_text(key)}")
    return dict(kwargs)


def check_config(raw, where: str) -> dict:
    """The DenseConfig fields of a parsed ``config.json`` (``raw``), each checked; keys that are no field of
    the config are not read. One ValueError line naming ``where`` and the key for anything else."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must hold a JSON object of run settings, got {type(raw).__name__}")
    out = {}
    for key, spec in _CONFIG.items():
        if key in raw:
            out[key] = _check(raw[key], spec, f"{where}: {json_text(key)}")
    if out.get("val_fraction", 0.1) + out.get("test_fraction", 0.1) >= 0.95:
        raise ValueError(f"{where}: \"val_fraction\" + \"test_fraction\" must leave data to train on (sum < 0.95)")
    if "extra" in out:
        out["extra"] = check_backbone_kwargs(out["extra"], where)
    if "head_kwargs" in out:
        out["head_kwargs"] = check_head_kwargs(out.get("head", "token-local"), out["head_kwargs"], where)
    if "task_kwargs" in out:
        out["task_kwargs"] = check_task_kwargs(out["task_kwargs"], where)
    return out


def parse_config(text: str, where: str) -> dict:
    """:func:`check_config` of the JSON ``text``; malformed, deeply nested or oversized text is one line."""
    if len(text) > MAX_CONFIG_BYTES:
        raise ValueError(f"{where} holds {len(text)} characters, over the {MAX_CONFIG_BYTES} a run config may")
    if _text_depth(text) > MAX_DEPTH:  # before parsing: the parser's own limit follows sys.getrecursionlimit()
        raise ValueError(f"{where} is nested too deeply to be a run config")
    try:
        raw = json.loads(text)
    except RecursionError:
        raise ValueError(f"{where} is nested too deeply to be a run config") from None
    except ValueError as err:
        raise ValueError(f"{where} is not valid JSON ({str(err).splitlines()[0]})") from None
    return check_config(raw, where)


MAX_DEPTH = 16  # levels of objects and lists a run config may nest (the deepest allowed value sits at 3)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _text_depth(text: str) -> int:
    """How deeply the JSON ``text`` nests its objects and lists: brackets counted outside strings, one pass."""
    level = deepest = 0
    for ch in _STRING.sub("", text):
        if ch in "[{":
            level += 1
            deepest = max(deepest, level)
        elif ch in "]}":
            level -= 1
    return deepest
