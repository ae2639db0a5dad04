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
phase given to the model (joint denoising and upsampling; u = ``--upsample-factor``, 2 or 4).

The loop is :func:`vision.pipelines.training.denoiser.train` (Accelerate, timm's EMA, transformers' cosine
schedule): a checkpoint after every epoch in ``--checkpoint-dir`` (a kill at any moment leaves a complete
one), ``--resume`` continues it bit for bit; SIGTERM or Ctrl-C finish the current step, save a checkpoint,
write the best weights so far and exit with 143 / 130 (a second Ctrl-C stops at once). Data-parallel under
``accelerate launch --multi_gpu --num_processes N -m vision.pipelines.cli train-denoiser ...`` (on GPUs, or on
CPUs over gloo when no GPU is visible; accelerate 1.16's ``--cpu`` starts a single process).
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from vision.pipelines.training.denoiser_data import (  # noqa: F401 (the training data's helpers, as they were here)
    AO_CHANNEL, FLNR_GUIDES, FLNR_TRAINING, load_frames, loss_fn, pick, sample_batch, scene_groups, subsample, tonemap,
    val_phases, validate)
from vision.pipelines.cli import read_input, torch_device
from vision.pipelines.plugins import NON_NEGATIVE, POSITIVE, check_numbers

EPILOG = """examples:
  vision render-scenes --out data/flnr --count 300 --size 128 --spp-ref 512 --seed 11
  vision train-denoiser --data data/flnr -o flnr.safetensors
  vision train-denoiser --data data/flnr -o flnr.safetensors --resume    # after a kill: on from flnr.safetensors.state/
  vision train-denoiser --data data/flnr --mixed-precision bf16 --grad-accum 4 -o flnr.safetensors
  accelerate launch --multi_gpu --num_processes 2 -m vision.pipelines.cli train-denoiser --data data/flnr -o flnr.safetensors
                  # data-parallel: 2 processes (GPUs, or CPUs over gloo when none is visible; accelerate's --cpu starts one)
  vision train-denoiser --data data/flnr --init flnr.safetensors --lr 5e-4 -o flnr_ft.safetensors   # fine-tune
  vision train-denoiser --data data/flnr --init flnr.safetensors --antialias --lr 5e-4 -o flnr_aa.safetensors  # + blend
  vision train-denoiser --data data/union --init flnr.safetensors --detail --lr 3e-4 -o flnr_detail.safetensors
  vision train-denoiser --data data/flnr --init flnr.safetensors --tonemapped rmse --smape 0.05 -o flnr_psnr.safetensors
  vision train-denoiser --data data/union --init flnr.safetensors --guides 5 --widths 16,24,64,96 --ema 0.999 -o big.safetensors
  vision train-denoiser --data data/flnr --init flnr.safetensors --upsample-prob 0.5 -o flnr_up.safetensors
  vision train-denoiser --data data/hist --init flnr.safetensors --history 16 --history-only -o flnr_hist.safetensors
                  # --temporal: tell the network each pixel's history length (data: render-scenes --noisy-seeds 16)
  vision train-denoiser --data data/flnr --init flnr.safetensors --upsample-prob 1 --upsample-factor 4 -o flnr_up4.safetensors
  vision train-denoiser --data data/flnr --guides 3 --radii 8 --minutes 10 -o small.safetensors      # a variant
  vision train-denoiser --data data/flnr --init flnr16.safetensors --hidden 8 --fit-down 2 --lr 3e-4 -o flnr8.safetensors
                  # prune a 16-unit guide head to its 8 most useful units, fit on 2x2 means: a faster model
  vision denoise 'frames/*.exr' -o out/ --model flnr --weights flnr.safetensors

The bundled scenes (assets/scenes) are the evaluation set: do not train on them.
"""

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
    p.add_argument("--history", type=int, default=1, metavar="N",
                   help="train for sequences too (default 1: single frames): a crop's colour averages, per pixel, 1 to "
                        "N of its scene's noisy frames (render-scenes --noisy-seeds N), as a temporal denoiser's "
                        "history does, and the network is told how many (FLNR's history input); with --init weights "
                        "that lack that input, it is added to them, starting with no effect")
    p.add_argument("--history-only", action="store_true",
                   help="with --init and --history: train only the network's weights on the history input, so every "
                        "single-frame result stays the init's, bit for bit")
    p.add_argument("--ema", type=float, default=0.0, metavar="DECAY",
                   help="validate and keep an exponential moving average of the weights (Polyak averaging) with this "
                        "decay per step, e.g. 0.999 (default 0: the weights themselves; timm's ModelEmaV3); it smooths "
                        "out the noise of small batches when fine-tuning")
    p.add_argument("--minutes", type=float, default=None,
                   help="stop after this many minutes (after an epoch); the cosine learning-rate decay then "
                        "follows the time spent when that is further along than the steps")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--init", type=Path, default=None, help="start from these FLNR weights")
    p.add_argument("--mixed-precision", choices=("no", "fp16", "bf16"), default=None,
                   help="autocast the U-Net in this precision while training (bf16 works on CPUs too; the guide "
                        "head and the regression stay float32, validation runs in float32); default: what "
                        "accelerate config / accelerate launch set, else no")
    p.add_argument("--grad-accum", type=int, default=1, metavar="N",
                   help="micro-batches of --batch crops per optimiser step (default 1)")
    p.add_argument("--checkpoint-dir", type=Path, default=None, metavar="DIR",
                   help="where a checkpoint is written after every epoch and on SIGTERM / Ctrl-C (model, optimiser, "
                        "schedule, EMA, RNG, best weights so far; replaced atomically, so a kill at any moment leaves "
                        "a complete one); default: -o's name + .state, beside it")
    p.add_argument("--resume", action="store_true",
                   help="continue from the checkpoint in --checkpoint-dir (same command line otherwise: a checkpoint "
                        "made with other data, crops, batch or model is refused); ends with the weights an "
                        "uninterrupted run gives")
    p.add_argument("--device", default=None,
                   help="torch device (default cuda when available, else cpu); under accelerate launch each "
                        "process takes its own")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def training_command(args) -> str:
    """The full command line of this run, every option spelled out (defaults included)."""
    opts = [("--data", args.data), ("--epochs", args.epochs), ("--steps", args.steps), ("--batch", args.batch),
            ("--crop", args.crop), ("--lr", args.lr), ("--smape", args.smape),
            ("--tonemapped", args.tonemapped), ("--upsample-prob", args.upsample_prob),
            ("--upsample-factor", args.upsample_factor), ("--radii", args.radii),
            ("--scale", args.scale), ("--guides", args.guides), ("--hidden", args.hidden),
            ("--fit-down", args.fit_down), ("--widths", args.widths), ("--drop-ao", getattr(args, "drop_ao", 0.0)),
            ("--history", getattr(args, "history", 1) if getattr(args, "history", 1) != 1 else None),
            ("--ema", getattr(args, "ema", 0.0) or None), ("--minutes", args.minutes),
            ("--mixed-precision", getattr(args, "mixed_precision", None)),
            ("--grad-accum", getattr(args, "grad_accum", 1) if getattr(args, "grad_accum", 1) != 1 else None),
            ("--threads", args.threads), ("--seed", args.seed), ("--init", args.init)]
    parts = ["vision", "train-denoiser"] + [f"{k} {shlex.quote(str(v))}" for k, v in opts if v is not None]
    parts += [f"--{k.replace('_', '-')}" for k in ("antialias", "detail", "history_only") if getattr(args, k, False)]
    return " ".join(parts + [f"-o {shlex.quote(str(args.out))}"])


def _checkpoint_dir(args) -> Path:
    """--checkpoint-dir, or -o's name + .state beside it; refused when it is an input or the output, or
    something other than a checkpoint that a save would replace."""
    # lazy: `vision train-denoiser --help` starts without vision.pipelines.training.checkpoint
    from vision.pipelines.training import checkpoint, denoiser

    folder = Path(args.checkpoint_dir or f"{args.out}.state")
    here = folder.resolve()
    for flag, path in (("--data", args.data), ("-o", args.out), ("--init", args.init)):
        if path is not None and (here == Path(path).resolve() or here in Path(path).resolve().parents):
            raise ValueError(f"--checkpoint-dir {folder} is or holds the {flag} path: choose another folder")
    if checkpoint.foreign(folder, denoiser.FORMAT):
        raise ValueError(f"--checkpoint-dir {folder} exists and is not a train-denoiser checkpoint (a save would "
                         "replace it): choose another folder")
    if args.resume:
        where = denoiser.find_checkpoint(folder)[0]
        if where is None:
            raise ValueError(f"--resume: no complete checkpoint in {folder} (a run writes one after every epoch)")
        bad = checkpoint.unreadable_file(where)  # random bytes: refused before the training stack loads
        if bad is not None:
            raise ValueError(f"--resume: {bad[0]} is damaged and cannot be loaded ({bad[1]})")
    return folder


def _lost_write(args, res) -> str:
    """One line for a run whose output or checkpoint could not be written (a full disk, lost permission): what
    failed, where the trained weights are now, and how to get them into -o."""
    again = "free space (or fix the folder) and run the same command with --resume"
    saved = (f"the last complete checkpoint {res.checkpoint} (after epoch {res.checkpoint_epoch})"
             if res.checkpoint is not None else f"no checkpoint in {res.folder}")
    if not res.write_failed:  # the weights are in -o; the training stopped early
        return (f"checkpoint not written ({res.save_failed}): stopped after epoch {res.epochs}; best weights so far "
                f"(epoch {res.best_epoch}, {res.best:.2f} dB) in {res.path}; {saved}: {again} to continue")
    lost = f"-o {args.out} not written ({res.write_failed})"
    if res.kept and res.checkpoint is not None:
        return (f"{lost}; the trained weights (epoch {res.best_epoch}, {res.best:.2f} dB) are kept in the checkpoint "
                f"{res.checkpoint}: {again} to write them without training again")
    if res.rescued is not None:
        return (f"{lost}; the best weights so far (epoch {res.best_epoch}, {res.best:.2f} dB) were written to "
                f"{res.rescued} instead; {saved}: {again} to continue")
    return (f"{lost}, nor beside the checkpoint{f' ({res.save_failed})' if res.save_failed else ''}; {saved}: "
            f"{again} to train on from it")


def _radii(text: str) -> list[int]:
    """``--radii``: comma-separated positive integers, or a one-line error naming the flag."""
    try:
        radii = [int(r) for r in text.split(",") if r.strip()]
    except ValueError:
        raise ValueError(f"--radii must be comma-separated integers such as 4,8,16, got {text!r}") from None
    if not radii or min(radii) < 1:
        raise ValueError(f"--radii must be one or more positive integers, got {text!r}")
    return radii


def _build(args, widths):
    """The model builder handed to the training loop: from --init (widened, pruned, with blends added as the
    flags ask) or new."""

    def build(train, say):
        # lazy: `vision train-denoiser --help` starts without vision.denoise.flnr
        from vision.denoise.flnr import DEFAULT_CONFIG, FLNR, load_flnr

        if not args.init:
            radii = _radii(args.radii)
            return FLNR(widths or DEFAULT_CONFIG["widths"], 16 if args.hidden is None else args.hidden,
                        DEFAULT_CONFIG["guides"] if args.guides is None else args.guides, radii, args.scale,
                        1 if args.fit_down is None else args.fit_down, antialias=args.antialias, detail=args.detail,
                        history=args.history > 1)
        model = load_flnr(args.init)
        model = FLNR.from_state_dict(model.state_dict(), model.config)
        grow = {"guides": args.guides, "widths": widths,
                "hidden": args.hidden if (args.hidden or 0) > model.config["hidden"] else None}
        if any(v is not None and v != model.config[k] for k, v in grow.items()):
            model = model.widened(**grow)
            say(f"widened the init: guides {model.config['guides']}, hidden {model.config['hidden']}, widths "
                f"{model.config['widths']}")
        if args.hidden is not None and args.hidden != model.config["hidden"]:
            if not 0 < args.hidden < model.config["hidden"]:
                raise ValueError(f"--hidden {args.hidden} with --init: the init's guide head has "
                                 f"{model.config['hidden']} units; a smaller width (> 0) prunes it, a larger one "
                                 "widens it")
            model = model.pruned(args.hidden,
                                 [(f["color"], {k: f[k] for k in FLNR_GUIDES}) for f in train[:PRUNE_FRAMES]],
                                 args.fit_down)
            say(f"pruned the init's guide head to {args.hidden} units")
        elif args.fit_down is not None:
            model = FLNR.from_state_dict(model.state_dict(), dict(model.config, fit_down=args.fit_down))
        model = model.with_antialias() if args.antialias and not model.config["antialias"] else model
        model = model.with_detail() if args.detail and not model.config["detail"] else model
        model = model.with_history() if args.history > 1 and not model.config["history"] else model
        if args.history_only:
            # lazy: `vision train-denoiser --help` starts without vision.denoise.flnr.surgery
            from vision.denoise.flnr.surgery import train_history_only

            train_history_only(model)
        return model

    return build


def run(args) -> int:
    """``vision train-denoiser``: check every argument, read the scenes, train, and say what was written."""
    import torch  # lazy: `vision train-denoiser --help` starts without torch

    # lazy: `vision train-denoiser --help` starts without vision.pipelines.training.denoiser
    from vision.pipelines.training.denoiser import DenoiserTraining, data_identity, train as train_loop

    widths = _check_args(args)
    folder = _checkpoint_dir(args)
    torch.set_num_threads(max(1, args.threads))
    torch.manual_seed(args.seed)
    train, val = _read_scenes(args)
    cfg = DenoiserTraining(
        epochs=args.epochs, steps=args.steps, batch=args.batch, crop=args.crop, lr=args.lr, smape=args.smape,
        tonemapped=args.tonemapped, upsample_prob=args.upsample_prob, upsample_factor=args.upsample_factor,
        drop_ao=args.drop_ao, history=args.history, history_only=args.history_only, ema=args.ema,
        minutes=args.minutes, seed=args.seed, grad_accum=args.grad_accum, mixed_precision=args.mixed_precision,
        device=args.device, checkpoint_dir=folder, resume=args.resume, quiet=args.quiet)
    meta = {"vision.train.command": training_command(args), "vision.train.data": str(args.data),
            "vision.train.frames": len(train)}
    res = train_loop(cfg, _build(args, widths), train, val, out=args.out, data=data_identity(args.data, train),
                     metadata=meta, from_init=bool(args.init), loss=loss_fn)
    return _report(args, res)


def _check_args(args) -> list[int] | None:
    """Refuse bad flags, network sizes, outputs, ``--init`` files and devices before any data is read; the widths."""
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
    if args.grad_accum < 1:
        raise ValueError(f"--grad-accum must be >= 1, got {args.grad_accum}")
    if args.out.suffix != ".safetensors":
        raise ValueError(f"-o must name a .safetensors file, got {args.out}")
    if args.history > 1 and args.upsample_prob > 0:
        raise ValueError("--history trains for the temporal denoiser, which takes colour at the guides' size: it does "
                         "not combine with --upsample-prob")
    if args.history_only and (not args.init or args.history < 2):
        raise ValueError("--history-only trains the history input's weights of --init weights: it needs --init and "
                         "--history N > 1")
    if args.init and Path(args.init).resolve() == args.out.resolve():
        raise ValueError(f"-o {args.out} is the --init file: write the fine-tuned weights to another file")

    check_numbers(args, dict(lr=POSITIVE, smape=NON_NEGATIVE, drop_ao=dict(low=0, high=1), minutes=POSITIVE,
                             threads=dict(low=1), scale=dict(low=1), hidden=NON_NEGATIVE,
                             fit_down=dict(low=1), steps=dict(low=1), history=dict(low=1)))
    # lazy: `vision train-denoiser --help` starts without vision.denoise.flnr.config
    from vision.denoise.flnr.config import check_config

    # (--guides: the network's own check, 1 to 8, says it, and with --init that guides only grow)
    for key, value in (("widths", widths), ("hidden", args.hidden), ("radii", _radii(args.radii)),
                       ("scale", args.scale), ("fit_down", args.fit_down)):
        if value is not None:  # the network's sizes within the documented bounds before anything is allocated
            check_config({key: value}, "--" + key.replace("_", "-"))
    from vision.outputs import prepare_file  # lazy: `vision train-denoiser --help` starts without vision.outputs

    prepare_file(args.out, "-o")  # a folder or an unwritable place fails now, not after the training
    if args.init:
        # lazy: `vision train-denoiser --help` starts without vision.denoise.flnr
        from vision.denoise.flnr import load_flnr

        read_input(load_flnr, args.init, "--init", "FLNR weights")  # a pickle or a crafted config: one line now
    if args.device:
        torch_device(args.device)  # a malformed or absent device: one line, before any data is read
    return widths


def _read_scenes(args) -> tuple[list, list]:
    """``(train, val)`` frames of ``--data``; refuse no training scenes, or one noisy frame each with ``--history``."""
    train = load_frames(args.data, "train")
    if not train:
        raise ValueError(f"no training scenes in {args.data} (split train)")
    if args.history > 1 and all(len(g) == 1 for g in scene_groups(train)):
        raise ValueError(f"--history {args.history}: every training scene in {args.data} has one noisy frame; render "
                         f"several (vision render-scenes --noisy-seeds {args.history}) to average them")
    val = load_frames(args.data, "val")  # none: the training loop validates on training frames, and says so
    return train, val


def _report(args, res) -> int:
    """Say how the run ended (written, stopped by a signal, a write that failed); the exit code."""
    if not res.main:  # another rank of accelerate launch: the main process reports
        return 128 + res.signum if res.signum else 0
    if not res.same_weights:
        raise RuntimeError(f"the {res.processes} processes ended with different weights")
    if res.write_failed or res.save_failed:
        print(f"vision train-denoiser: error: {_lost_write(args, res)}", file=sys.stderr)
        return 1
    if res.signum:
        # lazy: `vision train-denoiser --help` starts without vision.pipelines.training.signals
        from vision.pipelines.training.signals import signal_name

        print(f"stopped by {signal_name(res.signum)} in epoch {res.epochs + 1}: checkpoint in {res.folder}, best weights so far "
              f"(epoch {res.best_epoch}, {res.best:.2f} dB) in {res.path}; add --resume to continue", file=sys.stderr)
        return 128 + res.signum
    same = f", identical on {res.processes} processes" if res.processes > 1 else ""
    print(f"wrote {res.path} (epoch {res.best_epoch}, val PSNR {res.best:.2f} dB, {res.seconds:.0f} s{same})")
    return 0
