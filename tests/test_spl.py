"""Structure Preservation Loss: the PyTorch path and the Triton kernels (in the interpreter) against the
float64 literal-least-squares reference; gradcheck; masks; numerics; bad input; the benchmark's peer."""
import numpy as np
import pytest
import torch

from vision.kernels import structure_loss
from vision.kernels.spl.reference import (gray, structure_loss_grad_reference, structure_loss_reference,
                                          window_fits)

BORDERS = ("valid", "reflect", "replicate", "symmetric")


def make_pair(rng, b=1, c=3, h=13, w=17):
    """A source with edges and texture, and an edit that is partly a tone change, partly not."""
    yy, xx = np.mgrid[0:h, 0:w]
    step = ((xx > w // 2) ^ (yy > h // 3)).astype(np.float64)
    src = 0.25 + 0.5 * step[None, None] * rng.uniform(0.5, 1.0, (b, c, 1, 1)) + 0.2 * rng.random((b, c, h, w))
    edit = 0.8 * src ** 1.5 + 0.1 + 0.15 * rng.random((b, c, h, w))
    return src, np.clip(edit, 0, 1)


def run(src, edit, dtype=torch.float64, grad_output=None, **kw):
    """Loss (or map), and gradients w.r.t. both images, from the public op."""
    s = torch.tensor(src, dtype=dtype, requires_grad=True)
    e = torch.tensor(edit, dtype=dtype, requires_grad=True)
    if "mask" in kw and kw["mask"] is not None and not isinstance(kw["mask"], torch.Tensor):
        kw["mask"] = torch.tensor(kw["mask"], dtype=dtype)
    out = structure_loss(s, e, **kw)
    if grad_output is None:
        out.backward()
    else:
        out.backward(torch.tensor(grad_output, dtype=dtype))
    return out.detach().double().numpy(), s.grad.double().numpy(), e.grad.double().numpy()


def rel_err(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / max(np.abs(np.asarray(b)).max(), 1e-300))


def ref(src, edit, radius, eps, mask, bidirectional, detach, reduction, border, grad_output=None):
    value = structure_loss_reference(src, edit, radius, eps, mask, bidirectional, reduction, border)
    ds, de = structure_loss_grad_reference(src, edit, radius, eps, mask, bidirectional, detach, reduction, border,
                                           grad_output)
    return value, ds, de


# ------------------------------------------------------------------------------------------- the reference


def test_reference_exact_affine_edit_has_the_closed_form_residual(rng):
    # E = alpha S + beta exactly: the forward fit leaves alpha^2 var eps^2 / (var + eps)^2 (the ridge
    # shrinks a), the reverse fit var (eps / (alpha^2 var + eps))^2; var from np.var of the patch itself.
    s = rng.random((1, 1, 15, 16))
    alpha, beta, eps, r = 0.6, 0.2, 1e-2, 2
    d = structure_loss_reference(s, alpha * s + beta, r, eps, reduction="none")[0, 0]
    for y, x in [(2, 2), (7, 9), (12, 13)]:
        var = s[0, 0, y - r:y + r + 1, x - r:x + r + 1].var()
        want = alpha ** 2 * var * eps ** 2 / (var + eps) ** 2 + var * (eps / (alpha ** 2 * var + eps)) ** 2
        assert d[y, x] == pytest.approx(want, rel=1e-10)
    # corner window: only the in-image (r+1)^2 pixels
    var = s[0, 0, :r + 1, :r + 1].var()
    want = alpha ** 2 * var * eps ** 2 / (var + eps) ** 2 + var * (eps / (alpha ** 2 * var + eps)) ** 2
    assert d[0, 0] == pytest.approx(want, rel=1e-10)


def test_reference_true_gradient_matches_finite_differences(rng):
    src, edit = make_pair(rng, 1, 3, 5, 6)
    mask = rng.random((1, 1, 5, 6))
    for bidirectional in (True, False):
        ds, de = structure_loss_grad_reference(src, edit, 2, 1e-2, mask, bidirectional, detach_coefficients=False)
        h = 1e-6
        for arr, grad, which in ((src, ds, 0), (edit, de, 1)):
            num = np.zeros_like(arr)
            for idx in np.ndindex(arr.shape):
                p, m = arr.copy(), arr.copy()
                p[idx] += h
                m[idx] -= h
                args_p = (p, edit) if which == 0 else (src, p)
                args_m = (m, edit) if which == 0 else (src, m)
                num[idx] = (structure_loss_reference(*args_p, 2, 1e-2, mask, bidirectional)
                            - structure_loss_reference(*args_m, 2, 1e-2, mask, bidirectional)) / (2 * h)
            assert rel_err(grad, num) < 1e-7


def test_reference_fit_is_the_least_squares_solution(rng):
    # one window by np.linalg.lstsq on the explicit weighted design matrix with a ridge row
    src, edit = make_pair(rng, 1, 3, 9, 9)
    mask = rng.random((1, 1, 9, 9))
    fits = window_fits(src, edit, 2, 1e-3, mask)
    S, E, wm = gray(src)[0], gray(edit)[0], mask[0, 0]
    y, x = 4, 5
    sl = np.s_[y - 2:y + 3, x - 2:x + 3]
    sw = np.sqrt(wm[sl].ravel() / wm[sl].sum())
    A = np.vstack([np.c_[S[sl].ravel() * sw, sw], [np.sqrt(1e-3), 0.0]])
    rhs = np.r_[E[sl].ravel() * sw, 0.0]
    (a, b), *_ = np.linalg.lstsq(A, rhs, rcond=None)
    assert fits["a"][0, y, x] == pytest.approx(a, rel=1e-10)
    assert fits["b"][0, y, x] == pytest.approx(b, rel=1e-10)
    resid = (a * S[sl] + b - E[sl]) ** 2
    assert fits["D"][0, y, x] == pytest.approx((wm[sl] * resid).sum() / wm[sl].sum(), rel=1e-10)


# ------------------------------------------------------------------------------------------- PyTorch path


@pytest.mark.parametrize("border", BORDERS)
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("detach", [True, False])
def test_torch_path_float64_matches_reference(rng, border, masked, detach):
    src, edit = make_pair(rng, 2, 3, 11, 14)
    mask = None
    if masked:
        mask = rng.random((2, 1, 11, 14))
        mask[:, :, :, :4] = 0.0  # windows with no weight at all, and windows on the mask edge
    for bidirectional in (True, False):
        kw = dict(radius=2, eps=1e-3, mask=mask, bidirectional=bidirectional, detach_coefficients=detach,
                  border=border)
        v, ds, de = run(src, edit, **kw)
        rv, rds, rde = ref(src, edit, 2, 1e-3, mask, bidirectional, detach, "mean", border)
        assert v == pytest.approx(rv, rel=1e-10)
        assert rel_err(ds, rds) < 1e-10 and rel_err(de, rde) < 1e-10


@pytest.mark.parametrize("shape,radius", [((1, 3, 3, 4), 5), ((2, 1, 1, 7), 2), ((1, 3, 9, 6), 0), ((1, 3, 12, 5), 3)])
def test_torch_path_sizes_incl_smaller_than_the_window(rng, shape, radius):
    src, edit = make_pair(rng, *shape)
    g = rng.standard_normal((shape[0], 1) + shape[2:])
    for border in ("valid", "reflect"):
        for detach in (True, False):
            v, ds, de = run(src, edit, radius=radius, eps=1e-3, detach_coefficients=detach, border=border,
                            reduction="none", grad_output=g)
            rv, rds, rde = ref(src, edit, radius, 1e-3, None, True, detach, "none", border, g)
            assert rel_err(v, rv) < 1e-10
            if radius == 0:  # one-pixel windows are fitted exactly
                assert np.abs(rv).max() == 0 and np.abs(rde).max() == 0
            else:
                assert rel_err(ds, rds) < 1e-10 and rel_err(de, rde) < 1e-10


@pytest.mark.parametrize("masked", [False, True])
def test_torch_path_float32_matches_reference(rng, masked):
    src, edit = make_pair(rng, 2, 3, 40, 52)
    mask = rng.random((1, 1, 40, 52)) if masked else None
    for detach in (True, False):
        v, ds, de = run(src, edit, torch.float32, radius=5, eps=1e-4, mask=mask, detach_coefficients=detach)
        rv, rds, rde = ref(src, edit, 5, 1e-4, mask, True, detach, "mean", "valid")
        assert v == pytest.approx(rv, rel=1e-5)
        assert rel_err(ds, rds) < 1e-5 and rel_err(de, rde) < 1e-5
    g = rng.standard_normal((2, 1, 40, 52))
    m, _, de = run(src, edit, torch.float32, grad_output=g, radius=5, eps=1e-4, mask=mask, reduction="none")
    rm, _, rde = ref(src, edit, 5, 1e-4, mask, True, True, "none", "valid", g)
    # a window's residual is a difference of second moments ~10x larger: float32 keeps ~1e-5 of it
    assert rel_err(m, rm) < 1e-4 and rel_err(de, rde) < 1e-5


def test_gradcheck_float64_true_gradient(rng, one_thread):
    src, edit = make_pair(rng, 1, 3, 6, 7)
    s = torch.tensor(src, requires_grad=True)
    e = torch.tensor(edit, requires_grad=True)
    mask = torch.tensor(rng.random((1, 1, 6, 7)))
    g = torch.tensor(rng.standard_normal((1, 1, 6, 7)))
    cases = [dict(), dict(mask=mask, bidirectional=False), dict(mask=mask, border="reflect"),
             dict(reduction="none", eps=1e-2)]
    for i, kw in enumerate(cases):
        def f(a, b, kw=kw):
            out = structure_loss(a, b, radius=2, detach_coefficients=False, **{"eps": 1e-3, **kw})
            return out if out.dim() == 0 else (out * g).sum()
        # the first case element by element, the others along random directions (fewer evaluations)
        assert torch.autograd.gradcheck(f, (s, e), eps=1e-6, atol=1e-9, rtol=1e-6, fast_mode=i > 0)


def test_stop_gradient_is_not_the_true_gradient_and_sums_to_zero(rng):
    # detach_coefficients=True is the published surrogate (checked against the reference above); it
    # differs from the true gradient, and, since each window's fit has zero-mean residuals, it sums to
    # zero over the image: optimising with it keeps the mean gray value.
    src, edit = make_pair(rng, 1, 3, 16, 16)
    _, _, de_stop = run(src, edit, radius=3, detach_coefficients=True)
    _, _, de_true = run(src, edit, radius=3, detach_coefficients=False)
    assert rel_err(de_stop, de_true) > 1e-3
    assert abs(de_stop.sum()) < 1e-12 * np.abs(de_stop).sum()
    mask = rng.random((1, 1, 16, 16))
    _, _, de_mask = run(src, edit, radius=3, mask=mask)
    assert abs(de_mask.sum()) < 1e-12 * np.abs(de_mask).sum()


# ------------------------------------------------------------------------------------------- Triton kernels


TRITON_CASES = [
    dict(shape=(2, 3, 40, 70), radius=5, eps=1e-4),
    dict(shape=(1, 3, 37, 45), radius=5, eps=1e-3, masked=True, detach=False),
    dict(shape=(2, 1, 33, 20), radius=3, eps=1e-3, reduction="none", bidirectional=False),
    dict(shape=(2, 3, 5, 4), radius=5, eps=1e-3, masked="shared"),  # smaller than the window; one mask for both
    dict(shape=(1, 3, 48, 48), radius=16, eps=1e-2, detach=False, bidirectional=False),
    dict(shape=(1, 3, 21, 30), radius=0, eps=1e-3, reduction="none"),
]


@pytest.mark.parametrize("case", TRITON_CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_triton_kernels_match_reference(rng, backend, case):
    shape, radius, eps = case["shape"], case["radius"], case["eps"]
    reduction, detach = case.get("reduction", "mean"), case.get("detach", True)
    bidirectional = case.get("bidirectional", True)
    src, edit = make_pair(rng, *shape)
    mask = None
    if case.get("masked"):
        mask = rng.random((1 if case["masked"] == "shared" else shape[0], 1) + shape[2:])
        mask[..., : shape[2] // 3, :] = 0.0
    g = rng.standard_normal((shape[0], 1) + shape[2:]) if reduction == "none" else None
    v, ds, de = run(src, edit, torch.float32, grad_output=g, radius=radius, eps=eps, mask=mask,
                    bidirectional=bidirectional, detach_coefficients=detach, reduction=reduction)
    rv, rds, rde = ref(src, edit, radius, eps, mask, bidirectional, detach, reduction, "valid", g)
    # A window's residual is var_E - a (c + a eps): a difference of second moments, so its float32 rounding
    # is relative to the images' variance, not to the (much smaller) residual of a good fit. Where one window
    # covers the whole image (the 5 x 4 case) the loss is a single such difference, and the order of the float32
    # window sums moves it by ~1e-5 relative (seen 1.04e-5 on an AVX-512 machine with the older dot-product sums).
    scale = sum(float(x.mean(1).var()) for x in (src, edit))
    assert np.abs(np.asarray(v) - rv).max() <= 1e-5 * np.abs(rv).max() + 32 * np.finfo(np.float32).eps * scale
    if np.abs(rds).max() == 0:  # r = 0: nothing to fit, nothing to differentiate
        assert np.abs(ds).max() == 0 and np.abs(de).max() == 0
    else:
        assert rel_err(ds, rds) < 1e-5 and rel_err(de, rde) < 1e-5


def test_triton_path_is_the_one_that_ran(monkeypatch):
    from vision.kernels.runtime import triton_available
    from vision.kernels.spl import triton_path

    if not triton_available():
        pytest.skip("triton does not import here")
    monkeypatch.setenv("VISION_BACKEND", "triton")
    calls = []
    real = triton_path.forward
    monkeypatch.setattr(triton_path, "forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    structure_loss(torch.rand(1, 3, 20, 20), torch.rand(1, 3, 20, 20))
    assert calls


# ------------------------------------------------------------------------------------------- numerics


def test_flat_images(rng, backend):
    flat = np.full((1, 3, 24, 20), 0.7)
    tex = rng.random((1, 3, 24, 20))
    for dtype in (torch.float32, torch.float64):
        v, ds, de = run(flat, flat, dtype, radius=5)  # zero up to the rounding of the gray mean
        assert 0.0 <= v < 1e-20 and np.abs(de).max() < 1e-12 and np.abs(ds).max() < 1e-12
        for detach in (True, False):
            # flat source, textured edit: the forward fit has a = 0 and leaves var(E); the reverse fit nothing
            v, ds, de = run(flat, tex, dtype, radius=5, detach_coefficients=detach)
            rv, rds, rde = ref(flat, tex, 5, 1e-4, None, True, detach, "mean", "valid")
            assert v == pytest.approx(rv, rel=1e-5) and rel_err(de, rde) < 1e-5
            assert np.isfinite(ds).all()


def test_nearly_flat_bright_image_keeps_its_variance(rng, backend):
    # cumsum-style float32 moments lose a 1e-3 texture on a 0.7 background; centred direct sums do not
    src = 0.7 + 1e-3 * rng.random((1, 3, 48, 48))
    edit = 0.7 + 1e-3 * rng.random((1, 3, 48, 48))
    m, _, _ = run(src, edit, torch.float32, grad_output=np.ones((1, 1, 48, 48)), radius=5, eps=1e-8,
                  reduction="none")
    rm = structure_loss_reference(src, edit, 5, 1e-8, reduction="none")
    assert (m >= 0).all()
    assert rel_err(m, rm) < 1e-3


@pytest.mark.parametrize("eps", [1e-8, 1e-4, 1e-1, 1.0])
def test_eps_range_float32(rng, eps):
    src, edit = make_pair(rng, 1, 3, 30, 30)
    v, _, de = run(src, edit, torch.float32, radius=4, eps=eps)
    rv, _, rde = ref(src, edit, 4, eps, None, True, True, "mean", "valid")
    assert v == pytest.approx(rv, rel=1e-4) and rel_err(de, rde) < 1e-4


def test_affine_edit_is_nearly_free_and_structure_change_is_not(rng):
    src = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    tone = structure_loss(src, 0.5 * src + 0.3)
    blurred = torch.nn.functional.avg_pool2d(src, 5, 1, 2, count_include_pad=False)
    assert float(tone) < 1e-3 * float(structure_loss(src, blurred))


def test_layouts_and_half_precision(rng):
    src, edit = make_pair(rng, 2, 3, 30, 34)
    s, e = torch.tensor(src, dtype=torch.float32), torch.tensor(edit, dtype=torch.float32)
    base = structure_loss(s, e)
    cl = structure_loss(s.to(memory_format=torch.channels_last), e.to(memory_format=torch.channels_last))
    nc = structure_loss(s.transpose(2, 3).contiguous().transpose(2, 3), e[:, :, :, :].transpose(2, 3).transpose(2, 3))
    big = torch.zeros(2, 3, 30, 68)
    big[..., ::2] = e
    strided = structure_loss(s, big[..., ::2])
    for other in (cl, nc, strided):
        assert float(other) == pytest.approx(float(base), rel=1e-6)
    for dtype in (torch.float16, torch.bfloat16):
        out = structure_loss(s.to(dtype), e.to(dtype))
        assert out.dtype == dtype
        want = structure_loss_reference(s.to(dtype).double().numpy(), e.to(dtype).double().numpy())
        assert float(out) == pytest.approx(want, rel=1e-2)


# ------------------------------------------------------------------------------------------- masks


def test_mask_of_ones_is_no_mask(rng):
    src, edit = make_pair(rng, 1, 3, 20, 22)
    a = run(src, edit, radius=3)
    b = run(src, edit, radius=3, mask=np.ones((20, 22)))
    for x, y in zip(a, b):
        assert rel_err(x, y) < 1e-12


def test_zero_weight_pixels_take_no_part(rng):
    src, edit = make_pair(rng, 1, 3, 20, 22)
    mask = np.ones((1, 1, 20, 22))
    mask[..., 5:9, 6:12] = 0.0
    v, _, de = run(src, edit, radius=3, mask=mask)
    assert np.abs(de[..., 5:9, 6:12]).max() == 0.0
    other = edit.copy()
    other[..., 5:9, 6:12] = rng.random((1, 3, 4, 6))
    v2, _, _ = run(src, other, radius=3, mask=mask)
    assert v2 == pytest.approx(v, rel=1e-12)
    v0, _, de0 = run(src, edit, radius=3, mask=np.zeros((20, 22)))
    assert v0 == 0.0 and np.abs(de0).max() == 0.0


def test_mask_weights_the_fits_instead_of_zeroing_the_images(rng):
    # an edit that is exactly affine inside the mask and garbage outside: the weighted fits see only
    # masked pixels and find (almost) nothing; multiplying both images by the mask, as the published
    # code does, puts artificial zeros into every window on the mask edge.
    src = 0.2 + 0.6 * rng.random((1, 3, 40, 40))
    edit = 0.5 * src + 0.3
    edit[..., :, 24:] = rng.random((1, 3, 40, 16))
    mask = np.zeros((1, 1, 40, 40))
    mask[..., :, :24] = 1.0
    # (a small eps, so that the ridge's own residual on an affine edit, ~ var (eps / var)^2, is negligible)
    ours, _, _ = run(src, edit, torch.float32, radius=5, eps=1e-6, mask=mask)
    assert ours == pytest.approx(structure_loss_reference(src, edit, 5, 1e-6, mask), rel=1e-3, abs=1e-8)
    zeroed = float(structure_loss(torch.tensor(src * mask, dtype=torch.float32),
                                  torch.tensor(edit * mask, dtype=torch.float32), eps=1e-6))
    unmasked = float(structure_loss(torch.tensor(src), torch.tensor(edit), eps=1e-6))
    assert ours < 1e-3 * zeroed and ours < 1e-3 * unmasked


# ------------------------------------------------------------------------------------------- bad input


def test_bad_input_raises_value_error_naming_it():
    x = torch.rand(1, 3, 16, 16)
    with pytest.raises(ValueError, match="same batch size, height and width"):
        structure_loss(x, torch.rand(1, 3, 16, 17))
    with pytest.raises(ValueError, match="edited must have 1 or 3 channels, got 2"):
        structure_loss(x, torch.rand(1, 2, 16, 16))
    with pytest.raises(ValueError, match="source must have 1 or 3 channels, got 4"):
        structure_loss(torch.rand(1, 4, 16, 16), x)
    bad = x.clone()
    bad[0, 1, 3, 3] = float("nan")
    with pytest.raises(ValueError, match="edited contains 1 NaN"):
        structure_loss(x, bad)
    inf = x.clone()
    inf[0, 0, 0, 0] = float("inf")
    with pytest.raises(ValueError, match="source contains 1 NaN or Inf"):
        structure_loss(inf, x)
    with pytest.raises(ValueError, match=r"mask must have shape .* got \(1, 1, 16, 15\)"):
        structure_loss(x, x, mask=torch.ones(1, 1, 16, 15))
    with pytest.raises(ValueError, match=r"mask must have shape"):
        structure_loss(x, x, mask=torch.ones(1, 3, 16, 16))
    with pytest.raises(ValueError, match=r"mask values must lie in \[0, 1\]"):
        structure_loss(x, x, mask=2 * torch.ones(16, 16))
    with pytest.raises(ValueError, match="mask contains"):
        structure_loss(x, x, mask=torch.full((16, 16), float("nan")))
    with pytest.raises(ValueError, match="radius"):
        structure_loss(x, x, radius=-1)
    with pytest.raises(ValueError, match="eps must be positive"):
        structure_loss(x, x, eps=0.0)
    with pytest.raises(ValueError, match="reduction"):
        structure_loss(x, x, reduction="sum")
    with pytest.raises(ValueError, match="border"):
        structure_loss(x, x, border="wrap")
    with pytest.raises(ValueError, match="float"):
        structure_loss(x, (x * 255).to(torch.uint8))
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        structure_loss(x[0], x[0])


# ------------------------------------------------------------------------------------------- losses, bench


def test_modules_wrap_the_function(rng):
    from vision import ColorPreservationLoss, StructurePreservationLoss
    from vision.losses import PreservationLoss

    src, edit = (torch.tensor(a, dtype=torch.float32) for a in make_pair(rng, 1, 3, 24, 24))
    spl = StructurePreservationLoss(radius=3, eps=1e-3)
    assert float(spl(src, edit)) == pytest.approx(structure_loss_reference(src.numpy(), edit.numpy(), 3, 1e-3),
                                                  rel=1e-5)
    assert StructurePreservationLoss(reduction="none")(src, edit).shape == (1, 1, 24, 24)
    combo = PreservationLoss(spl_weight=10.0, color_weight=2.0, radius=3, eps=1e-3)
    want = 10.0 * float(spl(src, edit)) + 2.0 * float(ColorPreservationLoss()(src, edit))
    assert float(combo(src, edit)) == pytest.approx(want, rel=1e-6)
    m = torch.rand(1, 1, 24, 24)
    t = combo.terms(src, edit, color_reference=edit * 0.9, spl_mask=m, color_mask=m)
    assert float(t["structure"]) == pytest.approx(float(spl(src, edit, m)), rel=1e-6)
    assert float(t["color"]) == pytest.approx(float(ColorPreservationLoss()(edit * 0.9, edit, m)), rel=1e-6)


def test_color_preservation_loss_is_chroma_mse(rng):
    from vision.losses import color_preservation_loss

    a, b = rng.random((2, 3, 10, 12)), rng.random((2, 3, 10, 12))
    w = rng.random((1, 1, 10, 12))

    def chroma(x):  # ITU-R BT.601 with kornia's constants
        y = 0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]
        return np.stack([(x[:, 2] - y) * 0.564 + 0.5, (x[:, 0] - y) * 0.713 + 0.5], 1)

    d2 = (chroma(a) - chroma(b)) ** 2
    ta, tb = torch.tensor(a, dtype=torch.float32), torch.tensor(b, dtype=torch.float32)
    assert float(color_preservation_loss(ta, tb)) == pytest.approx(d2.mean(), rel=1e-5)
    want = (w * d2).sum() / (w.sum() * 2 * 2)  # two images in the batch share the mask, two channels
    assert float(color_preservation_loss(ta, tb, torch.tensor(w, dtype=torch.float32))) == pytest.approx(want, rel=1e-5)
    assert float(color_preservation_loss(ta, (ta + 0.1))) < 1e-10  # brightening keeps the chroma
    with pytest.raises(ValueError, match="same shape"):
        color_preservation_loss(ta, tb[:, :, :9])
    with pytest.raises(ValueError, match="3 channels"):
        color_preservation_loss(ta[:, :1], tb[:, :1])


def test_bench_peer_computes_the_same_loss(rng):
    from vision.pipelines.bench.spl import unfused_structure_loss

    src, edit = make_pair(rng, 1, 3, 30, 33)
    s, e = torch.tensor(src), torch.tensor(edit, requires_grad=True)
    loss = unfused_structure_loss(s, e, 4, 1e-3)
    loss.backward()
    assert float(loss.detach()) == pytest.approx(structure_loss_reference(src, edit, 4, 1e-3), rel=1e-9)
    _, rde = structure_loss_grad_reference(src, edit, 4, 1e-3)
    assert rel_err(e.grad.numpy(), rde) < 1e-9


def test_bench_spl_runs(capsys):
    from vision.pipelines.cli import main

    assert main(["bench", "spl", "--sizes", "40", "--restore-size", "32", "--steps", "2", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "loss+grad 40x40" in out and "restore 2 steps 32x32" in out and "peer/ours" in out
