"""``vision edit``: structure-preserving image editing with a local diffusers model and SPL guidance.

Loads the model from a local folder saved by ``save_pretrained`` or from the local Hugging Face cache
(nothing is downloaded). With ``--prompt`` alone: the model's stock image-to-image pipeline with SPL
guidance attached by :func:`vision.pipelines.enable_structure_preservation`. With ``--source-prompt``
too: :class:`vision.pipelines.StructurePreservingEditPipeline` (source -> target prompt editing with
InfEdit's virtual inversion and unified attention control, SPL guidance and post-processing).
"""
from __future__ import annotations

import argparse
import glob
from pathlib import Path

from vision.outputs import output_stems, prepare_file, prepare_folder, refuse_inputs
from vision.pipelines.cli import read_input
from vision.pipelines.cli.hub_cache import check_model, hub_offline
from vision.pipelines.editing.config import DEFAULT_CONFIG, SCHEDULERS, StructurePreservationConfig
from vision.pipelines.extras import require
from vision.pipelines.plugins import NON_NEGATIVE, check_numbers, setting

DEFAULT_MODEL = "SimianLuo/LCM_Dreamshaper_v7"  # the SD1.5-based LCM the paper uses

EPILOG = f"""examples:
  vision edit photo.jpg --prompt "a cat at sunset, warm light" -o edit.png
  vision edit photo.jpg --prompt "a snowy street" --model ./my-sd15-folder --mask keep.png -o snow.png
  vision edit big.jpg --prompt "autumn" --working-size 768 --strength 0.5 -o autumn.png
  vision edit "shots/*.jpg" --prompt "in winter" --model ./my-sd15-folder -o winter/   # one model load
  vision edit cat.jpg --prompt "a cat on a beach" --mask-words cat -o beach.png   # keep the cat's structure
  vision edit photo.jpg --prompt "a snowy street" --model ./sd15 --scheduler dpm++ --steps 20 -o snow.png
  vision edit cat.jpg --source-prompt "a cat on grass" --prompt "a dog on grass" -o dog.png
  vision edit cat.jpg --source-prompt "a cat on grass" --prompt "a dog on grass" --blend-words cat dog -o dog.png
  vision edit cat.jpg --source-prompt "a cat on grass" --prompt "a dog on grass" --mask-words grass \\
      --mask-threshold otsu --cross-replace-steps 0.8 -o dog.png   # keep the grass's edges

The model (default {DEFAULT_MODEL}) must already be on this machine: a folder written by
save_pretrained, or a Hub id in the local Hugging Face cache (get it once with `hf download ID`).
With --source-prompt (a description of the input image) the edit is source -> target prompt editing
with StructurePreservingEditPipeline (InfEdit's inversion-free sampler; LCM scheduler, which replaces
the model's own; SD1.5-family models): --cross-replace-steps / --self-replace-steps set its attention
control, --blend-words limits the change to those words' cross-attention region (LocalBlend).
SPL guidance needs a scheduler whose clean-sample prediction it can steer: a model whose own scheduler it
cannot guide (PNDM, Stable Diffusion 1.5's default) samples with DDIM on the same noise schedule, and a
line says so; --scheduler picks another ({", ".join(SCHEDULERS)}).
The mask is gray, 1 (white) where the image's structure must be kept; --invert-mask flips it;
--mask-words are looked up in --prompt, else in --source-prompt.
Sizes that are not multiples of the model's latent grid are padded and cropped back; images larger
than --working-size are edited at that size and post-processed (SPL restoration) at full size.
"""


HELP = "edit an image with a local diffusion model, keeping its structure (SPL guidance)"
DESCRIPTION = ("Edit an image towards a prompt with a local diffusers image-to-image model while keeping "
               "its edges and fine structure: SPL guidance in the last sampling steps and SPL "
               "post-processing of the decoded result (Gong et al., WACV 2026).")


