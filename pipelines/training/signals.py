"""Stopping a training run on SIGTERM or Ctrl-C after the current step, the same way on every rank.

A job scheduler's SIGTERM or a Ctrl-C only sets a flag; the loop reads it after each step (through :func:`agree`,
so that all ranks of ``accelerate launch`` stop after the same one), finishes what it is writing and stops. A
second Ctrl-C raises ``KeyboardInterrupt`` at once. Used by ``vision train-denoiser`` and ``vision finetune``.

Example::

    with StopOnSignal() as stop:
        for step in steps:
            ...
            signum, _ = agree(accelerator, stop.signum, 0.0)
            if signum:
                break
"""
from __future__ import annotations

import signal
import threading

import torch


class StopOnSignal:
    """SIGTERM and Ctrl-C set ``signum`` (the loop finishes its step, saves and stops); a second Ctrl-C raises
    KeyboardInterrupt at once. Handlers are installed only in the main thread and restored on exit."""

    def __init__(self):
        self.signum, self._old = 0, {}

    def _handle(self, signum, frame):
        if self.signum and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = self.signum or signum

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGTERM, signal.SIGINT):
                self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)


def agree(acc, signum: int, elapsed: float) -> tuple[int, float]:
    """Every rank's largest signal number and time spent, so all ranks stop after the same step and follow
    the same schedule."""
    if acc.num_processes == 1:
        return signum, elapsed
    t = torch.tensor([float(signum), elapsed], dtype=torch.float64, device=acc.device)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return int(t[0]), float(t[1])


def signal_name(signum: int) -> str:
    """How a message names the signal that stopped a run: "SIGTERM", "Ctrl-C", else "signal N"."""
    return {signal.SIGTERM: "SIGTERM", signal.SIGINT: "Ctrl-C"}.get(signum, f"signal {signum}")
