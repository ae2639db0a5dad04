"""``vision edit``: structure-preserving image editing with a local diffusers model and SPL guidance.

Loads the model from a local folder saved by ``save_pretrained`` or from the local Hugging Face cache
(nothing is downloaded). With ``--prompt`` alone: the model's stock image-to-image pipeline with SPL
guidance attached by :func:`vision.pipelines.enable_structure_preservation`. With ``--source-prompt``
too: :class:`vision.pipelines.StructurePreservingEditPipeline` (source -> target prompt editing with
InfEdit's virtual inversion and unified attention control, SPL guidance and post-processing).
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import os
import warnings
from pathlib import Path

from vision.pipelines.editing.config import DEFAULT_CONFIG, SCHEDULERS, StructurePreservationConfig
from vision.pipelines.plugins import setting

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


def _looks_like_path(model: str) -> bool:
    """A folder rather than a Hub id ("org/name" or "name"): it exists, starts like a path, or has more slashes."""
    return (Path(os.path.expanduser(model)).exists() or model.startswith((".", "~", "/")) or "\\" in model
            or model.endswith("/") or model.count("/") > 1)


def check_model(model: str) -> None:
    """Fail fast, before torch or diffusers load: a path that does not exist, or a Hub id that is not in the
    local cache, is one clear line (the model loads only from this machine)."""
    if _looks_like_path(model):
        path = Path(os.path.expanduser(model))
        if not path.exists():
            raise FileNotFoundError(f"--model {model}: no such folder (a folder written by save_pretrained)")
        if not (path / "model_index.json").is_file():
            raise FileNotFoundError(f"--model {model}: not a diffusers model folder (no model_index.json); "
                                    "write one with pipeline.save_pretrained(folder)")
        return
    from huggingface_hub import constants

    cache = Path(constants.HF_HUB_CACHE) / ("models--" + model.replace("/", "--")) / "snapshots"
    if not any(cache.glob("*/model_index.json")):
        raise FileNotFoundError(missing_model_message(model))


def missing_model_message(model: str) -> str:
    return (f"model {model!r} is neither a local folder nor in the local Hugging Face cache; download it once "
            f"with `hf download {model}` (or pass --model with a folder written by save_pretrained)")


def hub_offline() -> None:
    """Put the Hugging Face hub client in offline mode for this process, so that loading by Hub id reads
    the local cache and never opens a connection. The client reads ``HF_HUB_OFFLINE`` when it is first
    imported, and libraries copy the flag at their own import, so modules already loaded get it set too."""
    import sys

    os.environ["HF_HUB_OFFLINE"] = "1"
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in ("huggingface_hub", "diffusers", "transformers") and \
                isinstance(getattr(module, "HF_HUB_OFFLINE", None), bool):
            module.HF_HUB_OFFLINE = True


def dtype_keyword() -> str:
    """``dtype`` where the installed diffusers takes it (``torch_dtype`` is deprecated there), else ``torch_dtype``."""
    try:
        from diffusers.utils.deprecation_utils import _resolve_dtype  # noqa: F401  present where dtype= is the name
    except ImportError:
        return "torch_dtype"
    return "dtype"


def _load_local(cls, model: str, torch_dtype=None):
    """``cls.from_pretrained`` of a local folder, or of a cached model id without any download."""
    import json

    hub_offline()
    path = Path(os.path.expanduser(model))
    kwargs = {dtype_keyword(): torch_dtype} if torch_dtype is not None else {}
    if path.exists():
        index = path / "model_index.json"
        if not index.is_file():
            raise FileNotFoundError(f"{path} is not a diffusers model folder (no model_index.json); "
                                    "write one with pipeline.save_pretrained(folder)")
        try:
            json.loads(index.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as err:
            raise ValueError(f"--model {model}: {index} is not valid JSON ({err})") from None
        try:
            with _quiet_hub():
                return cls.from_pretrained(path, local_files_only=True, **kwargs)
        except (OSError, ValueError, KeyError, TypeError) as err:
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise ValueError(f"--model {model}: cannot load the diffusers model in {path} ({first})") from None
    try:
        with _quiet_hub():
            return cls.from_pretrained(model, local_files_only=True, **kwargs)
    except (OSError, ValueError) as err:  # huggingface_hub raises OSError subclasses for cache misses
        raise FileNotFoundError(missing_model_message(model)) from err


@contextlib.contextmanager
def _notes_as_lines():
    """SPL guidance's warning that a call guides no step as one line on stderr when it first happens (Python's
    warning is two lines, with a source line); other warnings as they are."""
    from vision.kernels.runtime import get_logger

    seen = set()
    with warnings.catch_warnings():
        warnings.filterwarnings("always", message=".*guides no step")
        show = warnings.showwarning

        def one_line(message, category, filename, lineno, file=None, line=None):
            text = str(message)
            if "guides no step" not in text:
                return show(message, category, filename, lineno, file, line)
            if text not in seen:
                seen.add(text)
                get_logger("vision.edit").warning(f"vision edit: {text} (--steps, --start)")

        warnings.showwarning = one_line
        yield


@contextlib.contextmanager
def _quiet_hub():
    """Silence the hub client's deprecation notice about ``local_dir_use_symlinks`` (diffusers passes it):
    it speaks of "downloading", which this command never does."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*local_dir_use_symlinks.*")
        yield


