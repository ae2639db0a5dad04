"""The run folder's README.md: a small model card (task, backbone, head, data, metrics everywhere and near
edges, how to load it, the exact command), rewritten whenever the kept weights change."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from vision.dense.edges import edge_band
from vision.outputs import write_text_atomic
from .dense_config import ADAPTER, BASE, WEIGHTS


def edge_metrics(task, samples, pred, width: int = 4) -> dict | None:
    """The task's metrics over valid pixels within ``width`` px of an instance / depth discontinuity:
    the band comes from the samples' segment / depth extras (rendered scenes) or, for depth, from the
    target itself; None when neither exists (or the band is empty)."""
    first = samples[0]
    extras = first.get("extras") or {}
    if "segment" in extras or "depth" in extras:
        seg = torch.stack([samples[i]["extras"]["segment"] for i in range(len(samples))]) if "segment" in extras else None
        depth = torch.stack([samples[i]["extras"]["depth"] for i in range(len(samples))]) if "depth" in extras else None
    elif task.name == "depth":
        seg, depth = None, torch.stack([samples[i]["target"] for i in range(len(samples))]).float()
    else:
        return None
    band = edge_band(seg, depth, width=width)
    target = task.make_target(torch.stack([samples[i]["target"] for i in range(len(samples))]))
    valid = task.valid_mask(target) & band.to(target.device)
    if not bool(valid.any()):
        return None
    return dict(task.metrics(pred, target, valid))


def features_snippet(run: Path, cfg, create_kwargs: dict | None) -> list[str]:
    """The card's Python example: the run's backbone features with timm (+ peft) and safetensors only, from
    the files of this folder; executed as it stands, it gives the features the run's model computes."""
    args = ", ".join(["features_only=True", "pretrained=False"]
                     + [f"{k}={v!r}" for k, v in (create_kwargs or {}).items()])
    lines = ["The backbone's features with timm" + (" and peft" if cfg.lora_rank else "") + ", from this folder "
             "alone (the base weights are in `" + BASE + "`):", "", "```python",
             "import timm, torch" + (", peft" if cfg.lora_rank else ""),
             "from safetensors.torch import load_file",
             "import vision  # registers the ViG backbones into timm", "",
             f"run = {str(run)!r}  # this folder",
             f"backbone = timm.create_model({cfg.backbone!r}, {args})",
             "mean = torch.tensor(backbone.pretrained_cfg.get('mean', (0.485, 0.456, 0.406))).view(1, 3, 1, 1)",
             "std = torch.tensor(backbone.pretrained_cfg.get('std', (0.229, 0.224, 0.225))).view(1, 3, 1, 1)"]
    if cfg.lora_rank:
        lines += [f"backbone.load_state_dict(load_file(f'{{run}}/{BASE}'))  # the frozen base weights",
                  f"backbone = peft.PeftModel.from_pretrained(backbone, f'{{run}}/{ADAPTER}')"]
    else:
        base = f"**load_file(f'{{run}}/{BASE}'), " if (run / BASE).is_file() else ""
        lines += [f"state = {{{base}**load_file(f'{{run}}/{WEIGHTS}')}}",
                  "backbone.load_state_dict({k[len('backbone.'):]: v for k, v in state.items() "
                  "if k.startswith('backbone.')})"]
    lines += ["backbone.eval()",
              "image = torch.rand(1, 3, 64, 64)  # (B, 3, H, W) in [0, 1], H and W multiples of 16",
              "with torch.no_grad():",
              "    features = backbone((image - mean) / std)  # one map per feature stage",
              "```", "",
              "The whole model, head included: `model, cfg = "
              "vision.pipelines.training.dense_model.load_run(run)`.", ""]
    return lines


def _table(metrics: dict) -> str:
    return " | ".join(f"{k} {v:.4g}" for k, v in metrics.items() if isinstance(v, (int, float)))


def write_card(run: Path, cfg, record: dict, edge: dict | None, mixed_precision: str, command: str | None,
               create_kwargs: dict | None = None) -> Path:
    """Write RUN/README.md (atomically) for the weights kept at ``record``'s epoch; ``create_kwargs`` are the
    ``timm.create_model`` arguments the backbone was built with (for the peft loading example)."""
    metrics = {k: v for k, v in record.items() if k not in ("epoch", "loss", "steps", "seconds", "cpu_seconds",
                                                            "baseline", "saved")}
    adapter = (f"LoRA rank {cfg.lora_rank}, alpha {cfg.lora_alpha or cfg.lora_rank}, dropout {cfg.lora_dropout}, "
               f"targets {cfg.lora_targets or 'every nn.Linear (every nn.Conv2d where there is none)'}; the adapters are "
               f"in `{ADAPTER}/` (peft)"
               if cfg.lora_rank else "the whole backbone fine-tuned")
    kwargs = dict(cfg.extra, img_size=cfg.img_size)
    lines = [
        f"# {cfg.task} with a {cfg.head} head on {cfg.backbone}",
        "",
        "Written by `vision finetune` (locallinear-vision).",
        "",
        f"- **task**: {cfg.task}" + (f" ({json.dumps(cfg.task_kwargs)})" if cfg.task_kwargs else ""),
        f"- **backbone**: `{cfg.backbone}` ({json.dumps(kwargs)}), weights: {cfg.pretrained or 'random init'}"
        + (f" (kept in `{BASE}`: this folder needs neither that file nor the hub cache)"
           if cfg.pretrained and cfg.lora_rank else f" (kept in `{BASE}`)" if cfg.lora_rank else "") + "; "
        + adapter,
        f"- **head**: {cfg.head}" + (f" ({json.dumps(cfg.head_kwargs)})" if cfg.head_kwargs else ""),
        f"- **data**: {cfg.data or 'given in code'}, {cfg.img_size} px training size",
        f"- **training**: epoch {record['epoch']} of {cfg.epochs} kept, {record.get('steps', '?')} optimiser steps, "
        f"batch {cfg.batch_size} x {cfg.grad_accum} accumulated, lr {cfg.lr}, EMA {cfg.ema}, "
        f"mixed precision {mixed_precision}, seed {cfg.seed}",
        "",
        "## Validation metrics",
        "",
        f"- all valid pixels: {_table(metrics)}",
        f"- near edges (within 4 px of an instance / depth discontinuity): {_table(edge) if edge else 'n/a (no edge information in this data)'}",
        f"- predicting the training mean: {_table(record.get('baseline', {}))}",
        "",
        "## Use",
        "",
        "```",
        f"vision predict {run} IMAGES... -o OUT",
        "```",
        "",
        *features_snippet(run, cfg, create_kwargs),
        "## Command",
        "",
        "```",
        command or "(trained from Python: vision.pipelines.training.finetune.train)",
        "```",
        "",
    ]
    path = run / "README.md"
    write_text_atomic(path, "\n".join(lines))
    return path
