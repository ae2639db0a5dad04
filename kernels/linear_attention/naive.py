"""Reference gated linear attention: the recurrence itself, one step per token (slow, obviously right).

    S_t = diag(exp(g_t)) S_{t-1} + k_t^T v_t          S_t: (D_k, D_v) per batch and head
    o_t = (scale * q_t) S_t

The tests compare every other path against this in float64, values and gradients (autograd through the loop).
"""
from __future__ import annotations

import torch


def naive_recurrent_gla(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                        scale: float | None = None, reverse: bool = False,
                        dtype: torch.dtype | None = torch.float64) -> torch.Tensor:
    """Gated linear attention by its recurrence over time.

    Args:
        q, k: (B, T, H, K) queries and keys.
        v: (B, T, H, V) values.
        g: log forget gate, (B, T, H, K) per key channel, or (B, T, H) / (B, T, H, 1) per head (broadcast over K).
        scale: query scale, ``K ** -0.5`` when None.
        reverse: run the recurrence from the last token to the first.
        dtype: computation and output dtype (float64 by default); None keeps the input dtype.

    Returns:
        (B, T, H, V) in ``dtype``.
    """
    dtype = dtype or q.dtype
    if g.dim() == 3:
        g = g.unsqueeze(-1)
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else scale
    q, k, v, g = (t.to(dtype) for t in (q, k, v, g))
    state = q.new_zeros(B, H, K, V)
    out = []
    steps = range(T - 1, -1, -1) if reverse else range(T)
    for t in steps:
        state = state * g[:, t].exp().unsqueeze(-1) + k[:, t].unsqueeze(-1) * v[:, t].unsqueeze(-2)
        out.append((q[:, t] * scale).unsqueeze(-2) @ state)  # (B, H, 1, V)
    if reverse:
        out.reverse()
    if T == 0:
        return v.new_zeros(B, 0, H, V)
    return torch.cat(out, dim=-2).transpose(1, 2)
