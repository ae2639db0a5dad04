"""SPL guidance for stock diffusers pipelines: structure-preserving sampling without subclassing.

Gong et al. (WACV 2026, "Edge-Aware Image Manipulation via Diffusion Models with a Novel
Structure-Preservation Loss"): during the last part of sampling, decode the predicted clean latent,
optimise that image in pixel space with SPL (+ colour preservation, optionally masked) against the
source's VAE round trip, encode it and let the sampler go on; after the last step, run the same
optimisation once more on the decoded output against the source itself (post-processing).

How it attaches (``enable_structure_preservation``): the pipeline's scheduler instance gets a wrapped
``step``. Every scheduler supported here computes its clean-sample prediction as an affine function
``x0 = a * sample + b * model_output`` of the model output (epsilon, v or sample prediction; flow
velocity; LCM's boundary-condition ``denoised``). The wrapper computes that ``x0``, optimises it, and
hands the scheduler the model output ``model_output + (x0' - x0) / b``, for which the scheduler's own
formula yields exactly ``x0'`` at the same ``sample``. So the re-noising is the scheduler's own update
rule in every case: DDIM's deterministic direction, Euler's ODE step, DPM-Solver++'s multistep history
(which stores ``x0'``), LCM's fresh-noise re-noising, the flow-matching Euler step. The VAE instance
gets a wrapped ``decode`` that applies post-processing to the pipeline's final decode only.

    >>> pipe = StableDiffusionImg2ImgPipeline.from_pretrained(...)
    >>> enable_structure_preservation(pipe, image, start=0.8)
    >>> edited = pipe("a watercolour painting", image=image, strength=0.6).images[0]
    >>> disable_structure_preservation(pipe)

``SPLGuidanceCallback`` is the same guidance as a ``callback_on_step_end`` for pipelines that expose
``denoised`` to callbacks (LatentConsistencyModelImg2ImgPipeline, StructurePreservingEditPipeline):
there the re-noised latent is ``sqrt(abar_prev) * denoised + sqrt(1 - abar_prev) * noise``, so moving
``denoised`` by ``d`` moves the latent by exactly ``sqrt(abar_prev) * d``.
"""
from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F

from vision.restore import restore_structure

from .masks import load_mask, to_image_tensor

_ATTR = "_spl_guidance"
LATENT_UPDATES = ("replace", "delta")


# ----------------------------------------------------------------------------- scheduler families
def _ensure_step_index(scheduler, timestep) -> int | None:
    if hasattr(scheduler, "step_index") and hasattr(scheduler, "_init_step_index"):
        if scheduler.step_index is None:
            scheduler._init_step_index(timestep)
        return int(scheduler.step_index)
    return None


def _schedule_index(scheduler, timestep) -> int:
    """Position of ``timestep`` in ``scheduler.timesteps`` (the scheduler's own counter when it has one)."""
    idx = _ensure_step_index(scheduler, timestep)
    if idx is not None:
        return idx
    ts = scheduler.timesteps
    t = timestep.to(ts.device) if isinstance(timestep, torch.Tensor) else torch.tensor(timestep, device=ts.device)
    hits = (ts == t).nonzero()
    if len(hits) == 0:
        raise ValueError(f"timestep {timestep} is not in the scheduler's timesteps")
    return int(hits[0])


def scheduler_family(scheduler) -> str:
    """``"flow"``, ``"sigma"`` (Euler-type), ``"solver"`` (DPM-Solver++/UniPC ``convert_model_output``),
    ``"lcm"`` or ``"alpha"`` (DDIM/DDPM); raises ValueError for schedulers this cannot guide exactly."""
    name = type(scheduler).__name__
    cfg = scheduler.config
    if getattr(cfg, "thresholding", False):
        raise ValueError(f"{name} with thresholding=True clips x0 non-linearly; SPL guidance needs it off")
    if name == "FlowMatchEulerDiscreteScheduler":
        return "flow"
    if name in ("EulerDiscreteScheduler", "EulerAncestralDiscreteScheduler", "LMSDiscreteScheduler"):
        return "sigma"
    if name in ("DPMSolverMultistepScheduler", "DPMSolverSinglestepScheduler"):
        if cfg.algorithm_type not in ("dpmsolver++", "sde-dpmsolver++"):
            raise ValueError(f"{name} with algorithm_type={cfg.algorithm_type!r} works on noise, not x0; "
                             "use algorithm_type='dpmsolver++' (the diffusers default)")
        return "solver"
    if name == "UniPCMultistepScheduler":
        if not cfg.predict_x0:
            raise ValueError("UniPCMultistepScheduler with predict_x0=False is not supported")
        return "solver"
    if name == "LCMScheduler":
        return "lcm"
    if name in ("DDIMScheduler", "DDPMScheduler"):
        return "alpha"
    raise ValueError(f"SPL guidance does not support {name}; supported: DDIM, DDPM, Euler, Euler ancestral, LMS, "
                     "DPM-Solver++ (multistep, singlestep), UniPC, LCM, flow-matching Euler")


