"""Experiment (CHANGELOG.md, 0.4.0, "Measured and not kept"): choose FLNR or FLR per tile by generalised cross-validation.

Each denoiser's tile score is its residual energy over (1 - df/n)^2, df its Monte-Carlo divergence (one more call
with the colour perturbed by +-1 % of its mean, Rademacher signs): no reference and no noise variance is read.
Prints per-frame and per-scene PSNR of FLNR, FLR and the choice.

    python3 benchmarks/denoise/gcv_choice.py DATA [TILE [significant]]    # DATA: a `vision render-scenes` folder

``significant``: take FLR for a tile only where its score is lower by more than two standard errors of the
per-pixel score difference (FLNR is the default unless the evidence says otherwise).
"""
import math
import sys
import torch
from vision.data import RenderedScenes
from vision.data.fields import FLNR_GUIDES, FLNR_TRAINING
from vision.denoise import denoise
torch.manual_seed(0)
root = sys.argv[1]; T = int(sys.argv[2]) if len(sys.argv) > 2 else 16
SIGNIFICANT = len(sys.argv) > 3 and sys.argv[3] == "significant"
ds = RenderedScenes(root, split="all", fields=list(FLNR_TRAINING))
def tm(x): return x.clamp(0, 1) ** (1 / 2.2)
def psnr(a, r): return -10 * math.log10(float(((tm(a) - tm(r)) ** 2).mean()))
def pool(x): return torch.nn.functional.avg_pool2d(x.sum(1, keepdim=True), T, ceil_mode=True) * T * T
rows = []
for f in ds:
    g = {k: f[k][None] for k in FLNR_GUIDES}
    y = f["color"][None].float()
    ref = f["reference"][None]
    outs, gcv, per = {}, {}, {}
    b = torch.randint(0, 2, y.shape).float() * 2 - 1
    delta = 0.01 * float(y.mean().clamp_min(1e-3))
    for m in ("flnr", "flr"):
        with torch.no_grad():
            o = denoise(y, **g, model=m)
            op = denoise(y + delta * b, **g, model=m)
        outs[m] = o
        n = pool(torch.ones_like(y))
        rss = pool((y - o) ** 2)
        df = pool(b * (op - o)) / delta
        gcv[m] = rss / n / (1 - df / n).clamp_min(1e-3) ** 2
        up = torch.nn.functional.interpolate((1 - df / n).clamp_min(1e-3), scale_factor=T, mode="nearest")
        per[m] = ((y - o) ** 2).sum(1, keepdim=True) / up[..., :y.shape[-2], :y.shape[-1]] ** 2
    if SIGNIFICANT:  # FLR only where its score is lower by more than 2 standard errors of the per-pixel difference
        d = per["flnr"] - per["flr"]
        n1 = pool(torch.ones_like(y[:, :1])) / 3
        mean = pool(d) / 3 / n1
        var = (pool(d * d) / 3 / n1 - mean ** 2).clamp_min(0)
        pick = (mean <= 2 * (var / n1).sqrt()).float()
    else:
        pick = (gcv["flnr"] <= gcv["flr"]).float()
    pick = torch.nn.functional.interpolate(pick, scale_factor=T, mode="nearest")[..., :y.shape[-2], :y.shape[-1]]
    sel = pick * outs["flnr"] + (1 - pick) * outs["flr"]
    rows.append(dict(scene=f["scene"], flnr=psnr(outs["flnr"], ref), flr=psnr(outs["flr"], ref), gcv=psnr(sel, ref),
                     share=float(pick.mean())))
    print(rows[-1], flush=True)
by = {}
for r in rows: by.setdefault(r["scene"], []).append(r)
sc = {s: {k: sum(x[k] for x in v) / len(v) for k in ("flnr", "flr", "gcv", "share")} for s, v in by.items()}
for s, v in sc.items(): print(s, " ".join(f"{k}={v[k]:.2f}" for k in v))
mean = {k: sum(v[k] for v in sc.values()) / len(sc) for k in ("flnr", "flr", "gcv", "share")}
print("MEAN", mean)
print("scenes where flnr<flr:", [s for s, v in sc.items() if v["flnr"] < v["flr"]], "gcv<flr:", [s for s, v in sc.items() if v["gcv"] < v["flr"]])
print("gcv - flnr per scene min/max:", min(v["gcv"] - v["flnr"] for v in sc.values()), max(v["gcv"] - v["flnr"] for v in sc.values()))
