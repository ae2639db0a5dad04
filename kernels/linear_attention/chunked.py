"""Chunked gated linear attention in plain PyTorch (any device; autograd runs through it).

The sequence is cut into chunks of ``chunk_size`` (64) tokens. With ``b`` the cumulative log gate inside
a chunk (``b <= 0`` and non-increasing for forget gates ``g <= 0``):

- inter-chunk: ``o_i += (q_i * exp(b_i)) S``, where the state entering the chunk follows
  ``S <- diag(exp(b_last)) S + sum_j (k_j * exp(b_last - b_j))^T v_j`` (the only loop: over chunks);
- intra-chunk: ``o_i += sum_{j<=i} (sum_d q_id k_jd exp(b_id - b_jd)) v_j``.

Every exponent is a difference of cumulative log gates. The inter-chunk exponents are always <= 0. For
the intra-chunk term three forms are used, each exact, picked per group of chunks by how strong the
gates are:

- per-head scalar gate (Mamba-2 / SSD style): the (C, C) matrix ``exp(b_i - b_j)``, masked to j <= i
  before exp; the rest is matmuls.
- per-channel gate, factored: ``(q_i exp(b_i - r)) . (k_j exp(r - b_j))`` with r the cumulative gate at
  the start of the chunk, or of a sub-chunk of 16 tokens (the GLA paper's secondary chunking): pure
  matmuls. The factor ``exp(r - b_j)`` grows with the decay across that span, so this form is used only
  while the span stays below ``_SPAN_LIMIT`` nats, far from exp overflow; both factors then hold their
  values to float rounding.
- per-channel gate, explicit: for stronger gates, the diagonal 16 x 16 sub-blocks use the (c, c, K)
  tensor of differences ``b_i - b_j``; off-diagonal sub-blocks are matmuls referenced to the end of the
  preceding sub-chunk (exponents <= 0). Safe for any gate strength, slower.

The scan runs over groups of chunks (``chunk_gla_scan``), both directions of a bidirectional call
stacked on the batch axis group by group, so temporaries stay near ``block_elems`` elements and memory
is linear in T with a small constant: the inputs, the output, and a few group-sized buffers. Work is
done in float32 (float64 for float64 inputs) and returned in the input dtype.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

CHUNK_SIZE = 64
SUB_CHUNK = 16
BLOCK_ELEMS = 1 << 18

# exp overflows near 88 (float32) and 709 (float64); the factored form stays well inside that range
_SPAN_LIMIT = {torch.float32: 40.0, torch.float64: 300.0}
# a log gate of -inf (forget everything) would make differences of cumulative gates NaN: floor it where
# exp() of it is already far below the dtype's resolution, so the state is wiped all the same
_GATE_FLOOR = {torch.float32: -60.0, torch.float64: -700.0}


def _causal(n: int, device) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def _intra_scalar(q, k, v, b):
    """Scalar gate. q, k: (n, C, K) with q scaled; v: (n, C, V); b: (n, C, 1) -> (n, C, V)."""
    C = q.shape[-2]
    decay = (b - b.transpose(-1, -2)).masked_fill(~_causal(C, q.device), float("-inf")).exp()
    return ((q @ k.transpose(-1, -2)) * decay) @ v


def _intra_factored_sub(q, k, v, b, sub: int):
    """Per-channel gate, one reference per sub-chunk. q (scaled), k, b: (n, C, K); v: (n, C, V)."""
    n, C, K = q.shape
    s, c = C // sub, sub
    r = torch.cat([torch.zeros_like(b[:, :1, :]), b[:, c - 1:C - 1:c, :]], dim=1)  # (n, s, K)
    q_ref = q.view(n, s, c, K) * (b.view(n, s, c, K) - r.unsqueeze(-2)).exp()  # exponent <= 0
    j = torch.arange(C, device=q.device)
    m = torch.arange(s, device=q.device)
    seen = j < ((m + 1) * c).unsqueeze(-1)  # (s, C): keys up to the end of sub-chunk m
    expo = (r.unsqueeze(-2) - b.unsqueeze(1)).masked_fill(~seen.unsqueeze(-1), float("-inf"))
    k_ref = k.unsqueeze(1) * expo.exp()  # (n, s, C, K)
    a = q_ref @ k_ref.transpose(-1, -2)  # (n, s, c, C)
    causal = j <= (m.unsqueeze(-1) * c + torch.arange(c, device=q.device)).unsqueeze(-1)  # (s, c, C)
    a = a.masked_fill(~causal, 0.0).view(n, C, C)
    return a @ v


def _intra_explicit(q, k, v, b, sub: int):
    """Per-channel gate, any strength. q (scaled), k, b: (n, C, K); v: (n, C, V) -> (n, C, V)."""
    n, C, K = q.shape
    V = v.shape[-1]
    s, c = C // sub, sub
    qs, ks, bs = (t.view(n, s, c, K) for t in (q, k, b))
    vs = v.view(n, s, c, V)
    diff = bs.unsqueeze(-2) - bs.unsqueeze(-3)  # (n, s, c_i, c_j, K)
    diff = diff.masked_fill(~_causal(c, q.device).unsqueeze(-1), float("-inf"))
    a = (ks.unsqueeze(-3) * diff.exp() * qs.unsqueeze(-2)).sum(-1)  # (n, s, c_i, c_j)
    o = a @ vs  # (n, s, c, V)
    if s == 1:
        return o.view(n, C, V)
    # query sub-chunk m >= 1 sees keys j < m*c, referenced to the end of sub-chunk m-1
    b_ref = bs[:, :-1, -1, :]  # (n, s-1, K)
    q_off = qs[:, 1:] * (bs[:, 1:] - b_ref.unsqueeze(-2)).exp()  # (n, s-1, c, K)
    expo = b_ref.unsqueeze(-2) - b.unsqueeze(1)  # (n, s-1, C, K)
    visible = torch.arange(C, device=q.device) < (torch.arange(1, s, device=q.device) * c).unsqueeze(-1)
    expo = expo.masked_fill(~visible.unsqueeze(-1), float("-inf"))
    o_off = (q_off @ (k.unsqueeze(1) * expo.exp()).transpose(-1, -2)) @ v.unsqueeze(1)  # (n, s-1, c, V)
    o = torch.cat([o[:, :1], o[:, 1:] + o_off], dim=1)
    return o.view(n, C, V)


def _span(b: torch.Tensor, sub: int) -> float:
    """Largest |cumulative gate| measured from the start of any chunk (sub == C) or sub-chunk."""
    C = b.shape[-2]
    if sub >= C:
        lo, hi = torch.aminmax(b.detach())
        return max(-float(lo), float(hi))
    r = torch.cat([torch.zeros_like(b[:, :1, :]), b[:, sub - 1:C - 1:sub, :]], dim=1)
    n, s, K = r.shape
    return float((b.view(n, s, sub, K) - r.unsqueeze(-2)).detach().abs().amax())


def _pick_form(b: torch.Tensor, sub: int) -> str:
    limit = _SPAN_LIMIT[b.dtype]
    if _span(b, b.shape[-2]) <= limit:
        return "chunk"
    return "sub" if _span(b, sub) <= limit else "explicit"


def _group(x: torch.Tensor, t0: int, t1: int, reverse: bool, C: int) -> torch.Tensor:
    """Tokens [t0, t1) of the (possibly reversed) sequence x (B, T, H, D) as (n, B, H, C, D), zero-padded
    past the end (zero keys/values and zero log gates leave the real tokens untouched)."""
    T = x.shape[1]
    if reverse:
        x = x[:, max(T - t1, 0):T - t0].flip(1)
    else:
        x = x[:, t0:min(t1, T)]
    if x.shape[1] < t1 - t0:
        x = F.pad(x, (0, 0, 0, 0, 0, t1 - t0 - x.shape[1]))
    B, L, H, D = x.shape
    return x.reshape(B, L // C, C, H, D).permute(1, 0, 3, 2, 4)


def _scan_group(parts, state, scale: float, acc, form, sub: int):
    """One group of chunks of every scan: parts[scan] = (q, k, v, g) each (n, B, H, C, D); state (S*H, K, V)
    entering the group. Returns the outputs (n * S * H, C, V) and the state after the group."""
    n, _, H, C, K = parts[0][0].shape
    SH = state.shape[0]

    def take(i):  # input i of every scan, stacked on the batch axis, as (n * S * H, C, D)
        x = torch.cat([p[i] for p in parts], dim=1) if len(parts) > 1 else parts[0][i]
        return x.to(acc).reshape(n * SH, C, x.shape[-1])

    q, k, v, g = take(0), take(1), take(2), take(3).clamp_min(_GATE_FLOOR[acc])
    V = v.shape[-1]
    b = g.cumsum(-2)  # log decay from the chunk start through token i
    form = form or _pick_form(b, sub)
    if form == "chunk":
        # |b| <= _SPAN_LIMIT here, so exp(b) and 1 / exp(b) are both well inside the float range
        e = b.exp()
        q_in, k_ref = (q * e).mul_(scale), k / e
        k_state = k_ref * e[:, -1:, :]  # k_j exp(b_last - b_j)
        decay = e[:, -1:, :]
    else:
        q = q * scale
        b_last = b[:, -1:, :]
        q_in, k_state, decay = q * b.exp(), k * (b_last - b).exp(), b_last.exp()
    # each chunk's contribution to the state, and the state's decay across the chunk
    u = (k_state.transpose(-1, -2) @ v).view(n, SH, K, V)
    decay = decay.transpose(-1, -2).view(n, SH, -1, 1)
    entering = []
    for i in range(n):
        entering.append(state)
        state = torch.addcmul(u[i], state, decay[i])
    entering = torch.stack(entering).view(n * SH, K, V)
    if form == "chunk":
        intra = (q_in @ k_ref.transpose(-1, -2)).tril_() @ v
    elif form == "scalar":
        intra = _intra_scalar(q, k, v, b)
    elif form == "sub":
        intra = _intra_factored_sub(q, k, v, b, sub)
    else:
        intra = _intra_explicit(q, k, v, b, sub)
    return intra.baddbmm_(q_in, entering), state  # in place: intra is this group's own tensor


def chunk_gla_scan(fwd, bwd, scale: float, chunk_size: int = CHUNK_SIZE, sub_chunk: int = SUB_CHUNK,
                   block_elems: int = BLOCK_ELEMS, form: str | None = None, merge: str | None = None):
    """GLA by chunks in one or both directions; inputs already validated (see ``op.gla``).

    ``fwd`` and ``bwd`` are ``(q, k, v, g)`` tuples or None (the scan in that direction is skipped):
    q, k (B, T, H, K), v (B, T, H, V), g (B, T, H, K) or (B, T, H, 1). ``bwd`` is scanned from the
    last token to the first. Both directions run as one batch of 2B sequences ("stacked on the batch
    axis"), built group by group: the sequence is processed in groups of chunks, each group computing
    its cumulative gates, its chunks' state contributions, the states entering them (carried on to the
    next group) and its outputs, so temporaries stay near ``block_elems`` elements whatever T is.

    Args:
        scale: query scale.
        chunk_size: tokens per chunk; sub_chunk: sub-chunk size for per-channel gates (divides chunk_size).
        block_elems: target size of the per-group temporaries, in elements.
        form: force ``"chunk"``, ``"sub"`` or ``"explicit"`` for per-channel gates (tests); None picks,
            per group, the fastest form that is safe for its gates.
        merge: None, or ``"sum"`` / ``"mean"`` of the two directions, accumulated into one buffer.

    Returns:
        ``(o_fwd, o_bwd)``, each (B, T, H, V) in v's dtype and in token order, or None where skipped;
        with ``merge``, the single merged (B, T, H, V) tensor.
    """
    scans = [(d, rev) for d, rev in ((fwd, False), (bwd, True)) if d is not None]
    q0, _, v0, g0 = scans[0][0]
    if torch.is_autocast_enabled(q0.device.type):
        # the scan picks its own accumulation dtype (float32, or float64) for every product; autocast would
        # turn some of them into bf16/fp16 and mix dtypes in one baddbmm. Outputs keep v's dtype either way.
        with torch.autocast(q0.device.type, enabled=False):
            return chunk_gla_scan(fwd, bwd, scale, chunk_size, sub_chunk, block_elems, form, merge)
    B, T, H, K = q0.shape
    V = v0.shape[-1]
    out_dtype = v0.dtype
    acc = torch.float64 if q0.dtype == torch.float64 else torch.float32
    scalar = g0.shape[-1] == 1
    C = chunk_size
    sub = min(sub_chunk, C)
    if C % sub:
        raise ValueError(f"sub_chunk ({sub_chunk}) must divide chunk_size ({chunk_size})")
    if form not in (None, "chunk", "sub", "explicit"):
        raise ValueError(f"form must be 'chunk', 'sub', 'explicit' or None, got {form!r}")
    N = math.ceil(T / C)
    S = len(scans) * B  # sequences scanned together
    # elements of the larger temporaries per chunk and sequence (the factored-chunk form for vector gates)
    per_chunk = C * (C + 4 * K + 2 * V) if scalar or form in (None, "chunk") else \
        C * (C + K * (C // sub + 3 + (sub if form == "explicit" else 0)) + 2 * V)
    group = max(1, block_elems // (S * H * per_chunk))

    if merge not in (None, "sum", "mean"):
        raise ValueError(f"merge must be None, 'sum' or 'mean', got {merge!r}")
    merged = merge is not None and len(scans) == 2
    # merged: one zero-initialised buffer both directions add into (they reach a token in different
    # groups), kept in the accumulation dtype so that low-precision outputs are rounded once
    outs = [v0.new_zeros(B, T, H, V, dtype=acc)] if merged else \
        [v0.new_empty(B, T, H, V, dtype=out_dtype) for _ in scans]
    state = q0.new_zeros(S * H, K, V, dtype=acc)
    for n0 in range(0, N, group):
        n = min(group, N - n0)
        t0, t1 = n0 * C, (n0 + n) * C
        parts = [[_group(t, t0, t1, rev, C) for t in d] for d, rev in scans]
        o, state = _scan_group(parts, state, scale, acc, "scalar" if scalar else form, sub)
        if merged and merge == "mean":
            o = o.mul_(0.5)
        o = o.view(n, len(scans), B, H, C, V).to(outs[0].dtype)
        valid = min(t1, T) - t0
        for j, (_, rev) in enumerate(scans):
            oj = o[:, j].permute(1, 0, 3, 2, 4).reshape(B, n * C, H, V)[:, :valid]
            span = slice(T - t0 - valid, T - t0) if rev else slice(t0, t0 + valid)
            oj = oj.flip(1) if rev else oj
            if merged:
                outs[0][:, span] += oj
            else:
                outs[j][:, span] = oj
        del o, oj, parts  # before the next group's temporaries exist
    if merged:
        return outs[0].to(out_dtype)
    result = iter(outs)
    return tuple(next(result) if d is not None else None for d in (fwd, bwd))


def chunk_gla_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, scale: float,
                    reverse: bool = False, **kwargs) -> torch.Tensor:
    """One-direction GLA by chunks: (B, T, H, V). See ``chunk_gla_scan`` for the keyword arguments."""
    o_fwd, o_bwd = chunk_gla_scan(None if reverse else (q, k, v, g), (q, k, v, g) if reverse else None,
                                  scale, **kwargs)
    return o_bwd if reverse else o_fwd
