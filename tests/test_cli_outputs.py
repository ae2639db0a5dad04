"""The shared output policy (vision.outputs) and the image commands that follow it: predict, edit and
restore-structure refuse to overwrite inputs, name outputs by the whole stem, check the output before
compute, and turn bad files, folders, devices and Ctrl-C into one line."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from vision.io import write_image
from vision.pipelines.cli import main

from cli_checks import one_line_error, tiny_run, unwritable_folder  # noqa: E402


def picture(path, seed=0, size=32):
    write_image(path, np.random.default_rng(seed).random((size, size, 3)).astype(np.float32))
    return path


# --------------------------------------------------------------------------- the policy itself

def test_policy_links_stems_containment_and_atomic_writes(tmp_path):
    from vision.outputs import atomic_path, inside, output_stems, refuse_inputs, same_file

    a = tmp_path / "a.png"
    a.write_bytes(b"input")
    (tmp_path / "soft.png").symlink_to(a)
    os.link(a, tmp_path / "hard.png")
    assert same_file(tmp_path / "soft.png", a) and same_file(tmp_path / "hard.png", a)
    assert same_file(tmp_path / "sub" / ".." / "a.png", a) and not same_file(tmp_path / "b.png", a)
    for name in ("soft.png", "hard.png", "a.png"):
        with pytest.raises(ValueError, match="would overwrite the input"):
            refuse_inputs(tmp_path / name, [("IMAGES", a)])
    assert output_stems(["x/shot.v1.png", "y/shot.v2.png"]) == ["shot.v1", "shot.v2"]
    with pytest.raises(ValueError, match="same name 'shot'"):
        output_stems(["x/shot.png", "y/shot.jpg"])
    for bad in ("../x", "/abs", "", ".."):
        with pytest.raises(ValueError):
            inside(tmp_path, bad)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "link.exr").symlink_to(tmp_path / "elsewhere.exr")
    with pytest.raises(ValueError, match="outside"):
        inside(tmp_path / "out", "link.exr")
    target = tmp_path / "t.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            Path(tmp).write_text("half")
            raise RuntimeError("crash mid-write")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.glob(".t.txt*")) == []
    with atomic_path(target) as tmp:
        Path(tmp).write_text("new")
    assert target.read_text() == "new"


# --------------------------------------------------------------------------- vision predict

@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A `vision finetune` run folder with untrained weights: enough for the CLI's checks."""
    return tiny_run(tmp_path_factory)


@pytest.fixture
def no_compute(monkeypatch):
    """Fail the test if the model is ever run (checks must come first)."""
    import vision.pipelines.training.dense_model as dm

    def boom(*a, **k):
        raise AssertionError("the model ran before the output was checked")

    monkeypatch.setattr(dm, "predict_raw", boom)


def test_predict_refuses_to_overwrite_its_inputs(run_dir, tmp_path, capsys, no_compute):
    images = tmp_path / "images"
    images.mkdir()
    paths = [picture(images / f"shot{i}.png", i) for i in range(2)]
    before = {p: p.read_bytes() for p in paths}
    assert main(["predict", str(run_dir), str(images / "*.png"), "-o", str(images)]) == 2
    one_line_error(capsys, "-o", "shot0.png")
    out = tmp_path / "out"
    out.mkdir()
    (out / "shot0.png").symlink_to(paths[0])  # an output that links to an input
    assert main(["predict", str(run_dir), str(paths[0]), "-o", str(out)]) == 2
    one_line_error(capsys, "would overwrite the input")
    os.link(paths[1], out / "shot1_preview.png")  # a hard link to an input where a preview would go
    assert main(["predict", str(run_dir), str(paths[1]), "-o", str(out)]) == 2
    one_line_error(capsys, "would overwrite the input")
    assert {p: p.read_bytes() for p in paths} == before


