"""Dense-prediction heads on backbone tokens: the token-local linear head (ReChannel), its local-linear
readout, a DPT-style baseline decoder and guided-filter refinement.

``HEADS`` maps the names ``vision finetune --head`` takes to the classes.
"""
from torch import nn

from .dpt import DPTHead
from .local_linear_readout import LocalLinearReadout
from .refine import GuidedRefine, guided_refine
from .token_local import TokenLocalHead

HEADS = {"token-local": TokenLocalHead, "local-linear": LocalLinearReadout, "dpt": DPTHead}


def head_parameter_count(module: nn.Module) -> int:
    """Number of trainable parameters (``requires_grad``) of ``module``."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


__all__ = ["TokenLocalHead", "LocalLinearReadout", "DPTHead", "guided_refine", "GuidedRefine",
           "head_parameter_count", "HEADS"]
