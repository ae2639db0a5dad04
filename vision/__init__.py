"""locallinear-vision: the local linear model of the guided filter, as fast operators and the tools built on them.

Keep this module small: Python runs it before any ``vision.kernels`` import. It re-exports the public
names and registers the backbones into timm; nothing here may import diffusers.
"""
__version__ = "0.1.0"
