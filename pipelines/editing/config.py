"""The SPL guidance settings as one frozen config object, read by every editing module and by ``vision edit``.

In diffusers a guider is a config object; here :class:`StructurePreservationConfig` is that object for the
Structure Preservation Loss guidance (Gong et al., WACV 2026). It holds the settings, not the data: the source
image and the mask travel beside it. It is validated when built, hashable, and changed with :meth:`replace`.
The loss settings inside it are one :class:`~vision.kernels.spl.config.SPLConfig` (``config.loss``), which goes
on whole to :func:`vision.restore_structure` and the loss; they are checked there, once.

    >>> cfg = StructurePreservationConfig(start=0.6, steps_per_guidance=50)
    >>> enable_structure_preservation(pipe, config=cfg)
    >>> pipe(prompt, image=img, structure_config=cfg.replace(post_process=False))   # one call differs
"""
from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass

from vision.kernels.spl.config import SPLConfig

LATENT_UPDATES = ("replace", "delta")


def _count(name: str, value, optional: bool = False):
    if value is None and optional:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer >= 0, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value}")
    return int(value)


def _start(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be in [0, 1], got {type(value).__name__} {value!r}")
    if not 0.0 <= value <= 1.0:  # NaN too
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return value


def _choice(name: str, value) -> str:
    if value not in LATENT_UPDATES:
        raise ValueError(f"{name} must be one of {LATENT_UPDATES}, got {value!r}")
    return value


def _bool(name: str, value) -> bool:
    if not (isinstance(value, bool) or type(value).__name__ in ("bool", "bool_")):
        raise ValueError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


# the checks of the sampling settings; the loss settings are SPLConfig's (vision.kernels.spl.config)
_CHECKS = {"start": _start, "steps_per_guidance": _count,
           "post_process_steps": lambda n, v: _count(n, v, optional=True), "latent_update": _choice,
           "post_process": _bool, "invert_mask": _bool}


@dataclass(frozen=True, init=False)
class StructurePreservationConfig:
    """Settings of SPL guidance in a diffusers sampler (defaults: the published code's).

    Attributes:
        start: guide the steps whose position in the run's schedule is >= ``start`` (0.8: the last 20 %; 0: all).
        steps_per_guidance: SGD steps in pixel space per guided sampling step (100).
        loss: the loss settings, an :class:`~vision.kernels.spl.config.SPLConfig`: ``spl_weight``,
            ``color_weight`` (1e4, 1e3), ``radius``, ``eps``, ``bidirectional`` (5, 1e-4, True). They are also
            read, and given to the constructor and :meth:`replace`, by those names.
        post_process: after the last step, restore the decoded output against the source itself (True).
        post_process_steps: SGD steps of post-processing (None: ``steps_per_guidance``).
        latent_update: ``"replace"`` (x0 = encode(optimised), the published code; with a mask only inside it)
            or ``"delta"`` (x0 += encode(optimised) - encode(decoded)).
        invert_mask: flip the mask (1 = keep structure becomes 0).

        >>> cfg = StructurePreservationConfig(start=0.6, spl_weight=5e3)
        >>> cfg.spl_weight, cfg.loss.spl_weight, cfg.replace(start=0.7).loss is cfg.loss
        (5000.0, 5000.0, True)
    """

    start: float
    steps_per_guidance: int
    loss: SPLConfig
    post_process: bool
    post_process_steps: int | None
    latent_update: str
    invert_mask: bool

    def __init__(self, start: float = 0.8, steps_per_guidance: int = 100, spl_weight: float | None = None,
                 color_weight: float | None = None, radius: int | None = None, eps: float | None = None,
                 bidirectional: bool | None = None, post_process: bool = True, post_process_steps: int | None = None,
                 latent_update: str = "replace", invert_mask: bool = False, *, loss: SPLConfig | None = None):
        # the loss settings given by name change ``loss`` (default: the published ones); SPLConfig checks them
        loss = SPLConfig.build(loss, spl_weight=spl_weight, color_weight=color_weight, radius=radius, eps=eps,
                               bidirectional=bidirectional)
        values = dict(start=start, steps_per_guidance=steps_per_guidance, post_process=post_process,
                      post_process_steps=post_process_steps, latent_update=latent_update, invert_mask=invert_mask)
        for name, value in values.items():
            object.__setattr__(self, name, _CHECKS[name](name, value))
        object.__setattr__(self, "loss", loss)

    # the loss settings by their own names (read-only views of ``loss``)
    spl_weight = property(lambda self: self.loss.spl_weight, doc="Weight of the structure term (``loss``).")
    color_weight = property(lambda self: self.loss.color_weight, doc="Weight of the colour term (``loss``).")
    radius = property(lambda self: self.loss.radius, doc="SPL window radius (``loss``).")
    eps = property(lambda self: self.loss.eps, doc="SPL ridge term (``loss``).")
    bidirectional = property(lambda self: self.loss.bidirectional, doc="Two-way fit (``loss``).")

    @staticmethod
    def check(name: str, value):
        """``value`` checked and normalised as field ``name`` (what building a config does for each one); the loss
        settings are :meth:`SPLConfig.check`'s."""
        if name in _CHECKS:
            return _CHECKS[name](name, value)
        return SPLConfig.check(name, value)

    @property
    def post_steps(self) -> int:
        """SGD steps of post-processing (``post_process_steps``, else ``steps_per_guidance``)."""
        return self.steps_per_guidance if self.post_process_steps is None else self.post_process_steps

    def replace(self, **changes) -> "StructurePreservationConfig":
        """A copy with ``changes`` (checked), by the names of :data:`FIELDS` or ``loss``; unknown names raise
        TypeError naming them. The copy shares ``loss`` (the same object) when no loss setting changes."""
        unknown = sorted(set(changes) - set(FIELDS) - {"loss"})
        if unknown:
            raise TypeError(f"StructurePreservationConfig has no field {unknown[0]!r}; fields: {', '.join(FIELDS)}")
        if not changes:
            return self
        values = {name: getattr(self, name) for name in _CHECKS}
        values["loss"] = self.loss
        values.update(changes)
        return type(self)(**values)

    @classmethod
    def from_options(cls, config: "StructurePreservationConfig | None" = None, **options) -> "StructurePreservationConfig":
        """``config`` (default: the defaults) with the options that are not None: how the keyword arguments of
        the older signatures build a config. With no option set, ``config`` itself comes back (the same object)."""
        base = DEFAULT_CONFIG if config is None else config
        if not isinstance(base, cls):
            raise TypeError(f"config must be a StructurePreservationConfig, got {type(base).__name__}")
        return base.replace(**{k: v for k, v in options.items() if v is not None})


# the names the constructor, replace() and a call's structure_config dict take (``loss`` as well)
FIELDS = ("start", "steps_per_guidance", "spl_weight", "color_weight", "radius", "eps", "bidirectional",
          "post_process", "post_process_steps", "latent_update", "invert_mask")

DEFAULT_CONFIG = StructurePreservationConfig()

# the schedulers SPL guidance can guide (schedulers.scheduler_family), by the names `vision edit --scheduler` takes
SCHEDULERS = {"ddim": "DDIMScheduler", "ddpm": "DDPMScheduler", "euler": "EulerDiscreteScheduler",
              "euler-ancestral": "EulerAncestralDiscreteScheduler", "lms": "LMSDiscreteScheduler",
              "dpm++": "DPMSolverMultistepScheduler", "dpm++-singlestep": "DPMSolverSinglestepScheduler",
              "unipc": "UniPCMultistepScheduler", "lcm": "LCMScheduler", "flow-euler": "FlowMatchEulerDiscreteScheduler"}
FALLBACK_SCHEDULER = "ddim"  # in place of one that cannot be guided (PNDM, SD1.5's default), on the same schedule


def guided_indices(n: int, start: float) -> list[int]:
    """The steps SPL guidance guides among the ``n`` a call runs (0 .. n - 1): those at least ``start`` of the way.

        >>> guided_indices(8, 0.8), guided_indices(4, 0.8)
        ([7], [])
    """
    return [k for k in range(n) if k / max(n, 1) >= start - 1e-9]


def warn_if_no_step_is_guided(who: str, n: int, start: float, sgd_steps: int) -> None:
    """A ``UserWarning`` when a call of ``n`` steps would guide none at ``start`` (e.g. LCM's default 4 steps at
    the default start 0.8): it says how many steps, or which start, would guide one. Nothing when ``sgd_steps``
    is 0 (guidance switched off on purpose)."""
    if sgd_steps <= 0 or n <= 0 or guided_indices(n, start):
        return
    fix = f"use start <= {(n - 1) / n:.2f}"
    if start < 1:
        fix += f" or at least {math.ceil(1 / (1 - start) - 1e-9)} steps"
    warnings.warn(f"{who} guides no step: {n} step{'s' if n != 1 else ''} with start={start:g} (step k of {n} is "
                  f"guided when k / {n} >= start); {fix}", UserWarning, stacklevel=3)


@dataclass(frozen=True)
class StructurePreservationReport:
    """What SPL guidance did in one call (``pipe.structure_preservation_report``, ``output.structure_preservation``).

    Attributes:
        guided: whether the call was guided (False for ``structure_preservation=False``).
        guided_steps: the guided steps, counted in the steps asked for: indices into the scheduler's
            ``timesteps``, 0 .. ``num_steps`` - 1 (img2img with ``strength`` < 1 skips the first ones: 4 steps
            at strength 0.75 run steps 1, 2, 3).
        guided_timesteps: the scheduler timesteps of those steps.
        num_steps: the steps asked for (``num_inference_steps``: the scheduler's schedule for the call).
        sgd_steps: SGD steps run per guided step.
        steps_run: the steps this call ran (fewer than ``num_steps`` with img2img's ``strength`` < 1); ``start``
            is a fraction of these.
        post_processed: whether the decoded output was restored against the source.
        source: where the source came from: ``"image"`` (the call's own), ``"structure_source"`` (the
            call's option) or ``"enable"`` (fixed at enable time); None when not guided.
        config: the settings of the call.
    """

    guided: bool
    guided_steps: tuple = ()
    guided_timesteps: tuple = ()
    num_steps: int = 0
    sgd_steps: int = 0
    steps_run: int = 0
    post_processed: bool = False
    source: str | None = None
    config: StructurePreservationConfig = DEFAULT_CONFIG


__all__ = ["StructurePreservationConfig", "StructurePreservationReport", "DEFAULT_CONFIG", "LATENT_UPDATES", "FIELDS",
           "SCHEDULERS", "FALLBACK_SCHEDULER", "guided_indices", "warn_if_no_step_is_guided"]
