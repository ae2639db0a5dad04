"""``vision train-denoiser``: train the FLNR guide network end to end on ``vision render-scenes`` data.

Scenes are split by name (:class:`vision.data.RenderedScenes`): the ``train`` split is trained on, the
``val`` split is denoised whole after every epoch and its mean PSNR (tonemap: clamp to [0, 1], gamma
1/2.2) printed; the weights of the best epoch are written as safetensors with the training command,
epochs and validation PSNR in the header. Every frame is read once and kept in memory.

Loss (HDR-aware): L1 (or, with ``--tonemapped rmse``, the root mean square, whose minimum is the PSNR's
maximum) between the tonemapped result and reference (``clamp(x, 0, 1) ** (1/2.2)``, the metric's
tonemap) plus ``--smape`` times the symmetric relative error ``|x - y| / (|x| + |y| + 0.01)`` on linear
values, which weighs dark and bright regions alike. Augmentation: random crops, horizontal and vertical
flips, a random exposure (colour, emission and reference scaled by one factor per crop); with
``--upsample-prob P`` a fraction P of the steps see one colour sample of every u x u block at a random
phase given to the model (joint denoising and upsampling; u = ``--upsample-factor``, 2 or 4). Ctrl-C
stops the run and still writes the best weights so far.
"""
from __future__ import annotations

import argparse
import copy
import math
import shlex
import sys
import time
from pathlib import Path

EPILOG = """examples:
  vision render-scenes --out data/flnr --count 300 --size 128 --spp-ref 512 --seed 11
  vision train-denoiser --data data/flnr -o flnr.safetensors
  vision train-denoiser --data data/flnr --init flnr.safetensors --lr 5e-4 -o flnr_ft.safetensors   # fine-tune
  vision train-denoiser --data data/flnr --init flnr.safetensors --antialias --lr 5e-4 -o flnr_aa.safetensors  # + blend
  vision train-denoiser --data data/union --init flnr.safetensors --detail --lr 3e-4 -o flnr_detail.safetensors
  vision train-denoiser --data data/flnr --init flnr.safetensors --tonemapped rmse --smape 0.05 -o flnr_psnr.safetensors
  vision train-denoiser --data data/union --init flnr.safetensors --guides 5 --widths 16,24,64,96 --ema 0.999 -o big.safetensors
  vision train-denoiser --data data/flnr --init flnr.safetensors --upsample-prob 0.5 -o flnr_up.safetensors
  vision train-denoiser --data data/flnr --init flnr.safetensors --upsample-prob 1 --upsample-factor 4 -o flnr_up4.safetensors
  vision train-denoiser --data data/flnr --guides 3 --radii 8 --minutes 10 -o small.safetensors      # a variant
  vision train-denoiser --data data/flnr --init flnr16.safetensors --hidden 8 --fit-down 2 --lr 3e-4 -o flnr8.safetensors
                  # prune a 16-unit guide head to its 8 most useful units, fit on 2x2 means: a faster model
  vision denoise 'frames/*.exr' -o out/ --model flnr --weights flnr.safetensors

The bundled scenes (assets/scenes) are the evaluation set: do not train on them.
"""

FIELDS = ("color", "reference", "albedo", "normal", "depth", "ao", "emission")
GUIDES = ("albedo", "normal", "depth", "ao", "emission")
PRUNE_FRAMES = 24  # training frames on which --hidden with --init measures the guide head's units


HELP = "train the FLNR denoiser's guide network on vision render-scenes data"
DESCRIPTION = ("Train FLNR (a small U-Net that enhances the guides of the local linear regression) end to "
               "end through local_linear_fit on vision render-scenes frames; validate on held-out scenes; "
               "save safetensors.")


