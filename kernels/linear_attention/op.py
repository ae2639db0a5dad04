"""Public gated linear attention: ``gla`` (one direction) and ``gla_bidirectional`` (both, one call).

The paths (op ``gla`` in ``runtime``'s registry, which both functions ask once per call): "fla", on the Triton
backend, runs flash-linear-attention's ``fla.ops.gla.chunk_gla`` on CUDA tensors when it imports (``pip install
locallinear-vision[cuda]`` installs ``fla-core``); "torch" runs our chunked PyTorch scan (``chunked.py``) everywhere
else, and whenever ``VISION_BACKEND=torch`` is set. ``runtime.explain("gla", q, device=q.device)`` says which.
fla is imported lazily and only for CUDA tensors, so CPU-only installs never touch it. The torch scan's
intra-chunk forms (``chunked.py``) are not engines: each is an exact formula of the same PyTorch code, picked per
chunk group by the gates' shape and strength so that no exponent overflows.
"""
from __future__ import annotations

import math
from functools import lru_cache

import torch

from ..runtime import choose, implementation, register_path
from ..validate import check_flag, check_positive, is_flag, is_symbolic, reads_data
from .chunked import chunk_gla_scan

__all__ = ["gla", "gla_bidirectional", "fla_available"]


@lru_cache(maxsize=None)
def _fla_chunk_gla():
    try:
        from fla.ops.gla import chunk_gla  # lazy: fla comes with the [cuda] extra
    except Exception:  # not installed, or a build that fails at import (no driver, wrong triton)
        return None
    return chunk_gla


def fla_available() -> bool:
    """True when flash-linear-attention's ``chunk_gla`` imports here."""
    return _fla_chunk_gla() is not None


def _fla_takes(device: torch.device, **_) -> str | None:
    if device.type != "cuda":
        return f"fla's kernels run on CUDA tensors, not {device.type}"
    return None if fla_available() else "flash-linear-attention (fla.ops.gla.chunk_gla) does not import"


def _validate(q, k, v, g, scale, names=("q", "k", "v", "g")):
    """The checked gate (4-d) and scale; ``names`` are the arguments the messages name (gla_bidirectional's
    backward scan passes k_reverse and g_reverse as k and g)."""
    nq, nk, nv, ng = names
    for name, t in zip(names, (q, k, v, g)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"gla: {name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise ValueError(f"gla: {name} must be a floating-point tensor, got {t.dtype}")
    if q.dim() != 4:
        raise ValueError(f"gla: {nq} must be (B, T, H, K), got shape {tuple(q.shape)}")
    if k.shape != q.shape:
        raise ValueError(f"gla: {nk} must have {nq}'s shape {tuple(q.shape)}, got {tuple(k.shape)}")
    if v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"gla: {nv} must be (B, T, H, V) with (B, T, H) = {tuple(q.shape[:3])}, "
                         f"got {tuple(v.shape)}")
    if g.dim() == 3:
        g = g.unsqueeze(-1)
    if g.dim() != 4 or g.shape[:3] != q.shape[:3] or g.shape[-1] not in (1, q.shape[-1]):
        raise ValueError(
            f"gla: {ng} (log forget gate) must be (B, T, H, K) per key channel or (B, T, H) / (B, T, H, 1) per "
            f"head, with (B, T, H, K) = {tuple(q.shape)}; got {tuple(g.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"gla: {nq}, {nk}, {nv} must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    devices = {t.device for t in (q, k, v, g)}
    if len(devices) > 1:
        raise ValueError(f"gla: {', '.join(names)} must be on one device, got {sorted(map(str, devices))}")
    if scale is None:
        scale = q.shape[-1] ** -0.5
    elif is_symbolic(scale):  # a compiled call's scale (dynamic=True): checked by torch._check, kept symbolic
        return g, check_positive(scale, "gla: scale")
    elif is_flag(scale) or not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"gla: scale must be a positive finite number, got {type(scale).__name__} {scale!r}")
    return g, float(scale)


def _form() -> str | None:
    """The intra-chunk form: picked per group from the gates' values in eager calls; while torch.compile or
    torch.export traces (no reading of values) the explicit form, which is safe for any gate."""
    return None if reads_data() else "explicit"


def _fla_gla(q, k, v, g, scale):
    chunk_gla = _fla_chunk_gla()
    if g.shape[-1] == 1:
        g = g.expand_as(q)
    o, _ = chunk_gla(q.contiguous(), k.contiguous(), v.contiguous(), g.contiguous(), scale=scale)
    return o.to(v.dtype)


def _merge(o_fwd, o_bwd, merge):
    if merge is None:
        return o_fwd, o_bwd
    needs_grad = torch.is_grad_enabled() and (o_fwd.requires_grad or o_bwd.requires_grad)
    o = o_fwd + o_bwd if needs_grad else o_fwd.add_(o_bwd)  # o_fwd is this call's own buffer
    return o.mul_(0.5) if merge == "mean" else o


