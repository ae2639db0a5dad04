"""Randomised Blender Cycles *training* scenes for the denoiser, deterministic from a seed.

    blender -b -noaudio --factory-startup -t 1 --python benchmarks/denoise/blender_train.py -- OUTDIR \
        [--seed 0] [--count 4] [--first 0] [--spp 1,2,4,8,16] [--ref-spp 256] [--size 128x128]

Scene i of seed S draws everything from random.Random(S * 100003 + i): a room (random size, 0-2 window openings
in random walls, pillars, shelves) or a yard (random ground texture, a pergola or arches, scattered objects), with
random lights (sun + sky, a visible ceiling panel, a lamp hidden behind a random object, small bright bulbs,
emissive strips, a dim night sky) and random materials (diffuse, glossy plastic, metal, glass) painted with
procedural textures at random kinds and log-uniform scales (0.3 to 60 per metre). Noisy frames at each of
``--spp`` and one reference at ``--ref-spp`` per scene, multilayer EXRs like blender_eval.py's, listed in
OUTDIR/manifest.json (same format, ``scene`` = ``train_S_i``).

Different by construction from the evaluation scenes of blender_eval_scenes.py (fixed hand-built layouts:
a window room with a table, a yard with a fence, a studio, a partitioned room), so evaluation stays unseen.
"""
import math
import os
import random
import sys

import bpy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blender_eval import look, render, setup_render, update_manifest, write_settings  # noqa: E402
from blender_kit import box, cone, cylinder, light, material, plane, sky, sphere, sun_direction, torus  # noqa: E402

TEXTURES = ("checker", "noise", "voronoi", "wave", "brick", "magic")


def parse(argv):
    args = argv[argv.index("--") + 1:] if "--" in argv else []
    o = {"out": None, "seed": 0, "count": 4, "first": 0, "spp": [1, 2, 4, 8, 16], "ref_spp": 256, "size": (128, 128)}
    it = iter(args)
    for a in it:
        if a in ("--seed", "--count", "--first", "--ref-spp"):
            o[a[2:].replace("-", "_")] = int(next(it))
        elif a == "--spp":
            o["spp"] = [int(v) for v in next(it).split(",")]
        elif a == "--size":
            o["size"] = tuple(int(v) for v in next(it).lower().split("x"))
        elif o["out"] is None:
            o["out"] = a
        else:
            raise SystemExit(f"unknown argument {a!r}")
    if o["out"] is None:
        raise SystemExit("usage: blender -b ... --python blender_train.py -- OUTDIR [options]")
    return o


def colour(r, lo=0.05, hi=0.9):
    h, s, v = r.random(), r.uniform(0.0, 0.9), r.uniform(lo, hi)
    i, f = int(h * 6) % 6, h * 6 - int(h * 6)
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    return [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)][i]


def random_material(r, name, glass_p=0.05):
    """Diffuse 45 %, glossy plastic 30 %, metal 20 %, glass 5 %; a texture on 60 % of the non-glass ones."""
    u = r.random()
    tex = None
    if u >= glass_p and r.random() < 0.6:
        tex = (r.choice(TEXTURES), math.exp(r.uniform(math.log(0.3), math.log(60.0))), colour(r), r.uniform(1, 8))
    if u < glass_p:
        return material(name, (1, 1, 1), rough=r.choice([0.0, 0.0, 0.1]), transmission=1.0, ior=r.uniform(1.3, 1.7))
    if u < glass_p + 0.2:
        return material(name, colour(r, 0.5, 1.0), rough=r.choice([0.0, 0.05, 0.15, 0.3, 0.5]), metal=1.0, tex=tex)
    if u < glass_p + 0.5:
        return material(name, colour(r), rough=r.uniform(0.02, 0.4), specular=r.uniform(0.4, 0.9), tex=tex)
    return material(name, colour(r), rough=r.uniform(0.6, 1.0), tex=tex)


def random_object(r, x, y, z, mat, scale):
    kind = r.choice(["box", "sphere", "cylinder", "cone", "torus"])
    s = scale * r.uniform(0.5, 1.5)
    if kind == "box":
        w, d, h = (s * r.uniform(0.4, 1.2) for _ in range(3))
        box((x - w / 2, y - d / 2, z), (x + w / 2, y + d / 2, z + h), mat)
        return z + h
    if kind == "sphere":
        sphere((x, y, z + s / 2), s / 2, mat)
        return z + s
    if kind == "cylinder":
        h = s * r.uniform(0.5, 2.0)
        cylinder((x, y, z + h / 2), s / 3, h, mat)
        return z + h
    if kind == "cone":
        h = s * r.uniform(0.8, 2.0)
        cone((x, y, z + h / 2), s / 2, r.choice([0.0, s / 6]), h, mat)
        return z + h
    torus((x, y, z + s / 5), s / 2, s / 5, mat, rotation=(r.uniform(0, 0.4), 0, r.uniform(0, 3)))
    return z + 0.4 * s


