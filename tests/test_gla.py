"""Gated linear attention: our chunked PyTorch path (and fla on CUDA) against the float64 recurrence.

The reference is ``naive_recurrent_gla``: one step of ``S_t = diag(exp(g_t)) S_{t-1} + k_t^T v_t`` per
token, differentiated by autograd through the loop. Every check compares against it (never against the
chunked code's own output), for values and gradients, one and both directions, per-channel and per-head
gates, and lengths that are not multiples of the 64-token chunk.
"""
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from vision.kernels import gla, gla_bidirectional
from vision.kernels.runtime import use_backend
from vision.kernels.linear_attention import chunk_gla_torch, fla_available, naive_recurrent_gla
from vision.kernels.linear_attention.chunked import chunk_gla_scan


def make(B=2, T=150, H=3, K=8, V=5, gate="vector", strength=1.0, dtype=torch.float64, seed=0, grad=False):
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(B, T, H, K, generator=gen), torch.randn(B, T, H, K, generator=gen)
    v = torch.randn(B, T, H, V, generator=gen)
    shape = {"vector": (B, T, H, K), "scalar": (B, T, H), "scalar1": (B, T, H, 1)}[gate]
    x = torch.randn(*shape, generator=gen) * 2
    q, k, v, x = (t.to(dtype).requires_grad_(grad) for t in (q, k, v, x))
    return q, k, v, x, strength


def gates(x, strength):
    return F.logsigmoid(x) * strength


def grads(out, w, inputs):
    return torch.autograd.grad((out * w).sum(), inputs)


@pytest.mark.parametrize("T", [1, 37, 64, 150])
@pytest.mark.parametrize("gate", ["vector", "scalar", "scalar1"])
@pytest.mark.parametrize("reverse", [False, True])
def test_matches_recurrence_forward_and_gradients(T, gate, reverse):
    q, k, v, x, s = make(T=T, gate=gate, grad=True)
    w = torch.randn(2, T, 3, 5, dtype=torch.float64)
    out = gla(q, k, v, gates(x, s), reverse=reverse)
    ref = naive_recurrent_gla(q, k, v, gates(x, s), reverse=reverse)
    assert out.dtype == torch.float64 and out.shape == ref.shape
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-11)
    for a, b in zip(grads(out, w, (q, k, v, x)), grads(ref, w, (q, k, v, x))):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("gate", ["vector", "scalar"])
def test_bidirectional_matches_two_recurrences(gate):
    T = 150
    q, k, v, x, s = make(T=T, gate=gate, grad=True)
    x_rev = (torch.randn_like(x) * 2).requires_grad_(True)
    w = torch.randn(2, T, 3, 5, dtype=torch.float64)
    out = gla_bidirectional(q, k, v, gates(x, s), gates(x_rev, s))
    ref = 0.5 * (naive_recurrent_gla(q, k, v, gates(x, s))
                 + naive_recurrent_gla(q, k, v, gates(x_rev, s), reverse=True))
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-11)
    for a, b in zip(grads(out, w, (q, k, v, x, x_rev)), grads(ref, w, (q, k, v, x, x_rev))):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-11)
    # unmerged pair, "sum", and keys that differ per direction
    k2 = torch.randn_like(k)
    fwd, bwd = gla_bidirectional(q, k, v, gates(x, s), gates(x_rev, s), merge=None, k_reverse=k2)
    torch.testing.assert_close(fwd, naive_recurrent_gla(q, k, v, gates(x, s)), rtol=1e-10, atol=1e-11)
    torch.testing.assert_close(bwd, naive_recurrent_gla(q, k2, v, gates(x_rev, s), reverse=True), rtol=1e-10, atol=1e-11)
    total = gla_bidirectional(q, k, v, gates(x, s), merge="sum")
    torch.testing.assert_close(total, naive_recurrent_gla(q, k, v, gates(x, s))
                               + naive_recurrent_gla(q, k, v, gates(x, s), reverse=True), rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("form", ["chunk", "sub", "explicit"])
@pytest.mark.parametrize("block_elems", [1, 1 << 18])
def test_every_intra_chunk_form_matches(form, block_elems):
    """The three exact forms of the intra-chunk term, and groups of one chunk or many."""
    q, k, v, x, s = make(T=200, K=16, V=8, strength=1 / 16, grad=True)
    w = torch.randn(2, 200, 3, 8, dtype=torch.float64)
    out = chunk_gla_torch(q, k, v, gates(x, s), 16 ** -0.5, form=form, block_elems=block_elems)
    ref = naive_recurrent_gla(q, k, v, gates(x, s))
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-11)
    for a, b in zip(grads(out, w, (q, k, v, x)), grads(ref, w, (q, k, v, x))):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-11)


