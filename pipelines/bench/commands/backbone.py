"""The options of ``vision bench backbone``; the bench itself is ``bench/backbone.py``."""
from __future__ import annotations

import argparse

from . import BACKBONE_MODELS, DTYPE_NAMES, add_json, add_strict

DESCRIPTION = "linear-attention backbones (ViG, H-ViG, Mamba-style) against DeiT-T / ViT-S, and the GLA op"

EPILOG = """\
examples:
  vision bench backbone                         # 224, 512, 1024; ViG-T/S, H-ViG-T, Mamba-style T, DeiT-T, ViT-S; GLA op
  vision bench backbone --quick                 # 224 and 1024, tiny models only, GLA at T=4096 only
  vision bench backbone --device cpu --threads 1 --clock cpu    # steady ratios on a busy shared machine
  vision bench backbone --device cuda --dtype bfloat16 --batch 8 --json bench-out/backbone.json
  vision bench backbone --skip-models --gla-t 1024 4096 16384   # the GLA op only

Images/s use the same batch for every model; "x DeiT-T" is images/s over DeiT-T's at that size (above 1:
faster), "mem x DeiT-T" peak memory over DeiT-T's (below 1: less). GLA rows give the best and the
median of round-robin timed calls (ratios use the best). The CPU run ends with the
acceptance checks: chunked GLA >= 20x faster than the naive recurrence at T = 4096, D = 64, and ViG-T at
1024x1024 using less peak memory than DeiT-T; on CUDA: ViG-T at 1024x1024 >= 3x DeiT-T's images/s.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", nargs="+", type=int, default=None, metavar="N",
                   help="square input sizes (default: 224 512 1024; --quick: 224 1024)")
    p.add_argument("--models", nargs="+", default=None, metavar="NAME", help="timm model names (default: "
                   + " ".join(BACKBONE_MODELS) + ")")
    p.add_argument("--batch", type=int, default=None, help="images per call, the same for every model "
                   "(default: 8 on CUDA, 1 on CPU)")
    p.add_argument("--repeat", type=int, default=None,
                   help="timed calls per model (default: as many as fit, up to 5); rounds for the GLA op (default 10)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--dtype", choices=DTYPE_NAMES, default="float32", help="model and input dtype (default float32)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall time (default), or CPU time of the process (CPU device only; best with --threads 1)")
    p.add_argument("--gla-t", nargs="+", type=int, default=None, metavar="T",
                   help="sequence lengths for the GLA op (default: 1024 4096; --quick: 4096)")
    p.add_argument("--gla-shape", nargs=3, type=int, default=(1, 1, 64), metavar=("B", "H", "D"),
                   help="batch, heads and head width of the GLA op (default 1 1 64)")
    p.add_argument("--skip-models", action="store_true", help="time the GLA op only")
    p.add_argument("--skip-gla", action="store_true", help="time the models only")
    p.add_argument("--quick", action="store_true", help="fewer sizes, models and repeats")
    add_json(p)
    add_strict(p)


def run(args) -> int:
    from .. import backbone  # lazy: `vision bench --help` builds these options without torch

    return backbone.run(args)
