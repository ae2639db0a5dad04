"""Randomised Blender Cycles training scenes for FLNR, built from primitives and procedural textures.

Run inside Blender (3.4; Cycles on the CPU, one thread per process):

    blender -b -noaudio --factory-startup -t 1 --python benchmarks/denoise/blender_train.py -- \
        OUT --seed 5 --start 0 --count 40 [--size 128] [--spp-ref 256]

Scene i is drawn from (seed, i) alone, so ``--start/--count`` ranges render disjoint parts of one set and a
rerun skips scenes whose ``reference.exr`` exists. Each scene writes ``OUT/blender_NNNNN/``: three noisy frames
(``noisy_K.exr``, K = 0, 1, 2) at spp drawn from 1, 2, 4, 8 and 16, and ``reference.exr`` at ``--spp-ref``,
every one a 32-bit multilayer EXR with the Denoising Data passes, Depth, Normal and Emit, exactly as Blender
writes them (``to_dataset.py`` turns the folder into ``vision train-denoiser`` data through the reader
``vision denoise`` uses).

Built to cover what our Mitsuba generator lacks, and differently from the evaluation scenes of
``blender_eval.py`` (rooms with one open wall or none, yards, studios; objects scattered at random, not
arranged; no window panels, no strip lights): hidden lights (area lights behind boxes, lights above the
frame), light that arrives mostly by bounces, emitters in view (emissive spheres, cubes and rings), glossy
and metallic surfaces, glass, textures (noise, Voronoi, checker, wave, brick, magic) from 0.3 to 60 cycles per
metre, sky and sun or darkness, and no sample clamping (fireflies stay).
"""
import math
import random
import sys
from pathlib import Path

import bpy

SPP_CHOICES = (1, 1, 2, 4, 8, 16)


def parse(argv):
    args = argv[argv.index("--") + 1:] if "--" in argv else []
    if not args:
        raise SystemExit("usage: blender -b --python blender_train.py -- OUT [--seed S] [--start I] [--count N] "
                         "[--size PX] [--spp-ref N]")
    opts = {"out": Path(args[0]), "seed": 5, "start": 0, "count": 8, "size": 128, "spp_ref": 256}
    it = iter(args[1:])
    for flag in it:
        key = flag.lstrip("-").replace("-", "_")
        if key not in opts:
            raise SystemExit(f"unknown option {flag}")
        opts[key] = int(next(it))
    return opts


def reset(size):
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.render.engine = "CYCLES"
    c = scene.cycles
    c.device = "CPU"
    c.use_adaptive_sampling = False
    c.use_denoising = False
    c.sample_clamp_direct = 0.0   # no clamping: fireflies are part of what the denoiser must handle
    c.sample_clamp_indirect = 0.0
    c.max_bounces, c.diffuse_bounces, c.glossy_bounces, c.transmission_bounces = 8, 4, 4, 8
    c.pixel_filter_type = "BOX"
    c.filter_width = 1.0
    scene.render.resolution_x = scene.render.resolution_y = size
    scene.render.resolution_percentage = 100
    layer = scene.view_layers[0]
    layer.cycles.denoising_store_passes = True
    layer.use_pass_z = True
    layer.use_pass_normal = True
    layer.use_pass_emit = True
    s = scene.render.image_settings
    s.file_format, s.color_depth, s.exr_codec = "OPEN_EXR_MULTILAYER", "32", "ZIP"
    return scene


def texture(m, rng):
    """A procedural texture at a random scale driving the base colour (and sometimes the roughness)."""
    nodes, links = m.node_tree.nodes, m.node_tree.links
    bsdf = nodes["Principled BSDF"]
    kind = rng.choice(["ShaderNodeTexNoise", "ShaderNodeTexVoronoi", "ShaderNodeTexChecker", "ShaderNodeTexWave",
                       "ShaderNodeTexBrick", "ShaderNodeTexMagic"])
    tex = nodes.new(kind)
    tex.inputs["Scale"].default_value = math.exp(rng.uniform(math.log(0.3), math.log(60)))
    ramp = nodes.new("ShaderNodeValToRGB")
    ramp.color_ramp.elements[0].color = (*[rng.random() ** 1.5 for _ in range(3)], 1)
    ramp.color_ramp.elements[1].color = (*[rng.random() ** 0.7 for _ in range(3)], 1)
    out = tex.outputs["Fac"] if "Fac" in tex.outputs else tex.outputs[0]
    links.new(out, ramp.inputs["Fac"])
    links.new(ramp.outputs["Color"], bsdf.inputs["Base Color"])
    if rng.random() < 0.3:
        links.new(out, bsdf.inputs["Roughness"])


