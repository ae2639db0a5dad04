"""Blender Cycles animation sequences for `vision denoise --temporal`: noisy 1-spp frames with Denoising Data, Vector
(motion) and Position passes, a per-frame reference, and every frame's camera and object matrices.

    blender -b -noaudio --factory-startup -t 1 --python benchmarks/denoise/blender_seq.py -- OUTDIR \
        [--sequences orbit,hall,street] [--frames 16] [--only 1-16] [--what noisy,reference] [--ref-spp 1024] \
        [--spp 1] [--size 128x96]

Writes OUTDIR/SEQ/noisy_FFFF.exr (32-bit multilayer EXR as Blender writes it, view layer ``ViewLayer``:
Combined, Depth, Normal, Emit, Vector, Position, IndexOB and the Denoising Data passes), OUTDIR/SEQ/ref_FFFF.exr
(colour only, single-layer RGBA float), OUTDIR/SEQ/cameras.json (per frame, 0..N+1: the camera's world matrix,
lens, sensor and resolution, and every object's world matrix and pass index: what a reprojection from the
definition needs) and merges OUTDIR/manifest.json. Motion blur is off (Cycles writes Vector only without it).
``--sequences kitchen,courtyard`` renders the held-out sequences of ``blender_seq_heldout.py`` (never by
default). Seeds: noisy ``100000 (sequence + 1) + 10 frame + spp % 10``, reference the same with 9; no seed repeats.
"""
import json
import os
import sys
import time

import bpy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # Blender does not add the script's folder
from blender_eval import fresh_scene, write_settings  # noqa: E402
from blender_seq_heldout import HELDOUT  # noqa: E402
from blender_seq_scenes import SEQUENCES as TUNING  # noqa: E402

# the held-out sequences (blender_seq_heldout.py) come after the tuning ones, so their seeds differ from them
SEQUENCES = {**TUNING, **HELDOUT}


def parse(argv):
    import argparse

    p = argparse.ArgumentParser(prog="blender -b ... --python blender_seq.py --")
    p.add_argument("out", metavar="OUTDIR")
    p.add_argument("--sequences", type=lambda t: t.split(","), default=list(TUNING))
    p.add_argument("--frames", type=int, default=16)
    p.add_argument("--only", type=lambda t: tuple(int(v) for v in t.split("-")), default=None, metavar="A-B")
    p.add_argument("--what", type=lambda t: t.split(","), default=["noisy", "reference"])
    p.add_argument("--ref-spp", type=int, default=1024)
    p.add_argument("--spp", type=int, default=1)
    p.add_argument("--size", type=lambda t: tuple(int(v) for v in t.lower().split("x")), default=(128, 96),
                   metavar="WxH")
    opts = vars(p.parse_args(argv[argv.index("--") + 1:] if "--" in argv else []))
    unknown = set(opts["sequences"]) - set(SEQUENCES)
    if unknown:
        raise SystemExit(f"unknown sequence(s) {sorted(unknown)}; known: {', '.join(SEQUENCES)}")
    if opts["frames"] < 2:
        raise SystemExit("--frames must be at least 2")
    return opts


def passes(scene, reference):
    """blender_eval's file settings (multilayer with the Denoising Data passes, or colour only for a reference)
    plus the passes a reprojection needs: Vector, Position and IndexOB."""
    write_settings(scene, reference)
    layer = scene.view_layers[0]
    layer.use_pass_vector = layer.use_pass_position = layer.use_pass_object_index = not reference


def matrices(scene, cam, frames):
    """Camera and object world matrices at frames 0..N+1 (the Vector pass of frame f looks at f - 1 and f + 1)."""
    out = []
    for f in range(0, frames + 2):
        scene.frame_set(f)
        out.append({"frame": f, "camera": [list(r) for r in cam.matrix_world],
                    "lens": cam.data.lens, "sensor_width": cam.data.sensor_width, "sensor_fit": cam.data.sensor_fit,
                    "objects": {o.name: {"matrix": [list(r) for r in o.matrix_world], "pass_index": o.pass_index}
                                for o in scene.objects if o.type == "MESH"}})
    return out


def update_manifest(out, entries):
    path = os.path.join(out, "manifest.json")
    data = {"renderer": f"Blender {bpy.app.version_string} Cycles CPU", "frames": []}
    if os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
    frames = {(e["sequence"], e["frame"]): e for e in data["frames"]}
    for e in entries:
        frames[(e["sequence"], e["frame"])] = {**frames.get((e["sequence"], e["frame"]), {}), **e}
    data["frames"] = [frames[k] for k in sorted(frames)]
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=1)
    os.replace(path + ".tmp", path)


def main():
    opts = parse(sys.argv)
    out = os.path.abspath(opts["out"])
    names = list(SEQUENCES)
    for name in opts["sequences"]:
        index = names.index(name)
        scene = fresh_scene(opts["size"])
        scene.render.use_motion_blur = False
        scene.frame_start, scene.frame_end = 1, opts["frames"]
        build, description = SEQUENCES[name]
        cam = build(scene, opts["frames"])
        for i, obj in enumerate(o for o in scene.objects if o.type == "MESH"):
            obj.pass_index = i + 1
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "cameras.json"), "w") as f:
            json.dump({"sequence": name, "description": description, "size": list(opts["size"]),
                       "frames": matrices(scene, cam, opts["frames"])}, f, indent=1)
        lo, hi = opts["only"] or (1, opts["frames"])
        for frame in range(max(1, lo), min(opts["frames"], hi) + 1):
            scene.frame_set(frame)
            entry = {"sequence": name, "frame": frame, "size": list(opts["size"])}
            for what in ("noisy", "reference"):
                if what not in opts["what"]:
                    continue
                ref = what == "reference"
                spp = opts["ref_spp"] if ref else opts["spp"]
                seed = 100000 * (index + 1) + 10 * frame + (9 if ref else spp % 10)
                passes(scene, ref)
                scene.cycles.samples = spp
                scene.cycles.seed = seed
                file = f"{'ref' if ref else 'noisy'}_{frame:04d}.exr"
                scene.render.filepath = os.path.join(folder, file)
                t0 = time.perf_counter()
                bpy.ops.render.render(write_still=True)
                dt = time.perf_counter() - t0
                print(f"{what.upper()} {name}/{file} seed {seed} {dt:.1f} s", flush=True)
                key = "reference" if ref else "noisy"
                entry.update({key: f"{name}/{file}", f"{key}_spp": spp, f"{key}_seed": seed,
                              f"{key}_seconds": round(dt, 1)})
            update_manifest(out, [entry])


if __name__ == "__main__":
    main()
