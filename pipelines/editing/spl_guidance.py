"""SPL guidance for stock diffusers pipelines: structure-preserving sampling without subclassing.

Gong et al. (WACV 2026, "Edge-Aware Image Manipulation via Diffusion Models with a Novel
Structure-Preservation Loss"): during the last part of sampling, decode the predicted clean latent,
optimise that image in pixel space with SPL (+ colour preservation, optionally masked) against the
source's VAE round trip, encode it and let the sampler go on; after the last step, run the same
optimisation once more on the decoded output against the source itself (post-processing).

The guidance step: every scheduler supported here computes its clean-sample prediction as an affine
function ``x0 = a * sample + b * model_output`` of the model output. The guided step computes that
``x0``, optimises it, and hands the scheduler ``model_output + (x0' - x0) / b``, for which the
scheduler's own formula yields exactly ``x0'``; so the re-noising is the scheduler's own update rule
(DDIM's direction, Euler's ODE step, DPM-Solver++'s history, LCM's fresh noise, flow matching).

How it attaches, per pipeline instance and per call: ``enable_structure_preservation(pipe)`` records the
settings on ``pipe`` and gives *that instance* a subclass of its own class (same name) whose
``__call__`` does, for each call:

- the source is the call's ``structure_source=`` if given, else the one fixed at enable time, else
  the call's own ``image`` (img2img, inpaint, SDXL / SD3 img2img), prepared by the pipeline's image
  processor exactly as the pipeline prepares ``image``. An explicit source of another size is resized
  to the output; one of another aspect ratio (beyond 2 %) raises ValueError.
- the pipeline's current ``scheduler`` and ``vae`` are checked (an unsupported scheduler, e.g. after
  ``pipe.scheduler = PNDMScheduler.from_config(...)``, raises ValueError naming the ones that work) and,
  for the duration of the call only, ``pipe``'s own attributes point at *views* of them: objects of a
  one-off subclass that share the originals' state (same ``__dict__``) and differ only in ``step`` (the
  guided step) and ``decode`` (post-processing of the final decode). The scheduler and VAE objects
  themselves are never modified, so pipelines sharing them (``from_pipe``) are unaffected, and a swapped
  scheduler is picked up at the next call.

    >>> pipe = StableDiffusionImg2ImgPipeline.from_pretrained(..., dtype=torch.float16)
    >>> enable_structure_preservation(pipe, start=0.8)           # guides towards each call's `image`
    >>> edited = pipe("a watercolour painting", image=image, strength=0.6).images[0]
    >>> disable_structure_preservation(pipe)

Cost per guided step: one VAE decode, ``steps_per_guidance`` SGD steps in pixels, one VAE encode; per
call one source round trip (cached). With ``enable_model_cpu_offload`` the VAE stays on the device next
to the denoiser during the guided steps instead of swapping it out (see :mod:`.restorer`).
"""
from __future__ import annotations

import functools
import inspect

import torch

from vision.kernels.spl.defaults import SPL_DEFAULTS

from .restorer import LATENT_UPDATES, LatentRestorer, aspect_check, source_tensor  # noqa: F401 (LATENT_UPDATES re-exported)
from .schedulers import _schedule_index, scheduler_family, x0_coefficients
from .spl_callback import SPLGuidanceCallback

_ATTR = "_spl_guidance"
_GUIDED_CLASSES: dict = {}


# ----------------------------------------------------------------------------- one call's guidance
class CallGuide:
    """State of one guided call: the restorer, which steps it guided, whether the next decode is final."""

    def __init__(self, restorer: LatentRestorer, start: float, post_process: bool):
        self.restorer, self.start, self.post_process = restorer, float(start), bool(post_process)
        self.first = self.last = None
        self.post_pending = False
        self.guided_steps: list[int] = []  # schedule indices guided, for inspection

    def step(self, base_step, sched, model_output, timestep, sample, *args, **kwargs):
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
        out = base_step(sched, model_output, timestep, sample, *args, **kwargs)
        if idx >= len(sched.timesteps) - 1:
            self.post_pending = self.post_process
        return out

    def decode(self, base_decode, vae, z, *args, **kwargs):
        out = base_decode(vae, z, *args, **kwargs)
        if not self.post_pending:
            return out
        self.post_pending = False
        if isinstance(out, tuple):
            return (self.restorer.post_process(out[0]),) + tuple(out[1:])
        out.sample = self.restorer.post_process(out.sample)
        return out


