"""Fast Local Neural Regression (FLNR): a small network writes the guides of the local regression.

Salmi, Csefalvay and Imber, "Fast Local Neural Regression for Low-Cost, Path Traced Lambertian Global
Illumination", 2024. FLR (:mod:`vision.denoise.flr`) explains the demodulated radiance in every window
as an affine function of the guide buffers. Two things limit it: where the light changes without a
buffer changing (shadows, contact shadows, falloff) no guide can follow it, and with 8 guides every
window fits 9 coefficients per channel from noisy samples, so the noise left grows with the number of
guides. FLNR keeps the regression and lets a network write *few, better* guides:

1. the signal model is FLR's: emission subtracted, albedo divided out (see :func:`.buffers.demodulate`);
2. the buffers are laid out as :data:`GUIDES` (normal, log-depth, AO, albedo: 8 channels; a missing
   buffer is a zero channel) and standardised per frame;
3. :class:`FLNRNet` sees cell statistics (4 x 4 pixel means of those guides, of ``log1p`` of the noisy
   demodulated colour and of the emitter mask, and the cell's spread of log-luminance), runs a small
   U-Net at 1/8 to 1/32 resolution and returns a latent code and radius logits per 4 x 4 cell;
4. a per-pixel MLP (``guide head``) maps the full-resolution guides and the bilinearly upsampled latent
   code to ``Q`` (default 4) *learned guides*: sharp wherever the buffers have edges, and free to carry
   what the network infers about the light (a shadow, a falloff) between them;
5. the regression fits the noisy signal on those Q guides (:func:`vision.kernels.local_linear_fit` on
   4 x 4 cells, a learned ridge weight per guide) at radii 4, 8 and 16 at once, blends the fits per cell
   with the network's softmax weights (small windows where the guides explain the light, large ones
   where noise dominates; a blend of local linear models is a local linear model), applies them at full
   resolution (:func:`vision.kernels.local_linear_apply`), clamps, remodulates and adds the emission;
6. with ``antialias`` (the bundled weights have it) the light is blended towards its 3 x 3 mean where the
   albedo has an edge, with a weight the guide head writes (:func:`antialias`): the buffers are one ray
   through each pixel centre, the reference a mean over the pixel, and at an edge no regression on the
   centre's buffers can mix the two surfaces' light.

So the network never outputs radiance: every output pixel is still a local affine function of guides
(with ``antialias``, a blend of its own and its neighbours' ones), fitted to this frame's samples, which
is what keeps the result faithful where the network is unsure.
With Q = 4 guides each window fits 5 coefficients instead of FLR's 9, and the guides are better, so
the fit is both less noisy and less biased. The chain is differentiable end to end (the regression has
closed-form backwards) and is trained on the denoised result (``vision train-denoiser``).

Cost: the 3 x 3 convolutions run at 1/64 of the pixels and below; per pixel there are the guide head
(8 buffer channels -> 16 (8 in the bundled weights), plus the upsampled code, -> 4), one pass forming the
cell moments of the Q guides and the signal (shared by the three radii; from 2 x 2 means with
``fit_down=2``, as bundled) and one apply. The fit's solves run on the cell grid. On CPU without autograd
(inference) the demodulation, the guide head, the cell moments, solves and apply and the last steps run row
by row, so their intermediates (the hidden layer, the centred samples) stay in cache: numba loops in float32
(:mod:`vision.denoise.flnr_cpu`, :mod:`vision.kernels.local_linear.cpu_path`), bands of rows on
``torch.get_num_threads()`` workers otherwise.

Weights: ``weights=None`` loads the bundled ``assets/weights/flnr.safetensors``; a path, a state dict
(as :meth:`FLNR.state_dict` returns) or an :class:`FLNR` instance also work. The file's metadata holds the
network configuration (``vision.flnr.config``, JSON), and ``vision train-denoiser`` adds the training
command, steps and the validation PSNR.
"""
from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vision.kernels.runtime import jit

from . import buffers as B
from .flr import _area_down, _fit_radius, _full_size, _sample_down, _upsample_factor, check_phase, run_tiles

GUIDES = ("normal", "depth", "ao", "albedo")  # fixed layout of the buffers: 3 + 1 + 1 + 3 = 8 channels
FEATURES = 8
CELL = 4  # the network's cells, in full-resolution pixels
NET_IN = FEATURES + 3 + 1 + 1  # cell means of the guides, log1p(colour), emitter mask; spread of log-luminance
DEFAULT_CONFIG = {"widths": [16, 24, 32, 48], "hidden": 16, "guides": 4, "radii": [4, 8, 16], "scale": 4,
                  "fit_down": 1, "eps": 1e-2, "antialias": False}
