"""Extras per product: pyproject.toml's extras match the table the commands read (vision.pipelines.extras), and
with a product's packages missing each command says in one line which extra to install (exit 2).

A missing package is simulated in a fresh interpreter by ``sys.modules[name] = None`` before anything imports it:
``import name`` then fails with ``ModuleNotFoundError`` naming it and ``importlib.util.find_spec(name)`` answers
None, as where the package is not installed.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from vision.pipelines.extras import DISTRIBUTIONS, EXTRAS, extra_providing, install_line, missing_extra

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "assets"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# what only the editing, dense and training extras bring: a [denoise] install has none of it
NOT_IN_DENOISE = ("diffusers", "transformers", "peft", "accelerate", "timm", "huggingface_hub")
NOT_IN_CORE = NOT_IN_DENOISE + ("OpenEXR", "Imath")


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def _distribution(module: str) -> str:
    return {"drjit": "mitsuba"}.get(module, DISTRIBUTIONS.get(module, module)).lower().replace("_", "-")


def test_the_extras_table_is_pyprojects():
    extras = PROJECT["optional-dependencies"]
    for extra, modules in EXTRAS.items():
        assert {_distribution(m) for m in modules} == _names(extras[extra]), extra
    products = set().union(*(_names(extras[e]) for e in ("denoise", "edit", "dense", "train-denoiser")))
    assert _names(extras["all"]) == products
    assert _names(extras["test"]) >= products | _names(extras["render"])  # CI installs .[test] alone


def test_the_core_install_brings_no_product_package():
    assert not _names(PROJECT["dependencies"]) & {_distribution(m) for m in NOT_IN_CORE}
    assert not _names(PROJECT["optional-dependencies"]["denoise"]) & {_distribution(m) for m in NOT_IN_DENOISE}


def test_the_missing_extra_line():
    err = ModuleNotFoundError("No module named 'diffusers'", name="diffusers")
    assert missing_extra(("edit",), err) == ('vision edit needs the [edit] extra (diffusers is not installed): '
                                             'pip install "locallinear-vision[edit]"')
    # transformers is in [edit] and [dense]: the command's own extra is named
    assert extra_providing("transformers.models", ("finetune",)) == "dense"
    assert extra_providing("transformers", ("edit",)) == "edit"
    assert extra_providing("pyoidn", ("bench", "denoise")) == "bench"  # a peer, not the product
    assert missing_extra(("edit",), ModuleNotFoundError("No module named 'vision.nope'", name="vision.nope")) is None
    assert missing_extra(("edit",), ImportError("cannot import name 'x'")) is None
    assert install_line("all") == 'pip install "locallinear-vision[all]"'


SCRIPT = """
import contextlib, io, json, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # not installed, as far as import and find_spec can tell
from vision.pipelines.cli import main
results = []
for argv in json.loads(sys.argv[2]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    results.append([rc, err.getvalue()])
print(json.dumps(results))
"""


def _run_without(modules, commands: list[list[str]], tmp_path: Path) -> list[tuple[int, str]]:
    res = subprocess.run([sys.executable, "-c", SCRIPT, ",".join(modules), json.dumps(commands)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return [tuple(r) for r in json.loads(res.stdout.strip().splitlines()[-1])]


def test_vision_edit_without_diffusers_says_which_extra(tmp_path, monkeypatch, capsys):
    from vision.pipelines.cli import main

    monkeypatch.setitem(sys.modules, "diffusers", None)
    assert main(["edit", str(ASSETS / "photos" / "coffee.png"), "--prompt", "snow", "-o", str(tmp_path / "e.png")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        'vision edit needs the [edit] extra (diffusers is not installed): pip install "locallinear-vision[edit]"']


@pytest.mark.slow
def test_each_command_without_its_extra_says_which_in_one_line(tmp_path):
    """A [denoise] install: every editing, dense and training command and bench names its extra, exit 2."""
    photo, scenes = str(ASSETS / "photos" / "coffee.png"), str(ASSETS / "scenes")
    run = str(ASSETS / "weights" / "dense" / "depth")
    cases = {
        ("edit", "edit"): ["edit", photo, "--prompt", "snow", "-o", str(tmp_path / "e.png")],
        ("finetune", "dense"): ["finetune", "--task", "depth", "--data", scenes, "-o", str(tmp_path / "ft")],
        ("predict", "dense"): ["predict", run, photo, "-o", str(tmp_path / "pr")],
        ("evaluate", "dense"): ["evaluate", run, "--data", scenes, "--split", "all"],
        ("train-denoiser", "train-denoiser"): ["train-denoiser", "--data", scenes, "-o", str(tmp_path / "w.safetensors")],
        ("bench edit", "edit"): ["bench", "edit"],
        ("bench backbone", "dense"): ["bench", "backbone"],
        ("bench dense-head", "dense"): ["bench", "dense-head"],
    }
    results = _run_without(NOT_IN_DENOISE, list(cases.values()), tmp_path)
    for (command, extra), (rc, err) in zip(cases, results):
        lines = [ln for ln in err.splitlines() if "needs the" in ln]
        assert rc == 2 and len(lines) == 1, (command, rc, err)
        assert re.fullmatch(rf'vision {command} needs the \[{extra}\] extra \(\w+ is not installed\): '
                            rf'pip install "locallinear-vision\[{extra}\]"', lines[0]), lines[0]
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # nothing written


@pytest.mark.slow
def test_denoising_without_its_extra_says_which(tmp_path):
    """The core install alone: `vision denoise` and the denoise demo name [denoise]; the demo skips the sections
    whose extra is missing with that line and runs the rest."""
    frame = str(ASSETS / "scenes" / "scene_00000" / "frame_00.exr")
    results = _run_without(NOT_IN_CORE, [["denoise", frame, "-o", str(tmp_path / "d")],
                                         ["demo", "--only", "denoise", "-o", str(tmp_path / "demo")],
                                         ["demo", "--only", "dense", "-o", str(tmp_path / "demo")]], tmp_path)
    (rc1, err1), (rc2, err2), (rc3, err3) = results
    # the first module of the extra the command reaches is named: OpenEXR, since the frames' headers are read
    # before anything else loads
    assert rc1 == 2 and err1.strip().splitlines() == [
        'vision denoise needs the [denoise] extra (OpenEXR is not installed): '
        'pip install "locallinear-vision[denoise]"']
    assert rc2 == 2 and 'vision demo --only denoise needs the [denoise] extra' in err2
    assert rc3 == 2 and 'vision demo --only dense needs the [dense] extra (timm is not installed)' in err3


def test_the_demo_skips_a_section_without_its_extra_and_runs_the_others(tmp_path, monkeypatch, capsys):
    import types

    from vision.pipelines.cli import demo, main

    def missing(out_dir, device):
        raise ModuleNotFoundError("No module named 'timm'", name="timm")

    ran = []
    monkeypatch.setitem(sys.modules, "demo_needs_timm", types.SimpleNamespace(TITLE="needs timm", run=missing))
    monkeypatch.setitem(sys.modules, "demo_core", types.SimpleNamespace(
        TITLE="core", run=lambda out, device: ran.append(out) or []))
    monkeypatch.setattr(demo, "SECTIONS", {"dense": "demo_needs_timm", "guided-filter": "demo_core"})
    assert main(["demo", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert ran == [tmp_path / "guided-filter"]
    assert 'vision demo --only dense needs the [dense] extra (timm is not installed): ' \
           'pip install "locallinear-vision[dense]"' in out.err.splitlines()
    assert main(["demo", "-o", str(tmp_path), "--only", "dense"]) == 2


@pytest.mark.slow
def test_a_denoise_install_runs_vision_denoise_and_its_demo(tmp_path):
    """With nothing of the editing, dense or training extras: `vision denoise` and `vision demo --only denoise`."""
    frame = str(ASSETS / "scenes" / "scene_00000" / "frame_00.exr")
    results = _run_without(NOT_IN_DENOISE + ("pyoidn",), [
        ["denoise", frame, "-o", str(tmp_path / "d"), "--model", "flr", "-q"],
        ["demo", "--only", "denoise", "-o", str(tmp_path / "demo")]], tmp_path)
    assert [rc for rc, _ in results] == [0, 0], results
    assert (tmp_path / "d" / "frame_00.exr").is_file()
    assert (tmp_path / "demo" / "denoise" / "scene_00000_comparison.png").is_file()