def _view(obj, name: str, method):
    """An object of a one-off subclass of ``type(obj)`` that shares ``obj``'s instance ``__dict__``: every
    attribute read and write lands on ``obj``; only the method ``name`` differs. ``method(base, self, *a)``
    receives the class's own function; the override keeps its signature (pipelines inspect ``step``)."""
    base = type(obj)
    original = getattr(base, name)

    @functools.wraps(original)
    def override(self, *args, **kwargs):
        return method(original, self, *args, **kwargs)

    cls = type(base.__name__, (base,), {name: override, "__module__": base.__module__,
                                        "__qualname__": base.__qualname__})
    view = object.__new__(cls)
    object.__setattr__(view, "__dict__", obj.__dict__)
    return view


def guided_scheduler(scheduler, guide: CallGuide):
    """A view of ``scheduler`` whose ``step`` is guided by ``guide`` (``scheduler`` itself is unchanged)."""
    scheduler_family(scheduler)
    return _view(scheduler, "step", guide.step)


def guided_vae(vae, guide: CallGuide):
    """A view of ``vae`` whose ``decode`` post-processes the decode after the last step."""
    return _view(vae, "decode", guide.decode)


# ----------------------------------------------------------------------------- attach to a pipeline
class _Settings:
    def __init__(self, source, kwargs, start, post_process):
        self.source, self.kwargs, self.start, self.post_process = source, kwargs, float(start), bool(post_process)
        self.last_call: CallGuide | None = None

    @property
    def guided_steps(self) -> list[int]:
        return [] if self.last_call is None else self.last_call.guided_steps


def _prepared_source(pipe, image, height=None, width=None) -> torch.Tensor:
    """``image`` as the pipeline prepares its own ``image`` (size snapped to the latent grid, or the call's
    ``height`` x ``width``), in [0, 1]."""
    proc = getattr(pipe, "image_processor", None)
    if proc is None:
        return source_tensor(image)
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover
        Image = None
    pil = Image is not None and (isinstance(image, Image.Image)
                                 or (isinstance(image, (list, tuple)) and image and isinstance(image[0], Image.Image)))
    # tensors and arrays go through source_tensor first: [0, 1] floats (a [-1, 1] tensor handed to the
    # processor draws diffusers' FutureWarning)
    size = dict(height=height, width=width) if height is not None and width is not None else {}
    pixels = proc.preprocess(image if pil else source_tensor(image), **size)
    return ((pixels.float() + 1) / 2).clamp(0, 1)


def _call_arguments(base_call, pipe, args, kwargs) -> dict:
    try:
        return inspect.signature(base_call).bind_partial(pipe, *args, **kwargs).arguments
    except TypeError:
        return dict(kwargs)


def _run_guided(base_call, pipe, args, kwargs):
    settings: _Settings = pipe.__dict__[_ATTR]
    per_call = kwargs.pop("structure_source", None)
    sched, vae = getattr(pipe, "scheduler", None), getattr(pipe, "vae", None)
    if sched is None or vae is None:
        raise ValueError("the pipeline has no scheduler or no VAE; SPL guidance needs both")
    try:
        scheduler_family(sched)
    except ValueError as err:
        raise ValueError(f"SPL guidance is enabled on this pipeline but its current scheduler cannot be "
                         f"guided: {err}") from None
    source = per_call if per_call is not None else settings.source
    explicit = source is not None
    call = _call_arguments(base_call, pipe, args, kwargs)
    if explicit:
        prepared = _prepared_source(pipe, source)
        if call.get("image") is not None:  # report an aspect mismatch now, not after the first steps
            out = _prepared_source(pipe, call["image"], call.get("height"), call.get("width"))
            if tuple(out.shape[-2:]) != tuple(prepared.shape[-2:]):
                aspect_check(tuple(prepared.shape[-2:]), tuple(out.shape[-2:]))
    else:  # the call's own image, at the size the pipeline gives it
        if call.get("image") is None:
            raise ValueError(f"{type(pipe).__name__} was called without `image`, so there is no source for SPL "
                             "guidance: pass structure_source=... to the call or a source to "
                             "enable_structure_preservation")
        prepared = _prepared_source(pipe, call["image"], call.get("height"), call.get("width"))
    restorer = LatentRestorer(prepared, check_aspect=explicit, **settings.kwargs)
    restorer.vae, restorer.decode_fn = vae, vae.decode
    guide = CallGuide(restorer, settings.start, settings.post_process)
    settings.last_call = guide
    # only this instance's attributes change, and only for this call; DiffusionPipeline.__setattr__
    # would also rewrite the pipeline config, hence the direct dict writes
    pipe.__dict__["scheduler"], pipe.__dict__["vae"] = guided_scheduler(sched, guide), guided_vae(vae, guide)
    try:
        return base_call(pipe, *args, **kwargs)
    finally:
        views = (pipe.__dict__["scheduler"], pipe.__dict__["vae"])
        pipe.__dict__["scheduler"], pipe.__dict__["vae"] = sched, vae
        # maybe_free_model_hooks re-creates offload hooks from the pipeline's components, the views
        # among them: point those hooks back at the real modules
        for hook in getattr(pipe, "_all_hooks", None) or []:
            if getattr(hook, "model", None) is views[1]:
                hook.model = vae


