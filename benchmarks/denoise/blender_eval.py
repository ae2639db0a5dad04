"""Blender Cycles evaluation sets for `vision denoise`: 4 hand-built scenes x 3 views, 1 and 4 spp + references
(``--set eval``, the default), or the sample-count set of 8 scenes x 1 view (``--set spp``,
``blender_spp_scenes.py``), rendered at the ``--spp`` given (1, 4, 16, 64, 256 by default for it).

    blender -b -noaudio --factory-startup -t 1 --python benchmarks/denoise/blender_eval.py -- OUTDIR \
        [--set eval|spp] [--scenes interior,yard,studio,bounce] [--views 0,1,2] [--what noisy,reference] \
        [--spp 1,4] [--ref-spp 4096] [--size 128x96] [--time SPP] [--adaptive THRESHOLD] \
        [--film blender]

Every frame is a 32-bit multilayer EXR exactly as Blender writes it (view layer ``ViewLayer``: Combined RGBA,
Depth, Normal, Emit and the Denoising Data passes); references are the same view, colour only (single-layer
RGBA float), like tests/data/blender/cycles_reference.exr. OUTDIR/manifest.json lists every frame (see
README.md beside this file). ``--time SPP`` renders each selected view once at SPP samples into OUTDIR/timing
and prints seconds, to extrapolate the cost of a reference before committing to it. ``--adaptive THRESHOLD``
renders the noisy frames as Blender does by default: adaptive sampling with that noise threshold (Blender's default
is 0.01) and automatic minimum samples, ``--spp`` the most samples a pixel may take; each frame then also holds
Cycles' ``Debug Sample Count`` pass (the share of the most samples each pixel took), and its seed is the non-adaptive
frame's plus :data:`ADAPTIVE_SEED` (no seed is shared). Adaptive sampling stops each pixel early and leaves its expectation as it was, so the references are the
ones without it. ``--film blender`` renders noisy frames and references with Blender's default film instead of the
sets' (a Blackman-Harris pixel filter 1.5 pixels wide, indirect light clamped at 10): those change the image
itself, so such frames need references rendered with the same option, in their own OUTDIR (their seeds are the box
film's plus :data:`FILM_SEED`).

The scenes are built here from primitives and procedural textures in world coordinates; none of them is a
layout of ``vision/data/scenes.py`` (closed box rooms with objects scattered on the floor, open ground with
objects, rooms with glowing spheres), so nothing here can leak into training through the generator.
"""
import os
import sys
import time

import bpy
from mathutils import Vector

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # Blender does not add the script's folder
from evalset import SET_OFFSET, log_reference, seed, update_manifest  # noqa: E402

DEFAULT_SPP = {"eval": [1, 4], "spp": [1, 4, 16, 64, 256]}
FILMS = ("box", "blender")  # the sets' own film (see setup_render), Blender's default one
# added to the seeds of adaptive frames and of Blender-film frames and references (both: 750), above every
# 10 view + digit, so that no two frames of any of these sets share one
ADAPTIVE_SEED, FILM_SEED = 500, 250


def scene_set(name):
    """The SCENES table of a set: ``eval`` (blender_eval_scenes.py) or ``spp`` (blender_spp_scenes.py)."""
    if name == "eval":
        from blender_eval_scenes import SCENES
    elif name == "spp":
        from blender_spp_scenes import SCENES
    else:
        raise SystemExit(f"unknown --set {name!r}; known: eval, spp")
    return SCENES


