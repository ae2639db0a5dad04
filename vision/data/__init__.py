"""Data: procedural scenes rendered with Mitsuba 3, multi-layer EXR frames, and a dataset over them.

Mitsuba is imported only by the modules that render (``render``, ``mitsuba_variant``), which ``import vision.data``
does not load, so it works without Mitsuba. The names below resolve on first access (PEP 562), so light modules
(``vision.data.fields``, the buffer table the command line reads) import without torch.
"""
from vision.kernels._lazy import lazy_exports

_LAZY = {"RenderedScenes": "dataset", **dict.fromkeys(("LAYERS", "read_exr", "read_frame", "write_exr",
                                                        "write_frame"), "exr"),
         **dict.fromkeys(("CLASSES", "KINDS", "Camera", "Material", "SceneObject", "SceneSpec", "make_scene",
                          "scene_seed"), "scenes")}

__all__ = ["RenderedScenes", "LAYERS", "read_exr", "read_frame", "write_exr", "write_frame", "CLASSES", "KINDS",
           "Camera", "Material", "SceneObject", "SceneSpec", "make_scene", "scene_seed"]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
