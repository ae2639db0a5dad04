"""local_linear_fit / local_linear_apply against the float64 per-window least-squares reference on both
paths (the Triton one in the interpreter), equality with guided_filter, rank-deficient features, eps
from 1e-8 to 1e4, half precision, gradients (gradcheck in float64; float32 gradients of both paths
against autograd through an independent plain implementation), bad input, and the benchmark CLI."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from vision.kernels import LocalLinearApply, LocalLinearFit, guided_filter, local_linear_apply, local_linear_fit
from vision.kernels.runtime import use_backend
from vision.kernels.guided.reference import guided_filter_reference
from vision.kernels.local_linear.reference import (local_linear_apply_reference, local_linear_fit_reference,
                                                   upsample_cells, window_weights)
from vision.pipelines.bench.local_regression import plain_local_linear_apply, plain_local_linear_fit

BORDERS = ["valid", "reflect", "replicate", "symmetric"]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: intra-op threads only add synchronisation (and on a shared 2-core machine, waiting)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(params=["torch", "numba", "triton"])
def backend(request, monkeypatch):
    """Each path: PyTorch, PyTorch with the numba loops of the CPU float32 solve and apply
    (vision.kernels.local_linear.cpu_path), and Triton (in the interpreter when there is no GPU)."""
    from vision.kernels.runtime import jit
    from vision.kernels.runtime import triton_available

    if request.param == "triton" and not triton_available():
        pytest.skip("triton does not import here")
    monkeypatch.setenv("VISION_BACKEND", "triton" if request.param == "triton" else "torch")
    monkeypatch.setenv("VISION_NUMBA", "1" if request.param == "numba" else "0")
    if request.param == "numba":
        assert jit.enabled(torch.zeros(1))  # numba is a dependency: no silent fallback
    return request.param


def t32(x, grad=False):
    return torch.tensor(x, dtype=torch.float32, requires_grad=grad)


def fit32(f, p, *args, **kw):
    return local_linear_fit(t32(f), t32(p), *args, **kw).detach().numpy()


def fit_apply32(f, p, radius, eps, scale=1, border="valid"):
    ft = t32(f)
    co = local_linear_fit(ft, t32(p), radius, eps, scale, border)
    return co.detach().numpy(), local_linear_apply(ft, co, scale=scale).detach().numpy()


# ---------------------------------------------------------------------------------------------- the reference itself

def test_reference_weights_and_exact_fit(rng):
    """The reference's window weights sum to 1 and cover what the border says; an exactly linear target is
    recovered exactly when eps is negligible (slopes a, intercept b, in every window)."""
    for border in BORDERS:
        for scale in (1, 3):
            om = window_weights(10, 7, 2, scale, border, 1, 0)
            assert om.sum() == pytest.approx(1.0) and (om >= 0).all()
    om = window_weights(10, 7, 1, 1, "valid", 0, 0)
    assert np.count_nonzero(om) == 4 and np.allclose(om[om > 0], 0.25)  # corner window: 2 x 2 in-image pixels
    om = window_weights(10, 7, 1, 1, "replicate", 0, 0)
    assert om[0, 0] == pytest.approx(4 / 9)  # the corner pixel is repeated 4 times in the 3 x 3 window
    f = rng.random((1, 3, 9, 11))
    a, b = np.array([0.5, -2.0, 1.5]), 0.25
    p = (a[:, None, None] * f[0]).sum(0)[None, None] + b
    co = local_linear_fit_reference(f, p, 2, 1e-12)
    np.testing.assert_allclose(co[0, 0, :3], np.broadcast_to(a[:, None, None], (3, 9, 11)), atol=1e-6)
    np.testing.assert_allclose(co[0, 0, 3], b, atol=1e-6)


def test_reference_upsampling_convention():
    """Coefficient (i, j) sits at pixel (i + 1/2) s - 1/2: a grid that is linear in its index upsamples to
    the line through the cell centres, and beyond the outer centres the edge value is kept."""
    s, g = 4, np.arange(5.0)[None, :]  # 1 x 5 grid
    up = upsample_cells(g, 1, 18, s, s)[0]
    x = np.arange(18)
    np.testing.assert_allclose(up, np.clip((x + 0.5) / s - 0.5, 0, 4))


# ---------------------------------------------------------------------------------------------- fit and apply

# (K, C, scale, border, shape, radius): every K in {1, 3, 6, 8}, C in {1, 3}, scale in {1, 2, 4},
# every border, odd sizes, partial cells, and windows larger than the image (r=8 on 7 x 9).
CASES = [
    (1, 1, 1, "valid", (13, 17), 2),
    (1, 3, 2, "reflect", (13, 17), 4),
    (3, 1, 1, "replicate", (7, 9), 8),
    (3, 3, 4, "symmetric", (18, 23), 8),
    (6, 3, 1, "symmetric", (11, 14), 1),
    (6, 1, 2, "valid", (13, 17), 4),
    (6, 3, 4, "reflect", (22, 19), 4),
    (8, 1, 1, "reflect", (9, 12), 2),
    (8, 3, 4, "valid", (17, 21), 8),
    (8, 1, 2, "replicate", (10, 13), 2),
    (2, 4, 3, "symmetric", (10, 11), 3),
    (6, 3, 2, "valid", (70, 23), 2),  # the input blend's sharp fit: the numba engine's one pass, in two bands
]


@pytest.mark.parametrize("K,C,scale,border,shape,radius", CASES)
def test_fit_and_apply_match_reference(backend, K, C, scale, border, shape, radius, rng):
    f, p = rng.random((2, K) + shape), rng.random((2, C) + shape)
    ref = local_linear_fit_reference(f, p, radius, 1e-2, scale, border)
    co, q = fit_apply32(f, p, radius, 1e-2, scale, border)
    assert co.shape == ref.shape == (2, C, K + 1, -(-shape[0] // scale), -(-shape[1] // scale))
    np.testing.assert_allclose(co, ref, atol=2e-5)
    np.testing.assert_allclose(q, local_linear_apply_reference(f, ref, scale, scale), atol=2e-5)


@pytest.mark.parametrize("K", [1, 3])
@pytest.mark.parametrize("border", BORDERS)
def test_scale_one_is_the_guided_filter(backend, K, border, rng):
    """K = 1 (gray guide) and K = 3 (colour guide), scalar eps: apply(fit) is guided_filter, to float32 rounding,
    and both are the float64 guided filter reference."""
    guide, src = rng.random((2, K, 15, 19)), rng.random((2, 3, 15, 19))
    _, q = fit_apply32(guide, src, 3, 1e-2, 1, border)
    with use_backend("torch"):  # the guided filter's own Triton path is not under test here
        gf = guided_filter(t32(guide), t32(src), 3, 1e-2, border=border).numpy()
    np.testing.assert_allclose(q, gf, atol=1e-6)
    np.testing.assert_allclose(q, guided_filter_reference(guide, src, 3, 1e-2, border), atol=1e-6)
    ref = local_linear_fit_reference(guide, src, 3, 1e-2, 1, border)
    np.testing.assert_allclose(q, local_linear_apply_reference(guide, ref), atol=1e-6)


@pytest.mark.parametrize("eps", [1e-8, 1e-4, 1e-2, 1.0, 1e4])
@pytest.mark.parametrize("scale", [1, 2])
def test_rank_deficient_features(backend, eps, scale, rng):
    """A constant channel and two identical channels. The constant one gets slope 0 exactly; the duplicated
    pair is split evenly by the ridge, which float32 resolves only when eps is not tiny, while its sum and
    the output are always determined."""
    f, p = rng.random((1, 4, 16, 21)), rng.random((1, 3, 16, 21))
    f[:, 1] = 0.5
    f[:, 3] = f[:, 0]
    ref = local_linear_fit_reference(f, p, 3, eps, scale)
    co, q = fit_apply32(f, p, 3, eps, scale)
    assert np.isfinite(co).all()
    np.testing.assert_allclose(q, local_linear_apply_reference(f, ref, scale, scale), atol=1e-6)
    np.testing.assert_allclose(co[:, :, 1], 0.0, atol=1e-6)
    np.testing.assert_allclose(co[:, :, 0] + co[:, :, 3], ref[:, :, 0] + ref[:, :, 3], atol=1e-6)
    if eps >= 1e-4:
        np.testing.assert_allclose(co, ref, atol=2e-5)


def test_flat_and_nearly_flat_features(backend, rng):
    """Flat features: slopes 0, output the twice box-filtered target; 0.7 + 1e-3 noise with eps 1e-8 still
    matches (the inputs are centred before any second moment is formed)."""
    p = rng.random((1, 2, 20, 24))
    flat = np.full((1, 3, 20, 24), 0.6)
    co, q = fit_apply32(flat, p, 3, 1e-8)
    np.testing.assert_allclose(co[:, :, :3], 0.0, atol=1e-6)
    np.testing.assert_allclose(q, local_linear_apply_reference(flat, local_linear_fit_reference(flat, p, 3, 1e-8)),
                               atol=1e-6)
    near = 0.7 + 1e-3 * rng.random((1, 2, 20, 24))
    _, q = fit_apply32(near, p, 3, 1e-6)
    ref = local_linear_apply_reference(near, local_linear_fit_reference(near, p, 3, 1e-6))
    np.testing.assert_allclose(q, ref, atol=1e-4)


def test_per_feature_and_per_image_eps(backend, rng):
    f, p = rng.random((2, 3, 12, 13)), rng.random((2, 2, 12, 13))
    eps_k = np.array([1e-3, 1e-1, 1.0])
    ref = local_linear_fit_reference(f, p, 2, eps_k)
    np.testing.assert_allclose(fit32(f, p, 2, torch.tensor(eps_k)), ref, atol=2e-5)
    eps_bk = np.array([[1e-3, 1e-1, 1.0], [1e-2, 1e-2, 1e-4]])
    ref = local_linear_fit_reference(f, p, 2, eps_bk, 2, "reflect")
    np.testing.assert_allclose(fit32(f, p, 2, torch.tensor(eps_bk), scale=2, border="reflect"), ref, atol=2e-5)


@pytest.mark.parametrize("scale,border", [(1, "valid"), (4, "valid"), (2, "reflect"), (2, "valid")])
def test_blend_of_radii_is_the_weighted_sum_of_single_fits(backend, scale, border, rng):
    """radius=(r1, r2, r3) with per-cell weights == sum_j w_j * (float64 reference fit at r_j)."""
    f, p = rng.random((2, 3, 21, 19)), rng.random((2, 2, 21, 19))
    # at scale 2, radii of 1 and 2 cells: the numba engine's one pass
    radii = (1, 4, 8) if scale == 1 else (4, 8, 16) if scale == 4 else (2, 4, 2)
    grid = (-(-21 // scale), -(-19 // scale))
    w = rng.random((2, 3, *grid))
    w /= w.sum(1, keepdims=True)
    ref = sum(w[:, None, None, j] * local_linear_fit_reference(f, p, r, 1e-2, scale, border)
              for j, r in enumerate(radii))
    got = fit32(f, p, radii, 1e-2, scale, border, weights=t32(w))
    np.testing.assert_allclose(got, ref, atol=3e-5)
    one = fit32(f, p, [radii[1]], 1e-2, scale, border, weights=t32(np.ones((2, 1, *grid))))
    np.testing.assert_allclose(one, local_linear_fit_reference(f, p, radii[1], 1e-2, scale, border), atol=3e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(backend, dtype, rng):
    """Half inputs are computed in float32 and returned in their dtype: the reference on the rounded inputs,
    to the output dtype's rounding."""
    f = torch.rand(1, 3, 16, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).to(dtype)
    p = torch.rand(1, 2, 16, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(2)).to(dtype)
    for scale in (1, 4):
        co = local_linear_fit(f, p, 4, 1e-2, scale=scale)
        q = local_linear_apply(f, co, scale=scale)
        assert co.dtype == dtype and q.dtype == dtype
        fd, pd = f.double().numpy(), p.double().numpy()
        ref = local_linear_fit_reference(fd, pd, 4, 1e-2, scale)
        tol = 2e-3 if dtype == torch.float16 else 1.6e-2  # about 2 ulp of values below 2
        np.testing.assert_allclose(co.double().numpy(), ref, atol=tol, rtol=tol)
        np.testing.assert_allclose(q.double().numpy(), local_linear_apply_reference(fd, ref, scale, scale),
                                   atol=tol, rtol=tol)