def x0_coefficients(scheduler, timestep, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(a, b)``, float32 scalars, with the scheduler's clean prediction ``x0 = a * sample + b * model_output``."""
    family = scheduler_family(scheduler)
    dev = like.device
    one = torch.ones((), dtype=torch.float32, device=dev)
    pred = getattr(scheduler.config, "prediction_type", "epsilon")
    if family in ("flow", "sigma"):
        _ensure_step_index(scheduler, timestep)
        sigma = scheduler.sigmas[scheduler.step_index].to(dev, torch.float32)
        if family == "flow" or pred == "epsilon":
            return one, -sigma
        if pred == "v_prediction":
            return 1 / (sigma ** 2 + 1), -sigma / (sigma ** 2 + 1).sqrt()
        if pred == "sample":
            return 0 * one, one
    elif family == "solver":
        _ensure_step_index(scheduler, timestep)
        z = torch.zeros((1, 1, 1, 1), dtype=torch.float32, device=dev)
        a = scheduler.convert_model_output(z, sample=z + 1).reshape(())
        b = scheduler.convert_model_output(z + 1, sample=z).reshape(())
        return a.float(), b.float()
    else:
        t = int(timestep)
        abar = scheduler.alphas_cumprod[t].to(dev, torch.float32)
        if pred == "epsilon":
            a, b = 1 / abar.sqrt(), -(1 - abar).sqrt() / abar.sqrt()
        elif pred == "v_prediction":
            a, b = abar.sqrt(), -(1 - abar).sqrt()
        elif pred == "sample":
            a, b = 0 * one, one
        else:
            raise ValueError(f"unsupported prediction_type {pred!r}")
        if family == "lcm":  # denoised = c_out * x0 + c_skip * sample
            c_skip, c_out = scheduler.get_scalings_for_boundary_condition_discrete(t)
            c_skip = torch.as_tensor(c_skip, dtype=torch.float32, device=dev)
            c_out = torch.as_tensor(c_out, dtype=torch.float32, device=dev)
            a, b = c_out * a + c_skip, c_out * b
        return a, b
    raise ValueError(f"unsupported prediction_type {pred!r}")


# ----------------------------------------------------------------------------- pixel-space restoration
class LatentRestorer:
    """Decode a clean latent, restore its structure in pixel space with SPL + colour loss, encode it.

    Holds the source (in [0, 1]), the optional mask and the loss settings; the reference inside the
    sampling loop is the source's VAE round trip (cached per size), post-processing uses the source.
    """

    def __init__(self, source_image, *, steps: int = 100, spl_weight: float = 1e4, color_weight: float = 1e3,
                 mask=None, invert_mask: bool = False, latent_update: str = "replace", radius: int = 5,
                 eps: float = 1e-4, post_process_steps: int | None = None):
        if latent_update not in LATENT_UPDATES:
            raise ValueError(f"latent_update must be one of {LATENT_UPDATES}, got {latent_update!r}")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"steps_per_guidance must be a non-negative integer, got {steps!r}")
        self.source = to_image_tensor(source_image)  # (1, 3, H, W) float32 in [0, 1]
        self.mask = None if mask is None else load_mask(mask, self.source.shape[-2:], invert=invert_mask)
        self.steps, self.spl_weight, self.color_weight = steps, float(spl_weight), float(color_weight)
        self.post_steps = steps if post_process_steps is None else int(post_process_steps)
        self.latent_update, self.radius, self.eps = latent_update, radius, eps
        self._references: dict = {}
        self.vae = None
        self.decode_fn = None  # the VAE's own decode (not the post-processing wrapper)

    # latents <-> VAE space, as the pipelines do it
    def _to_vae(self, z):
        cfg = self.vae.config
        mean, std = getattr(cfg, "latents_mean", None), getattr(cfg, "latents_std", None)
        if mean is not None and std is not None:
            c = z.shape[1]
            mean = torch.tensor(mean, device=z.device, dtype=z.dtype).view(1, c, 1, 1)
            std = torch.tensor(std, device=z.device, dtype=z.dtype).view(1, c, 1, 1)
            return z * std / cfg.scaling_factor + mean
        return z / cfg.scaling_factor + (getattr(cfg, "shift_factor", None) or 0.0)

    def _from_vae(self, h):
        cfg = self.vae.config
        mean, std = getattr(cfg, "latents_mean", None), getattr(cfg, "latents_std", None)
        if mean is not None and std is not None:
            c = h.shape[1]
            mean = torch.tensor(mean, device=h.device, dtype=h.dtype).view(1, c, 1, 1)
            std = torch.tensor(std, device=h.device, dtype=h.dtype).view(1, c, 1, 1)
            return (h - mean) * cfg.scaling_factor / std
        return (h - (getattr(cfg, "shift_factor", None) or 0.0)) * cfg.scaling_factor

    @torch.no_grad()
    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Latents (B, C, h, w) -> images (B, 3, H, W) float32 in [0, 1]."""
        out = self.decode_fn(self._to_vae(z).to(self.vae.dtype), return_dict=False)[0]
        return ((out.float() + 1) / 2).nan_to_num(0.5).clamp(0, 1)

    @torch.no_grad()
    def encode(self, img: torch.Tensor) -> torch.Tensor:
        """Images in [0, 1] -> latents (posterior mean: deterministic, no extra noise per guided step)."""
        enc = self.vae.encode((img * 2 - 1).to(self.vae.dtype))
        dist = getattr(enc, "latent_dist", None)
        h = dist.mean if dist is not None else (enc.latents if hasattr(enc, "latents") else enc[0])
        return self._from_vae(h.float())

    def _resized_source(self, shape, device):
        src = self.source.to(device)
        if tuple(src.shape[-2:]) != tuple(shape[-2:]):
            src = F.interpolate(src, size=tuple(shape[-2:]), mode="bicubic", antialias=True,
                                align_corners=False).clamp(0, 1)
        return src

    def _mask_at(self, shape, device):
        if self.mask is None:
            return None
        m = self.mask.to(device)
        if tuple(m.shape[-2:]) != tuple(shape[-2:]):
            m = F.interpolate(m, size=tuple(shape[-2:]), mode="bilinear", align_corners=False).clamp(0, 1)
        return m

    def reference(self, shape, device) -> torch.Tensor:
        """The source's VAE round trip at ``shape``'s size: the in-loop target (SPL does not chase detail
        the VAE cannot hold)."""
        key = (tuple(shape[-2:]), str(device))
        if key not in self._references:
            src = self._resized_source(shape, device)
            self._references[key] = self.decode(self.encode(src))
        return self._references[key]

    def restore(self, target: torch.Tensor, image: torch.Tensor, steps: int) -> torch.Tensor:
        b = image.shape[0]
        return restore_structure(target.expand(b, -1, -1, -1), image, mask=self._mask_at(image.shape, image.device),
                                 steps=steps, spl_weight=self.spl_weight, color_weight=self.color_weight,
                                 radius=self.radius, eps=self.eps, value_range=(0.0, 1.0))

    @torch.no_grad()
    def optimise_latent(self, x0: torch.Tensor) -> torch.Tensor:
        """One guided SPL stage: decode ``x0``, restore against the reference, encode. Returns float32 latents."""
        x0 = x0.float()
        img = self.decode(x0)
        opt = self.restore(self.reference(img.shape, img.device), img, self.steps)
        if self.latent_update == "replace":  # the published code: the re-encoded image is the new x0 ...
            new = self.encode(opt)
            if self.mask is None:
                return new
            # ... but only inside the mask: outside it the latent stays bit-exact, so the VAE round trip
            # cannot blur the region the user left free (the loss there is zero anyway)
            m = F.interpolate(self._mask_at(img.shape, x0.device), size=tuple(x0.shape[-2:]), mode="area")
            return x0 + m * (new - x0)
        # only the optimisation's own change goes back into the latent: with no change x0 stays bit-exact
        both = self.encode(torch.cat([opt, img]))
        return x0 + (both[: len(img)] - both[len(img):])

    @torch.no_grad()
    def post_process(self, decoded: torch.Tensor) -> torch.Tensor:
        """Post-processing: the decoded output (in [-1, 1]) restored against the source itself."""
        img = ((decoded.float() + 1) / 2).nan_to_num(0.5).clamp(0, 1)
        out = self.restore(self._resized_source(img.shape, img.device), img, self.post_steps)
        return (out * 2 - 1).to(decoded.dtype)


# ----------------------------------------------------------------------------- attach to a pipeline
def _forward(original, method):
    """A plain function calling ``method`` that carries ``original``'s name, doc and signature."""
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        return method(*args, **kwargs)

    return wrapper


