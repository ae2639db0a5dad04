"""Workflows users run, and the ``vision`` command line that drives them.

Rooms by role: ``cli`` (the ``vision`` command and one module per subcommand), ``bench`` (``vision bench``),
``demos`` (the sections of ``vision demo``), ``editing`` (the diffusers integration), ``training`` (training
workflows as library functions). Heavy dependencies (diffusers) are imported lazily by the modules that need them.
"""
from typing import TYPE_CHECKING

from vision.kernels._lazy import lazy_exports

if TYPE_CHECKING:  # what mypy and pyright read: the names of _LAZY below (tests/test_typing.py holds them equal)
    from .editing.pipeline import StructurePreservingEditPipeline
    from .editing.spl_guidance import SPLGuidanceCallback, disable_structure_preservation, enable_structure_preservation

_LAZY = {"enable_structure_preservation": "editing.spl_guidance", "disable_structure_preservation": "editing.spl_guidance",
         "SPLGuidanceCallback": "editing.spl_guidance", "StructurePreservingEditPipeline": "editing"}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
