"""The registry decides the engines outside the image ops too: gated linear attention (op ``gla``: fla's
``chunk_gla`` or our chunked PyTorch scan) and the restore loop (op ``restore_step``: the fused Triton SGD step or a
``torch.optim`` step). For each op and engine a call is made with that engine forced, and ``explain`` for the call
the op asked the registry about must name the path whose implementation ran, and no other path's may run.

fla does not run on CPU: its path runs here with a stand-in for ``fla.ops.gla.chunk_gla`` (the float64 recurrence,
which takes the same arguments) and its CUDA condition waived, so the path's own code (flipping, stacking both
directions on the batch axis, merging) still runs and is compared with the PyTorch path. The fused restore step is
replaced by the eager SGD loop, as tests/test_registry_runs.py replaces the Triton kernels.
"""
import ast
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import vision.restore as restore
from vision.kernels import gla, gla_bidirectional, runtime
from vision.kernels.linear_attention import naive_recurrent_gla
from vision.kernels.linear_attention import op as gla_op
from vision.kernels.runtime import paths
from registry_spy import check, force_triton, spies

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def spy(monkeypatch):
    """spy(op, stubs={name: implementation}) -> (hits, asked): see tests/registry_spy.py."""
    return spies(monkeypatch)


def _check(op, name, hits, asked):
    check(op, name, hits, asked, once=True)


# ------------------------------------------------------------------------------------------------ gla

def _inputs(T=37, per_head=False):
    gen = torch.Generator().manual_seed(3)
    B, H, K, V = 2, 2, 4, 3
    q, k, k2 = (torch.randn(B, T, H, K, generator=gen, dtype=torch.float64) for _ in range(3))
    v = torch.randn(B, T, H, V, generator=gen, dtype=torch.float64)
    shape = (B, T, H) if per_head else (B, T, H, K)
    g, g2 = (F.logsigmoid(torch.randn(shape, generator=gen, dtype=torch.float64)) / 4 for _ in range(2))
    return q, k, v, g, k2, g2


@pytest.fixture
def fake_fla(monkeypatch):
    """fla "installed" on a CPU: ``chunk_gla`` is the float64 recurrence, and the fla path's CUDA condition is
    waived (its other conditions still apply). Returns the list of the stand-in's calls."""
    launches = []

    def chunk_gla(q, k, v, g, scale):
        launches.append(q.shape[0])
        return naive_recurrent_gla(q, k, v, g, scale, dtype=None), None

    monkeypatch.setattr(gla_op, "_fla_chunk_gla", lambda: chunk_gla)
    fla = paths.path("gla", "fla")
    real = fla.supports
    monkeypatch.setattr(fla, "supports", lambda device, **call: real(device=torch.device("cuda"), **call))
    force_triton(monkeypatch)
    return launches


CALLS = {
    "forward": lambda q, k, v, g, k2, g2: gla(q, k, v, g),
    "reverse": lambda q, k, v, g, k2, g2: gla(q, k, v, g, reverse=True, scale=0.7),
    "both, mean": lambda q, k, v, g, k2, g2: gla_bidirectional(q, k, v, g, g2, k_reverse=k2),
    "both, sum": lambda q, k, v, g, k2, g2: gla_bidirectional(q, k, v, g, merge="sum"),
    "both, pair": lambda q, k, v, g, k2, g2: torch.stack(gla_bidirectional(q, k, v, g, g2, merge=None)),
}


@pytest.mark.parametrize("per_head", [False, True])
@pytest.mark.parametrize("call", list(CALLS))
def test_gla_runs_fla_where_explain_says_so(call, per_head, spy, fake_fla):
    inputs = _inputs(per_head=per_head)
    hits, asked = spy("gla")
    got = CALLS[call](*inputs)
    _check("gla", "fla", hits, asked)
    assert fake_fla == [2 * inputs[0].shape[0] if call.startswith("both") else inputs[0].shape[0]]  # one launch
    with runtime.use_backend("torch"):
        want = CALLS[call](*inputs)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("call", list(CALLS))
def test_gla_runs_the_torch_scan_where_explain_says_so(call, spy):
    inputs = _inputs()
    hits, asked = spy("gla")
    got = CALLS[call](*inputs)
    _check("gla", "torch", hits, asked)
    q, k, v, g, k2, g2 = inputs
    fwd = naive_recurrent_gla(q, k, v, g, q.shape[-1] ** -0.5)
    if call == "forward":
        torch.testing.assert_close(got, fwd)
    elif call == "both, mean":
        bwd = naive_recurrent_gla(q, k2, v, g2, q.shape[-1] ** -0.5, reverse=True)
        torch.testing.assert_close(got, (fwd + bwd) / 2)


