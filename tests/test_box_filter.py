"""box_filter against the float64 reference, on every path (PyTorch, Triton in the interpreter), and against OpenCV."""
import cv2
import numpy as np
import pytest
import torch

from vision.kernels import BoxFilter, box_filter
from vision.kernels.box import torch_path
from vision.kernels.box.reference import box_filter_reference

BORDERS = ["valid", "reflect", "replicate", "symmetric"]


@pytest.mark.parametrize("border", BORDERS)
@pytest.mark.parametrize("radius", [1, 2, 8])
@pytest.mark.parametrize("shape", [(13, 17), (5, 3), (1, 1), (37, 20)])
def test_matches_reference(backend, border, radius, shape, rng):
    x = rng.random((2, 2) + shape)
    got = box_filter(torch.tensor(x, dtype=torch.float32), radius, border).numpy()
    np.testing.assert_allclose(got, box_filter_reference(x, radius, border), atol=2e-6, rtol=0)


@pytest.mark.parametrize("border", BORDERS)
def test_adjoint_is_transpose(backend, border, rng):
    """<M x, y> = <x, M^T y>, with M from the float64 reference."""
    x, y = rng.random((1, 1, 11, 14)), rng.random((1, 1, 11, 14))
    yt = torch.tensor(y, dtype=torch.float32, requires_grad=True)
    xt = torch.tensor(x, dtype=torch.float32, requires_grad=True)
    (box_filter(xt, 3, border) * yt.detach()).sum().backward()
    np.testing.assert_allclose((box_filter_reference(x, 3, border) * y).sum(), (x * xt.grad.numpy()).sum(), rtol=1e-6)


@pytest.mark.parametrize("border", BORDERS)
def test_gradcheck(one_thread, border):
    x = torch.rand(1, 2, 7, 9, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: box_filter(t, 3, border), (x,))


@pytest.mark.parametrize("border,code", [("reflect", cv2.BORDER_REFLECT_101), ("replicate", cv2.BORDER_REPLICATE),
                                         ("symmetric", cv2.BORDER_REFLECT)])
def test_matches_opencv(border, code, rng):
    x = rng.random((31, 45)).astype(np.float32)
    ref = cv2.blur(x, (11, 11), borderType=code)
    got = box_filter(torch.from_numpy(x)[None, None], 5, border)[0, 0].numpy()
    np.testing.assert_allclose(got, ref, atol=2e-6)


def test_nearly_flat_keeps_variance():
    """0.7 + 1e-3 noise: the window variance E[x^2] - E[x]^2 stays positive and accurate (no long prefix sums)."""
    g = torch.Generator().manual_seed(0)
    x = 0.7 + 1e-3 * torch.rand(1, 1, 128, 128, generator=g)
    ref_var = box_filter_reference(x.double().numpy() ** 2, 8) - box_filter_reference(x.double().numpy(), 8) ** 2
    xc = x - x.mean()
    var = (box_filter(xc * xc, 8) - box_filter(xc, 8) ** 2).numpy()
    assert (var > 0).all()
    np.testing.assert_allclose(var, ref_var, rtol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(backend, dtype, rng):
    x = rng.random((1, 3, 24, 19))
    got = box_filter(torch.tensor(x).to(dtype), 2)
    assert got.dtype == dtype
    tol = 2e-3 if dtype == torch.float16 else 1e-2
    np.testing.assert_allclose(got.float().numpy(), box_filter_reference(x, 2), atol=tol)


@pytest.mark.parametrize("border", ["valid", "reflect", "replicate", "symmetric"])
def test_layouts(backend, rng, border):
    x = torch.tensor(rng.random((2, 3, 16, 21)), dtype=torch.float32)
    ref = box_filter_reference(x.numpy(), 2, border)
    # channels-last (what HWC arrays become): on CPU OpenCV filters the interleaved pixels as they lie
    np.testing.assert_allclose(box_filter(x.to(memory_format=torch.channels_last), 2, border).numpy(), ref, atol=2e-6)
    if border != "valid":
        return
    wide = torch.tensor(rng.random((2, 3, 16, 42)), dtype=torch.float32)[..., ::2]  # non-contiguous
    np.testing.assert_allclose(box_filter(wide, 2).numpy(), box_filter_reference(wide.numpy(), 2), atol=2e-6)


def test_module_and_radius_zero(rng):
    x = torch.rand(1, 1, 8, 8)
    assert torch.equal(box_filter(x, 0), x)
    assert "radius=2" in repr(BoxFilter(2))
    assert torch.allclose(BoxFilter(2, "reflect")(x), box_filter(x, 2, "reflect"))


def test_cpu_engines_agree(rng):
    """OpenCV and avg_pool window-sum engines give the same sums (the first runs without grad, the second with)."""
    x = torch.tensor(rng.random((2, 19, 23)), dtype=torch.float32)
    for mode in ["zero", "reflect", "replicate", "symmetric"]:
        a = torch_path.window_sum(x, 4, mode)
        b = torch_path.window_sum(x.clone().requires_grad_(), 4, mode).detach()
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-6)


@pytest.mark.parametrize("bad,match", [
    (lambda: box_filter(torch.rand(3, 8, 8), 1), "shape"),
    (lambda: box_filter(torch.rand(1, 1, 8, 8), -1), "radius"),
    (lambda: box_filter(torch.rand(1, 1, 8, 8), 1.5), "radius"),
    (lambda: box_filter(torch.rand(1, 1, 8, 8), 1, "wrap"), "border"),
    (lambda: box_filter(torch.full((1, 1, 4, 4), float("nan")), 1), "NaN"),
    (lambda: box_filter(torch.zeros(1, 1, 4, 4, dtype=torch.int32), 1), "float"),
    (lambda: box_filter(np.zeros((1, 1, 4, 4)), 1), "torch.Tensor"),
])
def test_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()
