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

How it attaches. ``enable_structure_preservation(pipe, config=...)`` stores the settings on ``pipe`` (a
:class:`StructurePreservationConfig`, the source and the mask) and mixes :class:`StructurePreservationMixin`
into *that instance's* class (a subclass of its class with the same name, built once per class and cached).
The mixin is needed because Python looks ``__call__`` up on the type, never on the instance, and the per-call
options below must be taken off the call before the stock ``__call__`` sees them (SD3 and Flux pipelines have
no ``**kwargs``; the others would swallow a misspelt option silently). Its ``__call__``, for each call:

- takes the per-call options ``structure_preservation=False`` (this call runs the stock pipeline),
  ``structure_source=`` (the source for this call) and ``structure_config=`` (a config, or a dict of its
  fields, for this call); any other ``structure_*`` keyword, or one close to these names, is a TypeError that
  names it and the closest valid name.
- the source is the call's ``structure_source=`` if given, else the one fixed at enable time, else
  the call's own ``image`` (img2img, inpaint, SDXL / SD3 img2img), prepared by the pipeline's image
  processor exactly as the pipeline prepares ``image``. An explicit source of another size is resized
  to the output; one of another aspect ratio (beyond 2 %) raises ValueError.
- the pipeline's current ``scheduler`` and ``vae`` are checked (an unsupported scheduler, e.g. after
  ``pipe.scheduler = PNDMScheduler.from_config(...)``, raises ValueError naming the ones that work) and,
  for the duration of the call only, their ``step`` and ``decode`` are hooked on the instance (as diffusers'
  ``HookRegistry`` hooks a module's ``forward``: an instance attribute, removed when the call ends). Between
  calls the scheduler and VAE carry nothing, so pipelines sharing them (``from_pipe``) are unaffected, and a
  swapped scheduler is picked up at the next call.
- the guided SGD runs under the pipeline's own progress bar (``pipe.progress_bar``, so
  ``pipe.set_progress_bar_config(disable=True)`` silences it), and the call's
  :class:`StructurePreservationReport` (which schedule steps were guided) is kept as
  ``pipe.structure_preservation_report`` and set as ``structure_preservation`` on the returned output.

An enabled pipeline pickles (it unpickles enabled), saves with ``save_pretrained`` as its stock class, and
``pipe.disable_structure_preservation()`` is the method form of :func:`disable_structure_preservation`.

    >>> pipe = StableDiffusionImg2ImgPipeline.from_pretrained(..., dtype=torch.float16)
    >>> enable_structure_preservation(pipe, start=0.8)           # guides towards each call's `image`
    >>> out = pipe("a watercolour painting", image=image, strength=0.6)
    >>> out.images[0], out.structure_preservation.guided_steps   # e.g. (<PIL image>, (10, 11))
    >>> plain = pipe("a watercolour painting", image=image, structure_preservation=False)  # one call unguided
    >>> pipe.disable_structure_preservation()

