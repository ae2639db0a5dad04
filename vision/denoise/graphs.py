"""Whole denoiser frames on CUDA as captured CUDA graphs: one graph per (inputs' shapes, strides and dtypes,
settings), replayed for every later frame of that kind.

A 1080p FLR or FLNR frame is a few dozen small kernels; launched one by one from Python their launch and
dispatch overhead is a large part of the frame. Captured once, a frame is one graph launch. Capture needs a
frame that never reads a tensor on the host (the denoiser's device path does not), no autograd, and shapes
fixed per key.

How: the first frame of a key clones its inputs into static buffers, runs the frame twice on a side stream
(Triton compiles, library workspaces), captures it into a ``torch.cuda.CUDAGraph`` and keeps it (the
:data:`MAX_GRAPHS` most recent keys). Every call copies its inputs into the static buffers, replays, and
returns a copy of the static output (the next replay overwrites it). When capture fails (an op that
synchronises, an op that cannot be captured) the key is remembered as failed and its frames run eagerly:
the result is the same, only slower.

Switch: the runtime's CUDA-graph switch (``VISION_CUDA_GRAPHS=off``, ``set_cuda_graphs(False)`` or a
``with use_cuda_graphs(False):`` block, :mod:`vision.kernels.runtime`), or :func:`set_enabled` here, turns capture
off; the default is on.
"""
from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence

import torch

from vision.kernels.runtime import cuda_graphs_enabled

MAX_GRAPHS = 8  # graphs kept (each holds its own memory pool: the frame's intermediates)
_graphs: OrderedDict = OrderedDict()
_failed: set = set()
_forced: list[bool] = []


def enabled() -> bool:
    """Whether frames on CUDA are captured: :func:`set_enabled`, else the runtime switch
    (:func:`vision.kernels.runtime.cuda_graphs_enabled`: ``use_cuda_graphs`` blocks, ``set_cuda_graphs``,
    ``VISION_CUDA_GRAPHS``; default on)."""
    if _forced:
        return _forced[-1]
    return cuda_graphs_enabled()


def set_enabled(on: bool | None) -> None:
    """Turn capture on or off for the process (None: back to ``VISION_CUDA_GRAPHS``)."""
    _forced.clear()
    if on is not None:
        _forced.append(bool(on))


def clear() -> None:
    """Drop every captured graph (their memory pools) and the record of failed captures."""
    _graphs.clear()
    _failed.clear()


def wanted(inputs: Sequence[torch.Tensor | None], needs_grad: bool) -> bool:
    """Whether a frame on these inputs may run as a graph: capture on, all on one CUDA device, no autograd."""
    present = [t for t in inputs if t is not None]
    return (enabled() and not needs_grad and _on_cuda(present)
            and len({t.device for t in present}) == 1)


def _on_cuda(tensors) -> bool:
    return bool(tensors) and all(t.is_cuda for t in tensors)


def signature(inputs: Sequence[torch.Tensor | None]) -> tuple:
    """What a graph is specific to about its inputs: presence, shape, strides, dtype, device."""
    return tuple(None if t is None else (tuple(t.shape), t.stride(), t.dtype, t.device) for t in inputs)


def run(key: tuple, fn: Callable[..., torch.Tensor], inputs: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """``fn(*inputs)`` through the graph of ``key + signature(inputs)`` (captured at the first call), or eagerly
    when that capture failed. ``fn`` must depend on nothing but its inputs and what ``key`` names."""
    key = (key, signature(inputs))
    if key in _failed:
        return fn(*inputs)
    frame = _graphs.get(key)
    if frame is None:
        try:
            frame = _Frame(fn, inputs)
        except Exception as err:  # noqa: BLE001 - any capture failure falls back to the same computation
            _failed.add(key)
            warnings.warn(f"vision.denoise: CUDA graph capture failed ({type(err).__name__}: {err}); this kind of "
                          f"frame runs eagerly", RuntimeWarning, stacklevel=3)
            return fn(*inputs)
        _graphs[key] = frame
        while len(_graphs) > MAX_GRAPHS:
            _graphs.popitem(last=False)
    _graphs.move_to_end(key)
    return frame(inputs)


class _Frame:
    """One captured frame: static inputs, the graph, its static output."""

    def __init__(self, fn, inputs):
        self.fn = fn  # keeps what the graph reads besides its inputs (the network's weights) alive
        self.inputs = [None if t is None else t.detach().clone() for t in inputs]
        self.replay, self.output = _capture(fn, self.inputs)

    def __call__(self, inputs) -> torch.Tensor:
        for static, t in zip(self.inputs, inputs):
            if static is not None:
                static.copy_(t)
        self.replay()
        return self.output.clone()


def _capture(fn, inputs):
    """(replay, output): ``fn`` captured on ``inputs`` (its static buffers) after two warm-up runs on a side
    stream, as CUDA graph capture requires."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        output = fn(*inputs)
    return graph.replay, output
