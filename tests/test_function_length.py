"""Functions stay short enough to read: none over 120 lines, and at most a few over 80, in vision/, pipelines/
and kernels/ (tests excluded). A long function is split into named steps, each a private function with a
one-line docstring, as diffusers splits a pipeline's ``__call__`` into ``check_inputs``, ``prepare_latents``
and the loop.

A function's length is ``end_lineno - lineno + 1`` of its ``def`` (its decorators not counted, its docstring
and its nested functions counted). Methods and nested functions are measured on their own as well.

Triton kernels count too. A step taken out of a kernel is itself a ``@triton.jit`` function, which Triton inlines
into the one GPU program: the colour guided filter's backward was split so (its running sums and its per-pixel
solve), and compiled for sm_90 it keeps 168 registers and no spills, as before.
"""
from __future__ import annotations

import ast
import functools

from project_files import ROOT, project_files

FOLDERS = ("vision", "pipelines", "kernels")
LONG = 80  # lines: at most MAX_LONG functions may be longer
MAX_LONG = 3  # today: frame.denoise and local_linear_fit (their docstrings are most of them), spl's _vsum_fit
TOO_LONG = 120  # lines: no function may be longer
ALLOWED_TOO_LONG: set = set()


@functools.lru_cache(maxsize=1)
def function_lengths() -> tuple[tuple[int, str, str], ...]:
    """``(lines, path relative to the checkout, name)`` of every function and method, Triton kernels included."""
    found = []
    for folder in FOLDERS:
        for path in project_files("*.py", under=ROOT / folder):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            rel = path.relative_to(ROOT).as_posix()
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.append((node.end_lineno - node.lineno + 1, rel, node.name))
    return tuple(sorted(found, reverse=True))


def _listing(rows) -> str:
    return "\n".join(f"  {n} lines  {path} {name}" for n, path, name in rows)


def test_the_walk_measures_the_source_tree():
    """The walk finds the project's functions (a wrong root would make the other tests pass on nothing)."""
    rows = function_lengths()
    assert len(rows) > 500, len(rows)
    assert any(path == "pipelines/training/denoiser.py" and name == "train" for _, path, name in rows)


def test_no_function_is_over_120_lines():
    over = [r for r in function_lengths() if r[0] > TOO_LONG and (r[1], r[2]) not in ALLOWED_TOO_LONG]
    assert not over, (f"{len(over)} function(s) over {TOO_LONG} lines; split each into named steps:\n"
                      + _listing(over))


def test_at_most_three_functions_are_over_80_lines():
    over = [r for r in function_lengths() if r[0] > LONG]
    assert len(over) <= MAX_LONG, (f"{len(over)} functions over {LONG} lines (at most {MAX_LONG}); split the "
                                   f"longest into named steps:\n" + _listing(over))
