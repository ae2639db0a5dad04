"""Static types of the public API: mypy sees the real signatures behind the lazy exports.

The exports resolve on first access (PEP 562, ``kernels/_lazy.py``), which a type checker cannot follow; each lazy
table therefore has an ``if TYPE_CHECKING:`` import of the same names beside it, and
``test_type_checking_imports_match_the_lazy_tables`` keeps the two equal (the table stays the source).

Where mypy finds the package: a wheel puts ``vision/kernels`` inside ``vision/`` (with ``vision/py.typed``), and so
does an editable install made with ``pip install -e . --config-settings editable_mode=strict`` (a tree of links
under ``build/``, named by a path in a ``.pth`` file, checked by hand with mypy and this file). The default
(lenient) editable install maps ``kernels/`` onto ``vision.kernels`` with an import hook, which mypy and pyright
do not run: there they find ``vision`` at most, never ``vision.kernels``. So when the package under test is mapped
by such a hook, this test lays out that same tree of links itself and hands it to mypy (``MYPYPATH``).
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import tempfile
from pathlib import Path
from typing import Iterable

import pytest

pytestmark = pytest.mark.slow  # mypy reads torch's stubs: ~20 s cold on 2 cores, a few seconds with its cache

TESTS = Path(__file__).parent
LAZY_PACKAGES = ("vision", "vision.kernels", "vision.pipelines")
BAD = '''
import torch
from typing import Any
from vision.kernels import GuidedFilter, guided_filter, local_linear_fit
from vision.pipelines import enable_structure_preservation
import vision

x = torch.rand(1, 3, 8, 8)
guided_filter(x, x, "2", 1e-2)
GuidedFilter(radius=4.5, eps=1e-2)
local_linear_fit(x, x, 2, 1e-2, scale="2")
vision.StructurePreservationLoss(radius="5")
def f(pipe: Any) -> None:
    enable_structure_preservation(pipe, start="late")
'''
BAD_LINES = {9, 10, 11, 12, 14}  # one error each, where the wrong argument is
CONFIG = """[mypy]
warn_unused_configs = False
[mypy-vision.*]
follow_imports = silent
[mypy-diffusers.*,transformers.*,timm.*,accelerate.*,peft.*,kornia.*,numba.*,cv2.*,triton.*,huggingface_hub.*,safetensors.*,scipy.*,OpenEXR.*,Imath.*,tqdm.*,mitsuba.*,fla.*]
follow_imports = skip
ignore_missing_imports = True
"""


def _type_checking_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom), ast.unparse(stmt)
                names |= {alias.asname or alias.name for alias in stmt.names}
    return names


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_type_checking_imports_match_the_lazy_tables(package):
    module = importlib.import_module(package)
    assert _type_checking_names(Path(module.__file__)) == set(module._LAZY), (
        f"{module.__file__}: the TYPE_CHECKING imports must name exactly the lazy table's names")


def _package_folders() -> dict[str, Path]:
    import vision

    folders = {"vision": Path(vision.__file__).parent}
    for sub in ("kernels", "pipelines", "assets"):
        spec = importlib.util.find_spec(f"vision.{sub}")
        if spec is not None and spec.submodule_search_locations:
            folders[sub] = Path(list(spec.submodule_search_locations)[0])
    return folders


def _search_path(root: Path) -> list[str]:
    """[] when mypy finds the installed package by itself (its folders nest as in a wheel), else a folder holding
    the link tree of a strict editable install."""
    folders = _package_folders()
    top = folders["vision"]
    if all(path == top / sub for sub, path in folders.items() if sub != "vision"):
        return []
    tree = root / "vision"
    tree.mkdir(parents=True, exist_ok=True)
    for child in top.iterdir():
        if child.name != "__pycache__" and not (tree / child.name).exists():
            (tree / child.name).symlink_to(child)
    for sub, path in folders.items():
        if sub != "vision" and not (tree / sub).exists():
            (tree / sub).symlink_to(path)
    return [str(root)]


def _mypy(files: Iterable[Path], tmp_path: Path) -> tuple[str, int]:
    api = pytest.importorskip("mypy.api")
    config = tmp_path / "mypy.ini"
    config.write_text(CONFIG)
    cache = Path(tempfile.gettempdir()) / f"vision-mypy-cache-{os.getuid() if hasattr(os, 'getuid') else 0}"
    env = os.environ.copy()
    extra = _search_path(tmp_path / "links")
    old = os.environ.get("MYPYPATH")
    os.environ["MYPYPATH"] = os.pathsep.join(extra + ([old] if old else []))
    cwd = os.getcwd()
    os.chdir(tmp_path)  # not the checkout, whose vision/ has no kernels/ inside
    try:
        out, err, status = api.run(["--config-file", str(config), "--cache-dir", str(cache), "--no-color-output",
                                    "--show-error-codes", "--hide-error-context", *map(str, files)])
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
    assert "Cannot find implementation" not in out, out
    assert status in (0, 1), out + err
    return out, status


def test_mypy_sees_the_real_signatures(tmp_path):
    bad = tmp_path / "bad_usage.py"
    bad.write_text(BAD)
    out, status = _mypy([TESTS / "typing_usage.py", bad], tmp_path)
    lines = [line for line in out.splitlines() if ": error:" in line]
    good = [line for line in lines if "typing_usage.py" in line]
    assert not good, "\n".join(good)
    flagged = {int(line.split(":")[1]) for line in lines if "bad_usage.py" in line}
    assert flagged == BAD_LINES, out
    assert 'Argument 3 to "guided_filter" has incompatible type "str"; expected "int"' in out, out
