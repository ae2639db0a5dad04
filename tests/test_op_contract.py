"""kornia's fixed per-op test set, given to every public op of ``vision.kernels`` in one parametrized file.

kornia checks each operator with the same six tests; here they run for ``box_filter`` / ``BoxFilter``,
``guided_filter`` / ``GuidedFilter`` (gray and colour guide, and the fast variant), ``local_linear_fit`` /
``LocalLinearFit``, ``local_linear_apply`` / ``LocalLinearApply``, ``structure_loss``, ``gla`` and
``gla_bidirectional``, on CPU tensors (so the PyTorch paths; Triton is never forced):

1. smoke: a small float32 call has the documented shape and dtype, is finite and matches the op's float64
   reference (``kernels/<op>/reference.py``, ``kernels/linear_attention/naive.py``) to float32 rounding;
2. exception: wrong rank, mismatched shapes, a non-tensor, an integer dtype, NaN, and bad radius / eps / border
   (and the op's own options) raise a ValueError whose one-line message names the argument. Bad input an op
   accepts silently, or refuses under another argument's name, is a ``strict`` xfail, so fixing it flips the test;
3. non-contiguous: transposed, strided and channels-last views give their contiguous copies' result;
4. gradcheck: ``torch.autograd.gradcheck`` in float64 on tiny inputs w.r.t. every differentiable input;
5. module: the ``nn.Module`` form gives the functional result, also after ``.to(torch.float64)``, and holds no
   parameters (skipped for the ops without one);
6. compile: ``torch.compile(fullgraph=True)`` with the ``aot_eager`` backend (Dynamo capture and AOTAutograd,
   no code generation) gives the eager forward and gradients; marked ``slow`` (the first compile of a process
   pays about 3 s of Dynamo start-up on 2 cores, each GLA case about 2 s).

This is the breadth check that no op misses a kind of test. The depth lives in the per-op files
(``test_box_filter.py``, ``test_guided_filter.py``, ``test_local_linear.py``, ``test_spl.py``, ``test_gla.py``:
every border, radius, dtype and backend, the Triton kernels in the interpreter) and in ``test_compile_dynamic.py``
(Inductor, ``dynamic=True`` and ``torch.export``); this file keeps one or two shapes per check so that its fast tier
(``-m "not slow"``) stays well under 20 s on two cores.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

import vision.kernels as K
from vision.kernels.box.reference import box_filter_reference
from vision.kernels.guided.reference import guided_filter_reference
from vision.kernels.linear_attention.naive import naive_recurrent_gla
from vision.kernels.local_linear.reference import local_linear_apply_reference, local_linear_fit_reference
from vision.kernels.spl.reference import structure_loss_reference
from autograd_probe import value_and_grads


@pytest.fixture(autouse=True)
def _automatic_backend(monkeypatch):
    """Automatic dispatch, whatever the shell exports: CPU tensors take the PyTorch paths."""
    monkeypatch.delenv("VISION_BACKEND", raising=False)


# ------------------------------------------------------------------------------------------------------- inputs

def _images(seed: int, *channels: int, size=(16, 20), batch: int = 2, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.rand(batch, c, *size, generator=gen, dtype=torch.float64).to(dtype) for c in channels)


def _attention(seed: int, b=2, t=16, h=2, k=8, v=4, gate="key", extra_gate=False, dtype=torch.float32):
    """q, k, v and log forget gates (per key channel or per head) with moderate forgetting."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    gshape = (b, t, h, k) if gate == "key" else (b, t, h)
    out = [rand(b, t, h, k), rand(b, t, h, k), rand(b, t, h, v), F.logsigmoid(rand(*gshape)) / 4]
    if extra_gate:
        out.append(F.logsigmoid(rand(*gshape)) / 4)
    return tuple(x.to(dtype) for x in out)


def _coeffs(seed: int, dtype=torch.float32):
    """Features (2, 3, 16, 20) and a random coefficient grid (2, 2, 4, 8, 10) of 2 x 2 cells."""
    (f,) = _images(seed, 3, dtype=dtype)
    gen = torch.Generator().manual_seed(seed + 100)
    return f, torch.randn(2, 2, 4, 8, 10, generator=gen, dtype=torch.float64).to(dtype)


def _np(*tensors):
    return tuple(t.detach().to(torch.float64).numpy() for t in tensors)


# ---------------------------------------------------------------------------------------- the cases of each op

@dataclass(frozen=True)
class Case:
    op: str                                   # the public function it calls
    fn: Callable                              # fn(*inputs) -> tensor
    inputs: Callable                          # inputs(dtype) -> tuple of tensors
    reference: Callable                       # reference(*float64 tensors) -> float64 tensor (the independent oracle)
    shape: Callable                           # shape(*inputs) -> the documented output shape


