"""Functions stay short enough to read: none over 120 lines, and at most a few over 80, in vision/, pipelines/
and kernels/ (tests excluded). A long function is split into named steps, each a private function with a
one-line docstring, as diffusers splits a pipeline's ``__call__`` into ``check_inputs``, ``prepare_latents``
and the loop.

A function's length is ``end_lineno - lineno + 1`` of its ``def`` (its decorators not counted, its docstring
and its nested functions counted). Methods and nested functions are measured on their own as well.

Triton kernels (decorated with ``triton.jit``, or with ``jit`` imported from triton) are left out: a kernel body
is compiled into one GPU program, its loads, stores and loop-carried accumulators in registers; a step taken
out of it must itself be a ``@triton.jit`` function, whose arguments are pointers and ``tl.constexpr`` block
sizes, so splitting reads no better and can change what the compiler keeps in registers.
"""
from __future__ import annotations

import ast
import functools

from project_files import ROOT, project_files

FOLDERS = ("vision", "pipelines", "kernels")
LONG = 80  # lines: at most MAX_LONG functions may be longer
MAX_LONG = 2  # today: frame.denoise (its docstring is most of it) and local_linear_fit
TOO_LONG = 120  # lines: no function may be longer
ALLOWED_TOO_LONG: set = set()


def _triton_names(tree: ast.Module) -> set[str]:
    """The names that mean Triton's jit in this module: ``jit`` when it is imported from triton."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "triton":
            names |= {a.asname or a.name for a in node.names if a.name == "jit"}
    return names


def _is_triton_kernel(fn: ast.FunctionDef, jit_names: set[str]) -> bool:
    """Whether ``fn`` is decorated with ``triton.jit``, ``triton.jit(...)`` or triton's ``jit`` by another name."""
    for deco in fn.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Attribute) and target.attr == "jit" and isinstance(target.value, ast.Name) \
                and target.value.id == "triton":
            return True
        if isinstance(target, ast.Name) and target.id in jit_names:
            return True
    return False


@functools.lru_cache(maxsize=1)
def function_lengths() -> tuple[tuple[int, str, str], ...]:
    """``(lines, path relative to the checkout, name)`` of every function and method outside Triton kernels."""
    found = []
    for folder in FOLDERS:
        for path in project_files("*.py", under=ROOT / folder):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            jit_names = _triton_names(tree)
            rel = path.relative_to(ROOT).as_posix()
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _is_triton_kernel(node, jit_names):
                    found.append((node.end_lineno - node.lineno + 1, rel, node.name))
    return tuple(sorted(found, reverse=True))


def _listing(rows) -> str:
    return "\n".join(f"  {n} lines  {path} {name}" for n, path, name in rows)


def test_the_walk_measures_the_source_tree():
    """The walk finds the project's functions (a wrong root would make the other tests pass on nothing)."""
    rows = function_lengths()
    assert len(rows) > 500, len(rows)
    assert any(path == "pipelines/training/denoiser.py" and name == "train" for _, path, name in rows)


def test_triton_kernels_are_recognised():
    tree = ast.parse("import triton\nfrom triton import jit as tj\n"
                     "@triton.jit\ndef a(): pass\n@triton.jit(do_not_specialize=['H'])\ndef b(): pass\n"
                     "@tj\ndef c(): pass\n@other.jit\ndef d(): pass\ndef e(): pass\n")
    names = _triton_names(tree)
    kernels = [f.name for f in tree.body if isinstance(f, ast.FunctionDef) and _is_triton_kernel(f, names)]
    assert kernels == ["a", "b", "c"]


def test_no_function_is_over_120_lines():
    over = [r for r in function_lengths() if r[0] > TOO_LONG and (r[1], r[2]) not in ALLOWED_TOO_LONG]
    assert not over, (f"{len(over)} function(s) over {TOO_LONG} lines; split each into named steps:\n"
                      + _listing(over))


def test_at_most_three_functions_are_over_80_lines():
    over = [r for r in function_lengths() if r[0] > LONG]
    assert len(over) <= MAX_LONG, (f"{len(over)} functions over {LONG} lines (at most {MAX_LONG}); split the "
                                   f"longest into named steps:\n" + _listing(over))
