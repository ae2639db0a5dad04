"""What ``vision train-denoiser`` runs once its command line is parsed: every argument checked (network sizes,
outputs, ``--init`` weights, the checkpoint folder) before any data is read, the scenes read, the model built (new,
or from ``--init`` widened, pruned or with blends added), :func:`vision.pipelines.training.denoiser.train` run, and
how it ended said in one line."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import torch

from vision.denoise.flnr import DEFAULT_CONFIG, FLNR, load_flnr
from vision.denoise.flnr.config import check_config
from vision.denoise.flnr.surgery import train_history_only
from vision.outputs import prepare_file
from vision.pipelines.cli import read_input, torch_device
from vision.pipelines.plugins import NON_NEGATIVE, POSITIVE, check_numbers
from vision.pipelines.training import checkpoint, denoiser
from vision.pipelines.training.denoiser import DenoiserTraining, data_identity, train as train_loop
from vision.pipelines.training.denoiser_data import FLNR_GUIDES, load_frames, loss_fn, scene_groups
from vision.pipelines.training.signals import signal_name

PRUNE_FRAMES = 24  # training frames on which --hidden with --init measures the guide head's units


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
            train_history_only(model)
        return model

    return build


def run(args) -> int:
    """``vision train-denoiser``: check every argument, read the scenes, train, and say what was written."""
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
    check_numbers(args, dict(epochs=dict(low=1), batch=dict(low=1), crop=dict(low=16), lr=POSITIVE,
                             upsample_prob=dict(low=0, high=1)))
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
    # (--guides: the network's own check, 1 to 8, says it, and with --init that guides only grow)
    for key, value in (("widths", widths), ("hidden", args.hidden), ("radii", _radii(args.radii)),
                       ("scale", args.scale), ("fit_down", args.fit_down)):
        if value is not None:  # the network's sizes within the documented bounds before anything is allocated
            check_config({key: value}, "--" + key.replace("_", "-"))
    prepare_file(args.out, "-o")  # a folder or an unwritable place fails now, not after the training
    if args.init:
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
        print(f"stopped by {signal_name(res.signum)} in epoch {res.epochs + 1}: checkpoint in {res.folder}, best weights so far "
              f"(epoch {res.best_epoch}, {res.best:.2f} dB) in {res.path}; add --resume to continue", file=sys.stderr)
        return 128 + res.signum
    same = f", identical on {res.processes} processes" if res.processes > 1 else ""
    print(f"wrote {res.path} (epoch {res.best_epoch}, val PSNR {res.best:.2f} dB, {res.seconds:.0f} s{same})")
    return 0
