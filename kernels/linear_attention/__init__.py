"""Gated linear attention: the float64-capable recurrence (``naive``), our chunked PyTorch path
(``chunked``) and the public op that dispatches to flash-linear-attention on CUDA (``op``)."""
from .chunked import chunk_gla_torch
from .naive import naive_recurrent_gla
from .op import fla_available, gla, gla_bidirectional

__all__ = ["gla", "gla_bidirectional", "naive_recurrent_gla", "chunk_gla_torch", "fla_available"]