FILL_RADIUS = 8  # emitter pixels take the mean signal of the emitter-free pixels within this radius
BUNDLED = ("weights", "flnr.safetensors")
# trained on 1/2- and 1/4-resolution colour (one sample of every 2 x 2 / 4 x 4 block, phase known)
BUNDLED_UPSAMPLE = {2: ("weights", "flnr_up2.safetensors"), 4: ("weights", "flnr_up4.safetensors")}
CONFIG_KEY = "vision.flnr.config"
# FLNR's antialias at the start of training: logit = BLEND_BIAS + EDGE_GAIN c(albedo), the weight 0.5 sigmoid(logit)
EDGE_GAIN, BLEND_BIAS = 200.0, -5.0


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


def _banded(target: torch.Tensor, model: nn.Module) -> bool:
    """Whether the guide head may take :func:`_head_bands` (CPU, and nothing to differentiate)."""
    if target.device.type != "cpu" or getattr(model, "_record", None) is not None:
        return False
    return not torch.is_grad_enabled() or not (target.requires_grad or any(p.requires_grad for p in model.parameters()))


HEAD_BAND_PIXELS = 1 << 16  # pixels per band of the banded guide head (its hidden layer: 4 MB of float32; smaller bands
# cost more in per-op overhead than they win in cache hits: 1 << 15 was 1.2x, 1 << 14 2x slower at 1280 x 720)