def _gla_ref(q, k, v, g, reverse=False):
    return naive_recurrent_gla(q, k, v, g, reverse=reverse)


CASES = {
    "box_filter-valid": Case(
        "box_filter", lambda x: K.box_filter(x, 2), lambda dt: _images(0, 3, dtype=dt),
        lambda x: torch.from_numpy(box_filter_reference(*_np(x), 2, "valid")), lambda x: x.shape),
    "box_filter-reflect": Case(
        "box_filter", lambda x: K.box_filter(x, 3, "reflect"), lambda dt: _images(1, 3, dtype=dt),
        lambda x: torch.from_numpy(box_filter_reference(*_np(x), 3, "reflect")), lambda x: x.shape),
    "guided_filter-gray": Case(
        "guided_filter", lambda i, p: K.guided_filter(i, p, 2, 1e-2), lambda dt: _images(2, 1, 3, dtype=dt),
        lambda i, p: torch.from_numpy(guided_filter_reference(*_np(i, p), 2, 1e-2)), lambda i, p: p.shape),
    "guided_filter-colour": Case(
        "guided_filter", lambda i, p: K.guided_filter(i, p, 2, 1e-2, "symmetric"),
        lambda dt: _images(3, 3, 2, dtype=dt),
        lambda i, p: torch.from_numpy(guided_filter_reference(*_np(i, p), 2, 1e-2, "symmetric")),
        lambda i, p: p.shape),
    "guided_filter-colour-fast": Case(
        "guided_filter", lambda i, p: K.guided_filter(i, p, 4, 1e-2, "reflect", scale=2),
        lambda dt: _images(4, 3, 2, dtype=dt),
        lambda i, p: torch.from_numpy(guided_filter_reference(*_np(i, p), 4, 1e-2, "reflect", scale=2)),
        lambda i, p: p.shape),
    "local_linear_fit": Case(
        "local_linear_fit", lambda f, p: K.local_linear_fit(f, p, 2, 1e-2), lambda dt: _images(5, 3, 2, dtype=dt),
        lambda f, p: torch.from_numpy(local_linear_fit_reference(*_np(f, p), 2, 1e-2)),
        lambda f, p: (2, 2, 4, 16, 20)),
    "local_linear_fit-cells": Case(
        "local_linear_fit", lambda f, p: K.local_linear_fit(f, p, 4, 1e-2, scale=2, border="reflect"),
        lambda dt: _images(6, 3, 2, dtype=dt),
        lambda f, p: torch.from_numpy(local_linear_fit_reference(*_np(f, p), 4, 1e-2, 2, "reflect")),
        lambda f, p: (2, 2, 4, 8, 10)),
    "local_linear_apply": Case(
        "local_linear_apply", lambda f, co: K.local_linear_apply(f, co), lambda dt: _coeffs(7, dt),
        lambda f, co: torch.from_numpy(local_linear_apply_reference(*_np(f, co), 2.0, 2.0)),
        lambda f, co: (2, 2, 16, 20)),
    "structure_loss": Case(
        "structure_loss", lambda s, e: K.structure_loss(s, e, 2, 1e-3), lambda dt: _images(8, 3, 3, dtype=dt),
        lambda s, e: torch.tensor(structure_loss_reference(*_np(s, e), 2, 1e-3), dtype=torch.float64),
        lambda s, e: ()),
    "structure_loss-map": Case(
        "structure_loss", lambda s, e: K.structure_loss(s, e, 2, 1e-3, reduction="none", border="reflect"),
        lambda dt: _images(9, 1, 3, dtype=dt),
        lambda s, e: torch.from_numpy(structure_loss_reference(*_np(s, e), 2, 1e-3, reduction="none",
                                                               border="reflect")),
        lambda s, e: (2, 1, 16, 20)),
    "gla": Case(
        "gla", lambda q, k, v, g: K.gla(q, k, v, g), lambda dt: _attention(10, dtype=dt), _gla_ref,
        lambda q, k, v, g: v.shape),
    "gla-reverse-head-gate": Case(
        "gla", lambda q, k, v, g: K.gla(q, k, v, g, reverse=True), lambda dt: _attention(11, gate="head", dtype=dt),
        lambda q, k, v, g: _gla_ref(q, k, v, g, reverse=True), lambda q, k, v, g: v.shape),
    "gla_bidirectional": Case(
        "gla_bidirectional", lambda q, k, v, g: K.gla_bidirectional(q, k, v, g), lambda dt: _attention(12, dtype=dt),
        lambda q, k, v, g: 0.5 * (_gla_ref(q, k, v, g) + _gla_ref(q, k, v, g, reverse=True)),
        lambda q, k, v, g: v.shape),
    "gla_bidirectional-sum-own-gates": Case(
        "gla_bidirectional", lambda q, k, v, g, gr: K.gla_bidirectional(q, k, v, g, gr, merge="sum"),
        lambda dt: _attention(13, gate="head", extra_gate=True, dtype=dt),
        lambda q, k, v, g, gr: _gla_ref(q, k, v, g) + _gla_ref(q, k, v, gr, reverse=True),
        lambda q, k, v, g, gr: v.shape),
}
FUNCTIONS = sorted(n for n in K.__all__ if n[0].islower())
MODULE_NAMES = sorted(n for n in K.__all__ if n[0].isupper())