class _Attachment:
    def __init__(self, pipe, restorer: LatentRestorer, start: float, post_process: bool):
        self.pipe, self.restorer, self.start, self.post_process = pipe, restorer, float(start), bool(post_process)
        self.scheduler, self.vae = pipe.scheduler, pipe.vae
        scheduler_family(self.scheduler)  # fail now, not mid-sampling
        restorer.vae, restorer.decode_fn = self.vae, self.vae.decode
        self.first = self.last = None
        self.post_pending = False
        self.guided_steps: list[int] = []  # schedule indices guided in the latest run, for inspection
        self._orig_step, self._orig_set_timesteps = self.scheduler.step, self.scheduler.set_timesteps
        # functools.wraps keeps the wrapped signatures visible to inspect.signature: pipelines pass
        # `generator` / `eta` to step and `timesteps` / `sigmas` to set_timesteps only if they see them
        self.scheduler.step = _forward(self._orig_step, self.step)
        self.scheduler.set_timesteps = _forward(self._orig_set_timesteps, self.set_timesteps)
        self.vae.decode = _forward(self.restorer.decode_fn, self.decode)

    def detach(self):
        for obj, name in ((self.scheduler, "step"), (self.scheduler, "set_timesteps"), (self.vae, "decode")):
            obj.__dict__.pop(name, None)

    def set_timesteps(self, *args, **kwargs):
        self.first = self.last = None
        self.post_pending = False
        return self._orig_set_timesteps(*args, **kwargs)

    def step(self, model_output, timestep, sample, *args, **kwargs):
        sched = self.scheduler
        idx = _schedule_index(sched, timestep)
        if self.first is None or (self.last is not None and idx <= self.last):
            self.first, self.post_pending, self.guided_steps = idx, False, []
        self.last = idx
        n_run = max(len(sched.timesteps) - self.first, 1)
        if (idx - self.first) / n_run >= self.start - 1e-9 and self.restorer.steps > 0:
            a, b = x0_coefficients(sched, timestep, sample)
            m, s = model_output.float(), sample.float()
            x0 = a * s + b * m
            x0_new = self.restorer.optimise_latent(x0)
            model_output = (m + (x0_new - x0) / b).to(model_output.dtype)
            self.guided_steps.append(idx)
        out = self._orig_step(model_output, timestep, sample, *args, **kwargs)
        if idx >= len(sched.timesteps) - 1:
            self.post_pending = self.post_process
        return out

    def decode(self, z, *args, **kwargs):
        out = self.restorer.decode_fn(z, *args, **kwargs)
        if not self.post_pending:
            return out
        self.post_pending = False
        if isinstance(out, tuple):
            return (self.restorer.post_process(out[0]),) + tuple(out[1:])
        out.sample = self.restorer.post_process(out.sample)
        return out


