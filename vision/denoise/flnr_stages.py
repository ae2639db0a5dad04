"""FLNR's stages that have several engines, each a registry op with its paths (:mod:`.engines`): the demodulation
(``denoise.flnr.prepare``), the cell statistics (``denoise.flnr.cells``), the guide head (``denoise.flnr.head``),
the last steps (``denoise.flnr.finish``) and the detail blend (``denoise.flnr.detail``). On CPU without autograd
they run as numba loops (:mod:`.flnr_cpu`) or band by band of rows, else as PyTorch formulas over the whole frame;
the antialias blend is shared by all. The 3 x 3 mean (``denoise.flnr.mean3``) and the local contrast
(``denoise.flnr.contrast``) the PyTorch formulas build on run in OpenCV on CPU float32 planes, else in PyTorch.
Split from :mod:`vision.denoise.flnr`, which re-exports every name.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vision.kernels.runtime import decide, register_path

from . import buffers as B
from .engines import BANDS, NUMBA, OPENCV, TORCH, numba_takes, opencv_takes
from .flnr_net import CELL, GUIDES, cell_guides, cell_inputs
from .flr import sample_down

PRUNE_STRIDE = 7  # :meth:`FLNR.pruned` samples every 7th pixel's hidden activations


def _nhwc(t: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, H, W, C) contiguous: a view for channels-last tensors (what HWC arrays become)."""
    return t.permute(0, 2, 3, 1).contiguous()


def _unbanded(target: torch.Tensor, model: nn.Module) -> str | None:
    """Why the guide head and the cell statistics may not go band by band or through numba (None: they may)."""
    if not B.cpu_path(target):
        return "needs the CPU path (a CPU tensor on the PyTorch backend)"
    if getattr(model, "_record", None) is not None:
        return "pruning records the guide head's hidden layer"
    if torch.is_grad_enabled() and (target.requires_grad or any(p.requires_grad for p in model.parameters())):
        return "autograd is on"
    return None


# ------------------------------------------------------------------------------------------------ demodulation

def prepare(color, albedo, emission, u: int, phase, fill_radius: int):
    """FLNR's signal: ``(color, target, factor, add, mask, albedo, emission)``, the demodulated colour of
    :func:`~.buffers.demodulate` and the emitter mask; the registry picks the engine (op ``denoise.flnr.prepare``:
    one numba pass over the buffers as they lie, or PyTorch on planar copies)."""
    return decide("denoise.flnr.prepare", color, tensors=(color, albedo, emission), u=u).run(
        color, albedo, emission, u, phase, fill_radius)


def _prepare_numba(color, albedo, emission, u, phase, fill_radius):
    from . import flnr_cpu  # one pass over the buffers as they lie: demodulation, mask, planes

    return (color, *flnr_cpu.prepare(color, albedo, emission, fill_radius, B.ALBEDO_FLOOR))


def _prepare_torch(color, albedo, emission, u, phase, fill_radius):
    color = color.contiguous()
    albedo, emission = (None if v is None else v.contiguous() for v in (albedo, emission))
    emission_lo = sample_down(emission, u, phase)
    mask = B.emitter_mask(emission_lo, color)
    target, factor, add = B.demodulate(color, sample_down(albedo, u, phase), emission_lo, fill_radius, mask=mask)
    mask = torch.zeros_like(color[:, :1]) if mask is None else mask.expand(color.shape[0], -1, -1, -1)
    return color, target, factor, add, mask, albedo, emission


register_path("denoise.flnr.prepare", NUMBA, "torch", 5, run=_prepare_numba,
              supports=lambda tensors, u: "colour smaller than the guides" if u != 1 else numba_takes(*tensors))
register_path("denoise.flnr.prepare", TORCH, "torch", 0, run=_prepare_torch)


# ------------------------------------------------------------------------------------------------ cell statistics

def cells(model, buffers: list, target: torch.Tensor, mask: torch.Tensor):
    """``(cells, inputs)``: the 4 x 4 cell means of the guide buffers (B, 8, h, w) and ``inputs(standardised
    cells)``, the network's input; the registry picks the engine (op ``denoise.flnr.cells``: the statistics in one
    numba pass over the pixels, or :func:`~.flnr_net.cell_guides` and :func:`~.flnr_net.cell_inputs`)."""
    return decide("denoise.flnr.cells", target, tensors=(target, mask, *buffers),
                  bands=_unbanded(target, model)).run(buffers, target, mask)


def _cells_numba(buffers, target, mask):
    from . import flnr_cpu

    stats, rest = flnr_cpu.cells(buffers, target, mask, CELL)
    return stats, lambda std: torch.cat([std, rest], 1)


def _cells_torch(buffers, target, mask):
    return cell_guides(buffers, target, tuple(target.shape[-2:])), lambda std: cell_inputs(std, target, mask)


