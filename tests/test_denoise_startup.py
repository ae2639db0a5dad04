"""What one ``vision denoise`` frame loads: none of the heavy packages its work does not need (each costs a
noticeable part of the start-up that ``vision bench startup`` times), and its numba kernels from their cache, one
signature each. The timing itself is ``tests/test_bench_tools.py::test_bench_startup``."""
import json
import subprocess
import sys

import numpy as np
import pytest

# what a single FLNR frame on CPU never needs: huggingface_hub (0.25-0.4 s: FLNR writes its save_pretrained folder
# itself), torch._dynamo (3 s: custom ops are called as plain functions), and the other products' packages
NOT_LOADED = ("huggingface_hub", "torch._dynamo", "kornia", "timm", "diffusers", "transformers", "triton")

SCRIPT = """
import json, sys
from vision.kernels.runtime import jit
loads = []
compile_ = jit._compile
def counted(nb, fn, signature):
    loads.append(fn.__name__)
    return compile_(nb, fn, signature)
jit._compile = counted
from vision.pipelines.cli import main
rc = main(["denoise", sys.argv[1], "-o", sys.argv[2], "-q", "--overwrite"])
print(json.dumps({"rc": rc, "modules": sorted(sys.modules), "loads": loads}))
"""


@pytest.mark.slow  # a fresh process that imports torch and loads the numba kernels: 4-8 s on 2 cores
def test_one_frame_loads_nothing_it_does_not_need(tmp_path):
    from vision.data.exr import write_frame

    rng = np.random.default_rng(0)
    ones = np.ones((32, 32, 1), np.float32)
    write_frame(tmp_path / "frame.exr", {"color": rng.random((32, 32, 3), dtype=np.float32),
                                         "albedo": 0.5 * np.repeat(ones, 3, -1), "depth": ones,
                                         "normal": np.concatenate([0 * ones, 0 * ones, ones], -1)})
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "frame.exr"), str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["rc"] == 0 and (tmp_path / "out" / "frame.exr").is_file()
    loaded = [m for m in NOT_LOADED if m in got["modules"]]
    assert loaded == [], f"one denoised frame imports {loaded}"
    # every kernel is loaded once per process, for its one declared signature
    assert len(got["loads"]) == len(set(got["loads"])) and "demodulate" in got["loads"], got["loads"]
