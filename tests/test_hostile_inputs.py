"""Hostile and careless inputs to the commands: no code runs from data files, no write lands outside the
output or over an input, and every mistake is one clear line (exit 2) before any compute, never a traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from vision.io import write_image
from vision.pipelines.cli import main

from cli_checks import TINY, one_line_error, unwritable_folder  # noqa: E402


class _Payload:
    """Unpickling this creates the marker file: what a crafted checkpoint would do, harmlessly."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


# --------------------------------------------------------------------------- finetune --resume

def _tiny_cfg(**kw):
    from vision.pipelines.training.dense_model import DenseConfig

    base = dict(task="depth", head="token-local", lora_rank=0, epochs=1, batch_size=2, img_size=32, extra=TINY,
                ema=0.9)
    base.update(kw)
    return DenseConfig(**base)


def _samples(n=4):
    g = torch.Generator().manual_seed(0)
    return [{"image": torch.rand(3, 32, 32, generator=g), "target": 1 + torch.rand(1, 32, 32, generator=g),
             "name": f"s{i}"} for i in range(n)]


def test_resume_never_unpickles_a_crafted_checkpoint(tmp_path, one_thread):
    import pickle

    from vision.pipelines.training.finetune import train

    marker = tmp_path / "pwned"
    run = tmp_path / "run"
    run.mkdir()
    (run / "resume.pt").write_bytes(pickle.dumps({"model": _Payload(marker)}))
    data = _samples()
    with pytest.raises(ValueError, match="resume.pt") as info:
        train(_tiny_cfg(), run, train_set=data, val_set=data, resume=True, progress=False, log=lambda *a: None)
    assert not marker.exists()
    assert "pickle" in str(info.value)


def test_cli_resume_with_a_crafted_checkpoint_is_one_line(tmp_path, capsys):
    import pickle

    marker = tmp_path / "pwned"
    run = tmp_path / "run"
    run.mkdir()
    (run / "resume.pt").write_bytes(pickle.dumps(_Payload(marker)))
    (tmp_path / "data" / "images").mkdir(parents=True)
    assert main(["finetune", "--task", "depth", "--data", str(tmp_path / "data"), "-o", str(run), "--resume"]) == 2
    assert not marker.exists()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "resume.pt" in err and "not loaded" in err, err


def test_resume_state_is_safetensors_and_json_and_resumes(tmp_path, one_thread):
    from vision.pipelines.training.finetune import train

    data = _samples()
    run = tmp_path / "run"
    train(_tiny_cfg(epochs=1), run, train_set=data, val_set=data, progress=False, log=lambda *a: None)
    names = {p.name for p in (run / "state").iterdir()}  # inside the checkpoint folder
    assert "resume.safetensors" in names and "resume.pt" not in names
    from safetensors import safe_open

    with safe_open(str(run / "state" / "resume.safetensors"), framework="pt") as fh:
        state = json.loads(fh.metadata()["state"])  # everything that is not a tensor is JSON
    assert state["epoch"] == 1 and len(state["history"]) == 1
    logs = []
    history = train(_tiny_cfg(epochs=2), run, train_set=data, val_set=data, resume=True, progress=False,
                    log=logs.append)
    assert [h["epoch"] for h in history] == [1, 2] and any("resuming" in line for line in logs)
    # a damaged state file is a clear error, not a traceback deep in safetensors
    size = (run / "state" / "resume.safetensors").stat().st_size
    (run / "state" / "resume.safetensors").write_bytes(b"\x00garbage")  # of another size than the manifest's
    with pytest.raises(ValueError, match="resume.safetensors has 8 bytes"):
        train(_tiny_cfg(epochs=3), run, train_set=data, val_set=data, resume=True, progress=False,
              log=lambda *a: None)
    (run / "state" / "resume.safetensors").write_bytes(b"\x00" * size)  # of the same size: read, and refused
    with pytest.raises(ValueError, match="resume.safetensors"):
        train(_tiny_cfg(epochs=3), run, train_set=data, val_set=data, resume=True, progress=False,
              log=lambda *a: None)


