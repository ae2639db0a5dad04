"""The options of ``vision bench denoise``; the bench itself is ``bench/denoise.py``."""
from __future__ import annotations

import argparse
from pathlib import Path

from vision.pipelines.plugins import number

from . import add_json, add_strict

DESCRIPTION = ("render-frame denoisers on rendered scenes vs their references: noisy, box, FLR, FLNR, OIDN "
               "(PSNR, SSIM, relMSE, HDR-FLIP, time per frame)")

EPILOG = """\
examples:
  vision bench denoise                          # the bundled scenes (3 scenes x 2 frames, 128x128)
  vision bench denoise --data data/scenes --split test --json bench-denoise.json
  vision render-scenes --out data/test --count 24 --size 128 --spp-ref 2048 --noisy-seeds 2 --seed 101
  vision bench denoise --data data/test         # a vision render-scenes folder, e.g. scenes no model has seen
  vision bench denoise --no-oidn --radius 6
  vision bench denoise --frames data/eval_blender/manifest.json   # real Blender files (benchmarks/denoise/)
  vision bench denoise --frames data/spp_eval/manifest.json --spp 1 4 16 64 256   # one table per sample count
  vision bench denoise --time-size 1280x720 --threads 2       # also CPU time per 1280x720 frame (ratios)
  vision bench denoise --time-size 1280x720 --time-spp 16     # ... as for a 16-spp renderer file
  vision bench denoise --no-oidn --cuda-size 1920x1080 --repeat 20   # also GPU time per 1920x1080 frame
  vision bench denoise --cuda-size 1920x1080 --timing-only           # only the GPU rows (syncs, graph, kernels)
  vision bench denoise --cuda-size 64x64 --device cpu --timing-only  # the same calls on CPU tensors

Tonemap for PSNR/SSIM: clamp to [0, 1], then gamma 1/2.2. relMSE: mean((x-y)^2/(y^2+0.01)).
Targets checked here (each printed with PASS or FAIL): FLR >= 12 dB above the 1-spp input on average; FLNR >= FLR + 2 dB,
within 2 dB of OIDN high (albedo+normal, cleanAux), HDR-FLIP <= OIDN high's + 0.02, and (with
--time-size 1280x720) <= 1/5 of OIDN fast's CPU time; joint upsampling from 1/2-resolution colour
(rows "1/2 mean": 2x2 means, "1/2 pick": one sample in four, "1/2 pick+phase": the same with its pixel
known) <= 1.5 dB below full-resolution FLR; (with --cuda-size 1920x1080, on a GPU) FLR <= 1 ms and
FLNR <= 5 ms per frame.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, default=None, help="vision render-scenes folder (default: bundled scenes)")
    p.add_argument("--frames", type=Path, default=None, metavar="MANIFEST",
                   help="renderer files as written (Blender Cycles, Mitsuba AOVs, PFM) listed in a JSON manifest "
                        "with their references (see benchmarks/denoise/README.md); rows per scene and spp, OIDN "
                        "with prefiltered (noisy) albedo and normal")
    p.add_argument("--spp", type=int, nargs="+", default=None, metavar="N",
                   help="with --frames: only the frames of these samples per pixel (e.g. 1 4 16 64 256), and one "
                        "table per sample count (default: every frame, still one table per sample count)")
    p.add_argument("--split", default="all", choices=("train", "val", "test", "all"),
                   help="scenes of this split only (default all)")
    p.add_argument("--radius", type=int, default=8, help="FLR and box radius (default 8)")
    p.add_argument("--eps", type=float, default=1e-2, help="FLR ridge weight (default 0.01)")
    p.add_argument("--repeat", type=int, default=3, help="timed calls per method and frame (median; default 3)")
    p.add_argument("--no-oidn", action="store_true", help="skip the OIDN rows")
    p.add_argument("--weights", type=Path, default=None, help="FLNR weights (default: the bundled ones)")
    p.add_argument("--no-flnr", action="store_true", help="skip the FLNR row")
    p.add_argument("--time-size", default=None, metavar="WxH",
                   help="also time FLR, FLNR and OIDN fast on the first frame enlarged to this size, e.g. "
                        "1280x720 (--repeat rounds, methods interleaved)")
    p.add_argument("--time-spp", type=number(int, low=1), default=None, metavar="N",
                   help="with --time-size: the timed frame says it has N samples per pixel (default: unknown, as "
                        "the bundled frames), so the input blend runs as for a renderer's file of that many (with "
                        "its noise cap; at 1 spp it is skipped)")
    p.add_argument("--cuda-size", default=None, metavar="WxH",
                   help="also time FLR (scales 1, 2, 4) and FLNR on the GPU per frame of this size, the buffers "
                        "resident there as tensors (targets at 1920x1080: FLR <= 1 ms, FLNR <= 5 ms)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="where --cuda-size times the denoisers (default cuda; cpu runs the same calls on CPU "
                        "tensors, e.g. with a small --cuda-size 64x64 to check the command)")
    p.add_argument("--timing-only", action="store_true",
                   help="with --cuda-size: only the device timing rows, no quality table")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's)")
    add_json(p)
    add_strict(p)


def run(args) -> int:
    from .. import denoise  # lazy: `vision bench --help` builds these options without torch

    return denoise.run(args)
