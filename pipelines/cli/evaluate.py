"""``vision evaluate``: score `vision finetune` runs on held-out scenes, everywhere and near discontinuities,
with and without guided-filter refinement, beside the predict-the-training-mean baseline."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

EPILOG = """\
examples:
  vision evaluate runs/depth --data data/scenes
  vision evaluate runs/depth_tl runs/depth_llr runs/depth_dpt --data data/scenes --split test --json scores.json
  vision evaluate runs/depth_tl runs/depth_llr --data data/scenes --split test --median-scale

Rows: each run, alone and with guided_refine (the guided filter with the image as guide applied to
the head's raw output; --refine-radius, --refine-eps), and the training-mean baseline. Columns: the
task's metrics over all valid pixels, and (rendered scenes) the same metrics over the edge band: valid
pixels within --band pixels of an instance or depth discontinuity (vision.dense.edges.edge_band).
Depth with --median-scale: every prediction (the baseline's too) is first scaled per image by
median(target) / median(prediction) over its valid pixels, so the table scores the shape without the
global scale (vision.dense.median_scale).
Splits: the names of --data fall into train / val / test by a hash of each, with the shares the runs
were fine-tuned with (`vision finetune --val-fraction / --test-fraction`, kept in RUN/config.json), so
--split test scores names no run trained or validated on. An empty split is one line saying how the
names fell.
"""


HELP = "score fine-tuned dense heads on held-out scenes (all pixels, edge band)"
DESCRIPTION = ("Evaluate `vision finetune` runs on a data split: metrics everywhere and near "
               "discontinuities, with and without guided refinement.")


def add_arguments(p) -> None:
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run folders (same task)")
    p.add_argument("--data", required=True, type=Path, help="render-scenes folder (or images/ + targets/)")
    p.add_argument("--split", default="val", choices=("train", "val", "test", "all"), help="default val")
    p.add_argument("--band", type=int, default=4, help="edge band half-width in pixels (default 4)")
    p.add_argument("--refine-radius", type=int, default=4, help="guided_refine radius (default 4)")
    p.add_argument("--refine-eps", type=float, default=1e-3, help="guided_refine eps (default 1e-3)")
    p.add_argument("--no-tta", action="store_true", help="no horizontal-flip test-time augmentation")
    p.add_argument("--median-scale", action="store_true",
                   help="depth: scale each prediction by median(target) / median(prediction) first")
    p.add_argument("--json", type=Path, default=None, help="also write the table as JSON")
    p.add_argument("--threads", type=int, default=None)


def score(model, task, samples, band=None, refine=None, tta=True, batch_size=16, median: bool = False) -> dict:
    """Metrics (and ``edge_``-prefixed metrics over ``band``) of a model, optionally refined and (depth)
    median-scaled."""
    # lazy: `vision evaluate --help` starts without vision.pipelines.training.finetune
    from vision.pipelines.training.finetune import predict_samples

    return _metrics(task, predict_samples(model, task, samples, tta, refine, batch_size), samples, band, median)


def _metrics(task, pred, samples, band, median: bool = False) -> dict:
    from vision.dense import median_scale  # lazy: `vision evaluate --help` starts without vision.dense
    # lazy: `vision evaluate --help` starts without vision.pipelines.training.finetune
    from vision.pipelines.training.finetune import stacked_targets

    target = stacked_targets(task, samples)
    valid = task.valid_mask(target)
    if median:
        pred = median_scale(pred, target, valid).to(pred.dtype)
    out = dict(task.metrics(pred, target, valid))
    if band is not None:
        out.update({f"edge_{k}": v for k, v in task.metrics(pred, target, valid & band).items()})
    return out


def run(args) -> int:
    import torch  # lazy: `vision evaluate --help` starts without torch

    from vision.data.dense import DenseSamples  # lazy: `vision evaluate --help` starts without vision.data.dense
    from vision.dense import TASKS  # lazy: `vision evaluate --help` starts without vision.dense
    from vision.dense.edges import edge_band  # lazy: `vision evaluate --help` starts without vision.dense.edges
    # lazy: `vision evaluate --help` starts without vision.pipelines.bench.timing
    from vision.pipelines.bench.timing import print_table
    # lazy: `vision evaluate --help` starts without vision.pipelines.cli.predict
    from vision.pipelines.cli.predict import load_run_for_cli
    # lazy: `vision evaluate --help` starts without vision.pipelines.training.finetune
    from vision.pipelines.training.finetune import mean_prediction

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.json is not None:  # before any compute, and never over a file the evaluation reads
        # lazy: `vision evaluate --help` starts without vision.outputs
        from vision.outputs import prepare_file, refuse_inputs

        refuse_inputs(args.json, [("RUN", r / name) for r in args.runs for name in ("config.json", "model.safetensors",
                                                                                    "base.safetensors")], "--json")
        if args.json.exists() and args.data.resolve() in args.json.resolve().parents:
            raise ValueError(f"--json {args.json} would overwrite a file of --data {args.data}; write it elsewhere")
        prepare_file(args.json, "--json")
    loaded = [load_run_for_cli(r) for r in args.runs]
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
        from vision.outputs import write_text_atomic  # lazy: `vision evaluate --help` starts without vision.outputs

        write_text_atomic(args.json, json.dumps(rows, indent=1))
    return 0
