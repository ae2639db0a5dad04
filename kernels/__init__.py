"""Operators on tensors: Triton kernels, their PyTorch paths and float64 references.

This folder installs as ``vision.kernels``. Names resolve on first access (PEP 562), so importing a light module
such as ``vision.kernels.spl.defaults`` or ``vision.kernels.runtime`` does not load torch and every op.

Python started in the repository root also sees this folder as a top-level ``kernels`` package, the name of Hugging
Face's kernel hub package that transformers and diffusers import; under that name it hands over to the installed
distribution (see ``_handover``) instead of shadowing it (ARCHITECTURE.md, "Mechanisms that look like tricks").
"""
if __name__ == "kernels":
    from ._handover import hand_over

    hand_over(__file__)
else:
    from typing import TYPE_CHECKING

    from ._lazy import lazy_exports

    if TYPE_CHECKING:  # what mypy and pyright read: the names of _LAZY below (tests/test_typing.py holds them equal)
        from .box import BoxFilter, box_filter
        from .guided import GuidedFilter, guided_filter
        from .linear_attention import gla, gla_bidirectional
        from .local_linear import LocalLinearApply, LocalLinearFit, local_linear_apply, local_linear_fit
        from .spl.op import structure_loss

    # public name -> the subpackage that defines it; no public name is also a subpackage's name, so importing a
    # subpackage (which binds it on this module) never hides an op
    _LAZY = {"BoxFilter": "box", "box_filter": "box", "GuidedFilter": "guided", "guided_filter": "guided",
             "gla": "linear_attention", "gla_bidirectional": "linear_attention", "structure_loss": "spl",
             "local_linear_fit": "local_linear", "local_linear_apply": "local_linear",
             "LocalLinearFit": "local_linear", "LocalLinearApply": "local_linear"}
    __all__ = sorted(_LAZY)
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY)

