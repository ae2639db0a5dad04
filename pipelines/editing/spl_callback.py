"""SPL guidance as a ``callback_on_step_end`` (``diffusers.callbacks.PipelineCallback``), for pipelines
that pass ``denoised`` to callbacks (LatentConsistencyModelImg2ImgPipeline, StructurePreservingEditPipeline)."""
from __future__ import annotations

import sys
from typing import Any

from .config import StructurePreservationConfig, guided_indices, warn_if_no_step_is_guided
from .restorer import LatentRestorer

TENSOR_INPUTS = ["latents", "denoised"]


def _refuse_pipelines_without_denoised(frame) -> None:
    """A ValueError in our words when the pipeline reading ``tensor_inputs`` (stock diffusers pipelines read a
    ``PipelineCallback``'s in their ``__call__``, then refuse unknown names with a message about
    ``callback_on_step_end_tensor_inputs``) cannot hand ``denoised`` to callbacks, as Stable Diffusion's do not.
    ``frame`` is the reader's: the pipeline is its ``self`` (through ``MultiPipelineCallbacks``, a frame or two
    further up); read anywhere else, nothing is checked."""
    for _ in range(4):
        if frame is None:
            return
        owner = frame.f_locals.get("self")
        allowed = getattr(type(owner), "_callback_tensor_inputs", None)
        if isinstance(allowed, (list, tuple)):
            if "denoised" not in allowed:
                raise ValueError(
                    f"SPLGuidanceCallback guides the clean latent that the pipeline hands to its callbacks as "
                    f"'denoised', and {type(owner).__name__} hands none (only {', '.join(allowed)}): use "
                    f"enable_structure_preservation(pipe) for this pipeline, or a pipeline that does "
                    f"(LatentConsistencyModelImg2ImgPipeline)")
            return
        frame = frame.f_back


def _pipeline_callback_base():
    from diffusers.callbacks import PipelineCallback  # lazy: the [edit] extra; this module imports without it

    return PipelineCallback


class SPLGuidanceCallback:
    """SPL guidance as a ``callback_on_step_end``, for pipelines that pass ``denoised`` to callbacks.

    Built on first use as a subclass of ``diffusers.callbacks.PipelineCallback`` (so pipelines read its
    ``tensor_inputs`` themselves). After the scheduler's LCM step, ``latents = sqrt(abar_prev) * denoised
    + sqrt(1 - abar_prev) * noise`` (``= denoised`` on the last step); the callback optimises
    ``denoised`` and moves ``latents`` by ``sqrt(abar_prev) * (denoised' - denoised)``: exactly the latent
    the scheduler would have produced from ``denoised'`` with the same noise. Post-processing is not part
    of a callback (the pipeline decodes after the last callback); use :func:`enable_structure_preservation`
    or ``vision.restore_structure`` on the output for it.

        >>> cb = SPLGuidanceCallback(source_image, config=StructurePreservationConfig(start=0.8))
        >>> out = lcm_img2img(prompt, image=source_image, callback_on_step_end=cb,
        ...                   callback_on_step_end_tensor_inputs=cb.tensor_inputs)  # LCM img2img does not read it
    """

    tensor_inputs = TENSOR_INPUTS

    def __new__(cls, *args, **kwargs):
        if cls is SPLGuidanceCallback:  # build the PipelineCallback subclass lazily (diffusers import)
            cls = _callback_class()
        return object.__new__(cls)


_CALLBACK_CLASS = None


def _callback_class():
    global _CALLBACK_CLASS
    if _CALLBACK_CLASS is not None:
        return _CALLBACK_CLASS
    base = _pipeline_callback_base()

    class _SPLGuidanceCallback(SPLGuidanceCallback, base):
        @property
        def tensor_inputs(self) -> list[str]:
            """``["latents", "denoised"]``; read by a pipeline that cannot hand ``denoised`` to callbacks, a
            ValueError that says so (instead of diffusers' message about its tensor inputs)."""
            _refuse_pipelines_without_denoised(sys._getframe(1))
            return list(TENSOR_INPUTS)

        def __init__(self, source_image, *, config: StructurePreservationConfig | None = None, mask=None,
                     start: float | None = None, steps_per_guidance: int | None = None,
                     spl_weight: float | None = None, color_weight: float | None = None,
                     invert_mask: bool | None = None, latent_update: str | None = None, radius: int | None = None,
                     eps: float | None = None, bidirectional: bool | None = None):
            base.__init__(self, cutoff_step_ratio=1.0)
            self.spl_config = StructurePreservationConfig.from_options(
                config, start=start, steps_per_guidance=steps_per_guidance, spl_weight=spl_weight,
                color_weight=color_weight, invert_mask=invert_mask, latent_update=latent_update, radius=radius,
                eps=eps, bidirectional=bidirectional)
            self.start = float(self.spl_config.start)
            self.restorer = LatentRestorer(source_image, self.spl_config, mask=mask)
            self.guided_steps: list[int] = []  # the steps guided in the last call, counted in the steps asked for

        def callback_fn(self, pipeline, step_index, timestep, callback_kwargs) -> dict[str, Any]:
            sched = pipeline.scheduler
            n = int(getattr(pipeline, "num_timesteps", None) or len(sched.timesteps))
            if step_index == 0:
                self.guided_steps = []
                warn_if_no_step_is_guided("SPLGuidanceCallback", n, self.start, self.restorer.steps)
            if step_index not in guided_indices(n, self.start) or self.restorer.steps == 0:
                return callback_kwargs
            if "denoised" not in callback_kwargs:
                raise ValueError("SPLGuidanceCallback needs 'denoised' in callback_on_step_end_tensor_inputs; "
                                 "for pipelines without it use enable_structure_preservation")
            self.restorer.vae, self.restorer.decode_fn = pipeline.vae, pipeline.vae.decode
            denoised, latents = callback_kwargs["denoised"], callback_kwargs["latents"]
            new = self.restorer.optimise_latent(denoised)
            nxt = sched.step_index  # already advanced past this step
            if nxt is None or nxt >= len(sched.timesteps):
                scale = 1.0
            else:
                scale = float(sched.alphas_cumprod[int(sched.timesteps[nxt])]) ** 0.5
            shift = new - denoised.float()
            # counted in the schedule asked for: an img2img run that skips the first steps starts past 0
            self.guided_steps.append(int(step_index) + max(len(sched.timesteps) - n, 0))
            callback_kwargs["denoised"] = new.to(denoised.dtype)
            callback_kwargs["latents"] = (latents.float() + scale * shift).to(latents.dtype)
            return callback_kwargs

    _SPLGuidanceCallback.__name__ = _SPLGuidanceCallback.__qualname__ = "SPLGuidanceCallback"
    _CALLBACK_CLASS = _SPLGuidanceCallback
    return _CALLBACK_CLASS
