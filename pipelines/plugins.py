"""What the ``vision`` commands and the ``vision bench`` benches share: the plug-in protocol and its option checks.

A plug-in is a module exposing ``DESCRIPTION`` (optionally a shorter ``HELP`` for the command list and an ``EPILOG``
with examples), ``add_arguments(parser)`` and ``run(args) -> int``; it is named in ``cli.COMMANDS`` or
``bench.BENCHES`` and :func:`add_plugin` turns it into a subcommand. Numeric options are checked before any work:
NaN, inf and values outside an option's meaningful range are refused with one line naming the flag (a ValueError,
which ``vision`` prints as one line with exit 2).

This module sits beside ``cli/`` and ``bench/`` so that neither folder imports the other's internals: ``cli``
lists ``bench`` as one of its commands, and ``bench`` needs only what is here (ARCHITECTURE.md, "pipelines/").
"""
from __future__ import annotations

import argparse
import math


def add_plugin(sub, name: str, mod) -> argparse.ArgumentParser:
    """Add the command or bench ``mod`` (DESCRIPTION, optional HELP and EPILOG, add_arguments, run) as ``name``."""
    p = sub.add_parser(name, help=getattr(mod, "HELP", mod.DESCRIPTION), description=mod.DESCRIPTION,
                       epilog=getattr(mod, "EPILOG", None), formatter_class=argparse.RawDescriptionHelpFormatter)
    mod.add_arguments(p)
    # every command and bench: -q / --quiet (warnings and errors only; a plug-in's own --quiet, e.g. "no progress
    # bar", does that too) and -v / --verbose (debug messages), over VISION_VERBOSITY (vision.kernels.runtime.logs)
    flags = p._option_string_actions
    if "-q" not in flags and "--quiet" not in flags:
        p.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only (VISION_VERBOSITY=warning)")
    if "-v" not in flags and "--verbose" not in flags:
        p.add_argument("-v", "--verbose", action="store_true", help="debug messages too (VISION_VERBOSITY=debug)")
    p.set_defaults(func=mod.run)
    return p


def check_number(value, flag: str, *, low=None, high=None, low_open: bool = False, high_open: bool = False):
    """``value`` (None passes: the option's default applies) when finite and within [low, high] (an open end
    with ``low_open`` / ``high_open``); otherwise a one-line ValueError naming ``flag``."""
    if value is None:
        return value
    if not math.isfinite(value):
        raise ValueError(f"{flag} {value}: must be a finite number")
    if low is not None and (value <= low if low_open else value < low) or \
            high is not None and (value >= high if high_open else value > high):
        lo = "" if low is None else f"{'(' if low_open else '['}{low:g}"
        hi = "" if high is None else f"{high:g}{')' if high_open else ']'}"
        where = (f"in {lo}, {hi}" if low is not None and high is not None
                 else f"{'>' if low_open else '>='} {low:g}" if low is not None
                 else f"{'<' if high_open else '<='} {high:g}")
        raise ValueError(f"{flag} {value:g}: must be {where}")
    return value


def check_numbers(args, spec: dict) -> None:
    """``check_number`` on each ``args.<dest>`` that ``spec`` names: {dest: dict of check_number's keywords};
    the flag is ``--dest`` with dashes."""
    for dest, kw in spec.items():
        check_number(getattr(args, dest, None), "--" + dest.replace("_", "-"), **kw)


POSITIVE = dict(low=0, low_open=True)
NON_NEGATIVE = dict(low=0)
QUALITY = dict(low=0, high=100)  # JPEG quality (OpenCV clamps anything else with a warning)