def enable_structure_preservation(pipe, source_image, *, start: float = 0.8, steps_per_guidance: int = 100,
                                  spl_weight: float = 1e4, color_weight: float = 1e3, mask=None,
                                  invert_mask: bool = False, post_process: bool = True,
                                  post_process_steps: int | None = None, latent_update: str = "replace",
                                  radius: int = 5, eps: float = 1e-4):
    """Attach SPL guidance (Gong et al., WACV 2026) to a stock diffusers pipeline, in place.

    Args:
        pipe: a pipeline with ``scheduler`` and ``vae`` (SD / SDXL / SD3 img2img, LCM img2img, ...).
            Re-run this after replacing ``pipe.scheduler``.
        source_image: the image whose structure is kept: PIL image, (H, W, 3) array (uint8 or float in
            [0, 1]) or tensor ((1,) 3, H, W) in [0, 1] (or [-1, 1] if it has negative values).
        start: guide the steps whose position in this run's schedule is >= ``start`` (default 0.8: the
            last 20 %, as published; 0 guides every step).
        steps_per_guidance: SGD steps per guided sampling step (default 100).
        spl_weight, color_weight: loss weights (defaults 1e4 and 1e3, the published code's).
        mask: optional image or array (H, W) in [0, 1] or [0, 255]: 1 where structure must be kept.
            ``invert_mask`` flips it.
        post_process: after the last step, restore the decoded output against the source itself.
        post_process_steps: SGD steps of post-processing (default ``steps_per_guidance``).
        latent_update: ``"replace"`` (default, the published code: x0 = encode(optimised); with a mask
            only inside it, the mask area-downsampled to the latent grid) or ``"delta"``
            (x0 += encode(optimised) - encode(decoded): the latent changes only by what the optimisation
            changed, but a decoder that blurs then also blurs the correction, so it restores less).
        radius, eps: SPL window radius and ridge term.

    Returns:
        ``pipe`` (for chaining). Raises ValueError for schedulers whose x0 is not affine in the model
        output (thresholding, PNDM, DPM-Solver in noise mode, ...).
    """
    if not 0.0 <= float(start) <= 1.0:
        raise ValueError(f"start must be in [0, 1], got {start!r}")
    for name in ("scheduler", "vae"):
        if getattr(pipe, name, None) is None:
            raise ValueError(f"the pipeline has no {name}; SPL guidance needs both a scheduler and a VAE")
    disable_structure_preservation(pipe)
    restorer = LatentRestorer(source_image, steps=steps_per_guidance, spl_weight=spl_weight,
                              color_weight=color_weight, mask=mask, invert_mask=invert_mask,
                              latent_update=latent_update, radius=radius, eps=eps,
                              post_process_steps=post_process_steps)
    setattr(pipe, _ATTR, _Attachment(pipe, restorer, start, post_process))
    return pipe


