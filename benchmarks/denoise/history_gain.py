"""Experiment (CHANGELOG.md, 0.4.0): what FLNR's history input buys on colour that averages k noisy frames.

For every scene of a ``vision render-scenes`` folder rendered with several noisy seeds, the colour is the mean of the
first k of its 1-spp frames (what a history of k frames holds where nothing moved), for k = 1, 2, 4, 8, 16 (as many as
there are). Prints the mean PSNR over the scenes of FLR, of FLNR with the bundled weights, and of FLNR with
``WEIGHTS`` told k (``history``) and not told (history 1).

    python3 benchmarks/denoise/history_gain.py DATA WEIGHTS [--bundled OTHER.safetensors]
"""
import argparse
import math

import torch

from vision.data import RenderedScenes
from vision.data.fields import FLNR_GUIDES, FLNR_TRAINING
from vision.denoise import denoise
from vision.denoise.flnr import load_flnr

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("data")
p.add_argument("weights")
p.add_argument("--bundled", default=None, help="weights to compare with (default: the bundled ones)")
args = p.parse_args()
torch.set_num_threads(2)
ds = RenderedScenes(args.data, split="all", fields=list(FLNR_TRAINING))


def tm(x):
    return x.clamp(0, 1) ** (1 / 2.2)


def psnr(a, r):
    return -10 * math.log10(float(((tm(a) - tm(r)) ** 2).mean()))


by = {}
for f in ds:
    by.setdefault(f["scene"], []).append(f)
new, old = load_flnr(args.weights), load_flnr(args.bundled)
rows = {}
for scene, frames in by.items():
    g = {k: frames[0][k][None] for k in FLNR_GUIDES}
    ref = frames[0]["reference"][None]
    k = 1
    while k <= len(frames):
        y = sum(f["color"][None].float() for f in frames[:k]) / k
        n = torch.full_like(y[:, :1], float(k))
        with torch.no_grad():
            r = {"FLR": psnr(denoise(y, **g, model="flr"), ref),
                 "FLNR bundled": psnr(denoise(y, **g, weights=old), ref),
                 "FLNR new, history 1": psnr(denoise(y, **g, weights=new), ref),
                 "FLNR new, told k": psnr(denoise(y, **g, weights=new, history=n), ref)}
        for m, v in r.items():
            rows.setdefault(k, {}).setdefault(m, []).append(v)
        print(scene, k, {m: round(v, 2) for m, v in r.items()}, flush=True)
        k *= 2
print("\n| frames averaged | scenes | " + " | ".join(next(iter(rows.values()))) + " |")
print("|---" * (2 + len(next(iter(rows.values())))) + "|")
for k, r in rows.items():
    print(f"| {k} | {len(next(iter(r.values())))} | " + " | ".join(f"{sum(v) / len(v):.2f}" for v in r.values()) + " |")