def parse(argv):
    args = argv[argv.index("--") + 1:] if "--" in argv else []
    opts = {"out": None, "set": "eval", "scenes": None, "views": None, "what": ["noisy", "reference"],
            "ref_spp": 4096, "size": (128, 96), "time": 0, "spp": None, "adaptive": None,
            "film": "box"}
    it = iter(args)
    for a in it:
        if a == "--set":
            opts["set"] = next(it)
        elif a == "--scenes":
            opts["scenes"] = next(it).split(",")
        elif a == "--views":
            opts["views"] = [int(v) for v in next(it).split(",")]
        elif a == "--what":
            opts["what"] = next(it).split(",")
        elif a == "--ref-spp":
            opts["ref_spp"] = int(next(it))
        elif a == "--spp":
            opts["spp"] = [int(v) for v in next(it).split(",")]
        elif a == "--size":
            w, h = next(it).lower().split("x")
            opts["size"] = (int(w), int(h))
        elif a == "--time":
            opts["time"] = int(next(it))
        elif a == "--film":
            opts["film"] = next(it)
            if opts["film"] not in FILMS:
                raise SystemExit(f"--film: unknown film {opts['film']!r}; known: {', '.join(FILMS)}")
        elif a == "--adaptive":
            value = next(it)
            try:
                opts["adaptive"] = float(value)
            except ValueError:
                raise SystemExit(f"--adaptive: {value!r} is not a number (a noise threshold, e.g. 0.01)") from None
            if not 0 < opts["adaptive"] < 1:
                raise SystemExit(f"--adaptive: {value} must be a noise threshold in (0, 1), e.g. 0.01")
        elif opts["out"] is None:
            opts["out"] = a
        else:
            raise SystemExit(f"unknown argument {a!r}")
    if opts["out"] is None:
        raise SystemExit("usage: blender -b ... --python blender_eval.py -- OUTDIR [options]")
    scenes = scene_set(opts["set"])
    if opts["scenes"] is None:
        opts["scenes"] = list(scenes)
    unknown = set(opts["scenes"]) - set(scenes)
    if unknown:
        raise SystemExit(f"unknown scene(s) {sorted(unknown)}; known: {', '.join(scenes)}")
    if opts["spp"] is None:
        opts["spp"] = DEFAULT_SPP[opts["set"]]
    if opts["views"] is not None:   # default: every view of each scene (3 in the eval set, 1 in the spp set)
        short = [n for n in opts["scenes"] if max(opts["views"]) >= len(scenes[n][1])]
        if short:
            raise SystemExit(f"--views {max(opts['views'])}: scene(s) {', '.join(short)} have fewer views")
    try:
        for spp in opts["spp"]:
            seed(0, 0, spp)     # refuses a sample count without a seed digit of its own
    except ValueError as err:
        raise SystemExit(f"--spp: {err}") from None
    return opts, scenes


def setup_render(scene, size):
    """Cycles CPU on one thread, no adaptive sampling, no clamping, box pixel filter, multilayer float EXR."""
    scene.render.engine = "CYCLES"
    c = scene.cycles
    c.device = "CPU"
    c.use_adaptive_sampling = False
    c.use_denoising = False           # this Debian build has no OIDN; the denoiser under test does the work
    c.use_animated_seed = False
    # fireflies are part of the test: Blender's default indirect clamp of 10 would hide them
    c.sample_clamp_direct = 0.0
    c.sample_clamp_indirect = 0.0
    # a box of one pixel, importance-sampled: no splatting, so pixels' noise stays independent (OIDN #29)
    # fewer bounces than Blender's defaults (12 total, 4 diffuse): the references must fit one thread, and
    # the 4th diffuse bounce adds little light in these scenes
    c.max_bounces, c.diffuse_bounces, c.glossy_bounces, c.transmission_bounces = 8, 3, 4, 8
    c.pixel_filter_type = "BOX"
    c.filter_width = 1.0
    scene.render.threads_mode = "FIXED"
    scene.render.threads = 1
    scene.render.resolution_x, scene.render.resolution_y = size
    scene.render.resolution_percentage = 100
    scene.render.film_transparent = False
    scene.render.use_compositing = False
    scene.render.use_sequencer = False
    layer = scene.view_layers[0]
    layer.name = "ViewLayer"
    layer.cycles.denoising_store_passes = True
    layer.use_pass_z = True
    layer.use_pass_normal = True
    layer.use_pass_emit = True


def fresh_scene(size):
    """An empty scene (factory settings) set up for rendering at ``size``: what every scene of these scripts starts
    from."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    setup_render(scene, size)
    return scene


def write_settings(scene, reference):
    s = scene.render.image_settings
    s.file_format = "OPEN_EXR" if reference else "OPEN_EXR_MULTILAYER"
    s.color_mode = "RGBA"
    s.color_depth = "32"
    s.exr_codec = "ZIP"
    layer = scene.view_layers[0]
    # a reference is only the colour to score against; its guides would be noise-free and tempt misuse
    layer.cycles.denoising_store_passes = not reference
    layer.use_pass_z = layer.use_pass_normal = layer.use_pass_emit = not reference


def blender_film(scene):
    """Blender's default film and clamping (3.4, factory settings): a Blackman-Harris pixel filter 1.5 pixels wide
    and indirect light clamped at 10, in place of :func:`setup_render`'s box filter and no clamping."""
    c = scene.cycles
    c.pixel_filter_type = "BLACKMAN_HARRIS"
    c.filter_width = 1.5
    c.sample_clamp_indirect = 10.0