def material(rng, emissive=False):
    m = bpy.data.materials.new("m")
    m.use_nodes = True
    bsdf = m.node_tree.nodes["Principled BSDF"]
    colour = [rng.random() ** 1.2 for _ in range(3)]
    bsdf.inputs["Base Color"].default_value = (*colour, 1)
    kind = rng.random()
    if emissive:
        bsdf.inputs["Emission"].default_value = (*[0.5 + 0.5 * rng.random() for _ in range(3)], 1)
        bsdf.inputs["Emission Strength"].default_value = math.exp(rng.uniform(math.log(2), math.log(60)))
    elif kind < 0.2:      # metal, polished to brushed
        bsdf.inputs["Metallic"].default_value = 1.0
        bsdf.inputs["Roughness"].default_value = rng.uniform(0.0, 0.4)
    elif kind < 0.4:      # glossy dielectric
        bsdf.inputs["Roughness"].default_value = rng.uniform(0.02, 0.25)
    elif kind < 0.47:     # glass
        bsdf.inputs["Transmission"].default_value = 1.0
        bsdf.inputs["Roughness"].default_value = rng.uniform(0.0, 0.1)
    else:                 # diffuse-ish
        bsdf.inputs["Roughness"].default_value = rng.uniform(0.4, 1.0)
    if not emissive and rng.random() < 0.5:
        texture(m, rng)
    return m


def add(obj_op, rng, loc, scale, mat, **kw):
    obj_op(location=loc, **kw)
    ob = bpy.context.object
    ob.scale = scale
    ob.rotation_euler = [rng.uniform(0, 2 * math.pi) * (rng.random() < 0.5) for _ in range(3)]
    ob.data.materials.append(mat)
    if rng.random() < 0.7 and hasattr(bpy.ops.object, "shade_smooth"):
        bpy.ops.object.shade_smooth()
    return ob


PRIMS = [bpy.ops.mesh.primitive_cube_add, bpy.ops.mesh.primitive_uv_sphere_add, bpy.ops.mesh.primitive_cylinder_add,
         bpy.ops.mesh.primitive_cone_add, bpy.ops.mesh.primitive_torus_add, bpy.ops.mesh.primitive_monkey_add,
         bpy.ops.mesh.primitive_ico_sphere_add]


def world(scene, rng, strength):
    w = bpy.data.worlds.new("w")
    w.use_nodes = True
    bg = w.node_tree.nodes["Background"]
    sky = [rng.uniform(0.3, 0.7), rng.uniform(0.5, 0.8), rng.uniform(0.8, 1.0)]
    bg.inputs["Color"].default_value = (*sky, 1)
    bg.inputs["Strength"].default_value = strength
    scene.world = w


def light(kind, loc, energy, size=0.5, rot=(0, 0, 0)):
    data = bpy.data.lights.new("l", kind)
    data.energy = energy
    if kind == "AREA":
        data.size = size
    elif kind in ("POINT", "SPOT"):
        data.shadow_soft_size = size
    ob = bpy.data.objects.new("l", data)
    ob.location, ob.rotation_euler = loc, rot
    bpy.context.collection.objects.link(ob)
    return ob