def test_every_public_op_has_the_fixed_set():
    assert {c.op for c in CASES.values()} == set(FUNCTIONS)
    assert {op for op, _, _ in GRADCHECK.values()} == set(FUNCTIONS)
    assert {n.split("-")[0] for n in BAD} == set(FUNCTIONS)
    assert {CASES[n].op for n in COMPILED} == set(FUNCTIONS)
    assert set(MODULES) | set(NO_MODULE) == set(FUNCTIONS)
    assert {m.__name__ for m, _ in MODULES.values()} == set(MODULE_NAMES)


# ------------------------------------------------------------------------------------------------------ 1. smoke

@pytest.mark.parametrize("name", CASES)
def test_smoke_matches_float64_reference(name):
    case = CASES[name]
    args = case.inputs(torch.float32)
    out = case.fn(*args)
    assert isinstance(out, torch.Tensor)
    assert tuple(out.shape) == tuple(case.shape(*args))
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all()
    want = case.reference(*(a.to(torch.float64) for a in args))
    scale = max(1.0, float(want.abs().max()))  # float32 rounding relative to the data's scale
    torch.testing.assert_close(out.to(torch.float64), want, rtol=1e-5, atol=1e-5 * scale)


# -------------------------------------------------------------------------------------------------- 2. exception

def _img(c=3, h=8, w=9, b=1):
    return torch.rand(b, c, h, w)


def _qkvg(t=5, k=3):
    q = torch.randn(1, t, 2, k)
    return q, torch.randn(1, t, 2, k), torch.randn(1, t, 2, k), F.logsigmoid(torch.randn(1, t, 2, k))


def _with_nan(x):
    x = x.clone()
    x.view(-1)[3] = float("nan")
    return x


def _co(c=3, k1=3, gh=8, gw=9):
    return torch.rand(1, c, k1, gh, gw)


def _silent(why: str):
    """xfail of a bad input the op accepts (pytest.raises fails) or refuses under another name (match fails)."""
    return pytest.mark.xfail(strict=True, reason=why, raises=(AssertionError, pytest.fail.Exception))


