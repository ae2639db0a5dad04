"""Every public op of ``vision.kernels``, as a function and as an ``nn.Module``, forward and backward, under
``torch.compile(fullgraph=True, dynamic=True)`` on CPU against eager, and ``torch.export`` of the module forms
(a module's float ``eps`` reached ``math.isfinite`` as a SymFloat and broke the graph).

Compiles use Inductor, except GLA: its chunked scan is plain PyTorch that Inductor turns into minutes of C++ on two
cores, so it compiles with ``aot_eager`` here -- the same Dynamo capture (fullgraph, dynamic shapes) and
AOTAutograd backward, without the code generation. ``VISION_COMPILE_BACKEND=inductor`` runs it with Inductor too.
"""
from __future__ import annotations

import math
import os

import pytest
import torch

import vision.kernels as K
from autograd_probe import value_and_grads

TOL = dict(rtol=1e-5, atol=1e-5)  # float32 rounding: the compiled graph may fuse or reorder the glue around the ops
GLA_BACKEND = os.environ.get("VISION_COMPILE_BACKEND", "aot_eager")


def _inputs(seed: int = 0, size: tuple[int, int] = (24, 20)):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(1, 3, *size, generator=g)
    return dict(x=x, y=torch.rand(1, 3, *size, generator=g), gray=torch.rand(1, 1, *size, generator=g),
                f=torch.rand(1, 4, *size, generator=g), q=torch.randn(1, 16, 2, 8, generator=g),
                k=torch.randn(1, 16, 2, 8, generator=g), v=torch.randn(1, 16, 2, 8, generator=g),
                g=torch.nn.functional.logsigmoid(torch.randn(1, 16, 2, 8, generator=g)) / 16)


def _coeffs(t):
    return K.local_linear_fit(t["f"], t["x"], 2, 1e-2, scale=2).detach()


# name -> (callable built per test, input builder, compile backend); every name of vision.kernels.__all__ appears
CASES = {
    "box_filter": (lambda: lambda x: K.box_filter(x, 2), lambda t: (t["x"],), "inductor"),
    "BoxFilter": (lambda: K.BoxFilter(2, "reflect"), lambda t: (t["x"],), "inductor"),
    "guided_filter": (lambda: lambda a, b: K.guided_filter(a, b, 2, 1e-2), lambda t: (t["gray"], t["x"]), "inductor"),
    "guided_filter-colour-fast": (lambda: lambda a, b: K.guided_filter(a, b, 3, 1e-2, "symmetric", scale=2),
                                  lambda t: (t["x"], t["y"]), "inductor"),
    "GuidedFilter": (lambda: K.GuidedFilter(2, 1e-2), lambda t: (t["gray"], t["x"]), "inductor"),
    "GuidedFilter-tensor-eps": (lambda: K.GuidedFilter(2, torch.tensor([1e-2]), "reflect"),
                                lambda t: (t["x"], t["y"]), "inductor"),
    "structure_loss": (lambda: lambda a, b: K.structure_loss(a, b, 2, 1e-3), lambda t: (t["x"], t["y"]), "inductor"),
    "local_linear_fit": (lambda: lambda a, b: K.local_linear_fit(a, b, 2, 1e-2, scale=2),
                         lambda t: (t["f"], t["x"]), "inductor"),
    "LocalLinearFit": (lambda: K.LocalLinearFit(2, 1e-2), lambda t: (t["f"], t["x"]), "inductor"),
    "local_linear_apply": (lambda: lambda a, b: K.local_linear_apply(a, b), lambda t: (t["f"], _coeffs(t)), "inductor"),
    "LocalLinearApply": (lambda: K.LocalLinearApply(), lambda t: (t["f"], _coeffs(t)), "inductor"),
    "gla": (lambda: lambda q, k, v, g: K.gla(q, k, v, g), lambda t: (t["q"], t["k"], t["v"], t["g"]), GLA_BACKEND),
    "gla_bidirectional": (lambda: lambda q, k, v, g: K.gla_bidirectional(q, k, v, g),
                          lambda t: (t["q"], t["k"], t["v"], t["g"]), GLA_BACKEND),
}
MODULES = {"BoxFilter": (lambda: K.BoxFilter(2), lambda t: (t["x"],)),
           "GuidedFilter": (lambda: K.GuidedFilter(2, 1e-2, scale=2), lambda t: (t["gray"], t["x"])),
           "GuidedFilter-tensor-eps": (lambda: K.GuidedFilter(2, torch.tensor([1e-2])), lambda t: (t["x"], t["y"])),
           "LocalLinearFit": (lambda: K.LocalLinearFit(2, 1e-2, scale=2), lambda t: (t["f"], t["x"])),
           # scale given: inferring it from the sizes (scale=None) is a search over integers, which specialises them
           "LocalLinearApply": (lambda: K.LocalLinearApply(scale=2), lambda t: (t["f"], _coeffs(t)))}


