"""The kernels' runtime in one place: backend choice, runtime switches, CPU threads and numba loops.

- :mod:`.backends`: which implementation of an op runs (Triton on CUDA, the PyTorch path elsewhere), forced with
  ``VISION_BACKEND`` / :func:`set_backend` / :func:`use_backend`; :func:`explain` says which path a call takes.
- :mod:`.switches`: every other switch (``VISION_CHECKS``, ``VISION_NUMBA``), each an env var + setter + context
  manager.
- :mod:`.threads`: the CPU thread budget (worker pool, fork safety) shared by the PyTorch paths and numba.
- :mod:`.jit`: numba-compiled CPU loops (cached machine code, fork-safe threading layer).

Nothing here imports an op; the ops import this package.
"""
from .backends import (BACKENDS, backend_for, explain, forced_backend, interpreting, set_backend, triton_available,
                       use_backend)
from .switches import (CHECK_MODES, checks, checks_mode, data_checks, numba_enabled, set_checks, set_numba,
                       use_numba)

__all__ = ["BACKENDS", "backend_for", "explain", "forced_backend", "interpreting", "set_backend",
           "triton_available", "use_backend", "CHECK_MODES", "checks", "checks_mode", "data_checks",
           "numba_enabled", "set_checks", "set_numba", "use_numba"]
