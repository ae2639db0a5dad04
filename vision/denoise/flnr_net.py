"""FLNR's cell network and its inputs: :class:`FLNRNet` and the 4 x 4 cell statistics it reads.

Split from :mod:`vision.denoise.flnr` (which re-exports every name); see that module for the method.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vision.data.fields import FEATURE_CHANNELS, FLNR_LAYOUT
from vision.kernels.runtime import decide, register_path

from . import buffers as B
from .engines import OPENCV, TORCH, opencv_takes
from .flr import area_down

GUIDES = FLNR_LAYOUT  # fixed layout of the buffers: normal, depth, ao, albedo, 3 + 1 + 1 + 3 = 8 channels
FEATURES = FEATURE_CHANNELS
CELL = 4  # the network's cells, in full-resolution pixels
NET_IN = FEATURES + 3 + 1 + 1  # cell means of the guides, log1p(colour), emitter mask; spread of log-luminance
HISTORY_CAP = 16  # frames: the history input saturates here (the bundled weights were trained on 1 to 16)


def _conv(cin, cout, k=3):
    return nn.Conv2d(cin, cout, k, padding=k // 2)


class FLNRNet(nn.Module):
    r"""The cell network: ``(B, 13, h, w)`` statistics of 4 x 4 cells -> ``(B, code + R, h, w)``.

    A 1 x 1 stem at the cells' resolution, then a U-Net whose 3 x 3 convolutions start one level down:
    ``widths[1:]`` at 1/2, 1/4, ... of the cell grid (two convolutions per level, average-pool down,
    bilinear up, skip concatenation), and a 1 x 1 layer back at the cell grid that joins the stem. Output
    channels ``0..code-1`` are the code the guide head adds to its hidden layer, the last R the radius
    logits. Any h, w work (inputs are padded by replication to a multiple of ``2 ** (len(widths) - 1)``).

    Example:
        >>> net = FLNRNet()
        >>> net(torch.rand(1, 13, 45, 80)).shape
        torch.Size([1, 19, 45, 80])
    """

    def __init__(self, widths=(16, 24, 32, 48), code: int = 16, n_radii: int = 3, in_channels: int = NET_IN):
        super().__init__()
        w = [int(v) for v in widths]
        if len(w) < 2 or min(w) < 1:
            raise ValueError(f"widths must list at least two positive widths, got {widths}")
        act = nn.LeakyReLU(0.1, inplace=True)  # after every convolution: no copy (their backward needs no output)
        self.stem = nn.Sequential(nn.Conv2d(in_channels, w[0], 1), act)
        self.down = nn.ModuleList()
        for cin, cout in zip(w[:-1], w[1:]):
            self.down.append(nn.Sequential(_conv(cin, cout), act, _conv(cout, cout), act))
        self.up = nn.ModuleList(nn.Sequential(_conv(w[i + 1] + w[i], w[i]), act) for i in range(len(w) - 2, 0, -1))
        self.top = nn.Sequential(nn.Conv2d(w[1] + w[0], w[0], 1), act)
        self.out = nn.Conv2d(w[0], code + n_radii, 1)
        self.multiple = 2 ** (len(w) - 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        m = self.multiple
        ph, pw = -h % m, -w % m
        x = F.pad(x, (0, pw, 0, ph), mode="replicate") if ph or pw else x
        act = self.stem[1]
        top = act(_pointwise(self.stem[0], x))
        skips, y = [], top
        for down in self.down:
            y = down(F.avg_pool2d(y, 2))
            skips.append(y)
        for up, skip in zip(self.up, reversed(skips[:-1])):
            y = up(torch.cat([_resize(y, skip), skip], 1))
        # the 1 x 1 layer on [up(y), top] is W_y up(y) + W_t top + b = up(W_y y) + W_t top + b (bilinear weights
        # sum to 1): W_y runs at the coarser level and the full-grid concatenation is never formed
        conv, n = self.top[0], y.shape[1]
        y = _resize(_pointwise(conv, y, channels=slice(0, n), bias=False), top)
        y = self.top[1](y + _pointwise(conv, top, channels=slice(n, None)))
        return _pointwise(self.out, y)[..., :h, :w]


def _pointwise(conv: nn.Conv2d, x: torch.Tensor, channels: slice = slice(None), bias: bool = True) -> torch.Tensor:
    """A 1 x 1 ``conv`` (or its input ``channels`` only) as one matrix product over the pixels: the same
    function, but PyTorch's CPU convolution takes its slow path for 1 x 1 kernels on these shapes (3x slower).
    Channels-last in, channels-last out."""
    weight = conv.weight[:, channels, 0, 0]
    out = F.linear(x.permute(0, 2, 3, 1), weight, conv.bias if bias else None)
    return out.permute(0, 3, 1, 2)


def _resize(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return F.interpolate(x, size=like.shape[-2:], mode="bilinear", align_corners=False)


def _pool(x: torch.Tensor) -> torch.Tensor:
    return area_down(x, CELL)


def guide_buffers(guides: dict, like: torch.Tensor) -> list[torch.Tensor | None]:
    """The guide buffers of :data:`GUIDES` (None where missing), depth as log-depth: pixels with no surface
    (depth <= 0) take the largest depth."""
    out = []
    for name in GUIDES:
        v = guides.get(name)
        if v is not None:
            v = v.to(like.dtype)
            v = B.log_depth(v) if name == "depth" else v
        out.append(v)
    return out


def cell_guides(buffers: list, like: torch.Tensor, size) -> torch.Tensor:
    """4 x 4 cell means of the guide buffers in the :data:`GUIDES` layout, (B, 8, ceil(H/4), ceil(W/4));
    missing buffers are 0."""
    b = like.shape[0]
    grid = (-(-size[0] // CELL), -(-size[1] // CELL))
    parts = [like.new_zeros(b, B.CHANNELS[n], *grid) if v is None else _pool(v).expand(b, -1, -1, -1)
             for n, v in zip(GUIDES, buffers)]
    return torch.cat(parts, 1)


def guide_stats(cells: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image and channel mean and standard deviation (floored at 1e-3) of the guides' cell means,
    (B, 8, 1, 1) each: how the guides are standardised (from the cells, so it costs no pass over pixels)."""
    var, mean = torch.var_mean(cells.contiguous(), (2, 3), correction=0, keepdim=True)  # ~5x faster than on
    # channels-last cells (what HWC buffers give)
    return mean, var.sqrt().clamp_min(1e-3)


def frame_stats(guides: dict, like: torch.Tensor, size) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`guide_stats` of a whole frame (pass them to :class:`FLNR` when it sees crops or tiles)."""
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
    import cv2  # OpenCV's vectorised log: ~10x faster than torch's log1p on CPU, within 3e-7 of it

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