def load_pipeline(model: str, torch_dtype=None):
    """An image-to-image pipeline for ``model`` from a local folder or the local cache only."""
    from diffusers import AutoPipelineForImage2Image

    return _load_local(AutoPipelineForImage2Image, model, torch_dtype)


def load_edit_pipeline(model: str, torch_dtype=None):
    """A :class:`StructurePreservingEditPipeline` for ``model`` (an SD1.5-family folder or cached id; its
    components are reused, its scheduler is replaced by an LCMScheduler with the same noise schedule)."""
    from diffusers import LCMScheduler

    from vision.pipelines.editing import StructurePreservingEditPipeline

    pipe = _load_local(StructurePreservingEditPipeline, model, torch_dtype)
    missing = [name for name in ("vae", "text_encoder", "tokenizer", "unet") if getattr(pipe, name, None) is None]
    if missing:
        raise ValueError(f"--source-prompt needs an SD1.5-family model with a vae, text_encoder, tokenizer and "
                         f"unet; {model!r} has no {', '.join(missing)}")
    if not isinstance(pipe.scheduler, LCMScheduler):
        pipe.scheduler = LCMScheduler.from_config(pipe.scheduler.config)
    return pipe


def _multiple(pipe) -> int:
    factor = int(getattr(pipe, "vae_scale_factor", 8) or 8)
    model = getattr(pipe, "transformer", None)
    patch = int(getattr(getattr(model, "config", None), "patch_size", 1) or 1) if model is not None else 1
    return max(8, factor * patch)


