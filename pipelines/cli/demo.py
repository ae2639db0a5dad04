"""``vision demo``: run every bundled demo section on bundled inputs and write the results to one folder.

A section is a module exposing ``TITLE`` and ``run(out_dir: Path, device: str) -> list[Path]``; it is
named in ``SECTIONS``. Later issues add their section here.
"""
from __future__ import annotations

import argparse
import importlib
import time
from pathlib import Path

SECTIONS = {
    "guided-filter": "vision.pipelines.demos.guided_filter",
    "spl": "vision.pipelines.demos.spl",
    "denoise": "vision.pipelines.demos.denoise",
    "dense": "vision.pipelines.demos.dense",
}


HELP = "run the bundled demos, results in ./vision-demo/"
DESCRIPTION = "Run every bundled demo on bundled inputs (no downloads) and write PNGs and side-by-side comparisons."
EPILOG = "examples:\n  vision demo\n  vision demo -o demo --only guided-filter\n"


def add_arguments(p) -> None:
    p.add_argument("-o", "--out", type=Path, default=Path("vision-demo"), help="output folder (default ./vision-demo)")
    p.add_argument("--only", nargs="+", choices=sorted(SECTIONS), help="run only these sections")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")


def run(args) -> int:
    import torch

    from vision.pipelines.cli import torch_device

    device = str(torch_device(args.device)) if args.device else ("cuda" if torch.cuda.is_available() else "cpu")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = args.only or list(SECTIONS)
    for name in names:
        mod = importlib.import_module(SECTIONS[name])
        t0 = time.perf_counter()
        print(f"[{name}] {mod.TITLE}", flush=True)
        written = mod.run(out / name, device)
        for path in written:
            print(f"  wrote {path}")
        print(f"  ({time.perf_counter() - t0:.1f} s)")
    print(f"demo results are in {out.resolve()}")
    return 0
