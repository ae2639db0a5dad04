"""The command line of each ``vision bench WHAT``: its ``DESCRIPTION``, ``EPILOG``, ``add_arguments`` and a ``run``
that hands over to the bench itself (``vision.pipelines.bench.WHAT``, which loads torch and the peers).

``vision bench --help`` builds every bench's options, so these modules import no torch; the option values a bench
and its options both need live here, beside them.
"""
from __future__ import annotations

import argparse
from pathlib import Path

DTYPE_NAMES = ("bfloat16", "float16", "float32")  # --dtype; bench.timing.DTYPES maps each to its torch dtype

# vision bench backbone --models: the default and --quick sets, and the model every ratio is against
BACKBONE_MODELS = ("vig_tiny_patch16_224", "vig_small_patch16_224", "hvig_tiny_224", "vig_mamba_tiny_patch16_224",
                   "deit_tiny_patch16_224", "vit_small_patch16_224")
BACKBONE_QUICK_MODELS = ("vig_tiny_patch16_224", "vig_mamba_tiny_patch16_224", "deit_tiny_patch16_224")

# vision bench denoise-sequences --methods
SEQUENCE_METHODS = ("oidn high", "oidn fast", "flnr", "flr", "temporal", "temporal flr")

# vision bench gpu --only: the groups of bench.gpu.CASES
GPU_GROUPS = ("box", "guided", "regression", "restore", "spl")


def add_json(p: argparse.ArgumentParser) -> None:
    """``--json PATH``: every bench saves its rows as JSON there when asked."""
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also save every row as JSON here")


def add_strict(p: argparse.ArgumentParser) -> None:
    """``--strict``: a bench with acceptance checks exits with 1 when one fails."""
    p.add_argument("--strict", action="store_true", help="exit with status 1 when an acceptance check FAILs")
