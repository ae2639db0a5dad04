"""`vision finetune --resume` from a checkpoint whose state file was overwritten with random bytes of the same size
(so the checkpoint manifest's sizes still match) or whose resume state was hand-edited: one line, exit 2, that
names the damaged file itself (not only its folder), no traceback, and every file of the run (and beside it) left as
it was."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from vision.pipelines.cli import main

from cli_checks import depth_pairs, finetune_args, last_line_error, random_bytes  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run of the tiny backbone stopped after its first epoch: state/ holds a complete checkpoint."""
    root = tmp_path_factory.mktemp("finetune")
    depth_pairs(root / "data", 24)
    assert main(finetune_args(root / "data") + ["-o", str(root / "run")]) == 0
    assert (root / "run" / "state" / "optimizer.bin").is_file()
    return root


def _random_bytes(name):
    def tamper(run: Path) -> None:
        random_bytes(run / "state" / name)
    return tamper


def _history(value):
    def tamper(run: Path) -> None:
        from safetensors import safe_open
        from safetensors.torch import save_file

        path = run / "state" / "resume.safetensors"
        with safe_open(str(path), "pt") as fh:
            meta, tensors = fh.metadata(), {k: fh.get_tensor(k) for k in fh.keys()}
        save_file(tensors, str(path), metadata=dict(meta, state=json.dumps(dict(json.loads(meta["state"]),
                                                                                 history=value))))
        manifest = json.loads((run / "state" / "checkpoint.json").read_text())
        manifest["files"]["resume.safetensors"] = path.stat().st_size  # the manifest agrees: only the content lies
        (run / "state" / "checkpoint.json").write_text(json.dumps(manifest))
    return tamper


def _rng_states(run: Path) -> None:
    """A weights-only torch file that loads but holds no RNG states a generator takes (Accelerate's own reading of
    it would give up without a word), the manifest agreeing on its size."""
    import torch

    path = run / "state" / "random_states_0.pkl"
    torch.save({"step": 0, "random_state": 5, "numpy_random_seed": 6, "torch_manual_seed": torch.zeros(3)}, path)
    manifest = json.loads((run / "state" / "checkpoint.json").read_text())
    manifest["files"]["random_states_0.pkl"] = path.stat().st_size
    (run / "state" / "checkpoint.json").write_text(json.dumps(manifest))


CASES = {
    "random random_states_0.pkl": (_random_bytes("random_states_0.pkl"), "state/random_states_0.pkl"),
    "RNG states of the wrong kind": (_rng_states, "state/random_states_0.pkl"),
    "random optimizer.bin": (_random_bytes("optimizer.bin"), "state/optimizer.bin"),
    "random state/model.safetensors": (_random_bytes("model.safetensors"), "state/model.safetensors"),
    "random scheduler.bin": (_random_bytes("scheduler.bin"), "state/scheduler.bin"),
    "history [5]": (_history([5]), "state/resume.safetensors"),
}


def _digests(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_a_tampered_state_file_is_one_line_naming_it(trained, tmp_path, capsys, case):
    tamper, name = CASES[case]
    run = tmp_path / "run"
    shutil.copytree(trained / "run", run)
    tamper(run)
    before = _digests(tmp_path)
    capsys.readouterr()
    assert main(finetune_args(trained / "data") + ["-o", str(run), "--resume"]) == 2
    last_line_error(capsys, str(run / name))
    assert _digests(tmp_path) == before  # nothing written, renamed or removed
