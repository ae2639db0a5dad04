"""The project's own files, for the tests that read the source tree.

A checkout holds more than the project: a virtual environment (``python -m venv .venv``, uv's default), ``build/``
and ``dist/`` from a wheel build, ``.git``, caches, and whatever ``.gitignore`` names. A test that walks the tree
(markers declared in one place, documents cited by the code) reads only the project's files, so none of that can
fail it or slow it down.

Example::

    from project_files import ROOT, project_files
    conftests = project_files("conftest.py")              # every conftest.py of the project, none from a venv
    sources = project_files("*.py", under=ROOT / "kernels")
"""
from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# folders that are never the project's own, whatever .gitignore says
SKIPPED = {".git", ".hg", ".svn", "build", "dist", "__pycache__", ".eggs", ".tox", ".nox", ".mypy_cache",
           ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints", "node_modules", "site-packages"}


def skipped_folder(folder: Path) -> bool:
    """True for a folder a tree walk leaves out: a virtual environment (it holds ``pyvenv.cfg``, whatever its name),
    build output, version control and caches."""
    name = folder.name
    return name in SKIPPED or name.endswith(".egg-info") or (folder / "pyvenv.cfg").is_file()


def _git_ignored(paths: list[Path]) -> set[Path]:
    """The paths that git ignores here (none when this is not a git checkout or git is missing)."""
    git = shutil.which("git")
    paths = [p for p in paths if p.is_relative_to(ROOT)]
    if not paths or git is None or not (ROOT / ".git").exists():
        return set()
    text = "\0".join(str(p.relative_to(ROOT)) for p in paths) + "\0"
    res = subprocess.run([git, "-C", str(ROOT), "check-ignore", "-z", "--stdin"], input=text,
                         capture_output=True, text=True)
    if res.returncode not in (0, 1):  # 1: nothing ignored; anything else: git cannot tell, keep every path
        return set()
    return {ROOT / p for p in res.stdout.split("\0") if p}


def project_files(pattern: str = "*", under: Path = ROOT) -> list[Path]:
    """Files whose name matches ``pattern`` (``fnmatch``) below ``under``, sorted, leaving out the folders
    :func:`skipped_folder` names and everything git ignores."""
    found = []
    for folder, dirs, files in os.walk(under):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not skipped_folder(here / d))
        found += [here / f for f in sorted(files) if fnmatch.fnmatch(f, pattern)]
    ignored = _git_ignored(found)
    return [p for p in found if p not in ignored]
