"""Operators on tensors: Triton kernels, their PyTorch paths and float64 references."""
from .box import BoxFilter, box_filter
from .guided import GuidedFilter, guided_filter
from .gla import gla, gla_bidirectional
from .spl import structure_loss
from .local_linear import local_linear_fit, local_linear_apply, LocalLinearFit, LocalLinearApply
