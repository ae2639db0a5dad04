"""``vision bench startup``: how long the command line takes to start, against ``python -c "import torch"``.

Every row is a fresh process, timed end to end (median of ``--repeat`` runs, interleaved so a busy machine
slows all rows alike); the "beyond torch" column subtracts the import-torch row of the same run. The target is
``vision --help`` and ``vision denoise --help`` within torch's import time + 1.5 s.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

DESCRIPTION = "start-up time of the vision command against importing torch (fresh processes)"
EPILOG = """examples:
  vision bench startup
  vision bench startup --repeat 9 --json startup.json
"""
TARGET_S = 1.5


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repeat", type=int, default=5, help="runs of each command (default 5)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also save the rows as JSON here")


def commands() -> dict[str, list[str]]:
    vision = shutil.which("vision")
    entry = [vision] if vision else [sys.executable, "-m", "vision.pipelines.cli"]
    return {
        'python -c "import torch"': [sys.executable, "-c", "import torch"],
        "vision --help": [*entry, "--help"],
        "vision denoise --help": [*entry, "denoise", "--help"],
        'python -c "import vision.kernels"': [sys.executable, "-c", "import vision.kernels"],
    }


def run(args) -> int:
    if args.repeat < 1:
        raise ValueError(f"--repeat must be at least 1, got {args.repeat}")
    cmds = commands()
    times = {name: [] for name in cmds}
    for _ in range(args.repeat):
        for name, argv in cmds.items():
            t0 = time.perf_counter()
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times['python -c "import torch"'])
    rows = []
    print(f"{'command':36s} {'median s':>9s} {'beyond torch s':>15s}")
    for name, ts in times.items():
        med = statistics.median(ts)
        rows.append({"command": name, "median_s": med, "beyond_torch_s": med - base})
        print(f"{name:36s} {med:9.2f} {med - base:15.2f}")
    for name in ("vision --help", "vision denoise --help"):
        extra = statistics.median(times[name]) - base
        print(f"{name}: {extra:.2f} s beyond torch (target <= {TARGET_S} s): {'met' if extra <= TARGET_S else 'MISSED'}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0
