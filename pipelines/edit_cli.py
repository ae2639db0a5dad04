"""``vision edit``: structure-preserving image editing with a local diffusers model and SPL guidance.

Loads an image-to-image pipeline for the model (a local folder saved by ``save_pretrained``, or a
model id already in the local Hugging Face cache; nothing is downloaded), attaches SPL guidance with
:func:`vision.pipelines.enable_structure_preservation` and edits the image towards ``--prompt``.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

DEFAULT_MODEL = "SimianLuo/LCM_Dreamshaper_v7"  # the SD1.5-based LCM the paper uses

EPILOG = f"""examples:
  vision edit photo.jpg --prompt "a cat at sunset, warm light" -o edit.png
  vision edit photo.jpg --prompt "a snowy street" --model ./my-sd15-folder --mask keep.png -o snow.png
  vision edit big.jpg --prompt "autumn" --working-size 768 --strength 0.5 -o autumn.png
  vision edit cat.jpg --prompt "a cat on a beach" --mask-words cat -o beach.png   # keep the cat's structure

The model (default {DEFAULT_MODEL}) must already be on this machine: a folder written by
save_pretrained, or a Hub id in the local Hugging Face cache (get it once with `hf download ID`).
The mask is gray, 1 (white) where the image's structure must be kept; --invert-mask flips it.
Sizes that are not multiples of the model's latent grid are padded and cropped back; images larger
than --working-size are edited at that size and post-processed (SPL restoration) at full size.
"""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "edit",
        help="edit an image with a local diffusion model, keeping its structure (SPL guidance)",
        description="Edit an image towards a prompt with a local diffusers image-to-image model while keeping "
                    "its edges and fine structure: SPL guidance in the last sampling steps and SPL "
                    "post-processing of the decoded result (Gong et al., WACV 2026).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("image", type=Path, help="the image to edit (PNG, JPEG, TIFF)")
    p.add_argument("--prompt", required=True, help="what the edited image should show")
    p.add_argument("--source-prompt", default=None,
                   help="what the image shows (StructurePreservingEditPipeline; not driven by the CLI yet)")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"local folder or cached Hub id (default {DEFAULT_MODEL})")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--mask", type=Path, default=None, help="gray mask, white = keep structure there")
    group.add_argument("--mask-words", nargs="+", default=None,
                       help="words of --prompt whose cross-attention (16 x 16, from a dry run) gives the mask")
    p.add_argument("--invert-mask", action="store_true", help="keep structure where the mask is black instead")
    p.add_argument("-o", "--output", type=Path, required=True, help="where to write the edit (PNG, JPEG, TIFF)")
    p.add_argument("--negative-prompt", default=None)
    p.add_argument("--steps", type=int, default=None, help="sampling steps (default: 8 for LCM models, 30 otherwise)")
    p.add_argument("--strength", type=float, default=0.6, help="how far to re-noise the image, 0..1 (default 0.6)")
    p.add_argument("--guidance-scale", type=float, default=None, help="classifier-free guidance (pipeline default)")
    p.add_argument("--start", type=float, default=0.8, help="guide the last (1 - START) of the steps (default 0.8)")
    p.add_argument("--spl-steps", type=int, default=100, help="optimisation steps per guided step (default 100)")
    p.add_argument("--spl-weight", type=float, default=1e4)
    p.add_argument("--color-weight", type=float, default=1e3)
    p.add_argument("--no-post-process", action="store_true", help="skip the final SPL restoration")
    p.add_argument("--working-size", type=int, default=1024,
                   help="longest side the model sees (default 1024); larger inputs are edited at this size")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="cuda, cpu, mps (default: cuda if available)")
    p.add_argument("--dtype", choices=("float16", "bfloat16", "float32"), default=None,
                   help="model precision (default float16 on CUDA, float32 otherwise)")
    p.set_defaults(func=run)


def missing_model_message(model: str) -> str:
    return (f"model {model!r} is neither a local folder nor in the local Hugging Face cache; download it once "
            f"with `hf download {model}` (or pass --model with a folder written by save_pretrained)")


def load_pipeline(model: str, torch_dtype=None):
    """An image-to-image pipeline for ``model`` from a local folder or the local cache only."""
    from diffusers import AutoPipelineForImage2Image

    path = Path(os.path.expanduser(model))
    kwargs = dict(torch_dtype=torch_dtype) if torch_dtype is not None else {}
    if path.exists():
        if not (path / "model_index.json").is_file():
            raise FileNotFoundError(f"{path} is not a diffusers model folder (no model_index.json); "
                                    "write one with pipeline.save_pretrained(folder)")
        return AutoPipelineForImage2Image.from_pretrained(path, local_files_only=True, **kwargs)
    try:
        return AutoPipelineForImage2Image.from_pretrained(model, local_files_only=True, **kwargs)
    except (OSError, ValueError) as err:  # huggingface_hub raises OSError subclasses for cache misses
        raise FileNotFoundError(missing_model_message(model)) from err


def _multiple(pipe) -> int:
    factor = int(getattr(pipe, "vae_scale_factor", 8) or 8)
    model = getattr(pipe, "transformer", None)
    patch = int(getattr(getattr(model, "config", None), "patch_size", 1) or 1) if model is not None else 1
    return max(8, factor * patch)


def edit(pipe, image, prompt: str, *, mask=None, mask_words=None, invert_mask=False, negative_prompt=None,
         steps=None, strength=0.6, guidance_scale=None, start=0.8, spl_steps=100, spl_weight=1e4, color_weight=1e3,
         post_process=True, working_size=1024, seed=0):
    """Edit ``image`` (anything :func:`vision.pipelines.masks.to_image_tensor` takes) with SPL guidance.

    Returns a (1, 3, H, W) float32 tensor in [0, 1] at the input's size. The image is resized so its
    longest side is at most ``working_size``, padded (reflect) to the model's latent multiple, edited,
    cropped back and, when it was shrunk, upsampled and post-processed at full size.
    """
    import torch
    import torch.nn.functional as F

    from vision.restore import restore_structure

    from .masks import load_mask, to_image_tensor
    from .spl_guidance import disable_structure_preservation, enable_structure_preservation

    if not 0.0 < strength <= 1.0:
        raise ValueError(f"--strength must be in (0, 1], got {strength}")
    if working_size < 16:
        raise ValueError(f"--working-size must be at least 16, got {working_size}")
    src = to_image_tensor(image)
    H, W = src.shape[-2:]
    full_mask = None if mask is None else load_mask(mask, (H, W), invert=invert_mask)
    scale = min(1.0, working_size / max(H, W))
    h, w = max(16, round(H * scale)), max(16, round(W * scale))
    work = src if (h, w) == (H, W) else F.interpolate(src, size=(h, w), mode="bicubic", antialias=True,
                                                      align_corners=False).clamp(0, 1)
    k = _multiple(pipe)
    ph, pw = -h % k, -w % k
    padded = F.pad(work, (0, pw, 0, ph), mode="reflect" if min(h, w) > max(ph, pw) else "replicate")
    work_mask = None
    if full_mask is not None:
        work_mask = F.interpolate(full_mask, size=(h, w), mode="bilinear", align_corners=False)
        work_mask = F.pad(work_mask, (0, pw, 0, ph), mode="replicate")
    shrunk = (h, w) != (H, W)
    if steps is None:
        steps = 8 if type(pipe.scheduler).__name__ == "LCMScheduler" else 30
    if mask_words:  # a dry run without guidance stores the words' cross-attention; guided-filter upsampling
        from .masks import attention_mask

        work_mask = attention_mask(pipe, mask_words, prompt=prompt, guide_image=padded, image=padded,
                                   strength=strength, num_inference_steps=steps,
                                   generator=torch.Generator().manual_seed(seed), invert=invert_mask)
        full_mask = F.interpolate(work_mask[..., :h, :w], size=(H, W), mode="bilinear", align_corners=False)
    enable_structure_preservation(pipe, padded, start=start, steps_per_guidance=spl_steps, spl_weight=spl_weight,
                                  color_weight=color_weight, mask=work_mask,
                                  post_process=post_process and not shrunk)
    try:
        kwargs = dict(prompt=prompt, image=padded, strength=strength, num_inference_steps=steps,
                      output_type="pt", generator=torch.Generator().manual_seed(seed))
        if negative_prompt is not None:
            kwargs["negative_prompt"] = negative_prompt
        if guidance_scale is not None:
            kwargs["guidance_scale"] = guidance_scale
        out = pipe(**kwargs).images[:1].float().cpu()
    finally:
        disable_structure_preservation(pipe)
    out = out[..., :h, :w].clamp(0, 1)
    if shrunk:
        out = F.interpolate(out, size=(H, W), mode="bicubic", align_corners=False).clamp(0, 1)
        if post_process:  # the post-processing step at full size, against the full-size source
            out = restore_structure(src, out, mask=full_mask, steps=spl_steps, spl_weight=spl_weight,
                                    color_weight=color_weight, value_range=(0.0, 1.0))
    return out


def run(args) -> int:
    import torch

    from vision.io import read_image, write_image

    if args.source_prompt is not None:
        raise ValueError("--source-prompt needs StructurePreservingEditPipeline (source + target prompt editing), "
                         "which `vision edit` does not drive yet; use it from Python, or edit with --prompt alone")
    if not args.image.is_file():
        raise FileNotFoundError(f"no such image: {args.image}")
    if args.mask is not None and not args.mask.is_file():
        raise FileNotFoundError(f"no such mask: {args.mask}")
    if args.output.resolve() == args.image.resolve():
        raise FileExistsError(f"refusing to overwrite the input {args.image}; choose another -o")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.float16 if device == "cuda" else None)
    image = read_image(args.image)
    pipe = load_pipeline(args.model, torch_dtype=dtype).to(device)
    pipe.set_progress_bar_config(desc="vision edit")
    out = edit(pipe, image, args.prompt, mask=None if args.mask is None else str(args.mask),
               mask_words=args.mask_words, invert_mask=args.invert_mask, negative_prompt=args.negative_prompt,
               steps=args.steps,
               strength=args.strength, guidance_scale=args.guidance_scale, start=args.start,
               spl_steps=args.spl_steps, spl_weight=args.spl_weight, color_weight=args.color_weight,
               post_process=not args.no_post_process, working_size=args.working_size, seed=args.seed)
    path = write_image(args.output, out[0].permute(1, 2, 0).numpy())
    print(f"wrote {path} ({out.shape[-1]} x {out.shape[-2]})")
    return 0