def add_arguments(p) -> None:
    p.add_argument("--data", type=Path, required=True, metavar="DIR", help="a vision render-scenes --out folder")
    p.add_argument("-o", "--out", type=Path, required=True, metavar="WEIGHTS", help="output .safetensors file")
    p.add_argument("--epochs", type=int, default=30, help="epochs (default 30)")
    p.add_argument("--steps", type=int, default=None, help="optimiser steps per epoch (default: frames / batch)")
    p.add_argument("--batch", type=int, default=4, help="crops per step (default 4)")
    p.add_argument("--crop", type=int, default=96, help="crop size in pixels (default 96)")
    p.add_argument("--lr", type=float, default=2e-3, help="Adam learning rate, cosine-decayed (default 2e-3)")
    p.add_argument("--smape", type=float, default=0.2, help="weight of the SMAPE term (default 0.2)")
    p.add_argument("--upsample-prob", type=float, default=0.0,
                   help="fraction of the steps whose colour is one sample of every u x u block (joint denoising "
                        "and upsampling from 1/u-resolution colour, guides at full resolution; default 0)")
    p.add_argument("--upsample-factor", type=int, choices=(2, 4), default=2,
                   help="u for --upsample-prob: colour at 1/2 or 1/4 of the guides' resolution (default 2)")
    p.add_argument("--tonemapped", choices=("l1", "rmse"), default="l1",
                   help="error on tonemapped values: l1 (default) or rmse (what PSNR measures)")
    p.add_argument("--radii", default="4,8,16",
                   help="blend fits at these radii per cell with weights the network predicts (default 4,8,16)")
    p.add_argument("--scale", type=int, default=4, help="regression cell size (default 4)")
    p.add_argument("--guides", type=int, default=None,
                   help="learned guides the regression fits on (default 4); with --init, more than the init's adds "
                        "guides that start small (FLNR.widened: nearly the same function, more capacity)")
    p.add_argument("--hidden", type=int, default=None,
                   help="hidden width of the per-pixel guide head, 0 = linear (default 16); with --init, a smaller "
                        "width prunes the init's head to its most useful units (FLNR.pruned), to fine-tune a "
                        "faster model, a larger one adds units that start with no effect (FLNR.widened)")
    p.add_argument("--fit-down", type=int, default=None,
                   help="take the regression's moments from 2x2 (or NxN) means of guides and signal (default 1, or "
                        "the --init weights' own)")
    p.add_argument("--widths", default=None,
                   help="network widths at 1/4 (1x1 stem), 1/8, 1/16, 1/32 resolution (default 16,24,32,48); with "
                        "--init, wider levels add channels that start with no effect (FLNR.widened)")
    p.add_argument("--antialias", action="store_true",
                   help="blend the light towards its 3 x 3 mean where the albedo has an edge, with a learned weight "
                        "(the buffers are one ray per pixel centre, the reference a pixel mean); with --init weights "
                        "that lack it, it is added to them")
    p.add_argument("--detail", action="store_true",
                   help="blend the result towards the noisy signal's own trimmed 3 x 3 mean where the head finds that "
                        "no fit on the guides follows the light (mirrors, glass, caustics), with a learned per-pixel "
                        "weight shrunk by the samples' spread; with --init weights that lack it, it is added to them")
    p.add_argument("--drop-ao", type=float, default=0.0, metavar="P",
                   help="zero the ambient-occlusion buffer of a crop with this probability (default 0): renderer "
                        "files rarely carry one (Cycles and Mitsuba AOV frames have none), so a model trained "
                        "on data that always has it meets a missing buffer only at inference")
    p.add_argument("--ema", type=float, default=0.0, metavar="DECAY",
                   help="validate and keep an exponential moving average of the weights (Polyak averaging) with this "
                        "decay per step, e.g. 0.999 (default 0: the weights themselves); it smooths out the noise of "
                        "small batches when fine-tuning")
    p.add_argument("--minutes", type=float, default=None,
                   help="stop after this many minutes (after an epoch); the cosine learning-rate decay then "
                        "follows the time spent when that is further along than the steps")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--init", type=Path, default=None, help="start from these FLNR weights")
    p.add_argument("--device", default=None, help="torch device (default cuda when available, else cpu)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def load_frames(root: Path, split: str) -> list[dict]:
    """Every frame of ``split`` as a dict of (1, C, H, W) float32 tensors plus ``scene``."""
    from vision.data import RenderedScenes

    ds = RenderedScenes(root, split=split, fields=list(FIELDS))
    out = []
    for i in range(len(ds)):
        s = ds[i]
        out.append({**{k: s[k][None] for k in FIELDS}, "scene": s["scene"]})
    return out


def tonemap(x):
    return (x.clamp(0, 1) + 1e-4) ** (1 / 2.2)


def loss_fn(out, ref, smape: float, tonemapped: str = "l1"):
    d = tonemap(out) - tonemap(ref)
    base = d.abs().mean() if tonemapped == "l1" else (d.square().mean() + 1e-12).sqrt()
    rel = ((out - ref).abs() / (out.abs() + ref.abs() + 1e-2)).mean()
    return base + smape * rel


AO_CHANNEL = 4  # of the network's guide layout (normal 3, log-depth 1, AO 1, albedo 3: flnr_net.GUIDES)


def sample_batch(frames, stats, batch: int, crop: int, gen, drop_ao: float = 0.0):
    """Random crops (with flips and an exposure factor) stacked into one batch dict, and their stats. With
    probability ``drop_ao`` a crop's AO buffer is zeroed and its standardisation made that of a missing buffer
    (mean 0), which is what a frame without AO gives the network."""
    import torch

    picks = torch.randint(len(frames), (batch,), generator=gen).tolist()
    out = {k: [] for k in FIELDS}
    means, stds = [], []
    for i in picks:
        f = frames[i]
        h, w = f["color"].shape[-2:]
        c = min(crop, h, w)
        y = int(torch.randint(h - c + 1, (1,), generator=gen))
        x = int(torch.randint(w - c + 1, (1,), generator=gen))
        flips = [d for d, flip in ((-1, torch.rand(1, generator=gen) < 0.5), (-2, torch.rand(1, generator=gen) < 0.5))
                 if flip]
        exposure = float(2 ** (torch.rand(1, generator=gen) * 2 - 1))
        for k in FIELDS:
            v = f[k][..., y:y + c, x:x + c]
            if flips:
                v = v.flip(flips)
            if k in ("color", "reference", "emission"):
                v = v * exposure
            out[k].append(v)
        mean, std = stats[i]
        if drop_ao > 0 and float(torch.rand(1, generator=gen)) < drop_ao:
            out["ao"][-1] = torch.zeros_like(out["ao"][-1])
            mean, std = mean.clone(), std.clone()
            mean[:, AO_CHANNEL], std[:, AO_CHANNEL] = 0.0, 1e-3
        means.append(mean)
        stds.append(std)
    return {k: torch.cat(v) for k, v in out.items()}, (torch.cat(means), torch.cat(stds))


def subsample(color, gen, factor: int = 2):
    """One sample of every u x u block (u = ``factor``), at a random phase: 1/u-resolution colour for joint
    upsampling. Returns the colour and the phase (dy, dx), the sample's pixel in its block."""
    import torch

    phase = tuple(int(v) for v in torch.randint(factor, (2,), generator=gen))
    return pick(color, phase, factor).contiguous(), phase


def pick(color, phase, factor: int = 2):
    """Pixel ``(u i + dy, u j + dx)`` of every whole u x u block of (..., H, W) ``color``, ``phase = (dy, dx)``,
    u = ``factor``."""
    dy, dx = phase
    h, w = color.shape[-2:]
    return color[..., dy:h - h % factor:factor, dx:w - w % factor:factor]


def val_phases(factor: int = 2) -> tuple[tuple[int, int], ...]:
    """The 1/u-resolution validation's phases: one sample of every u x u block at its first and last pixel."""
    return (0, 0), (factor - 1, factor - 1)


def validate(model, frames, upsample_prob: float = 0.0, factor: int = 2) -> tuple[float, float | None]:
    """(score, 1/u-resolution PSNR or None): the mean validation PSNR at full resolution, or, when the run
    trains joint upsampling, from one colour sample of every u x u block (u = ``factor``; phases
    :func:`val_phases`, known to the model); the score weighs the two as the training steps do. Frames whose
    size u does not divide have no 1/u-resolution score; when no frame has one, the score is the
    full-resolution PSNR."""
    import numpy as np
    import torch

    from vision.denoise.metrics import psnr

    def score(color, f, phase=None):
        out = model(color, {k: f[k] for k in GUIDES}, phase=phase)
        return psnr(out[0].permute(1, 2, 0).cpu().numpy(), f["reference"][0].permute(1, 2, 0).cpu().numpy())

    def divisible(f):
        h, w = f["color"].shape[-2:]
        return h % factor == 0 and w % factor == 0

    halves = upsample_prob > 0 and any(divisible(f) for f in frames)  # else: full resolution only (no NaN score)
    full, half = [], []
    with torch.no_grad():
        for f in frames:
            if upsample_prob < 1 or not halves:
                full.append(score(f["color"], f))
            if halves and divisible(f):
                half += [score(pick(f["color"], phase, factor), f, phase) for phase in val_phases(factor)]
    lo = float(np.mean(half)) if half else None
    if lo is None:
        return float(np.mean(full)), None
    if not full:
        return lo, lo
    return (1 - upsample_prob) * float(np.mean(full)) + upsample_prob * lo, lo


def training_command(args) -> str:
    """The full command line of this run, every option spelled out (defaults included)."""
    opts = [("--data", args.data), ("--epochs", args.epochs), ("--steps", args.steps), ("--batch", args.batch),
            ("--crop", args.crop), ("--lr", args.lr), ("--smape", args.smape),
            ("--tonemapped", args.tonemapped), ("--upsample-prob", args.upsample_prob),
            ("--upsample-factor", args.upsample_factor), ("--radii", args.radii),
            ("--scale", args.scale), ("--guides", args.guides), ("--hidden", args.hidden),
            ("--fit-down", args.fit_down), ("--widths", args.widths), ("--drop-ao", getattr(args, "drop_ao", 0.0)),
            ("--ema", getattr(args, "ema", 0.0) or None), ("--minutes", args.minutes),
            ("--threads", args.threads), ("--seed", args.seed), ("--init", args.init)]
    parts = ["vision", "train-denoiser"] + [f"{k} {shlex.quote(str(v))}" for k, v in opts if v is not None]
    parts += [f"--{k}" for k in ("antialias", "detail") if getattr(args, k, False)]
    return " ".join(parts + [f"-o {shlex.quote(str(args.out))}"])


def _half_text(half, args) -> str:
    if half is None:
        return ""
    u = args.upsample_factor
    return f" (1/{u}-resolution colour {half:.2f} dB)" if args.upsample_prob < 1 else f" (from 1/{u}-resolution colour)"


def run(args) -> int:
    import torch
    from tqdm import tqdm

    from vision.denoise import buffers as B
    from vision.denoise.flnr import DEFAULT_CONFIG, FLNR, frame_stats, load_flnr, parameter_count

    if args.epochs < 1 or args.batch < 1 or args.crop < 16 or args.lr <= 0 or not 0 <= args.upsample_prob <= 1:
        raise ValueError("--epochs and --batch must be >= 1, --crop >= 16, --lr > 0 and --upsample-prob in [0, 1]")
    if args.upsample_prob > 0 and args.crop % args.upsample_factor:
        raise ValueError(f"--upsample-prob needs a --crop divisible by --upsample-factor {args.upsample_factor}, "
                         f"got {args.crop}")
    try:
        widths = None if args.widths is None else [int(w) for w in args.widths.split(",")]
    except ValueError:
        raise ValueError(f"--widths must be comma-separated integers such as 16,24,32,48, got {args.widths!r}") from None
    if not 0.0 <= args.ema < 1.0:
        raise ValueError(f"--ema must be a decay in [0, 1), got {args.ema}")
    if args.out.suffix != ".safetensors":
        raise ValueError(f"-o must name a .safetensors file, got {args.out}")
    if args.init and Path(args.init).resolve() == args.out.resolve():
        raise ValueError(f"-o {args.out} is the --init file: write the fine-tuned weights to another file")
    torch.set_num_threads(max(1, args.threads))
    torch.manual_seed(args.seed)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    train = load_frames(args.data, "train")
    if not train:
        raise ValueError(f"no training scenes in {args.data} (split train)")
    val = load_frames(args.data, "val")
    if not val:
        print("(no val scenes in this folder: validating on the training frames)", file=sys.stderr)
        val = train[: max(1, min(8, len(train)))]
    move = (lambda fs: [{k: (v.to(device) if hasattr(v, "to") else v) for k, v in f.items()} for f in fs])
    train, val = move(train), move(val)
    stats = []
    for f in train:
        stats.append(frame_stats({k: f[k] for k in GUIDES}, f["color"], f["color"].shape[-2:]))
    if args.init:
        model = load_flnr(args.init)
        model = FLNR.from_state_dict(model.state_dict(), model.config)
        grow = {"guides": args.guides, "widths": widths,
                "hidden": args.hidden if (args.hidden or 0) > model.config["hidden"] else None}
        if any(v is not None and v != model.config[k] for k, v in grow.items()):
            model = model.widened(**grow)
            print(f"widened the init: guides {model.config['guides']}, hidden {model.config['hidden']}, widths "
                  f"{model.config['widths']}", file=sys.stderr)
        if args.hidden is not None and args.hidden != model.config["hidden"]:
            if not 0 < args.hidden < model.config["hidden"]:
                raise ValueError(f"--hidden {args.hidden} with --init: the init's guide head has "
                                 f"{model.config['hidden']} units; a smaller width (> 0) prunes it, a larger one "
                                 "widens it")
            model = model.pruned(args.hidden, [(f["color"], {k: f[k] for k in GUIDES}) for f in train[:PRUNE_FRAMES]],
                                 args.fit_down)
            print(f"pruned the init's guide head to {args.hidden} units", file=sys.stderr)
        elif args.fit_down is not None:
            model = FLNR.from_state_dict(model.state_dict(), dict(model.config, fit_down=args.fit_down))
        model = model.with_antialias() if args.antialias and not model.config["antialias"] else model
        model = model.with_detail() if args.detail and not model.config["detail"] else model
    else:
        radii = [int(r) for r in args.radii.split(",") if r.strip()]
        model = FLNR(widths or DEFAULT_CONFIG["widths"], 16 if args.hidden is None else args.hidden,
                     DEFAULT_CONFIG["guides"] if args.guides is None else args.guides, radii, args.scale,
                     1 if args.fit_down is None else args.fit_down, antialias=args.antialias, detail=args.detail)
    model = model.to(device)
    steps = args.steps or max(1, math.ceil(len(train) / args.batch))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    total = args.epochs * steps
    budget = None if args.minutes is None else args.minutes * 60
    t_start = time.time()

    def progress(i: int) -> float:
        """Fraction of the run done: of the steps, or of --minutes when that is further along."""
        done = min(i, total) / total
        return done if budget is None else max(done, min(1.0, (time.time() - t_start) / budget))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 0.5 * (1 + math.cos(math.pi * progress(i))))
    gen = torch.Generator().manual_seed(args.seed)
    print(f"FLNR: {parameter_count(model)} parameters; {len(train)} train / {len(val)} val frames; "
          f"{args.epochs} epochs x {steps} steps, batch {args.batch}, crop {args.crop}", file=sys.stderr)
    model.eval()
    shadow = copy.deepcopy(model).requires_grad_(False) if args.ema > 0 else None  # the weights' moving average
    judged = model if shadow is None else shadow  # what is validated and kept
    best, half = validate(model, val, args.upsample_prob, args.upsample_factor)
    start = "from --init" if args.init else "untrained"
    print(f"epoch 0 ({start}): val PSNR {best:.2f} dB{_half_text(half, args)}", file=sys.stderr)
    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    best_epoch, done, history = 0, 0, []
    try:  # Ctrl-C ends the run early and still writes the best weights so far
        for epoch in range(1, args.epochs + 1):
            model.train()
            bar = tqdm(range(steps), desc=f"epoch {epoch}/{args.epochs}", unit="step", disable=args.quiet,
                       file=sys.stderr, leave=False)
            run_loss = 0.0
            for _ in bar:
                b, st = sample_batch(train, stats, args.batch, args.crop, gen, args.drop_ao)
                phase = None
                if args.upsample_prob > 0 and float(torch.rand(1, generator=gen)) < args.upsample_prob:
                    b["color"], phase = subsample(b["color"], gen, args.upsample_factor)
                out = model(b["color"], {k: b[k] for k in GUIDES}, stats=st, phase=phase)
                loss = loss_fn(out, b["reference"], args.smape, args.tonemapped)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                if shadow is not None:
                    with torch.no_grad():
                        for avg, p in zip(shadow.parameters(), model.parameters()):
                            avg.lerp_(p, 1.0 - args.ema)
                run_loss += float(loss.detach())
                bar.set_postfix(loss=f"{float(loss.detach()):.4f}")
            model.eval()
            score, half = validate(judged, val, args.upsample_prob, args.upsample_factor)
            done = epoch
            history.append(round(score, 3))
            mark = ""
            if score > best:
                best, best_epoch, mark = score, epoch, " (best)"
                best_state = {k: v.detach().clone() for k, v in judged.state_dict().items()}
            print(f"epoch {epoch}: train loss {run_loss / steps:.4f}, val PSNR {score:.2f} dB{_half_text(half, args)}"
                  f"{mark}", file=sys.stderr)
            if args.minutes is not None and time.time() - t_start > args.minutes * 60:
                print(f"stopping after {epoch} epochs: --minutes {args.minutes:g} reached", file=sys.stderr)
                break
    except KeyboardInterrupt:
        print(f"interrupted in epoch {done + 1}: writing the best weights so far", file=sys.stderr)
    model.load_state_dict(best_state)
    model = model.cpu()
    command = training_command(args)
    path = model.save(args.out, **{"vision.train.command": command, "vision.train.epochs": done,
                                   "vision.train.best_epoch": best_epoch,
                                   "vision.train.val_psnr": round(best, 3),
                                   "vision.train.val_history": history,
                                   "vision.train.data": str(args.data),
                                   "vision.train.frames": len(train)})
    print(f"wrote {path} (epoch {best_epoch}, val PSNR {best:.2f} dB, {time.time() - t_start:.0f} s)")
    return 0
