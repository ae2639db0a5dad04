"""The options of ``vision bench spl``; the bench itself is ``bench/spl.py``."""
from __future__ import annotations

import argparse

from . import add_json, add_strict

DESCRIPTION = "structure preservation loss: ours (fused) against an unfused cumsum implementation of the same math"

EPILOG = """\
examples:
  vision bench spl                                    # loss+gradient at 512^2 and 1024^2, 100-step restore at 512^2
  vision bench spl --sizes 256 2048 --restore-size 1024
  vision bench spl --device cpu --threads 2 --json spl-cpu.json
  vision bench spl --device cpu --threads 1 --clock cpu       # steady ratios on a busy shared machine
  vision bench spl --device cuda --strict             # exit 1 when an acceptance check fails

Ratios are peer time / our time (above 1: ours is faster). Acceptance (printed at the end):
CPU: ours >= 2x faster than the unfused implementation for loss+gradient at every size;
CUDA: >= 5x, and 100 restore steps at 512^2 in <= 50 ms.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", nargs="+", default=None, metavar="SIZE",
                   help="loss+gradient sizes, N or WIDTHxHEIGHT (default: 512 1024)")
    p.add_argument("--restore-size", default="512", metavar="SIZE", help="size of the restore run (default 512)")
    p.add_argument("--steps", type=int, default=100, help="steps of the restore run (default 100)")
    p.add_argument("--radius", type=int, default=5, help="window radius (default 5)")
    p.add_argument("--eps", type=float, default=1e-4, help="eps (default 1e-4)")
    p.add_argument("--repeat", type=int, default=None, help="timed calls per entry (default: by time budget)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch and OpenCV (default: theirs)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall time (default), or this process's CPU time (CPU only; steadier on a busy shared machine)")
    add_json(p)
    add_strict(p)


def run(args) -> int:
    from .. import spl  # lazy: `vision bench --help` builds these options without torch

    return spl.run(args)