def _head_bands(model, code: torch.Tensor, buffers: list, weight: torch.Tensor, bias: torch.Tensor, size):
    """The guide head of :meth:`FLNR.learned_guides` without autograd, band by band of cell rows.

    The same function as the full-frame path (``g = W2 leaky(up(code) + W f + b) + b2``, or
    ``up(code) + W f + b`` for a linear head), in (channels, pixels) planes: the code is upsampled along x
    once at the cells' height, then every band upsamples its rows along y, adds the buffers' product and
    runs the output layer while its hidden layer is in cache; bands go to the workers of
    :func:`vision.kernels.local_linear.torch_path.own_threads`. Both upsampling passes are lerps of
    contiguous rows (the bilinear weights of ``align_corners=False``; replicated ends give its clamping),
    and the hidden layer never exists at full resolution. Planes, not (pixels, channels) rows: every band
    gathers its rows of the buffers into one (channels x pixels) block and adds one (width x channels) @
    (channels x pixels) product (one pass over the hidden layer instead of one per buffer, and BLAS runs
    these about 1.2x faster than the same products with the pixels as rows).
    """
    from vision.kernels.local_linear import torch_path as tp

    if jit.enabled(code, weight, bias, *(v for v in buffers if v is not None)):
        from . import flnr_cpu

        return flnr_cpu.head(model, code, buffers, weight, bias, size, CELL)
    h, w = size
    b, width, gh, gw = code.shape
    q = model.head_out.out_features if model.head_out is not None else width
    rows = max(1, HEAD_BAND_PIXELS // (CELL * max(w, 1)))
    offsets = [sum(B.CHANNELS[n] for n in GUIDES[:i]) for i in range(len(GUIDES))]
    present = [v for v in buffers if v is not None]
    cols = [at + k for n, v, at in zip(GUIDES, buffers, offsets) if v is not None for k in range(B.CHANNELS[n])]
    wT = weight.transpose(1, 2)[:, :, cols].contiguous()  # (B or 1, width, channels present)
    g = code.new_empty(b, q, h, w)
    with tp.own_threads(code.device):
        # (B, width, gh + 2, gw CELL): the code plus the head's bias, upsampled along x, one replicated row each end
        # (the apply's first pass over its coefficient grid)
        c = code + bias.reshape(-1, width, 1, 1)
        hx = tp._cells_horizontal(c.view(b, width, 1, gh, gw), CELL)[..., :w]

        def one(i0):
            i1 = min(gh, i0 + rows)
            y0, y1 = i0 * CELL, min(h, i1 * CELL)
            n = (y1 - y0) * w
            # the apply's second pass: the band's rows upsampled along y, (B, width, 1, y1 - y0, w) -> (B, width, n)
            hid = tp._cells_band(hx, i0, i1, CELL, (b, width, 1, h, w)).view(b, width, n)
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
                if model.head_out is None:
                    out.copy_(hj)
                else:
                    torch.addmm(model.head_out.bias[:, None], model.head_out.weight, F.leaky_relu_(hj, 0.1), out=out)

        tp.parallel_for(one, range(0, gh, rows), code.device)
    return g


PRUNE_STRIDE = 7  # :meth:`FLNR.pruned` samples every 7th pixel's hidden activations
FINISH_BAND_PIXELS = 1 << 17  # output pixels per band of :func:`_finish_bands`


def _finish_bands(model, fitted, factor, add, blend, albedo, out):
    """FLNR's last steps without autograd, band by band of rows: ``out = antialias(max(fitted, 0) factor, blend
    + edge_gain local_contrast(albedo), blend_max) + add``, written into ``out`` (any layout).

    :meth:`FLNR._blended_light` band by band (the 3 x 3 means of every band see one row of its neighbours, so
    they equal the frame's): each band's light, contrast, weights and
    means stay in cache between these ten or so per-pixel steps instead of each one streaming full frames
    through memory (on 2 cores these stages were memory bound); bands go to the workers of
    :func:`vision.kernels.local_linear.torch_path.own_threads`."""
    from vision.kernels.local_linear import torch_path as tp

    if jit.enabled(fitted, factor, add, blend, out, *(() if albedo is None else (albedo,))) and fitted.shape[1] == 3:
        from . import flnr_cpu

        return flnr_cpu.finish_frame(model, fitted, factor, add, blend, albedo, out)
    h, w = fitted.shape[-2:]
    rows = max(1, FINISH_BAND_PIXELS // max(w, 1))

    def one(y0):
        y1 = min(h, y0 + rows)
        e0, e1 = max(0, y0 - 1), min(h, y1 + 1)  # one row of halo for the 3 x 3 means
        band = model._blended_light(fitted[:, :, e0:e1], factor[:, :, e0:e1], blend[:, :, e0:e1],
                                    None if albedo is None else albedo[:, :, e0:e1])
        torch.add(band[:, :, y0 - e0:y1 - e0], add[:, :, y0:y1], out=out[:, :, y0:y1])

    with tp.own_threads(fitted.device):
        tp.parallel_for(one, range(0, h, rows), fitted.device)
    return out


def antialias(x: torch.Tensor, logit: torch.Tensor, top=0.0) -> torch.Tensor:
    """``x + sigmoid(top) sigmoid(logit) (mean3(x) - x)``: (B, C, H, W) blended per pixel towards its 3 x 3 mean
    (the mean of the pixels inside the frame at its borders) with the weight of the (B, 1, H, W) ``logit``,
    at most ``sigmoid(top)`` (a scalar; 0 gives at most 0.5).

    FLNR's last step when it has ``antialias``: a 1-spp frame's colour sample falls anywhere in its pixel,
    and the reference averages the whole pixel, but the guide buffers are one ray through the centre, so
    at an edge they describe one surface (one albedo) only and the regression and the remodulation paint
    the pixel with that surface's light. Mixing in the neighbours at edges restores the partial coverage
    (on the bundled frames, FLNR's light blended with a fixed weight of 0.5 wherever the albedo differs
    from a neighbour's by more than 0.05 gains 0.38 dB; the learned weight does the same job)."""
    top = torch.as_tensor(top, dtype=x.dtype, device=x.device)
    w = torch.sigmoid(logit.to(x.dtype)) * torch.sigmoid(top)
    return torch.lerp(x, _mean3(x), w)


def local_contrast(x: torch.Tensor) -> torch.Tensor:
    """``sum over channels |x - mean3(x)|``, (B, C, H, W) -> (B, 1, H, W): how far each pixel is from the mean
    of its 3 x 3 neighbourhood (inside the frame); zero on flat and linear regions, large at edges."""
    if not _cv2_planes(x):
        return (x - _mean3(x)).abs().sum(1, keepdim=True)
    import cv2  # per plane in OpenCV: the mean, |difference| and channel sum without torch's per-op passes

    out = x.new_empty(x.shape[0], 1, *x.shape[2:])
    diff = _mean3(x).detach().numpy()
    for i in range(x.shape[0]):
        planes, o = x[i].detach().numpy(), out[i, 0].numpy()
        for k in range(x.shape[1]):
            cv2.absdiff(planes[k], diff[i, k], dst=diff[i, k])
        if x.shape[1] == 1:
            o[...] = diff[i, 0]
            continue
        cv2.add(diff[i, 0], diff[i, 1], dst=o)
        for k in range(2, x.shape[1]):
            cv2.add(o, diff[i, k], dst=o)
    return out


def _cv2_planes(x: torch.Tensor) -> bool:
    """Whether OpenCV may take ``x`` plane by plane: CPU float32, nothing to differentiate, rows contiguous."""
    return x.device.type == "cpu" and x.dtype == torch.float32 and not x.requires_grad and x.stride(-1) == 1


def _mean3(x: torch.Tensor) -> torch.Tensor:
    """The 3 x 3 mean of the pixels inside the frame (``box_filter(x, 1)``), (B, C, H, W); on CPU planes the box
    path's OpenCV sums directly (no dispatch: FLNR calls this on many small bands)."""
    from vision.kernels import box_filter
    from vision.kernels.box.torch_path import box_mean

    return box_mean(x, 1, "valid") if _cv2_planes(x) else box_filter(x, 1)


def _pointwise(conv: nn.Conv2d, x: torch.Tensor, channels: slice = slice(None), bias: bool = True) -> torch.Tensor:
    """A 1 x 1 ``conv`` (or its input ``channels`` only) as one matrix product over the pixels: the same
    function, but PyTorch's CPU convolution takes its slow path for 1 x 1 kernels on these shapes (3x slower).
    Channels-last in, channels-last out."""
    weight = conv.weight[:, channels, 0, 0]
    out = F.linear(x.permute(0, 2, 3, 1), weight, conv.bias if bias else None)
    return out.permute(0, 3, 1, 2)


def _resize(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return F.interpolate(x, size=like.shape[-2:], mode="bilinear", align_corners=False)


def _layout(t: torch.Tensor) -> torch.memory_format:
    """channels_last for (B, C > 1, H, W) tensors laid out as HWC (what HWC arrays become), else contiguous."""
    interleaved = t.shape[1] > 1 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()
    return torch.channels_last if interleaved else torch.contiguous_format


def _nhwc(t: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, H, W, C) contiguous: a view for channels-last tensors (what HWC arrays become)."""
    return t.permute(0, 2, 3, 1).contiguous()


def _pool(x: torch.Tensor) -> torch.Tensor:
    return _area_down(x, CELL)


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
    standard deviation of the log-luminance (how noisy the cell is)."""
    lt = target_full.clamp_min(0)
    grad = lt.requires_grad
    if not grad and lt.device.type == "cpu" and lt.dtype == torch.float32 and lt.is_contiguous():
        import cv2  # OpenCV's vectorised log: ~10x faster than torch's log1p on CPU, within 3e-7 of it

        planes = lt.add_(1).view(-1, *lt.shape[-2:]).numpy()
        for plane in planes:
            cv2.log(plane, dst=plane)
    else:
        lt = lt.log1p() if grad else lt.log1p_()
    lum = lt.mean(1, keepdim=True)
    sq = lum * lum if grad else lum.square_()
    rest = torch.cat([_pool(lt), _pool(mask_full.to(lt.dtype).expand_as(lum)), _pool(sq)], 1)
    lum_mean = rest[:, :3].mean(1, keepdim=True)
    spread = (rest[:, -1:] - lum_mean * lum_mean).clamp_min(0).sqrt()
    return torch.cat([cells_std.to(lt.dtype), rest[:, :-1], spread], 1)


class FLNR(nn.Module):
    """FLNR: the cell network, the guide head, a learned ridge weight per learned guide, and the regression.

    Args:
        widths: :class:`FLNRNet` widths (the first at the 4 x 4 cell grid, then one per 2x coarser level).
        hidden: width of the guide head's hidden layer; 0 = a linear head.
        guides: Q, the number of learned guides (at most 8, :func:`vision.kernels.local_linear_fit`'s limit).
        radii: radii (full-resolution pixels) whose fits are blended per cell.
        scale: the regression's cell size in full-resolution pixels (the paper fits at low resolution).
        fit_down: the regression's moments are taken from the learned guides and the signal averaged over
            ``fit_down x fit_down`` pixels (1 = every pixel; must divide ``scale``); the fit is still
            applied to the full-resolution guides.
        eps: initial ridge weight of every learned guide.
        antialias: blend the light (the result without the emission) per pixel towards its 3 x 3 mean
            (:func:`antialias`) with the weight ``sigmoid(m) sigmoid(l + v c)``: ``l`` one more output of the
            guide head, ``c`` the albedo's :func:`local_contrast` (the head is per pixel; the contrast is what
            tells it where an edge is), ``v`` and ``m`` learned scalars. The buffers are one ray through each
            pixel centre, so at an edge they name one surface (one albedo) where the pixel, and the
            reference, average two; the regression and the remodulation cannot mix them, the blend can.

    The guide head, per pixel, with f the 8 guides standardised per frame and ``up`` the bilinear
    upsampling from the 4 x 4 cells: ``g = W2 leaky(W1 f + up(code)) + b2`` (``hidden > 0``) or
    ``g = W f + up(code)`` (``hidden = 0``). The standardisation is folded into W1 (or W), so the
    full-resolution work is a few matrix products on the buffers as they are.

    ``forward(color, guides)`` takes (B, 3, h, w) noisy radiance and a dict of full-resolution (B, *, H, W)
    guide buffers (``albedo, normal, depth, ao, emission``; any may be None) and returns the denoised
    (B, 3, H, W) radiance. Colour smaller than the guides by an integer factor is joint denoising and
    upsampling, as in FLR (the network then sees the colour nearest-upsampled; the fit runs at the
    colour's resolution, on the learned guides averaged over each colour pixel's block or, with ``phase``
    (dy, dx), read at the samples' own pixels, and is applied to the full-resolution learned guides).

    Example:
        >>> model = FLNR()   # untrained; load_flnr() gives the bundled, trained one
        >>> out = model(color, {"albedo": albedo, "normal": normal, "depth": depth, "ao": ao})
    """

    def __init__(self, widths=(16, 24, 32, 48), hidden: int = 16, guides: int = 4, radii=(4, 8, 16),
                 scale: int = 4, fit_down: int = 1, eps: float = 1e-2, antialias: bool = False):
        super().__init__()
        radii = [int(r) for r in radii]
        if not radii or min(radii) < 1:
            raise ValueError(f"radii must be one or more positive radii, got {radii}")
        if not 1 <= int(guides) <= 8:
            raise ValueError(f"guides must be 1 to 8 (the regression's feature limit), got {guides}")
        if int(scale) < 1 or int(fit_down) < 1 or int(scale) % int(fit_down) or not (eps > 0) or int(hidden) < 0:
            raise ValueError(f"need scale >= 1, fit_down >= 1 dividing scale, hidden >= 0 and eps > 0, got "
                             f"scale={scale}, fit_down={fit_down}, hidden={hidden}, eps={eps}")
        self.config = {"widths": [int(w) for w in widths], "hidden": int(hidden), "guides": int(guides),
                       "radii": radii, "scale": int(scale), "fit_down": int(fit_down), "eps": float(eps),
                       "antialias": bool(antialias)}
        outputs = int(guides) + bool(antialias)  # the learned guides, then the blend's logit
        width = int(hidden) or outputs  # what the network's code adds to, per pixel
        self.net = FLNRNet(widths, width, len(radii))
        self.head_in = nn.Linear(FEATURES, width)
        self.head_out = nn.Linear(int(hidden), outputs) if hidden else None
        self.log_eps = nn.Parameter(torch.full((int(guides),), math.log(eps)))
        self._record = None  # a list while :meth:`pruned` collects the guide head's hidden activations
        if antialias:
            self.edge_gain = nn.Parameter(torch.tensor(EDGE_GAIN))
            self.blend_max = nn.Parameter(torch.zeros(()))
            with torch.no_grad():  # start with no blend except where the albedo has an edge
                last = self.head_out if self.head_out is not None else self.head_in
                last.bias[-1] = BLEND_BIAS

    @property
    def radius(self) -> int:
        """The largest radius of the blend (what tiling must cover)."""
        return max(self.config["radii"])

    @property
    def scale(self) -> int:
        return self.config["scale"]

    def learned_guides(self, buffers: list, target_full: torch.Tensor, mask_full: torch.Tensor, stats=None):
        """The Q learned guides (B, Q, H, W), with the :func:`antialias` logit as channel Q+1 when the model has
        one, and the radius logits on the 4 x 4 cell grid (B, R, h, w)."""
        dt = self.log_eps.dtype
        b, _, h, w = target_full.shape
        cells = cell_guides(buffers, target_full, (h, w))
        mean, std = guide_stats(cells) if stats is None else stats
        x = cell_inputs((cells - mean) / std, target_full, mask_full)
        out = self.net(x.to(dt).contiguous(memory_format=torch.channels_last))
        width = self.head_in.out_features
        weight = self.head_in.weight.t()[None] / std.reshape(-1, FEATURES, 1).to(dt)  # (B or 1, 8, width)
        bias = self.head_in.bias - (mean.reshape(-1, 1, FEATURES).to(dt) @ weight)  # (B or 1, 1, width)
        if _banded(target_full, self):
            return _head_bands(self, out[:, :width], buffers, weight, bias, (h, w)), out[:, width:]
        # per pixel, on (B, H W, C) rows: up(code) + W1 diag(1/std) (f_raw - mean), one product per buffer
        up = F.interpolate(out[:, :width], scale_factor=CELL, mode="bilinear", align_corners=False)
        acc = _nhwc(up[..., :h, :w]).view(b, h * w, width)
        acc += bias
        at = 0
        for name, v in zip(GUIDES, buffers):
            n = B.CHANNELS[name]
            if v is not None:
                rows = _nhwc(v.to(dt)).view(v.shape[0], h * w, n)
                wn = weight[:, at:at + n]
                if rows.shape[0] == 1 and wn.shape[0] == 1:
                    acc.view(-1, width).addmm_(rows.view(-1, n), wn[0])
                else:
                    acc.baddbmm_(rows.expand(b, -1, -1), wn.expand(b, -1, -1))
            at += n
        if self.head_out is not None:
            acc = F.leaky_relu(acc, 0.1, inplace=not acc.requires_grad)
            if self._record is not None:  # :meth:`pruned` collects every 7th pixel's hidden activations
                self._record.append(acc.detach().reshape(-1, width)[::PRUNE_STRIDE].clone())
            acc = torch.addmm(self.head_out.bias, acc.view(-1, width), self.head_out.weight.t())
        g = acc.view(b, h, w, -1).permute(0, 3, 1, 2).to(target_full.dtype).contiguous()
        return g, out[:, width:].to(target_full.dtype)

    def forward(self, color: torch.Tensor, guides: dict, radius: int | None = None, eps=None,
                scale: int | None = None, stats=None, phase=None) -> torch.Tensor:
        from vision.kernels import local_linear_apply, local_linear_fit

        scale = self.scale if scale is None else int(scale)
        h, w = color.shape[-2:]
        hf, wf = _full_size(color, guides)
        u = _upsample_factor((h, w), (hf, wf))
        phase = check_phase(phase, u)
        # the signal in planar (B, C, H, W) layout: HWC arrays come in as channels-last views, and ops that
        # broadcast a (B, 1, H, W) mask or weight over their 3 interleaved channels run ~10x slower than on
        # planes (on CPU float32 one numba pass reads them as they lie and writes the planes it needs); the
        # result goes back to the colour's layout at the end
        result_layout = _layout(color)
        albedo, emission = guides.get("albedo"), guides.get("emission")
        radii = self.config["radii"] if radius is None else [int(radius)]
        if u == 1 and jit.enabled(color, *(v for v in (albedo, emission) if v is not None)):
            from . import flnr_cpu  # one pass over the buffers as they lie: demodulation, mask, planes

            target, factor, add, mask, albedo, emission = flnr_cpu.prepare(color, albedo, emission,
                                                                           _fit_radius(FILL_RADIUS, u), B.ALBEDO_FLOOR)
        else:
            color = color.contiguous()
            albedo, emission = (None if v is None else v.contiguous() for v in (albedo, emission))
            emission_lo = _sample_down(emission, u, phase)
            mask = B.emitter_mask(emission_lo, color)
            target, factor, add = B.demodulate(color, _sample_down(albedo, u, phase), emission_lo,
                                               _fit_radius(FILL_RADIUS, u), mask=mask)
            mask = torch.zeros_like(color[:, :1]) if mask is None else mask.expand(color.shape[0], -1, -1, -1)
        guides = dict(guides, albedo=albedo, emission=emission)
        if u > 1:
            t_full = F.interpolate(target, scale_factor=u, mode="nearest")[..., :hf, :wf]
            m_full = F.interpolate(mask, scale_factor=u, mode="nearest")[..., :hf, :wf]
        else:
            t_full, m_full = target, mask
        g, logits = self.learned_guides(guide_buffers(guides, color), t_full, m_full, stats)
        q = self.config["guides"]
        g, blend = (g[:, :q].contiguous(), g[:, q:]) if self.config["antialias"] else (g, None)
        eps_t = self.log_eps.exp().to(color.dtype) if eps is None else eps
        # the fit's samples: colour resolution, then averaged over fit_down x fit_down when the cells allow it
        fd = self.config["fit_down"] if scale % self.config["fit_down"] == 0 else 1
        g_lo = (_area_down(g, u * fd) if phase is None else _area_down(_sample_down(g, u, phase), fd)).contiguous()
        t_lo = _area_down(target, fd).contiguous()
        r_lo = [_fit_radius(r, u * fd) for r in radii]
        s_lo = scale // fd
        if len(r_lo) == 1:
            coeffs = local_linear_fit(g_lo, t_lo, r_lo[0], eps_t, scale=s_lo)
        else:
            grid = (-(-t_lo.shape[-2] // s_lo), -(-t_lo.shape[-1] // s_lo))
            if tuple(logits.shape[-2:]) != grid:
                logits = F.interpolate(logits, size=grid, mode="bilinear", align_corners=False)
            coeffs = local_linear_fit(g_lo, t_lo, r_lo, eps_t, scale=s_lo, weights=torch.softmax(logits, 1))
        cell = scale * u
        if -(-hf // cell) == coeffs.shape[-2] and -(-wf // cell) == coeffs.shape[-1]:
            fitted = local_linear_apply(g, coeffs, scale=cell)
        else:
            fitted = local_linear_apply(g, coeffs)
        if u > 1:
            _, factor, add = B.demodulate(torch.zeros(color.shape[0], color.shape[1], hf, wf, dtype=color.dtype,
                                                      device=color.device), albedo, emission, 0)
        # the result in the colour's layout (HWC arrays come in as channels-last views: no copy back to HWC)
        out = None if fitted.requires_grad else torch.empty_like(fitted, memory_format=result_layout)
        if blend is not None and out is not None and out.device.type == "cpu":
            return _finish_bands(self, fitted, factor, add, blend, albedo, out)  # clamps band by band
        if blend is None:
            fitted = fitted.clamp_min_(0) if not fitted.requires_grad else fitted.clamp_min(0)
            return torch.addcmul(add, fitted, factor, out=out)
        # the emission buffer is a pixel mean already: only the light is blended
        return torch.add(self._blended_light(fitted, factor, blend, albedo), add, out=out)

    def _blended_light(self, fitted, factor, blend, albedo):
        """The light ``max(fitted, 0) factor`` after :func:`antialias` with the weight ``sigmoid(blend_max)
        sigmoid(blend + edge_gain local_contrast(albedo))``, on the whole frame or a band of rows."""
        light = fitted.clamp_min(0)
        light = light * factor if light.requires_grad else light.mul_(factor)
        logit = blend.to(light.dtype)
        if albedo is not None:
            logit = logit + self.edge_gain.to(light.dtype) * local_contrast(albedo.to(light.dtype))
        return antialias(light, logit, self.blend_max)

    def pruned(self, hidden: int, frames, fit_down: int | None = None) -> "FLNR":
        """A copy with the guide head cut to its ``hidden`` most useful units, to fine-tune into a faster model
        (``vision train-denoiser --init OLD --hidden 8``; the guide head is the largest per-pixel cost).

        ``frames``: (colour, guides dict) pairs (e.g. training frames) on which the head's hidden activations
        are sampled (every 7th pixel). A unit's use is the spread (standard deviation) of its activation times
        the norm of its column in the output layer; the units kept keep their weights and the network's code
        channels feeding them, and the mean output of the units dropped is folded into the output bias (their
        best constant stand-in). ``fit_down``: also change the regression's ``fit_down`` (default: keep).

        Example:
            >>> small = load_flnr().pruned(8, [(f["color"], f) for f in frames])   # then fine-tune it
        """
        width = self.config["hidden"]
        if self.head_out is None or not 0 < int(hidden) <= width:
            raise ValueError(f"pruned needs a guide head with a hidden layer and 0 < hidden <= {width}, got {hidden}")
        self._record = []
        try:
            with torch.no_grad():
                for color, guides in frames:
                    self(color, guides)
            acts = torch.cat(self._record) if self._record else None
        finally:
            self._record = None
        if acts is None:
            raise ValueError("pruned needs at least one frame to measure the guide head on")
        w2 = self.head_out.weight.detach()
        use = acts.std(0) * w2.norm(dim=0)
        keep = torch.argsort(use, descending=True)[: int(hidden)].sort().values
        kept = set(keep.tolist())
        drop = torch.tensor([j for j in range(width) if j not in kept], dtype=torch.long)
        cfg = dict(self.config, hidden=int(hidden))
        cfg["fit_down"] = cfg["fit_down"] if fit_down is None else int(fit_down)
        model = FLNR(**cfg).to(self.log_eps)
        state = model.state_dict()
        code = torch.cat([keep, torch.arange(width, self.net.out.out_channels)])  # the code, then the radius logits
        for k, v in self.state_dict().items():
            v = v.detach()
            if k in ("net.out.weight", "net.out.bias"):
                state[k] = v[code].clone()
            elif k.startswith("head_in."):
                state[k] = v[keep].clone()
            elif k == "head_out.weight":
                state[k] = v[:, keep].clone()
            elif k == "head_out.bias":
                state[k] = v + w2[:, drop] @ acts.mean(0)[drop]
            else:
                state[k] = v.clone()
        model.load_state_dict(state)
        return model.train(self.training)

    def with_antialias(self) -> "FLNR":
        """A copy of this model with the antialias blend added (a model that has it comes back as a copy): every
        weight kept, the guide head's new logit row zero with bias :data:`BLEND_BIAS`, the gains
        :data:`EDGE_GAIN`, so it starts as this model plus a blend at albedo edges, for fine-tuning
        (``vision train-denoiser --init OLD --antialias``). Needs a guide head with a hidden layer (the logit is
        one more row of its last layer; a linear head's rows are the network's code)."""
        if self.head_out is None:
            raise ValueError("with_antialias needs a guide head with a hidden layer (hidden > 0); train a linear-head "
                             "model with antialias from the start instead")
        model = FLNR(**dict(self.config, antialias=True)).to(self.log_eps)
        state = model.state_dict()
        for k, v in self.state_dict().items():
            if v.shape == state[k].shape:
                state[k] = v.clone()
            else:  # the last layer of the guide head: one more output, the blend's logit (zero weights)
                state[k][: v.shape[0]] = v
                if k.endswith("weight"):
                    state[k][v.shape[0]:] = 0
        model.load_state_dict(state)
        return model.train(self.training)

    # ------------------------------------------------------------------ weights

    def metadata(self, **extra) -> dict[str, str]:
        meta = {CONFIG_KEY: json.dumps(self.config)}
        meta.update({str(k): (v if isinstance(v, str) else json.dumps(v)) for k, v in extra.items()})
        return meta

    def save(self, path, **metadata) -> Path:
        """Write the weights as safetensors, with the configuration (and ``metadata``) in the header."""
        from safetensors.torch import save_file

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(path), metadata=self.metadata(**metadata))
        return path

    @classmethod
    def from_state_dict(cls, state: dict, config: dict | None = None) -> "FLNR":
        cfg = dict(DEFAULT_CONFIG, **(config or {}))
        unknown = set(cfg) - set(DEFAULT_CONFIG)
        if unknown:
            raise ValueError(f"FLNR weights were written for another FLNR network (configuration keys "
                             f"{sorted(unknown)}); retrain them with vision train-denoiser")
        model = cls(**cfg)
        try:
            model.load_state_dict(state)
        except RuntimeError as err:
            raise ValueError(f"FLNR weights do not match the network {cfg}: {err}") from None
        return model.eval()

    @classmethod
    def from_file(cls, path) -> "FLNR":
        from safetensors import safe_open
        from safetensors.torch import load_file

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no FLNR weights file at {path}")
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
        config = json.loads(meta[CONFIG_KEY]) if CONFIG_KEY in meta else None
        return cls.from_state_dict(load_file(str(path)), config)


def read_metadata(path) -> dict[str, str]:
    """The safetensors header metadata of a weights file (configuration, training command, val PSNR)."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return dict(f.metadata() or {})


@lru_cache(maxsize=4)
def _cached(path: str, mtime: float) -> FLNR:
    return FLNR.from_file(path)


def load_flnr(weights=None, upsample: int = 1) -> FLNR:
    """An :class:`FLNR` from ``weights``: None (the bundled file), a path, a state dict or an FLNR.

    With ``weights=None`` and colour at 1/``upsample`` of the guides' size, the bundled weights trained for
    that factor (:data:`BUNDLED_UPSAMPLE`) when there are such, else the full-resolution ones."""
    if isinstance(weights, FLNR):
        return weights
    if isinstance(weights, dict):
        return FLNR.from_state_dict(weights)
    if weights is None:
        from vision.bundled import asset_path

        weights = asset_path(*BUNDLED)
        if int(upsample) in BUNDLED_UPSAMPLE:
            try:
                weights = asset_path(*BUNDLED_UPSAMPLE[int(upsample)])
            except FileNotFoundError:
                pass
    if not isinstance(weights, (str, Path)):
        raise ValueError(f"FLNR weights must be None, a path, a state dict or an FLNR, got {type(weights).__name__}")
    path = Path(weights)
    if not path.is_file():
        raise FileNotFoundError(f"no FLNR weights file at {path}")
    return _cached(str(path.resolve()), path.stat().st_mtime)


def flnr(color: torch.Tensor, guides: dict, model: FLNR, radius: int | None = None, eps=None,
         scale: int | None = None, stats=None, phase=None) -> torch.Tensor:
    """FLNR on (B, 3, h, w) colour and full-resolution guides with ``model`` (see :class:`FLNR`)."""
    dev, dt = color.device, color.dtype
    if next(model.parameters()).device != dev or next(model.parameters()).dtype != dt:
        model = model.to(device=dev, dtype=dt)  # a copy only when needed: nn.Module.to moves in place
    return model(color, guides, radius, eps, scale, stats, phase)


def flnr_tiled(color: torch.Tensor, guides: dict, model: FLNR, radius: int | None, eps, scale: int | None,
               tile: int, phase=None) -> torch.Tensor:
    """:func:`flnr` over tiles of about ``tile`` pixels with an overlap margin covering the regression's reach
    and the network's receptive field; tiles use the whole frame's guide statistics. The network pads
    with replication at tile borders, so the result matches the whole frame to within float rounding where
    the margin covers the receptive field (:data:`NET_MARGIN` pixels) and very nearly elsewhere."""
    h, w = color.shape[-2:]
    hf, wf = _full_size(color, guides)
    if hf <= tile and wf <= tile:
        return flnr(color, guides, model, radius, eps, scale, phase=phase)
    u = _upsample_factor((h, w), (hf, wf))
    reach = model.radius if radius is None else int(radius)
    scale = model.scale if scale is None else int(scale)
    stats = frame_stats(guides, color, (hf, wf))
    r = _fit_radius(reach, u)
    r_cells = max(1, round(r / scale)) if scale > 1 else r
    # regression reach as in flr_tiled, plus the network's receptive field; origins on a common grid
    unit = math.lcm(u * scale, CELL * model.net.multiple * u)
    margin = (r + (2 * r_cells + 2) * scale) * u + NET_MARGIN
    margin = int(math.ceil(margin / unit)) * unit
    return run_tiles(color, guides, (hf, wf), u, margin, unit, tile,
                     lambda c, sub: flnr(c, sub, model, radius, eps, scale, stats=stats, phase=phase))


# receptive field of the default FLNRNet in full-resolution pixels: two 3 x 3 convolutions at each of 1/8,
# 1/16 and 1/32 resolution and one at 1/16 and 1/8 on the way up (8 (2 + 1) + 16 (2 + 1) + 32 * 2 = 136),
# plus the pooling and bilinear taps of every level (about a cell each, 60): about 200, rounded up
NET_MARGIN = 256


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["FLNR", "FLNRNet", "flnr", "flnr_tiled", "load_flnr", "read_metadata", "parameter_count", "GUIDES",
           "cell_inputs", "frame_stats", "antialias"]
