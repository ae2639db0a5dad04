"""Mitsuba 3 evaluation set for `vision denoise`: 4 hand-built scenes x 3 views, 1 and 4 spp + references.

    python benchmarks/denoise/mitsuba_eval.py OUTDIR [--scenes hidden,indirect,emitter,glossy] [--views 0,1,2]
        [--what noisy,reference] [--ref-spp 4096] [--size 128x96] [--time SPP] [--variant llvm_ad_rgb]

Frames are written the way tests/data/mitsuba/make.py writes them: the ``aov`` integrator
(``albedo:albedo,nn:sh_normal,dd:depth,pp:position``) around a nested ``path`` integrator (max_depth 8) named
``img``, one EXR per frame as the film writes it; the directly visible emission (Mitsuba has no emission AOV:
a path tracer stopped at depth 1, 64 spp) in a separate file per frame, ``<frame stem>_emission.exr``, given to
``vision denoise --emission '{dir}/{stem}_emission.exr'``; the
reference is the same path integrator at ``--ref-spp`` samples (rendered in passes of 256 and averaged, so
the LLVM wavefront stays small), ``R G B``. OUTDIR/manifest.json lists every frame (see README.md).
All rendering on one thread (Dr.Jit's thread pool set to 1).
"""
import argparse
import os
import sys
import time

import drjit as dr
import mitsuba as mi
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from evalset import log_reference, seed, update_manifest  # noqa: E402

EMISSION_SEED = 7
PASS_SPP = 256
AOVS = "albedo:albedo,nn:sh_normal,dd:depth,pp:position"
MAX_DEPTH = 8


def parse():
    from mitsuba_eval_scenes import SCENES
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--scenes", default=",".join(SCENES))
    p.add_argument("--views", default="0,1,2")
    p.add_argument("--what", default="noisy,reference")
    p.add_argument("--spp", default="1,4")
    p.add_argument("--ref-spp", type=int, default=4096)
    p.add_argument("--size", default="128x96")
    p.add_argument("--time", type=int, default=0, help="render each view once at this many spp and print seconds")
    p.add_argument("--variant", default="llvm_ad_rgb")
    a = p.parse_args()
    a.scenes = a.scenes.split(",")
    unknown = set(a.scenes) - set(SCENES)
    if unknown:
        p.error(f"unknown scene(s) {sorted(unknown)}; known: {', '.join(SCENES)}")
    a.views = [int(v) for v in a.views.split(",")]
    a.what = a.what.split(",")
    a.spp = [int(v) for v in a.spp.split(",")]
    a.size = tuple(int(v) for v in a.size.lower().split("x"))
    return a


def sensor(origin, target, fov, size):
    return {"type": "perspective", "fov": fov, "fov_axis": "x",
            "to_world": mi.ScalarTransform4f().look_at(origin=list(origin), target=list(target), up=[0, 1, 0]),
            "film": {"type": "hdrfilm", "width": size[0], "height": size[1], "rfilter": {"type": "box"}},
            "sampler": {"type": "independent"}}


def load(build, view, size):
    d = {"type": "scene", **build(), "sensor": sensor(*view, size),
         "integrator": {"type": "aov", "aovs": AOVS, "img": {"type": "path", "max_depth": MAX_DEPTH}}}
    # the order of shapes (hence of area emitters, hence which light a random number picks) varies from run to
    # run in Mitsuba 3.9.1, parallel loading or not: scenes with several emitters rebuild statistically, not
    # bit for bit (the emitter scene; README.md)
    return mi.load_dict(d)


def reference(scene, spp, base_seed):
    """Mean of spp / PASS_SPP path-traced passes with seeds base_seed * 1000 + k (equal weights: same spp)."""
    path = mi.load_dict({"type": "path", "max_depth": MAX_DEPTH})
    passes = max(1, spp // PASS_SPP)
    total = None
    for k in range(passes):
        img = np.array(mi.render(scene, integrator=path, spp=min(spp, PASS_SPP), seed=base_seed * 1000 + k),
                       dtype=np.float64)
        total = img if total is None else total + img
    return (total / passes).astype(np.float32)


def write(bitmap, path):
    """Bitmap.write on a one-thread Dr.Jit pool never returns (Mitsuba 3.9.1, LLVM): give it two threads
    for the write only; rendering stays on one."""
    dr.set_thread_count(2)
    try:
        bitmap.write(path)
    finally:
        dr.set_thread_count(1)




def main():
    a = parse()
    mi.set_variant(a.variant)
    dr.set_thread_count(1)  # after the variant: set before it, the LLVM backend hung here
    from mitsuba_eval_scenes import SCENES
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    names = list(SCENES)
    for v in a.views:
        for name in a.scenes:
            index = names.index(name)
            build, views = SCENES[name]
            scene = load(build, views[v], a.size)
            stem = f"{name}_v{v}"
            if a.time:
                path = mi.load_dict({"type": "path", "max_depth": MAX_DEPTH})
                mi.render(scene, integrator=path, spp=1, seed=1)  # JIT compile outside the timing
                t0 = time.perf_counter()
                img = mi.render(scene, integrator=path, spp=a.time, seed=1)
                dt = time.perf_counter() - t0
                os.makedirs(f"{out}/timing", exist_ok=True)
                write(mi.Bitmap(img), f"{out}/timing/{stem}_{a.time}spp.exr")
                print(f"TIME {stem} {a.time} spp {dt:.2f} s -> {a.ref_spp} spp ~{dt * a.ref_spp / a.time:.0f} s",
                      flush=True)
                continue
            ref = f"{stem}_ref{a.ref_spp}.exr"
            entries = []
            if "noisy" in a.what:
                img = mi.render(scene, integrator=mi.load_dict({"type": "path", "max_depth": 1}), spp=64,
                                seed=seed(index, v, 0) * 10 + EMISSION_SEED)
                for spp in a.spp:
                    noisy = f"{stem}_{spp}spp.exr"
                    # a copy per frame, so `vision denoise --emission '{dir}/{stem}_emission.exr'` pairs them
                    emission = f"{stem}_{spp}spp_emission.exr"
                    write(mi.Bitmap(img), f"{out}/{emission}")
                    s = seed(index, v, spp)
                    t0 = time.perf_counter()
                    mi.render(scene, spp=spp, seed=s)
                    write(scene.sensors()[0].film().bitmap(), f"{out}/{noisy}")
                    print(f"NOISY {noisy} seed {s} {time.perf_counter() - t0:.2f} s", flush=True)
                    entries.append({"scene": name, "view": v, "spp": spp, "noisy": noisy, "reference": ref,
                                    "emission": emission, "seed": s, "reference_spp": a.ref_spp,
                                    "reference_seed": seed(index, v, 0), "size": list(a.size)})
            if "reference" in a.what:
                t0 = time.perf_counter()
                img = reference(scene, a.ref_spp, seed(index, v, 0))
                dt = time.perf_counter() - t0
                write(mi.Bitmap(img), f"{out}/{ref}")
                print(f"REFERENCE {ref} seed {seed(index, v, 0)} {dt:.1f} s", flush=True)
                log_reference(out, ref, a.ref_spp, a.size, dt)
            if entries:
                update_manifest(out, entries, f"Mitsuba {mi.__version__}")


if __name__ == "__main__":
    main()