register_path("denoise.flnr.cells", NUMBA, "torch", 5, run=_cells_numba,
              supports=lambda tensors, bands: bands or numba_takes(*tensors))
register_path("denoise.flnr.cells", TORCH, "torch", 0, run=_cells_torch)


# ------------------------------------------------------------------------------------------------ guide head

def head(model, out: torch.Tensor, buffers: list, weight: torch.Tensor, bias: torch.Tensor, target: torch.Tensor):
    """The guide head of :meth:`FLNR.learned_guides` on the network's output ``out`` (the code, then the radius
    logits): ``(learned guides (B, Q, H, W), radius logits)``; the registry picks the engine (op
    ``denoise.flnr.head``: numba, PyTorch band by band (:func:`_head_bands`), or PyTorch on the whole frame)."""
    return decide("denoise.flnr.head", out, tensors=(out, weight, bias, *buffers),
                  bands=_unbanded(target, model)).run(model, out, buffers, weight, bias, target)


def _head_numba(model, out, buffers, weight, bias, target):
    from . import flnr_cpu

    width = model.head_in.out_features
    return flnr_cpu.head(model, out[:, :width], buffers, weight, bias, tuple(target.shape[-2:]), CELL), \
        out[:, width:]


def _head_banded(model, out, buffers, weight, bias, target):
    width = model.head_in.out_features
    return _head_bands(model, out[:, :width], buffers, weight, bias, tuple(target.shape[-2:])), out[:, width:]


def _head_frame(model, out, buffers, weight, bias, target):
    """The guide head per pixel on (B, H W, C) rows: up(code) + W1 diag(1/std) (f_raw - mean), one product per
    buffer, then the output layer."""
    dt = model.log_eps.dtype
    b, _, h, w = target.shape
    width = model.head_in.out_features
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
    if model.head_out is not None:
        acc = F.leaky_relu(acc, 0.1, inplace=not acc.requires_grad)
        if model._record is not None:  # :meth:`pruned` collects every 7th pixel's hidden activations
            model._record.append(acc.detach().reshape(-1, width)[::PRUNE_STRIDE].clone())
        acc = torch.addmm(model.head_out.bias, acc.view(-1, width), model.head_out.weight.t())
    g = acc.view(b, h, w, -1).permute(0, 3, 1, 2).to(target.dtype).contiguous()
    return g, out[:, width:].to(target.dtype)


register_path("denoise.flnr.head", NUMBA, "torch", 5, run=_head_numba,
              supports=lambda tensors, bands: bands or numba_takes(*tensors))
register_path("denoise.flnr.head", BANDS, "torch", 3, run=_head_banded, supports=lambda tensors, bands: bands)
register_path("denoise.flnr.head", TORCH, "torch", 0, run=_head_frame)


HEAD_BAND_PIXELS = 1 << 16  # pixels per band of the banded guide head (its hidden layer: 4 MB of float32; smaller bands
# cost more in per-op overhead than they win in cache hits: 1 << 15 was 1.2x, 1 << 14 2x slower at 1280 x 720)