def test_every_public_op_is_covered():
    covered = {name.split("-")[0] for name in CASES}
    assert covered == set(K.__all__), set(K.__all__) ^ covered
    assert {n.split("-")[0] for n in MODULES} == {n for n in K.__all__ if n[0].isupper()}


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_compiled_forward_and_backward_match_eager(name):
    make, inputs, backend = CASES[name]
    torch._dynamo.reset()
    fn = make()
    compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend=backend)
    args = inputs(_inputs())
    out, grads = value_and_grads(compiled, args)
    ref, ref_grads = value_and_grads(fn, args)
    torch.testing.assert_close(out, ref, **TOL)
    for got, want in zip(grads, ref_grads):
        assert got is not None
        torch.testing.assert_close(got, want, **TOL)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODULES)
def test_export_module_matches_eager(name):
    """Exported with dynamic height and width (the coefficient grid's for coeffs), then run at another size."""
    make, inputs = MODULES[name]
    module = make()
    args = inputs(_inputs())
    auto = torch.export.Dim.AUTO
    dims = tuple({3: auto, 4: auto} if a.dim() == 5 else {2: auto, 3: auto} for a in args)
    program = torch.export.export(module, args, dynamic_shapes=dims)
    torch.testing.assert_close(program.module()(*args), module(*args), **TOL)
    other = inputs(_inputs(seed=3, size=(18, 26)))  # other values, another size: the same graph
    torch.testing.assert_close(program.module()(*other), module(*other), **TOL)


def test_compiled_module_refuses_bad_eps():
    """A compiled module's eps is checked with torch._check (no Python read of a symbolic value): bad values
    still stop the call (naming eps, except inf, which Dynamo reports as a failed runtime assertion of the graph);
    eager calls keep the one-line ValueError."""
    x = _inputs()["x"]
    module = K.GuidedFilter(2, 1e-2)
    compiled = torch.compile(module, fullgraph=True, dynamic=True, backend="eager")
    compiled(x, x)
    for bad in (-1.0, math.nan, math.inf):
        module.eps = bad
        with pytest.raises(Exception) as info:
            compiled(x, x)
        assert bad == math.inf or "eps must be positive and finite" in str(info.value)
        with pytest.raises(ValueError, match="eps must be"):
            module(x, x)


def test_guided_filter_tensor_eps_is_a_buffer():
    eps = torch.tensor([1e-2, 2e-2])
    for module in (K.GuidedFilter(2, eps), K.LocalLinearFit(2, eps[:1])):
        assert "eps" in dict(module.named_buffers())
        assert module.state_dict() == {}  # not persistent: checkpoints stay as they were
        module.to(torch.float64)
        assert module.eps.dtype == torch.float64
    x = torch.rand(2, 1, 12, 10, dtype=torch.float64)
    gf = K.GuidedFilter(2, eps).to(torch.float64)
    torch.testing.assert_close(gf(x, x), K.guided_filter(x, x, 2, eps.double()))
    assert K.GuidedFilter(2, 1e-2).eps == 1e-2 and not list(K.GuidedFilter(2, 1e-2).buffers())


@pytest.mark.slow
def test_path_choice_is_not_traced_into_the_numba_import():
    """The numba path's check asks whether numba imports (a cached import): Dynamo must take it as a constant,
    not trace through the cache wrapper into the import (which it warns about as a silent-incorrectness risk)."""
    import warnings

    torch._dynamo.reset()
    x = _inputs()
    fn = torch.compile(lambda f, p: K.local_linear_fit(f, p, 2, 1e-2), fullgraph=True, backend="eager")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = fn(x["f"], x["y"])
    assert not [w for w in seen if "lru_cache" in str(w.message)], [str(w.message)[:200] for w in seen]
    torch.testing.assert_close(out, K.local_linear_fit(x["f"], x["y"], 2, 1e-2), **TOL)
