"""The options of ``vision bench local-regression``; the bench itself is ``bench/local_regression.py``."""
from __future__ import annotations

import argparse

from . import DTYPE_NAMES, add_json, add_strict

DESCRIPTION = ("local linear regression (fit + apply, K features, C targets): ours against plain PyTorch "
               "(box moments + torch.linalg.solve)")

EPILOG = """\
examples:
  vision bench local-regression                       # 1280x720 on CPU (1920x1080 on CUDA), K=6, C=3, r=8, scales 1 and 4
  vision bench local-regression --scales 4 --repeat 10
  vision bench local-regression --size 1920x1080 --features 8 --targets 3 --radius 16
  vision bench local-regression --device cpu --threads 2 --json llr-cpu.json
  vision bench local-regression --threads 1 --clock cpu      # steady ratios on a busy shared machine
  vision bench local-regression --huge-radius --size 256     # fit and FLR: r = 10^6 / r = 128 per border

Rows: "fit" = local_linear_fit alone, "fit+apply" = local_linear_apply(f, local_linear_fit(f, p, ...)).
The peer runs fit+apply only. Ratios below 1 mean ours is faster. Targets: on CPU at
1280x720, K=6, C=3, r=8: fit+apply at scale 1 >= 3x faster than the peer (forward), and fit+apply at
scale 4 <= 150 ms; on CUDA at 1920x1080, scale 4: fit+apply <= 1 ms.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", default=None, help="WIDTHxHEIGHT or N (default 1280x720 on CPU, 1920x1080 on CUDA)")
    p.add_argument("--features", type=int, default=6, help="K feature channels (default 6)")
    p.add_argument("--targets", type=int, default=3, help="C target channels (default 3)")
    p.add_argument("--radius", type=int, default=8, help="window radius r in full-resolution pixels (default 8)")
    p.add_argument("--eps", type=float, default=1e-2, help="ridge weight eps (default 1e-2)")
    p.add_argument("--scales", type=int, nargs="+", default=[1, 4], help="fit scales (default 1 4)")
    p.add_argument("--repeat", type=int, default=None,
                   help="timed calls per entry (default: 20 on CUDA; on CPU up to 5, fewer for slow calls)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--dtype", choices=DTYPE_NAMES, default="float32", help="input dtype (default float32)")
    p.add_argument("--no-peer", action="store_true", help="time ours only")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch and OpenCV (default: theirs)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall time, or CPU seconds of this process (steadier on a shared machine; "
                        "use with --threads 1, since waiting threads spin)")
    add_json(p)
    add_strict(p)
    p.add_argument("--huge-radius", action="store_true",
                   help="instead of the peer: time local_linear_fit (every border mode) and the FLR denoiser at "
                        "radius 10^6 against radius 128 and print the ratios (target < 2x)")


def run(args) -> int:
    from .. import local_regression  # lazy: `vision bench --help` builds these options without torch

    return local_regression.run(args)
