"""The options of ``vision bench denoise-sequences``; the bench itself is ``bench/denoise_sequences.py``."""
from __future__ import annotations

from pathlib import Path

from . import SEQUENCE_METHODS, add_json

HELP = "animation denoising (temporal FLNR) against per-frame OIDN on rendered sequences"

DESCRIPTION = ("Per-frame PSNR, frame-to-frame stability and PSNR on disoccluded pixels of vision denoise "
               "--temporal, per-frame FLNR / FLR and per-frame OIDN on Blender sequences with motion vectors.")

EPILOG = """examples:
  blender -b -noaudio --factory-startup -t 1 --python benchmarks/denoise/blender_seq.py -- data/seq
  vision bench denoise-sequences data/seq
  vision bench denoise-sequences data/seq --sequences orbit --methods temporal,flnr --json seq.json
  vision bench denoise-sequences data/seq --methods flnr,temporal --weights my_flnr.safetensors
  vision bench denoise-sequences data/seq --figures figs/   # figs/SEQ_frame.png, figs/SEQ_flicker.png

columns: PSNR (mean per-frame dB, tonemapped), stability (dB of the frame-to-frame differences), disoccluded
(dB on pixels disoccluded in the last two frames), flat (dB on pixels more than 2 from any edge of the normal,
log depth, albedo or object index passes; the share of such pixels is printed per sequence), JOD
(ColorVideoVDP, 24 fps, tonemapped frames on the standard_fhd display, 10 = no visible difference; "-" without
pip install cvvdp), s/frame.

Targets for `--temporal`: PSNR >= OIDN high's, stability >= OIDN high's + 4.8 dB, disoccluded PSNR >=
per-frame FLNR's - 0.3 dB, per sequence.
"""


def add_arguments(p) -> None:
    p.add_argument("folder", type=Path, metavar="DIR", help="a benchmarks/denoise/blender_seq.py output folder")
    p.add_argument("--sequences", default=None, help="comma-separated sequence names (default: all)")
    p.add_argument("--methods", default="oidn high,oidn fast,flnr,temporal",
                   help=f"comma-separated, from: {', '.join(SEQUENCE_METHODS)} (default: oidn high,oidn fast,flnr,temporal)")
    p.add_argument("--weights", type=Path, default=None, metavar="FILE",
                   help="FLNR weights for flnr and temporal (a .safetensors file or save_pretrained folder; default: "
                        "the bundled ones)")
    p.add_argument("--from", dest="first", type=int, default=4, help="first scored frame (default 4)")
    add_json(p)
    p.add_argument("--figures", type=Path, default=None, metavar="DIR",
                   help="also write, per sequence, DIR/SEQ_frame.png (the last frame: noisy, each method, reference) "
                        "and DIR/SEQ_flicker.png (each method's error in the last frame-to-frame difference)")


def run(args) -> int:
    from .. import denoise_sequences  # lazy: `vision bench --help` builds these options without torch

    return denoise_sequences.run(args)
