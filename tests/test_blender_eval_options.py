"""``benchmarks/denoise/blender_eval.py`` renders frames as Blender users get them: ``--adaptive`` (adaptive sampling
and Cycles' per-pixel sample count pass, seeds of their own) and ``--film blender`` (Blender's default film), and
refuses bad values of both in one line. Needs Blender (CI installs Debian's); skipped without it."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "denoise" / "blender_eval.py"
BLENDER = shutil.which("blender")
pytestmark = pytest.mark.skipif(BLENDER is None, reason="blender is not on PATH: blender_eval.py runs inside it")


def _run(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([BLENDER, "-b", "-noaudio", "--factory-startup", "-t", "1", "--python", str(SCRIPT), "--",
                           str(out), *args], capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # Blender starts once per case: 1-2.5 s each
@pytest.mark.parametrize("args, needle", [(["--adaptive", "2"], "--adaptive: 2 must be a noise threshold in (0, 1)"),
                                          (["--adaptive", "x"], "--adaptive: 'x' is not a number"),
                                          (["--film", "pinhole"], "--film: unknown film 'pinhole'; known: box, blender")])
def test_bad_options_are_refused_in_one_line(tmp_path, args, needle):
    done = _run(tmp_path / "out", "--set", "spp", *args)
    assert done.returncode != 0
    assert needle in done.stdout + done.stderr, (done.stdout[-1500:], done.stderr[-1500:])
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.slow  # Blender starts and renders two tiny frames: about 10-20 s
def test_adaptive_frames_carry_the_sample_count_pass_and_seeds_of_their_own(tmp_path):
    OpenEXR = pytest.importorskip("OpenEXR")
    out = tmp_path / "out"
    done = _run(out, "--set", "spp", "--scenes", "rails", "--what", "noisy", "--spp", "16", "--size", "16x12",
                "--adaptive", "0.01", "--film", "blender")
    assert done.returncode == 0, done.stderr[-2000:]
    frames = json.loads((out / "manifest.json").read_text())["frames"]
    assert len(frames) == 1
    frame = frames[0]
    # rails is scene 4 of the spp set (seed offset 20): 1000 * 25 + 2 (16 spp), plus 500 (adaptive) and 250 (film)
    assert frame["seed"] == 25002 + 750 and frame["reference_seed"] == 25009 + 250
    assert frame["adaptive_threshold"] == 0.01 and frame["film"] == "blender"
    assert frame["noisy"] == "rails_v0_16spp_adaptive.exr"
    part = OpenEXR.File(str(out / frame["noisy"])).parts[0]
    assert part.header["cycles.ViewLayer.samples"] in ("16", b"16", 16)
    share = part.channels["ViewLayer.Debug Sample Count.X"].pixels
    # the share of the most samples each pixel took: in (0, 1], all of them at 16 spp with threshold 0.01
    assert share.shape == (12, 16) and float(share.min()) > 0 and np.allclose(share, 1.0)