def test_layouts_and_joint_upsampling(backend, rng):
    """Channels-last and sliced inputs give the contiguous result; coefficients fitted on a low-resolution
    image apply to full-resolution features (integer and non-integer size ratios)."""
    f, p = rng.random((1, 3, 14, 18)), rng.random((1, 2, 14, 18))
    want = fit32(f, p, 2, 1e-2, scale=2)
    cl = t32(f).contiguous(memory_format=torch.channels_last)
    got = local_linear_fit(cl, t32(p).contiguous(memory_format=torch.channels_last), 2, 1e-2, scale=2)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-7)
    wide = torch.zeros(1, 3, 14, 36)
    wide[..., ::2] = t32(f)
    np.testing.assert_allclose(local_linear_fit(wide[..., ::2], t32(p), 2, 1e-2, scale=2).numpy(), want, atol=1e-7)
    lo = f[:, :, ::2, ::2]
    co = local_linear_fit_reference(lo, p[:, :, ::2, ::2], 2, 1e-2)  # (7, 9) grid for (14, 18) features
    q = local_linear_apply(t32(f), t32(co)).numpy()
    np.testing.assert_allclose(q, local_linear_apply_reference(f, co, 2, 2), atol=1e-6)
    hi = rng.random((1, 3, 15, 20))  # 15 / 7 and 20 / 9 are not integers: a plain align_corners=False resize
    q = local_linear_apply(t32(hi), t32(co)).numpy()
    np.testing.assert_allclose(q, local_linear_apply_reference(hi, co), atol=1e-6)
    up = torch.nn.functional.interpolate(t32(co[0]), size=(15, 20), mode="bilinear", align_corners=False)
    np.testing.assert_allclose(q[0], (up[:, :3] * t32(hi[0])).sum(1) + up[:, 3], atol=1e-6)


