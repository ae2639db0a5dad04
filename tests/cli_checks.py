"""Helpers shared by the command-line tests: a tiny backbone, a run folder of it and the finetune arguments that
train one, depth training pairs, the one-line-error checks, random bytes over a file, an unwritable folder."""
import json
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


def finetune_args(data: Path) -> list[str]:
    """`vision finetune` of :data:`TINY` for depth on ``data``, stopped after its first of two epochs, so that its
    state/ holds a complete checkpoint (add ``-o``)."""
    return ["finetune", "--task", "depth", "--data", str(data), "--img-size", "32", "--epochs", "2", "--stop-after",
            "1", "--quiet", "--lora-rank", "0", "--threads", "1", "--batch-size", "4", "--backbone-kwargs",
            json.dumps(TINY)]


def depth_pairs(root: Path, n: int) -> Path:
    """``root`` with images/ + targets/ holding n 32 x 32 random image / depth pairs; returns ``root``."""
    import numpy as np

    from vision.io import write_image

    rng = np.random.default_rng(0)
    (root / "images").mkdir(parents=True)
    (root / "targets").mkdir()
    for i in range(n):
        write_image(root / "images" / f"a{i}.png", rng.random((32, 32, 3), dtype=np.float32))
        np.save(root / "targets" / f"a{i}.npy", 1 + rng.random((32, 32, 1), dtype=np.float32))
    return root


def random_bytes(path: Path) -> None:
    """``path`` overwritten with random bytes of its own size (so a manifest's sizes still match)."""
    import numpy as np

    path.write_bytes(np.random.default_rng(1).integers(0, 256, path.stat().st_size, dtype=np.uint8).tobytes())


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
