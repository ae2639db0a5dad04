"""The run folder's README.md: a small model card (task, backbone, head, data, metrics everywhere and near
edges, how to load it, the exact command), rewritten whenever the kept weights change."""
from __future__ import annotations

import json
from pathlib import Path

import torch


def edge_metrics(task, samples, pred, width: int = 4) -> dict | None:
    """The task's metrics over valid pixels within ``width`` px of an instance / depth discontinuity:
    the band comes from the samples' segment / depth extras (rendered scenes) or, for depth, from the
    target itself; None when neither exists (or the band is empty)."""
    from vision.dense.edges import edge_band

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


def _table(metrics: dict) -> str:
    return " | ".join(f"{k} {v:.4g}" for k, v in metrics.items() if isinstance(v, (int, float)))


def write_card(run: Path, cfg, record: dict, edge: dict | None, mixed_precision: str, command: str | None,
               create_kwargs: dict | None = None) -> Path:
    """Write RUN/README.md (atomically) for the weights kept at ``record``'s epoch; ``create_kwargs`` are the
    ``timm.create_model`` arguments the backbone was built with (for the peft loading example)."""
    from vision.outputs import write_text_atomic

    from .dense_model import ADAPTER

    metrics = {k: v for k, v in record.items() if k not in ("epoch", "loss", "steps", "seconds", "cpu_seconds",
                                                            "baseline", "saved")}
    adapter = (f"LoRA rank {cfg.lora_rank}, alpha {cfg.lora_alpha or cfg.lora_rank}, dropout {cfg.lora_dropout}, "
               f"targets {cfg.lora_targets or 'every nn.Linear'}; the adapters are in `{ADAPTER}/` (peft)"
               if cfg.lora_rank else "the whole backbone fine-tuned")
    kwargs = dict(cfg.extra, img_size=cfg.img_size)
    lines = [
        f"# {cfg.task} with a {cfg.head} head on {cfg.backbone}",
        "",
        "Written by `vision finetune` (locallinear-vision).",
        "",
        f"- **task**: {cfg.task}" + (f" ({json.dumps(cfg.task_kwargs)})" if cfg.task_kwargs else ""),
        f"- **backbone**: `{cfg.backbone}` ({json.dumps(kwargs)}), weights: {cfg.pretrained or 'random init'}; "
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
        *([] if not cfg.lora_rank else [
            "The adapters alone, with peft, on the backbone timm builds (load the same base weights into it first):",
            "",
            "```python",
            "import timm, peft",
            f"backbone = timm.create_model({cfg.backbone!r}, features_only=True, "
            + ", ".join(f"{k}={v!r}" for k, v in (create_kwargs or {}).items()) + ")",
            f"backbone = peft.PeftModel.from_pretrained(backbone, {str(run / ADAPTER)!r})",
            "```",
            ""]),
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
