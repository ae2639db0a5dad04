"""The Flamenco job type (pipelines/blender_addon/flamenco/vision_render_denoise.js) run under node against a stub of
Flamenco's documented authoring API (tests/flamenco_stub.js): its task graph, checked against vision's own shards."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from vision.pipelines.cli.denoise_io import shard

HERE = Path(__file__).parent
JOB = HERE.parent / "pipelines" / "blender_addon" / "flamenco" / "vision_render_denoise.js"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not on PATH: the Flamenco job type is JavaScript")
SETTINGS = {"chunk_size": 4, "render_output_path": "/farm/shot/frame_####", "denoised_path": "/farm/shot/denoised",
            "vision": "/opt/venv/bin/vision", "blendfile": "/farm/shot.blend"}


def compile_job(**settings):
    done = subprocess.run([NODE, str(HERE / "flamenco_stub.js"), str(JOB), json.dumps({**SETTINGS, **settings})],
                          capture_output=True, text=True, timeout=60)
    return done.returncode, (json.loads(done.stdout) if done.returncode == 0 else done.stderr)


@pytest.mark.parametrize("frames, shards, warmup", [("1-25", 3, 5), ("1-10, 20-29", 4, 8), ("7", 2, 8),
                                                     ("100-139", 5, 0)])
def test_every_denoise_task_depends_on_the_renders_of_its_shard_and_warmup(frames, shards, warmup):
    rc, out = compile_job(frames=frames, denoise_shards=shards, warmup=warmup)
    assert rc == 0, out
    want = sorted({f for part in frames.split(",") for f in (
        range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1))})
    renders = [t for t in out["tasks"] if t["type"] == "blender"]
    denoises = [t for t in out["tasks"] if t["type"] == "misc"]
    rendered = {}  # frame -> the render task's name, from the Blender command line it runs
    for t in renders:
        (cmd,) = t["commands"]
        assert cmd["name"] == "blender-render" and not t["deps"]
        assert cmd["parameters"]["blendfile"] == SETTINGS["blendfile"]
        args = cmd["parameters"]["args"]
        assert args[args.index("--render-format") + 1] == "OPEN_EXR_MULTILAYER"
        assert args.index("--render-output") < args.index("--render-frame")  # Blender reads its options in order
        a, _, b = args[args.index("--render-frame") + 1].partition("..")
        for f in range(int(a), int(b or a) + 1):
            assert f not in rendered, f"frame {f} rendered twice"
            rendered[f] = t["name"]
        assert int(b or a) - int(a) + 1 <= SETTINGS["chunk_size"]
    assert sorted(rendered) == want  # every frame rendered once
    count = min(shards, len(want))
    assert len(denoises) == count
    for i, t in enumerate(denoises):
        (cmd,) = t["commands"]
        args = cmd["parameters"]["args"]
        assert cmd["name"] == "exec" and cmd["parameters"]["exe"] == SETTINGS["vision"]
        assert args[:2] == ["denoise", "/farm/shot/frame_*.exr"] and "--temporal" in args
        assert args[args.index("--shard") + 1] == f"{i}/{count}" and args[args.index("--warmup") + 1] == str(warmup)
        mine = shard(want, i, count)  # what vision denoise --shard I/N takes, and the frames before it it reads
        start = want.index(mine[0])
        needed = want[max(0, start - warmup):start] + mine
        assert set(t["deps"]) == {rendered[f] for f in needed}, (t["name"], t["deps"])
        assert len(t["deps"]) == len(set(t["deps"]))


def test_settings_and_refusals():
    rc, out = compile_job(frames="1-4", denoise_shards=1, warmup=8)
    assert rc == 0 and out["label"] == "Render and denoise (vision)"
    keys = {"frames", "render_output_path", "denoised_path", "denoise_shards", "warmup", "blendfile"}
    assert keys <= set(out["settings"])
    rc, err = compile_job(frames="1-4", denoise_shards=1, warmup=8, render_output_path="//render/frame_####")
    assert rc != 0 and "absolute path" in err
    rc, err = compile_job(frames="5-1", denoise_shards=1, warmup=8)
    assert rc != 0 and "ends before it starts" in err
