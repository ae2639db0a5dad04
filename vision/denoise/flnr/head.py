"""FLNR's guide head (op ``denoise.flnr.head``): per pixel, the learned guides and the blends' logits from the
full-resolution guide buffers and the network's code upsampled from the 4 x 4 cells.

``g = W2 leaky(up(code) + W1 f + b1) + b2`` (``up(code) + W1 f + b1`` for a linear head), with the standardisation
folded into ``W1`` and ``b1`` by the caller (:meth:`~.model.FLNR.learned_guides`). The registry picks the engine per
call: on CPU without autograd one numba pass per row (:mod:`.head_numba`) or PyTorch band by band of rows
(:func:`_head_bands`), so the hidden layer never exists at full resolution; else PyTorch on the whole frame
(:func:`_head_frame`), the one path that calls the output layer as a module, so forward hooks on it see the hidden
layer (what :func:`~.surgery.pruned` records).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from vision.kernels.runtime import decide, register_path
from vision.kernels.runtime.threads import own_threads, parallel_for

from .. import buffers as B
from ..engines import BANDS, NUMBA, TORCH, numba_takes
from .cells import CELL, FLNR_LAYOUT


def _nhwc(t: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, H, W, C) contiguous: a view for channels-last tensors (what HWC arrays become)."""
    return t.permute(0, 2, 3, 1).contiguous()


def head(out: torch.Tensor, buffers: list, weight: torch.Tensor, bias: torch.Tensor, layer, target: torch.Tensor,
         whole_frame: str | None):
    """The guide head on the network's output ``out`` (B, width + R, h, w) (the code, then the radius logits):
    ``(learned guides and logits (B, Q', H, W), radius logits (B, R, h, w))``.

    ``buffers``: the :data:`~.cells.FLNR_LAYOUT` buffers (None where missing); ``weight`` (B or 1, 8, width) and
    ``bias`` (B or 1, 1, width): the input layer with the standardisation folded in; ``layer``: the output layer (an
    ``nn.Linear``), None for a linear head; ``target`` (B, 3, H, W) the demodulated colour (its size and dtype);
    ``whole_frame``: why the head must run PyTorch on the whole frame (None: numba or bands may take it). The
    registry picks the engine (op ``denoise.flnr.head``: numba, PyTorch band by band, or PyTorch on the whole
    frame)."""
    return decide("denoise.flnr.head", out, tensors=(out, weight, bias, *buffers),
                  bands=whole_frame).run(out, buffers, weight, bias, layer, target)


def _head_numba(out, buffers, weight, bias, layer, target):
    from . import head_numba  # lazy: numba (optional, about 200 modules) loads when this path first runs

    width = weight.shape[-1]
    return head_numba.head(out[:, :width], buffers, weight, bias, layer, tuple(target.shape[-2:]), CELL), \
        out[:, width:]


def _head_banded(out, buffers, weight, bias, layer, target):
    width = weight.shape[-1]
    return _head_bands(out[:, :width], buffers, weight, bias, layer, tuple(target.shape[-2:])), out[:, width:]


def _head_frame(out, buffers, weight, bias, layer, target):
    """The guide head per pixel on (B, H W, C) rows: up(code) + W1 diag(1/std) (f_raw - mean), one product per
    buffer, then the output layer, called as a module (its forward hooks see the hidden layer)."""
    dt = weight.dtype
    b, _, h, w = target.shape
    width = weight.shape[-1]
    up = F.interpolate(out[:, :width], scale_factor=CELL, mode="bilinear", align_corners=False)
    acc = _nhwc(up[..., :h, :w]).view(b, h * w, width)
    acc += bias
    at = 0
    for name, v in zip(FLNR_LAYOUT, buffers):
        n = B.CHANNELS[name]
        if v is not None:
            rows = _nhwc(v.to(dt)).view(v.shape[0], h * w, n)
            wn = weight[:, at:at + n]
            if rows.shape[0] == 1 and wn.shape[0] == 1:
                acc.view(-1, width).addmm_(rows.view(-1, n), wn[0])
            else:
                acc.baddbmm_(rows.expand(b, -1, -1), wn.expand(b, -1, -1))
        at += n
    if layer is not None:
        acc = F.leaky_relu(acc, 0.1, inplace=not acc.requires_grad)
        acc = layer(acc.view(-1, width))  # nn.Linear on rows: addmm(bias, rows, weight.t()), as ATen's linear runs it
    g = acc.view(b, h, w, -1).permute(0, 3, 1, 2).to(target.dtype).contiguous()
    return g, out[:, width:].to(target.dtype)


