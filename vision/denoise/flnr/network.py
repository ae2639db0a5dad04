"""FLNR's cell network: :class:`FLNRNet`, a small U-Net on the 4 x 4 cell statistics of :mod:`.cells`.

See :mod:`vision.denoise.flnr` for the method.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .cells import NET_IN


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
