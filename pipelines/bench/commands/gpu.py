"""The options of ``vision bench gpu``; the bench itself is ``bench/gpu.py``."""
from __future__ import annotations

import argparse

from . import GPU_GROUPS, add_json

DESCRIPTION = "each operator's kernel time, call latency, syncs and GB/s against the bandwidth floor (GPU method)"

EPILOG = """examples:
  vision bench gpu                          # every case on CUDA at the target sizes
  vision bench gpu --only box guided        # some cases
  vision bench gpu --device cpu --small     # the same code on CPU at small sizes (a check, not a measurement)
  vision bench gpu --json gpu.json
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--only", nargs="+", default=None, choices=GPU_GROUPS,
                   help="measure only these groups of cases")
    p.add_argument("--small", action="store_true", help="small inputs (for a quick check on CPU)")
    add_json(p)


def run(args) -> int:
    from .. import gpu  # lazy: `vision bench --help` builds these options without torch

    return gpu.run(args)