def test_small_chunks_gradcheck():
    """Chunks of 8 with sub-chunks of 4 over 13 tokens: two chunks, one partial, every form."""
    q, k, v, x, s = make(B=1, T=13, H=1, K=3, V=2, grad=True)
    for form in ("chunk", "sub", "explicit"):
        fn = lambda q, k, v, x: chunk_gla_torch(q, k, v, F.logsigmoid(x), 0.5, chunk_size=8, sub_chunk=4, form=form)  # noqa: E731
        assert torch.autograd.gradcheck(fn, (q, k, v, x), eps=1e-6, atol=1e-6, fast_mode=True)


def test_strong_gates_float32_stay_finite_and_accurate():
    """Gates down to -40 nats per token: the factored forms would overflow in float32; the automatic
    choice falls back to the explicit form and still matches the float64 recurrence."""
    q, k, v, x, _ = make(B=1, T=300, H=2, K=16, V=16, dtype=torch.float32)
    g = -40 * torch.sigmoid(x) - 1e-3
    out = gla(q, k, v, g)
    ref = naive_recurrent_gla(q, k, v, g)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-4)
    # and in between: a chunk-wide span too large, a sub-chunk span fine
    g = -1.5 * torch.sigmoid(x)
    torch.testing.assert_close(gla(q, k, v, g).double(), naive_recurrent_gla(q, k, v, g), rtol=1e-4, atol=1e-4)


def test_infinite_forget_gate_resets_the_state_and_nan_propagates():
    """g = -inf (a gate of exactly 0) wipes the state, as in the recurrence; a NaN input gives NaN outputs
    from its token on (and, through the chunk's masked matmul, for the earlier tokens of its 64-token
    chunk), never a finite wrong answer; earlier chunks stay finite."""
    q, k, v, x, s = make(B=1, T=150, H=2)
    g = gates(x, s).clone()
    g[:, 70] = float("-inf")
    out = gla(q, k, v, g)
    torch.testing.assert_close(out, naive_recurrent_gla(q, k, v, g), rtol=1e-10, atol=1e-11)
    torch.testing.assert_close(gla(q, k, v, g, reverse=True), naive_recurrent_gla(q, k, v, g, reverse=True),
                               rtol=1e-10, atol=1e-11)
    v = v.clone()
    v[:, 100] = float("nan")
    out = gla(q, k, v, gates(x, s))
    assert torch.isnan(out[:, 100:]).all() and torch.isfinite(out[:, :64]).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_low_precision_inputs(dtype):
    q, k, v, x, s = make(B=1, T=130, H=2, K=16, V=16, dtype=torch.float32, strength=1 / 16)
    g = gates(x, s)
    out = gla(q.to(dtype), k.to(dtype), v.to(dtype), g)
    ref = naive_recurrent_gla(q.to(dtype), k.to(dtype), v.to(dtype), g)
    assert out.dtype == dtype
    tol = {torch.float32: 1e-5, torch.bfloat16: 3e-2, torch.float16: 5e-3}[dtype]
    torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol * ref.abs().max().item())


def test_non_contiguous_inputs():
    q, k, v, x, s = make(T=70)
    g = gates(x, s)
    # same values through permuted storage
    qp, kp, vp, gp = (t.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3) for t in (q, k, v, g))
    assert not qp.is_contiguous()
    torch.testing.assert_close(gla(qp, kp, vp, gp), naive_recurrent_gla(q, k, v, g), rtol=1e-10, atol=1e-11)


def test_empty_sequence_and_custom_scale():
    q, k, v, x, s = make(T=0)
    assert gla(q, k, v, gates(x, s)).shape == (2, 0, 3, 5)
    q, k, v, x, s = make(T=20)
    torch.testing.assert_close(gla(q, k, v, gates(x, s), scale=0.3),
                               naive_recurrent_gla(q, k, v, gates(x, s), scale=0.3), rtol=1e-10, atol=1e-11)


