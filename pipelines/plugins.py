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


class Parser(argparse.ArgumentParser):
    """The parser of ``vision`` and of each command: a usage error (a missing argument, a value of the wrong kind
    or out of its option's range) is one line naming the option, exit code 2; ``--help`` shows the usage."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (options: {self.prog} --help)\n")


def _outside(value, low, high, low_open: bool, high_open: bool) -> str | None:
    """None when ``value`` lies within the bounds (an open end with ``low_open`` / ``high_open``), else where it
    must lie (``">= 1"``, ``"in [0, 100]"``)."""
    if not (low is not None and (value <= low if low_open else value < low)
            or high is not None and (value >= high if high_open else value > high)):
        return None
    lo = "" if low is None else f"{'(' if low_open else '['}{low:g}"
    hi = "" if high is None else f"{high:g}{')' if high_open else ']'}"
    return (f"in {lo}, {hi}" if low is not None and high is not None
            else f"{'>' if low_open else '>='} {low:g}" if low is not None
            else f"{'<' if high_open else '<='} {high:g}")


def check_number(value, flag: str, *, low=None, high=None, low_open: bool = False, high_open: bool = False):
    """``value`` (None passes: the option's default applies) when finite and within [low, high] (an open end
    with ``low_open`` / ``high_open``); otherwise a one-line ValueError naming ``flag``."""
    if value is None:
        return value
    if not math.isfinite(value):
        raise ValueError(f"{flag} {value}: must be a finite number")
    where = _outside(value, low, high, low_open, high_open)
    if where:
        raise ValueError(f"{flag} {value:g}: must be {where}")
    return value


def _noun(kind) -> str:
    return "an integer" if kind is int else "a number"


def _parsed(kind, text: str):
    """The option's ``text`` as ``kind`` (int or float), or argparse's one-line refusal saying what it must be."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {_noun(kind)}, got {text}") from None


def number(kind=int, *, low=None, high=None, low_open: bool = False, high_open: bool = False):
    """An argparse ``type``: the option's text as ``kind`` (int or float), finite and within the bounds (as
    :func:`check_number`), so a value out of range is refused while the command line is parsed, in one line naming
    the option (:class:`Parser`), before any file is read.

    Example:
        >>> p = Parser(prog="vision denoise")
        >>> _ = p.add_argument("--radius", type=number(int, low=1))
        >>> p.parse_args(["--radius", "0"])   # vision denoise: error: argument --radius: must be an integer >= 1, got 0
    """
    noun = _noun(kind)

    def parse(text: str):
        value = _parsed(kind, text)
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        where = _outside(value, low, high, low_open, high_open)
        if where:
            raise argparse.ArgumentTypeError(f"must be {noun} {where}, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse's own messages name the type
    return parse


def setting(check, name: str, kind=float):
    """An argparse ``type`` for an option that sets the config field ``name``: the option's text as ``kind``, then
    ``check(name, value)``, the very check the config runs when it is built (e.g. ``SPLConfig.check``). A bad value
    is refused while the command line is parsed, in one line naming the option and the field, and the rule lives
    in one place: the config.

    Example:
        >>> from vision.kernels.spl.config import SPLConfig
        >>> p = Parser(prog="vision edit")
        >>> _ = p.add_argument("--spl-weight", type=setting(SPLConfig.check, "spl_weight"))
        >>> p.parse_args(["--spl-weight", "-1"])  # vision edit: error: argument --spl-weight: spl_weight must be ...
    """
    def parse(text: str):
        value = _parsed(kind, text)
        try:
            return check(name, value)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = kind.__name__  # argparse's own messages name the type
    return parse


def check_numbers(args, spec: dict) -> None:
    """``check_number`` on each ``args.<dest>`` that ``spec`` names: {dest: dict of check_number's keywords};
    the flag is ``--dest`` with dashes."""
    for dest, kw in spec.items():
        check_number(getattr(args, dest, None), "--" + dest.replace("_", "-"), **kw)


POSITIVE = dict(low=0, low_open=True)
NON_NEGATIVE = dict(low=0)
QUALITY = dict(low=0, high=100)  # JPEG quality (OpenCV clamps anything else with a warning)
