"""Custom ops called as their plain functions where the op adds nothing (kernels/runtime/calls.py): the same
values as the op, the op itself where a gradient, a meta tensor or torch.compile needs it, and a denoised frame
that never imports torch._dynamo (3 s of every command's start-up)."""
import subprocess
import sys

import torch

from vision.kernels import box_filter
from vision.kernels.runtime.calls import plain_call_allowed, run_op


def test_plain_call_only_where_nothing_needs_the_op():
    x = torch.rand(1, 2, 5, 6)
    assert plain_call_allowed((x, 3, "valid", "torch"))
    assert plain_call_allowed(([x, x], None, 1.0))
    assert not plain_call_allowed((x.clone().requires_grad_(),))
    with torch.no_grad():  # no gradient wanted: the plain function serves
        assert plain_call_allowed((x.clone().requires_grad_(),))
    assert not plain_call_allowed((torch.empty(2, 3, device="meta"),))
    assert not plain_call_allowed(([x, torch.empty(2, device="meta")],))
    assert not plain_call_allowed((torch.nn.Parameter(x),))  # a subclass takes the op


def test_box_filter_plain_and_op_agree_with_a_float64_reference():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(2, 3, 17, 23, generator=g)
    want = torch.nn.functional.avg_pool2d(torch.nn.functional.pad(x.double(), (2, 2, 2, 2)), 5, 1)
    want /= torch.nn.functional.avg_pool2d(torch.nn.functional.pad(torch.ones_like(x[:, :1]).double(), (2, 2, 2, 2)),
                                           5, 1)
    plain = box_filter(x, 2)  # no gradient: the plain function
    xg = x.clone().requires_grad_()
    through_op = box_filter(xg, 2)  # a gradient: the custom op, with its backward
    torch.testing.assert_close(plain.double(), want, rtol=1e-5, atol=1e-6)
    # (with a gradient the op may take another engine: OpenCV serves only calls without one)
    torch.testing.assert_close(through_op.detach().double(), want, rtol=1e-5, atol=1e-6)
    through_op.sum().backward()
    assert xg.grad is not None and xg.grad.shape == x.shape


def test_run_op_copies_a_result_that_is_an_argument():
    x = torch.rand(3)
    out = run_op(lambda t: t, lambda t: t, x)
    assert torch.equal(out, x) and out.data_ptr() != x.data_ptr()


def test_a_denoised_frame_does_not_import_torch_dynamo():
    code = ("import sys, numpy as np\n"
            "from vision.denoise import denoise\n"
            "x = np.random.default_rng(0).random((24, 24, 3), dtype=np.float32)\n"
            "denoise(x, spp=4); denoise(x, model='flr', spp=4)\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"