def test_resume_state_round_trips_the_optimiser_bit_for_bit(tmp_path):
    from vision.pipelines.training.finetune import EMA
    from vision.pipelines.training.run_state import read_resume as _read_resume, save_resume as _save_resume

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.8, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 ** s)
    ema = EMA(model, 0.9)
    for _ in range(3):
        model(torch.rand(5, 4)).square().mean().backward()
        opt.step()
        sched.step()
        ema.update(model)
    history = [{"epoch": 1, "loss": 0.25, "baseline": {"absrel": 1.0}, "saved": True}]
    _save_resume(tmp_path / "resume.safetensors", model.state_dict(), opt.state_dict(), sched.state_dict(), ema, 1,
                 history)
    got = _read_resume(tmp_path)
    assert got["epoch"] == 1 and got["history"] == history and got["ema_step"] == 3
    want = opt.state_dict()
    assert got["optimizer"]["param_groups"] == want["param_groups"]
    for pid, entry in want["state"].items():
        assert set(got["optimizer"]["state"][pid]) == set(entry)
        for key, value in entry.items():
            assert torch.equal(got["optimizer"]["state"][pid][key], value)
    fresh = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.8, 0.95))
    fresh.load_state_dict(got["optimizer"])  # what resuming does
    assert all(torch.equal(got["ema"][n], t) for n, t in ema.shadow.items())
    assert got["scheduler"]["last_epoch"] == 3


# --------------------------------------------------------------------------- vision edit, offline