# name -> (call, pattern naming the argument[, xfail mark]); names start with the op they call
BAD = {
    "box_filter-rank": (lambda: K.box_filter(_img()[0], 1), r"^x must have shape"),
    "box_filter-non-tensor": (lambda: K.box_filter(_img().numpy(), 1), r"^x must be a torch\.Tensor"),
    "box_filter-int-dtype": (lambda: K.box_filter(_img().int(), 1), r"^x must be float32"),
    "box_filter-empty": (lambda: K.box_filter(_img()[:, :, :0], 1), r"^x is empty"),
    "box_filter-nan": (lambda: K.box_filter(_with_nan(_img()), 1), r"^x contains 1 NaN"),
    "box_filter-radius-negative": (lambda: K.box_filter(_img(), -1), r"^radius must be"),
    "box_filter-radius-fraction": (lambda: K.box_filter(_img(), 1.5), r"^radius must be"),
    "box_filter-radius-bool": (lambda: K.box_filter(_img(), True), r"^radius must be"),
    "box_filter-border": (lambda: K.box_filter(_img(), 1, "wrap"), r"^border must be one of"),
    "box_filter-module-radius": (lambda: K.BoxFilter(-1), r"^radius must be"),
    "box_filter-module-border": (lambda: K.BoxFilter(1, "wrap"), r"^border must be one of"),

    "guided_filter-guide-rank": (lambda: K.guided_filter(_img(1)[0], _img(), 2, 1e-2), r"^guide must have shape"),
    "guided_filter-src-rank": (lambda: K.guided_filter(_img(1), _img()[0], 2, 1e-2), r"^src must have shape"),
    "guided_filter-mismatched-size": (lambda: K.guided_filter(_img(1), _img(w=8), 2, 1e-2),
                                      r"^guide .* and src .* must share batch, height and width"),
    "guided_filter-mismatched-batch": (lambda: K.guided_filter(_img(1), _img(b=2), 2, 1e-2),
                                       r"^guide .* and src .* must share batch"),
    "guided_filter-guide-channels": (lambda: K.guided_filter(_img(2), _img(), 2, 1e-2),
                                     r"^guide must have 1 or 3 channels"),
    "guided_filter-guide-non-tensor": (lambda: K.guided_filter(_img(1).numpy(), _img(), 2, 1e-2),
                                       r"^guide must be a torch\.Tensor"),
    "guided_filter-src-non-tensor": (lambda: K.guided_filter(_img(1), _img().tolist(), 2, 1e-2),
                                     r"^src must be a torch\.Tensor"),
    "guided_filter-src-int-dtype": (lambda: K.guided_filter(_img(1), _img().int(), 2, 1e-2), r"^src must be float32"),
    "guided_filter-guide-nan": (lambda: K.guided_filter(_with_nan(_img(1)), _img(), 2, 1e-2), r"^guide contains"),
    "guided_filter-src-nan": (lambda: K.guided_filter(_img(1), _with_nan(_img()), 2, 1e-2), r"^src contains"),
    "guided_filter-radius": (lambda: K.guided_filter(_img(1), _img(), -2, 1e-2), r"^radius must be"),
    "guided_filter-eps-zero": (lambda: K.guided_filter(_img(1), _img(), 2, 0.0), r"^eps must be positive"),
    "guided_filter-eps-nan": (lambda: K.guided_filter(_img(1), _img(), 2, float("nan")), r"^eps must be finite"),
    "guided_filter-eps-tensor-negative": (lambda: K.guided_filter(_img(1), _img(), 2, torch.tensor([-1.0])),
                                          r"^eps must be positive"),
    "guided_filter-eps-tensor-shape": (lambda: K.guided_filter(_img(1, b=2), _img(b=2), 2, torch.ones(3)),
                                       r"^eps must be a float or a tensor of shape \(2,\)"),
    "guided_filter-eps-bool": (lambda: K.guided_filter(_img(1), _img(), 2, True), r"^eps must be .*, got bool True"),
    "guided_filter-eps-string": (lambda: K.guided_filter(_img(1), _img(), 2, "0.1"),
                                 r"^eps must be .*, got str '0\.1'"),
    "guided_filter-eps-tensor-int-dtype": (lambda: K.guided_filter(_img(1), _img(), 2, torch.tensor([1])),
                                           r"^eps must be a float or a floating-point tensor, got a torch\.int64"),
    "guided_filter-border": (lambda: K.guided_filter(_img(1), _img(), 2, 1e-2, border="wrap"),
                             r"^border must be one of"),
    "guided_filter-scale": (lambda: K.guided_filter(_img(1), _img(), 2, 1e-2, scale=0), r"^scale must be"),
    "guided_filter-module-radius": (lambda: K.GuidedFilter(-1, 1e-2), r"^radius must be"),
    "guided_filter-module-eps-at-call": (lambda: K.GuidedFilter(2, -1.0)(_img(1), _img()), r"^eps must be positive"),

    "local_linear_fit-features-rank": (lambda: K.local_linear_fit(_img(2)[0], _img(), 1, 1e-2),
                                       r"^features must have shape"),
    "local_linear_fit-target-rank": (lambda: K.local_linear_fit(_img(2), _img()[0], 1, 1e-2),
                                     r"^target must have shape"),
    "local_linear_fit-mismatched": (lambda: K.local_linear_fit(_img(2), _img(h=7), 1, 1e-2),
                                    r"^features .* and target .* must share batch, height and width"),
    "local_linear_fit-features-non-tensor": (lambda: K.local_linear_fit(_img(2).numpy(), _img(), 1, 1e-2),
                                             r"^features must be a torch\.Tensor"),
    "local_linear_fit-target-non-tensor": (lambda: K.local_linear_fit(_img(2), _img().numpy(), 1, 1e-2),
                                           r"^target must be a torch\.Tensor"),
    "local_linear_fit-features-int-dtype": (lambda: K.local_linear_fit(_img(2).int(), _img(), 1, 1e-2),
                                            r"^features must be float32"),
    "local_linear_fit-target-int-dtype": (lambda: K.local_linear_fit(_img(2), _img().long(), 1, 1e-2),
                                          r"^target must be float32"),
    "local_linear_fit-features-channels": (lambda: K.local_linear_fit(_img(9), _img(), 1, 1e-2),
                                           r"^features must have K = 1 to 8"),
    "local_linear_fit-target-channels": (lambda: K.local_linear_fit(_img(2), _img(5), 1, 1e-2),
                                         r"^target must have C = 1 to 4"),
    "local_linear_fit-features-nan": (lambda: K.local_linear_fit(_with_nan(_img(2)), _img(), 1, 1e-2),
                                      r"^features contains"),
    "local_linear_fit-radius": (lambda: K.local_linear_fit(_img(2), _img(), -1, 1e-2), r"^radius must be"),
    "local_linear_fit-eps-zero": (lambda: K.local_linear_fit(_img(2), _img(), 1, 0.0), r"^eps must be positive"),
    "local_linear_fit-eps-inf": (lambda: K.local_linear_fit(_img(2), _img(), 1, float("inf")),
                                 r"^eps must be positive"),
    "local_linear_fit-eps-tensor-shape": (lambda: K.local_linear_fit(_img(2), _img(), 1, torch.ones(3)),
                                          r"^eps must be a float, a tensor of shape \(2,\)"),
    "local_linear_fit-eps-bool": (lambda: K.local_linear_fit(_img(2), _img(), 1, True),
                                  r"^eps must be .*, got bool True"),
    "local_linear_fit-eps-string": (lambda: K.local_linear_fit(_img(2), _img(), 1, "0.1"),
                                    r"^eps must be .*, got str '0\.1'"),
    "local_linear_fit-eps-tensor-int-dtype": (lambda: K.local_linear_fit(_img(2), _img(), 1, torch.tensor([1, 2])),
                                              r"^eps must be a float or a floating-point tensor, got a torch\.int64"),
    "local_linear_fit-border": (lambda: K.local_linear_fit(_img(2), _img(), 1, 1e-2, border="wrap"),
                                r"^border must be one of"),
    "local_linear_fit-scale": (lambda: K.local_linear_fit(_img(2), _img(), 1, 1e-2, scale=0), r"^scale must be"),
    "local_linear_fit-module-radius": (lambda: K.LocalLinearFit(-1, 1e-2), r"^radius must be"),
    "local_linear_fit-module-eps-at-call": (lambda: K.LocalLinearFit(1, -1.0)(_img(2), _img()),
                                            r"^eps must be positive"),

    "local_linear_apply-coeffs-rank": (lambda: K.local_linear_apply(_img(2), _co()[0]), r"^coeffs must have shape"),
    "local_linear_apply-features-rank": (lambda: K.local_linear_apply(_img(2)[0], _co()),
                                         r"^features must have shape"),
    "local_linear_apply-mismatched-k": (lambda: K.local_linear_apply(_img(2), _co(k1=4)),
                                        r"^coeffs .* do not fit features"),
    "local_linear_apply-mismatched-grid": (lambda: K.local_linear_apply(_img(2, h=4, w=4), _co()),
                                           r"^coeffs grid 8x9 must be .* no larger than the features"),
    "local_linear_apply-features-non-tensor": (lambda: K.local_linear_apply(_img(2).numpy(), _co()),
                                               r"^features must be a torch\.Tensor"),
    "local_linear_apply-coeffs-non-tensor": (lambda: K.local_linear_apply(_img(2), _co().numpy()),
                                             r"^coeffs must have shape"),
    "local_linear_apply-coeffs-int-dtype": (lambda: K.local_linear_apply(_img(2), _co().int()),
                                            r"^coeffs must be float32"),
    "local_linear_apply-coeffs-nan": (lambda: K.local_linear_apply(_img(2), _with_nan(_co())), r"^coeffs contains"),
    "local_linear_apply-scale": (lambda: K.local_linear_apply(_img(2), _co(), scale=0), r"^scale must be"),
    "local_linear_apply-scale-mismatch": (lambda: K.local_linear_apply(_img(2), _co(), scale=2),
                                          r"^scale=2 makes a 4x5 grid"),
    "local_linear_apply-module-scale": (lambda: K.LocalLinearApply(0), r"^scale must be"),

    "structure_loss-rank": (lambda: K.structure_loss(_img()[0], _img()), r"^source must have shape"),
    "structure_loss-mismatched": (lambda: K.structure_loss(_img(), _img(w=8)),
                                  r"^source .* and edited .* must have the same batch size, height and width"),
    "structure_loss-non-tensor": (lambda: K.structure_loss(_img(), _img().numpy()), r"^edited must be a torch\.Tensor"),
    "structure_loss-int-dtype": (lambda: K.structure_loss(_img().int(), _img()), r"^source must be float32"),
    "structure_loss-channels": (lambda: K.structure_loss(_img(), _img(2)), r"^edited must have 1 or 3 channels"),
    "structure_loss-nan": (lambda: K.structure_loss(_img(), _with_nan(_img())), r"^edited contains 1 NaN"),
    "structure_loss-radius": (lambda: K.structure_loss(_img(), _img(), -1), r"^radius must be"),
    "structure_loss-eps-zero": (lambda: K.structure_loss(_img(), _img(), 2, 0.0), r"^eps must be positive"),
    "structure_loss-eps-nan": (lambda: K.structure_loss(_img(), _img(), 2, float("nan")), r"^eps must be positive"),
    "structure_loss-eps-bool": (lambda: K.structure_loss(_img(), _img(), 2, True), r"^eps must be .*, got bool True"),
    "structure_loss-eps-string": (lambda: K.structure_loss(_img(), _img(), 2, "0.1"),
                                  r"^eps must be .*, got str '0\.1'"),
    "structure_loss-bidirectional": (lambda: K.structure_loss(_img(), _img(), bidirectional="no"),
                                     r"^bidirectional must be True or False, got str 'no'"),
    "structure_loss-detach_coefficients": (lambda: K.structure_loss(_img(), _img(), detach_coefficients=0),
                                           r"^detach_coefficients must be True or False, got int 0"),
    "structure_loss-border": (lambda: K.structure_loss(_img(), _img(), border="wrap"), r"^border must be one of"),
    "structure_loss-reduction": (lambda: K.structure_loss(_img(), _img(), reduction="sum"),
                                 r"^reduction must be one of"),
    "structure_loss-mask-shape": (lambda: K.structure_loss(_img(), _img(), mask=torch.ones(1, 1, 8, 8)),
                                  r"^mask must have shape"),

    "gla-rank": (lambda: K.gla(*(t[0] for t in _qkvg())), r"^gla: q must be \(B, T, H, K\)"),
    "gla-mismatched-k": (lambda: (lambda q, k, v, g: K.gla(q, k[..., :2], v, g))(*_qkvg()), r"^gla: k must have"),
    "gla-mismatched-v": (lambda: (lambda q, k, v, g: K.gla(q, k, v[:, :4], g))(*_qkvg()), r"^gla: v must be"),
    "gla-mismatched-g": (lambda: (lambda q, k, v, g: K.gla(q, k, v, g[..., :2]))(*_qkvg()),
                         r"^gla: g \(log forget gate\) must be"),
    "gla-non-tensor": (lambda: (lambda q, k, v, g: K.gla(q, k, v.numpy(), g))(*_qkvg()),
                       r"^gla: v must be a torch\.Tensor"),
    "gla-int-dtype": (lambda: (lambda q, k, v, g: K.gla(q, k, v, g.long()))(*_qkvg()),
                      r"^gla: g must be a floating-point tensor"),
    "gla-mixed-dtype": (lambda: (lambda q, k, v, g: K.gla(q, k.double(), v, g))(*_qkvg()),
                        r"^gla: q, k, v must share a dtype"),
    "gla-scale": (lambda: K.gla(*_qkvg(), scale=-1.0), r"^gla: scale must be"),
    "gla-scale-bool": (lambda: K.gla(*_qkvg(), scale=True), r"^gla: scale must be .*, got bool True"),
    "gla-scale-string": (lambda: K.gla(*_qkvg(), scale="0.5"), r"^gla: scale must be .*, got str '0\.5'"),
    "gla-reverse": (lambda: K.gla(*_qkvg(), reverse="no"), r"^gla: reverse must be True or False, got str 'no'"),
    "gla-nan": (
        lambda: (lambda q, k, v, g: K.gla(_with_nan(q), k, v, g))(*_qkvg()), r"^gla: q contains",
        _silent("gla reads no values: NaN/Inf inputs give NaN outputs, where every image op refuses them by name "
                "on its PyTorch path. Kept: test_gla.py's test_infinite_forget_gate_resets_the_state_and_nan_"
                "propagates holds NaN propagation as the contract, and g = -inf (a gate of exactly 0) is valid")),

    "gla_bidirectional-rank": (lambda: K.gla_bidirectional(*(t[0] for t in _qkvg())), r"q must be \(B, T, H, K\)"),
    "gla_bidirectional-merge": (lambda: K.gla_bidirectional(*_qkvg(), merge="max"),
                                r"^gla_bidirectional: merge must be"),
    "gla_bidirectional-g_reverse-shape": (lambda: (lambda q, k, v, g: K.gla_bidirectional(q, k, v, g, g[..., :1]))(
        *_qkvg()), r"^gla_bidirectional: g and g_reverse must share a shape"),
    "gla_bidirectional-g_reverse-length": (
        lambda: (lambda q, k, v, g: K.gla_bidirectional(q, k, v, g, g[:, :4]))(*_qkvg()),
        r"^gla: g_reverse \(log forget gate\) must be"),
    "gla_bidirectional-g_reverse-non-tensor": (
        lambda: (lambda q, k, v, g: K.gla_bidirectional(q, k, v, g, g.numpy()))(*_qkvg()),
        r"^gla: g_reverse must be a torch\.Tensor"),
    "gla_bidirectional-k_reverse-shape": (
        lambda: (lambda q, k, v, g: K.gla_bidirectional(q, k, v, g, k_reverse=k[:, :4]))(*_qkvg()),
        r"^gla: k_reverse must have q's shape"),
    "gla_bidirectional-k_reverse-dtype": (
        lambda: (lambda q, k, v, g: K.gla_bidirectional(q, k, v, g, k_reverse=k.double()))(*_qkvg()),
        r"^gla: q, k_reverse, v must share a dtype"),
    "gla_bidirectional-scale": (lambda: K.gla_bidirectional(*_qkvg(), scale=0.0), r"gla: scale must be"),
}