def edit(pipe, image, prompt: str, *, source_prompt=None, mask=None, mask_words=None, mask_threshold=0.5,
         config: StructurePreservationConfig | None = None, invert_mask=None,
         negative_prompt=None, steps=None, strength=None, guidance_scale=None, start=None, spl_steps=None,
         spl_weight=None, color_weight=None, post_process=None, working_size=1024, seed=0,
         cross_replace_steps=None, self_replace_steps=None, blend_words=None):
    """Edit ``image`` (anything :func:`vision.pipelines.editing.masks.to_image_tensor` takes) with SPL guidance.

    ``pipe`` is a stock image-to-image pipeline (SPL guidance is attached for the call), or, with
    ``source_prompt``, a :class:`vision.pipelines.StructurePreservingEditPipeline` (from
    :func:`load_edit_pipeline`; ``cross_replace_steps``, ``self_replace_steps`` and ``blend_words``
    go to its attention control, None = its defaults). Returns a (1, 3, H, W) float32 tensor in
    [0, 1] at the input's size. The image is resized so its longest side is at most ``working_size``,
    padded (reflect) to the model's latent multiple, edited, cropped back and, when it was shrunk,
    upsampled and post-processed at full size. ``config`` holds the SPL settings (a
    :class:`~vision.pipelines.editing.config.StructurePreservationConfig`; its ``invert_mask`` applies to
    ``mask`` and ``mask_words``); ``start``, ``spl_steps`` (its ``steps_per_guidance``), ``spl_weight``,
    ``color_weight``, ``post_process`` and ``invert_mask`` change single fields (None: keep them).

        >>> out = edit(load_edit_pipeline("./sd15"), photo, "a dog on grass", source_prompt="a cat on grass")
    """
    import torch
    import torch.nn.functional as F

    from vision.pipelines.editing.masks import load_mask, to_image_tensor, words_mask

    cfg = StructurePreservationConfig.from_options(
        config, start=start, steps_per_guidance=spl_steps, spl_weight=spl_weight, color_weight=color_weight,
        post_process=post_process, invert_mask=invert_mask)
    invert_mask = cfg.invert_mask
    editing = source_prompt is not None
    strength = _check_edit(pipe, editing, cross_replace_steps, self_replace_steps, blend_words, strength,
                           working_size)
    src = to_image_tensor(image)
    H, W = src.shape[-2:]
    full_mask = None if mask is None else load_mask(mask, (H, W), invert=invert_mask)
    (h, w), padded, work_mask = _to_working_size(src, full_mask, working_size, _multiple(pipe))
    shrunk = (h, w) != (H, W)
    if steps is None:
        steps = 15 if editing else (8 if type(pipe.scheduler).__name__ == "LCMScheduler" else 30)
    control = {}
    if editing:
        control = {name: v for name, v in (("cross_replace_steps", cross_replace_steps),
                                     ("self_replace_steps", self_replace_steps),
                                     ("local_blend_words", blend_words)) if v is not None}
    if mask_words:  # a dry run without guidance stores the words' cross-attention; guided-filter upsampling
        work_mask = words_mask(pipe, mask_words, prompt, source_prompt, control, padded, strength, steps, seed,
                               invert_mask, mask_threshold)
        full_mask = F.interpolate(work_mask[..., :h, :w], size=(H, W), mode="bilinear", align_corners=False)
    kwargs = dict(prompt=prompt, image=padded, strength=strength, num_inference_steps=steps,
                  output_type="pt", generator=torch.Generator().manual_seed(seed))
    if negative_prompt is not None:
        kwargs["negative_prompt"] = negative_prompt
    if guidance_scale is not None:
        kwargs["guidance_scale"] = guidance_scale
    # the mask is inverted above; at the working size the pipeline post-processes only if nothing is resized
    call_cfg = cfg.replace(invert_mask=False, post_process=cfg.post_process and not shrunk)
    out = _call_pipe(pipe, source_prompt, call_cfg, work_mask, control, kwargs, padded)
    return _to_full_size(out[..., :h, :w].clamp(0, 1), src, full_mask, cfg, shrunk)


def _check_edit(pipe, editing: bool, cross_replace_steps, self_replace_steps, blend_words, strength,
                working_size: int) -> float:
    """Refuse arguments that do not go together or are out of range; the strength (default: 1 editing, else 0.6)."""
    if not editing and (cross_replace_steps is not None or self_replace_steps is not None or blend_words):
        raise ValueError("--cross-replace-steps, --self-replace-steps and --blend-words need --source-prompt")
    if editing and type(pipe).__name__ != "StructurePreservingEditPipeline":
        raise ValueError(f"a source prompt needs StructurePreservingEditPipeline, got {type(pipe).__name__}")
    if strength is None:
        strength = 1.0 if editing else 0.6
    if not 0.0 < strength <= 1.0:
        raise ValueError(f"--strength must be in (0, 1], got {strength}")
    if working_size < 16:
        raise ValueError(f"--working-size must be at least 16, got {working_size}")
    return strength


