"""The options of ``vision bench dense-head``; the bench itself is ``bench/dense_head.py``."""
from __future__ import annotations

import argparse

from . import DTYPE_NAMES, add_json, add_strict

DESCRIPTION = "dense-prediction heads: token-local and local-linear readout against a DPT-style decoder"

EPILOG = """\
examples:
  vision bench dense-head                               # ViG-T features at 128 and 224, batch 8, K = 1
  vision bench dense-head --threads 2 --device cpu
  vision bench dense-head --sizes 224 512 --out-channels 3 --json bench-out/dense-head.json
  vision bench dense-head --device cuda --dtype bfloat16

"x DPT" columns are ours over the DPT-style head's: parameters (below 1: fewer) and images/s (above 1:
faster). Targets: the token-local head has <= 1/10 of the DPT head's parameters and
>= 3x its throughput (forward and fwd+bwd, at every size).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", nargs="+", type=int, default=[128, 224], metavar="N",
                   help="square image sizes, multiples of 16 (default: 128 224)")
    p.add_argument("--batch", type=int, default=8, help="images per call (default 8)")
    p.add_argument("--backbone", default="vig_tiny_patch16_224", help="timm backbone (features_only) to read "
                   "features from (default vig_tiny_patch16_224)")
    p.add_argument("--out-channels", type=int, default=1, help="K, output channels of every head (default 1)")
    p.add_argument("--dpt-features", type=int, default=64, help="width of the DPT-style decoder (default 64)")
    p.add_argument("--repeat", type=int, default=None, help="timed calls per head (default: as many as fit, up to 5)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--dtype", choices=DTYPE_NAMES, default="float32",
                   help="heads and features dtype (default float32)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall time (default), or CPU time of the process (CPU device only; best with --threads 1)")
    add_json(p)
    add_strict(p)


def run(args) -> int:
    from .. import dense_head  # lazy: `vision bench --help` builds these options without torch

    return dense_head.run(args)
