"""``vision bench WHAT``: run ours and its peers on the same inputs in one process and print ratios.

Each benchmark is a module here exposing ``DESCRIPTION``, ``add_arguments(parser)`` and ``run(args)``;
it is named in ``BENCHES``. Results hold on noisy machines because every row is timed in the same run
and reported as a ratio against a peer (see ``timing.py``).
"""
from __future__ import annotations

import argparse
import importlib

# what -> module; later issues add their line here.
BENCHES = {
    "backbone": "vision.pipelines.bench.backbone",
    "guided-filter": "vision.pipelines.bench.guided_filter",
    "local-regression": "vision.pipelines.bench.local_regression",
    "spl": "vision.pipelines.bench.spl",
    "edit": "vision.pipelines.bench.edit",
    "denoise": "vision.pipelines.bench.denoise",
    "dense-head": "vision.pipelines.bench.dense_head",
    "gpu": "vision.pipelines.bench.gpu",
    "startup": "vision.pipelines.bench.startup",
}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="time ours against peers on the same inputs, with ratios",
        description="Time the project against its peers on the same inputs in one run and print ratios (ours / peer).",
        epilog="examples:\n  vision bench guided-filter\n  vision bench guided-filter --sizes 1024 --repeat 5\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    what = p.add_subparsers(dest="what", metavar="WHAT")
    for name, module in BENCHES.items():
        try:
            mod = importlib.import_module(module)
        except ImportError as err:  # a missing optional dependency disables this benchmark only
            q = what.add_parser(name, help=f"(unavailable: {err})")
            q.set_defaults(func=lambda args, err=err, name=name: _unavailable(name, err))
            continue
        q = what.add_parser(name, help=mod.DESCRIPTION, description=mod.DESCRIPTION,
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog=getattr(mod, "EPILOG", None))
        mod.add_arguments(q)
        q.set_defaults(func=mod.run)
    p.set_defaults(func=lambda args: p.print_help() or 2)


def _unavailable(name: str, err: Exception) -> int:
    print(f"vision bench {name}: unavailable here: {err}")
    return 2