def _to_working_size(src, full_mask, working_size: int, k: int) -> tuple:
    """``((h, w), padded, work_mask)``: ``src`` (1, 3, H, W) shrunk to ``working_size`` and padded to ``k``."""
    import torch.nn.functional as F

    H, W = src.shape[-2:]
    scale = min(1.0, working_size / max(H, W))
    h, w = max(16, round(H * scale)), max(16, round(W * scale))
    work = src if (h, w) == (H, W) else F.interpolate(src, size=(h, w), mode="bicubic", antialias=True,
                                                      align_corners=False).clamp(0, 1)
    ph, pw = -h % k, -w % k
    padded = F.pad(work, (0, pw, 0, ph), mode="reflect" if min(h, w) > max(ph, pw) else "replicate")
    work_mask = None
    if full_mask is not None:
        work_mask = F.interpolate(full_mask, size=(h, w), mode="bilinear", align_corners=False)
        work_mask = F.pad(work_mask, (0, pw, 0, ph), mode="replicate")
    return (h, w), padded, work_mask


def _call_pipe(pipe, source_prompt, call_cfg, work_mask, control: dict, kwargs: dict, padded):
    """Run the pipeline once with SPL guidance (attached for the call to a stock one); (1, 3, h', w') on the CPU."""
    from vision.pipelines.editing.spl_guidance import disable_structure_preservation, enable_structure_preservation

    if source_prompt is not None:
        return pipe(source_prompt=source_prompt, structure_config=call_cfg, mask=work_mask,
                    **control, **kwargs).images[:1].float().cpu()
    enable_structure_preservation(pipe, padded, config=call_cfg, mask=work_mask)
    try:
        return pipe(**kwargs).images[:1].float().cpu()
    finally:
        disable_structure_preservation(pipe)


def _to_full_size(out, src, full_mask, cfg, shrunk: bool):
    """``out`` back at ``src``'s size when it was ``shrunk`` (bicubic), and post-processed there as ``cfg`` asks."""
    import torch.nn.functional as F

    from vision.restore import restore_structure

    if shrunk:
        out = F.interpolate(out, size=src.shape[-2:], mode="bicubic", align_corners=False).clamp(0, 1)
        if cfg.post_process:  # the post-processing step at full size, against the full-size source
            out = restore_structure(src, out, mask=full_mask, steps=cfg.post_steps, config=cfg.loss,
                                    value_range=(0.0, 1.0))
    return out


def _expand(paths: list[Path]) -> list[Path]:
    out = []
    for p in paths:
        matches = sorted(glob.glob(str(p))) if glob.has_magic(str(p)) else [str(p)]
        if not matches:
            raise FileNotFoundError(f"IMAGE {p}: no file matches")
        out += [Path(m) for m in matches]
    return out


def _targets(images: list[Path], output: Path, several: bool) -> list[Path]:
    """One output per image: ``-o`` itself (a file) for one IMAGE, else (several images, or a glob) the folder
    ``-o`` with ``<whole stem>.png`` for each."""
    from vision.io import WRITE_BITS
    from vision.outputs import output_stems, prepare_file, prepare_folder

    if not several:
        if output.is_dir():
            raise ValueError(f"-o {output} is a folder; give a file name (for example {output / 'edit.png'}), "
                             "or several images / a glob to write one file per image there")
        if output.suffix.lower() not in WRITE_BITS:
            raise ValueError(f"-o {output}: unsupported image extension {output.suffix or '(none)'!r}; "
                             f"use one of {', '.join(WRITE_BITS)}")
        prepare_file(output, "-o")
        return [output]
    if output.suffix.lower() in WRITE_BITS and not output.is_dir():
        raise ValueError(f"-o {output}: with {len(images)} images -o is a folder (one PNG per image)")
    prepare_folder(output, "-o")
    return [output / f"{stem}.png" for stem in output_stems(images, "IMAGE")]