@pytest.mark.parametrize("scale", [1, 4])
def test_worker_threads_give_the_same_result(scale, rng):
    """With intra-op threads the CPU path splits its stages over worker threads: same numbers as one thread
    (forward and backward), and the caller's thread setting is restored."""
    f = torch.tensor(rng.random((1, 3, 96, 80)), dtype=torch.float32, requires_grad=True)
    p = torch.tensor(rng.random((1, 2, 96, 80)), dtype=torch.float32, requires_grad=True)
    res = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        try:
            q = local_linear_apply(f, local_linear_fit(f, p, 4, 1e-2, scale), scale=scale)
            res[threads] = [q.detach()] + list(torch.autograd.grad(q.square().sum(), (f, p)))
            assert torch.get_num_threads() == threads
        finally:
            torch.set_num_threads(1)
    for a, b in zip(res[1], res[2]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    # under the caller's inference_mode the workers write inference tensors too (they are in it as well)
    torch.set_num_threads(2)
    try:
        with torch.inference_mode():
            q = local_linear_apply(f, local_linear_fit(f, p, 4, 1e-2, scale), scale=scale)
    finally:
        torch.set_num_threads(1)
    torch.testing.assert_close(q, res[1][0], atol=1e-6, rtol=1e-6)


def test_numba_paths_only_where_they_apply_and_from_several_threads_at_once(monkeypatch, rng):
    """The numba loops take CPU float32 without a gradient to record (not float64, not half, not inputs that
    require grad under grad mode, not with VISION_NUMBA=0); Python threads calling them at once (a serving
    process) get the single-threaded answers."""
    import threading

    from vision.kernels.runtime import jit

    x = torch.zeros(2)
    assert jit.enabled(x) and not jit.enabled(x.double()) and not jit.enabled(x.half())
    assert not jit.enabled(x.requires_grad_()) and jit.enabled(x.detach())
    with torch.no_grad():
        assert jit.enabled(x)
    monkeypatch.setenv("VISION_NUMBA", "0")
    assert not jit.enabled(x.detach())
    monkeypatch.setenv("VISION_NUMBA", "1")
    f, p = t32(rng.random((1, 4, 40, 56))), t32(rng.random((1, 3, 40, 56)))
    ref = local_linear_apply(f, local_linear_fit(f, p, 4, 1e-2, 4), 4)
    got, errors = [None] * 4, []

    def run(i):
        try:
            with torch.no_grad():
                for _ in range(5):
                    got[i] = local_linear_apply(f, local_linear_fit(f, p, 4, 1e-2, 4), 4)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for g in got:
        torch.testing.assert_close(g, ref, rtol=0, atol=0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_process_forked_after_the_cpu_kernels_can_run_them(rng):
    """A child forked after the parent ran the numba loops and the worker pool (what a data loader's workers or
    a process pool are) survives and gets the same numbers: numba's GNU OpenMP layer would terminate it, and
    the inherited pool object has none of its threads. The child runs torch on one thread, as data loader
    workers do (torch's own OpenMP is not fork-safe either)."""
    import numba

    from vision.kernels.runtime import threads

    f, p = t32(rng.random((1, 4, 48, 64))), t32(rng.random((1, 3, 48, 64)))
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the worker pool and numba's threads both start
    try:
        with torch.no_grad():
            ref = local_linear_apply(f, local_linear_fit(f, p, 8, 1e-2, 4), 4)
    finally:
        torch.set_num_threads(before)
    assert threads._pool is not None and numba.threading_layer() != "omp"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if it computed the same result
        status = 1
        try:
            os.close(read)
            torch.set_num_threads(1)
            with torch.no_grad():
                got = local_linear_apply(f, local_linear_fit(f, p, 8, 1e-2, 4), 4)
            status = 0 if torch.equal(got, ref) and threads._pool is None else 2
        finally:
            os.write(write, bytes([status]))
            os._exit(status)
    os.close(write)
    try:
        assert os.read(read, 1) == bytes([0])
    finally:
        os.close(read)
        _, code = os.waitpid(pid, 0)
    assert os.WIFEXITED(code) and os.WEXITSTATUS(code) == 0


def test_numba_kernels_compile_without_a_writable_cache(monkeypatch):
    """Where numba finds no place to cache machine code (a read-only install and home), the kernels compile for
    the process and still run."""
    import numba.core.caching as caching
    import numpy as np

    from vision.kernels.runtime.jit import kernel

    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # renamed across numba versions
    monkeypatch.setattr(impl, "_locator_classes", [])

    from numba import prange

    @kernel("void(float32[::1], float32[::1])")
    def double(x, out):
        for i in prange(x.shape[0]):
            out[i] = 2 * x[i]

    x, out = torch.arange(5, dtype=torch.float32), torch.empty(5)
    double(x, out)
    np.testing.assert_array_equal(out.numpy(), 2 * np.arange(5))


def test_slow_numba_compilation_prints_one_notice(monkeypatch, capfd):
    """A compilation that takes longer than NOTICE_AFTER_S says so once on stderr (a fresh install compiles for
    about 20 s at the first call); a fast one (a cache load) says nothing."""
    import time

    import numba
    from numba import prange

    from vision.kernels.runtime import jit

    real = numba.njit

    def slow_njit(*args, **kwargs):
        time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(jit, "NOTICE_AFTER_S", 0.05)
    monkeypatch.setattr(jit, "_cached", lambda fn: False)  # a fresh install: no cache index yet
    monkeypatch.setattr(numba, "njit", slow_njit)
    was = jit._noticed.is_set()
    jit._noticed.clear()
    try:
        kernels = []
        for _ in range(2):  # two kernels, each compiled slowly at its first call
            @jit.kernel("void(float32[::1], float32[::1])")
            def triple(x, out):
                for i in prange(x.shape[0]):
                    out[i] = 3 * x[i]
            kernels.append(triple)
        x, out = torch.arange(5, dtype=torch.float32), torch.empty(5)
        for k in kernels:
            k(x, out)
            np.testing.assert_array_equal(out.numpy(), 3 * np.arange(5))
        err = capfd.readouterr().err
        assert err.count("compiling the CPU kernels") == 1
        monkeypatch.setattr(numba, "njit", real)
        monkeypatch.setattr(jit, "NOTICE_AFTER_S", 5.0)
        jit._noticed.clear()

        @jit.kernel("void(float32[::1], float32[::1])")
        def quick(x, out):
            for i in prange(x.shape[0]):
                out[i] = x[i] + 1
        quick(x, out)
        assert "compiling" not in capfd.readouterr().err
        np.testing.assert_array_equal(out.numpy(), np.arange(5) + 1)
        # a kernel whose cache index exists loads, slowly on a busy machine: no notice before NOTICE_AFTER_CACHED_S
        monkeypatch.setattr(jit, "_cached", lambda fn: True)
        monkeypatch.setattr(jit, "NOTICE_AFTER_S", 0.05)
        monkeypatch.setattr(jit, "NOTICE_AFTER_CACHED_S", 5.0)
        monkeypatch.setattr(numba, "njit", slow_njit)

        @jit.kernel("void(float32[::1], float32[::1])")
        def loaded(x, out):
            for i in prange(x.shape[0]):
                out[i] = x[i] - 1
        loaded(x, out)
        assert "compiling" not in capfd.readouterr().err
        np.testing.assert_array_equal(out.numpy(), np.arange(5) - 1)
    finally:
        if was:
            jit._noticed.set()
        else:
            jit._noticed.clear()


def test_the_cache_index_is_found_where_numba_writes_it(tmp_path, monkeypatch):
    """``jit._cached`` says no for a function numba has not cached yet and yes once numba itself has written its cache
    (``cache=True``) for it: the index it looks for is the one numba writes."""
    import importlib
    import sys

    import numba

    from vision.kernels.runtime import jit

    (tmp_path / "loops_for_cache_test.py").write_text("\n\ndef scale(x):\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = importlib.import_module("loops_for_cache_test")
        assert not jit._cached(module.scale)
        assert numba.njit("float64(float64)", cache=True)(module.scale)(1.5) == 3.0
        assert jit._cached(module.scale)
    finally:
        sys.modules.pop("loops_for_cache_test", None)


def test_modules(rng):
    f, p = t32(rng.random((1, 4, 16, 16))), t32(rng.random((1, 3, 16, 16)))
    fit, app = LocalLinearFit(radius=4, eps=1e-2, scale=2, border="reflect"), LocalLinearApply(scale=2)
    co = fit(f, p)
    torch.testing.assert_close(co, local_linear_fit(f, p, 4, 1e-2, 2, "reflect"))
    torch.testing.assert_close(app(f, co), local_linear_apply(f, co, scale=2))
    assert "radius=4" in repr(fit) and "scale=2" in repr(app)


# ---------------------------------------------------------------------------------------------- gradients

GRAD_CASES = [(1, 1, 1, "valid", (6, 7), 2), (3, 2, 1, "reflect", (5, 6), 1), (2, 2, 2, "symmetric", (7, 9), 4),
              (3, 1, 3, "replicate", (8, 7), 3), (2, 1, 2, "valid", (5, 5), 8)]


@pytest.mark.parametrize("K,C,scale,border,shape,radius", GRAD_CASES)
def test_gradcheck(K, C, scale, border, shape, radius):
    """float64 (the PyTorch path): fit w.r.t. features, target and eps; apply(fit) end to end; apply w.r.t. coeffs."""
    g = torch.Generator().manual_seed(K * 10 + scale)
    f = torch.rand(1, K, *shape, dtype=torch.float64, generator=g).requires_grad_(True)
    p = torch.rand(1, C, *shape, dtype=torch.float64, generator=g).requires_grad_(True)
    eps = torch.full((K,), 0.05, dtype=torch.float64).requires_grad_(True)
    fit = lambda f, p, e: local_linear_fit(f, p, radius, e, scale, border)  # noqa: E731
    assert torch.autograd.gradcheck(fit, (f, p, eps), fast_mode=True)
    both = lambda f, p: local_linear_apply(f, fit(f, p, 0.05), scale=scale)  # noqa: E731
    assert torch.autograd.gradcheck(both, (f, p), fast_mode=True)
    co = fit(f, p, 0.05).detach().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda f, c: local_linear_apply(f, c, scale=scale), (f, co), fast_mode=True)


def test_gradcheck_blend_of_radii():
    """float64: the blended fit w.r.t. features, target, eps and the per-cell weights."""
    g = torch.Generator().manual_seed(3)
    f = torch.rand(1, 2, 9, 10, dtype=torch.float64, generator=g).requires_grad_(True)
    p = torch.rand(1, 2, 9, 10, dtype=torch.float64, generator=g).requires_grad_(True)
    eps = torch.full((2,), 0.05, dtype=torch.float64).requires_grad_(True)
    w = torch.rand(1, 3, 5, 5, dtype=torch.float64, generator=g).requires_grad_(True)
    fit = lambda f, p, e, w: local_linear_fit(f, p, (2, 4, 8), e, 2, "valid", weights=w)  # noqa: E731
    assert torch.autograd.gradcheck(fit, (f, p, eps, w), fast_mode=True)


def test_triton_blend_gradients_match_torch_path():
    g = torch.Generator().manual_seed(4)
    f, p = torch.rand(1, 2, 16, 12, generator=g), torch.rand(1, 1, 16, 12, generator=g)
    w = torch.rand(1, 2, 4, 3, generator=g)
    grads = {}
    for name in ("torch", "triton"):
        with use_backend(name):
            ff, pp, ww = (t.clone().requires_grad_(True) for t in (f, p, w))
            co = local_linear_fit(ff, pp, (4, 8), 1e-2, 4, weights=ww)
            (co * torch.linspace(-1, 1, co.numel()).view_as(co)).sum().backward()
            grads[name] = [t.grad for t in (ff, pp, ww)]
    for a, b in zip(grads["torch"], grads["triton"]):
        torch.testing.assert_close(b, a, atol=2e-5, rtol=1e-4)


def test_gradcheck_full_and_resize():
    """One full (not fast-mode) gradcheck, and apply's plain-resize path (non-integer size ratio)."""
    g = torch.Generator().manual_seed(0)
    f = torch.rand(1, 2, 5, 6, dtype=torch.float64, generator=g).requires_grad_(True)
    p = torch.rand(1, 1, 5, 6, dtype=torch.float64, generator=g).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda f, p: local_linear_fit(f, p, 1, 0.05, 2), (f, p))
    co = torch.rand(1, 2, 3, 3, 4, dtype=torch.float64, generator=g).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda f, c: local_linear_apply(f, c), (f, co))  # 5/3, 6/4


