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

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


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