class _Fla:
    """flash-linear-attention's ``chunk_gla`` (CUDA): a reversed scan runs on flipped sequences, and both
    directions run as one launch on the forward and flipped sequences stacked on the batch axis."""

    @staticmethod
    def scan(q, k, v, g, scale, reverse):
        if reverse:
            q, k, v, g = (t.flip(1) for t in (q, k, v, g))
        o = _fla_gla(q, k, v, g, scale)
        return o.flip(1) if reverse else o

    @staticmethod
    def both(q, k, v, g, k_reverse, g_reverse, scale, merge):
        stack = lambda a, b: torch.cat([a, b.flip(1)], dim=0)  # noqa: E731
        o = _fla_gla(stack(q, q), stack(k, k_reverse), stack(v, v), stack(g, g_reverse), scale)
        o_fwd, o_bwd = o.chunk(2, dim=0)
        return _merge(o_fwd, o_bwd.flip(1), merge)


class _Torch:
    """Our chunked PyTorch scan (``chunked.py``), any device; both directions stacked chunk group by chunk group
    (no flipped copy of the sequence), merged there when ``merge`` is set."""

    @staticmethod
    def scan(q, k, v, g, scale, reverse):
        o_fwd, o_bwd = chunk_gla_scan(None if reverse else (q, k, v, g), (q, k, v, g) if reverse else None, scale,
                                      form=_form())
        return o_bwd if reverse else o_fwd

    @staticmethod
    def both(q, k, v, g, k_reverse, g_reverse, scale, merge):
        return chunk_gla_scan((q, k, v, g), (q, k_reverse, v, g_reverse), scale, merge=merge, form=_form())


register_path("gla", "fla", "triton", 10, supports=_fla_takes, run=_Fla)
register_path("gla", "torch", "torch", 0, run=_Torch)


def _path(q: torch.Tensor):
    """The implementation of the path the registry chooses for ``q`` (what ``explain("gla", q, device=q.device)``
    names)."""
    return implementation("gla", choose("gla", q, device=q.device))


def gla(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
        reverse: bool = False, scale: float | None = None) -> torch.Tensor:
    """Gated linear attention (Yang et al., ICML 2024, arXiv 2312.06635).

    ``S_t = diag(exp(g_t)) S_{t-1} + k_t^T v_t``, ``o_t = scale * q_t S_t`` with S per batch and head.

    Args:
        q, k: (B, T, H, K) queries and keys.
        v: (B, T, H, V) values.
        g: log forget gate (<= 0 for a forget gate; e.g. ``F.logsigmoid(x) / 16``): (B, T, H, K) per key
            channel (GLA, ViG), or (B, T, H) / (B, T, H, 1) per head, broadcast over K (Mamba-2 / SSD style).
        reverse: scan from the last token to the first (``S_t`` collects tokens t..T-1).
        scale: query scale, ``K ** -0.5`` when None.

    Returns:
        (B, T, H, V) in v's dtype (accumulation in float32, float64 for float64 inputs).

    Example:
        >>> q = k = torch.randn(2, 196, 3, 32); v = torch.randn(2, 196, 3, 64)
        >>> g = torch.nn.functional.logsigmoid(torch.randn(2, 196, 3, 32)) / 16
        >>> gla(q, k, v, g).shape
        torch.Size([2, 196, 3, 64])
    """
    g, scale = _validate(q, k, v, g, scale)
    reverse = check_flag(reverse, "gla: reverse")  # a truthy "no" would scan backwards
    if q.shape[1] == 0:
        return v.new_zeros(v.shape)
    return _path(q).scan(q, k, v, g, scale, reverse)


def gla_bidirectional(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                      g_reverse: torch.Tensor | None = None, scale: float | None = None,
                      merge: str | None = "mean", k_reverse: torch.Tensor | None = None):
    """Both scan directions of ``gla`` in one call, as ViG does (Liao et al., AAAI 2025, arXiv 2405.18425).

    The flipped sequence is stacked on the batch axis (2B sequences), so one pass serves both
    directions: with fla, one ``chunk_gla`` launch on the stacked tensors; on the PyTorch path the
    stacking is done chunk group by chunk group, so no flipped copy of the whole sequence is made.

    Args:
        q, k, v: as in ``gla``.
        g: log forget gate of the forward scan; g_reverse: that of the backward scan (``g`` when None);
            both indexed by token position (the gate of token t in either direction).
        scale: as in ``gla``.
        merge: ``"mean"`` (ViG), ``"sum"``, or None to return ``(forward, backward)``.
        k_reverse: keys of the backward scan when they differ (``k`` when None), e.g. inputs scaled by a
            per-direction step size.

    Returns:
        (B, T, H, V), or a pair of them when ``merge`` is None.
    """
    if merge not in ("mean", "sum", None):
        raise ValueError(f"gla_bidirectional: merge must be 'mean', 'sum' or None, got {merge!r}")
    g_reverse = g if g_reverse is None else g_reverse
    k_reverse = k if k_reverse is None else k_reverse
    g, scale = _validate(q, k, v, g, scale)
    g_reverse, _ = _validate(q, k_reverse, v, g_reverse, scale, names=("q", "k_reverse", "v", "g_reverse"))
    if g.shape != g_reverse.shape:
        raise ValueError(f"gla_bidirectional: g and g_reverse must share a shape, got {tuple(g.shape)} and {tuple(g_reverse.shape)}")
    if q.shape[1] == 0:
        zeros = v.new_zeros(v.shape)
        return _merge(zeros, zeros, merge)
    return _path(q).both(q, k, v, g, k_reverse, g_reverse, scale, merge)
