"""The registry describes and decides: for every op and every engine, the implementation registered with
the path ``explain`` names is the one that runs, and no other path's implementation runs.

Each test spies on every path of the op (a counting proxy in place of ``Path.run``), makes a call that takes the
engine under test (forced by dtype, autograd, ``use_numba``, ``backend_for``), records what the op asked the
registry (``paths.decide``), and checks that ``explain`` for that same call names the path and that exactly its
implementation ran. The Triton paths run on CPU with ``backend_for`` forced to "triton" and a stub in place of the
kernels (the PyTorch formulas), as tests/test_runtime.py does: the interpreter is too slow for this file.
"""
import ast
from pathlib import Path

import pytest
import torch

from vision.kernels import box_filter, guided_filter, local_linear_apply, local_linear_fit, runtime, structure_loss
from vision.kernels.runtime import paths
from registry_spy import check, force_triton, spies

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def spy(monkeypatch):
    """spy(op, stubs={name: implementation}) -> (hits, asked): see tests/registry_spy.py."""
    return spies(monkeypatch)


def _check(op, name, hits, asked):
    check(op, name, hits, asked)


# ------------------------------------------------------------------------------------------------ box_filter

def _box_stub():
    from vision.kernels.box import torch_path

    class Stub:  # the Triton kernels' entry points, computed by the pooling engine
        forward = staticmethod(lambda x, r, border: torch_path.box_mean(x, r, border, "torch"))
        backward = staticmethod(lambda g, r, border: torch_path.box_mean_adjoint(g, r, border, "torch"))
    return Stub


@pytest.mark.parametrize("name", ["triton", "torch+opencv", "torch"])
def test_box_filter_runs_the_path_it_explains(name, spy, monkeypatch):
    hits, asked = spy("box_filter", {"triton": _box_stub()})
    x = torch.rand(1, 2, 12, 13)
    if name == "triton":
        force_triton(monkeypatch)
    if name == "torch":
        x = x.double()  # OpenCV's sums take float32 only
    box_filter(x, 2, "reflect")
    _check("box_filter", name, hits, asked)


@pytest.mark.parametrize("name", ["triton", "torch+opencv", "torch"])
def test_box_filter_backward_runs_the_path_it_explains(name, spy, monkeypatch):
    hits, asked = spy("box_filter_backward", {"triton": _box_stub()})
    spy("box_filter", {"triton": _box_stub()})
    x = torch.rand(1, 2, 12, 13, dtype=torch.float64 if name == "torch" else torch.float32, requires_grad=True)
    if name == "triton":
        force_triton(monkeypatch)
    box_filter(x, 2, "valid").sum().backward()
    _check("box_filter_backward", name, hits, asked)


def test_a_box_filter_that_needs_autograd_takes_the_pooling_path(spy):
    hits, asked = spy("box_filter")
    box_filter(torch.rand(1, 1, 9, 9, requires_grad=True), 1)
    _check("box_filter", "torch", hits, asked)


# ------------------------------------------------------------------------------------------------ guided_filter

def _guided_stub():
    from vision.kernels.box.torch_path import TORCH
    from vision.kernels.guided import torch_path

    class Stub:
        forward = staticmethod(lambda I, p, eps, r, border, apply, need_grad=False: torch_path.forward(
            I, p, eps, r, border, apply, box=TORCH))
        backward = staticmethod(lambda saved, grads, eps, r, border, apply: torch_path.backward(
            saved, grads, eps, r, border, apply, box=TORCH))
    return Stub


@pytest.mark.parametrize("name", ["triton", "cpu-banded", "torch+opencv", "torch"])
def test_guided_filter_runs_the_path_it_explains(name, spy, monkeypatch):
    hits, asked = spy("guided_filter", {"triton": _guided_stub()})
    I, p = torch.rand(1, 3, 20, 21), torch.rand(1, 2, 20, 21)
    scale = 1
    if name == "triton":
        force_triton(monkeypatch)
    elif name == "torch+opencv":
        scale = 2  # the bands filter at scale 1 only
    elif name == "torch":
        I, p = I.double(), p.double()
    guided_filter(I, p, 3, 1e-2, scale=scale)
    _check("guided_filter", name, hits, asked)