def emitter(r, name, strength):
    return material(name, (1, 1, 1), emit=strength, emit_color=colour(r, 0.8, 1.0))


def room(r):
    """A box room with openings punched into random walls, pillars and wall shelves; returns (camera, target)."""
    W, D, H = r.uniform(3.5, 9.0), r.uniform(3.5, 8.0), r.uniform(2.4, 4.0)
    w, d, t = W / 2, D / 2, 0.15
    wall, floor, ceil = random_material(r, "Wall", 0), random_material(r, "Floor", 0), random_material(r, "Ceil", 0)
    box((-w - t, -d - t, -t), (w + t, d + t, 0), floor)
    box((-w - t, -d - t, H), (w + t, d + t, H + t), ceil)
    openings = r.sample(["N", "E", "W", "S"], r.choice([0, 1, 1, 2]))
    for side in ("N", "E", "W", "S"):
        along = W if side in "NS" else D
        lo, hi = -along / 2, along / 2
        def piece(a0, a1, z0, z1, side=side):  # noqa: E306
            if side == "N":
                box((a0, d, z0), (a1, d + t, z1), wall)
            elif side == "S":
                box((a0, -d - t, z0), (a1, -d, z1), wall)
            elif side == "E":
                box((w, a0, z0), (w + t, a1, z1), wall)
            else:
                box((-w - t, a0, z0), (-w, a1, z1), wall)
        if side not in openings:
            piece(lo - t, hi + t, 0, H)
            continue
        c, half = r.uniform(lo + 1.0, hi - 1.0), r.uniform(0.3, min(1.5, along / 4))
        z0, z1 = r.choice([0.0, r.uniform(0.5, 1.0)]), r.uniform(1.6, H - 0.2)
        piece(lo - t, c - half, 0, H)
        piece(c + half, hi + t, 0, H)
        if z0 > 0:
            piece(c - half, c + half, 0, z0)
        piece(c - half, c + half, z1, H)
    if openings:
        elevation, azimuth = r.uniform(8, 70), r.uniform(0, 360)
        sky(bpy.context.scene, elevation=elevation, azimuth=azimuth, strength=r.uniform(0.1, 1.0))
        if r.random() < 0.7:
            light("SUN", (0, 0, 10), r.uniform(1, 6), sun_direction(elevation, azimuth), angle=r.uniform(0.3, 3))
        plane((0, 0, -0.02), 60, random_material(r, "Outside", 0))
    else:
        sky(bpy.context.scene, color=(0, 0, 0), strength=0.0)
    lights = r.sample(["panel", "hidden", "bulbs", "strip", "point"], r.choice([1, 1, 2, 3]))
    if not openings and not lights:
        lights = ["panel"]
    for k in range(r.randint(0, 3)):       # pillars
        x, y = r.uniform(-w + 0.5, w - 0.5), r.uniform(-d + 0.5, d - 0.5)
        cylinder((x, y, H / 2), r.uniform(0.1, 0.3), H, random_material(r, f"Pillar{k}"))
    objects = []
    for k in range(r.randint(4, 10)):
        x, y = r.uniform(-w + 0.4, w - 0.4), r.uniform(-d + 0.4, d - 0.4)
        top = random_object(r, x, y, 0.0, random_material(r, f"Obj{k}"), r.uniform(0.3, 1.0))
        objects.append((x, y, top))
        if r.random() < 0.3:               # something stacked on it
            random_object(r, x, y, top, random_material(r, f"Top{k}"), r.uniform(0.15, 0.35))
    if r.random() < 0.5:                   # a shelf along a wall
        z = r.uniform(0.8, 1.8)
        box((-w, d - 0.3, z), (-w + r.uniform(1, W - 1), d, z + 0.04), random_material(r, "Shelf"))
    if "panel" in lights:
        x, y = r.uniform(-w + 1, w - 1), r.uniform(-d + 1, d - 1)
        s = r.uniform(0.2, 0.8)
        box((x - s, y - s / 2, H - 0.02), (x + s, y + s / 2, H), emitter(r, "Panel", r.uniform(3, 20)))
    if "hidden" in lights and objects:
        x, y, top = r.choice(objects)
        light("AREA", (x, y, top + 0.05), r.uniform(30, 300), (0, 0, 1), size=r.uniform(0.1, 0.4))
    if "bulbs" in lights:
        for k in range(r.randint(1, 3)):
            sphere((r.uniform(-w + 0.3, w - 0.3), r.uniform(-d + 0.3, d - 0.3), r.uniform(0.3, H - 0.3)),
                   r.uniform(0.02, 0.08), emitter(r, f"Bulb{k}", r.uniform(20, 200)))
    if "strip" in lights:
        z = r.uniform(0.2, H - 0.2)
        box((-w + 0.3, -d + 0.02, z), (w - 0.3, -d + 0.06, z + 0.04), emitter(r, "Strip", r.uniform(5, 40)))
    if "point" in lights:
        light("POINT", (r.uniform(-w, w) * 0.8, r.uniform(-d, d) * 0.8, H - 0.3), r.uniform(50, 400),
              size=r.uniform(0.02, 0.2))
    cam = (r.uniform(-w + 0.3, w - 0.3), r.uniform(-d + 0.3, d - 0.3), r.uniform(0.4, H - 0.3))
    target = r.choice(objects) if objects else (0, 0, 0.5)
    return cam, (target[0], target[1], r.uniform(0, target[2] + 0.5))


