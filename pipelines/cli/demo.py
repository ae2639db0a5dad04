"""``vision demo``: run every bundled demo section on bundled inputs and write the results to one folder.

A section is a module exposing ``TITLE`` and ``run(out_dir: Path, device: str) -> list[Path]``; it is
named in ``SECTIONS``. A section whose product's extra is not installed (``denoise``, ``dense``) is skipped with
one line naming the extra, and the others run; asked for by ``--only``, it is an error (exit 2).
"""
from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

from vision.pipelines.cli import torch_device
from vision.pipelines.extras import extra_providing, install_line

SECTIONS = {
    "guided-filter": "vision.pipelines.demos.guided_filter",
    "spl": "vision.pipelines.demos.spl",
    "denoise": "vision.pipelines.demos.denoise",
    "dense": "vision.pipelines.demos.dense",
}


HELP = "run the bundled demos, results in ./vision-demo/"
DESCRIPTION = "Run every bundled demo on bundled inputs (no downloads) and write PNGs and side-by-side comparisons."
EPILOG = """examples:
  vision demo
  vision demo -o demo --only guided-filter
  vision demo --only denoise          # needs the [denoise] extra: pip install "locallinear-vision[denoise]"

Sections: guided-filter and spl need nothing more than the core install, denoise the [denoise] extra, dense the
[dense] extra; a section whose extra is missing is skipped with a line saying which to install.
"""


def add_arguments(p) -> None:
    p.add_argument("-o", "--out", type=Path, default=Path("vision-demo"), help="output folder (default ./vision-demo)")
    p.add_argument("--only", nargs="+", choices=sorted(SECTIONS), help="run only these sections")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")


def run(args) -> int:
    device = str(torch_device(args.device))  # None: cuda when available, else cpu
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = args.only or list(SECTIONS)
    for name in names:
        t0 = time.perf_counter()
        try:
            mod = importlib.import_module(SECTIONS[name])
            print(f"[{name}] {mod.TITLE}", flush=True)
            written = mod.run(out / name, device)
        except ModuleNotFoundError as err:
            line = _missing_extra(name, err)
            if line is None:
                raise
            print(line, file=sys.stderr, flush=True)
            if args.only:  # asked for by name: the run cannot do what was asked
                return 2
            continue
        for path in written:
            print(f"  wrote {path}")
        print(f"  ({time.perf_counter() - t0:.1f} s)")
    print(f"demo results are in {out.resolve()}")
    return 0


def _missing_extra(section: str, err: ModuleNotFoundError) -> str | None:
    """One line saying which extra the demo section needs, when ``err`` is a package that extra provides."""
    extra = extra_providing(err.name or "", ("demo", section))
    if extra is None:
        return None
    return (f"vision demo --only {section} needs the [{extra}] extra ({(err.name or '').split('.')[0]} is not "
            f"installed): {install_line(extra)}")
