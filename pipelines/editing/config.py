"""The SPL guidance settings as one frozen config object, read by every editing module and by ``vision edit``.

In diffusers a guider is a config object; here :class:`StructurePreservationConfig` is that object for the
Structure Preservation Loss guidance (Gong et al., WACV 2026). It holds the settings, not the data: the source
image and the mask travel beside it. It is validated when built, hashable, and changed with :meth:`replace`.

    >>> cfg = StructurePreservationConfig(start=0.6, steps_per_guidance=50)
    >>> enable_structure_preservation(pipe, config=cfg)
    >>> pipe(prompt, image=img, structure_config=cfg.replace(post_process=False))   # one call differs
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from vision.kernels.spl.defaults import SPL_DEFAULTS

LATENT_UPDATES = ("replace", "delta")


@dataclass(frozen=True)
class StructurePreservationConfig:
    """Settings of SPL guidance in a diffusers sampler (defaults: the published code's).

    Attributes:
        start: guide the steps whose position in the run's schedule is >= ``start`` (0.8: the last 20 %; 0: all).
        steps_per_guidance: SGD steps in pixel space per guided sampling step (100).
        spl_weight, color_weight: weights of the structure and colour terms (1e4, 1e3).
        radius, eps, bidirectional: the SPL window radius, ridge term and two-way fit (5, 1e-4, True).
        post_process: after the last step, restore the decoded output against the source itself (True).
        post_process_steps: SGD steps of post-processing (None: ``steps_per_guidance``).
        latent_update: ``"replace"`` (x0 = encode(optimised), the published code; with a mask only inside it)
            or ``"delta"`` (x0 += encode(optimised) - encode(decoded)).
        invert_mask: flip the mask (1 = keep structure becomes 0).
    """

    start: float = 0.8
    steps_per_guidance: int = 100
    spl_weight: float = SPL_DEFAULTS.spl_weight
    color_weight: float = SPL_DEFAULTS.color_weight
    radius: int = SPL_DEFAULTS.radius
    eps: float = SPL_DEFAULTS.eps
    bidirectional: bool = True
    post_process: bool = True
    post_process_steps: int | None = None
    latent_update: str = "replace"
    invert_mask: bool = False

    def __post_init__(self):
        if isinstance(self.start, bool) or not isinstance(self.start, (int, float)) or not 0.0 <= self.start <= 1.0:
            raise ValueError(f"start must be in [0, 1], got {self.start!r}")
        for name in ("steps_per_guidance", "post_process_steps"):
            v = getattr(self, name)
            if v is None and name == "post_process_steps":
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
        for name in ("spl_weight", "color_weight"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v < math.inf):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if isinstance(self.radius, bool) or not isinstance(self.radius, int) or self.radius < 0:
            raise ValueError(f"radius must be a non-negative integer, got {self.radius!r}")
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not (0 < self.eps < math.inf):
            raise ValueError(f"eps must be a positive float, got {self.eps!r}")
        if self.latent_update not in LATENT_UPDATES:
            raise ValueError(f"latent_update must be one of {LATENT_UPDATES}, got {self.latent_update!r}")

    @property
    def post_steps(self) -> int:
        """SGD steps of post-processing (``post_process_steps``, else ``steps_per_guidance``)."""
        return self.steps_per_guidance if self.post_process_steps is None else self.post_process_steps

    def replace(self, **changes) -> "StructurePreservationConfig":
        """A copy with ``changes`` (validated); unknown names raise TypeError naming them."""
        unknown = sorted(set(changes) - set(FIELDS))
        if unknown:
            raise TypeError(f"StructurePreservationConfig has no field {unknown[0]!r}; fields: {', '.join(FIELDS)}")
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_options(cls, config: "StructurePreservationConfig | None" = None, **options) -> "StructurePreservationConfig":
        """``config`` (default: the defaults) with the options that are not None: how the keyword arguments of
        the older signatures build a config."""
        base = cls() if config is None else config
        if not isinstance(base, cls):
            raise TypeError(f"config must be a StructurePreservationConfig, got {type(base).__name__}")
        changes = {k: v for k, v in options.items() if v is not None}
        return base.replace(**changes) if changes else base


FIELDS = tuple(f.name for f in dataclasses.fields(StructurePreservationConfig))

# the schedulers SPL guidance can guide (schedulers.scheduler_family), by the names `vision edit --scheduler` takes
SCHEDULERS = {"ddim": "DDIMScheduler", "ddpm": "DDPMScheduler", "euler": "EulerDiscreteScheduler",
              "euler-ancestral": "EulerAncestralDiscreteScheduler", "lms": "LMSDiscreteScheduler",
              "dpm++": "DPMSolverMultistepScheduler", "dpm++-singlestep": "DPMSolverSinglestepScheduler",
              "unipc": "UniPCMultistepScheduler", "lcm": "LCMScheduler", "flow-euler": "FlowMatchEulerDiscreteScheduler"}
FALLBACK_SCHEDULER = "ddim"  # in place of one that cannot be guided (PNDM, SD1.5's default), on the same schedule
DEFAULT_CONFIG = StructurePreservationConfig()


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
    import warnings

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
