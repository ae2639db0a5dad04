"""Experiment (BENCHMARKS.md, "Animation"): how stable can FLNR be on these sequences at all?

FLNR per frame and ``TemporalDenoiser`` are fed each frame's noise-free reference as their colour (albedo, normal,
depth, motion and index as rendered: the 1-spp Denoising passes), and scored as ``vision bench denoise-sequences``
scores (frames 4 on). With nothing left to average, what remains is the fit's own error on these buffers: an upper
bound on what accumulating more frames can give this fit. Printed beside per-frame OIDN high on the noisy frames and
the stability target (OIDN high's + 4.8 dB).

    python3 benchmarks/denoise/temporal_bound.py DIR [DIR...]    # blender_seq.py output folders
"""
import sys
from pathlib import Path

import torch

from vision.data.fields import GUIDES, SEQUENCE
from vision.denoise import TemporalDenoiser, denoise
from vision.pipelines.bench.denoise_sequences import methods, read_sequences, score_sequence


def guides(d):
    return {k: torch.from_numpy(d[k]) for k in GUIDES if k in d}


def per_frame(d, state):
    return denoise(torch.from_numpy(d["reference"]), **guides(d)).numpy()


def temporal(d, state):
    state.setdefault("den", TemporalDenoiser())
    extra = {k: torch.from_numpy(d[k]) for k in SEQUENCE if k in d}
    return state["den"](torch.from_numpy(d["reference"]), **extra, **guides(d)).numpy()


print("| sequence | OIDN high (noisy) | FLNR on the reference | `--temporal` on the reference | stability target |")
print("|---|---|---|---|---|")
for folder in sys.argv[1:]:
    for seq, frames in read_sequences(Path(folder)).items():
        runners = {"oidn": methods(["oidn high"])["oidn high"], "flnr": per_frame, "temporal": temporal}
        r = score_sequence(frames, runners, 4)
        cells = [f"{r[n]['psnr']:.2f} / {r[n]['stability']:.2f}" for n in runners]
        print(f"| `{seq}` | " + " | ".join(cells) + f" | {r['oidn']['stability'] + 4.8:.2f} |", flush=True)
