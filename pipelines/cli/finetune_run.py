"""What ``vision finetune`` runs once its options are checked: the JSON options checked against the run-config
allow-list, the data and run folders checked (a damaged checkpoint refused before training), then
:func:`vision.pipelines.training.finetune.train`; ``--merge`` folds the adapters in afterwards."""
from __future__ import annotations

import json
import os
import shlex
import sys

import torch
from accelerate import PartialState

from vision.outputs import prepare_folder, same_file
from vision.pipelines.training import checkpoint
from vision.pipelines.training.dense_model import DenseConfig, merge_run
from vision.pipelines.training.finetune import TrainingStopped, removed_on_failure, train
from vision.pipelines.training.run_config import check_backbone_kwargs, check_head_kwargs, check_task_kwargs
from vision.pipelines.training.run_state import CHECKPOINT_FORMAT, STATE


def run(args, rank: int, targets) -> int:
    """Train the run ``args`` describe (checked by :mod:`vision.pipelines.cli.finetune`, which gives the LoRA
    ``rank`` and ``targets``); the exit code (128 + the signal's number after SIGTERM / Ctrl-C)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    extra = check_backbone_kwargs(_json_object(args.backbone_kwargs, "--backbone-kwargs"), "--backbone-kwargs", "")
    head_kwargs = check_head_kwargs(args.head, _json_object(args.head_kwargs, "--head-kwargs"), "--head-kwargs", "")
    task_kwargs = check_task_kwargs(_json_object(args.task_kwargs, "--task-kwargs"), "--task-kwargs", "")
    if not args.data.is_dir():
        raise FileNotFoundError(f"--data {args.data}: no such folder")
    read = [args.data, args.data / "images", args.data / "targets"]  # folders whose files are read as data
    if any(same_file(args.out, d) or d.resolve() in args.out.resolve().parents for d in read[1:]) \
            or same_file(args.out, args.data):
        raise ValueError(f"-o {args.out} would be read as --data {args.data}; write the run elsewhere")
    if args.out.exists() and not args.out.is_dir():
        raise ValueError(f"-o {args.out} is a file, not a folder; give a run folder (it is created if missing)")
    cfg = DenseConfig(task=args.task, backbone=args.backbone, head=args.head, img_size=args.img_size,
                      lora_rank=rank, pretrained=args.pretrained, epochs=args.epochs,
                      batch_size=args.batch_size, lr=args.lr, backbone_lr=args.backbone_lr,
                      weight_decay=args.weight_decay, ema=args.ema, clip=args.clip, tta=not args.no_tta,
                      select_best=not args.last, seed=args.seed, limit=args.limit, max_minutes=args.max_minutes,
                      stop_after=args.stop_after, val_fraction=args.val_fraction, test_fraction=args.test_fraction,
                      data=str(args.data), lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                      lora_targets=targets, mixed_precision=args.mixed_precision,
                      grad_accum=args.grad_accum, cpu=args.cpu, log_with=args.log_with,
                      extra=extra, head_kwargs=head_kwargs, task_kwargs=task_kwargs)
    if args.out.exists() and any(args.out.iterdir()) and not args.resume:
        raise FileExistsError(f"{args.out} is not empty; pass --resume to continue it or choose another folder")
    if args.resume and args.out.is_dir():
        _check_state_files(args.out)
    if args.lora_rank is None and not args.pretrained and not args.resume:
        print("no --pretrained: training the whole backbone from random weights (LoRA needs pretrained weights)")
    # a start that fails (unknown backbone, empty data) leaves no folder; under `accelerate launch` rank 0 cleans
    try:
        with removed_on_failure(args.out, os.environ.get("RANK", "0") == "0"):
            prepare_folder(args.out, "-o")  # writable before any training, not after the first epoch
            history = train(cfg, args.out, resume=args.resume, progress=not args.quiet, command=_command(args))
    except TrainingStopped as stopped:  # SIGTERM / Ctrl-C: after the step, the last epoch's checkpoint kept
        print(f"vision finetune: {stopped}", file=sys.stderr)
        return 128 + stopped.signum
    if history:
        last = history[-1]
        print(f"done: {last['epoch']} epochs in {last['seconds']:.0f} s; run in {args.out}")
    if args.merge:
        if PartialState().is_main_process:
            print(f"merged adapters into {merge_run(args.out)}")
    return 0


def _command(args) -> str:
    """The command line that reproduces this run (every option that differs from its default), for the card;
    rebuilt from the parsed options, so it is the same whether the CLI ran from a shell or from Python."""
    words = ["vision", "finetune"]
    for action in args.finetune_parser._actions:
        if not action.option_strings or action.dest in ("help", "resume", "quiet", "threads"):
            continue
        value = getattr(args, action.dest, None)
        if value is None or value == action.default:
            continue
        flag = max(action.option_strings, key=len)
        words += [flag] if value is True else [flag, str(value)]
    return shlex.join(words)


def _json_object(text: str | None, option: str) -> dict:
    """The JSON object an option holds ({} when it is not given), or a ValueError that names the option."""
    if not text:
        return {}

    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{option} is not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{option} must be a JSON object")
    return value


def _check_state_files(run) -> None:
    """A checkpoint file of random bytes in ``run``'s last complete checkpoint: one line now, before the training
    stack (timm, Accelerate, PEFT) loads; what only loading can tell is found when the resume loads it."""
    where, _ = checkpoint.latest(run / STATE, CHECKPOINT_FORMAT)
    bad = None if where is None else checkpoint.unreadable_file(where)
    if bad is not None:
        raise ValueError(f"{bad[0]} is damaged and cannot be loaded ({bad[1]}); resume needs the checkpoint as it was "
                         "written: start a new run folder")
