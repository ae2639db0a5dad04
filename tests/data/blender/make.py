"""Render the real Blender Cycles fixtures of tests/test_render_files.py (see README.md beside this file).

blender -b -noaudio --factory-startup --python make.py -- OUTDIR
"""
import sys

import bpy

out = sys.argv[sys.argv.index("--") + 1] if "--" in sys.argv else "."
bpy.ops.wm.read_factory_settings(use_empty=True)
scene = bpy.context.scene
scene.render.engine = "CYCLES"
scene.cycles.device = "CPU"
scene.cycles.samples = 2
scene.cycles.seed = 7
scene.cycles.use_adaptive_sampling = False
scene.render.resolution_x, scene.render.resolution_y = 64, 48
scene.render.resolution_percentage = 100
scene.render.film_transparent = False

world = bpy.data.worlds.new("Sky")
world.use_nodes = True
world.node_tree.nodes["Background"].inputs["Color"].default_value = (0.4, 0.6, 1.0, 1.0)
world.node_tree.nodes["Background"].inputs["Strength"].default_value = 1.0
scene.world = world


def material(name, color, roughness=0.5, metallic=0.0, emission=0.0):
    m = bpy.data.materials.new(name)
    m.use_nodes = True
    bsdf = m.node_tree.nodes["Principled BSDF"]
    bsdf.inputs["Base Color"].default_value = (*color, 1.0)
    bsdf.inputs["Roughness"].default_value = roughness
    bsdf.inputs["Metallic"].default_value = metallic
    if emission:
        bsdf.inputs["Emission"].default_value = (1.0, 0.9, 0.7, 1.0)
        bsdf.inputs["Emission Strength"].default_value = emission
    return m


bpy.ops.mesh.primitive_plane_add(size=8, location=(0, 0, 0))
bpy.context.object.data.materials.append(material("Floor", (0.6, 0.6, 0.55), roughness=0.8))
bpy.ops.mesh.primitive_uv_sphere_add(radius=0.8, location=(-0.6, 0.4, 0.8), segments=24, ring_count=12)
bpy.ops.object.shade_smooth()
bpy.context.object.data.materials.append(material("Glossy", (0.9, 0.2, 0.1), roughness=0.05, metallic=0.0))
bpy.ops.mesh.primitive_uv_sphere_add(radius=0.3, location=(1.0, -0.2, 1.4), segments=16, ring_count=8)
bpy.context.object.data.materials.append(material("Lamp", (0.8, 0.8, 0.8), emission=30.0))
bpy.ops.mesh.primitive_cube_add(size=0.7, location=(1.1, 1.2, 0.35))
bpy.context.object.data.materials.append(material("Box", (0.2, 0.5, 0.2), roughness=0.6))

bpy.ops.object.camera_add(location=(0.0, -5.0, 2.2), rotation=(1.30, 0.0, 0.0))
scene.camera = bpy.context.object

layer = scene.view_layers[0]
layer.name = "ViewLayer"
for vl in [layer]:
    vl.cycles.denoising_store_passes = True
    vl.use_pass_z = True
    vl.use_pass_normal = True
    vl.use_pass_emit = True

settings = scene.render.image_settings
settings.file_format = "OPEN_EXR_MULTILAYER"
settings.exr_codec = "ZIP"


def render(name, half, denoise, layers):  # this Debian Blender has no OIDN: denoise stays False
    settings.color_depth = "16" if half else "32"
    scene.cycles.use_denoising = denoise
    while len(scene.view_layers) > layers:
        scene.view_layers.remove(scene.view_layers[-1])
    while len(scene.view_layers) < layers:
        vl = scene.view_layers.new(f"Layer{len(scene.view_layers) + 1}")
        vl.cycles.denoising_store_passes = True
        vl.use_pass_z = True
    scene.render.filepath = f"{out}/{name}.exr"
    bpy.ops.render.render(write_still=True)


render("cycles_float", half=False, denoise=False, layers=1)
render("cycles_half_2layers", half=True, denoise=False, layers=2)


def reference(name, samples):
    """The same view at many samples, colour only (RGBA, full float): what the denoised frame should approach."""
    scene.cycles.samples = samples
    scene.cycles.use_denoising = False
    while len(scene.view_layers) > 1:
        scene.view_layers.remove(scene.view_layers[-1])
    vl = scene.view_layers[0]
    vl.cycles.denoising_store_passes = False
    vl.use_pass_z = vl.use_pass_normal = vl.use_pass_emit = False
    settings.file_format = "OPEN_EXR"
    settings.color_depth = "32"
    scene.render.filepath = f"{out}/{name}.exr"
    bpy.ops.render.render(write_still=True)


reference("cycles_reference", 4096)
