"""Tampered training state and links that lead in a circle are one line with exit 2, never a traceback:
`vision train-denoiser --resume` and `vision finetune --resume` with damaged state files or a hand-edited
checkpoint manifest, symbolic-link loops as a run folder, an output or the data, and meta tensors in the
kernels' checks (shapes only: they give the shapes that real tensors give)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from vision.bundled import asset_path
from vision.io import write_image
from vision.pipelines.cli import main

from cli_checks import depth_pairs, finetune_args, last_line_error, random_bytes, tiny_run  # noqa: E402



@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def _train_denoiser_args(data: Path) -> list[str]:
    return ["train-denoiser", "--data", str(data), "--epochs", "2", "--steps", "2", "--batch", "2", "--crop", "32",
            "--widths", "4,6,8", "--hidden", "0", "--quiet"]


@pytest.fixture(scope="module")
def denoiser_state(tmp_path_factory):
    root = tmp_path_factory.mktemp("denoiser")
    shutil.copytree(asset_path("scenes"), root / "scenes")
    assert main(_train_denoiser_args(root / "scenes") + ["-o", str(root / "w.safetensors")]) == 0
    return root


@pytest.fixture(scope="module")
def finetune_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    data = depth_pairs(root / "data", 40)
    assert main(finetune_args(data) + ["-o", str(root / "run")]) == 0
    return root


def _edit_manifest(change):
    def edit(folder: Path) -> None:
        manifest = json.loads((folder / "checkpoint.json").read_text())
        change(manifest)
        (folder / "checkpoint.json").write_text(json.dumps(manifest))
    return edit


DENOISER_CASES = {
    "random model.safetensors": (lambda f: random_bytes(f / "model.safetensors"), "cannot be loaded"),
    "random trainer.safetensors": (lambda f: random_bytes(f / "trainer.safetensors"), "cannot be loaded"),
    "random optimizer.bin": (lambda f: random_bytes(f / "optimizer.bin"), "damaged"),
    "random scheduler.bin": (lambda f: random_bytes(f / "scheduler.bin"), "damaged"),
    "random random_states_0.pkl": (lambda f: random_bytes(f / "random_states_0.pkl"),
                                   "random_states_0.pkl is damaged"),
    "epoch x": (_edit_manifest(lambda m: m["state"].update(epoch="x")), "'epoch'"),
    "seconds x": (_edit_manifest(lambda m: m["state"].update(seconds="x")), "'seconds'"),
    "history 5": (_edit_manifest(lambda m: m["state"].update(history=5)), "'history'"),
    "best x": (_edit_manifest(lambda m: m["state"].update(best="x")), "'best'"),
    "step -5": (_edit_manifest(lambda m: m["state"].update(step=-5)), "'step'"),
    "state [1, 2]": (_edit_manifest(lambda m: m.update(state=[1, 2])), "JSON object"),
    "no settings": (_edit_manifest(lambda m: m["state"].pop("settings")), "'settings'"),
    "settings [1]": (_edit_manifest(lambda m: m["state"].update(settings=[1])), "'settings'"),
    "nested 100k deep": (lambda f: (f / "checkpoint.json").write_text('{"state": ' * 100000 + "{}" + "}" * 100000),
                         "not a train-denoiser checkpoint"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(DENOISER_CASES))
def test_train_denoiser_resume_from_a_tampered_checkpoint_is_one_line(denoiser_state, tmp_path, capsys, case):
    tamper, needle = DENOISER_CASES[case]
    folder = tmp_path / "w.safetensors.state"
    shutil.copytree(denoiser_state / "w.safetensors.state", folder)
    tamper(folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    capsys.readouterr()
    assert main(_train_denoiser_args(denoiser_state / "scenes") + ["-o", str(tmp_path / "w.safetensors"),
                                                                   "--resume"]) == 2
    last_line_error(capsys, needle)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # the inputs are untouched
    assert not (tmp_path / "w.safetensors").exists()


def _resume_state(change):
    """Rewrite state/resume.safetensors with its JSON state changed (and the manifest's size to match)."""
    def edit(run: Path) -> None:
        from safetensors import safe_open
        from safetensors.torch import save_file

        path = run / "state" / "resume.safetensors"
        with safe_open(str(path), "pt") as fh:
            meta, tensors = fh.metadata(), {k: fh.get_tensor(k) for k in fh.keys()}
        state = json.loads(meta["state"])
        change(state)
        save_file(tensors, str(path), metadata=dict(meta, state=json.dumps(state)))
        manifest = json.loads((run / "state" / "checkpoint.json").read_text())
        manifest["files"]["resume.safetensors"] = path.stat().st_size
        (run / "state" / "checkpoint.json").write_text(json.dumps(manifest))
    return edit


FINETUNE_CASES = {
    "random optimizer.bin": (lambda r: random_bytes(r / "state" / "optimizer.bin"), "damaged"),
    "random model.safetensors": (lambda r: random_bytes(r / "state" / "model.safetensors"), "damaged"),
    "random random_states_0.pkl": (lambda r: random_bytes(r / "state" / "random_states_0.pkl"),
                                   "random_states_0.pkl is damaged"),
    "history [5]": (_resume_state(lambda s: s.update(history=[5])), "'history'"),
    "history 5": (_resume_state(lambda s: s.update(history=5)), "'history'"),
    "epoch x": (_resume_state(lambda s: s.update(epoch="x")), "'epoch'"),
    "history epoch x": (_resume_state(lambda s: s.update(history=[{"epoch": "x"}])), "'history'"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(FINETUNE_CASES))
def test_finetune_resume_from_tampered_state_is_one_line(finetune_run, tmp_path, capsys, case):
    tamper, needle = FINETUNE_CASES[case]
    run = tmp_path / "run"
    shutil.copytree(finetune_run / "run", run)
    tamper(run)
    before = {p.name: p.read_bytes() for p in (run / "state").iterdir()}
    capsys.readouterr()
    assert main(finetune_args(finetune_run / "data") + ["-o", str(run), "--resume"]) == 2
    last_line_error(capsys, needle)
    assert {p.name: p.read_bytes() for p in (run / "state").iterdir()} == before


# --------------------------------------------------------------------------- links in a circle

@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return tiny_run(tmp_path_factory)


@pytest.mark.parametrize("case", ["predict RUN", "predict -o", "predict -o inside", "evaluate --json",
                                  "finetune -o", "train-denoiser --data"])
def test_a_loop_of_symbolic_links_is_one_line(run_dir, tmp_path, capsys, case):
    loop = tmp_path / "a"
    os.symlink(tmp_path / "b", loop)
    os.symlink(loop, tmp_path / "b")
    image = tmp_path / "img.png"
    write_image(image, np.random.default_rng(0).random((32, 32, 3), dtype=np.float32))
    argv = {
        "predict RUN": ["predict", str(loop), str(image), "-o", str(tmp_path / "out")],
        "predict -o": ["predict", str(run_dir), str(image), "-o", str(loop)],
        "predict -o inside": ["predict", str(run_dir), str(image), "-o", str(loop / "x")],
        "evaluate --json": ["evaluate", str(run_dir), "--data", str(tmp_path), "--json", str(loop)],
        "finetune -o": ["finetune", "--task", "depth", "--data", str(asset_path("scenes")), "-o", str(loop)],
        "train-denoiser --data": ["train-denoiser", "--data", str(loop), "-o", str(tmp_path / "w.safetensors")],
    }[case]
    assert main(argv) == 2
    last_line_error(capsys, "symbolic links", str(loop))


# --------------------------------------------------------------------------- meta tensors

def test_meta_tensors_give_the_shapes_real_tensors_give():
    from vision.kernels import local_linear_fit, structure_loss

    real = [torch.rand(1, 3, 16, 16), torch.rand(1, 1, 16, 16)]
    meta = [t.to("meta") for t in real]
    assert local_linear_fit(*meta, 2, 1e-3).shape == local_linear_fit(*real, 2, 1e-3).shape
    assert local_linear_fit(*meta, 2, 1e-3).is_meta
    a, b = torch.rand(1, 3, 16, 16), torch.rand(1, 3, 16, 16)
    assert structure_loss(a.to("meta"), b.to("meta")).shape == structure_loss(a, b).shape