def _bad_params():
    for name, (call, pattern, *marks) in BAD.items():  # a third entry: the xfail of a case the op accepts
        yield pytest.param(call, pattern, marks=marks, id=name)


@pytest.mark.parametrize("call,pattern", list(_bad_params()))
def test_bad_input_raises_a_one_line_value_error_naming_the_argument(call, pattern):
    with pytest.raises(ValueError, match=pattern) as info:
        call()
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------------------------- 3. non-contiguous

def _transposed(x):
    """Same values, the last two axes swapped in memory."""
    return x.transpose(-1, -2).contiguous().transpose(-1, -2)


def _strided(x):
    """Same values, every other element of a buffer twice as wide."""
    big = torch.zeros(*x.shape[:-1], 2 * x.shape[-1], dtype=x.dtype)
    big[..., ::2] = x
    return big[..., ::2]


def _axis1_last(x):
    """Same values, axis 1 innermost in memory: channels-last for images, head-major for (B, T, H, K)."""
    return x.movedim(1, -1).contiguous().movedim(-1, 1)


LAYOUTS = {"transposed": _transposed, "strided": _strided, "channels_last": _axis1_last}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", CASES)
def test_non_contiguous_inputs_match_contiguous(name, layout):
    case = CASES[name]
    args = case.inputs(torch.float32)
    views = tuple(LAYOUTS[layout](a) for a in args)
    assert any(not v.is_contiguous() for v in views)
    assert all(torch.equal(v, a) for v, a in zip(views, args))
    torch.testing.assert_close(case.fn(*views), case.fn(*args), rtol=1e-6, atol=1e-6)


