"""Imports go at the top of a module. An import inside a function (a lazy import) is kept only where laziness is
the point, and says why in a comment starting with ``# lazy:`` on its line or on the line above, for example::

    def run(args):
        import diffusers  # lazy: the [edit] extra's; `vision --help` lists this command without it

The reasons that count: start-up (``import vision``, ``vision --help`` and ``vision denoise --help`` load no torch,
numba or heavy extra), optional extras (diffusers, transformers, timm, peft, accelerate, OpenEXR, mitsuba, pyoidn,
FLIP, ColorVideoVDP, bpy), compiled code that loads slowly (numba loop modules, Triton), and import cycles.

Counted with an AST walk over vision/, kernels/ and pipelines/ (tests and benchmarks excluded): every ``import``
and ``from ... import`` statement nested anywhere in a function or method body. A statement importing several
names counts once.
"""
from __future__ import annotations

import ast

from project_files import ROOT, project_files

FOLDERS = ("vision", "kernels", "pipelines")
MARKER = "# lazy:"
CEILING = 84  # in-function imports, all folders together (at most 120, each justified); lower it as imports move up


def lazy_imports() -> list[tuple[str, int, str]]:
    """``(path relative to the checkout, line, source line)`` of every import statement inside a function."""
    found = []
    for folder in FOLDERS:
        for path in project_files("*.py", under=ROOT / folder):
            text = path.read_text(encoding="utf-8")
            lines = text.splitlines()
            rel = path.relative_to(ROOT).as_posix()
            found += [(rel, n, lines[n - 1]) for n in nested_imports(ast.parse(text, filename=str(path)))]
    return found


def nested_imports(tree: ast.AST, inside: bool = False) -> list[int]:
    """Line numbers of the import statements in ``tree`` that sit inside a function, at any depth."""
    found = []
    for child in ast.iter_child_nodes(tree):
        if inside and isinstance(child, (ast.Import, ast.ImportFrom)):
            found.append(child.lineno)
        found += nested_imports(child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
    return found


def _justified(path: str, line: int, lines_of: dict) -> bool:
    """Whether the import at ``line`` carries the marker on its line or on the line above."""
    lines = lines_of.setdefault(path, (ROOT / path).read_text(encoding="utf-8").splitlines())
    here = lines[line - 1]
    above = lines[line - 2].strip() if line > 1 else ""
    return MARKER in here or above.startswith(MARKER)


def test_lazy_imports_stay_few():
    found = lazy_imports()
    per_folder = {f: sum(1 for p, _, _ in found if p.startswith(f + "/")) for f in FOLDERS}
    assert len(found) <= CEILING, f"{len(found)} imports inside functions (at most {CEILING}): {per_folder}"


def test_each_lazy_import_says_why():
    lines_of: dict = {}
    bare = [f"{p}:{n}: {text.strip()}" for p, n, text in lazy_imports()
            if not _justified(p, n, lines_of)]
    assert not bare, (f"{len(bare)} imports inside functions without a '{MARKER} <why>' comment (move them to the "
                      "top of the module, or say why they wait):\n" + "\n".join(bare))


def test_the_counter_sees_nested_imports():
    """The walk finds imports in methods, nested functions and branches, and none at module level."""
    tree = ast.parse("import os\nclass A:\n    def f(self):\n        if 1:\n            import json\n"
                     "def g():\n    def h():\n        from os import path\n    return h\n")
    assert nested_imports(tree) == [5, 8]