def test_on_the_triton_backend_a_cpu_tensor_takes_the_torch_scan_and_explain_says_why(spy, monkeypatch):
    hits, asked = spy("gla")
    force_triton(monkeypatch)
    q, k, v, g, _, _ = _inputs(T=5)
    gla(q, k, v, g)
    _check("gla", "torch", hits, asked)
    x, call = asked[-1]
    assert "fla's kernels run on CUDA tensors, not cpu" in runtime.explain("gla", x, **call)


def test_fla_is_not_taken_where_it_does_not_import(monkeypatch):
    fla = paths.path("gla", "fla")
    monkeypatch.setattr(gla_op, "_fla_chunk_gla", lambda: None)
    assert "does not import" in fla.supports(device=torch.device("cuda"))
    monkeypatch.setattr(gla_op, "_fla_chunk_gla", lambda: object())
    assert fla.supports(device=torch.device("cuda")) is None


def test_an_empty_sequence_runs_no_engine(spy):
    hits, _ = spy("gla")
    q, k, v, g, _, _ = _inputs(T=0)
    assert gla(q, k, v, g).shape == v.shape and not hits
    assert gla_bidirectional(q, k, v, g).abs().sum() == 0 and not hits


# ------------------------------------------------------------------------------------------------ restore_step

def _fused_stub(objective, e0, steps, lr, momentum, optimizer, clamp, callback, progress):
    """The fused step's arithmetic (SGD with momentum, then the clamp), run by torch.optim.SGD."""
    assert optimizer == "sgd"
    return restore._restore_eager(objective, e0, steps, lr, momentum, "sgd", clamp, callback, progress)


def _images():
    gen = torch.Generator().manual_seed(5)
    src = torch.rand(1, 3, 20, 18, generator=gen)
    return src, (0.6 * src + 0.2 + 0.1 * torch.rand(1, 3, 20, 18, generator=gen)).clamp(0, 1)


@pytest.mark.parametrize("name, optimizer, backend", [("fused-sgd", "sgd", "triton"), ("torch", "sgd", "torch"),
                                                      ("torch", "adam", "torch"), ("torch", "adam", "triton")])
def test_restore_runs_the_step_explain_names(name, optimizer, backend, spy, monkeypatch):
    from vision.kernels.spl.op import _Torch

    hits, asked = spy("restore_step", {"fused-sgd": _fused_stub})
    spy("structure_loss", {"triton": _Torch("torch")})  # the objective's gradient, off the interpreter
    if backend == "triton":
        force_triton(monkeypatch)
    src, edited = _images()
    out = restore.restore_structure(src, edited, steps=3, optimizer=optimizer)
    _check("restore_step", name, hits, asked)
    assert float((out - edited).abs().max()) > 1e-3  # the loop that ran moved the pixels
    x, call = asked[-1]
    assert call == {"optimizer": optimizer} and x.shape == edited.shape
    if optimizer == "adam" and backend == "triton":
        assert "adam runs the torch path" in runtime.explain("restore_step", x, **call)


def test_the_restore_step_is_chosen_once_per_call(spy):
    hits, asked = spy("restore_step")
    src, edited = _images()
    seen = []
    restore.restore_structure(src, edited, steps=4, callback=lambda step, value: seen.append(step))
    assert seen == [0, 1, 2, 3] and len(asked) == 1 and hits == ["torch"]


# ------------------------------------------------------------------------------------------------ no second decision

def _calls(path: Path):
    """(enclosing function, called name) for every call in the module at ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    out = []

    def visit(node, fn):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call):
                out.append((fn, ast.unparse(child.func)))
            visit(child, child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn)

    visit(tree, "<module>")
    return out


def test_gla_decides_its_engine_only_in_the_registry():
    calls = _calls(ROOT / "kernels" / "linear_attention" / "op.py")
    found = [(fn, name) for fn, name in calls if name in ("fla_available", "forced_backend", "backend_for")
             and not fn.endswith("_takes")]
    assert not found, found
    # the fla kernel is fetched where fla_available asks whether it imports and by the fla path's own code
    assert {fn for fn, name in calls if name == "_fla_chunk_gla"} == {"fla_available", "_fla_gla"}


def test_restore_and_losses_ask_backend_for_only_about_data_checks():
    """backend_for's answer goes to the data checks (``data_checks``, ``check_finite``, ``check_mask``, ...) and
    is never compared: the engine is the registry's choice."""
    for rel in ("vision/restore.py", "vision/losses.py"):
        tree = ast.parse((ROOT / rel).read_text())
        compared = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Compare)
                    and any(isinstance(s, ast.Call) and ast.unparse(s.func) == "backend_for" for s in ast.walk(n))]
        assert not compared, (rel, compared)


def test_every_path_of_these_ops_carries_its_implementation():
    assert [p.name for p in paths.paths("gla")] == ["fla", "torch"]
    assert [p.name for p in paths.paths("restore_step")] == ["fused-sgd", "torch"]
    missing = [f"{op}:{p.name}" for op in ("gla", "restore_step") for p in paths.paths(op) if p.run is None]
    assert not missing, missing
