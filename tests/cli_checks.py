"""Helpers shared by the command-line tests: a tiny backbone, the one-line-error check, an unwritable folder."""
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
