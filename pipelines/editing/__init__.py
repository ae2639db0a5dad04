"""The diffusers integration: the SPL settings as one config object (``config``), SPL guidance for stock
pipelines (``spl_guidance``), masks (``masks``), the
structure-preserving edit pipeline (``pipeline``, also loadable with ``custom_pipeline=`` this folder's path) and
its attention control.

Names resolve on first access, so importing a submodule such as ``masks`` does not import diffusers.
"""
from vision.kernels._lazy import lazy_exports

_LAZY = {"StructurePreservingEditPipeline": "pipeline", "enable_structure_preservation": "spl_guidance",
         "disable_structure_preservation": "spl_guidance", "SPLGuidanceCallback": "spl_callback",
         "StructurePreservationConfig": "config", "StructurePreservationReport": "config"}
__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