def run(args) -> int:
    from vision.pipelines.extras import require

    require("diffusers", "transformers")  # without the [edit] extra, that is the one line to say
    hub_offline()  # before diffusers imports the hub client: this command never downloads
    if args.source_prompt is None and (args.cross_replace_steps is not None or args.self_replace_steps is not None
                                       or args.blend_words):
        raise ValueError("--cross-replace-steps, --self-replace-steps and --blend-words need --source-prompt")
    if args.source_prompt is not None and args.scheduler not in (None, "lcm"):
        raise ValueError(f"--scheduler {args.scheduler}: --source-prompt samples with the LCM scheduler (lcm)")
    from vision.pipelines.plugins import NON_NEGATIVE, check_numbers

    unit = dict(low=0, high=1)
    check_numbers(args, dict(steps=dict(low=1), strength=dict(low=0, low_open=True, high=1), guidance_scale=NON_NEGATIVE,
                             cross_replace_steps=unit, self_replace_steps=unit, working_size=dict(low=16)))
    # the one config of this run (its values were checked as the options were parsed); it goes whole to edit()
    config = StructurePreservationConfig(start=args.start, steps_per_guidance=args.spl_steps,
                                         spl_weight=args.spl_weight, color_weight=args.color_weight,
                                         post_process=not args.no_post_process, invert_mask=args.invert_mask)
    images = _expand(args.images)
    from vision.io import read_image, write_image
    from vision.outputs import refuse_inputs
    from vision.pipelines.cli import read_input

    several = len(images) > 1 or any(glob.has_magic(str(p)) for p in args.images)
    targets = _targets(images, args.output, several)
    inputs = [("IMAGE", p) for p in images] + [("--mask", args.mask)]
    for t in targets:
        refuse_inputs(t, inputs)
    pixels = [read_input(read_image, p, "IMAGE") for p in images]  # bad files fail before anything heavy loads
    check_model(args.model)  # a missing model is one line in well under 2 s: before torch and diffusers load
    import torch

    from vision.pipelines.cli import torch_device
    from vision.pipelines.editing.masks import load_mask

    device = torch_device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.float16 if device.type == "cuda" else None)
    if args.mask is not None:
        read_input(lambda p: load_mask(str(p)), args.mask, "--mask", "mask")  # before the model loads
    loader = load_pipeline if args.source_prompt is None else load_edit_pipeline
    pipe = loader(args.model, torch_dtype=dtype).to(device)
    if args.source_prompt is None:
        from vision.kernels.runtime import get_logger
        from vision.pipelines.editing.schedulers import use_guidable_scheduler

        note = use_guidable_scheduler(pipe, args.scheduler)
        if note:
            get_logger("vision.edit").info(f"vision edit: {note}")
    pipe.set_progress_bar_config(desc="vision edit", disable=len(images) > 1)
    from tqdm.auto import tqdm

    with _notes_as_lines():
        for path, image, target in tqdm(list(zip(images, pixels, targets)), desc="vision edit", unit="image",
                                        disable=len(images) < 2):
            out = edit(pipe, image, args.prompt, source_prompt=args.source_prompt,
                       cross_replace_steps=args.cross_replace_steps, self_replace_steps=args.self_replace_steps,
                       blend_words=args.blend_words, mask=None if args.mask is None else str(args.mask),
                       mask_words=args.mask_words, mask_threshold=args.mask_threshold,
                       config=config, negative_prompt=args.negative_prompt, steps=args.steps,
                       strength=args.strength, guidance_scale=args.guidance_scale, working_size=args.working_size,
                       seed=args.seed)
            written = write_image(target, out[0].permute(1, 2, 0).numpy())
            print(f"wrote {written} ({out.shape[-1]} x {out.shape[-2]})")
    return 0