def adaptive(scene, threshold):
    """Adaptive sampling with noise ``threshold`` and automatic minimum samples, and Cycles' per-pixel sample count
    pass; ``None``: off (the set's own setting, :func:`setup_render`)."""
    c = scene.cycles
    c.use_adaptive_sampling = threshold is not None
    if threshold is not None:
        c.adaptive_threshold = threshold
        c.adaptive_min_samples = 0
    scene.view_layers[0].cycles.pass_debug_sample_count = threshold is not None


def look(camera, origin, target, lens):
    camera.location = Vector(origin)
    camera.rotation_mode = "QUATERNION"
    camera.rotation_quaternion = (Vector(target) - Vector(origin)).to_track_quat("-Z", "Y")
    camera.data.lens = lens
    camera.data.sensor_width = 36.0


def render(scene, path, spp, seed_value):
    scene.cycles.samples = spp
    scene.cycles.seed = seed_value
    scene.render.filepath = path
    t0 = time.perf_counter()
    bpy.ops.render.render(write_still=True)
    return time.perf_counter() - t0




def main():
    opts, scenes = parse(sys.argv)
    out = os.path.abspath(opts["out"])
    os.makedirs(out, exist_ok=True)
    names = list(scenes)
    for name in opts["scenes"]:
        index = names.index(name) + SET_OFFSET[opts["set"]]   # seeds of the sets never meet
        scene = fresh_scene(opts["size"])
        offset = 0
        if opts["film"] == "blender":
            blender_film(scene)
            offset = FILM_SEED
        build, views, description = scenes[name]
        build(scene)
        cam = bpy.data.objects.new("Camera", bpy.data.cameras.new("Camera"))
        scene.collection.objects.link(cam)
        scene.camera = cam
        for v in (opts["views"] if opts["views"] is not None else range(len(views))):
            origin, target, lens = views[v]
            look(cam, origin, target, lens)
            stem = f"{name}_v{v}"
            if opts["time"]:
                write_settings(scene, reference=True)
                dt = render(scene, f"{out}/timing/{stem}_{opts['time']}spp.exr", opts["time"], 1)
                print(f"TIME {stem} {opts['time']} spp {dt:.2f} s -> {opts['ref_spp']} spp "
                      f"~{dt * opts['ref_spp'] / opts['time']:.0f} s", flush=True)
                continue
            ref = f"{stem}_ref{opts['ref_spp']}.exr"
            entries = []
            if "noisy" in opts["what"]:
                write_settings(scene, reference=False)
                adaptive(scene, opts["adaptive"])
                for spp in opts["spp"]:
                    noisy = f"{stem}_{spp}spp{'' if opts['adaptive'] is None else '_adaptive'}.exr"
                    s = seed(index, v, spp) + offset + (0 if opts["adaptive"] is None else ADAPTIVE_SEED)
                    dt = render(scene, f"{out}/{noisy}", spp, s)
                    print(f"NOISY {noisy} seed {s} {dt:.2f} s", flush=True)
                    entries.append({"scene": name, "view": v, "spp": spp, "noisy": noisy, "reference": ref,
                                    "seed": s, "reference_spp": opts["ref_spp"],
                                    "reference_seed": seed(index, v, 0) + offset, "size": list(opts["size"])})
                    if opts["adaptive"] is not None:
                        entries[-1]["adaptive_threshold"] = opts["adaptive"]
                    if opts["film"] != "box":
                        entries[-1]["film"] = opts["film"]
                adaptive(scene, None)
            if "reference" in opts["what"]:
                write_settings(scene, reference=True)
                s = seed(index, v, 0) + offset
                dt = render(scene, f"{out}/{ref}", opts["ref_spp"], s)
                print(f"REFERENCE {ref} seed {s} {dt:.1f} s", flush=True)
                log_reference(out, ref, opts["ref_spp"], opts["size"], dt)
            if entries:
                update_manifest(out, entries, f"Blender {bpy.app.version_string} Cycles CPU")


if __name__ == "__main__":
    main()
