"""Data: procedural scenes rendered with Mitsuba 3, multi-layer EXR frames, and a dataset over them.

Mitsuba is imported only inside the functions that render, so ``import vision.data`` works without it.
"""
from .dataset import RenderedScenes
from .exr import LAYERS, read_exr, read_frame, write_exr, write_frame
from .scenes import CLASSES, KINDS, Camera, Material, SceneObject, SceneSpec, make_scene, scene_seed

__all__ = ["RenderedScenes", "LAYERS", "read_exr", "read_frame", "write_exr", "write_frame", "CLASSES", "KINDS",
           "Camera", "Material", "SceneObject", "SceneSpec", "make_scene", "scene_seed"]