def _head_bands(model, code: torch.Tensor, buffers: list, weight: torch.Tensor, bias: torch.Tensor, size):
    """The guide head of :meth:`FLNR.learned_guides` without autograd, band by band of cell rows (path
    ``torch+bands`` of ``denoise.flnr.head``).

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
    from vision.kernels.local_linear.torch_path import cells_band, cells_horizontal
    from vision.kernels.runtime.threads import own_threads, parallel_for

    h, w = size
    b, width, gh, gw = code.shape
    q = model.head_out.out_features if model.head_out is not None else width
    rows = max(1, HEAD_BAND_PIXELS // (CELL * max(w, 1)))
    offsets = [sum(B.CHANNELS[n] for n in GUIDES[:i]) for i in range(len(GUIDES))]
    present = [v for v in buffers if v is not None]
    cols = [at + k for n, v, at in zip(GUIDES, buffers, offsets) if v is not None for k in range(B.CHANNELS[n])]
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
                if model.head_out is None:
                    out.copy_(hj)
                else:
                    torch.addmm(model.head_out.bias[:, None], model.head_out.weight, F.leaky_relu_(hj, 0.1), out=out)

        parallel_for(one, range(0, gh, rows), code.device)
    return g


FINISH_BAND_PIXELS = 1 << 17  # output pixels per band of :func:`_finish_rows`


def finish(model, fitted, factor, add, blend, albedo, out):
    """FLNR's last steps: ``antialias(max(fitted, 0) factor, blend + edge_gain local_contrast(albedo), blend_max)
    + add`` (``max(fitted, 0) factor + add`` without ``blend``), written into ``out`` when it is given (any
    layout). The registry picks the engine (op ``denoise.flnr.finish``): without autograd on CPU numba rows or
    PyTorch bands (:func:`_finish_rows`), else PyTorch on the whole frame."""
    return decide("denoise.flnr.finish", fitted, tensors=(fitted, factor, add, blend, out, albedo)).run(
        model, fitted, factor, add, blend, albedo, out)


def _finish_numba(model, fitted, factor, add, blend, albedo, out):
    from . import flnr_cpu

    return flnr_cpu.finish_frame(model, fitted, factor, add, blend, albedo, out)


def _finish_rows(model, fitted, factor, add, blend, albedo, out):
    """FLNR's last steps without autograd, band by band of rows, into ``out``.

    :meth:`FLNR._blended_light` band by band (the 3 x 3 means of every band see one row of its neighbours, so
    they equal the frame's): each band's light, contrast, weights and
    means stay in cache between these ten or so per-pixel steps instead of each one streaming full frames
    through memory (on 2 cores these stages were memory bound); bands go to the workers of
    :func:`vision.kernels.runtime.threads.own_threads`."""
    from vision.kernels.runtime.threads import own_threads, parallel_for

    h, w = fitted.shape[-2:]
    rows = max(1, FINISH_BAND_PIXELS // max(w, 1))

    def one(y0):
        y1 = min(h, y0 + rows)
        e0, e1 = max(0, y0 - 1), min(h, y1 + 1)  # one row of halo for the 3 x 3 means
        band = model._blended_light(fitted[:, :, e0:e1], factor[:, :, e0:e1], blend[:, :, e0:e1],
                                    None if albedo is None else albedo[:, :, e0:e1])
        torch.add(band[:, :, y0 - e0:y1 - e0], add[:, :, y0:y1], out=out[:, :, y0:y1])

    with own_threads(fitted.device):
        parallel_for(one, range(0, h, rows), fitted.device)
    return out


def _finish_frame(model, fitted, factor, add, blend, albedo, out):
    if blend is None:
        fitted = fitted.clamp_min_(0) if not fitted.requires_grad else fitted.clamp_min(0)
        return torch.addcmul(add, fitted, factor, out=out)
    # the emission buffer is a pixel mean already: only the light is blended
    return torch.add(model._blended_light(fitted, factor, blend, albedo), add, out=out)


def _rows_take(tensors) -> str | None:
    fitted, factor, add, blend, out, albedo = tensors
    if blend is None:
        return "no antialias blend: one product, nothing to band"
    if out is None:
        return "autograd is on"
    return None if B.cpu_path(out) else "needs the CPU path (a CPU tensor on the PyTorch backend)"


def _numba_finishes(tensors) -> str | None:
    return _rows_take(tensors) or (numba_takes(*tensors) if tensors[0].shape[1] == 3 else "takes 3 channels")


register_path("denoise.flnr.finish", NUMBA, "torch", 5, supports=_numba_finishes, run=_finish_numba)
register_path("denoise.flnr.finish", BANDS, "torch", 3, supports=_rows_take, run=_finish_rows)
register_path("denoise.flnr.finish", TORCH, "torch", 0, run=_finish_frame)


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


def detail_blend(res: torch.Tensor, add: torch.Tensor, factor: torch.Tensor, target: torch.Tensor,
                 logit: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """FLNR's detail blend: ``res + w (D - res)``, in place when nothing needs a gradient, with

    * ``D = factor m + add``: ``m`` the mean of the noisy demodulated samples ``max(target, 0)`` of the 3 x 3
      neighbourhood (inside the frame) without the largest one, so a lone firefly never passes through, and
      taken in demodulated space, so the albedo's texture stays sharp;
    * ``w = sigmoid(logit) (1 - mask) s``: the guide head's weight, none at pixels that see an emitter (their
      emission stays exact), times the positive-part James-Stein shrinkage ``s = max(0, 1 - V / |D - res|^2)``
      with ``V = sum_c factor_c^2 var_c / k``, the variance of ``D`` from the spread of the k = n - 1 samples it
      averages (s = 0 for k < 2). ``|D - res|^2`` estimates the fit's squared bias plus ``V``, so the samples
      win only where the fit's bias clearly exceeds their own noise: at 1 spp a cluster of fireflies has a
      large spread and is left out, a mirror's reflection or a sharp caustic has a small one and comes
      through. (Without the shrinkage, held-out dark or glassy Blender frames lost 2-5 dB to FLR.)

    ``res`` (B, 3, H, W) is the denoised result (the shrinkage treats it as a constant: no gradient flows
    through ``s``), ``target``, ``factor`` and ``add`` are :func:`~.buffers.demodulate`'s, ``logit`` and ``mask``
    (B, 1, H, W). Moments in float32 here (the numba pass accumulates in float64); where they overflow the
    shrinkage is 0. The registry picks the engine (op ``denoise.flnr.detail``: one numba pass on CPU float32
    without autograd, else PyTorch)."""
    grad = res.requires_grad or logit.requires_grad
    return decide("denoise.flnr.detail", res, tensors=(res, add, factor, target, logit, mask), grad=grad).run(
        res, add, factor, target, logit, mask, grad)


def _detail_numba(res, add, factor, target, logit, mask, grad):
    from . import flnr_cpu  # one pass on CPU float32: the 3 x 3 sums, weights and blend per row

    b = res.shape[0]
    flnr_cpu.detail(res, *(t.expand(b, -1, -1, -1).contiguous() for t in (add, factor, target, logit, mask)))
    return res


def _detail_torch(res, add, factor, target, logit, mask, grad):
    t = target.clamp_min(0)
    n = F.avg_pool2d(torch.ones_like(t[:, :1]), 3, 1, 1, count_include_pad=True) * 9  # pixels inside the frame
    k = n - 1
    top = F.max_pool2d(t, 3, 1, 1)
    s1 = _mean3(t) * n - top
    s2 = _mean3(t * t) * n - top * top
    m = s1 / k.clamp_min(1)
    var = (s2 - s1 * m).clamp_min(0) / (k - 1).clamp_min(1) / k.clamp_min(1)  # of the trimmed mean
    smooth = (m * factor).add_(add)
    diff2 = ((smooth - res.detach()) ** 2).sum(1, keepdim=True)
    shrink = (1 - (factor * factor * var).sum(1, keepdim=True) / diff2).clamp_min(0)
    shrink = torch.where((k >= 2) & (diff2 > 0) & torch.isfinite(shrink), shrink, torch.zeros_like(shrink))
    w = torch.sigmoid(logit.to(res.dtype)) * (1 - mask.to(res.dtype)) * shrink
    return torch.lerp(res, smooth, w) if grad else res.lerp_(smooth, w)


def _numba_details(tensors, grad) -> str | None:
    if grad:
        return "the result or the weight requires grad"
    return numba_takes(*tensors) if tensors[0].shape[1] == 3 else "takes 3 channels"


register_path("denoise.flnr.detail", NUMBA, "torch", 5, supports=_numba_details, run=_detail_numba)
register_path("denoise.flnr.detail", TORCH, "torch", 0, run=_detail_torch)


def local_contrast(x: torch.Tensor) -> torch.Tensor:
    """``sum over channels |x - mean3(x)|``, (B, C, H, W) -> (B, 1, H, W): how far each pixel is from the mean
    of its 3 x 3 neighbourhood (inside the frame); zero on flat and linear regions, large at edges. The registry
    picks the engine (op ``denoise.flnr.contrast``: OpenCV plane by plane, or PyTorch)."""
    return decide("denoise.flnr.contrast", x, tensors=(x,)).run(x)


def _contrast_opencv(x):
    import cv2  # per plane in OpenCV: the mean, |difference| and channel sum without torch's per-op passes

    out = x.new_empty(x.shape[0], 1, *x.shape[2:])
    diff = _mean3_opencv(x).detach().numpy()
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


def _contrast_torch(x):
    return (x - _mean3_torch(x)).abs().sum(1, keepdim=True)


def _opencv_planes(tensors) -> str | None:
    """Why OpenCV may not take ``tensors[0]`` plane by plane (None: it may): CPU float32, nothing to
    differentiate, rows contiguous."""
    x = tensors[0]
    return opencv_takes(x, x.requires_grad) or (None if x.stride(-1) == 1 else "needs contiguous rows")


def _mean3(x: torch.Tensor) -> torch.Tensor:
    """The 3 x 3 mean of the pixels inside the frame (``box_filter(x, 1)``), (B, C, H, W); the registry picks the
    engine (op ``denoise.flnr.mean3``: on CPU planes the box path's OpenCV sums directly, without the box filter's
    op dispatch, as FLNR calls this on many small bands; else :func:`~vision.kernels.box_filter`)."""
    return decide("denoise.flnr.mean3", x, tensors=(x,)).run(x)


def _mean3_opencv(x):
    from vision.kernels.box.torch_path import box_mean

    return box_mean(x, 1, "valid", "opencv")


def _mean3_torch(x):
    from vision.kernels import box_filter

    return box_filter(x, 1)


register_path("denoise.flnr.contrast", OPENCV, "torch", 5, supports=_opencv_planes, run=_contrast_opencv)
register_path("denoise.flnr.contrast", TORCH, "torch", 0, run=_contrast_torch)
register_path("denoise.flnr.mean3", OPENCV, "torch", 5, supports=_opencv_planes, run=_mean3_opencv)
register_path("denoise.flnr.mean3", TORCH, "torch", 0, run=_mean3_torch)
