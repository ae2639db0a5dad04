"""Operators on tensors: Triton kernels, their PyTorch paths and float64 references.

This folder installs as ``vision.kernels``. Python started in the repository root also sees it as a top-level
``kernels`` package, the name of Hugging Face's kernel hub package that transformers and diffusers import; under
that name it hands over to the installed distribution (see ``_handover``) instead of shadowing it.
"""
if __name__ == "kernels":
    from ._handover import hand_over

    hand_over(__file__)
else:
    from .box import BoxFilter, box_filter
    from .guided import GuidedFilter, guided_filter
    from .gla import gla, gla_bidirectional
    from .spl import structure_loss
    from .local_linear import local_linear_fit, local_linear_apply, LocalLinearFit, LocalLinearApply

    __all__ = ["BoxFilter", "box_filter", "GuidedFilter", "guided_filter", "gla", "gla_bidirectional",
               "structure_loss", "local_linear_fit", "local_linear_apply", "LocalLinearFit", "LocalLinearApply"]