@pytest.mark.parametrize("name", ["triton", "cpu-banded", "torch+opencv", "torch"])
def test_guided_filter_backward_runs_the_forward_path(name, spy, monkeypatch):
    hits, asked = spy("guided_filter", {"triton": _guided_stub()})
    dtype = torch.float64 if name == "torch" else torch.float32
    I = torch.rand(1, 1, 20, 21, dtype=dtype, requires_grad=True)
    p = torch.rand(1, 2, 20, 21, dtype=dtype, requires_grad=True)
    if name == "triton":
        force_triton(monkeypatch)
    guided_filter(I, p, 3, 1e-2, border="reflect", scale=2 if name == "torch+opencv" else 1).sum().backward()
    _check("guided_filter", name, hits, asked)
    assert I.grad is not None and p.grad is not None


@pytest.mark.parametrize("name", ["cpu-banded", "torch+opencv"])
def test_the_bands_ask_the_registry_about_the_guides_range(name, spy):
    """The one data-dependent step, decided inside the op through the registry (op guided_filter_bands)."""
    hits, asked = spy("guided_filter_bands")
    outer, _ = spy("guided_filter")
    I = torch.rand(1, 1, 16, 16) * (1e30 if name == "torch+opencv" else 1.0)
    guided_filter(I, torch.rand(1, 1, 16, 16), 2, 1e-2)
    _check("guided_filter_bands", name, hits, asked)
    # the rescaled step is the torch+opencv path's formulas, run through that path's implementation
    assert outer[0] == "cpu-banded" and set(outer[1:]) == ({"torch+opencv"} if name == "torch+opencv" else set())


# ------------------------------------------------------------------------------------------------ local linear

def _local_linear_stub():
    from vision.kernels.local_linear.torch_path import Engine

    return Engine("torch", numba=False)


@pytest.mark.parametrize("name", ["triton", "torch+numba", "torch+opencv", "torch"])
def test_local_linear_fit_runs_the_path_it_explains(name, spy, monkeypatch):
    hits, asked = spy("local_linear_fit", {"triton": _local_linear_stub()})
    f = torch.rand(1, 2, 16, 18, requires_grad=True)
    t = torch.rand(1, 1, 16, 18, requires_grad=True)
    if name == "triton":
        force_triton(monkeypatch)
    elif name == "torch":
        f, t = f.detach().double().requires_grad_(), t.detach().double().requires_grad_()
    with runtime.use_numba(name == "torch+numba"):
        local_linear_fit(f, t, 2, 1e-3, scale=2).sum().backward()
        _check("local_linear_fit", name, hits, asked)  # explain reads VISION_NUMBA too


@pytest.mark.parametrize("name", ["triton", "torch+numba", "torch"])
def test_local_linear_apply_runs_the_path_it_explains(name, spy, monkeypatch):
    hits, asked = spy("local_linear_apply", {"triton": _local_linear_stub()})
    f, co = torch.rand(1, 2, 16, 18, requires_grad=True), torch.rand(1, 1, 3, 8, 9, requires_grad=True)
    if name == "triton":
        force_triton(monkeypatch)
    with runtime.use_numba(name == "torch+numba"):
        local_linear_apply(f, co).sum().backward()
        _check("local_linear_apply", name, hits, asked)


def test_inputs_that_require_grad_take_the_numba_loops_they_run(spy):
    """The numba loops run inside the op, where autograd is off: explain says so for such inputs too."""
    hits, asked = spy("local_linear_fit")
    with runtime.use_numba(True):
        local_linear_fit(torch.rand(1, 2, 16, 16, requires_grad=True), torch.rand(1, 1, 16, 16), 2, 1e-3, scale=2)
        _check("local_linear_fit", "torch+numba", hits, asked)


