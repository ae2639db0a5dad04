"""The options of ``vision bench compile``; the bench itself is ``bench/compile_times.py``."""
from __future__ import annotations

import argparse

from . import add_json

DESCRIPTION = "cold compile time, registers and spills of every Triton kernel for sm_80/86/89/90, without a GPU"

EPILOG = """examples:
  vision bench compile                      # one configuration per kernel, sm_90
  vision bench compile --arch 86 --arch 90 --workers 4
  vision bench compile --all --json compile.json
  vision bench compile --kernel guided --arch 86

Target: every kernel compiles in at most 10 CPU seconds, with no spills.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", type=int, action="append", choices=(80, 86, 89, 90), default=None,
                   help="GPU architecture (sm_<N>); repeat for several (default 90)")
    p.add_argument("--all", action="store_true", help="every configuration the launchers reach, not one per kernel")
    p.add_argument("--kernel", default=None, metavar="TEXT",
                   help="only the kernels whose name contains TEXT (e.g. guided, _fit_color_kernel)")
    p.add_argument("--workers", type=int, default=2, help="compile processes (default 2)")
    add_json(p)


def run(args) -> int:
    from .. import compile_times  # lazy: `vision bench --help` builds these options without torch

    return compile_times.run(args)
