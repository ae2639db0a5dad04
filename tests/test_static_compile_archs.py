"""Every reachable Triton launch configuration compiles for the GPUs users run.

sm_80 (A100), sm_86 (RTX 30, A10, A40), sm_89 (RTX 40, L4, L40) and sm_90 (H100, H200): zero spills, at most 255
registers per thread and 64 Ki per block, shared memory within what a block may opt into (163 KB on sm_80, 99 KB
on sm_86 / sm_89, 227 KB on sm_90). The configurations come from ``vision.kernels.launch_configs``, which
calls the launchers' own choosers; the first test checks that it names every kernel a launcher launches. Compiles
run in two worker processes without ``TRITON_INTERPRET`` (``static_compile.compile_many``), no GPU needed.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from project_files import project_files

from vision.kernels.runtime.backends import choosing_as_on_a_gpu
from vision.kernels.launch_configs import ARCHS, LaunchConfig, jobs, launch_configs, problems, representative, table

ROOT = Path(__file__).resolve().parents[1]


def fill_configs() -> list[LaunchConfig]:
    """The denoiser's fill kernel (``vision/denoise/fill_triton.py``; ``kernels/`` does not import ``vision/``): with
    and without a flag buffer, Triton's default 4 warps (``fill`` passes none)."""
    from vision.denoise.fill_triton import BLOCK_H, BLOCK_W, _fill_kernel

    fn = getattr(_fill_kernel, "fn", _fill_kernel)
    out = []
    for flag in (True, False):
        sig = {"x_ptr": "*fp32", "flag_ptr": "*u8" if flag else "*fp32", "out_ptr": "*fp32", "count_ptr": "*i32"}
        out.append(LaunchConfig(f"{fn.__module__}:{fn.__name__}", tuple(sorted(dict(HAS_FLAG=flag, BH=BLOCK_H,
                                BW=BLOCK_W).items())), 4, signature=tuple(sorted(sig.items())), cases=("fill",)))
    return out


def all_configs(arch: int) -> list[LaunchConfig]:
    return launch_configs(arch) + fill_configs()


def _entry_kernels() -> set[str]:
    """Names of the ``@triton.jit`` functions that no other code calls as a function: the kernels launchers launch
    (``name[grid](...)``, or handed to one, as the guided backward's ``walk`` takes its two kernels)."""
    srcs = [p.read_text() for folder in ("kernels", "vision") for p in project_files("*.py", under=ROOT / folder)]
    text = "\n".join(srcs)
    jitted = set(re.findall(r"@triton\.jit[^\n]*\n(?:@[^\n]*\n)*def (\w+)", text))
    return {n for n in jitted if not re.search(rf"(?<!def )\b{n}\(", text)}


def test_every_launched_kernel_is_enumerated():
    """A new kernel or launch site without a configuration here fails this test, not a user's RTX card."""
    enumerated = {c.kernel.split(":")[1] for c in all_configs(90)}
    launched = _entry_kernels()
    assert len(launched) >= 20, launched  # 25 today
    assert launched <= enumerated, sorted(launched - enumerated)


def test_enumeration_follows_the_launchers_choosers():
    from vision.kernels.box import sliding
    from vision.kernels.local_linear import triton_path as tp

    cfgs = launch_configs(86)
    box = [dict(c.constexprs) for c in cfgs if c.kernel.endswith(":_sliding_box_kernel")]
    assert {b["BWI"] for b in box} == {sliding.strip_width(4), sliding.strip_width(16)}
    assert {b["RB"] for b in box} == {sliding.RB}
    solve = [c for c in cfgs if c.kernel.endswith(":_solve_kernel")]
    with choosing_as_on_a_gpu():  # the GPU's choice, also under the interpreter that runs this suite
        _, const, nw = tp._solve_launch(1920 * 1080, 8, 3)
    assert any(dict(c.constexprs) == const and c.num_warps == nw for c in solve)
    assert len({(c.kernel, c.constexprs, c.num_warps) for c in cfgs}) == len(cfgs)  # deduplicated


def _find(arch, name, **const):
    return {(dict(c.constexprs).get("RB"), c.num_warps) for c in launch_configs(arch) if c.kernel.endswith(name)
            and all(dict(c.constexprs).get(k) == v for k, v in const.items())}


