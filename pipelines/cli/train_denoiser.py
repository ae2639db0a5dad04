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

from pathlib import Path

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


def run(args) -> int:
    # lazy: `vision train-denoiser --help` builds this parser without torch and the training stack
    from vision.pipelines.cli import train_denoiser_run

    return train_denoiser_run.run(args)
