"""The Mitsuba evaluation scenes of benchmarks/denoise: they load, their frames are read by the denoiser's
reader as written, and each scene has the lighting property it is meant to test (checked with Mitsuba's own
depth-1 path tracer, which sees only emitters directly in view). Blender's scenes need Blender, not run here."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "denoise"

pytest.importorskip("mitsuba")


def test_seeds_distinct():
    sys.path.insert(0, str(BENCH))
    try:
        from mitsuba_eval import seed
    finally:
        sys.path.remove(str(BENCH))
    seeds = [seed(s, v, spp) for s in range(4) for v in range(3) for spp in (1, 4, 0)]
    assert len(set(seeds)) == len(seeds)
    assert seed(0, 0, 1) == 1001 and seed(3, 2, 0) == 4029   # the README's formula


# one process renders every scene at a tiny size on the scalar variant (no LLVM needed, variant not leaked)
RENDER = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import mitsuba as mi
mi.set_variant("scalar_rgb")
import numpy as np
import mitsuba_eval as me
from mitsuba_eval_scenes import SCENES
out, info = sys.argv[2], {}
for name, (build, views) in SCENES.items():
    visible = []
    for v, view in enumerate(views):
        scene = me.load(build, view, (128, 96))  # the real size: a sliver of a lamp can hide between pixels
        em = np.array(mi.render(scene, integrator=mi.load_dict({"type": "path", "max_depth": 1}), spp=2, seed=1))
        visible.append(float(em.max()))
    mi.render(scene, spp=1, seed=1)
    scene.sensors()[0].film().bitmap().write(f"{out}/{name}.exr")
    mi.Bitmap(em).write(f"{out}/{name}_emission.exr")
    info[name] = visible
print(json.dumps(info))
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("mitsuba_eval")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["OMP_NUM_THREADS"] = "1"
    res = subprocess.run([sys.executable, "-c", RENDER, str(BENCH), str(out)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return out, json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_lighting_properties(rendered):
    _, visible = rendered
    # the hidden and indirect scenes never show their light; the emitter scene shows one in every view
    assert all(m == 0.0 for m in visible["hidden"]), visible["hidden"]
    assert all(m == 0.0 for m in visible["indirect"]), visible["indirect"]
    assert all(m > 5.0 for m in visible["emitter"]), visible["emitter"]


def test_reader_takes_frames_as_written(rendered):
    from vision.data.render_layers import read_render_file

    out, _ = rendered
    for name in ("hidden", "indirect", "emitter", "glossy"):
        rf = read_render_file(out / f"{name}.exr", extra={"emission": out / f"{name}_emission.exr"})
        (layer,) = rf.layers
        assert {"color", "albedo", "normal", "depth", "position", "emission"} <= set(layer.buffers), layer.sources
        assert layer.buffers["color"].shape == (96, 128, 3)
