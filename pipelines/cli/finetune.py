"""``vision finetune``: train a dense-prediction head (and LoRA adapters) on a backbone, one task."""
from __future__ import annotations

import re
from pathlib import Path

from vision.outputs import in_run
from vision.pipelines.plugins import NON_NEGATIVE, POSITIVE, check_numbers
from vision.pipelines.training.dense_config import DenseConfig

EPILOG = """\
examples:
  vision render-scenes --out data/scenes --count 240 --size 128 --spp-ref 64 --noisy-seeds 1
  vision finetune --task depth --backbone vig_tiny_patch16_224 --data data/scenes -o runs/depth
      (no --pretrained: the whole backbone is trained from random weights)
  vision finetune --task normals --head local-linear --epochs 20 --data data/scenes -o runs/normals
  vision finetune --task depth --pretrained vig_t.pth --data my_data -o runs/d    # official weights, LoRA r=16
  vision finetune --task depth --backbone resnet18 --pretrained resnet18.safetensors --data d -o runs/r
      (a CNN: LoRA on its convolutions)
  vision finetune --task depth --data my_12_images --val-fraction 0.25 --test-fraction 0.25 -o runs/small
      (a small set: a quarter of the names each for validation and for `vision evaluate --split test`)
  vision finetune ... -o runs/depth --resume                                                  # continue a run
      (after a crash, a kill, or SIGTERM / Ctrl-C, which stop after the current step: exit 143 / 130)
  vision finetune ... --epochs 20 --stop-after 10 -o runs/d; vision finetune ... --epochs 20 -o runs/d --resume
      (10 + 10 epochs: the same weights, bit for bit, as 20 in one go: schedule, RNG and data order restored)
  vision finetune --task depth --backbone vit_small_patch16_224 --pretrained vit_small_patch16_224.augreg_in21k \\
      --lora-rank 8 --lora-targets qkv,proj --merge --mixed-precision bf16 --grad-accum 4 --data d -o runs/vit
  accelerate launch --multi_gpu --num_processes 4 -m vision.pipelines.cli finetune --task depth --data data/scenes -o runs/d
      (data-parallel: DDP over NCCL on GPUs, over gloo on a CPU-only machine; only rank 0 writes the run)

Data: a `vision render-scenes` folder (input = the tonemapped reference render; targets from its
ground-truth layers: depth -> depth, normals -> camnormal, albedo, semantic, binary -> segment > 0)
or a folder with images/NAME.png and targets/NAME.{npy,exr,png}. Scenes / files are split into
train / val / test by a hash of their name: 80 / 10 / 10 % by default, --val-fraction and
--test-fraction choose the shares (kept in RUN/config.json, so `vision evaluate --split test` scores the
same held-out names). On a small set a split can come out empty: the error says how the names fell.
Tasks: depth (log-depth head, SILog loss), normals
(1 - cos + angular loss), alpha, binary, semantic, albedo. --task-kwargs '{"gradient_weight": 0.5}'
adds multi-scale gradient matching of the residual (MiDaS) to the depth or normals loss.

Heads: token-local (one linear map per token to its 16 x 16 x K patch), local-linear (tokens
predict per-patch affine maps of the image's pixels, blended across patches: edges at full
resolution) and dpt (a DPT-style convolutional decoder, the baseline).

With --pretrained the backbone is frozen and rank-16 LoRA adapters are trained (--lora-rank R) on its
linear projections, or on its convolutions when it has none (ResNet; peft LoraConfig; --lora-alpha,
--lora-dropout, --lora-targets); they are saved with peft's save_pretrained in RUN/adapter and load with
peft.PeftModel.from_pretrained onto timm.create_model(BACKBONE, features_only=True, ...) given the base
weights of RUN/base.safetensors (see RUN/README.md); --merge also writes RUN/merged, the adapters folded
into the backbone. --lora-rank 0 trains the whole backbone. Without --pretrained the backbone starts
from random weights, so the whole backbone is trained (the default there; --lora-rank R > 0 is refused:
adapters on random features learn little). ViT-style backbones are built with dynamic_img_size=True, so
predict / evaluate take any image size.

The run folder is self-contained: it loads after the --pretrained file and the hub cache are gone.
It holds config.json, base.safetensors (the frozen backbone, once), model.safetensors
(trainable tensors only; EMA weights of the best validation epoch), README.md (model card),
state/ (accelerator.save_state: model, optimiser, schedule, RNG, loaded with weights_only=True; and
state/resume.safetensors: EMA, epoch, history, never a pickle; each epoch's state/ is staged, fsynced and renamed into
place), metrics.jsonl, curves.png (loss and validation metric per epoch) and previews/epoch_NNN.png
(image | target | prediction on validation scenes). `vision predict RUN IMAGES... -o OUT` uses it.
"""


