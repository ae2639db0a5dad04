"""locallinear-vision: the local linear model of the guided filter, as fast operators and the tools built on them.

Keep this module small: Python runs it before any ``vision.kernels`` import. It re-exports the public
names lazily and arranges for the backbones to register into timm when timm is imported (``_timm_hook``);
nothing here may import timm, diffusers or transformers.
"""
from typing import TYPE_CHECKING

__version__ = "0.4.0"
from ._timm_hook import install as _install_timm_hook  # noqa: E402
from vision.kernels._lazy import lazy_exports  # noqa: E402

_install_timm_hook()

if TYPE_CHECKING:  # what mypy and pyright read: the names of _LAZY below (tests/test_typing.py holds them equal)
    from vision.kernels.spl.config import SPLConfig
    from vision.kernels.spl.defaults import SPL_DEFAULTS, SPLDefaults
    from vision.losses import ColorPreservationLoss, StructurePreservationLoss
    from vision.restore import restore_structure

# name -> module, imported on first access (PEP 562) so that `import vision` stays light
_LAZY = {"StructurePreservationLoss": "vision.losses", "ColorPreservationLoss": "vision.losses",
         "restore_structure": "vision.restore", "SPL_DEFAULTS": "vision.kernels.spl.defaults",
         "SPLDefaults": "vision.kernels.spl.defaults", "SPLConfig": "vision.kernels.spl.config"}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