def test_scan_of_both_directions_returns_token_order():
    q, k, v, x, s = make(T=100)
    g = gates(x, s)
    fwd, bwd = chunk_gla_scan((q, k, v, g), (q, k, v, g), 8 ** -0.5, block_elems=1)
    torch.testing.assert_close(fwd, naive_recurrent_gla(q, k, v, g), rtol=1e-10, atol=1e-11)
    torch.testing.assert_close(bwd, naive_recurrent_gla(q, k, v, g, reverse=True), rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("bad, match", [
    (lambda q, k, v, g: (q[0], k, v, g), "q must be"),
    (lambda q, k, v, g: (q, k[..., :4], v, g), "k must have q's shape"),
    (lambda q, k, v, g: (q, k, v[:, :5], g), "v must be"),
    (lambda q, k, v, g: (q, k, v, g[..., :3]), "g \\(log forget gate\\)"),
    (lambda q, k, v, g: (q, k, v.float(), g), "share a dtype"),
    (lambda q, k, v, g: (q, k, v, g.long()), "floating-point"),
    (lambda q, k, v, g: (q, k.numpy(), v, g), "torch.Tensor"),
])
def test_bad_input_raises_value_error(bad, match):
    q, k, v, x, s = make(T=10)
    with pytest.raises(ValueError, match=match):
        gla(*bad(q, k, v, gates(x, s)))


def test_bad_options_raise_value_error():
    q, k, v, x, s = make(T=10)
    g = gates(x, s)
    with pytest.raises(ValueError, match="scale"):
        gla(q, k, v, g, scale=-1.0)
    with pytest.raises(ValueError, match="merge"):
        gla_bidirectional(q, k, v, g, merge="max")
    with pytest.raises(ValueError, match="share a shape"):
        gla_bidirectional(q, k, v, g, g[..., :1])


class _CountOps(TorchDispatchMode):
    """Counts the tensor ops dispatched inside the block."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def test_chunked_scan_runs_a_few_ops_per_chunk_at_4096():
    """Acceptance shape T = 4096, D = 64 (one sequence, one head), forward, float32: the chunked path is a few
    tensor ops (matmuls over 64-token chunks) per chunk, the recurrence about a dozen per token, so the chunked
    path dispatches >= 20x fewer ops, and both give the same output. The speed goal itself (chunked >= 20x
    faster, CPU) is timed by ``vision bench backbone --skip-models --gla-t 4096``."""
    from vision.kernels.linear_attention.chunked import CHUNK_SIZE

    T = 4096
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, T, 1, 64, generator=gen) for _ in range(3))
    g = F.logsigmoid(torch.randn(1, T, 1, 64, generator=gen)) / 16
    with torch.inference_mode(), use_backend("torch"):
        with _CountOps() as chunked:
            out = gla(q, k, v, g)
        with _CountOps() as naive:
            ref = naive_recurrent_gla(q, k, v, g, dtype=torch.float32)
    print(f"ops dispatched: naive {naive.n}, chunked {chunked.n}: {naive.n / chunked.n:.1f}x")
    assert chunked.n <= 16 * -(-T // CHUNK_SIZE), chunked.n
    assert naive.n >= 20 * chunked.n, (naive.n, chunked.n)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-4 * ref.abs().max().item())


def test_memory_grows_linearly_in_t():
    """Temporaries are bounded per chunk group: doubling T about doubles the peak tensor memory."""
    from vision.pipelines.bench.backbone import peak_memory

    def peak(T):
        q, k, v, x, s = make(B=1, T=T, H=2, K=32, V=32, dtype=torch.float32)
        g = gates(x, s / 16)
        with torch.inference_mode():
            return peak_memory(lambda: gla_bidirectional(q, k, v, g, g), "cpu"), q.numel() * 4

    (p1, n1), (p2, n2) = peak(2048), peak(8192)
    assert p2 / p1 < 4.5  # 4x the tokens
    assert p2 < 8 * n2  # a few input-sized buffers, no T x T or per-pair tensors


@pytest.mark.cuda
@pytest.mark.skipif(not fla_available(), reason="fla (extra 'cuda') not installed")
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 2e-3), (torch.bfloat16, 5e-2)])
@pytest.mark.parametrize("gate", ["vector", "scalar"])
def test_cuda_fla_matches_chunked_and_recurrence(dtype, tol, gate):
    q, k, v, x, _ = make(B=2, T=1000, H=4, K=64, V=64, gate=gate, dtype=torch.float32)
    g = F.logsigmoid(x) / 16
    ref = naive_recurrent_gla(q, k, v, g)
    qc, kc, vc, gc = (t.cuda() for t in (q.to(dtype), k.to(dtype), v.to(dtype), g))
    ours_fla = gla(qc, kc, vc, gc)
    with use_backend("torch"):
        ours_torch = gla(qc, kc, vc, gc)
    scale = ref.abs().max().item()
    torch.testing.assert_close(ours_fla.double().cpu(), ref, rtol=tol, atol=tol * scale)
    torch.testing.assert_close(ours_torch.double().cpu(), ref, rtol=tol, atol=tol * scale)
    both = gla_bidirectional(qc, kc, vc, gc, gc)
    ref2 = 0.5 * (ref + naive_recurrent_gla(q, k, v, g, reverse=True))
    torch.testing.assert_close(both.double().cpu(), ref2, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("gate", ["vector", "scalar"])
def test_cpu_bf16_autocast_matches_the_recurrence(gate):
    """Under torch.autocast (CPU, bf16) with float32 inputs, as a mixed-precision training step gives it, the
    scan keeps its own float32 accumulation: before, autocast made some products bf16 and one baddbmm mixed
    dtypes (RuntimeError)."""
    q, k, v, x, s = make(T=150, gate=gate, dtype=torch.float32)
    ref = naive_recurrent_gla(*(t.double() for t in (q, k, v)), gates(x.double(), s))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = gla(q, k, v, gates(x, s))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-4)  # float32 rounding
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = gla(*(t.bfloat16() for t in (q, k, v)), gates(x, s).bfloat16())
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.double(), ref, rtol=0.05, atol=0.05 * ref.abs().max().item())
