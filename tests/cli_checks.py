"""Helpers shared by the command-line tests: a tiny backbone and a run folder of it, the one-line-error checks, an
unwritable folder."""
import os
from pathlib import Path

import pytest

TINY = dict(depth=4, embed_dim=32, num_heads=2)


def one_line_error(capsys, *needles) -> str:
    err = capsys.readouterr().err.strip()
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert str(n) in lines[0], (n, err)
    return lines[0]


def last_line_error(capsys, *needles) -> str:
    """For commands whose progress notes go to stderr too: the error is the last line of stderr and the only one
    that says "error", with no traceback; it holds every needle."""
    err = capsys.readouterr().err.strip()
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert "Traceback" not in err and len(errors) == 1 and err.splitlines()[-1] == errors[0], err
    for n in needles:
        assert str(n) in errors[0], (n, err)
    return errors[0]


def tiny_run(tmp_path_factory) -> Path:
    """A `vision finetune` run folder (depth, token-local head) of :data:`TINY` with untrained weights: enough for
    loading and for the commands' checks."""
    import torch

    from vision.pipelines.training.dense_model import DenseConfig, build_model, save_run_files

    run = tmp_path_factory.mktemp("run")
    cfg = DenseConfig(task="depth", head="token-local", lora_rank=0, epochs=1, batch_size=2, img_size=32, extra=TINY)
    torch.manual_seed(0)
    save_run_files(run, cfg, build_model(cfg))
    return run


def unwritable_folder(tmp_path) -> Path:
    if os.geteuid() != 0:
        d = tmp_path / "locked"
        d.mkdir()
        d.chmod(0o555)
        return d
    d = Path("/sys/kernel")
    try:
        open(d / ".vision-probe", "xb").close()
    except OSError:
        return d
    os.unlink(d / ".vision-probe")
    pytest.skip("no unwritable folder here")
