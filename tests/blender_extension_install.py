"""Run by tests/test_blender_addon.py in a Python that has Blender 4.2+ as a module (the ``bpy`` wheel): installs the
add-on zip as an extension, enables it, runs Test, Set up for denoising, renders 3 frames of 32 x 32 at 1 spp and
runs Denoise animation; prints one line ``RESULT {...}``.

    python tests/blender_extension_install.py ZIP VISION WORK
"""
import json
import os
import sys

import bpy

zip_path, vision, work = sys.argv[1:4]
result = {"install": list(bpy.ops.extensions.package_install_files(filepath=zip_path, repo="user_default",
                                                                   enable_on_install=True))}
name = next(k for k in bpy.context.preferences.addons.keys() if k.endswith(".vision_denoise"))
result["module"] = name
prefs = bpy.context.preferences.addons[name].preferences
prefs.vision_path = vision
result["test"] = list(bpy.ops.vision_denoise.test())
scene = bpy.context.scene
result["setup"] = list(bpy.ops.vision_denoise.setup())
scene.render.resolution_x = scene.render.resolution_y = 32
scene.render.resolution_percentage = 100
scene.frame_start, scene.frame_end = 1, 3
scene.cycles.samples = 1
scene.cycles.device = "CPU"
scene.render.filepath = os.path.join(work, "render", "frame_####")
bpy.ops.render.render(animation=True)
scene.vision_denoise.extra_args = "--model flr"
result["denoise"] = list(bpy.ops.vision_denoise.denoise_animation())
result["files"] = sorted(os.listdir(os.path.join(work, "render", "denoised")))
print("RESULT " + json.dumps(result), flush=True)
