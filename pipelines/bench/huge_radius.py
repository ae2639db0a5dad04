"""``--huge-radius`` of ``vision bench guided-filter`` and ``vision bench local-regression``: what a radius far
beyond the image costs against radius 128, per border mode.

Any radius should cost what the image costs ("valid" clamps it to the image size, the padded borders reduce it
below one period in closed form, the Triton fit visits at most 2n - 1 taps), so radius 10^6 should take about what
radius 128 takes. The unit tests check the mechanism (the windows summed); this times it. Both radii of an
op are timed round-robin in one run, and the ratio (10^6 / 128) is printed with the target (< 2x).
"""
from __future__ import annotations

from typing import Callable
import json
import time

import torch

from vision.denoise.flr import flr
from vision.kernels import box_filter, guided_filter, local_linear_fit

from .timing import format_time, print_table, time_interleaved

HUGE, BASE = 10**6, 128
BORDERS = ("valid", "reflect", "replicate", "symmetric")
TARGET = 2.0


def cases(names: tuple[str, ...], h: int, w: int, device, dtype) -> dict[str, Callable[[int, str], object]]:
    """(radius, border) -> one call, for each op named: "box", "guided", "local_linear_fit", "flr"."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(1, 3, h, w, generator=gen).to(device=device, dtype=dtype)
    f = torch.rand(1, 6, h, w, generator=gen).to(device=device, dtype=dtype)
    every = {
        "box": lambda r, b: box_filter(x, r, b),
        "guided": lambda r, b: guided_filter(x[:, :1], x, r, 1e-2, b),
        "local_linear_fit": lambda r, b: local_linear_fit(f, x, r, 1e-2, 1, b),
        "flr": lambda r, b: _flr(x, f, r),
    }
    return {name: every[name] for name in names}


def _flr(color, f, r):
    return flr(color, {"albedo": f[:, :3], "normal": f[:, 3:]}, r)


def run(names: tuple[str, ...], h: int, w: int, device, dtype, repeat: int | None, clock=None) -> list[dict]:
    """Time every op of ``names`` at radius 128 and 10^6 per border ("flr": the denoiser, "valid" only) and print
    the ratios; returns the rows."""
    kw = {} if clock is None else {"clock": clock}
    rows = []
    for name, call in cases(names, h, w, device, dtype).items():
        for border in (("valid",) if name == "flr" else BORDERS):
            res = time_interleaved({r: (lambda r=r: call(r, border)) for r in (BASE, HUGE)}, device=device,
                                   repeat=repeat, **kw)
            base, huge = res[BASE], res[HUGE]
            if isinstance(base, Exception) or isinstance(huge, Exception):
                err = base if isinstance(base, Exception) else huge
                rows.append(dict(op=name, border=border, status=f"error: {type(err).__name__}: {err}"))
                continue
            ratio = huge / base
            rows.append(dict(op=name, border=border, size=f"{w}x{h}", r128=format_time(base),
                             r1e6=format_time(huge), ratio=f"{ratio:.2f}", target=f"< {TARGET:g}x",
                             status="met" if ratio < TARGET else "MISSED", seconds_128=base, seconds_1e6=huge))
    print_table(rows, ["op", "border", "size", "r128", "r1e6", "ratio", "target", "status"],
                title=f"huge radius: time at r = 10^6 / time at r = {BASE}, {w}x{h}")
    return rows


def run_from_args(args, bench: str, size: tuple[int, int], device, dtype, names: tuple[str, ...]) -> int:
    """The ``--huge-radius`` run of a bench: its --repeat, --clock, --json and --strict, the first size only."""
    h, w = size
    clock = time.process_time if getattr(args, "clock", "wall") == "cpu" else None
    rows = run(names, h, w, device, dtype, args.repeat, clock)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"bench": bench, "case": "huge-radius", "size": [w, h], "rows": rows},
                                        indent=1))
        print(f"rows saved to {args.json}")
    missed = any(r.get("status") != "met" for r in rows)
    return 1 if (args.strict and missed) else 0