MIN_IMG_SIZE = 16  # the patch of the common ViT backbones (14 or 16 px): a smaller input has no token
HELP = "fine-tune a dense-prediction head (+ LoRA) on a backbone"
DESCRIPTION = ("Fine-tune a token-local / local-linear / DPT head, with LoRA adapters or the whole "
               "backbone, for depth, normals, alpha, segmentation or albedo.")


def add_arguments(p) -> None:
    d = DenseConfig()
    p.add_argument("--task", required=True, choices=("depth", "normals", "alpha", "binary", "semantic", "albedo"))
    p.add_argument("--data", required=True, type=Path, help="render-scenes folder or images/ + targets/ folder")
    p.add_argument("-o", "--out", required=True, type=Path, metavar="RUN", help="run folder (created)")
    p.add_argument("--backbone", default=d.backbone, help=f"timm model name (default {d.backbone})")
    p.add_argument("--head", default=d.head, choices=("token-local", "local-linear", "dpt"),
                   help=f"head (default {d.head})")
    p.add_argument("--pretrained", default=None, metavar="FILE|NAME",
                   help="backbone weights: a local file, a timm name (vit_small_patch16_224.augreg_in21k) or an "
                        "hf-hub:org/repo name, the last two from the local cache only (nothing is downloaded)")
    p.add_argument("--backbone-kwargs", default=None, metavar="JSON",
                   help='extra timm.create_model arguments, e.g. \'{"drop_path_rate": 0.1}\'')
    p.add_argument("--head-kwargs", default=None, metavar="JSON",
                   help='extra head arguments, e.g. \'{"cells": 4}\' for local-linear coefficients on 4 x 4 cells '
                        'of each patch')
    p.add_argument("--task-kwargs", default=None, metavar="JSON",
                   help='task loss settings, e.g. \'{"gradient_weight": 0.5}\' (multi-scale gradient matching of '
                        'the depth / normal residual; default 0)')
    p.add_argument("--lora-rank", type=int, default=None,
                   help=f"LoRA rank; 0 = full fine-tuning (default {d.lora_rank} with --pretrained, else 0: "
                        "LoRA needs pretrained weights)")
    p.add_argument("--lora-alpha", type=float, default=None, help="LoRA alpha (scale alpha / rank; default rank)")
    p.add_argument("--lora-dropout", type=float, default=0.0, help="dropout on the LoRA input (default 0)")
    p.add_argument("--lora-targets", default=None, metavar="NAMES|REGEX",
                   help="modules that get adapters: comma-separated name suffixes (qkv,proj) or one regular "
                        "expression matching whole module names (default: every nn.Linear; every nn.Conv2d "
                        "in a backbone without one)")
    p.add_argument("--merge", action="store_true", help="after training, also write RUN/merged: the adapters "
                                                        "folded into the backbone (predicts without peft)")
    p.add_argument("--mixed-precision", choices=("no", "fp16", "bf16", "fp8"), default=None,
                   help="autocast precision (default: what `accelerate config` / `accelerate launch` set, else no)")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimiser step (default 1)")
    p.add_argument("--cpu", action="store_true", help="train on the CPU even when CUDA or MPS is present")
    p.add_argument("--log-with", default=None, metavar="TRACKER",
                   help="an Accelerate tracker: tensorboard, wandb, ... (logs into RUN)")
    p.add_argument("--img-size", type=int, default=d.img_size, help=f"backbone input size (default {d.img_size})")
    p.add_argument("--epochs", type=int, default=d.epochs, help=f"epochs (default {d.epochs})")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help=f"per-process batch (default {d.batch_size})")
    p.add_argument("--lr", type=float, default=d.lr, help=f"head learning rate (default {d.lr})")
    p.add_argument("--backbone-lr", type=float, default=None, help="backbone / adapter learning rate (default: lr/10 "
                                                                    "for a fully trainable --pretrained backbone, else lr)")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--ema", type=float, default=d.ema, help=f"EMA decay, 0 = off (default {d.ema})")
    p.add_argument("--clip", type=float, default=d.clip, help=f"gradient-norm clip, 0 = off (default {d.clip})")
    p.add_argument("--last", action="store_true", help="save the last epoch's weights (default: the epoch with the "
                                                        "best validation metric, e.g. AbsRel or mean angle)")
    p.add_argument("--no-tta", action="store_true", help="validate without horizontal-flip test-time augmentation")
    p.add_argument("--max-minutes", type=float, default=None, help="stop after the epoch that passes this budget")
    p.add_argument("--stop-after", type=int, default=None, metavar="N",
                   help="end after epoch N, on the learning-rate schedule of --epochs; --resume continues it "
                        "exactly (bit-identical to one uninterrupted run)")
    p.add_argument("--limit", type=int, default=None, help="use at most N images per split (quick runs)")
    p.add_argument("--val-fraction", type=float, default=d.val_fraction, metavar="F",
                   help=f"share of the data held out for validation, by a hash of each name (default {d.val_fraction})")
    p.add_argument("--test-fraction", type=float, default=d.test_fraction, metavar="F",
                   help=f"share held out for `vision evaluate --split test` (default {d.test_fraction})")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch")
    p.add_argument("--resume", action="store_true", help="continue the run in RUN from its last epoch")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(finetune_parser=p)


