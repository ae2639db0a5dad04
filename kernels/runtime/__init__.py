"""The kernels' runtime in one place: backend choice, runtime switches, CPU threads and numba loops.

- :mod:`.backends`: which backend runs (Triton on CUDA, PyTorch elsewhere), forced with ``VISION_BACKEND`` /
  :func:`set_backend` / :func:`use_backend`; :func:`explain_backend` says why.
- :mod:`.paths`: each op's paths (Triton kernel, PyTorch, CPU bands, numba...) declared with what they support;
  :func:`choose` / :func:`decide` pick one per call and log it once, :func:`run_path` runs its
  implementation; :func:`explain` says which path a call takes and why.
- :mod:`.switches`: every other switch (``VISION_CHECKS``, ``VISION_NUMBA``, ``VISION_CUDA_GRAPHS``), each an env
  var + setter + context manager.
- :mod:`.threads`: the CPU thread budget (worker pool, fork safety) shared by the PyTorch paths and numba.
- :mod:`.jit`: numba-compiled CPU loops (cached machine code, fork-safe threading layer).

Nothing here imports an op; the ops import this package.
"""
from .backends import (BACKENDS, backend_for, explain as explain_backend, forced_backend, interpreting, set_backend,
                       triton_available, use_backend)
from .paths import backend_of, choose, decide, explain, implementation, register as register_path, run as run_path
from .switches import (CHECK_MODES, checks, checks_mode, cuda_graphs_enabled, data_checks, numba_enabled,
                       set_checks, set_cuda_graphs, set_numba, use_cuda_graphs, use_numba)
from .logs import get_logger, get_verbosity, set_verbosity, verbosity

__all__ = ["BACKENDS", "backend_for", "explain", "explain_backend", "choose", "decide", "implementation", "backend_of",
           "run_path", "register_path", "forced_backend", "interpreting", "set_backend",
           "triton_available", "use_backend", "CHECK_MODES", "checks", "checks_mode", "data_checks",
           "numba_enabled", "set_checks", "set_numba", "use_numba", "cuda_graphs_enabled", "set_cuda_graphs",
           "use_cuda_graphs", "get_logger", "get_verbosity", "set_verbosity", "verbosity"]
