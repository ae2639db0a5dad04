"""The options of ``vision bench guided-filter``; the bench itself is ``bench/guided_filter.py``."""
from __future__ import annotations

import argparse

from . import DTYPE_NAMES, add_json, add_strict

DESCRIPTION = "guided filter: ours against OpenCV ximgproc, kornia and a cumsum (Deep Guided Filter style) filter"

EPILOG = """\
examples:
  vision bench guided-filter                          # 1024x1024 and 4K (3840x2160), gray and colour guide
  vision bench guided-filter --quick                  # 1024x1024 only, fewer repeats
  vision bench guided-filter --sizes 512 1920x1080 --radius 16 --eps 1e-3
  vision bench guided-filter --device cpu --threads 2 --json gf-cpu.json
  vision bench guided-filter --device cpu --threads 1 --clock cpu   # steady ratios on a busy shared machine
  vision bench guided-filter --device cuda --dtype bfloat16 --peak-gbs 3350   # H100 SXM peak
  vision bench guided-filter --huge-radius --sizes 512   # box and guided: r = 10^6 / r = 128 per border

Sizes are N (N x N) or WIDTHxHEIGHT. Ratios ours/peer below 1 mean ours is faster. "ours/peer" uses
ours in the peer's border mode; "valid/peer" uses our default border. On CUDA, ours is also reported
in GB/s against the minimum traffic (forward: read guide and src, write the output; forward+backward:
also read the output gradient and write the two input gradients), as % of --peak-gbs and of a
device-to-device copy measured in the same run. On CPU the run ends with the acceptance checks at
1024x1024, r = 8: ours <= 1.5x OpenCV's time and >= 5x faster than kornia (separable).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", nargs="+", default=None, metavar="SIZE",
                   help="image sizes, N or WIDTHxHEIGHT (default: 1024 3840x2160)")
    p.add_argument("--repeat", type=int, default=None,
                   help="timed calls per entry (default: 20 on CUDA; on CPU up to 5, fewer for slow calls; "
                        "entries are timed round-robin)")
    p.add_argument("--radius", type=int, default=8, help="window radius r (window 2r+1; default 8)")
    p.add_argument("--eps", type=float, default=1e-2, help="regularisation eps (default 1e-2)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--dtype", choices=DTYPE_NAMES, default="float32",
                   help="tensor dtype of the inputs (default float32; OpenCV always gets float32)")
    p.add_argument("--quick", action="store_true", help="1024x1024 only, fewer repeats")
    add_json(p)
    p.add_argument("--peak-gbs", type=float, default=4800.0,
                   help="nominal memory bandwidth in GB/s for the roofline (default 4800, an H200)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch and OpenCV (default: theirs)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall time (default), or CPU time of the process (all threads summed; CPU device only): "
                        "steadier on a shared machine, best with --threads 1")
    add_strict(p)
    p.add_argument("--huge-radius", action="store_true",
                   help="instead of the peers: time box_filter and guided_filter at radius 10^6 against radius 128 "
                        "in every border mode (first size only) and print the ratios (target < 2x)")


def run(args) -> int:
    from .. import guided_filter  # lazy: `vision bench --help` builds these options without torch

    return guided_filter.run(args)