def yard(r):
    """Open ground with a pergola or arches and scattered objects, by day (sun + sky) or night (bulbs)."""
    night = r.random() < 0.25
    elevation, azimuth = r.uniform(5, 80), r.uniform(0, 360)
    if night:
        sky(bpy.context.scene, color=colour(r, 0.01, 0.05), strength=r.uniform(0.2, 1.0))
    else:
        sky(bpy.context.scene, elevation=elevation, azimuth=azimuth, strength=r.uniform(0.2, 1.0))
        light("SUN", (0, 0, 10), r.uniform(1, 6), sun_direction(elevation, azimuth), angle=r.uniform(0.3, 3))
    plane((0, 0, 0), 100, random_material(r, "Ground", 0))
    beam = random_material(r, "Beam")
    if r.random() < 0.5:                   # pergola: posts and a grid of beams casting stripes
        L = r.uniform(2, 5)
        for sx in (-1, 1):
            for sy in (-1, 1):
                box((sx * L / 2 - 0.08, sy * L / 2 - 0.08, 0), (sx * L / 2 + 0.08, sy * L / 2 + 0.08, 2.4), beam)
        for k in range(r.randint(4, 10)):
            y = -L / 2 + L * k / 9
            box((-L / 2 - 0.2, y - 0.04, 2.4), (L / 2 + 0.2, y + 0.04, 2.55), beam)
    else:                                   # a row of arches
        for k in range(r.randint(2, 4)):
            x = -3 + 2.2 * k
            box((x - 0.2, 2.0, 0), (x, 2.4, 2.0), beam)
            box((x + 1.2, 2.0, 0), (x + 1.4, 2.4, 2.0), beam)
            torus((x + 0.7, 2.2, 2.0), 0.6, 0.12, beam, rotation=(math.pi / 2, 0, 0))
    objects = []
    for k in range(r.randint(4, 12)):
        x, y = r.uniform(-5, 5), r.uniform(-4, 5)
        objects.append((x, y, random_object(r, x, y, 0.0, random_material(r, f"Obj{k}"), r.uniform(0.3, 1.5))))
    if night or r.random() < 0.3:
        for k in range(r.randint(1, 4)):
            x, y = r.uniform(-5, 5), r.uniform(-4, 5)
            cylinder((x, y, 1.0), 0.03, 2.0, random_material(r, f"Post{k}"))
            sphere((x, y, 2.08), r.uniform(0.05, 0.12), emitter(r, f"Lamp{k}", r.uniform(20, 150)))
    a = r.uniform(0, 2 * math.pi)
    dist = r.uniform(3, 9)
    cam = (dist * math.cos(a), dist * math.sin(a), r.uniform(0.3, 3.5))
    x, y, top = r.choice(objects)
    return cam, (x, y, r.uniform(0, top))


def main():
    o = parse(sys.argv)
    out = os.path.abspath(o["out"])
    os.makedirs(out, exist_ok=True)
    for i in range(o["first"], o["first"] + o["count"]):
        r = random.Random(o["seed"] * 100003 + i)
        bpy.ops.wm.read_factory_settings(use_empty=True)
        scene = bpy.context.scene
        setup_render(scene, o["size"])
        kind = r.choice(["room", "room", "yard"])
        origin, target = (room if kind == "room" else yard)(r)
        cam = bpy.data.objects.new("Camera", bpy.data.cameras.new("Camera"))
        scene.collection.objects.link(cam)
        scene.camera = cam
        look(cam, origin, target, r.uniform(16, 40))
        name = f"train_{o['seed']}_{i}"
        ref = f"{name}_ref{o['ref_spp']}.exr"
        write_settings(scene, reference=False)
        entries = []
        for spp in o["spp"]:
            s = r.randrange(1 << 30)
            noisy = f"{name}_{spp}spp.exr"
            dt = render(scene, f"{out}/{noisy}", spp, s)
            print(f"NOISY {noisy} {kind} seed {s} {dt:.2f} s", flush=True)
            entries.append({"scene": name, "view": 0, "spp": spp, "noisy": noisy, "reference": ref, "seed": s,
                            "reference_spp": o["ref_spp"], "kind": kind, "size": list(o["size"])})
        write_settings(scene, reference=True)
        s = r.randrange(1 << 30)
        dt = render(scene, f"{out}/{ref}", o["ref_spp"], s)
        print(f"REFERENCE {ref} {kind} seed {s} {dt:.1f} s", flush=True)
        for e in entries:
            e["reference_seed"] = s
        update_manifest(out, entries)


if __name__ == "__main__":
    main()
