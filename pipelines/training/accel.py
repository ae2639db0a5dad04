"""The Accelerate setup every training workflow shares (``finetune.train``, ``denoiser.train``): the mixed
precision to train in and the ``Accelerator`` built from a workflow's settings, each refusal one line."""
from __future__ import annotations

import os

from accelerate import Accelerator
from accelerate.commands import config as accelerate_config  # its default_config_file read when called
from accelerate.state import AcceleratorState, PartialState
from accelerate.tracking import get_available_trackers


def configured_precision(flag: str | None) -> str:
    """The mixed precision to train in: ``--mixed-precision``, else what ``accelerate launch`` exported,
    else ``accelerate config``'s default config file (also when the command runs without the launcher),
    else "no"."""
    if flag:
        return flag
    if os.environ.get("ACCELERATE_MIXED_PRECISION"):
        return os.environ["ACCELERATE_MIXED_PRECISION"]
    default_config_file = accelerate_config.default_config_file
    if os.path.isfile(default_config_file):
        try:
            return str(accelerate_config.load_config_from_file(default_config_file).mixed_precision or "no")
        except (OSError, ValueError, TypeError, KeyError) as err:
            raise ValueError(f"{default_config_file} (accelerate config) cannot be read: {err}") from None
    return "no"


def accelerator_for(cfg, run=None, **extra):
    """Accelerate's ``Accelerator`` for a config with ``mixed_precision`` (None: what ``accelerate config`` or
    ``accelerate launch`` set), ``cpu`` (else CUDA or MPS when present), ``grad_accum`` and ``log_with``
    (trackers, writing into ``run``), each refused with one line when it cannot be honoured. ``extra`` goes
    to ``Accelerator`` as it is."""
    if cfg.grad_accum < 1:
        raise ValueError(f"--grad-accum must be >= 1, got {cfg.grad_accum}")
    if cfg.mixed_precision not in (None, "no", "fp16", "bf16", "fp8"):
        raise ValueError(f"--mixed-precision {cfg.mixed_precision}: choose no, fp16, bf16 or fp8")
    log_with = getattr(cfg, "log_with", None)
    if log_with:
        available = {str(t) for t in get_available_trackers()}
        if log_with != "all" and log_with not in available:
            raise ValueError(f"--log-with {log_with}: that tracker is not installed here "
                             f"(available: {', '.join(sorted(available)) or 'none'})")
    state = AcceleratorState._shared_state
    wanted = configured_precision(cfg.mixed_precision)
    if state and PartialState().num_processes == 1 and state.get("_mixed_precision") != wanted:
        # Accelerate keeps one process-wide state; a single-process caller that trains twice with other
        # precisions (a notebook, the tests) would otherwise be refused by the second Accelerator
        AcceleratorState._reset_state()
    try:
        return Accelerator(mixed_precision=wanted, cpu=cfg.cpu, gradient_accumulation_steps=cfg.grad_accum,
                           log_with=log_with, project_dir=str(run) if log_with else None, **extra)
    except (ValueError, RuntimeError) as err:
        raise ValueError(f"--mixed-precision {wanted} / --cpu {cfg.cpu}: {str(err).strip().splitlines()[0]}") from None
