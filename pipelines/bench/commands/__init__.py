"""The command line of each ``vision bench WHAT``: its ``DESCRIPTION``, ``EPILOG``, ``add_arguments`` and a ``run``
that hands over to the bench itself (``vision.pipelines.bench.WHAT``, which loads torch and the peers).

``vision bench --help`` builds every bench's options, so these modules import no torch; the option values a bench
and its options both need live here, beside them.
"""
from __future__ import annotations

DTYPE_NAMES = ("bfloat16", "float16", "float32")  # --dtype; bench.timing.DTYPES maps each to its torch dtype

# vision bench backbone --models: the default and --quick sets, and the model every ratio is against
BACKBONE_MODELS = ("vig_tiny_patch16_224", "vig_small_patch16_224", "hvig_tiny_224", "vig_mamba_tiny_patch16_224",
                   "deit_tiny_patch16_224", "vit_small_patch16_224")
BACKBONE_QUICK_MODELS = ("vig_tiny_patch16_224", "vig_mamba_tiny_patch16_224", "deit_tiny_patch16_224")

# vision bench denoise-sequences --methods
SEQUENCE_METHODS = ("oidn high", "oidn fast", "flnr", "flr", "temporal", "temporal flr")

# vision bench gpu --only: the groups of bench.gpu.CASES
GPU_GROUPS = ("box", "guided", "regression", "restore", "spl")
