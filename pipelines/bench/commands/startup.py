"""The options of ``vision bench startup``; the bench itself is ``bench/startup.py``."""
from __future__ import annotations

import argparse

from . import add_json

DESCRIPTION = ("start-up time of the vision command against importing torch (fresh processes), and how fast "
               "vision edit fails on a missing model")

EPILOG = """examples:
  vision bench startup
  vision bench startup --repeat 9 --json startup.json

Targets: vision --help and vision denoise --help within torch's import time + 1.5 s; vision edit on a model
missing from an empty Hugging Face cache fails (status 2) in under 2 s, before torch loads; vision denoise of one
64 x 64 frame within torch's import time + 2 s (python -X importtime -m vision.pipelines.cli denoise ... says where
the time goes). Each row gives wall and CPU time: on a busy machine wall time grows with the load, CPU time does not;
OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 makes the two agree on an idle one.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repeat", type=int, default=5, help="runs of each command (default 5)")
    add_json(p)


def run(args) -> int:
    from .. import startup  # lazy: `vision bench --help` builds these options without torch

    return startup.run(args)
