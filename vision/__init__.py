"""locallinear-vision: the local linear model of the guided filter, as fast operators and the tools built on them.

Keep this module small: Python runs it before any ``vision.kernels`` import. It re-exports the public
names and registers the backbones into timm; nothing here may import diffusers.
"""
__version__ = "0.1.0"
from . import backbones  # noqa: E402,F401  registers the ViG family into timm

# name -> module, imported on first access (PEP 562) so that `import vision` stays light
_LAZY = {"StructurePreservationLoss": "vision.losses", "ColorPreservationLoss": "vision.losses",
         "restore_structure": "vision.restore"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'vision' has no attribute {name!r}")