def lora_rank(args) -> int:
    """``--lora-rank``, or its default: LoRA (rank 16) on pretrained weights, full fine-tuning without them.
    Adapters asked for on a random backbone are refused in one line."""
    if args.lora_rank is None:
        if args.resume and args.out.is_dir():  # continue a run as it was started
            config = in_run(args.out, "config.json")  # a link there is refused, never read through
            if config.is_file() and config.stat().st_size < 1 << 20:
                try:
                    return int(DenseConfig.from_json(config.read_text()).lora_rank)
                except (OSError, ValueError, TypeError, AttributeError):
                    pass  # an unreadable config: the resume itself says what is wrong
        return DenseConfig().lora_rank if args.pretrained else 0
    if args.lora_rank > 0 and not args.pretrained:
        raise ValueError(f"--lora-rank {args.lora_rank} without --pretrained would train adapters on a randomly "
                         "initialised backbone; give --pretrained FILE|NAME, or --lora-rank 0 (full fine-tuning)")
    return args.lora_rank


def run(args) -> int:
    targets = _check_arguments(args)  # before torch loads: a bad option is one line at once
    rank = lora_rank(args)
    if args.merge and rank == 0:
        raise ValueError("--merge needs LoRA adapters (--lora-rank > 0, with --pretrained)")
    # lazy: the training stack (timm, PEFT, Accelerate: the [dense] extra) loads after the checks above
    from vision.pipelines.cli import finetune_run

    return finetune_run.run(args, rank, targets)


def _check_arguments(args):
    """Every numeric option in range (NaN and inf refused), the LoRA target pattern compiled: one line, before
    anything loads. Returns ``--lora-targets`` as :func:`parse_lora_targets` reads it."""
    check_numbers(args, dict(epochs=dict(low=1), batch_size=dict(low=1), lr=POSITIVE, backbone_lr=POSITIVE,
                             weight_decay=NON_NEGATIVE, ema=dict(low=0, high=1, high_open=True), clip=NON_NEGATIVE,
                             lora_alpha=POSITIVE, lora_dropout=dict(low=0, high=1, high_open=True),
                             max_minutes=POSITIVE, img_size=dict(low=MIN_IMG_SIZE), threads=dict(low=1),
                             grad_accum=dict(low=1), lora_rank=NON_NEGATIVE, stop_after=dict(low=1), limit=dict(low=1),
                             val_fraction=dict(low=0, high=0.9), test_fraction=dict(low=0, high=0.9)))
    if args.val_fraction + args.test_fraction >= 0.95:
        raise ValueError(f"--val-fraction {args.val_fraction} + --test-fraction {args.test_fraction} leave too little "
                         "to train on (their sum must be below 0.95)")
    targets = parse_lora_targets(args.lora_targets)
    if isinstance(targets, str):
        try:
            re.compile(targets)
        except re.error as err:
            raise ValueError(f"--lora-targets {targets!r} is not a valid regular expression ({err})") from None
    return targets


def parse_lora_targets(text: str | None):
    """``--lora-targets``: a list of module-name suffixes, or one regular expression (peft matches a string
    against whole names)."""
    if not text:
        return None
    if any(c in text for c in "*+?[]()|^$\\"):
        return text
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise ValueError(f"--lora-targets {text!r} names no modules")
    return names
