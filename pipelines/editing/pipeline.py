"""StructurePreservingEditPipeline: source-prompt -> target-prompt editing of a real image with SPL.

The paper's setting (Gong et al., WACV 2026): an SD1.5-family UNet with the LCM scheduler and the
virtual inversion sampler of InfEdit (Xu et al. 2023, DDCM): the source branch is the clean source
latent re-noised with the same noise as the target branch, and both branches (source prompt on the
source latent; unconditional and target prompt on the target latent) go through one batched UNet
call per step, so no explicit inversion is needed. The target's clean prediction is

    z0_t = z0_src + ((x_t - x_s) - sqrt(1 - abar_t) * (eps_t - eps_s)) / sqrt(abar_t)

and both branches are re-noised with one shared fresh noise. In the last part of sampling z0_t is
decoded, restored with SPL (+ colour) against the source's VAE round trip, and re-encoded; the decoded
output is post-processed against the source itself. ``mutual_self_attention`` lets the target
branch's decoder self-attention read the source branch's keys and values in the first steps. InfEdit's
unified attention control (Prompt-to-Prompt word swap / refinement of cross-attention, re-weighting,
self-attention replacement, LocalBlend) is in :mod:`.attention_control`, driven by ``__call__``'s
``cross_replace_steps``, ``self_replace_steps``, ``cross_attention_mode``, ``equalizer`` and
``local_blend_*`` arguments.

This folder also works as ``DiffusionPipeline.from_pretrained(model, custom_pipeline=<this folder>)``, and a
saved pipeline loads with ``DiffusionPipeline.from_pretrained(saved, trust_remote_code=True)`` (see
:meth:`StructurePreservingEditPipeline.save_pretrained`).
"""
from __future__ import annotations

import inspect
import json
import os
from typing import Any, Callable

import torch

from diffusers import AutoencoderKL, DiffusionPipeline, ImagePipelineOutput, LCMScheduler, UNet2DConditionModel
from diffusers.image_processor import VaeImageProcessor
from diffusers.utils.dynamic_modules_utils import get_cached_module_file
from diffusers.utils.torch_utils import randn_tensor

from vision.pipelines.editing.config import (StructurePreservationConfig, StructurePreservationReport, guided_indices,
                                             warn_if_no_step_is_guided)
from vision.pipelines.editing.restorer import LatentRestorer, spl_progress_bar

try:  # a package import, or this folder loaded by diffusers as custom_pipeline=<folder>
    from .attention_control import AttentionControl, attention_control
except ImportError:  # pragma: no cover - diffusers loads pipeline.py as a single module
    from vision.pipelines.editing.attention_control import AttentionControl, attention_control


