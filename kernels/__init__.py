"""Operators on tensors: Triton kernels, their PyTorch paths and float64 references.

This folder installs as ``vision.kernels``. Names resolve on first access (PEP 562), so importing a light module
such as ``vision.kernels.spl.defaults`` or ``vision.kernels.runtime`` does not load torch and every op.

Python started in the repository root also sees this folder as a top-level ``kernels`` package, the name of Hugging
Face's kernel hub package that transformers and diffusers import; under that name it hands over to the installed
distribution (see ``_handover``) instead of shadowing it.
"""
if __name__ == "kernels":
    from ._handover import hand_over

    hand_over(__file__)
else:
    from typing import TYPE_CHECKING

    from ._lazy import lazy_exports

    if TYPE_CHECKING:  # what mypy and pyright read: the names of _LAZY below (tests/test_typing.py holds them equal)
        from .box import BoxFilter, box_filter
        from .gla import gla, gla_bidirectional
        from .guided import GuidedFilter, guided_filter
        from .local_linear import LocalLinearApply, LocalLinearFit, local_linear_apply, local_linear_fit
        from .spl.op import structure_loss

    _LAZY = {"BoxFilter": "box", "box_filter": "box", "GuidedFilter": "guided", "guided_filter": "guided",
             "gla": "gla", "gla_bidirectional": "gla", "structure_loss": "spl", "local_linear_fit": "local_linear",
             "local_linear_apply": "local_linear", "LocalLinearFit": "local_linear",
             "LocalLinearApply": "local_linear"}
    __all__ = sorted(_LAZY)
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY)

    import sys as _sys
    import types as _types

    class _Kernels(_types.ModuleType):
        def __setattr__(self, name, value):
            # the op `gla` shares its name with its subpackage: importing vision.kernels.gla (which binds the
            # subpackage on its parent) must leave `vision.kernels.gla` the op, as the eager imports did
            if name in _LAZY and isinstance(value, _types.ModuleType):
                return
            super().__setattr__(name, value)

    _sys.modules[__name__].__class__ = _Kernels