# -------------------------------------------------------------------------------------------------- 4. gradcheck

def _tiny(seed, *channels, size=(6, 7)):
    return _images(seed, *channels, size=size, batch=1, dtype=torch.float64)


# name -> (op, fn, inputs); every input is differentiable (the eps tensors included)
GRADCHECK = {
    "box_filter-valid": ("box_filter", lambda x: K.box_filter(x, 1), lambda: _tiny(20, 2)),
    "box_filter-reflect": ("box_filter", lambda x: K.box_filter(x, 2, "reflect"), lambda: _tiny(21, 2)),
    "guided_filter-gray": ("guided_filter", lambda i, p, e: K.guided_filter(i, p, 1, e),
                           lambda: (*_tiny(22, 1, 2), torch.tensor([0.1], dtype=torch.float64))),
    "guided_filter-colour": ("guided_filter", lambda i, p, e: K.guided_filter(i, p, 1, e, "reflect"),
                             lambda: (*_tiny(23, 3, 2), torch.tensor([0.1], dtype=torch.float64))),
    "guided_filter-colour-fast": ("guided_filter", lambda i, p, e: K.guided_filter(i, p, 2, e, scale=2),
                                  lambda: (*_tiny(24, 3, 1, size=(6, 8)), torch.tensor([0.1], dtype=torch.float64))),
    "local_linear_fit": ("local_linear_fit", lambda f, p, e: K.local_linear_fit(f, p, 1, e),
                         lambda: (*_tiny(25, 2, 2), torch.tensor([0.1, 0.2], dtype=torch.float64))),
    "local_linear_fit-cells": ("local_linear_fit",
                               lambda f, p, e: K.local_linear_fit(f, p, 2, e, scale=2, border="symmetric"),
                               lambda: (*_tiny(26, 2, 1), torch.tensor([0.1, 0.2], dtype=torch.float64))),
    "local_linear_apply": ("local_linear_apply", lambda f, co: K.local_linear_apply(f, co, scale=2),
                           lambda: (*_tiny(27, 2), torch.rand(1, 2, 3, 3, 4, dtype=torch.float64,
                                                              generator=torch.Generator().manual_seed(27)))),
    "structure_loss": ("structure_loss", lambda s, e: K.structure_loss(s, e, 1, 1e-2, detach_coefficients=False),
                       lambda: _tiny(28, 3, 3)),
    "structure_loss-map": ("structure_loss",
                           lambda s, e: K.structure_loss(s, e, 1, 1e-2, detach_coefficients=False, reduction="none",
                                                         border="reflect"),
                           lambda: _tiny(29, 1, 1)),
    "gla": ("gla", lambda q, k, v, g: K.gla(q, k, v, g),
            lambda: _attention(30, b=1, t=5, h=2, k=3, v=3, dtype=torch.float64)),
    "gla-reverse-head-gate": ("gla", lambda q, k, v, g: K.gla(q, k, v, g, reverse=True),
                              lambda: _attention(31, b=1, t=5, h=2, k=3, v=3, gate="head", dtype=torch.float64)),
    "gla_bidirectional": ("gla_bidirectional", lambda q, k, v, g, gr: K.gla_bidirectional(q, k, v, g, gr),
                          lambda: _attention(32, b=1, t=5, h=2, k=3, v=3, extra_gate=True, dtype=torch.float64)),
}


