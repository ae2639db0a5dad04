"""What ``vision edit`` runs once its checks have passed (:mod:`vision.pipelines.cli.edit`): the model loaded from this
machine (:func:`load_pipeline`, or :func:`load_edit_pipeline` for source -> target prompt editing) and each image
edited with SPL guidance by :func:`edit` (working size, padding, post-processing at full size).

    >>> out = edit(load_pipeline("./sd15"), photo, "a snowy street")   # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import json
import os
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from diffusers import LCMScheduler
from diffusers.utils import deprecation_utils
from tqdm.auto import tqdm

from vision.io import write_image
from vision.kernels.runtime import get_logger
from vision.pipelines.cli import read_input, torch_device
from vision.pipelines.cli.hub_cache import hub_offline, missing_model_message
from vision.pipelines.editing import StructurePreservingEditPipeline
from vision.pipelines.editing.config import StructurePreservationConfig
from vision.pipelines.editing.masks import load_mask, to_image_tensor, words_mask
from vision.pipelines.editing.schedulers import use_guidable_scheduler
from vision.pipelines.editing.spl_guidance import disable_structure_preservation, enable_structure_preservation
from vision.restore import restore_structure


def dtype_keyword() -> str:
    """``dtype`` where the installed diffusers takes it (``torch_dtype`` is deprecated there), else ``torch_dtype``."""
    return "dtype" if hasattr(deprecation_utils, "_resolve_dtype") else "torch_dtype"  # present where dtype= is the name


def _load_local(cls, model: str, torch_dtype=None):
    """``cls.from_pretrained`` of a local folder, or of a cached model id without any download."""
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
    # lazy: 1.4 s and 300 modules of diffusers' auto pipelines, which a --source-prompt edit never needs
    from diffusers import AutoPipelineForImage2Image

    return _load_local(AutoPipelineForImage2Image, model, torch_dtype)


def load_edit_pipeline(model: str, torch_dtype=None):
    """A :class:`StructurePreservingEditPipeline` for ``model`` (an SD1.5-family folder or cached id; its
    components are reused, its scheduler is replaced by an LCMScheduler with the same noise schedule)."""
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
    if shrunk:
        out = F.interpolate(out, size=src.shape[-2:], mode="bicubic", align_corners=False).clamp(0, 1)
        if cfg.post_process:  # the post-processing step at full size, against the full-size source
            out = restore_structure(src, out, mask=full_mask, steps=cfg.post_steps, config=cfg.loss,
                                    value_range=(0.0, 1.0))
    return out


def edit_images(args, config: StructurePreservationConfig, images: list[Path], pixels: list, targets: list[Path]
                ) -> int:
    """Load ``args.model`` once and write the edit of each of ``images`` (read already: ``pixels``) to its target,
    with the one ``config`` of the run; the exit code."""
    device = torch_device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.float16 if device.type == "cuda" else None)
    if args.mask is not None:
        read_input(lambda p: load_mask(str(p)), args.mask, "--mask", "mask")  # before the model loads
    loader = load_pipeline if args.source_prompt is None else load_edit_pipeline
    pipe = loader(args.model, torch_dtype=dtype).to(device)
    if args.source_prompt is None:
        note = use_guidable_scheduler(pipe, args.scheduler)
        if note:
            get_logger("vision.edit").info(f"vision edit: {note}")
    pipe.set_progress_bar_config(desc="vision edit", disable=len(images) > 1)
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
