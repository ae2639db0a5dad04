"""The engines of the denoiser's stages as registry ops.

A stage with more than one implementation (a fused numba loop, PyTorch bands of rows, PyTorch formulas over the
whole frame, a Triton kernel) registers them beside its code as the paths of one op
(:func:`vision.kernels.runtime.register_path`), and its call site runs the implementation that
:func:`vision.kernels.runtime.decide` returns and nothing else, so ``explain(op, x, **call)`` names the engine
that runs. Every op is called with ``tensors=`` (the stage's inputs, the one that decides the backend first), plus
the stage's own conditions. This module holds what their ``supports`` share: why the numba loops may not take a
call (:func:`numba_takes`: the CPU path, then :func:`vision.kernels.runtime.jit.refusal`) and why OpenCV may not
(:func:`opencv_takes`).

==========================  ===================================  =====================================
op                          paths (priority)                     where
==========================  ===================================  =====================================
``denoise.log_depth``       torch+numba (5), torch (0)           :mod:`.features`
``denoise.reproject``       torch+numba (5), torch (0)           :mod:`.reproject`
``denoise.edge_history``    torch+numba (5), torch (0)           :mod:`.edge_history`
``denoise.repair``          triton (10), torch (0)               :mod:`.repair`
``denoise.fill``            triton (10), torch (0)               :mod:`.repair`
``denoise.flnr.X``          torch+numba (5), torch+bands (3),    ``flnr/X.py`` (:mod:`.flnr`: one module per
                            torch+opencv (5), torch (0)          stage, named after its op)
``denoise.area_down``       torch+opencv (5), torch (0)          :mod:`.flr`
``denoise.demodulate``      torch+numba (5), torch (0)           :mod:`.signal`
``denoise.input_blend``     torch+numba (5), torch (0)           :mod:`.input_blend`
==========================  ===================================  =====================================

The numba paths' loops live beside their stage in a module of their own (``flnr/head_numba.py`` beside
``flnr/head.py``, ``reproject_cpu.py`` beside ``reproject.py``), imported by the path's implementation when it runs:
numba is optional, and loading it costs.
"""
from __future__ import annotations

import torch

from vision.kernels.runtime import jit

from .layout import cpu_path

NUMBA, OPENCV, BANDS, TORCH = "torch+numba", "torch+opencv", "torch+bands", "torch"


def numba_takes(*tensors: torch.Tensor | None) -> str | None:
    """None when the numba loops may take these tensors (the first on the CPU path, then ``jit.refusal``; None
    entries are absent buffers), else why not."""
    tensors = [t for t in tensors if t is not None]
    if not cpu_path(tensors[0]):
        return "needs the CPU path (a CPU tensor on the PyTorch backend)"
    return jit.refusal(*tensors)


def opencv_takes(x: torch.Tensor, grad: bool) -> str | None:
    """None when OpenCV may take ``x`` as far as every OpenCV path asks (the CPU path, float32, nothing to
    differentiate: ``grad`` says whether the call does), else why not; each op adds its own layout conditions."""
    if not cpu_path(x):
        return "needs the CPU path (a CPU tensor on the PyTorch backend)"
    if x.dtype != torch.float32:
        return "needs float32"
    return "the input requires grad" if grad else None
