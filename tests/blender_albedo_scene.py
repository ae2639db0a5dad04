"""Run inside Blender by tests/test_blender_addon.py: renders the factory scene's cube (Blender's default Principled
BSDF) at 48 x 32, 16 spp, with the Denoising Data passes, to OUT/cube.exr; then with an emissive sphere (strength
5) in view to OUT/lamp.exr, and the same with the Emission pass to OUT/lamp_emit.exr.

    blender -b --factory-startup --python tests/blender_albedo_scene.py -- OUT
"""
import os
import sys

import bpy

out = sys.argv[sys.argv.index("--") + 1]
scene = bpy.context.scene
scene.render.engine = "CYCLES"
scene.cycles.samples = 16
scene.cycles.use_denoising = False
scene.cycles.device = "CPU"
scene.render.resolution_x, scene.render.resolution_y, scene.render.resolution_percentage = 48, 32, 100
scene.render.image_settings.file_format = "OPEN_EXR_MULTILAYER"
scene.render.image_settings.color_depth = "32"
layer = scene.view_layers[0]
layer.cycles.denoising_store_passes = True
scene.camera.location, scene.camera.rotation_euler = (0, -9, 2), (1.4, 0, 0)


def render(name):
    scene.render.filepath = os.path.join(out, name)
    bpy.ops.render.render(write_still=True)


render("cube.exr")
bpy.ops.mesh.primitive_uv_sphere_add(location=(2.5, 0, 0))
lamp = bpy.data.materials.new("lamp")
lamp.use_nodes = True
nodes = lamp.node_tree.nodes
nodes.remove(nodes["Principled BSDF"])
emission = nodes.new("ShaderNodeEmission")
emission.inputs["Strength"].default_value = 5
lamp.node_tree.links.new(emission.outputs[0], nodes["Material Output"].inputs[0])
bpy.context.object.data.materials.append(lamp)
render("lamp.exr")
layer.use_pass_emit = True
render("lamp_emit.exr")
