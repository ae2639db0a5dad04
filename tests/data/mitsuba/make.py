"""Render the real Mitsuba 3 AOV fixture of tests/test_render_files.py (see README.md beside this file).

python tests/data/mitsuba/make.py OUTDIR
"""
import sys

import mitsuba as mi

out = sys.argv[1] if len(sys.argv) > 1 else "."
mi.set_variant("scalar_rgb")
scene = mi.cornell_box()
scene["sensor"]["film"].update(width=48, height=36, rfilter={"type": "box"})
# what Mitsuba's documentation shows for denoiser inputs: the aov integrator around a path tracer
scene["integrator"] = {"type": "aov", "aovs": "albedo:albedo,nn:sh_normal,dd:depth,pp:position",
                       "img": {"type": "path", "max_depth": 8}}
scene = mi.load_dict(scene)
mi.render(scene, spp=1, seed=3)
scene.sensors()[0].film().bitmap().write(f"{out}/mitsuba_aov.exr")
image = mi.render(scene, integrator=mi.load_dict({"type": "path", "max_depth": 8}), spp=4096, seed=4)
mi.Bitmap(image).write(f"{out}/mitsuba_reference.exr")
# Mitsuba's aov integrator has no emission AOV: directly visible emission is a path tracer stopped at depth 1
# (what `vision render-scenes` does for its emission layer); a separate file, given with --emission
emission = mi.render(scene, integrator=mi.load_dict({"type": "path", "max_depth": 1}), spp=64, seed=5)
mi.Bitmap(emission).write(f"{out}/mitsuba_emission.exr")