# ------------------------------------------------------------------------------------------------ structure_loss

def _spl_stub():
    from vision.kernels.spl.op import _Torch

    return _Torch("torch")


@pytest.mark.parametrize("name", ["triton", "torch+opencv", "torch"])
def test_structure_loss_runs_the_path_it_explains(name, spy, monkeypatch):
    hits, asked = spy("structure_loss", {"triton": _spl_stub()})
    dtype = torch.float64 if name == "torch" else torch.float32
    src, edit = torch.rand(1, 3, 16, 17, dtype=dtype), torch.rand(1, 3, 16, 17, dtype=dtype, requires_grad=True)
    if name == "triton":
        force_triton(monkeypatch)
    structure_loss(src, edit, radius=2).backward()
    _check("structure_loss", name, hits, asked)


@pytest.mark.parametrize("name", ["triton", "torch+opencv", "torch"])
def test_value_and_grad_runs_the_path_it_explains(name, spy, monkeypatch):
    from vision.kernels.spl.op import value_and_grad

    hits, asked = spy("structure_loss", {"triton": _spl_stub()})
    dtype = torch.float64 if name == "torch" else torch.float32
    S, E = torch.rand(1, 1, 16, 17, dtype=dtype) - 0.5, torch.rand(1, 1, 16, 17, dtype=dtype) - 0.5
    if name == "triton":
        force_triton(monkeypatch)
    value_and_grad(S, E, None, 2, 1e-4)
    _check("structure_loss", name, hits, asked)


# ------------------------------------------------------------------------------------------------ no second decision

ENGINE_PREDICATES = {"_use_cv2", "torch_path._use_cv2", "opencv_takes", "torch_path.opencv_takes",
                     "cpu_banded.supported", "jit.enabled", "jit.refusal"}
# box/torch_path._engine: the engine of callers that pass none
ALLOWED = {("box/torch_path.py", "_engine")}


def test_no_op_module_decides_an_engine_outside_the_supports_checks():
    found = []
    for folder in ("box", "guided", "local_linear", "spl"):
        for path in sorted((ROOT / "kernels" / folder).glob("*.py")):
            rel = f"{folder}/{path.name}"
            tree = ast.parse(path.read_text(), str(path))
            for fn in ast.walk(tree):
                if not isinstance(fn, (ast.FunctionDef, ast.Lambda)):
                    continue
                for node in ast.walk(fn):
                    if isinstance(node, ast.Call) and ast.unparse(node.func) in ENGINE_PREDICATES:
                        name = getattr(fn, "name", "<lambda>")
                        if not name.endswith("_takes") and (rel, name) not in ALLOWED:
                            found.append(f"{rel}:{node.lineno} {name}() calls {ast.unparse(node.func)}")
            for node in tree.body:  # module level
                for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) else ():
                    if isinstance(sub, ast.Call) and ast.unparse(sub.func) in ENGINE_PREDICATES:
                        found.append(f"{rel}:{sub.lineno} module level calls {ast.unparse(sub.func)}")
    assert not found, found


def test_every_registered_path_carries_its_implementation():
    import vision.kernels.box.op  # noqa: F401
    import vision.kernels.guided.op  # noqa: F401
    import vision.kernels.local_linear.op  # noqa: F401
    import vision.kernels.spl.op  # noqa: F401
    import vision.kernels.linear_attention.op  # noqa: F401
    import vision.restore  # noqa: F401
    import vision.denoise.flnr  # noqa: F401
    import vision.denoise.temporal  # noqa: F401

    ops = ("box_filter", "box_filter_backward", "guided_filter", "guided_filter_bands", "local_linear_fit",
           "local_linear_apply", "structure_loss", "gla", "restore_step", "denoise.reproject", "denoise.flnr.head")
    assert set(ops) <= set(paths._PATHS), set(ops) - set(paths._PATHS)
    missing = [f"{op}:{p.name}" for op in paths._PATHS for p in paths.paths(op) if p.run is None]
    assert not missing, missing
