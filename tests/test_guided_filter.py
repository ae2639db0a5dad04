"""guided_filter against the float64 reference on every path, against OpenCV and kornia in their
border modes, gradients by gradcheck, and bad input."""
import cv2
import kornia
import numpy as np
import pytest
import torch

from vision.kernels import GuidedFilter, guided_filter
from vision.kernels.guided.reference import guided_filter_reference

BORDERS = ["valid", "reflect", "replicate", "symmetric"]


def run(guide, src, *args, grad=False, **kw):
    g = torch.tensor(guide, dtype=torch.float32, requires_grad=grad)
    s = torch.tensor(src, dtype=torch.float32)
    return guided_filter(g, s, *args, **kw).detach().numpy()


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("border", BORDERS)
@pytest.mark.parametrize("radius", [1, 2, 8])
def test_matches_reference(backend, channels, border, radius, rng):
    guide, src = rng.random((2, channels, 13, 17)), rng.random((2, 2, 13, 17))
    ref = guided_filter_reference(guide, src, radius, 1e-2, border)
    np.testing.assert_allclose(run(guide, src, radius, 1e-2, border), ref, atol=1e-6)
    if backend == "torch":  # with gradients on, the generic (non-banded) PyTorch path runs
        np.testing.assert_allclose(run(guide, src, radius, 1e-2, border, grad=True), ref, atol=1e-6)


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("eps", [1e-8, 1e-4, 1e-2, 1.0])
def test_eps_range(backend, channels, eps, rng):
    guide, src = rng.random((1, channels, 33, 29)), rng.random((1, 3, 33, 29))
    ref = guided_filter_reference(guide, src, 2, eps)
    np.testing.assert_allclose(run(guide, src, 2, eps), ref, atol=1e-6)


@pytest.mark.parametrize("shape", [(3, 5), (1, 40), (1, 1), (6, 2)])
@pytest.mark.parametrize("border", BORDERS)
def test_window_larger_than_image(backend, shape, border, rng):
    guide, src = rng.random((1, 1) + shape), rng.random((1, 1) + shape)
    ref = guided_filter_reference(guide, src, 8, 1e-3, border)
    np.testing.assert_allclose(run(guide, src, 8, 1e-3, border), ref, atol=1e-6)


@pytest.mark.parametrize("channels", [1, 3])
def test_flat_and_nearly_flat(backend, channels, rng):
    flat = np.full((1, channels, 40, 37), 0.6)
    np.testing.assert_allclose(run(flat, flat[:, :1], 4, 1e-8), 0.6, atol=1e-6)
    # 0.7 + 1e-3 noise with eps 1e-8: cumsum box filters give negative variances and NaN here
    near = 0.7 + 1e-3 * rng.random((1, channels, 40, 37))
    src = rng.random((1, 2, 40, 37))
    out = run(near, src, 4, 1e-8)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, guided_filter_reference(near, src, 4, 1e-8), atol=1e-4)
    self_guided = run(near[:, :1], near[:, :1], 4, 1e-8)  # nearly flat filtered by itself: structure kept
    np.testing.assert_allclose(self_guided, guided_filter_reference(near[:, :1], near[:, :1], 4, 1e-8), atol=2e-6)


def test_degenerate_colour_guide_needs_some_eps(backend, rng):
    """Identical guide channels make the 3x3 system singular but for eps; with eps = 1e-4 float32 is still exact."""
    ramp = np.broadcast_to(np.linspace(0, 1, 29), (1, 3, 21, 29)).copy()
    src = rng.random((1, 1, 21, 29))
    np.testing.assert_allclose(run(ramp, src, 2, 1e-4), guided_filter_reference(ramp, src, 2, 1e-4), atol=1e-5)


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("scale", [2, 4])
@pytest.mark.parametrize("border", ["valid", "reflect"])
def test_fast_guided_filter(backend, channels, scale, border, rng):
    guide, src = rng.random((1, channels, 37, 50)), rng.random((1, 2, 37, 50))
    ref = guided_filter_reference(guide, src, 8, 1e-2, border, scale)
    np.testing.assert_allclose(run(guide, src, 8, 1e-2, border, scale=scale), ref, atol=1e-6)


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(backend, channels, dtype, rng):
    guide, src = rng.random((1, channels, 24, 31)), rng.random((1, 3, 24, 31))
    out = guided_filter(torch.tensor(guide).to(dtype), torch.tensor(src).to(dtype), 3, 1e-3)
    assert out.dtype == dtype and torch.isfinite(out).all()
    # error = rounding of the inputs (exact reference on the rounded inputs) + rounding of the output
    g, s = torch.tensor(guide).to(dtype).double().numpy(), torch.tensor(src).to(dtype).double().numpy()
    tol = 2e-3 if dtype == torch.float16 else 1.6e-2
    np.testing.assert_allclose(out.double().numpy(), guided_filter_reference(g, s, 3, 1e-3), atol=tol)


