"""Linear-attention backbones: ViG, H-ViG and a Mamba-style (scalar-gate) ViG, registered into timm.

Importing this package registers ``vig_{tiny,small,base}_patch16_224``, ``hvig_{tiny,small,base}_224``
and ``vig_mamba_{tiny,small}_patch16_224`` with timm; build them with ``timm.create_model``.
"""
from .hvig import HierViG
from .layers import GatedLinearAttention2D, GLABlock
from .registry import checkpoint_filter_fn
from .vig import ViG

__all__ = ["ViG", "HierViG", "GatedLinearAttention2D", "GLABlock", "checkpoint_filter_fn"]