class StructurePreservingEditPipeline(DiffusionPipeline):
    """Edit ``image`` from ``source_prompt`` to ``prompt`` keeping its structure (DDCM + SPL guidance).

    Components: ``vae`` (AutoencoderKL), ``text_encoder`` (CLIPTextModel), ``tokenizer`` (CLIPTokenizer),
    ``unet`` (UNet2DConditionModel), ``scheduler`` (LCMScheduler).

        >>> pipe = StructurePreservingEditPipeline.from_pretrained("SimianLuo/LCM_Dreamshaper_v7")
        >>> out = pipe(prompt="a cat, sunset", source_prompt="a cat, day", image=photo).images[0]
    """

    model_cpu_offload_seq = "text_encoder->unet->vae"
    _shim_name = "pipeline"  # the module file save_pretrained writes; model_index names it with the class
    _callback_tensor_inputs = ["latents", "denoised", "source_latents", "prompt_embeds"]
    _spl_built_in = True  # enable_structure_preservation refuses it: the SPL settings are call arguments

    def __init__(self, vae: AutoencoderKL, text_encoder, tokenizer, unet: UNet2DConditionModel,
                 scheduler: LCMScheduler):
        super().__init__()
        self.register_modules(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet, scheduler=scheduler)
        self.vae_scale_factor = 2 ** (len(self.vae.config.block_out_channels) - 1) if vae is not None else 8
        self.image_processor = VaeImageProcessor(vae_scale_factor=self.vae_scale_factor)

    def save_pretrained(self, save_directory, *args, push_to_hub: bool = False, **kwargs):
        """``DiffusionPipeline.save_pretrained``, plus what lets ``DiffusionPipeline.from_pretrained`` find this
        class: ``model_index.json`` names it as ``["pipeline", "StructurePreservingEditPipeline"]`` (diffusers'
        form for a custom pipeline class) and ``pipeline.py`` holds one import of it from the installed
        ``vision`` package (the folder carries no copy of the code). diffusers runs a folder's custom code
        only with ``trust_remote_code=True``; ``StructurePreservingEditPipeline.from_pretrained`` does not need
        it for folders written here. ``push_to_hub`` is not supported: save, then upload the folder."""
        if push_to_hub:
            raise NotImplementedError("save_pretrained(push_to_hub=True) is not supported for "
                                      "StructurePreservingEditPipeline; save it, then upload the folder with "
                                      "huggingface_hub.upload_folder")
        super().save_pretrained(save_directory, *args, **kwargs)
        index = os.path.join(save_directory, "model_index.json")
        with open(index) as f:
            config = json.load(f)
        config["_class_name"] = [self._shim_name, type(self).__name__]
        with open(index, "w") as f:
            json.dump(config, f, indent=2, sort_keys=True)
            f.write("\n")
        with open(os.path.join(save_directory, f"{self._shim_name}.py"), "w") as f:
            f.write(_SHIM)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs):
        """``DiffusionPipeline.from_pretrained``; a folder written by :meth:`save_pretrained` (whose
        ``pipeline.py`` is exactly the one-line import of this class) loads without ``trust_remote_code``."""
        shim = os.path.join(str(pretrained_model_name_or_path), f"{cls._shim_name}.py")
        if kwargs.get("custom_pipeline") is None and os.path.isfile(shim) and _accepts_trust_remote_code():
            with open(shim) as f:
                if f.read() == _SHIM:  # nothing but an import of the class being called
                    kwargs.setdefault("trust_remote_code", True)
        return super().from_pretrained(pretrained_model_name_or_path, **kwargs)

    def _check_scheduler(self):
        sched = self.scheduler
        if ("strength" not in inspect.signature(sched.set_timesteps).parameters
                or getattr(sched, "alphas_cumprod", None) is None):
            raise ValueError(f"StructurePreservingEditPipeline samples with InfEdit's virtual inversion on the LCM "
                             f"schedule and needs LCMScheduler, got {type(sched).__name__}; set "
                             "pipe.scheduler = LCMScheduler.from_config(pipe.scheduler.config) (for SPL guidance "
                             "with DDIM, Euler, DPM-Solver++ and other schedulers, use "
                             "vision.pipelines.enable_structure_preservation on a stock img2img pipeline)")

    def _embed(self, prompts: list[str], device) -> torch.Tensor:
        ids = self.tokenizer(prompts, padding="max_length", max_length=self.tokenizer.model_max_length,
                             truncation=True, return_tensors="pt").input_ids.to(device)
        return self.text_encoder(ids)[0]

    @property
    def num_timesteps(self):
        return self._num_timesteps

    @torch.no_grad()
    def __call__(self, prompt: str | list[str], image, source_prompt: str | list[str] = "", *,
                 negative_prompt: str | list[str] = "", num_inference_steps: int = 15, strength: float = 1.0,
                 guidance_scale: float = 2.0, source_guidance_scale: float = 1.0,
                 structure_preservation: bool = True, structure_config: StructurePreservationConfig | None = None,
                 start: float | None = None, steps_per_guidance: int | None = None, spl_weight: float | None = None,
                 color_weight: float | None = None, mask=None, invert_mask: bool | None = None,
                 post_process: bool | None = None, cross_replace_steps: float = 0.7, self_replace_steps: float = 0.3,
                 cross_attention_mode: str = "auto", equalizer: dict | None = None,
                 local_blend_words: str | list[str] | None = None, local_blend_threshold: float = 0.3,
                 local_blend_start: float = 0.2, mutual_self_attention: float = 0.0, num_images_per_prompt: int = 1,
                 generator: torch.Generator | list[torch.Generator] | None = None, output_type: str = "pil",
                 return_dict: bool = True,
                 callback_on_step_end: Callable[[Any, int, Any, dict], dict] | None = None,
                 callback_on_step_end_tensor_inputs: list[str] | None = None):
        """Edit ``image`` (PIL, array or (B, 3, H, W) tensor in [-1, 1] / [0, 1]; H and W are snapped to
        the latent grid) from ``source_prompt`` to ``prompt``.

        Args follow diffusers; ``source_prompt`` describes ``image``, ``prompt`` the edit. SPL guidance:
        ``structure_preservation`` (False: none), ``structure_config`` (a
        :class:`~vision.pipelines.editing.config.StructurePreservationConfig`, default the published settings),
        ``mask`` (1 = preserve); ``start``, ``steps_per_guidance``, ``spl_weight``, ``color_weight``,
        ``invert_mask`` and ``post_process`` change single fields of the config (None: keep it).
        ``source_guidance_scale`` is the CFG scale of the source branch (1 = its conditional prediction
        alone, as published). The guided SGD steps run under the pipeline's progress bar; the output's
        ``structure_preservation`` (and ``pipe.structure_preservation_report``) tells which steps were guided.

        Unified attention control (InfEdit; Prompt-to-Prompt), see :mod:`.attention_control`; the
        defaults are InfEdit's demo settings, and 0 / None switches each part off:
            cross_replace_steps: fraction of the first steps in which the target's cross-attention
                probabilities of tokens aligned to the source's are the source's (default 0.7).
            self_replace_steps: fraction of the first steps in which the target's self-attention
                probabilities are the source's (default 0.3).
            cross_attention_mode: ``"auto"`` (word swap when both prompts have the same token length,
                refinement otherwise), ``"replace"`` or ``"refine"``.
            equalizer: ``{word of prompt: scale}``, re-weights those words' cross-attention in the target.
            local_blend_words: words of the source and/or target prompt; outside their thresholded
                cross-attention region (``local_blend_threshold`` of the max, from step
                ``local_blend_start`` on) the target's clean latent is replaced by the source's.
            mutual_self_attention: fraction of the first steps in which the decoder's self-attention
                of the target branch reads the source branch's keys and values (0 = off).
        The attention processors are installed for the call and restored afterwards.

            >>> out = pipe("a blue dog", image=photo, source_prompt="a red cat", local_blend_words=["cat", "dog"],
            ...            equalizer={"blue": 2.0}, output_type="pt").images   # (1, 3, H, W) in [0, 1]
        """
        tensor_inputs, prompts, n = self._check_inputs(prompt, strength, output_type, num_images_per_prompt,
                                                       generator, callback_on_step_end,
                                                       callback_on_step_end_tensor_inputs)
        device = self._execution_device
        src_prompts, tgt_emb, src_emb, neg_emb = self._encode_prompts(prompts, source_prompt, negative_prompt,
                                                                      num_images_per_prompt, device)
        source = self._prepare_source(image, len(prompts), num_images_per_prompt, device)
        cfg = StructurePreservationConfig.from_options(
            structure_config, start=start, steps_per_guidance=steps_per_guidance, spl_weight=spl_weight,
            color_weight=color_weight, invert_mask=invert_mask, post_process=post_process)
        restorer, z_src = self._prepare_restorer(source, cfg, mask, n, device)
        timesteps, abar, x_s, x_t = self._prepare_latents(z_src, num_inference_steps, strength, generator, device)
        control = AttentionControl(self.tokenizer, [p for p in src_prompts for _ in range(num_images_per_prompt)],
                                   [p for p in prompts for _ in range(num_images_per_prompt)], n=n,
                                   num_steps=len(timesteps), cross_replace_steps=cross_replace_steps,
                                   self_replace_steps=self_replace_steps, cross_attention_mode=cross_attention_mode,
                                   equalizer=equalizer, local_blend_words=local_blend_words,
                                   local_blend_threshold=local_blend_threshold, local_blend_start=local_blend_start,
                                   mutual_self_attention=mutual_self_attention)
        if structure_preservation:  # (called here: its stack level counts from __call__)
            warn_if_no_step_is_guided(type(self).__name__, len(timesteps), cfg.start, cfg.steps_per_guidance)
        guided, post, spl_bar = self._plan_guidance(structure_preservation, cfg, len(timesteps), output_type)
        denoised = self._denoise(timesteps, abar, x_s, x_t, z_src, (src_emb, neg_emb, tgt_emb), control, restorer,
                                 guided, spl_bar, cfg.steps_per_guidance, guidance_scale, source_guidance_scale,
                                 generator, device, callback_on_step_end, tensor_inputs)
        images = self._decode(denoised, restorer, post, spl_bar, cfg.post_steps, output_type)
        spl_bar.close()
        self.maybe_free_model_hooks()
        self.structure_preservation_report = _report(structure_preservation, guided, timesteps, post, cfg)
        if not return_dict:
            return (images,)
        out = ImagePipelineOutput(images=images)
        out.structure_preservation = self.structure_preservation_report
        return out

    def _check_inputs(self, prompt, strength: float, output_type: str, num_images_per_prompt: int, generator,
                      callback_on_step_end, callback_on_step_end_tensor_inputs) -> tuple:
        """Refuse bad call arguments and a non-LCM scheduler; ``(tensor_inputs, prompts, n)`` (n: batch size)."""
        tensor_inputs = callback_on_step_end_tensor_inputs or ["latents"]
        if hasattr(callback_on_step_end, "tensor_inputs"):
            tensor_inputs = callback_on_step_end.tensor_inputs
        bad = [k for k in tensor_inputs if k not in self._callback_tensor_inputs]
        if bad:
            raise ValueError(f"callback_on_step_end_tensor_inputs {bad} not in {self._callback_tensor_inputs}")
        if not 0.0 < strength <= 1.0:
            raise ValueError(f"strength must be in (0, 1], got {strength}")
        if output_type not in ("pil", "np", "pt", "latent"):
            raise ValueError(f"output_type must be 'pil', 'np', 'pt' or 'latent', got {output_type!r}")
        self._check_scheduler()
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        n = len(prompts) * num_images_per_prompt
        if isinstance(generator, list) and len(generator) != n:
            raise ValueError(f"You have passed a list of generators of length {len(generator)}, but requested an "
                             f"effective batch size of {n}. Make sure the batch size matches the length of the "
                             "generators.")
        return tensor_inputs, prompts, n

    def _encode_prompts(self, prompts: list[str], source_prompt, negative_prompt, num_images_per_prompt: int,
                        device) -> tuple:
        """``(source prompts, target, source, negative embeddings)``, each embedding (n, tokens, dim)."""
        expand = lambda p: ([p] * len(prompts) if isinstance(p, str) else list(p))  # noqa: E731
        src_prompts, neg_prompts = expand(source_prompt), expand(negative_prompt)
        tgt_emb, src_emb, neg_emb = (self._embed(p, device).repeat_interleave(num_images_per_prompt, 0)
                                     for p in (prompts, src_prompts, neg_prompts))
        return src_prompts, tgt_emb, src_emb, neg_emb

    def _prepare_source(self, image, num_prompts: int, num_images_per_prompt: int, device) -> torch.Tensor:
        """The source image in [0, 1], (1 or n, 3, H, W) with H and W snapped to the latent grid."""
        # [-1, 1] tensors are mapped to [0, 1] here: handed to the processor they draw diffusers' FutureWarning
        if isinstance(image, torch.Tensor) and image.is_floating_point() and float(image.min()) < 0:
            image = (image + 1) / 2
        pixels = self.image_processor.preprocess(image).to(device, torch.float32)  # [-1, 1], size to the grid
        if pixels.shape[0] not in (1, num_prompts):
            raise ValueError(f"got {pixels.shape[0]} images for {num_prompts} prompts; "
                             "pass one image or one per prompt")
        source = (pixels + 1) / 2
        if source.shape[0] > 1:  # in the order of the prompt embeddings: each prompt's images together
            source = source.repeat_interleave(num_images_per_prompt, 0)
        return source

    def _prepare_restorer(self, source: torch.Tensor, cfg, mask, n: int, device) -> tuple:
        """``(restorer, z_src)``: the SPL restorer on this pipeline's VAE and the source latent, (n, 4, h, w)."""
        restorer = LatentRestorer(source, cfg, mask=mask)
        restorer.vae, restorer.decode_fn = self.vae, self.vae.decode
        z_src = restorer.encode(source).to(device)
        z_src = z_src.expand(n, -1, -1, -1) if z_src.shape[0] == 1 else z_src
        return restorer, z_src

    def _prepare_latents(self, z_src: torch.Tensor, num_inference_steps: int, strength: float, generator,
                         device) -> tuple:
        """``(timesteps, abar, x_s, x_t)``: the schedule and both branches' first noisy latents (one noise)."""
        self.scheduler.set_timesteps(num_inference_steps, device=device, strength=strength)
        timesteps = self.scheduler.timesteps
        self._num_timesteps = len(timesteps)
        abar = self.scheduler.alphas_cumprod.to(device, torch.float32)
        noise = randn_tensor(z_src.shape, generator=generator, device=device, dtype=torch.float32)
        a0 = abar[int(timesteps[0])]
        x_s = a0.sqrt() * z_src + (1 - a0).sqrt() * noise
        return timesteps, abar, x_s, x_s.clone()

    def _plan_guidance(self, structure_preservation: bool, cfg, num_steps: int, output_type: str) -> tuple:
        """``(guided, post, spl_bar)``: the SPL-guided step indices, whether to post-process, the SGD progress bar."""
        guided = guided_indices(num_steps, cfg.start) if structure_preservation and cfg.steps_per_guidance > 0 else []
        post = structure_preservation and cfg.post_process and output_type != "latent"
        spl_bar = spl_progress_bar(self, len(guided) * cfg.steps_per_guidance + (cfg.post_steps if post else 0))
        return guided, post, spl_bar

    def _denoise(self, timesteps, abar, x_s, x_t, z_src, embeddings: tuple, control, restorer, guided: list,
                 spl_bar, steps_per_guidance: int, guidance_scale: float, source_guidance_scale: float, generator,
                 device, callback_on_step_end, tensor_inputs: list) -> torch.Tensor:
        """The sampling loop (DDCM virtual inversion, SPL on the guided steps); the last clean latent, (n, 4, h, w)."""
        denoised = z_src
        with self.progress_bar(total=len(timesteps)) as bar, attention_control(self.unet, control):
            for i, t in enumerate(timesteps):
                control.step = i
                denoised = self._predict_clean(x_s, x_t, z_src, t, abar, embeddings, guidance_scale,
                                               source_guidance_scale)
                denoised = control.apply_blend(z_src, denoised)  # LocalBlend: the source outside the words
                if i in guided:
                    denoised = control.apply_blend(z_src, restorer.optimise_latent(denoised))
                    spl_bar.update(steps_per_guidance)
                if i < len(timesteps) - 1:
                    ap = abar[int(timesteps[i + 1])]
                    fresh = randn_tensor(z_src.shape, generator=generator, device=device, dtype=torch.float32)
                    x_s = ap.sqrt() * z_src + (1 - ap).sqrt() * fresh
                    x_t = ap.sqrt() * denoised + (1 - ap).sqrt() * fresh
                else:
                    x_t = denoised
                if callback_on_step_end is not None:
                    local = {"latents": x_t, "denoised": denoised, "source_latents": x_s,
                             "prompt_embeds": embeddings[2]}
                    out = callback_on_step_end(self, i, t, {k: local[k] for k in tensor_inputs})
                    x_t = out.pop("latents", x_t)
                    denoised = out.pop("denoised", denoised)
                    x_s = out.pop("source_latents", x_s)
                bar.update()
        return denoised

    def _predict_clean(self, x_s, x_t, z_src, t, abar, embeddings: tuple, guidance_scale: float,
                       source_guidance_scale: float) -> torch.Tensor:
        """One batched UNet call on both branches; the target's clean latent z0_t (module docstring's formula)."""
        src_emb, neg_emb, tgt_emb = embeddings
        inp = torch.cat([x_s, x_t, x_t]).to(self.unet.dtype)
        eps = self.unet(inp, t, encoder_hidden_states=torch.cat([src_emb, neg_emb, tgt_emb]),
                        ).sample.float()
        eps_s, eps_u, eps_c = eps.chunk(3)
        eps_t = eps_u + guidance_scale * (eps_c - eps_u)
        if source_guidance_scale != 1.0:  # (the source's unconditional branch reuses the target's)
            eps_s = eps_u + source_guidance_scale * (eps_s - eps_u)
        ab = abar[int(t)]
        return z_src + ((x_t - x_s) - (1 - ab).sqrt() * (eps_t - eps_s)) / ab.sqrt()

    def _decode(self, denoised: torch.Tensor, restorer, post: bool, spl_bar, post_steps: int, output_type: str):
        """The output images: the latent itself, or decoded (post-processed with SPL when ``post``)."""
        if output_type == "latent":
            return denoised
        decoded = restorer.decode_fn(restorer._to_vae(denoised).to(self.vae.dtype), return_dict=False)[0]
        if post:
            decoded = restorer.post_process(decoded)
            spl_bar.update(post_steps)
        return self.image_processor.postprocess(decoded.float().clamp(-1, 1), output_type=output_type)


def _report(structure_preservation: bool, guided: list, timesteps, post: bool, cfg) -> StructurePreservationReport:
    """What SPL guidance did in this call: the guided steps and timesteps, SGD steps, post-processing."""
    return StructurePreservationReport(
        guided=bool(structure_preservation), guided_steps=tuple(guided),
        guided_timesteps=tuple(float(timesteps[i]) for i in guided), num_steps=len(timesteps),
        steps_run=len(timesteps),
        sgd_steps=cfg.steps_per_guidance if structure_preservation else 0, post_processed=post,
        source="image" if structure_preservation else None, config=cfg)


_SHIM = ('"""Written by StructurePreservingEditPipeline.save_pretrained: the class comes from the installed '
         '`vision` package."""\n'
         "from vision.pipelines.editing.pipeline import StructurePreservingEditPipeline  # noqa: F401\n")


def _accepts_trust_remote_code() -> bool:
    """diffusers >= 0.35 asks for trust_remote_code before it runs a folder's pipeline.py; older ones run it."""
    return "trust_remote_code" in inspect.signature(get_cached_module_file).parameters