def _guided_class(base):
    if base in _GUIDED_CLASSES:
        return _GUIDED_CLASSES[base]
    original = base.__call__

    @functools.wraps(original)
    def __call__(self, *args, **kwargs):
        if _ATTR not in self.__dict__:
            return original(self, *args, **kwargs)
        return _run_guided(original, self, args, kwargs)

    cls = type(base.__name__, (base,), {"__call__": __call__, "__module__": base.__module__,
                                        "__qualname__": base.__qualname__, "_spl_stock_class": base})
    _GUIDED_CLASSES[base] = cls
    return cls


def enable_structure_preservation(pipe, source_image=None, *, start: float = 0.8, steps_per_guidance: int = 100,
                                  spl_weight: float = SPL_DEFAULTS.spl_weight, color_weight: float = SPL_DEFAULTS.color_weight, mask=None,
                                  invert_mask: bool = False, post_process: bool = True,
                                  post_process_steps: int | None = None, latent_update: str = "replace",
                                  radius: int = SPL_DEFAULTS.radius, eps: float = SPL_DEFAULTS.eps):
    """Attach SPL guidance (Gong et al., WACV 2026) to this diffusers pipeline instance.

    Args:
        pipe: a pipeline with ``scheduler`` and ``vae`` (SD / SDXL / SD3 img2img and inpaint, LCM img2img,
            ...). Other pipelines sharing its components (``from_pipe``) are not affected; replacing
            ``pipe.scheduler`` later keeps the guidance (or raises ValueError at the next call if the new
            scheduler cannot be guided).
        source_image: the image whose structure is kept, for every call: PIL image, (H, W, 3) array (uint8
            or float in [0, 1]) or tensor ((1,) 3, H, W) in [0, 1] (or [-1, 1] if it has negative values).
            Default None: each call's own ``image``. A call may also pass ``structure_source=``. An explicit
            source is resized to the output; a different aspect ratio raises ValueError.
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
            (x0 += encode(optimised) - encode(decoded)).
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
    scheduler_family(pipe.scheduler)  # fail now, not mid-sampling
    kwargs = dict(steps=steps_per_guidance, spl_weight=spl_weight, color_weight=color_weight, mask=mask,
                  invert_mask=invert_mask, latent_update=latent_update, radius=radius, eps=eps,
                  post_process_steps=post_process_steps)
    # validates the settings (and the source) now rather than at the first call
    LatentRestorer(source_image if source_image is not None else torch.zeros(1, 3, 8, 8), **kwargs)
    disable_structure_preservation(pipe)
    pipe.__dict__[_ATTR] = _Settings(source_image, kwargs, start, post_process)
    if any("__call__" in vars(k) for k in type(pipe).__mro__[:-1]):
        pipe.__class__ = _guided_class(type(pipe))
    return pipe


def disable_structure_preservation(pipe):
    """Remove what :func:`enable_structure_preservation` attached; a no-op if nothing is attached."""
    pipe.__dict__.pop(_ATTR, None)
    stock = type(pipe).__dict__.get("_spl_stock_class")
    if stock is not None:
        pipe.__class__ = stock
    return pipe


__all__ = ["enable_structure_preservation", "disable_structure_preservation", "SPLGuidanceCallback",
           "LatentRestorer", "x0_coefficients", "scheduler_family", "guided_scheduler", "CallGuide"]
