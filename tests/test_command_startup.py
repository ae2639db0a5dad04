"""A command's parser loads nothing heavy: ``vision COMMAND --help`` (which builds that command's parser alone) and
``vision --help`` never import the module that does the command's work (``cli/COMMAND_run.py``, with torch and the
command's extra at its top); only ``finetune``, whose option defaults come from the training config, loads torch."""
import json
import subprocess
import sys

import pytest

from vision.pipelines.cli import COMMANDS

LIGHT = ("demo", "restore-structure", "render-scenes", "edit", "denoise", "predict", "evaluate", "train-denoiser",
         "blender-addon")
HEAVY = ("torch", "numba", "OpenEXR", "diffusers", "transformers", "timm", "accelerate", "mitsuba")

SCRIPT = """
import json, sys
from vision.pipelines.cli import build_parser
build_parser(sys.argv[1] or None)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in sys.argv[2].split(",")
                        or m.startswith("vision.pipelines.cli.") and m.endswith("_run"))))
"""


def _loaded(command: str, heavy=HEAVY) -> list[str]:
    """What building ``command``'s parser ("": every command's, as ``vision --help``) loads of ``heavy`` and of
    the commands' ``_run`` modules."""
    res = subprocess.run([sys.executable, "-c", SCRIPT, command, ",".join(heavy)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # ten fresh processes, one of which (every parser) imports torch: 3-6 s on 2 cores
def test_command_parsers_load_no_torch_and_no_run_module():
    assert set(LIGHT) <= set(COMMANDS)
    loaded = {command: _loaded(command) for command in LIGHT}
    assert loaded == {command: [] for command in LIGHT}
    assert [m for m in _loaded("") if m.endswith("_run")] == []  # `vision --help`: every parser, no command's work


def test_denoise_parser_loads_not_even_numpy():
    """`vision denoise --help` is timed by `vision bench startup`: its parser needs the buffer table and nothing of
    the frame files' readers (numpy, OpenEXR)."""
    assert _loaded("denoise", ("numpy", "OpenEXR", "tqdm")) == []