@pytest.mark.parametrize("name", GRADCHECK)
def test_gradcheck_float64(name, one_thread):
    _, fn, inputs = GRADCHECK[name]
    args = tuple(a.clone().requires_grad_() for a in inputs())
    assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-6, rtol=1e-4)


# ----------------------------------------------------------------------------------------------------- 5. module

# op -> (module class, [(module factory, the functional call it stands for, inputs(dtype))])
MODULES = {
    "box_filter": (K.BoxFilter, [
        (lambda: K.BoxFilter(2, "reflect"), lambda x: K.box_filter(x, 2, "reflect"),
         lambda dt: _images(40, 3, dtype=dt)),
    ]),
    "guided_filter": (K.GuidedFilter, [
        (lambda: K.GuidedFilter(2, 1e-2), lambda i, p: K.guided_filter(i, p, 2, 1e-2),
         lambda dt: _images(41, 1, 3, dtype=dt)),
        (lambda: K.GuidedFilter(3, torch.tensor([1e-2, 2e-2]), "symmetric", scale=2),
         lambda i, p: K.guided_filter(i, p, 3, torch.tensor([1e-2, 2e-2]), "symmetric", scale=2),
         lambda dt: _images(42, 3, 2, dtype=dt)),
    ]),
    "local_linear_fit": (K.LocalLinearFit, [
        (lambda: K.LocalLinearFit(2, 1e-2, scale=2, border="reflect"),
         lambda f, p: K.local_linear_fit(f, p, 2, 1e-2, 2, "reflect"), lambda dt: _images(43, 3, 2, dtype=dt)),
    ]),
    "local_linear_apply": (K.LocalLinearApply, [
        (lambda: K.LocalLinearApply(scale=2), lambda f, co: K.local_linear_apply(f, co, 2), lambda dt: _coeffs(44, dt)),
    ]),
}
NO_MODULE = ("structure_loss", "gla", "gla_bidirectional")