def build(scene, rng):
    layout = rng.choice(["room", "room", "yard", "studio"])
    span = rng.uniform(4, 8)
    floor = material(rng)
    bpy.ops.mesh.primitive_plane_add(size=4 * span, location=(0, 0, 0))
    bpy.context.object.data.materials.append(floor)
    height = rng.uniform(2.5, 4)
    if layout == "room":  # walls on three or four sides and a ceiling; light through the open side or hidden
        wall = material(rng)
        sides = [((0, span / 2, height / 2), (span / 2, 0.05, height / 2)),
                 ((-span / 2, 0, height / 2), (0.05, span / 2, height / 2)),
                 ((span / 2, 0, height / 2), (0.05, span / 2, height / 2)),
                 ((0, 0, height), (span / 2, span / 2, 0.05))]
        if rng.random() < 0.4:
            sides.append(((0, -span / 2 - 0.5, height / 2), (span / 2, 0.05, height / 2)))
        for loc, sc in sides:
            bpy.ops.mesh.primitive_cube_add(location=loc)
            bpy.context.object.scale = sc
            bpy.context.object.data.materials.append(wall if rng.random() < 0.8 else material(rng))
        world(scene, rng, rng.uniform(0.2, 3.0))
    elif layout == "yard":
        world(scene, rng, rng.uniform(0.5, 2.0))
        sun = light("SUN", (0, 0, 10), rng.uniform(1, 6), rot=(rng.uniform(0.2, 1.2), 0, rng.uniform(0, 6.28)))
        sun.data.angle = rng.uniform(0.005, 0.1)
    else:
        world(scene, rng, rng.uniform(0.0, 0.05))
    for _ in range(rng.randint(1, 3)):  # lights: visible or hidden, area or point
        loc = (rng.uniform(-span / 2.5, span / 2.5), rng.uniform(-span / 2.5, span / 2.5),
               rng.uniform(0.5, height - 0.2))
        if rng.random() < 0.5:  # hidden behind an occluder box right in front of it
            light("AREA", loc, rng.uniform(50, 600), size=rng.uniform(0.1, 1.0), rot=(math.pi, 0, 0))
            bpy.ops.mesh.primitive_cube_add(location=(loc[0], loc[1] - 0.4, loc[2]))
            bpy.context.object.scale = (0.6, 0.05, 0.6)
            bpy.context.object.data.materials.append(material(rng))
        else:
            light(rng.choice(["POINT", "AREA"]), loc, rng.uniform(20, 400), size=rng.uniform(0.05, 0.8),
                  rot=(rng.uniform(0, 3.14), 0, 0))
    for _ in range(rng.randint(4, 12)):
        emissive = rng.random() < 0.08
        s = rng.uniform(0.15, 0.9) * (0.4 if emissive else 1)
        loc = (rng.uniform(-span / 2.5, span / 2.5), rng.uniform(-span / 2.5, span / 2.5), s * rng.uniform(0.5, 3))
        add(rng.choice(PRIMS), rng, loc, (s, s * rng.uniform(0.5, 1.5), s * rng.uniform(0.5, 1.5)),
            material(rng, emissive))
    # camera inside the scene, looking at a random point near the middle
    cam_data = bpy.data.cameras.new("c")
    cam_data.lens = rng.uniform(18, 50)
    cam = bpy.data.objects.new("c", cam_data)
    bpy.context.collection.objects.link(cam)
    r = rng.uniform(span / 3, span / 2.2)
    a = rng.uniform(-2.6, -0.5)
    cam.location = (r * math.cos(a), r * math.sin(a), rng.uniform(0.4, height - 0.4))
    target = bpy.data.objects.new("t", None)
    bpy.context.collection.objects.link(target)
    target.location = (rng.uniform(-1, 1), rng.uniform(-1, 1), rng.uniform(0.2, 1.2))
    track = cam.constraints.new("TRACK_TO")
    track.target, track.track_axis, track.up_axis = target, "TRACK_NEGATIVE_Z", "UP_Y"
    scene.camera = cam
    return layout


def render(scene, path, spp, seed):
    scene.cycles.samples = spp
    scene.cycles.seed = seed
    scene.render.filepath = str(path)
    bpy.ops.render.render(write_still=True)


def main():
    o = parse(sys.argv)
    for i in range(o["start"], o["start"] + o["count"]):
        folder = o["out"] / f"blender_{o['seed']:02d}_{i:05d}"
        if (folder / "reference.exr").exists():
            continue
        rng = random.Random(o["seed"] * 1_000_003 + i)
        scene = reset(o["size"])
        layout = build(scene, rng)
        folder.mkdir(parents=True, exist_ok=True)
        spps = [rng.choice(SPP_CHOICES) for _ in range(3)]
        for k, spp in enumerate(spps):
            render(scene, folder / f"noisy_{k}.exr", spp, rng.randrange(1 << 30))
        (folder / "scene.txt").write_text(f"layout {layout}\nspp {' '.join(map(str, spps))}\n"
                                          f"spp_ref {o['spp_ref']}\nseed {o['seed']} index {i}\n")
        render(scene, folder / ".reference.exr", o["spp_ref"], rng.randrange(1 << 30))
        (folder / ".reference.exr").rename(folder / "reference.exr")


main()