def disable_structure_preservation(pipe):
    """Remove what :func:`enable_structure_preservation` attached; a no-op if nothing is attached."""
    att = pipe.__dict__.pop(_ATTR, None)
    if att is not None:
        att.detach()
    return pipe


# ----------------------------------------------------------------------------- the callback form
def _pipeline_callback_base():
    from diffusers.callbacks import PipelineCallback

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

        >>> cb = SPLGuidanceCallback(source_image, start=0.8)
        >>> out = lcm_img2img(prompt, image=source_image, callback_on_step_end=cb,
        ...                   callback_on_step_end_tensor_inputs=cb.tensor_inputs)  # LCM img2img does not read it
    """

    tensor_inputs = ["latents", "denoised"]

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
        tensor_inputs = ["latents", "denoised"]

        def __init__(self, source_image, *, start: float = 0.8, steps_per_guidance: int = 100,
                     spl_weight: float = 1e4, color_weight: float = 1e3, mask=None, invert_mask: bool = False,
                     latent_update: str = "replace", radius: int = 5, eps: float = 1e-4):
            base.__init__(self, cutoff_step_ratio=1.0)
            if not 0.0 <= float(start) <= 1.0:
                raise ValueError(f"start must be in [0, 1], got {start!r}")
            self.start = float(start)
            self.restorer = LatentRestorer(source_image, steps=steps_per_guidance, spl_weight=spl_weight,
                                           color_weight=color_weight, mask=mask, invert_mask=invert_mask,
                                           latent_update=latent_update, radius=radius, eps=eps)

        def callback_fn(self, pipeline, step_index, timestep, callback_kwargs) -> dict[str, Any]:
            sched = pipeline.scheduler
            n = int(getattr(pipeline, "num_timesteps", None) or len(sched.timesteps))
            if step_index / max(n, 1) < self.start - 1e-9 or self.restorer.steps == 0:
                return callback_kwargs
            if "denoised" not in callback_kwargs:
                raise ValueError("SPLGuidanceCallback needs 'denoised' in callback_on_step_end_tensor_inputs; "
                                 "for pipelines without it use enable_structure_preservation")
            self.restorer.vae = pipeline.vae
            self.restorer.decode_fn = type(pipeline.vae).decode.__get__(pipeline.vae)
            denoised, latents = callback_kwargs["denoised"], callback_kwargs["latents"]
            new = self.restorer.optimise_latent(denoised)
            nxt = sched.step_index  # already advanced past this step
            if nxt is None or nxt >= len(sched.timesteps):
                scale = 1.0
            else:
                scale = float(sched.alphas_cumprod[int(sched.timesteps[nxt])]) ** 0.5
            shift = new - denoised.float()
            callback_kwargs["denoised"] = new.to(denoised.dtype)
            callback_kwargs["latents"] = (latents.float() + scale * shift).to(latents.dtype)
            return callback_kwargs

    _SPLGuidanceCallback.__name__ = _SPLGuidanceCallback.__qualname__ = "SPLGuidanceCallback"
    _CALLBACK_CLASS = _SPLGuidanceCallback
    return _CALLBACK_CLASS


__all__ = ["enable_structure_preservation", "disable_structure_preservation", "SPLGuidanceCallback",
           "LatentRestorer", "x0_coefficients", "scheduler_family"]

