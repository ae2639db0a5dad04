"""FLNR's cell statistics, the network's input (op ``denoise.flnr.cells``), and the guide layout they read.

Per 4 x 4 cell of full-resolution pixels: the means of the 8 guide channels in the
:data:`~vision.data.fields.FLNR_LAYOUT` layout (normal, depth, ao, albedo: 3 + 1 + 1 + 3 channels), of ``log1p`` of
the demodulated noisy colour and of the emitter mask, and the spread of the log-luminance
(:func:`cell_guides`, :func:`cell_inputs`); with the history input, the cell mean of ``log(min(n, HISTORY_CAP))``
(:func:`history_input`). The registry picks the engine per call: one numba pass over the pixels
(:mod:`.cells_numba`) on CPU float32 without autograd, else the PyTorch formulas here. The log runs through its own
op (``denoise.flnr.log1p``: OpenCV in place on CPU float32 without autograd, else PyTorch).
"""
from __future__ import annotations

import torch

from vision.data.fields import FEATURE_CHANNELS, FLNR_LAYOUT
from vision.kernels.runtime import decide, register_path

from .. import buffers as B
from ..engines import NUMBA, OPENCV, TORCH, numba_takes, opencv_takes
from ..flr import area_down

CELL = 4  # the network's cells, in full-resolution pixels
# cell means of the guides, log1p(colour), emitter mask; spread of log-luminance
NET_IN = FEATURE_CHANNELS + 3 + 1 + 1
HISTORY_CAP = 16  # frames: the history input saturates here (the bundled weights were trained on 1 to 16)


def _pool(x: torch.Tensor) -> torch.Tensor:
    return area_down(x, CELL)


def guide_buffers(guides: dict, like: torch.Tensor) -> list[torch.Tensor | None]:
    """The guide buffers of :data:`FLNR_LAYOUT` (None where missing), depth as log-depth: pixels with no surface
    (depth <= 0) take the largest depth."""
    out = []
    for name in FLNR_LAYOUT:
        v = guides.get(name)
        if v is not None:
            v = v.to(like.dtype)
            v = B.log_depth(v) if name == "depth" else v
        out.append(v)
    return out


def cells(buffers: list, target: torch.Tensor, mask: torch.Tensor, whole_frame: str | None):
    """``(cells, inputs)``: the 4 x 4 cell means of the guide buffers (B, 8, h, w) and ``inputs(standardised
    cells)``, the network's input; the registry picks the engine (op ``denoise.flnr.cells``: the statistics in one
    numba pass over the pixels, or :func:`cell_guides` and :func:`cell_inputs`). ``whole_frame``: why the stage must
    run in PyTorch (autograd, another backend, hooks on the guide head; None: numba may take it)."""
    return decide("denoise.flnr.cells", target, tensors=(target, mask, *buffers),
                  bands=whole_frame).run(buffers, target, mask)


def _cells_numba(buffers, target, mask):
    from . import cells_numba  # lazy: numba (optional, about 200 modules) loads when this path first runs

    stats, rest = cells_numba.cells(buffers, target, mask, CELL)
    return stats, lambda std: torch.cat([std, rest], 1)


def _cells_torch(buffers, target, mask):
    return cell_guides(buffers, target, tuple(target.shape[-2:])), lambda std: cell_inputs(std, target, mask)


register_path("denoise.flnr.cells", NUMBA, "torch", 5, run=_cells_numba,
              supports=lambda tensors, bands: bands or numba_takes(*tensors))
register_path("denoise.flnr.cells", TORCH, "torch", 0, run=_cells_torch)


def cell_guides(buffers: list, like: torch.Tensor, size) -> torch.Tensor:
    """4 x 4 cell means of the guide buffers in the :data:`FLNR_LAYOUT` layout, (B, 8, ceil(H/4), ceil(W/4));
    missing buffers are 0."""
    b = like.shape[0]
    grid = (-(-size[0] // CELL), -(-size[1] // CELL))
    parts = [like.new_zeros(b, B.CHANNELS[n], *grid) if v is None else _pool(v).expand(b, -1, -1, -1)
             for n, v in zip(FLNR_LAYOUT, buffers)]
    return torch.cat(parts, 1)


def guide_stats(cells: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image and channel mean and standard deviation (floored at 1e-3) of the guides' cell means,
    (B, 8, 1, 1) each: how the guides are standardised (from the cells, so it costs no pass over pixels)."""
    var, mean = torch.var_mean(cells.contiguous(), (2, 3), correction=0, keepdim=True)  # ~5x faster than on
    # channels-last cells (what HWC buffers give)
    return mean, var.sqrt().clamp_min(1e-3)


def frame_stats(guides: dict, like: torch.Tensor, size) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`guide_stats` of a whole frame (pass them to :class:`~.model.FLNR` when it sees crops or tiles)."""
    return guide_stats(cell_guides(guide_buffers(guides, like), like, size))


def cell_inputs(cells_std: torch.Tensor, target_full: torch.Tensor, mask_full: torch.Tensor) -> torch.Tensor:
    """The network's input, (B, 13, h, w): per 4 x 4 cell the means of the standardised guides
    (``cells_std``), of ``log1p`` of the demodulated noisy colour and of the emitter mask, and the
    standard deviation of the log-luminance (how noisy the cell is). The registry picks the log's engine (op
    ``denoise.flnr.log1p``: OpenCV's in place on CPU float32 without autograd, else PyTorch's)."""
    lt = target_full.clamp_min(0)
    grad = lt.requires_grad
    lt = decide("denoise.flnr.log1p", lt, tensors=(lt,), grad=grad).run(lt, grad)
    lum = lt.mean(1, keepdim=True)
    sq = lum * lum if grad else lum.square_()
    rest = torch.cat([_pool(lt), _pool(mask_full.to(lt.dtype).expand_as(lum)), _pool(sq)], 1)
    lum_mean = rest[:, :3].mean(1, keepdim=True)
    spread = (rest[:, -1:] - lum_mean * lum_mean).clamp_min(0).sqrt()
    return torch.cat([cells_std.to(lt.dtype), rest[:, :-1], spread], 1)


def history_input(history: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """The network's history input, (B, 1, h, w) like ``like`` (the cell inputs): per 4 x 4 cell the mean of
    ``log(min(n, HISTORY_CAP))`` for ``history`` n, the frames averaged into each pixel (values below 1, NaN and
    None count as one frame: 0)."""
    b, _, h, w = like.shape
    if history is None:
        return like.new_zeros(b, 1, h, w)
    n = torch.nan_to_num(history.to(like.dtype), nan=1.0).clamp(1.0, float(HISTORY_CAP))
    return _pool(n.log()).expand(b, -1, -1, -1)[..., :h, :w]


def _log1p_opencv(lt, grad):
    import cv2  # lazy: here only, OpenCV is this registry path's engine, never a call site's choice

    # OpenCV's vectorised log: ~10x faster than torch's log1p on CPU, within 3e-7 of it
    planes = lt.add_(1).view(-1, *lt.shape[-2:]).numpy()
    for plane in planes:
        cv2.log(plane, dst=plane)
    return lt


def _log1p_torch(lt, grad):
    return lt.log1p() if grad else lt.log1p_()


register_path("denoise.flnr.log1p", OPENCV, "torch", 5, run=_log1p_opencv,
              supports=lambda tensors, grad: opencv_takes(tensors[0], grad) or (
                  None if tensors[0].is_contiguous() else "needs a contiguous tensor"))
register_path("denoise.flnr.log1p", TORCH, "torch", 0, run=_log1p_torch)
