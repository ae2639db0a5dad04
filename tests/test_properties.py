"""Property-based tests: the ops' shape / dtype / border / radius space against the float64 references.

hypothesis draws inputs (tiny images, radii up to several times the image, every border mode, half precision);
each case must agree with the float64 NumPy reference to the dtype's rounding, on the PyTorch path and on the
Triton path through the interpreter (fewer examples there: it is slow).
"""
import numpy as np
import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from vision.kernels import box_filter, guided_filter, local_linear_fit  # noqa: E402
from vision.kernels.box.reference import box_filter_reference  # noqa: E402
from vision.kernels.guided.reference import guided_filter_reference  # noqa: E402
from vision.kernels.local_linear.reference import local_linear_fit_reference  # noqa: E402
from vision.kernels.runtime import triton_available, use_backend  # noqa: E402

BORDERS = ["valid", "reflect", "replicate", "symmetric"]
TOL = {torch.float32: 3e-6, torch.float16: 4e-3, torch.bfloat16: 3e-2}
BACKENDS = ["torch"] + (["triton"] if triton_available() else [])
EXAMPLES = {"torch": 40, "triton": 12}


def _settings(backend):
    return settings(max_examples=EXAMPLES[backend], deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@st.composite
def images(draw, channels=st.integers(1, 3), min_side=1):
    b = draw(st.integers(1, 2))
    c = draw(channels)
    h, w = draw(st.integers(min_side, 12)), draw(st.integers(min_side, 12))
    seed = draw(st.integers(0, 2**16))
    return np.random.default_rng(seed).random((b, c, h, w))


def _run(backend, fn):
    with use_backend(backend):
        return fn()


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_box_filter_matches_float64(backend):
    @_settings(backend)
    @given(x=images(), radius=st.integers(0, 30), border=st.sampled_from(BORDERS),
           dtype=st.sampled_from(list(TOL)))
    def check(x, radius, border, dtype):
        if border == "reflect" and min(x.shape[-2:]) < 2:
            return  # reflect needs two pixels per axis (as in torch and OpenCV); tested as an error elsewhere
        t = torch.tensor(x, dtype=dtype)
        got = _run(backend, lambda: box_filter(t, radius, border)).double().numpy()
        ref = box_filter_reference(t.double().numpy(), radius, border)
        np.testing.assert_allclose(got, ref, rtol=0, atol=TOL[dtype])

    check()


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_guided_filter_matches_float64(backend):
    @_settings(backend)
    @given(guide=images(channels=st.sampled_from([1, 3]), min_side=2), radius=st.integers(0, 20),
           border=st.sampled_from(BORDERS), eps=st.floats(1e-4, 1.0), seed=st.integers(0, 2**16))
    def check(guide, radius, border, eps, seed):
        src = np.random.default_rng(seed).random((guide.shape[0], 2) + guide.shape[2:])
        g, s = torch.tensor(guide, dtype=torch.float32), torch.tensor(src, dtype=torch.float32)
        got = _run(backend, lambda: guided_filter(g, s, radius, eps, border=border)).double().numpy()
        ref = guided_filter_reference(g.double().numpy(), s.double().numpy(), radius, eps, border=border)
        np.testing.assert_allclose(got, ref, rtol=0, atol=5e-5)

    check()


@pytest.mark.parametrize("backend", BACKENDS)
def test_local_linear_fit_matches_float64(backend):
    @_settings(backend)
    @given(k=st.integers(1, 3), c=st.integers(1, 2), h=st.integers(2, 10), w=st.integers(2, 10),
           radius=st.integers(0, 12), scale=st.integers(1, 2), eps=st.floats(1e-3, 1.0), seed=st.integers(0, 2**16))
    def check(k, c, h, w, radius, scale, eps, seed):
        rng = np.random.default_rng(seed)
        f, p = rng.random((1, k, h, w)), rng.random((1, c, h, w))
        ft, pt = torch.tensor(f, dtype=torch.float32), torch.tensor(p, dtype=torch.float32)
        got = _run(backend, lambda: local_linear_fit(ft, pt, radius, eps, scale)).double().numpy()
        ref = local_linear_fit_reference(ft.double().numpy(), pt.double().numpy(), radius, eps, scale)
        np.testing.assert_allclose(got, ref, rtol=0, atol=2e-4)

    check()
