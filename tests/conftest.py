"""Test harness.

Without a GPU the Triton kernels run in Triton's interpreter on CPU tensors: ``TRITON_INTERPRET=1``
must be set before any kernel module is decorated, so it is set here, before ``vision.kernels`` is
imported by any test module. Keep interpreted inputs at 128 x 128 or less (cost grows with programs x ops).
"""
import os

import torch  # noqa: E402

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    if os.environ["TRITON_INTERPRET"] == "1":
        from interpreter_speedup import install as _faster_interpreter

        _faster_interpreter()  # 3x on our sliding kernels; see tests/interpreter_speedup.py

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the slow marks added here count for `-m "not slow"`
def pytest_collection_modifyitems(config, items):
    """Without a GPU: CUDA tests are skipped, and every Triton case (a test or parameter named ``triton``) is
    marked ``slow``, since it runs in Triton's interpreter (seconds to minutes each on 2 cores); the fast tier
    ``-m "not slow"`` still runs each op's PyTorch paths against the same references."""
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
        elif "triton" in item.nodeid.lower():
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(params=["torch", "triton"])
def backend(request, monkeypatch):
    """Run a test once per backend; the Triton one in the interpreter when there is no GPU."""
    from vision.kernels.runtime import triton_available

    if request.param == "triton" and not triton_available():
        pytest.skip("triton does not import here")
    monkeypatch.setenv("VISION_BACKEND", request.param)
    return request.param


@pytest.fixture
def one_thread():
    """gradcheck makes thousands of tiny calls; one intra-op thread avoids OpenMP stalls on a busy machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