Cost per guided step: one VAE decode, ``steps_per_guidance`` SGD steps in pixels, one VAE encode; per
call one source round trip (cached). With ``enable_model_cpu_offload`` the VAE stays on the device next
to the denoiser during the guided steps instead of swapping it out (see :mod:`.restorer`).
"""
from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
import types
import weakref

from PIL import Image
import torch

from .config import StructurePreservationConfig, StructurePreservationReport, guided_indices, warn_if_no_step_is_guided
from .restorer import LATENT_UPDATES, LatentRestorer, aspect_check, source_tensor, spl_progress_bar  # noqa: F401 (LATENT_UPDATES re-exported)
from .schedulers import _schedule_index, scheduler_family, x0_coefficients
from .spl_callback import SPLGuidanceCallback

_ATTR = "_spl_guidance"
PER_CALL_OPTIONS = ("structure_preservation", "structure_source", "structure_config")
_GUIDED_CLASSES: dict = {}


# ----------------------------------------------------------------------------- one call's guidance
class CallGuide:
    """State of one guided call: the restorer, which steps it guided, whether the next decode is final.

    ``progress``: a function ``total -> tqdm bar`` (the pipeline's ``progress_bar``); the bar is opened at the
    first guided step, counts SGD steps (guided stages and post-processing) and is closed by :meth:`close`."""

    def __init__(self, restorer: LatentRestorer, start: float, post_process: bool, progress=None):
        self.restorer, self.start, self.post_process = restorer, float(start), bool(post_process)
        self.first = self.last = None
        self.post_pending = False
        self.post_processed = False
        self.guided_steps: list[int] = []  # schedule indices guided, for inspection
        self.guided_timesteps: list[float] = []
        self.num_steps = self.steps_run = 0  # the steps asked for (the schedule), those run (after strength)
        self.progress, self.bar = progress, None

    def _open_bar(self, n_run: int):
        if self.progress is None or self.bar is not None:
            return
        stages = len(guided_indices(n_run, self.start))
        total = stages * self.restorer.steps + (self.restorer.post_steps if self.post_process else 0)
        if total > 0:
            self.bar = self.progress(total)

    def _advance(self, n: int):
        if self.bar is not None:
            self.bar.update(n)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def step(self, base_step, sched, model_output, timestep, sample, *args, **kwargs):
        idx = _schedule_index(sched, timestep)
        if self.first is None or (self.last is not None and idx <= self.last):
            self.first, self.post_pending, self.guided_steps, self.guided_timesteps = idx, False, [], []
            warn_if_no_step_is_guided("SPL guidance", len(sched.timesteps) - idx, self.start, self.restorer.steps)
        self.last = idx
        self.num_steps, self.steps_run = len(sched.timesteps), len(sched.timesteps) - self.first
        n_run = max(self.steps_run, 1)
        if (idx - self.first) / n_run >= self.start - 1e-9 and self.restorer.steps > 0:
            self._open_bar(n_run)
            a, b = x0_coefficients(sched, timestep, sample)
            m, s = model_output.float(), sample.float()
            x0 = a * s + b * m
            x0_new = self.restorer.optimise_latent(x0)
            model_output = (m + (x0_new - x0) / b).to(model_output.dtype)
            self.guided_steps.append(idx)
            self.guided_timesteps.append(float(timestep))
            self._advance(self.restorer.steps)
        out = base_step(sched, model_output, timestep, sample, *args, **kwargs)
        if idx >= len(sched.timesteps) - 1:
            self.post_pending = self.post_process
        return out

    def decode(self, base_decode, vae, z, *args, **kwargs):
        out = base_decode(vae, z, *args, **kwargs)
        if not self.post_pending:
            return out
        self.post_pending = False
        self.post_processed = True
        if isinstance(out, tuple):
            out = (self.restorer.post_process(out[0]),) + tuple(out[1:])
        else:
            out.sample = self.restorer.post_process(out.sample)
        self._advance(self.restorer.post_steps)
        return out


@contextlib.contextmanager
def instance_hook(obj, name: str, method):
    """Within the block, ``obj.<name>(*a, **k)`` runs ``method(original, obj, *a, **k)``, where ``original`` is
    the class's function: an attribute of ``obj`` itself (diffusers' ``HookRegistry`` hooks a module's
    ``forward`` the same way), removed on exit. The hook keeps the method's signature (pipelines inspect
    ``scheduler.step`` for ``generator`` and ``eta``)."""
    if name in vars(obj):
        raise RuntimeError(f"{type(obj).__name__}.{name} is already hooked on this instance")
    original = getattr(type(obj), name)

    @functools.wraps(original)
    def hooked(self, *args, **kwargs):
        return method(original, self, *args, **kwargs)

    setattr(obj, name, types.MethodType(hooked, obj))  # an instance attribute: found before the class's method
    try:
        yield obj
    finally:
        if name in vars(obj):
            delattr(obj, name)


def guided_step(scheduler, guide: CallGuide):
    """Context manager: within it ``scheduler.step`` is guided by ``guide`` (raises ValueError first if the
    scheduler's x0 is not affine in the model output)."""
    scheduler_family(scheduler)
    return instance_hook(scheduler, "step", guide.step)


# ----------------------------------------------------------------------------- attach to a pipeline
class _Settings:
    """What enable_structure_preservation stores on the pipeline: plain data, so the pipeline pickles."""

    def __init__(self, source, config: StructurePreservationConfig, mask=None):
        self.source, self.config, self.mask = source, config, mask
        self.report: StructurePreservationReport | None = None

    @property
    def guided_steps(self) -> list[int]:
        return [] if self.report is None else list(self.report.guided_steps)

def _prepared_source(pipe, image, height=None, width=None) -> torch.Tensor:
    """``image`` as the pipeline prepares its own ``image`` (size snapped to the latent grid, or the call's
    ``height`` x ``width``), in [0, 1]."""
    proc = getattr(pipe, "image_processor", None)
    if proc is None:
        return source_tensor(image)
    pil = (isinstance(image, Image.Image)
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


def _take_options(pipe, base_call, kwargs: dict) -> dict:
    """Remove the per-call SPL options from ``kwargs``; a ``structure_*`` keyword that is not one of them (or
    a keyword close to one that the pipeline does not take) is a TypeError naming it and the closest one."""
    options = {name: kwargs.pop(name) for name in PER_CALL_OPTIONS if name in kwargs}
    params = inspect.signature(base_call).parameters
    for key in kwargs:
        if key in params and params[key].kind is not inspect.Parameter.VAR_KEYWORD:
            continue
        close = difflib.get_close_matches(key, PER_CALL_OPTIONS, n=1, cutoff=0.75)
        if key.startswith("structure") or close:
            best = close or difflib.get_close_matches(key, PER_CALL_OPTIONS, n=1, cutoff=0.0)
            raise TypeError(f"{type(pipe).__name__}.__call__() got an unexpected keyword argument {key!r}; did you "
                            f"mean {best[0]!r}? (SPL guidance takes {', '.join(PER_CALL_OPTIONS)})")
    on = options.get("structure_preservation", True)
    if not isinstance(on, bool):
        raise TypeError(f"structure_preservation must be True or False, got {on!r}")
    return options


def _call_config(config: StructurePreservationConfig, override) -> StructurePreservationConfig:
    if override is None:
        return config
    if isinstance(override, StructurePreservationConfig):
        return override
    if isinstance(override, dict):
        return config.replace(**override)
    raise TypeError(f"structure_config must be a StructurePreservationConfig or a dict of its fields, got "
                    f"{type(override).__name__}")


def _with_report(out, report: StructurePreservationReport):
    if not isinstance(out, tuple):
        try:
            setattr(out, "structure_preservation", report)
        except AttributeError:  # pragma: no cover - an output type without instance attributes
            pass
    return out


def _run_guided(base_call, pipe, args, kwargs, options):
    settings: _Settings = pipe.__dict__[_ATTR]
    cfg = _call_config(settings.config, options.get("structure_config"))
    if not options.get("structure_preservation", True):
        settings.report = StructurePreservationReport(guided=False, config=cfg)
        return _with_report(base_call(pipe, *args, **kwargs), settings.report)
    per_call = options.get("structure_source")
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
    restorer = LatentRestorer(prepared, cfg, mask=settings.mask, check_aspect=explicit)
    restorer.vae, restorer.decode_fn = vae, vae.decode  # the VAE's own decode, bound before the hook
    guide = CallGuide(restorer, cfg.start, cfg.post_process, progress=functools.partial(spl_progress_bar, pipe))
    try:
        # the hooks live on the scheduler and VAE objects for this call only
        with guided_step(sched, guide), instance_hook(vae, "decode", guide.decode):
            out = base_call(pipe, *args, **kwargs)
    finally:
        guide.close()
        settings.report = StructurePreservationReport(
            guided=True, guided_steps=tuple(guide.guided_steps), guided_timesteps=tuple(guide.guided_timesteps),
            num_steps=guide.num_steps, steps_run=guide.steps_run, sgd_steps=restorer.steps,
            post_processed=guide.post_processed,
            source="image" if not explicit else ("structure_source" if per_call is not None else "enable"),
            config=cfg)
    return _with_report(out, settings.report)


def _guided_call(base_call, pipe, args, kwargs):
    if _ATTR not in pipe.__dict__:
        return base_call(pipe, *args, **kwargs)
    options = _take_options(pipe, base_call, kwargs)
    return _run_guided(base_call, pipe, args, kwargs, options)


class StructurePreservationMixin:
    """What :func:`enable_structure_preservation` adds to a pipeline's class: the ``__call__`` that takes the
    per-call options, :meth:`disable_structure_preservation`, the report, and pickling as the stock class."""

    _spl_stock_class: type

    def disable_structure_preservation(self):
        """Remove SPL guidance from this pipeline (the method form of :func:`disable_structure_preservation`)."""
        return disable_structure_preservation(self)

    @property
    def structure_preservation_config(self) -> StructurePreservationConfig:
        """The settings given to :func:`enable_structure_preservation`."""
        return self.__dict__[_ATTR].config

    @property
    def structure_preservation_report(self) -> StructurePreservationReport | None:
        """What the last call guided (:class:`StructurePreservationReport`); None before the first call."""
        return self.__dict__[_ATTR].report

    def __reduce_ex__(self, protocol):
        # pickled by reference to the stock class (which pickle can find by name); unpickles enabled
        return _new_enabled, (self._spl_stock_class,), self.__dict__


def _new_enabled(stock: type):
    return object.__new__(_guided_class(stock))


def _guided_class(base):
    if base in _GUIDED_CLASSES:
        return _GUIDED_CLASSES[base]
    original = base.__call__

    @functools.wraps(original)
    def __call__(self, *args, **kwargs):
        return _guided_call(original, self, args, kwargs)

    # same name and module as the stock class: save_pretrained and AutoPipeline see the stock class
    cls = type(base.__name__, (StructurePreservationMixin, base),
               {"__call__": __call__, "__module__": base.__module__, "__qualname__": base.__qualname__,
                "_spl_stock_class": base})
    _GUIDED_CLASSES[base] = cls
    return cls


def enable_structure_preservation(pipe, source_image=None, *, config: StructurePreservationConfig | None = None,
                                  mask=None, start: float | None = None, steps_per_guidance: int | None = None,
                                  spl_weight: float | None = None, color_weight: float | None = None,
                                  invert_mask: bool | None = None, post_process: bool | None = None,
                                  post_process_steps: int | None = None, latent_update: str | None = None,
                                  radius: int | None = None, eps: float | None = None,
                                  bidirectional: bool | None = None):
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
        config: the settings, a :class:`StructurePreservationConfig` (default: the published ones).
        mask: optional image or array (H, W) in [0, 1] or [0, 255]: 1 where structure must be kept.
        start, steps_per_guidance, spl_weight, color_weight, invert_mask, post_process, post_process_steps,
            latent_update, radius, eps, bidirectional: the fields of :class:`StructurePreservationConfig`;
            given here, they change ``config`` (None: keep it). ``start`` 0.8 guides the last 20 % of the
            steps, ``steps_per_guidance`` 100 SGD steps per guided step, weights 1e4 and 1e3.

    Each call then takes ``structure_preservation=False`` (unguided), ``structure_source=`` and
    ``structure_config=``; other ``structure_*`` keywords raise TypeError. ``pipe.structure_preservation_report``
    and the output's ``structure_preservation`` tell which steps were guided.

    Returns:
        ``pipe`` (for chaining). Raises ValueError for schedulers whose x0 is not affine in the model
        output (thresholding, PNDM, DPM-Solver in noise mode, ...).
    """
    cfg = StructurePreservationConfig.from_options(
        config, start=start, steps_per_guidance=steps_per_guidance, spl_weight=spl_weight, color_weight=color_weight,
        invert_mask=invert_mask, post_process=post_process, post_process_steps=post_process_steps,
        latent_update=latent_update, radius=radius, eps=eps, bidirectional=bidirectional)
    if getattr(type(pipe), "_spl_built_in", False):
        raise ValueError(f"{type(pipe).__name__} has SPL guidance built in: pass structure_preservation, "
                         "structure_config (or its SPL arguments) to its call instead")
    for name in ("scheduler", "vae"):
        if getattr(pipe, name, None) is None:
            raise ValueError(f"the pipeline has no {name}; SPL guidance needs both a scheduler and a VAE")
    scheduler_family(pipe.scheduler)  # fail now, not mid-sampling
    # validates the source and mask now rather than at the first call
    LatentRestorer(source_image if source_image is not None else torch.zeros(1, 3, 8, 8), cfg, mask=mask)
    disable_structure_preservation(pipe)
    pipe.__dict__[_ATTR] = _Settings(source_image, cfg, mask)
    if any("__call__" in vars(k) for k in type(pipe).__mro__[:-1]):
        pipe.__dict__.pop(_DISABLE, None)  # the class's method again
        pipe.__class__ = _guided_class(type(pipe))
    return pipe


_DISABLE = "disable_structure_preservation"


class _AlreadyDisabled:
    """``pipe.disable_structure_preservation`` once guidance is off and the pipeline is its stock class again:
    calling it again does nothing and returns the pipeline, as the method does. It holds the pipeline weakly, so
    dropping the pipeline frees it at once (no reference cycle through its own ``__dict__``)."""

    def __init__(self, pipe):
        self._pipe = weakref.ref(pipe)

    def __call__(self):
        return self._pipe()

    def __reduce__(self):  # pickled with its pipeline, which pickle has already memoised by then
        return _AlreadyDisabled, (self._pipe(),)


def disable_structure_preservation(pipe):
    """Remove what :func:`enable_structure_preservation` attached; a no-op if nothing is attached.
    ``pipe.disable_structure_preservation()`` does the same, and may be called again (it then does nothing)."""
    pipe.__dict__.pop(_ATTR, None)
    stock = type(pipe).__dict__.get("_spl_stock_class")
    if stock is not None:
        pipe.__class__ = stock
        pipe.__dict__[_DISABLE] = _AlreadyDisabled(pipe)  # a second pipe.disable_structure_preservation() works
    return pipe


__all__ = ["enable_structure_preservation", "disable_structure_preservation", "SPLGuidanceCallback",
           "StructurePreservationConfig", "StructurePreservationReport", "StructurePreservationMixin",
           "LatentRestorer", "x0_coefficients", "scheduler_family", "guided_step", "instance_hook", "CallGuide",
           "PER_CALL_OPTIONS"]