def add_arguments(p) -> None:
    p.add_argument("images", type=Path, nargs="+", metavar="IMAGE",
                   help="images to edit (PNG, JPEG, TIFF; globs are expanded); the model loads once for all")
    p.add_argument("--prompt", required=True, help="what the edited image should show")
    p.add_argument("--source-prompt", default=None,
                   help="what the image shows: edit from it to --prompt with StructurePreservingEditPipeline")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"local folder or cached Hub id (default {DEFAULT_MODEL})")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--mask", type=Path, default=None, help="gray mask, white = keep structure there")
    group.add_argument("--mask-words", nargs="+", default=None,
                       help="words of --prompt (or --source-prompt) whose cross-attention (16 x 16, from a dry "
                            "run) gives the mask")
    p.add_argument("--mask-threshold", type=_threshold, default=0.5,
                   help="threshold of --mask-words maps: a number in [0, 1] on max-normalised maps (default 0.5), "
                        "or otsu / mean (adaptive, on min-max normalised maps)")
    p.add_argument("--invert-mask", action="store_true", help="keep structure where the mask is black instead")
    p.add_argument("-o", "--output", type=Path, required=True,
                   help="where to write the edit (PNG, JPEG, TIFF); with several images a folder, one PNG per "
                        "image named by its whole stem")
    p.add_argument("--negative-prompt", default=None)
    p.add_argument("--steps", type=int, default=None,
                   help="sampling steps (default: 15 with --source-prompt, else 8 for LCM models and 30 otherwise)")
    p.add_argument("--scheduler", choices=list(SCHEDULERS), default=None,
                   help="sampler, on the model's noise schedule (default: the model's own when SPL guidance can "
                        "guide it, else ddim); flow-matching models (SD3, Flux) take flow-euler only")
    p.add_argument("--strength", type=float, default=None,
                   help="how far to re-noise the image, 0..1 (default 1 with --source-prompt, else 0.6)")
    p.add_argument("--cross-replace-steps", type=float, default=None,
                   help="with --source-prompt: fraction of steps with cross-attention control (default 0.7)")
    p.add_argument("--self-replace-steps", type=float, default=None,
                   help="with --source-prompt: fraction of steps with self-attention control (default 0.3)")
    p.add_argument("--blend-words", nargs="+", default=None,
                   help="with --source-prompt: words of either prompt; only their region changes (LocalBlend)")
    p.add_argument("--guidance-scale", type=float, default=None, help="classifier-free guidance (pipeline default)")
    # the SPL options are checked by the config they build (StructurePreservationConfig.check), while parsing
    check = StructurePreservationConfig.check
    p.add_argument("--start", type=setting(check, "start"), default=DEFAULT_CONFIG.start,
                   help=f"guide the last (1 - START) of the steps, 0..1 (default {DEFAULT_CONFIG.start})")
    p.add_argument("--spl-steps", type=setting(check, "steps_per_guidance", int),
                   default=DEFAULT_CONFIG.steps_per_guidance,
                   help=f"optimisation steps per guided step (default {DEFAULT_CONFIG.steps_per_guidance})")
    p.add_argument("--spl-weight", type=setting(check, "spl_weight"), default=DEFAULT_CONFIG.spl_weight,
                   help=f"weight of the structure term, >= 0 (default {DEFAULT_CONFIG.spl_weight:g})")
    p.add_argument("--color-weight", type=setting(check, "color_weight"), default=DEFAULT_CONFIG.color_weight,
                   help=f"weight of the colour term, >= 0 (default {DEFAULT_CONFIG.color_weight:g})")
    p.add_argument("--no-post-process", action="store_true", help="skip the final SPL restoration")
    p.add_argument("--working-size", type=int, default=1024,
                   help="longest side the model sees (default 1024); larger inputs are edited at this size")
    p.add_argument("--seed", type=int, default=0, help="noise seed of every image's edit (default 0): an image's "
                   "result does not depend on the other images of the run")
    p.add_argument("--device", default=None, help="cuda, cpu, mps (default: cuda if available)")
    p.add_argument("--dtype", choices=("float16", "bfloat16", "float32"), default=None,
                   help="model precision (default float16 on CUDA, float32 otherwise)")