def test_edit_with_a_hub_id_never_touches_the_network(tmp_path):
    pytest.importorskip("diffusers")
    write_image(tmp_path / "in.png", np.full((16, 16, 3), 0.5, np.float32))
    script = textwrap.dedent("""
        import socket, sys
        attempts = []
        def refuse(*args, **kwargs):
            attempts.append(repr(args[:2]))
            raise OSError("network blocked by the test")
        socket.getaddrinfo = refuse
        socket.socket.connect = lambda self, *args: refuse(*args)
        socket.create_connection = refuse
        from vision.pipelines.cli import main
        rc = main(sys.argv[1:])
        print("ATTEMPTS", len(attempts), attempts)
        sys.exit(rc)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(tmp_path / "hf"), PYTHONPATH="")
    res = subprocess.run([sys.executable, "-c", script, "edit", str(tmp_path / "in.png"), "--prompt", "a cat",
                          "--model", "someone/not-cached-model", "-o", str(tmp_path / "out.png")],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "ATTEMPTS 0 []" in res.stdout, res.stdout + res.stderr
    assert res.returncode == 2
    assert "Downloading" not in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "not-cached-model" in res.stderr, res.stderr


# --------------------------------------------------------------------------- denoise outputs stay inside -o

@pytest.fixture
def frame(tmp_path):
    from vision.data import write_exr

    d = tmp_path / "frames"
    d.mkdir()
    rgb = np.random.default_rng(0).random((16, 16, 3)).astype(np.float32)
    write_exr(d / "f_001.exr", {c: rgb[..., k] for k, c in enumerate("RGB")})
    return d / "f_001.exr"


@pytest.mark.parametrize("suffix", ["/abs/path", "/../../../escaped", "_ok/../../x"])
def test_denoise_suffix_cannot_leave_the_output_folder(frame, tmp_path, capsys, suffix):
    out = tmp_path / "deep" / "out"
    before = set(tmp_path.rglob("*"))
    assert main(["denoise", str(frame), "-o", str(out), "--suffix", suffix, "-q"]) == 2
    one_line_error(capsys, "--suffix")
    assert set(tmp_path.rglob("*")) - before <= {tmp_path / "deep", out}
    assert not Path("/abs/path.exr").exists()


def test_denoise_out_is_a_file_or_unwritable_or_weights_not_safetensors(frame, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["denoise", str(frame), "-o", str(blocker), "-q"]) == 2
    one_line_error(capsys, "-o", blocker)
    locked = unwritable_folder(tmp_path)
    assert main(["denoise", str(frame), "-o", str(locked), "-q"]) == 2
    one_line_error(capsys, "-o", locked)
    png = tmp_path / "w.png"
    write_image(png, np.zeros((4, 4, 3), np.float32))
    assert main(["denoise", str(frame), "-o", str(tmp_path / "o"), "--model", "flnr", "--weights", str(png),
                 "-q"]) == 2
    one_line_error(capsys, "--weights", png)


# --------------------------------------------------------------------------- scene manifests

@pytest.mark.parametrize("bad", ["../outside.exr", "/etc/passwd", "sub/../../outside.exr"])
def test_manifest_file_entries_must_stay_in_the_scene(tmp_path, bad):
    from vision.data import RenderedScenes

    scene = tmp_path / "data" / "scene_00000"
    scene.mkdir(parents=True)
    (scene / "manifest.json").write_text(json.dumps({"frames": [{"file": bad, "seed": 0, "spp": 1}]}))
    with pytest.raises(ValueError, match="manifest.json") as info:
        RenderedScenes(tmp_path / "data", split="all", fields=["color"])
    assert bad in str(info.value)


# --------------------------------------------------------------------------- render-scenes never deletes

def test_render_scenes_keeps_a_folder_it_did_not_create(tmp_path, capsys):
    out = tmp_path / "scenes"
    mine = out / "scene_00000"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("my work")
    rc = main(["render-scenes", "--out", str(out), "--count", "1", "--size", "8", "--spp-ref", "1",
               "--noisy-seeds", "1", "--ao-rays", "1", "--variant", "scalar_rgb"])
    assert rc == 2
    one_line_error(capsys, mine)
    assert (mine / "notes.txt").read_text() == "my work"


def test_denoise_without_guide_buffers_stops_unless_allowed(frame, tmp_path, capsys):
    """An EXR with only R, G, B has nothing to regress on: the run stops with one line naming the frame, what is
    missing and where Blender turns it on (exit 2, no output folder); --allow-no-guides blurs, with a warning."""
    capsys.readouterr()
    assert main(["denoise", str(frame), "-o", str(tmp_path / "o"), "--model", "flr", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(frame) in err[0] and "no albedo or normal buffer" in err[0], err
    assert "Passes > Data > Denoising Data" in err[0] and "OpenEXR MultiLayer" in err[0]
    assert "--allow-no-guides" in err[0] and not (tmp_path / "o").exists()
    assert main(["denoise", str(frame), "-o", str(tmp_path / "o"), "--model", "flr", "--allow-no-guides"]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "no guide buffers" in err and str(frame) in err


def test_denoise_huge_radius_costs_what_the_image_costs(tmp_path, monkeypatch):
    """--radius 1000000 on a 128^2 frame: the window is clamped to what the border makes equivalent, so the run
    sums exactly the windows of radius 128 and writes the same image (it ran for minutes at up to 4.9 GB before).
    The window sums are recorded at the primitives every CPU path sums through (OpenCV's ``boxFilter``,
    ``avg_pool2d``); the times are measured by ``vision bench local-regression --huge-radius``."""
    from window_sums import window_sums

    from vision.bundled import asset_path
    from vision.data import read_exr

    frame = asset_path("scenes", "scene_00000", "frame_00.exr")
    seen = window_sums(monkeypatch)
    windows, images = {}, {}
    for radius in (128, 1000000):
        out = tmp_path / f"r{radius}"  # a fresh folder: nothing to skip
        del seen[:]
        assert main(["denoise", str(frame), "-o", str(out), "-q", "--model", "flr", "--radius", str(radius)]) == 0
        windows[radius] = sorted(set(seen))
        (written,) = [f for f in out.rglob("*") if f.is_file()]
        images[radius] = read_exr(written)
    assert windows[128] and max(k for _, k in windows[128]) <= 2 * 128 - 1, windows[128]
    assert windows[1000000] == windows[128]
    assert images[128].keys() == images[1000000].keys()
    for name, plane in images[128].items():
        np.testing.assert_array_equal(images[1000000][name], plane)


def test_a_mis_sized_buffer_is_the_one_blamed(tmp_path, capsys):
    """A 64^2 --albedo beside a 128^2 frame and normal: the message names albedo (it blamed normal)."""
    from vision.data import write_exr

    rng = np.random.default_rng(0)
    for name, size in (("f", 128), ("alb", 64), ("nrm", 128)):
        a = rng.random((size, size, 3)).astype(np.float32)
        write_exr(tmp_path / f"{name}.exr", {c: a[..., k] for k, c in enumerate("RGB")})
    assert main(["denoise", str(tmp_path / "f.exr"), "-o", str(tmp_path / "o"), "-q", "--albedo",
                 str(tmp_path / "alb.exr"), "--normal", str(tmp_path / "nrm.exr")]) == 2
    line = one_line_error(capsys, "albedo is 64x64")
    assert "normal is" not in line


def test_restore_structure_with_huge_finite_values_names_the_input(tmp_path, capsys):
    """1e30 samples in an HDR edit: one line naming 'edited' and the limit, not 'edited contains N NaN' about
    values the optimisation made."""
    from vision.data import write_exr

    rng = np.random.default_rng(0)
    src = rng.random((32, 32, 3)).astype(np.float32)
    ed = src.copy()
    ed[:5, :5] = 1e30
    for name, a in (("src", src), ("ed", ed)):
        write_exr(tmp_path / f"{name}.exr", {c: a[..., k] for k, c in enumerate("RGB")})
    assert main(["restore-structure", "--source", str(tmp_path / "src.exr"), "--edited", str(tmp_path / "ed.exr"),
                 "-o", str(tmp_path / "r.exr"), "--steps", "3", "-q"]) == 2
    line = one_line_error(capsys, "edited has values up to 1e+30")
    assert "NaN" not in line and not (tmp_path / "r.exr").exists()