register_path("denoise.flnr.head", NUMBA, "torch", 5, run=_head_numba,
              supports=lambda tensors, bands: bands or numba_takes(*tensors))
register_path("denoise.flnr.head", BANDS, "torch", 3, run=_head_banded, supports=lambda tensors, bands: bands)
register_path("denoise.flnr.head", TORCH, "torch", 0, run=_head_frame)


HEAD_BAND_PIXELS = 1 << 16  # pixels per band of the banded guide head (its hidden layer: 4 MB of float32; smaller bands
# cost more in per-op overhead than they win in cache hits: 1 << 15 was 1.2x, 1 << 14 2x slower at 1280 x 720)


def _head_bands(code: torch.Tensor, buffers: list, weight: torch.Tensor, bias: torch.Tensor, layer, size):
    """The guide head of :meth:`~.model.FLNR.learned_guides` without autograd, band by band of cell rows (path
    ``torch+bands`` of ``denoise.flnr.head``; ``layer`` the output layer, None for a linear head).

    The same function as the full-frame path (``g = W2 leaky(up(code) + W f + b) + b2``, or
    ``up(code) + W f + b`` for a linear head), in (channels, pixels) planes: the code is upsampled along x
    once at the cells' height, then every band upsamples its rows along y, adds the buffers' product and
    runs the output layer while its hidden layer is in cache; bands go to the workers of
    :func:`vision.kernels.runtime.threads.own_threads`. Both upsampling passes are lerps of
    contiguous rows (the bilinear weights of ``align_corners=False``; replicated ends give its clamping),
    and the hidden layer never exists at full resolution. Planes, not (pixels, channels) rows: every band
    gathers its rows of the buffers into one (channels x pixels) block and adds one (width x channels) @
    (channels x pixels) product (one pass over the hidden layer instead of one per buffer, and BLAS runs
    these about 1.2x faster than the same products with the pixels as rows).
    """
    # lazy: the local linear package (a dozen modules) loads when the first frame runs, not at import
    from vision.kernels.local_linear.torch_path import cells_band, cells_horizontal

    h, w = size
    b, width, gh, gw = code.shape
    q = layer.out_features if layer is not None else width
    rows = max(1, HEAD_BAND_PIXELS // (CELL * max(w, 1)))
    offsets = [sum(B.CHANNELS[n] for n in FLNR_LAYOUT[:i]) for i in range(len(FLNR_LAYOUT))]
    present = [v for v in buffers if v is not None]
    cols = [at + k for n, v, at in zip(FLNR_LAYOUT, buffers, offsets) if v is not None for k in range(B.CHANNELS[n])]
    wT = weight.transpose(1, 2)[:, :, cols].contiguous()  # (B or 1, width, channels present)
    g = code.new_empty(b, q, h, w)
    with own_threads(code.device):
        # (B, width, gh + 2, gw CELL): the code plus the head's bias, upsampled along x, one replicated row each end
        # (the apply's first pass over its coefficient grid)
        c = code + bias.reshape(-1, width, 1, 1)
        hx = cells_horizontal(c.view(b, width, 1, gh, gw), CELL)[..., :w]

        def one(i0):
            i1 = min(gh, i0 + rows)
            y0, y1 = i0 * CELL, min(h, i1 * CELL)
            n = (y1 - y0) * w
            # the apply's second pass: the band's rows upsampled along y, (B, width, 1, y1 - y0, w) -> (B, width, n)
            hid = cells_band(hx, i0, i1, CELL, (b, width, 1, h, w)).view(b, width, n)
            feats = hx.new_empty(len(cols), y1 - y0, w)
            for j in range(b):
                hj, wj, out = hid[j], wT[min(j, wT.shape[0] - 1)], g[j, :, y0:y1].view(q, n)
                at = 0
                for v in present:  # the band's buffers as (channels, pixels) planes, then one product
                    c = v.shape[1]
                    feats[at:at + c].copy_(v[min(j, v.shape[0] - 1), :, y0:y1])
                    at += c
                if cols:
                    hj.addmm_(wj, feats.view(len(cols), n))
                if layer is None:
                    out.copy_(hj)
                else:
                    torch.addmm(layer.bias[:, None], layer.weight, F.leaky_relu_(hj, 0.1), out=out)

        parallel_for(one, range(0, gh, rows), code.device)
    return g
