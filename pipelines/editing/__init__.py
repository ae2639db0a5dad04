"""The diffusers integration: SPL guidance for stock pipelines (``spl_guidance``), masks (``masks``), the
structure-preserving edit pipeline (``pipeline``, also loadable with ``custom_pipeline=`` this folder's path) and
its attention control.

Names resolve on first access, so importing a submodule such as ``masks`` does not import diffusers.
"""
import importlib

_LAZY = {"StructurePreservingEditPipeline": "pipeline", "enable_structure_preservation": "spl_guidance",
         "disable_structure_preservation": "spl_guidance", "SPLGuidanceCallback": "spl_callback"}
__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
