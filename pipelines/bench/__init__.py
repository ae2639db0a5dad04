"""``vision bench WHAT``: run ours and its peers on the same inputs in one process and print ratios.

Each benchmark is a module here. Its command line is a module of ``commands/`` with the command plug-in protocol
(``vision.pipelines.plugins``: ``DESCRIPTION``, ``add_arguments(parser)``, and ``run(args)``, which imports the
bench), named in ``BENCHES``, so that ``vision bench --help`` lists every bench without loading torch. Results hold
on noisy machines because every row is timed in the same run and reported as a ratio against a peer (see
``timing.py``).
"""
from __future__ import annotations

import functools
import importlib

from vision.outputs import prepare_file
from vision.pipelines.plugins import add_plugin, NON_NEGATIVE, POSITIVE, check_numbers

# what -> module; a new benchmark adds its line here.
BENCHES = {
    "backbone": "vision.pipelines.bench.commands.backbone",
    "guided-filter": "vision.pipelines.bench.commands.guided_filter",
    "local-regression": "vision.pipelines.bench.commands.local_regression",
    "spl": "vision.pipelines.bench.commands.spl",
    "edit": "vision.pipelines.bench.commands.edit",
    "denoise": "vision.pipelines.bench.commands.denoise",
    "denoise-sequences": "vision.pipelines.bench.commands.denoise_sequences",
    "dense-head": "vision.pipelines.bench.commands.dense_head",
    "gpu": "vision.pipelines.bench.commands.gpu",
    "startup": "vision.pipelines.bench.commands.startup",
    "compile": "vision.pipelines.bench.commands.compile_times",
}


HELP = "time ours against peers on the same inputs, with ratios"
DESCRIPTION = "Time the project against its peers on the same inputs in one run and print ratios (ours / peer)."
EPILOG = "examples:\n  vision bench guided-filter\n  vision bench guided-filter --sizes 1024 --repeat 5\n  vision bench gpu\n"


def add_arguments(p) -> None:
    what = p.add_subparsers(dest="what", metavar="WHAT")
    for name, module in BENCHES.items():
        try:
            mod = importlib.import_module(module)
            add_plugin(what, name, mod).set_defaults(func=functools.partial(_checked_run, mod.run))
        except ImportError as err:  # a missing optional dependency disables this benchmark only
            q = what.add_parser(name, help=f"(unavailable: {err})")
            q.set_defaults(func=_unavailable, import_error=err)
    p.set_defaults(bench_parser=p)


def run(args) -> int:
    """Reached only without WHAT (each benchmark sets its own ``func``): the list of benchmarks."""
    args.bench_parser.print_help()
    return 2


def _checked_run(run, args) -> int:
    """``run(args)`` once the bench's ``--eps`` and ``--radius`` (when it has them) are finite and in range, and
    its ``--json`` file (when it has one) is known to be writable: a read-only or missing place fails in one
    line before the bench runs, not after."""
    check_numbers(args, dict(eps=POSITIVE, radius=NON_NEGATIVE))
    if getattr(args, "json", None):
        prepare_file(args.json, "--json")
    return run(args)


def _unavailable(args) -> int:
    raise args.import_error  # `vision` reports it in one line: the extra to install, or the import error
