"""Run inside Blender (``blender -b --factory-startup --python tests/blender_addon_scene.py -- JSON``) by
tests/test_blender_addon.py: installs and enables the add-on from its zip, builds a small animated scene, runs the
add-on's operators as a user would, and prints one line ``RESULT {...}`` with what it saw.

JSON (one argument): {"zip": ..., "work": folder, "vision": path or "", "steps": [...]} where steps are
"setup" (Set up for denoising, with the settings before and after), "render" (1 spp to work/noisy and 64 spp to
work/ref), "denoise" (Denoise animation through the add-on), "auto" (render with auto-denoise on), "plain" (render without the passes to work/plain).
"""
import json
import os
import sys

import bpy

ARGS = json.loads(sys.argv[sys.argv.index("--") + 1])
WORK = ARGS["work"]
RESULT = {"reports": []}


def settings(scene):
    layer = scene.view_layers[0]
    return {"engine": scene.render.engine, "denoising_data": layer.cycles.denoising_store_passes,
            "vector": layer.use_pass_vector, "emit": layer.use_pass_emit,
            "file_format": scene.render.image_settings.file_format,
            "color_depth": scene.render.image_settings.color_depth, "animated_seed": scene.cycles.use_animated_seed,
            "motion_blur": scene.render.use_motion_blur, "cycles_denoise": scene.cycles.use_denoising}


def build(scene):
    scene.render.engine = "BLENDER_EEVEE"  # the factory default: the setup switches it
    scene.render.resolution_x = scene.render.resolution_y = 32
    scene.render.resolution_percentage = 100
    scene.frame_start, scene.frame_end = 1, 3
    scene.render.use_motion_blur = True
    scene.cycles.device = "CPU"
    cam = scene.camera
    for f, x in ((1, 7.0), (3, 6.2)):
        cam.location = (x, -6.5, 4.6)
        cam.keyframe_insert("location", frame=f)
    bpy.ops.mesh.primitive_plane_add(size=20, location=(0, 0, -1))
    bpy.data.lights["Light"].energy = 3000


def render(folder, spp):
    scene = bpy.context.scene
    scene.cycles.samples = spp
    scene.cycles.use_adaptive_sampling = False
    scene.render.filepath = os.path.join(WORK, folder, "frame_####")
    bpy.ops.render.render(animation=True)


def main():
    bpy.ops.preferences.addon_install(filepath=ARGS["zip"])
    bpy.ops.preferences.addon_enable(module="vision_denoise")
    prefs = bpy.context.preferences.addons["vision_denoise"].preferences
    prefs.vision_path = ARGS.get("vision", "")
    scene = bpy.context.scene
    build(scene)
    RESULT["before"] = settings(scene)
    steps = ARGS["steps"]
    if "plain" in steps:  # a user who renders without the setup: EXR MultiLayer, no passes
        scene.render.engine = "CYCLES"
        scene.cycles.use_denoising = False  # Debian's Blender has no OIDN
        scene.render.image_settings.file_format = "OPEN_EXR_MULTILAYER"
        render("noisy", 1)
    if "setup" in steps:
        RESULT["setup"] = list(bpy.ops.vision_denoise.setup())
        RESULT["after"] = settings(scene)
    if "render" in steps:
        render("ref", 64)
        render("noisy", 1)
    if "auto" in steps:  # Denoise after rendering an animation: Render Animation runs Denoise animation
        scene.vision_denoise.auto_denoise = True
        scene.vision_denoise.out_dir = os.path.join(WORK, "auto")
        scene.vision_denoise.extra_args = ARGS.get("extra", "")
        render("noisy", 1)
        RESULT["auto_status"] = bpy.context.window_manager.vision_denoise_status
    if "test" in steps:
        try:
            RESULT["test"] = list(bpy.ops.vision_denoise.test())
        except RuntimeError as err:  # an operator that reports an error raises under -b
            RESULT["test"] = ["ERROR", str(err)]
    if "denoise" in steps:
        scene.render.filepath = os.path.join(WORK, "noisy", "frame_####")
        scene.vision_denoise.out_dir = os.path.join(WORK, "denoised")
        scene.vision_denoise.extra_args = ARGS.get("extra", "")
        try:
            RESULT["denoise"] = list(bpy.ops.vision_denoise.denoise_animation())
        except RuntimeError as err:
            RESULT["denoise"] = ["ERROR", str(err)]
        RESULT["images"] = [(im.name, im.source, bpy.path.abspath(im.filepath)) for im in bpy.data.images
                            if im.filepath]
        RESULT["status"] = bpy.context.window_manager.vision_denoise_status
    print("RESULT " + json.dumps(RESULT), flush=True)


main()
