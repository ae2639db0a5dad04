"""Vision Denoise: set up, denoise and load back Cycles animations with the ``vision denoise`` command.

Blender's Python has no torch, so the add-on runs the ``vision`` command of an installed locallinear-vision in a
background process (its path is a preference, ``vision`` on PATH by default) and reads its progress stream. It
installs as a legacy add-on on Blender 3.4 and later (``bl_info``) and as an extension on 4.2 and later
(``blender_manifest.toml``). Panel: Properties > Output > Vision Denoise.
"""
from __future__ import annotations

bl_info = {
    "name": "Vision Denoise",
    "author": "locallinear-vision",
    "version": (0, 1, 0),
    "blender": (3, 4, 0),
    "location": "Properties > Output > Vision Denoise",
    "description": "Denoise Cycles animations without flicker with the vision command (locallinear-vision)",
    "category": "Render",
}

import bpy  # noqa: E402

from . import operators  # noqa: E402


class VisionDenoisePreferences(bpy.types.AddonPreferences):
    bl_idname = __package__

    vision_path: bpy.props.StringProperty(
        name="vision command", subtype="FILE_PATH", default="",
        description="Path to the vision command of locallinear-vision (empty: vision found on PATH)")
    status: bpy.props.StringProperty(name="Status", default="")

    def draw(self, context):
        layout = self.layout
        row = layout.row()
        row.prop(self, "vision_path")
        row.operator("vision_denoise.test")
        if self.status:
            layout.label(text=self.status)


class VisionDenoiseSettings(bpy.types.PropertyGroup):
    out_dir: bpy.props.StringProperty(
        name="Output folder", subtype="DIR_PATH", default="",
        description="Where the denoised frames go (empty: a denoised folder beside the rendered frames)")
    auto_denoise: bpy.props.BoolProperty(
        name="Denoise after rendering an animation", default=False,
        description="Run Denoise animation when Render Animation finishes")
    extra_args: bpy.props.StringProperty(
        name="Extra options", default="",
        description="More vision denoise options, e.g. --model flr or --device cpu")


class VISION_PT_panel(bpy.types.Panel):
    bl_label = "Vision Denoise"
    bl_space_type = "PROPERTIES"
    bl_region_type = "WINDOW"
    bl_context = "output"

    def draw(self, context):
        layout = self.layout
        settings = context.scene.vision_denoise
        wm = context.window_manager
        layout.operator("vision_denoise.setup", icon="SETTINGS")
        row = layout.row(align=True)
        row.operator("vision_denoise.denoise_animation", icon="RENDER_ANIMATION")
        row.operator("vision_denoise.denoise_frame", icon="RENDER_STILL")
        running = operators.JOBS.get("job") is not None
        if running or wm.vision_denoise_status:
            row = layout.row()
            if hasattr(row, "progress"):  # Blender 4.0 and later
                row.progress(factor=wm.vision_denoise_progress, type="BAR", text=wm.vision_denoise_status)
            else:
                row.label(text=f"{wm.vision_denoise_status} ({100 * wm.vision_denoise_progress:.0f}%)")
            if running:
                row.operator("vision_denoise.cancel", icon="CANCEL")
        layout.prop(settings, "out_dir")
        layout.prop(settings, "extra_args")
        layout.prop(settings, "auto_denoise")


CLASSES = (VisionDenoisePreferences, VisionDenoiseSettings, VISION_PT_panel, *operators.CLASSES)


def register():
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    bpy.types.Scene.vision_denoise = bpy.props.PointerProperty(type=VisionDenoiseSettings)
    bpy.types.WindowManager.vision_denoise_status = bpy.props.StringProperty(default="")
    bpy.types.WindowManager.vision_denoise_progress = bpy.props.FloatProperty(default=0.0, min=0.0, max=1.0)
    for name, handler in operators.HANDLERS:
        getattr(bpy.app.handlers, name).append(handler)


def unregister():
    job = operators.JOBS.pop("job", None)
    if job is not None:
        job.cancel()
    for name, handler in operators.HANDLERS:
        handlers = getattr(bpy.app.handlers, name)
        if handler in handlers:
            handlers.remove(handler)
    del bpy.types.WindowManager.vision_denoise_progress
    del bpy.types.WindowManager.vision_denoise_status
    del bpy.types.Scene.vision_denoise
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