def _threshold(text: str):
    if text in ("otsu", "mean"):
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], otsu or mean, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {value}")
    return value


def _expand(paths: list[Path]) -> list[Path]:
    out = []
    for p in paths:
        matches = sorted(glob.glob(str(p))) if glob.has_magic(str(p)) else [str(p)]
        if not matches:
            raise FileNotFoundError(f"IMAGE {p}: no file matches")
        out += [Path(m) for m in matches]
    return out


def _targets(images: list[Path], output: Path, several: bool, extensions) -> list[Path]:
    """One output per image: ``-o`` itself (a file) for one IMAGE, else (several images, or a glob) the folder
    ``-o`` with ``<whole stem>.png`` for each; ``extensions``: the image extensions a file ``-o`` may have."""
    if not several:
        if output.is_dir():
            raise ValueError(f"-o {output} is a folder; give a file name (for example {output / 'edit.png'}), "
                             "or several images / a glob to write one file per image there")
        if output.suffix.lower() not in extensions:
            raise ValueError(f"-o {output}: unsupported image extension {output.suffix or '(none)'!r}; "
                             f"use one of {', '.join(extensions)}")
        prepare_file(output, "-o")
        return [output]
    if output.suffix.lower() in extensions and not output.is_dir():
        raise ValueError(f"-o {output}: with {len(images)} images -o is a folder (one PNG per image)")
    prepare_folder(output, "-o")
    return [output / f"{stem}.png" for stem in output_stems(images, "IMAGE")]


def run(args) -> int:
    require("diffusers", "transformers")  # without the [edit] extra, that is the one line to say
    hub_offline()  # before diffusers imports the hub client: this command never downloads
    if args.source_prompt is None and (args.cross_replace_steps is not None or args.self_replace_steps is not None
                                       or args.blend_words):
        raise ValueError("--cross-replace-steps, --self-replace-steps and --blend-words need --source-prompt")
    if args.source_prompt is not None and args.scheduler not in (None, "lcm"):
        raise ValueError(f"--scheduler {args.scheduler}: --source-prompt samples with the LCM scheduler (lcm)")
    unit = dict(low=0, high=1)
    check_numbers(args, dict(steps=dict(low=1), strength=dict(low=0, low_open=True, high=1), guidance_scale=NON_NEGATIVE,
                             cross_replace_steps=unit, self_replace_steps=unit, working_size=dict(low=16)))
    # the one config of this run (its values were checked as the options were parsed); it goes whole to edit()
    config = StructurePreservationConfig(start=args.start, steps_per_guidance=args.spl_steps,
                                         spl_weight=args.spl_weight, color_weight=args.color_weight,
                                         post_process=not args.no_post_process, invert_mask=args.invert_mask)
    images = _expand(args.images)
    from vision.io import WRITE_BITS, read_image  # lazy: vision.io loads numpy, which `vision edit --help` does without

    several = len(images) > 1 or any(glob.has_magic(str(p)) for p in args.images)
    targets = _targets(images, args.output, several, WRITE_BITS)
    inputs = [("IMAGE", p) for p in images] + [("--mask", args.mask)]
    for t in targets:
        refuse_inputs(t, inputs)
    pixels = [read_input(read_image, p, "IMAGE") for p in images]  # bad files fail before anything heavy loads
    check_model(args.model)  # a missing model is one line in well under 2 s: before torch and diffusers load
    # lazy: torch and diffusers load once every check above has passed (and `vision edit --help` needs neither)
    from vision.pipelines.cli import edit_run

    return edit_run.edit_images(args, config, images, pixels, targets)
