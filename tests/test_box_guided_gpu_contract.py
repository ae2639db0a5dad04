"""What the box and guided filters promise a GPU caller: no host synchronisation on the Triton path, custom ops
that torch.compile(fullgraph) takes whole, cost bounded by the image for any radius, finite output for huge
guides, and kernels that compile for sm_90 without spilling."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from sync_trap import no_host_sync
from window_sums import window_sums
from vision.kernels import box_filter, guided_filter
from vision.kernels.border import source_index
from vision.kernels.box.reference import box_filter_reference
from vision.kernels.runtime import interpreting, use_backend
from vision.kernels.guided.reference import guided_filter_reference

BORDERS = ["valid", "reflect", "replicate", "symmetric"]
needs_interp = pytest.mark.skipif(not interpreting(), reason="runs the Triton path through the interpreter")


@needs_interp
@pytest.mark.parametrize("border", ["valid", "reflect"])
def test_box_no_host_sync(border, rng):
    x = torch.tensor(rng.random((1, 2, 20, 23)), dtype=torch.float32, requires_grad=True)
    up = torch.tensor(rng.random((1, 2, 20, 23)), dtype=torch.float32)
    with use_backend("triton"), no_host_sync():
        y = box_filter(x, 3, border)
        (g,) = torch.autograd.grad(y, x, up)
    np.testing.assert_allclose(y.detach().numpy(), box_filter_reference(x.detach().numpy(), 3, border), atol=2e-6)
    # the adjoint: <M x, u> = <x, M^T u>
    np.testing.assert_allclose((y.detach() * up).sum().item(), (x.detach() * g).sum().item(), rtol=1e-5)


@needs_interp
@pytest.mark.parametrize("channels,scale,border", [(1, 1, "valid"), (3, 1, "valid"), (1, 2, "valid"),
                                                   (3, 2, "reflect"), (1, 1, "symmetric")])
@pytest.mark.slow
def test_guided_no_host_sync(channels, scale, border, rng):
    guide = torch.tensor(rng.random((2, channels, 20, 23)), dtype=torch.float32, requires_grad=True)
    src = torch.tensor(rng.random((2, 2, 20, 23)), dtype=torch.float32, requires_grad=True)
    eps = torch.tensor([1e-2, 1e-3], requires_grad=True)
    up = torch.tensor(rng.standard_normal((2, 2, 20, 23)), dtype=torch.float32)
    with use_backend("triton"), no_host_sync():
        q = guided_filter(guide, src, 4, eps, border, scale=scale)
        grads = torch.autograd.grad(q, (guide, src, eps), up)
        q_float_eps = guided_filter(guide.detach(), src.detach(), 4, 1e-2, border, scale=scale)
    ref = guided_filter_reference(guide.detach().numpy(), src.detach().numpy(), 4, [1e-2, 1e-3], border, scale)
    np.testing.assert_allclose(q.detach().numpy(), ref, atol=1e-5)
    assert torch.isfinite(q_float_eps).all()
    with use_backend("torch"):  # gradients against the PyTorch path's float64 closed form
        g64, s64, e64 = (t.detach().double().requires_grad_() for t in (guide, src, eps))
        ref_grads = torch.autograd.grad(guided_filter(g64, s64, 4, e64, border, scale=scale), (g64, s64, e64),
                                        up.double())
    for got, want in zip(grads, ref_grads):
        np.testing.assert_allclose(got.double().numpy(), want.numpy(), atol=2e-4 * max(1.0, want.abs().max().item()))


def _periodic_mean_1d(n, r, border):
    """(n, n) matrix of the 1-D window mean for any radius, by counting how often each source pixel occurs."""
    m = np.zeros((n, n))
    if border == "valid":
        for c in range(n):
            lo, hi = max(c - r, 0), min(c + r, n - 1)
            m[c, lo:hi + 1] = 1.0 / (hi - lo + 1)
        return m
    if border == "replicate" or n == 1:
        for c in range(n):
            lo, hi = c - r, c + r
            inner = np.arange(max(lo, 0), min(hi, n - 1) + 1)
            m[c, inner] += 1
            m[c, 0] += max(0, -lo)
            m[c, n - 1] += max(0, hi - (n - 1))
        return m / (2 * r + 1)
    period = 2 * n - 2 if border == "reflect" else 2 * n
    for c in range(n):
        lo, hi = c - r, c + r
        for j in range(period):  # how many i in [lo, hi] with i = j (mod period)
            cnt = (hi - j) // period - (lo - 1 - j) // period
            m[c, source_index(np.array([j]), n, border)[0]] += cnt
    return m / (2 * r + 1)


@pytest.mark.parametrize("border", BORDERS)
@pytest.mark.parametrize("shape", [(5, 7), (1, 6), (9, 2)])
def test_large_radius_is_exact(backend, border, shape, rng):
    x = rng.random((1, 2) + shape)
    for r in (13, 40, 10**6):
        my, mx = _periodic_mean_1d(shape[0], r, border), _periodic_mean_1d(shape[1], r, border)
        ref = my @ x @ mx.T
        if r == 13:  # the counting reference against the direct one
            np.testing.assert_allclose(ref, box_filter_reference(x, r, border), atol=1e-12)
        got = box_filter(torch.tensor(x, dtype=torch.float32), r, border).numpy()
        np.testing.assert_allclose(got, ref, atol=2e-6)


@pytest.mark.parametrize("border", BORDERS)
def test_huge_radius_costs_the_image(border, monkeypatch):
    """Radius 10^6 on 128 x 128 sums no wider window and no larger padded plane than radius 128 does, and at
    most what the image bounds (windows of 4n + 1, planes of 5n): "valid" clamps the radius to max(H, W) - 1,
    the padded borders reduce it below one period (2n) in closed form (``box.large_radius``)."""
    x = torch.rand(1, 1, 128, 128)
    seen = window_sums(monkeypatch)
    sizes = {}
    with use_backend("torch"):
        for r in (128, 10**6):
            del seen[:]
            box_filter(x, r, border)
            box_sizes = list(seen)
            del seen[:]
            out = guided_filter(x, x, r, 1e-2, border)
            sizes[r] = box_sizes, list(seen)
            assert torch.isfinite(out).all()
    for base, huge in zip(*sizes.values()):  # box, then guided
        assert base and huge
        assert max(k for _, k in huge) <= min(4 * 128 + 1, max(k for _, k in base)), (huge, base)
        assert max(n for n, _ in huge) <= min(5 * 128, max(n for n, _ in base)), (huge, base)
    if border == "valid":  # the same windows: radius max(H, W) - 1 both times
        assert sizes[128] == sizes[10**6]


def test_huge_radius_guided_matches_reference(backend, rng):
    guide, src = rng.random((1, 1, 6, 9)), rng.random((1, 2, 6, 9))
    g, s = torch.tensor(guide, dtype=torch.float32), torch.tensor(src, dtype=torch.float32)
    for border in BORDERS:
        ref = guided_filter_reference(guide, src, 8 if border == "valid" else 25, 1e-2, border)
        r = 10**6 if border == "valid" else 25  # valid: any radius >= 8 holds the whole image
        np.testing.assert_allclose(guided_filter(g, s, r, 1e-2, border).numpy(), ref, atol=1e-5)


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("scale", [1, 2])
def test_huge_guide_gives_finite_output(backend, channels, scale, rng):
    guide, src = rng.random((1, channels, 20, 23)) * 1e30, rng.random((1, 2, 20, 23))
    got = guided_filter(torch.tensor(guide, dtype=torch.float32), torch.tensor(src, dtype=torch.float32), 2, 1e-2,
                        scale=scale).double().numpy()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, guided_filter_reference(guide, src, 2, 1e-2, scale=scale), atol=1e-3)


@pytest.mark.slow
def test_compile_fullgraph(rng):
    x = torch.tensor(rng.random((1, 3, 16, 18)), dtype=torch.float32)

    def f(t):
        y = box_filter(t, 2, "reflect")
        return guided_filter(y[:, :1], t, 3, 1e-2) + guided_filter(t, t, 2, 1e-2, scale=2)

    torch._dynamo.reset()
    want = f(x)
    for backend in ("eager", "aot_eager"):
        got = torch.compile(f, fullgraph=True, backend=backend)(x)
        torch.testing.assert_close(got, want)
    xg = x.clone().requires_grad_()
    torch.compile(lambda t: f(t).square().sum(), fullgraph=True, backend="aot_eager")(xg).backward()
    xr = x.clone().requires_grad_()
    f(xr).square().sum().backward()
    torch.testing.assert_close(xg.grad, xr.grad)


@pytest.mark.slow
def test_custom_ops_registered():
    from torch.library import opcheck

    x = torch.rand(1, 2, 9, 11, requires_grad=True)
    opcheck(torch.ops.vision.box_filter.default, (x, 2, "reflect", "torch"))
    I, p = torch.rand(1, 1, 9, 11, requires_grad=True), torch.rand(1, 2, 9, 11, requires_grad=True)
    eps = torch.full((1,), 1e-2, requires_grad=True)
    opcheck(torch.ops.vision.guided_filter.default, (I, p, eps, 2, "valid", "torch"))
    opcheck(torch.ops.vision.guided_coeffs.default, (I, p, eps, 2, "valid", "torch"))


STATIC = r'''
import json
from vision.kernels.static_compile import compile_static
from vision.kernels.box import sliding as B
from vision.kernels.guided import sliding as G
out = []
for r, mode, kind in [(1, 0, 0), (8, 3, 0), (16, 2, 0), (8, 0, 1), (16, 0, 2)]:
    c = compile_static(B._sliding_box_kernel, dict(R=r, MODE=mode, KIND=kind, BWI=B.strip_width(r), CH=64,
                                                   RB=B.RB), num_warps=1)
    out.append((f"box r={r} mode={mode} kind={kind}", c.registers, c.stack_bytes, c.seconds))
for r, mode in [(1, 0), (16, 1)]:
    c = compile_static(G._fit_gray_kernel, dict(R=r, MODE=mode, BWI=G.strip_width(r), CH=16, RB=G.FIT_RB),
                       num_warps=1)
    out.append((f"gray fit r={r} mode={mode}", c.registers, c.stack_bytes, c.seconds))
    for apply, store in [(True, False), (True, True), (False, True)]:
        c = compile_static(G._apply_gray_kernel, dict(R=r, MODE=mode, APPLY=apply, STORE_MA=store,
                                                      BWI=G.strip_width(r), CH=16, RB=G.APPLY_RB), num_warps=1)
        out.append((f"gray apply={apply} store_ma={store} r={r} mode={mode}", c.registers, c.stack_bytes,
                    c.seconds))
from vision.kernels.guided import sliding_color as K
for r, mode in [(2, 0), (8, 1)]:
    c = compile_static(K._fit_color_kernel, dict(R=r, MODE=mode, BWI=K.strip_width(r), CH=16, RB=K.FIT_RB),
                       num_warps=1)
    out.append((f"colour fit r={r} mode={mode}", c.registers, c.stack_bytes, c.seconds))
    for apply, store in [(True, False), (True, True), (False, True)]:
        c = compile_static(K._apply_color_kernel, dict(R=r, MODE=mode, APPLY=apply, STORE_MA=store,
                                                       BWI=K.strip_width(r), CH=16, RB=K.APPLY_RB), num_warps=1)
        out.append((f"colour apply={apply} store_ma={store} r={r} mode={mode}", c.registers, c.stack_bytes,
                    c.seconds))
# the fused backward ("valid" border only): strip widths 64 and 128, the GPU's rows per step
from vision.kernels.guided import triton_backward as T, triton_backward_color as TC
for r in (1, 16):
    for fn, rb in ((T._grad_moments_gray, T.MOMENTS_RB), (T._grad_inputs_gray, T.INPUTS_RB)):
        c = compile_static(fn, dict(R=r, BWI=B.strip_width(r), CH=16, RB=rb), num_warps=1)
        out.append((f"gray backward {fn.__name__} r={r}", c.registers, c.stack_bytes, c.seconds))
for r in (2, 16):
    for fn, rb in ((TC._grad_moments_color, TC.MOMENTS_RB), (TC._grad_inputs_color, TC.INPUTS_RB)):
        c = compile_static(fn, dict(R=r, BWI=TC.width(r), CH=16, RB=rb), num_warps=1)
        out.append((f"colour backward {fn.__name__} r={r}", c.registers, c.stack_bytes, c.seconds))
print(json.dumps(out))
'''


@pytest.mark.slow
def test_sliding_kernels_compile_for_sm90_without_spills(tmp_path):
    """Static sm_90 compile of the sliding box kernel and the gray and colour guided forward and backward kernels at
    the narrow and the wide strip (radii 1-2 and 16) and each border mode: no spill, at most 255 registers (the
    compile time is a bench: ``vision bench compile``; every reachable configuration: VISION_STATIC_MATRIX=1
    tests/test_static_compile_archs.py)."""
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)  # cold compiles: the times are what a fresh install pays
    res = subprocess.run([sys.executable, "-c", STATIC], env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    import json

    rows = json.loads(res.stdout.strip().splitlines()[-1])
    print("\n".join(f"{name}: {regs} regs, {stack} B stack, {seconds:.1f} s" for name, regs, stack, seconds in rows))
    for name, regs, stack, seconds in rows:
        assert stack == 0, (name, regs, stack)
        assert regs <= 255, (name, regs, seconds)
