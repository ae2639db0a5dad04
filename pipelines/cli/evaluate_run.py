"""What ``vision evaluate`` runs once its command line is parsed: each run scored on a data split, alone and with
guided refinement, everywhere and in the edge band, beside the training-mean baseline (:func:`score`)."""
from __future__ import annotations

import json

import torch

from vision.data.dense import DenseSamples
from vision.dense import TASKS, median_scale
from vision.dense.edges import edge_band
from vision.outputs import prepare_file, refuse_inputs, write_text_atomic
from vision.pipelines.bench.timing import print_table
from vision.pipelines.cli import predict_run
from vision.pipelines.training.finetune import mean_prediction, predict_samples, stacked_targets


def score(model, task, samples, band=None, refine=None, tta=True, batch_size=16, median: bool = False) -> dict:
    """Metrics (and ``edge_``-prefixed metrics over ``band``) of a model, optionally refined and (depth)
    median-scaled."""
    return _metrics(task, predict_samples(model, task, samples, tta, refine, batch_size), samples, band, median)


def _metrics(task, pred, samples, band, median: bool = False) -> dict:
    target = stacked_targets(task, samples)
    valid = task.valid_mask(target)
    if median:
        pred = median_scale(pred, target, valid).to(pred.dtype)
    out = dict(task.metrics(pred, target, valid))
    if band is not None:
        out.update({f"edge_{k}": v for k, v in task.metrics(pred, target, valid & band).items()})
    return out


def run(args) -> int:
    """``vision evaluate``: load the runs, score them (and the training mean) on the split, print the table."""
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.json is not None:  # before any compute, and never over a file the evaluation reads
        refuse_inputs(args.json, [("RUN", r / name) for r in args.runs for name in ("config.json", "model.safetensors",
                                                                                    "base.safetensors")], "--json")
        if args.json.exists() and args.data.resolve() in args.json.resolve().parents:
            raise ValueError(f"--json {args.json} would overwrite a file of --data {args.data}; write it elsewhere")
        prepare_file(args.json, "--json")
    loaded = [predict_run.load_run_for_cli(r) for r in args.runs]
    tasks = {cfg.task for _, cfg in loaded}
    if len(tasks) != 1:
        raise ValueError(f"the RUN folders must share one task, got {sorted(tasks)}")
    task = TASKS[tasks.pop()]
    if args.median_scale and task.name != "depth":
        raise ValueError(f"--median-scale is for depth runs, not {task.name}")
    rendered = not (args.data / "images").is_dir()
    shares = {cfg.fractions for _, cfg in loaded}
    if len(shares) != 1:
        raise ValueError("the RUN folders were trained on different splits (--val-fraction / --test-fraction); "
                         "evaluate them separately")
    fractions = shares.pop()
    try:
        samples = DenseSamples(args.data, task.target_field, args.split, fractions=fractions,
                               extras=("segment", "depth") if rendered else ())
    except ValueError as err:
        if "no samples in split" not in str(err):
            raise
        raise ValueError(f"--split {args.split} of --data {args.data} is empty for these runs ({str(err).split(' (', 1)[-1]}; "
                         "choose another --split, or fine-tune with a larger --val-fraction / --test-fraction"
                         ) from None
    train = DenseSamples(args.data, task.target_field, "train", fractions=fractions)
    band = None
    if rendered:
        band = edge_band(torch.stack([s["extras"]["segment"] for s in samples]),
                         torch.stack([s["extras"]["depth"] for s in samples]), width=args.band)
    median = args.median_scale
    rows = [{"model": "training mean", **_metrics(task, mean_prediction(task, train, samples), samples, band, median)}]
    for (model, cfg), path in zip(loaded, args.runs):
        name = f"{path.name} ({cfg.head}{', LoRA %d' % cfg.lora_rank if cfg.lora_rank else ''})"
        rows.append({"model": name, **score(model, task, samples, band, None, not args.no_tta, median=median)})
        rows.append({"model": name + " + guided_refine",
                     **score(model, task, samples, band, (args.refine_radius, args.refine_eps), not args.no_tta,
                             median=median)})
    columns = ["model"] + [k for k in rows[0] if k != "model"]
    table = [{k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in r.items()} for r in rows]
    print_table(table, columns, title=f"{task.name}{' (median-scaled)' if median else ''} on {len(samples)} "
                                      f"{args.split} images of {args.data}"
                + (f"; edge_ = within {args.band} px of an instance / depth edge ({float(band.float().mean()):.1%} "
                   "of pixels)" if band is not None else ""))
    if args.json:
        write_text_atomic(args.json, json.dumps(rows, indent=1))
    return 0
