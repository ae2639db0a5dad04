"""Workflows users run, and the ``vision`` command line that drives them.

Heavy dependencies (diffusers) are imported lazily by the modules that need them.
"""

_LAZY = {"enable_structure_preservation": "spl_guidance", "disable_structure_preservation": "spl_guidance",
         "SPLGuidanceCallback": "spl_guidance", "StructurePreservingEditPipeline": "structure_preserving_edit"}


def __getattr__(name):  # PEP 562: importing vision.pipelines must not import diffusers
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