@pytest.mark.parametrize("op", [*MODULES, *NO_MODULE])
def test_module_matches_functional(op):
    if op in NO_MODULE:
        pytest.skip(f"{op} has no nn.Module form in vision.kernels")
    cls, forms = MODULES[op]
    for make, functional, inputs in forms:
        module = make()
        assert isinstance(module, cls) and isinstance(module, torch.nn.Module)
        assert list(module.parameters()) == []  # none documented: every argument is a hyper-parameter
        assert repr(module).startswith(cls.__name__)
        args = inputs(torch.float32)
        out = module(*args)
        assert out.dtype == torch.float32
        assert torch.equal(out, functional(*args))
        module = module.to(torch.float64)
        assert all(b.dtype == torch.float64 for b in module.buffers())
        args = inputs(torch.float64)
        out = module(*args)
        assert out.dtype == torch.float64
        torch.testing.assert_close(out, functional(*args), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------------- 6. compile

# one or two cases per op (every op, the colour guide and the cell fit's coefficient op among them)
COMPILED = ("box_filter-valid", "guided_filter-gray", "guided_filter-colour-fast", "local_linear_fit-cells",
            "local_linear_apply", "structure_loss", "gla", "gla_bidirectional")


@pytest.mark.slow
@pytest.mark.parametrize("name", COMPILED)
def test_compile_fullgraph_matches_eager(name):
    case = CASES[name]
    torch._dynamo.reset()
    compiled = torch.compile(case.fn, fullgraph=True, backend="aot_eager")
    args = case.inputs(torch.float32)
    out, grads = value_and_grads(compiled, args)
    want, want_grads = value_and_grads(case.fn, args)
    torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)
    for got, ref in zip(grads, want_grads):
        assert got is not None
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
