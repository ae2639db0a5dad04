"""Scheduler arithmetic for SPL guidance: which schedulers can be guided exactly, the affine map
``x0 = a * sample + b * model_output`` each one uses for its clean-sample prediction, and
:func:`use_guidable_scheduler`, which gives a pipeline one of them (``vision edit --scheduler``).

    >>> note = use_guidable_scheduler(pipe)          # a stock SD1.5 folder's PNDMScheduler -> DDIMScheduler
    >>> use_guidable_scheduler(pipe, "dpm++")        # or the one asked for, on the model's noise schedule
"""
from __future__ import annotations

import torch

from .config import FALLBACK_SCHEDULER as FALLBACK, SCHEDULERS

SUPPORTED = ("DDIM, DDPM, Euler, Euler ancestral, LMS, DPM-Solver++ (multistep, singlestep), UniPC, LCM, "
             "flow-matching Euler")


def use_guidable_scheduler(pipe, name: str | None = None, flag: str = "--scheduler") -> str | None:
    """Give ``pipe`` a scheduler that SPL guidance can guide, built from its scheduler's config (same noise schedule
    and prediction type).

    ``name`` (a key of :data:`SCHEDULERS`) replaces the scheduler; None keeps it when it can be guided and otherwise
    replaces it by DDIM. Returns a one-line note when the scheduler was replaced without being asked for, else
    None. Raises ValueError (naming ``flag``) for a flow-matching scheduler on a noise-prediction model or the
    reverse, or when the result still cannot be guided (thresholding, for example).
    """
    import diffusers  # lazy: the [edit] extra; spl_guidance imports this module without it

    old, asked = type(pipe.scheduler).__name__, name is not None
    if name is None:
        try:
            scheduler_family(pipe.scheduler)
            return None
        except ValueError:
            if old.startswith("FlowMatch"):
                raise
        name = FALLBACK
    if name not in SCHEDULERS:
        raise ValueError(f"{flag} {name}: not a scheduler SPL guidance can guide; use one of {', '.join(SCHEDULERS)}")
    flow_model, flow_wanted = old.startswith("FlowMatch"), name == "flow-euler"
    if flow_model != flow_wanted:
        kind = "flow matching" if flow_model else "noise prediction"
        fits = "flow-euler" if flow_model else ", ".join(k for k in SCHEDULERS if k != "flow-euler")
        raise ValueError(f"{flag} {name}: this model samples by {kind} ({old}); use {fits}")
    new = getattr(diffusers, SCHEDULERS[name]).from_config(pipe.scheduler.config)
    try:
        scheduler_family(new)
    except ValueError as err:
        raise ValueError(f"{flag} {name}: {err}") from None
    pipe.scheduler = new
    if not asked:
        return (f"the model's {old} cannot be guided by SPL: sampling with {SCHEDULERS[name]} on its noise schedule "
                f"({flag} picks another: {', '.join(SCHEDULERS)})")
    return None


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
    raise ValueError(f"SPL guidance does not support {name}; supported: {SUPPORTED}. Swap it with e.g. "
                     "pipe.scheduler = DDIMScheduler.from_config(pipe.scheduler.config)")


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


