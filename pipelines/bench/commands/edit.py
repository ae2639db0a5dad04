"""The options of ``vision bench edit``; the bench itself is ``bench/edit.py``."""
from __future__ import annotations

import argparse

DESCRIPTION = "time one guided SPL stage (decode, optimise, encode) against one SD1.5 UNet step"

EPILOG = """examples:
  vision bench edit                          # 512 x 512, fp16 on CUDA (fp32 on CPU)
  vision bench edit --size 256 --spl-steps 100 --repeat 3
  vision bench edit --device cpu --threads 2 --repeat 1    # a CPU ratio on a shared machine
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", type=int, default=512, help="image side in pixels (default 512)")
    p.add_argument("--spl-steps", type=int, default=100, help="optimisation steps per stage (default 100)")
    p.add_argument("--repeat", type=int, default=None, help="timed samples per row (default: fit a budget)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    p.add_argument("--dtype", choices=("float16", "bfloat16", "float32"), default=None,
                   help="model precision (default float16 on CUDA, float32 on CPU)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's)")


def run(args) -> int:
    from .. import edit  # lazy: `vision bench --help` builds these options without torch

    return edit.run(args)
