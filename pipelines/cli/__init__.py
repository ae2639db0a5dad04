"""The ``vision`` command line.

Each subcommand lives in its own module, which exposes ``add_parser(subparsers)``; the module is named
in ``COMMANDS`` and imported only when the command line is built, so a missing optional dependency of
one command never breaks the others.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# name -> module holding add_parser(subparsers); later commands add their line here.
COMMANDS = {
    "demo": "vision.pipelines.cli.demo",
    "bench": "vision.pipelines.bench",
    "restore-structure": "vision.pipelines.cli.restore_structure",
    "render-scenes": "vision.pipelines.cli.render_scenes",
    "edit": "vision.pipelines.cli.edit",
    "denoise": "vision.pipelines.cli.denoise",
    "finetune": "vision.pipelines.cli.finetune",
    "predict": "vision.pipelines.cli.predict",
    "evaluate": "vision.pipelines.cli.evaluate",
    "train-denoiser": "vision.pipelines.cli.train_denoiser",
}

EPILOG = """examples:
  vision demo                      # run every bundled demo, results in ./vision-demo/
  vision bench guided-filter       # time ours against OpenCV, kornia and a cumsum implementation
  vision COMMAND --help            # options and an example for each command
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vision",
        description="locallinear-vision: local linear models as fast operators, and the tools built on them.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from vision import __version__

    parser.add_argument("--version", action="version", version=f"locallinear-vision {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        try:
            importlib.import_module(module).add_parser(sub)
        except ImportError as err:  # a missing optional dependency disables this command only
            q = sub.add_parser(name, help=f"(unavailable: {err})")
            q.set_defaults(func=lambda args, err=err: print(f"vision: this command is unavailable here: {err}") or 2)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, FileExistsError) as err:
        # Bad input is the user's to fix: one clear line, no traceback.
        print(f"vision {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