def test_layouts_and_per_batch_eps(backend, rng):
    guide = torch.tensor(rng.random((2, 3, 18, 40)), dtype=torch.float32)
    src = torch.tensor(rng.random((2, 2, 18, 40)), dtype=torch.float32)
    eps = torch.tensor([1e-3, 1e-1])
    ref = np.concatenate([guided_filter_reference(guide[i:i + 1].numpy(), src[i:i + 1].numpy(), 2, float(eps[i]))
                          for i in range(2)])
    np.testing.assert_allclose(guided_filter(guide, src, 2, eps).numpy(), ref, atol=1e-6)
    cl = guided_filter(guide.to(memory_format=torch.channels_last), src.to(memory_format=torch.channels_last), 2, eps)
    np.testing.assert_allclose(cl.numpy(), ref, atol=1e-6)
    strided = guided_filter(guide[..., ::2], src[..., ::2], 2, eps)  # non-contiguous views
    ref_s = np.concatenate([guided_filter_reference(guide[i:i + 1, :, :, ::2].numpy(), src[i:i + 1, :, :, ::2].numpy(),
                                                    2, float(eps[i])) for i in range(2)])
    np.testing.assert_allclose(strided.numpy(), ref_s, atol=1e-6)


@pytest.mark.parametrize("channels", [1, 3])
def test_matches_opencv(channels, rng):
    """cv2.ximgproc.guidedFilter pads with BORDER_REFLECT: our "symmetric", at every pixel."""
    guide = rng.random((45, 61, channels)).astype(np.float32)
    src = rng.random((45, 61)).astype(np.float32)
    ref = cv2.ximgproc.guidedFilter(guide, src, 6, 1e-2)
    got = guided_filter(torch.from_numpy(guide).permute(2, 0, 1)[None], torch.from_numpy(src)[None, None], 6, 1e-2,
                        "symmetric")
    np.testing.assert_allclose(got[0, 0].numpy(), ref, atol=2e-5)


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("border", ["reflect", "replicate"])
@pytest.mark.parametrize("scale", [1, 2])
def test_matches_kornia(channels, border, scale, rng):
    guide = torch.tensor(rng.random((2, channels, 40, 52)), dtype=torch.float32)
    src = torch.tensor(rng.random((2, 3, 40, 52)), dtype=torch.float32)
    ref = kornia.filters.guided_blur(guide, src, 9, 1e-2, border_type=border, subsample=scale)
    got = guided_filter(guide, src, 4, 1e-2, border, scale=scale)
    torch.testing.assert_close(got, ref, atol=2e-5, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("border", BORDERS)
def test_gradcheck(one_thread, channels, border):
    guide = torch.rand(2, channels, 9, 11, dtype=torch.float64, requires_grad=True)
    src = torch.rand(2, 2, 9, 11, dtype=torch.float64, requires_grad=True)
    eps = torch.tensor([1e-2, 5e-2], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda g, s, e: guided_filter(g, s, 2, e, border), (guide, src, eps))
    # the fast guided filter: torch's fast gradcheck (random projections of the Jacobian) keeps this cheap
    assert torch.autograd.gradcheck(lambda g, s, e: guided_filter(g, s, 4, e, border, scale=2), (guide, src, eps),
                                    fast_mode=True)


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("border", ["valid", "symmetric"])
def test_float32_gradients_match_float64(backend, channels, border, rng):
    """The float32 backward of each path against the float64 closed form checked by gradcheck above."""
    guide, src = rng.random((1, channels, 20, 23)), rng.random((1, 2, 20, 23))
    up = rng.standard_normal((1, 2, 20, 23))
    grads = []
    for dtype in (torch.float32, torch.float64):
        g = torch.tensor(guide, dtype=dtype, requires_grad=True)
        s = torch.tensor(src, dtype=dtype, requires_grad=True)
        e = torch.tensor([1e-2], dtype=dtype, requires_grad=True)
        out = guided_filter(g, s, 3, e, border)
        grads.append([t.double().numpy() for t in torch.autograd.grad(out, (g, s, e), torch.tensor(up, dtype=dtype))])
    for got, ref in zip(*grads):
        np.testing.assert_allclose(got, ref, atol=2e-4 * max(1.0, np.abs(ref).max()))


def test_module_and_self_guidance(rng):
    img = torch.rand(1, 3, 32, 32)
    gf = GuidedFilter(4, 1e-2, border="reflect")
    assert "radius=4" in repr(gf)
    torch.testing.assert_close(gf(img, img), guided_filter(img, img, 4, 1e-2, "reflect"))


@pytest.mark.parametrize("bad,match", [
    (lambda: guided_filter(torch.rand(1, 2, 8, 8), torch.rand(1, 1, 8, 8), 2, 1e-2), "guide must have 1 or 3"),
    (lambda: guided_filter(torch.rand(1, 1, 8, 8), torch.rand(1, 1, 8, 9), 2, 1e-2), "share batch"),
    (lambda: guided_filter(torch.rand(1, 1, 8, 8), torch.rand(2, 1, 8, 8), 2, 1e-2), "share batch"),
    (lambda: guided_filter(torch.rand(1, 8, 8), torch.rand(1, 8, 8), 2, 1e-2), "shape"),
    (lambda: guided_filter(torch.rand(1, 1, 8, 8), torch.rand(1, 1, 8, 8), -2, 1e-2), "radius"),
    (lambda: guided_filter(torch.rand(1, 1, 8, 8), torch.rand(1, 1, 8, 8), 2, -1e-2), "eps"),
    (lambda: guided_filter(torch.rand(1, 1, 8, 8), torch.rand(1, 1, 8, 8), 2, 0.0), "eps"),
    (lambda: guided_filter(torch.rand(1, 1, 8, 8), torch.rand(1, 1, 8, 8), 2, float("nan")), "eps"),
    (lambda: guided_filter(torch.rand(2, 1, 8, 8), torch.rand(2, 1, 8, 8), 2, torch.ones(3)), "eps"),
    (lambda: guided_filter(torch.rand(1, 1, 8, 8), torch.rand(1, 1, 8, 8), 2, 1e-2, scale=0), "scale"),
    (lambda: guided_filter(torch.rand(1, 1, 8, 8), torch.rand(1, 1, 8, 8), 2, 1e-2, border="wrap"), "border"),
    (lambda: guided_filter(torch.full((1, 1, 8, 8), float("inf")), torch.rand(1, 1, 8, 8), 2, 1e-2), "guide contains"),
    (lambda: guided_filter(torch.rand(1, 1, 8, 8), torch.full((1, 1, 8, 8), float("nan")), 2, 1e-2), "src contains"),
])
def test_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("radius,border", [(3, "valid"), (8, "symmetric"), (12, "valid")])
def test_many_tiles(backend, channels, radius, border, rng):
    """Images spanning several Triton tiles in both directions, so tile seams and edge masks are exercised."""
    guide, src = rng.random((1, channels, 100, 70)), rng.random((1, 1, 100, 70))
    ref = guided_filter_reference(guide, src, radius, 1e-2, border)
    np.testing.assert_allclose(run(guide, src, radius, 1e-2, border), ref, atol=1e-6)


@pytest.mark.parametrize("channels", [1, 3])
def test_gradients_across_tiles(backend, channels, rng):
    """Backward (fused on the Triton path) over 2 x 2 tiles, two src channels: against float64 autograd of the
    closed form, which gradcheck validates."""
    guide, src = rng.random((2, channels, 40, 33)), rng.random((2, 2, 40, 33))
    up = rng.standard_normal((2, 2, 40, 33))
    grads = []
    for dtype in (torch.float32, torch.float64):
        g = torch.tensor(guide, dtype=dtype, requires_grad=True)
        s = torch.tensor(src, dtype=dtype, requires_grad=True)
        e = torch.tensor([1e-2, 1e-3], dtype=dtype, requires_grad=True)
        out = guided_filter(g, s, 2, e)
        grads.append([t.double().numpy() for t in torch.autograd.grad(out, (g, s, e), torch.tensor(up, dtype=dtype))])
    for got, ref in zip(*grads):
        np.testing.assert_allclose(got, ref, atol=1e-5 * max(1.0, np.abs(ref).max()))


@pytest.mark.slow  # 7-10 s a case under the interpreter, and its node id does not say triton
@pytest.mark.parametrize("channels", [1, 3])
def test_sliding_forwards_at_the_gpus_row_counts(monkeypatch, channels, rng):
    """The forward walks (box, guided fit and apply) at the GPU's 1-8 rows per step instead of the interpreter's 16,
    over two row chunks and two column strips, against the float64 references: gray in every border mode, colour (a
    row per step: the costliest under the interpreter) with and without one."""
    from vision.kernels import box_filter
    from vision.kernels.box import sliding
    from vision.kernels.box.reference import box_filter_reference
    from vision.kernels.runtime import interpreting, use_backend

    if not interpreting():
        pytest.skip("runs the Triton path through the interpreter")
    monkeypatch.setattr(sliding, "INTERPRETED_RB", 0)
    guide, src = rng.random((1, channels, 18, 70)), rng.random((1, 2, 18, 70))
    with use_backend("triton"):
        for border in BORDERS if channels == 1 else ("valid", "symmetric"):
            np.testing.assert_allclose(run(guide, src, 2, 1e-2, border),
                                       guided_filter_reference(guide, src, 2, 1e-2, border), atol=1e-6)
            if channels == 1:
                got = box_filter(torch.tensor(src, dtype=torch.float32), 2, border).numpy()
                np.testing.assert_allclose(got, box_filter_reference(src, 2, border), atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("channels,radius,width,gpu_rows", [(1, 6, 120, False), (3, 6, 70, False),
                                                          (1, 2, 64, True), (3, 2, 64, True)])
def test_sliding_backward_strips_and_chunks(monkeypatch, channels, radius, width, gpu_rows, rng):
    """The fused sliding backward over two column strips and two row chunks, at the interpreter's row step and at
    the GPU's (1-2 rows), against the float64 closed form of the PyTorch path (which gradcheck validates)."""
    from vision.kernels.box import sliding
    from vision.kernels.guided import triton_backward, triton_backward_color
    from vision.kernels.runtime import interpreting, use_backend

    if not interpreting():
        pytest.skip("runs the Triton path through the interpreter")
    if gpu_rows:
        monkeypatch.setattr(sliding, "INTERPRETED_RB", 0)
    calls = []
    module = triton_backward if channels == 1 else triton_backward_color
    fused = module.backward
    monkeypatch.setattr(module, "backward", lambda *a: calls.append(1) or fused(*a))
    guide, src = rng.random((1, channels, 20, width)), rng.random((1, 2, 20, width))
    up = rng.standard_normal((1, 2, 20, width))
    grads = []
    for dtype, backend in ((torch.float32, "triton"), (torch.float64, "torch")):
        g = torch.tensor(guide, dtype=dtype, requires_grad=True)
        s = torch.tensor(src, dtype=dtype, requires_grad=True)
        e = torch.tensor([1e-2], dtype=dtype, requires_grad=True)
        with use_backend(backend):
            out = guided_filter(g, s, radius, e)
            grads.append([t.double().numpy() for t in torch.autograd.grad(out, (g, s, e),
                                                                          torch.tensor(up, dtype=dtype))])
    assert calls == [1]
    for got, ref in zip(*grads):
        np.testing.assert_allclose(got, ref, atol=1e-5 * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("border", BORDERS)
def test_cpu_bands(monkeypatch, channels, border, rng):
    """The CPU inference path computes in bands with a 2r halo; force many bands on a small image."""
    from vision.kernels.guided import cpu_banded

    monkeypatch.setattr(cpu_banded, "WORKSPACE_BYTES", 1 << 15)
    monkeypatch.setenv("VISION_BACKEND", "torch")
    guide, src = rng.random((2, channels, 150, 37)), rng.random((2, 2, 150, 37))
    assert len(cpu_banded._bands(150, 3, 9 if channels == 1 else 27, 37)[1]) > 2
    np.testing.assert_allclose(run(guide, src, 3, 1e-3, border), guided_filter_reference(guide, src, 3, 1e-3, border),
                               atol=1e-6)


@pytest.mark.parametrize("channels", [(1, 2), (3, 3)])
@pytest.mark.parametrize("border", ["valid", "reflect"])
def test_cpu_bands_take_inputs_that_require_grad(channels, border, monkeypatch):
    """CPU float32 inputs that require grad take the banded forward (the op's backward recomputes its statistics):
    q against the float64 reference, and the gradients against central differences of that reference along a
    random direction (float64 NumPy, independent of our autograd)."""
    from vision.kernels.guided import cpu_banded

    taken = []
    real = cpu_banded.forward
    monkeypatch.setattr(cpu_banded, "forward", lambda *a: taken.append(1) or real(*a))
    g, c = channels
    rng = np.random.default_rng(11)
    I64, p64 = rng.random((1, g, 24, 29)), rng.random((1, c, 24, 29))
    I = torch.tensor(I64, dtype=torch.float32, requires_grad=True)
    p = torch.tensor(p64, dtype=torch.float32, requires_grad=True)
    r, eps = 3, 0.02
    q = guided_filter(I, p, r, eps, border=border)
    assert taken, "the banded forward was not taken"
    np.testing.assert_allclose(q.detach().numpy(), guided_filter_reference(I64, p64, r, eps, border), atol=2e-6)
    w = rng.standard_normal(q.shape)
    dI, dp = torch.autograd.grad(q, (I, p), torch.tensor(w, dtype=torch.float32))
    vI, vp = rng.standard_normal(I64.shape), rng.standard_normal(p64.shape)
    h = 1e-5

    def along(dI64, dp64):
        plus = guided_filter_reference(I64 + h * dI64, p64 + h * dp64, r, eps, border)
        minus = guided_filter_reference(I64 - h * dI64, p64 - h * dp64, r, eps, border)
        return float(((plus - minus) / (2 * h) * w).sum())

    want_I, want_p = along(vI, 0 * vp), along(0 * vI, vp)
    assert abs(float((dI.double().numpy() * vI).sum()) - want_I) <= 1e-4 * max(1.0, abs(want_I))
    assert abs(float((dp.double().numpy() * vp).sum()) - want_p) <= 1e-4 * max(1.0, abs(want_p))


def test_symmetric_3x3_inverses_match_float64(rng):
    """Both forms of the colour guide's 3x3 inverse (allocating, and in place in the CPU bands' workspace)
    against torch.linalg.inv in float64, on covariance-like matrices plus eps."""
    from vision.kernels.guided.torch_path import PAIRS, inverse_sym3, inverse_sym3_into

    x = torch.from_numpy(rng.standard_normal((5, 3, 7, 9)))
    m = torch.einsum("nihw,njhw->hwij", x, x) / 5 + 1e-2 * torch.eye(3, dtype=torch.float64)
    want = torch.linalg.inv(m)
    entries = [m[..., i, j].float().contiguous() for i, j in PAIRS]
    got = torch.stack(inverse_sym3(entries))
    s, cof, det = [e.clone() for e in entries], list(torch.empty(6, 7, 9)), torch.empty(7, 9)
    inverse_sym3_into(s, cof, det)
    for inv in (got, torch.stack(s)):
        for k, (i, j) in enumerate(PAIRS):
            torch.testing.assert_close(inv[k].double(), want[..., i, j], rtol=1e-4, atol=1e-4)
