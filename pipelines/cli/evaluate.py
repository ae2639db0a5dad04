"""``vision evaluate``: score `vision finetune` runs on held-out scenes, everywhere and near discontinuities,
with and without guided-filter refinement, beside the predict-the-training-mean baseline."""
from __future__ import annotations

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


def run(args) -> int:
    # lazy: `vision evaluate --help` builds this parser without torch and the [dense] extra's modules
    from vision.pipelines.cli import evaluate_run

    return evaluate_run.run(args)
