"""Workflows users run, and the ``vision`` command line that drives them.

Rooms by role: ``cli`` (the ``vision`` command and one module per subcommand), ``bench`` (``vision bench``),
``demos`` (the sections of ``vision demo``), ``editing`` (the diffusers integration), ``training`` (training
workflows as library functions). Heavy dependencies (diffusers) are imported lazily by the modules that need them.
"""

_LAZY = {"enable_structure_preservation": "editing.spl_guidance", "disable_structure_preservation": "editing.spl_guidance",
         "SPLGuidanceCallback": "editing.spl_guidance", "StructurePreservingEditPipeline": "editing"}


def __getattr__(name):  # PEP 562: importing vision.pipelines must not import diffusers
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_LAZY)


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