def test_predict_names_outputs_by_the_whole_stem(run_dir, tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    a, b = picture(src / "shot.v1.png", 1), picture(src / "shot.v2.png", 2)
    out = tmp_path / "out"
    assert main(["predict", str(run_dir), str(a), str(b), "-o", str(out), "--format", "npy", "--device", "cpu"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["shot.v1.npy", "shot.v1_preview.png", "shot.v2.npy",
                                                     "shot.v2_preview.png"]
    capsys.readouterr()
    # an output that exists is not replaced without --overwrite (shot.v1.jpg would have replaced shot.v1.png's)
    before = (out / "shot.v1.npy").read_bytes()
    assert main(["predict", str(run_dir), str(b), str(a), "-o", str(out), "--format", "npy", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--overwrite" in err[0] and (out / "shot.v1.npy").read_bytes() == before
    assert main(["predict", str(run_dir), str(a), "-o", str(out), "--format", "npy", "--device", "cpu",
                 "--overwrite"]) == 0
    capsys.readouterr()
    other = tmp_path / "other"
    other.mkdir()
    c = picture(other / "shot.v1.png", 3)
    assert main(["predict", str(run_dir), str(a), str(c), "-o", str(tmp_path / "o2")]) == 2
    one_line_error(capsys, "shot.v1")
    assert not (tmp_path / "o2").exists() or not any((tmp_path / "o2").iterdir())
    d = picture(src / "shot.v1_preview.png", 4)  # its prediction would land on shot.v1's preview
    assert main(["predict", str(run_dir), str(a), str(d), "-o", str(tmp_path / "o3"), "--format", "png"]) == 2
    one_line_error(capsys, "would both write")


def test_predict_bad_files_folders_and_devices_are_one_line(run_dir, tmp_path, capsys, no_compute):
    good = picture(tmp_path / "good.png")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["predict", str(run_dir), str(good), "-o", str(blocker)]) == 2
    one_line_error(capsys, "-o", blocker, "not a folder")
    locked = unwritable_folder(tmp_path)
    assert main(["predict", str(run_dir), str(good), "-o", str(locked)]) == 2
    one_line_error(capsys, "-o", locked)
    data = good.read_bytes()
    for name, content in (("empty.png", b""), ("truncated.png", data[: len(data) // 2]), ("text.png", b"hello")):
        (tmp_path / name).write_bytes(content)
        assert main(["predict", str(run_dir), str(tmp_path / name), "-o", str(tmp_path / "o")]) == 2
        one_line_error(capsys, "IMAGES", name)
    assert main(["predict", str(tmp_path), str(good), "-o", str(tmp_path / "o")]) == 2
    one_line_error(capsys, "RUN", tmp_path)
    if not torch.cuda.is_available():
        assert main(["predict", str(run_dir), str(good), "-o", str(tmp_path / "o"), "--device", "cuda"]) == 2
        one_line_error(capsys, "--device cuda")
    assert main(["predict", str(run_dir), str(good), "-o", str(tmp_path / "o"), "--device", "warp9"]) == 2
    one_line_error(capsys, "--device warp9")


def test_ctrl_c_is_one_quiet_line_and_exit_130(tmp_path, capsys, monkeypatch):
    from vision.pipelines.cli import restore_structure_run

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(restore_structure_run, "read_image", interrupted)
    a, b = picture(tmp_path / "a.png"), picture(tmp_path / "b.png", 1)
    assert main(["restore-structure", "--source", str(a), "--edited", str(b), "-o", str(tmp_path / "c.png")]) == 130
    captured = capsys.readouterr()
    assert captured.err == "interrupted\n" and captured.out == ""


# --------------------------------------------------------------------------- restore-structure

def test_restore_structure_bad_inputs_and_outputs(tmp_path, capsys, monkeypatch):
    from vision.pipelines.cli import restore_structure_run

    monkeypatch.setattr(restore_structure_run, "restore_structure",
                        lambda *a, **k: pytest.fail("compute ran before the output was checked"))
    a, b = picture(tmp_path / "a.png"), picture(tmp_path / "b.png", 1)
    (tmp_path / "bad.png").write_bytes(b"")
    assert main(["restore-structure", "--source", str(tmp_path / "bad.png"), "--edited", str(b),
                 "-o", str(tmp_path / "c.png")]) == 2
    one_line_error(capsys, "--source", "bad.png")
    (tmp_path / "bad.exr").write_bytes(b"not an exr")
    assert main(["restore-structure", "--source", str(a), "--edited", str(tmp_path / "bad.exr"),
                 "-o", str(tmp_path / "c.png")]) == 2
    one_line_error(capsys, "--edited", "bad.exr")
    (tmp_path / "dir.png").mkdir()
    assert main(["restore-structure", "--source", str(a), "--edited", str(b), "-o", str(tmp_path / "dir.png")]) == 2
    one_line_error(capsys, "-o", "dir.png", "folder")
    locked = unwritable_folder(tmp_path)
    assert main(["restore-structure", "--source", str(a), "--edited", str(b), "-o", str(locked / "c.png")]) == 2
    one_line_error(capsys, "-o", locked)
    assert main(["restore-structure", "--source", str(a), "--edited", str(b), "--mask", str(tmp_path / "m.png"),
                 "-o", str(tmp_path / "m.png")]) == 2
    one_line_error(capsys, "--mask")
    if not torch.cuda.is_available():
        assert main(["restore-structure", "--source", str(a), "--edited", str(b), "-o", str(tmp_path / "c.png"),
                     "--device", "cuda"]) == 2
        one_line_error(capsys, "--device cuda")


# --------------------------------------------------------------------------- vision edit (no model needed)

def test_edit_refuses_mask_as_output_and_bad_files_before_loading(tmp_path, capsys, monkeypatch):
    pytest.importorskip("diffusers")
    import vision.pipelines.cli.edit_run as edit_cli

    monkeypatch.setattr(edit_cli, "load_pipeline", lambda *a, **k: pytest.fail("model loaded before the checks"))
    img = picture(tmp_path / "in.png")
    model = tmp_path / "model"  # looks like a model folder, so the checks after the model's are reached too
    model.mkdir()
    (model / "model_index.json").write_text("{}")
    mask = tmp_path / "m.png"
    write_image(mask, np.ones((32, 32), np.float32))
    before = mask.read_bytes()
    assert main(["edit", str(img), "--prompt", "x", "--model", str(model), "--mask", str(mask), "-o", str(mask)]) == 2
    one_line_error(capsys, "-o", "--mask")
    assert mask.read_bytes() == before
    (tmp_path / "broken.png").write_bytes(img.read_bytes()[:40])
    assert main(["edit", str(tmp_path / "broken.png"), "--prompt", "x", "--model", str(model), "-o", str(tmp_path / "o.png")]) == 2
    one_line_error(capsys, "broken.png")
    (tmp_path / "badmask.png").write_bytes(b"nope")
    assert main(["edit", str(img), "--prompt", "x", "--model", str(model), "--mask", str(tmp_path / "badmask.png"),
                 "-o", str(tmp_path / "o.png")]) == 2
    one_line_error(capsys, "--mask", "badmask.png")
    (tmp_path / "outdir").mkdir()
    assert main(["edit", str(img), "--prompt", "x", "--model", str(model), "-o", str(tmp_path / "outdir")]) == 2
    one_line_error(capsys, "-o", "outdir")
    if not torch.cuda.is_available():
        assert main(["edit", str(img), "--prompt", "x", "--model", str(model), "-o", str(tmp_path / "o.png"), "--device", "cuda"]) == 2
        one_line_error(capsys, "--device cuda")


def test_edit_model_index_that_is_not_json(tmp_path, capsys):
    pytest.importorskip("diffusers")
    img = picture(tmp_path / "in.png")
    model = tmp_path / "model"
    model.mkdir()
    (model / "model_index.json").write_text("{not json")
    assert main(["edit", str(img), "--prompt", "x", "--model", str(model), "-o", str(tmp_path / "o.png"),
                 "--device", "cpu"]) == 2
    one_line_error(capsys, "--model", "model_index.json")


# --------------------------------------------------------------------------- vision evaluate --json

def test_evaluate_json_is_checked_before_scoring(run_dir, tmp_path, capsys, monkeypatch):
    from vision.pipelines.cli import predict_run

    monkeypatch.setattr(predict_run, "load_run_for_cli", lambda *a, **k: pytest.fail("runs loaded before the check"))
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "dir.json").mkdir()
    assert main(["evaluate", str(run_dir), "--data", str(data), "--json", str(tmp_path / "dir.json")]) == 2
    one_line_error(capsys, "--json", "dir.json", "folder")
    assert main(["evaluate", str(run_dir), "--data", str(data), "--json", str(run_dir / "config.json")]) == 2
    one_line_error(capsys, "--json", "would overwrite the input")
    locked = unwritable_folder(tmp_path)
    assert main(["evaluate", str(run_dir), "--data", str(data), "--json", str(locked / "s.json")]) == 2
    one_line_error(capsys, "--json", locked)


def test_finetune_out_that_is_a_file_or_the_data_is_refused_before_training(tmp_path, capsys):
    data = tmp_path / "data"
    (data / "images").mkdir(parents=True)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    base = ["finetune", "--task", "depth", "--data", str(data), "--epochs", "1"]
    assert main(base + ["-o", str(blocker)]) == 2
    one_line_error(capsys, "-o", blocker, "not a folder")
    assert main(base + ["-o", str(data / "images" / "run")]) == 2
    one_line_error(capsys, "-o", "--data")
    assert main(base[:4] + [str(tmp_path / "nowhere")] + base[5:] + ["-o", str(tmp_path / "r")]) == 2
    one_line_error(capsys, "--data", "nowhere")


def test_truncated_tiff_and_jpeg_are_one_line_even_from_the_decoder(tmp_path, capfd):
    a = picture(tmp_path / "a.png")
    for name in ("t.tif", "t.jpg"):
        full = picture(tmp_path / ("full" + name[1:]), 2)
        data = full.read_bytes()
        (tmp_path / name).write_bytes(data[: len(data) // 2])
        assert main(["restore-structure", "--source", str(a), "--edited", str(tmp_path / name),
                     "-o", str(tmp_path / "o.png")]) == 2
        err = capfd.readouterr().err.strip()  # file descriptor 2: OpenCV's own logging lands there
        assert len(err.splitlines()) == 1 and "--edited" in err and name in err, err