@pytest.mark.parametrize("scale", [1, 2, 4])
def test_float32_gradients_match_autograd_of_plain_implementation(backend, scale):
    """Both paths' float32 gradients (the Triton one in the interpreter) against autograd through an
    independent plain float64 implementation (box moments + torch.linalg.solve), border "valid"."""
    g = torch.Generator().manual_seed(scale)
    f64 = torch.rand(1, 3, 13, 17, dtype=torch.float64, generator=g)
    p64 = torch.rand(1, 2, 13, 17, dtype=torch.float64, generator=g)
    gq = torch.randn(1, 2, 13, 17, dtype=torch.float64, generator=g)
    gc = torch.randn(1, 2, 4, -(-13 // scale), -(-17 // scale), dtype=torch.float64, generator=g)

    def grads(fit, apply, f, p):
        f, p = f.clone().requires_grad_(True), p.clone().requires_grad_(True)
        co = fit(f, p)
        dco = torch.autograd.grad(co, (f, p), gc.to(f.dtype), retain_graph=True)
        dq = torch.autograd.grad(apply(f, co), (f, p), gq.to(f.dtype))
        return [t.double() for t in dco + dq]

    want = grads(lambda f, p: plain_local_linear_fit(f, p, 4, 1e-2, scale),
                 lambda f, c: plain_local_linear_apply(f, c, scale), f64, p64)
    got = grads(lambda f, p: local_linear_fit(f, p, 4, 1e-2, scale),
                lambda f, c: local_linear_apply(f, c, scale=scale), f64.float(), p64.float())
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=2e-5 * float(b.abs().max()), rtol=0)


@pytest.mark.parametrize("border", ["reflect", "symmetric"])
def test_triton_gradients_match_torch_path(border):
    """The Triton backward (interpreter, float32) against the gradchecked float64 PyTorch path, padded borders."""
    from vision.kernels.runtime import triton_available

    if not triton_available():
        pytest.skip("triton does not import here")
    g = torch.Generator().manual_seed(3)
    f = torch.rand(2, 4, 11, 14, dtype=torch.float64, generator=g)
    p = torch.rand(2, 3, 11, 14, dtype=torch.float64, generator=g)
    gq = torch.randn(2, 3, 11, 14, dtype=torch.float64, generator=g)
    out = {}
    for be, dt in (("torch", torch.float64), ("triton", torch.float32)):
        fi, pi = f.to(dt).requires_grad_(True), p.to(dt).requires_grad_(True)
        ei = torch.tensor([1e-2, 1e-3, 1e-1, 1e-2], dtype=dt, requires_grad=True)
        with use_backend(be):
            q = local_linear_apply(fi, local_linear_fit(fi, pi, 3, ei, 2, border), scale=2)
            out[be] = [t.double() for t in torch.autograd.grad(q, (fi, pi, ei), gq.to(dt))]
    for a, b in zip(out["triton"], out["torch"]):
        torch.testing.assert_close(a, b, atol=2e-5 * float(b.abs().max()), rtol=0)


# ---------------------------------------------------------------------------------------------- bad input

def test_bad_input_names_the_problem():
    f, p = torch.rand(1, 3, 8, 8), torch.rand(1, 2, 8, 8)
    co = local_linear_fit(f, p, 1, 1e-2)
    bad = [
        (lambda: local_linear_fit(torch.rand(1, 9, 8, 8), p, 1, 1e-2), "features must have K = 1 to 8"),
        (lambda: local_linear_fit(f, torch.rand(1, 5, 8, 8), 1, 1e-2), "target must have C = 1 to 4"),
        (lambda: local_linear_fit(f, torch.rand(1, 2, 8, 9), 1, 1e-2), "must share batch, height and width"),
        (lambda: local_linear_fit(f, torch.rand(2, 2, 8, 8), 1, 1e-2), "must share batch"),
        (lambda: local_linear_fit(f[0], p, 1, 1e-2), "features must have shape"),
        (lambda: local_linear_fit(f.clone().index_fill_(2, torch.tensor([3]), float("nan")), p, 1, 1e-2),
         r"features contains \d+ NaN or Inf"),
        (lambda: local_linear_fit(f, p.clone().fill_(float("inf")), 1, 1e-2), "target contains"),
        (lambda: local_linear_fit(f, p, 1, 0.0), "eps must be positive"),
        (lambda: local_linear_fit(f, p, 1, torch.tensor([1e-2, -1.0, 1e-2])), "eps must be positive"),
        (lambda: local_linear_fit(f, p, 1, torch.ones(2)), r"eps must be a float, a tensor of shape \(3,\)"),
        (lambda: local_linear_fit(f, p, -1, 1e-2), "radius must be a non-negative integer"),
        (lambda: local_linear_fit(f, p, 1, 1e-2, scale=0), "scale must be a positive integer"),
        (lambda: local_linear_fit(f, p, (1, 2), 1e-2), r"2 radii need weights of shape \(1, 2, 8, 8\)"),
        (lambda: local_linear_fit(f, p, (1, 2), 1e-2, weights=torch.ones(1, 2, 4, 4)), "weights must have shape"),
        (lambda: local_linear_fit(f, p, 1, 1e-2, weights=torch.ones(1, 1, 8, 8)), "pass radius as a sequence"),
        (lambda: local_linear_fit(f, p, (), 1e-2), "non-empty sequence"),
        (lambda: local_linear_fit(f, p, (1, 2), 1e-2, weights=torch.full((1, 2, 8, 8), float("nan"))),
         "weights contains"),
        (lambda: local_linear_fit(f, p, 1, 1e-2, border="wrap"), "border must be one of"),
        (lambda: local_linear_fit(f.int(), p, 1, 1e-2), "features must be float32"),
        (lambda: local_linear_apply(f, co[:, :, :3]), r"need batch 1 and K \+ 1 = 4"),
        (lambda: local_linear_apply(torch.rand(1, 3, 4, 4), co), "no larger than the features"),
        (lambda: local_linear_apply(f, co[0]), r"coeffs must have shape \(B, C, K \+ 1, H', W'\)"),
        (lambda: local_linear_apply(f, co.clone().fill_(float("nan"))), "coeffs contains"),
        (lambda: local_linear_apply(torch.rand(1, 3, 16, 16), co, scale=3), "scale=3 makes a 6x6 grid"),
    ]
    for call, message in bad:
        with pytest.raises(ValueError, match=message):
            call()


# ---------------------------------------------------------------------------------------------- CUDA compilation

def test_triton_kernels_compile_for_cuda():
    """The interpreter runs the kernels' Python, not Triton's compiler: compile every kernel for sm_90a
    (H100/H200) in a process without TRITON_INTERPRET, so what only the compiler rejects fails here."""
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "VISION_BACKEND")}
    code = ("from vision.kernels.static_compile import compile_static\n"
            "from vision.kernels.local_linear import triton_path as tp\n"
            "tile = dict(BH=4, BW=32)\n"
            "solve = dict(KP=tp.padded(3), CP=tp.padded(2), BLOCK=128)\n"
            "jobs = [(tp._taps_rows_kernel, tile, None), (tp._taps_cols_kernel, tile, None),\n"
            "        (tp._cell_moments_kernel, solve, None), (tp._solve_kernel, solve, None),\n"
            "        (tp._moment_rows_kernel, solve, None), (tp._coeff_cols_kernel, dict(K=3, C=2, **tile), None),\n"
            "        (tp._apply_kernel, tile, dict(inv_sh='fp32', inv_sw='fp32')), (tp._fit_bwd_kernel, solve, None),\n"
            "        (tp._cell_adjoint_kernel, solve, None)]\n"
            "done = [compile_static(fn, const, sig, num_warps=4, arch=90) for fn, const, sig in jobs]\n"
            "print(len({r.name for r in done}), min(r.registers for r in done))")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    if res.returncode != 0 and ("ptxas" in res.stderr.lower() or "cuobjdump" in res.stderr.lower()) \
            and ("not found" in res.stderr.lower() or "no such file" in res.stderr.lower()):
        pytest.skip("this triton install has no CUDA toolchain (ptxas, cuobjdump)")
    assert res.returncode == 0, res.stderr[-3000:]
    n_kernels, fewest_registers = map(int, res.stdout.split())
    assert n_kernels == 9 and fewest_registers > 0


# ---------------------------------------------------------------------------------------------- benchmark

def test_bench_cli_small(capsys):
    from vision.pipelines.cli import main

    assert main(["bench", "local-regression", "--size", "40x24", "--scales", "1", "2", "--repeat", "1",
                 "--features", "3", "--targets", "2"]) == 0
    out = capsys.readouterr().out
    assert "plain torch (linalg.solve)" in out and "fit+apply" in out and "acceptance not evaluated" in out


def test_numba_runs_on_its_workqueue_layer(rng):
    """The numba loops run on numba's workqueue threads unless NUMBA_THREADING_LAYER says otherwise: TBB's layer grew
    a long `vision denoise --temporal` run by 150 KB a frame on a busy machine (tests/test_long_run_memory.py)."""
    import numba

    if "NUMBA_THREADING_LAYER" in os.environ:
        pytest.skip("NUMBA_THREADING_LAYER is set here")
    f, p = t32(rng.random((1, 4, 24, 24))), t32(rng.random((1, 3, 24, 24)))
    with torch.no_grad():
        local_linear_fit(f, p, 2, 1e-2, 2)
    assert numba.threading_layer() == "workqueue"
