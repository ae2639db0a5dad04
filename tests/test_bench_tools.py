"""The measuring tools themselves: `vision bench gpu` (run on CPU at small sizes) and `vision bench startup`."""
import json
import os
import sys

import pytest

from vision.pipelines.cli import main


def test_bench_gpu_runs_on_cpu_and_never_claims_a_target(tmp_path, capsys):
    out = tmp_path / "gpu.json"
    assert main(["bench", "gpu", "--device", "cpu", "--small", "--only", "box", "guided", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "box r=8 1ch 1024^2 |" in text and "ERROR" not in text
    data = json.loads(out.read_text())
    rows = {r["case"]: r for r in data["rows"]}
    # the error column is a float64 comparison of the real op, so it is small but measured
    assert 0 <= rows["box r=8 1ch 1024^2"]["err"] < 1e-5
    assert 0 <= rows["guided colour 3+3 1024^2"]["err"] < 1e-5
    assert data["targets"] and all("NOT MEASURED" in line for line in data["targets"])


def test_bench_gpu_refuses_cuda_without_a_gpu(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["bench", "gpu", "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


# The one-frame target, 2 s beyond `import torch`, was set on a 2-core machine where that import takes 2.9 s (idle).
# Machines differ in speed, so the target holds as this ratio of the two rows' CPU times, or as the 2 s itself where
# torch imported faster than that (the ratio alone then allowed less than the target: 1.55 s at a 2.25 s import); the
# 2 s of wall time is asserted only on an idle machine.
DENOISE_RATIO = (2.9 + 2.0) / 2.9
DENOISE_TARGET_S = 2.0


@pytest.mark.slow  # about 40 s: three rounds of fresh processes, each importing torch
def test_bench_startup(tmp_path, capsys, monkeypatch):
    # one thread in every timed process: on a loaded machine each parallel step of a 2-thread pool waits for a thread
    # that is not scheduled, which times the load, not the start-up (on an idle machine one 64 x 64 frame takes the
    # same with one thread)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("NUMBA_NUM_THREADS", "1")
    out = tmp_path / "s.json"
    assert main(["bench", "startup", "--repeat", "3", "--json", str(out)]) == 0
    rows = {r["command"]: r for r in json.loads(out.read_text())}
    assert set(rows) >= {"vision --help", "vision denoise --help", 'python -c "import torch"',
                         "vision edit (missing model)", "vision denoise (one 64x64 frame)"}
    one, torch_row = rows["vision denoise (one 64x64 frame)"], rows['python -c "import torch"']
    assert one["beyond_torch_s"] == pytest.approx(one["median_s"] - torch_row["median_s"])
    assert one["cpu_beyond_torch_s"] == pytest.approx(one["cpu_s"] - torch_row["cpu_s"])
    # CPU time is what the processes cost themselves. Their wall time on a busy machine grows with the load, and more
    # for the longer process: 5.0 s against a 2.8 s import of torch on a 2-core runner whose other worker ran tests.
    # The least of the runs: on a virtual machine stolen cycles still add to CPU time (the one-frame command took
    # 2.7-4.0 s of CPU time in twelve runs on an idle 2-core machine).
    torch_cpu = torch_row["cpu_min_s"]
    bound = max(DENOISE_RATIO * torch_cpu, torch_cpu + DENOISE_TARGET_S)
    assert one["cpu_min_s"] <= bound, f"one frame {one['cpu_min_s']:.2f} s of CPU, import torch {torch_cpu:.2f} s"
    if os.getloadavg()[0] < 0.5:
        assert one["beyond_torch_s"] <= DENOISE_TARGET_S
    assert all(r["median_s"] > 0 for r in rows.values())
    text = capsys.readouterr().out
    assert "beyond torch" in text and "vision edit (missing model): " in text and "target < 2.0 s" in text
    assert "vision denoise (one 64x64 frame): " in text and "(target <= 2.0 s)" in text


def test_bench_startup_times_this_interpreters_vision(tmp_path, monkeypatch):
    from vision.pipelines.bench import startup

    for folder in ("env", "elsewhere"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "vision").write_text("#!/bin/sh\n")
        (tmp_path / folder / "vision").chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "env" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))  # another install (or a shim) first on PATH
    assert startup.commands()["vision --help"] == [str(tmp_path / "env" / "vision"), "--help"]
    (tmp_path / "env" / "vision").unlink()
    assert startup.commands()["vision --help"] == [str(tmp_path / "elsewhere" / "vision"), "--help"]


def test_bench_startup_rejects_zero_repeats(capsys):
    assert main(["bench", "startup", "--repeat", "0"]) == 2
    assert "--repeat must be at least 1" in capsys.readouterr().err


def test_bench_compile_rejects_zero_workers_and_an_unknown_kernel(capsys):
    assert main(["bench", "compile", "--workers", "0"]) == 2
    assert "--workers must be at least 1" in capsys.readouterr().err
    assert main(["bench", "compile", "--kernel", "no_such_kernel"]) == 2
    assert "--kernel 'no_such_kernel' matches no kernel" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_compile_reports_each_kernel_against_the_target(tmp_path, capsys):
    pytest.importorskip("triton")
    out = tmp_path / "c.json"
    assert main(["bench", "compile", "--kernel", "_finish", "--arch", "86", "--arch", "90", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())  # the tests of tests/test_static_compile_archs.py compile every kernel
    assert [r["arch"] for r in rows] == [86, 90] and all(r["kernel"].endswith(":_finish") for r in rows)
    assert all(r["stack_bytes"] == 0 and r["cpu_seconds"] > 0 for r in rows)
    text = capsys.readouterr().out
    assert "CPU seconds in all" in text and "target <= 10 s per kernel" in text


def test_bench_help_lists_every_bench_without_torch():
    """`vision bench --help` and `vision bench WHAT --help` build every bench's options from bench/commands/: no
    torch, numpy or peer loads until a bench runs."""
    import subprocess

    code = ("import contextlib, io, sys\nfrom vision.pipelines.bench import BENCHES\nfrom vision.pipelines.cli import main\n"
            "for argv in [['bench', '--help']] + [['bench', w, '--help'] for w in BENCHES]:\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        try:\n            main(argv)\n        except SystemExit as e:\n            assert e.code == 0, argv\n"
            "print(sorted(m for m in ('torch', 'numpy', 'cv2', 'kornia', 'timm', 'diffusers') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[]"


def test_bench_options_name_what_the_benches_take():
    """The option values that bench/commands/ spells without torch are the ones the benches use."""
    from vision.pipelines.bench import commands, gpu, timing

    assert set(commands.DTYPE_NAMES) == set(timing.DTYPES)
    assert all(str(timing.DTYPES[n]) == f"torch.{n}" for n in commands.DTYPE_NAMES)
    assert set(commands.GPU_GROUPS) == {c.group for c in gpu.CASES}