def test_configs_chosen_per_arch_where_one_spills():
    """Triton 3.8's ptxas: the gray fit at 2 rows (symmetric border, 128 columns) puts 8 B on the stack on sm_90 only,
    the cell-moment pass at K <= 4 and 4 warps 16 B on sm_86 and sm_89 only; those targets get another config."""
    from vision.kernels.runtime.arch import device_arch

    assert _find(90, ":_fit_gray_kernel", MODE=3, BWI=128) == {(1, 1)}
    assert _find(86, ":_fit_gray_kernel", MODE=3, BWI=128) == {(2, 1)}
    assert _find(90, ":_cell_moments_kernel", KP=4) == {(None, 4)}
    assert _find(86, ":_cell_moments_kernel", KP=4) == {(None, 8)} == _find(89, ":_cell_moments_kernel", KP=4)
    import torch

    assert device_arch(torch.device("cpu")) is None  # CPU and the interpreter keep the architecture-free choice


def _compile_and_check(configs_by_arch: dict) -> list[dict]:
    pytest.importorskip("triton")
    from vision.kernels.static_compile import compile_many

    work = [j for (arch, aligned), cfgs in configs_by_arch.items() for j in jobs(cfgs, arch, aligned)]
    try:
        results = compile_many(work, workers=2)
    except RuntimeError as e:
        if "ptxas" in str(e) or "cuobjdump" in str(e):
            pytest.skip(f"this triton install has no CUDA toolchain: {str(e)[-200:]}")
        raise
    print("\n" + table(results))
    print(f"{len(results)} compiles, {sum(r['seconds'] for r in results):.0f} compile-seconds")
    bad = [(r["label"], r["arch"], problems(r)) for r in results if problems(r)]
    assert not bad, bad
    return results


def test_limits_are_each_archs():
    base = dict(label="k", num_warps=8, registers=200, stack_bytes=0, shared_bytes=100 * 1024, seconds=1.0)
    assert problems(dict(base, arch=90)) == [] and problems(dict(base, arch=80)) == []
    assert problems(dict(base, arch=86)) and problems(dict(base, arch=89))  # 100 KB > 99 KB on RTX 30 / 40
    assert problems(dict(base, arch=90, registers=255)) == []               # 255 x 256 threads = 65280
    assert problems(dict(base, arch=90, registers=256))                     # > 255 per thread
    assert problems(dict(base, arch=90, num_warps=16, registers=160))       # 81,920 per block
    assert problems(dict(base, arch=90, stack_bytes=8))
    assert problems(dict(label="k", arch=86, num_warps=1, error="ptxas error", seconds=1.0))


@pytest.mark.slow
def test_representative_configs_fit_ampere_ada_and_hopper():
    """One configuration per kernel (widest radius, largest system, every flag on) for each arch family: sm_86
    (Ampere and Ada share Triton's code generation; sm_86 allows the least shared memory of the four) and sm_90,
    for aligned tensors. About 50 compiles, ~40 s on two idle cores."""
    _compile_and_check({(arch, True): representative(all_configs(arch)) for arch in (86, 90)})


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("VISION_STATIC_MATRIX", "") != "1",
                    reason="the full matrix takes ~12 min on 2 cores: VISION_STATIC_MATRIX=1 runs it (after a change "
                           "to a kernel or a launcher's choice); the representative test above runs every time")
def test_every_config_fits_every_arch():
    """The full matrix: every configuration the launchers reach on sm_80, sm_86, sm_89 and sm_90, for aligned
    tensors and for offset views (~930 compiles, ~1,400 CPU-seconds: ~12 min on two idle cores). Run with
    ``VISION_STATIC_MATRIX=1 python3 -m pytest tests/test_static_compile_archs.py``."""
    _compile_and_check({(arch, aligned): all_configs(arch) for arch in ARCHS for aligned in (True, False)})


@pytest.mark.slow
def test_listing_configurations_first_leaves_the_kernels_interpreted():
    """launch_configs reads the choosers with the interpreter switch off; the kernels it imports must still be
    decorated as the process set the switch, or every later interpreted call in that process fails (it did, in a
    pytest-xdist worker that listed configurations before running any kernel)."""
    import subprocess
    import sys

    code = ("import torch\n"
            "from vision.kernels.launch_configs import launch_configs\n"
            "launch_configs(90)\n"
            "from vision.kernels import box_filter\n"
            "x = torch.rand(1, 3, 12, 13)\n"
            "ref = torch.nn.functional.avg_pool2d(torch.nn.functional.pad(x, (1, 1, 1, 1), mode='reflect'), 3, 1)\n"
            "assert torch.allclose(box_filter(x, 1, 'reflect'), ref, atol=1e-6)\n"
            "print('ok')\n")
    env = dict(os.environ, TRITON_INTERPRET="1", VISION_BACKEND="triton")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-2000:]
