"""Numeric options checked before any work: NaN, inf, and values outside an option's meaningful range are
refused with one line naming the flag (a ValueError, which ``vision`` prints as one line with exit 2)."""
from __future__ import annotations

import math


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
