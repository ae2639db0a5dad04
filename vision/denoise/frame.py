"""``denoise``: one path-traced frame (or a batch) through FLR or FLNR, with repair, tiling and CUDA graphs."""
from __future__ import annotations

import contextlib
import functools
import math

import numpy as np
import torch

from vision.data.fields import GUIDES, UNIT_INTERVAL
from vision.kernels.runtime import checks, checks_mode, forced_backend

from . import buffers, graphs
from .flr import DEFAULT_EPS, DEFAULT_RADIUS, full_size, sample_down, upsample_factor, check_phase, flr, flr_tiled
from .flnr import flnr as run_flnr, flnr_tiled, load_flnr
from .input_blend import blend_towards_input, blends
from .layout import host_reads

__all__ = ["denoise", "MODELS"]

MODELS = ("flr", "flnr")


def denoise(color, albedo=None, normal=None, depth=None, ao=None, emission=None, position=None, model: str = "flnr",
            radius: int | None = None, eps: float | None = None, scale: int | None = None, weights=None,
            tile: int | None = None, repair: bool = True, phase=None, hdr: bool = True, history=None,
            spp: float | None = None, input_blend: bool = True):
    r"""Denoise a path-traced frame (or a batch) with a local linear model of its radiance on guide buffers.

    Args:
        color: noisy linear radiance, RGB, ``(H, W, 3)`` or ``(B, 3, H, W)``, a float NumPy array or torch
            tensor. For joint denoising and upsampling it may be smaller than the guides by an integer factor
            (colour rendered at 1/2 or 1/4 resolution, guides at full resolution); the result then has the
            guides' size. Refused with one line each: integer arrays (uint8 images are display values, not
            radiance: convert with ``x / 255``, linearised from sRGB where they are sRGB, and pass
            ``hdr=False``) and 4-channel colour (RGBA: denoise ``color[..., :3]`` and keep the alpha as it is,
            as OIDN takes RGB only).
        albedo: diffuse reflectance in [0, 1] (3 channels): divided out before the fit, multiplied back after.
        normal: shading normal, components in [-1, 1] (world or camera space).
        depth: z-depth (1 channel; 0 or less = no surface); used as log-depth.
        ao: ambient occlusion in [0, 1] (1 channel).
        emission: directly visible emitted radiance (3 channels): subtracted before the fit, added after.
        position: world-space position (3 channels); used only while the 8 feature channels allow
            (guides are taken in the order normal, depth, ao, albedo, position).
        model: ``"flnr"`` (the default, as for ``vision denoise``: Fast Local Neural Regression, a trained
            network enhances the guides normal, depth, AO and albedo, with the bundled weights; position is not
            used) or ``"flr"`` (Fast Local Regression: the guides as they are, no weights).
        radius: window radius in full-resolution pixels (default: 8 for FLR, the trained one for FLNR).
        eps: ridge weight on the slopes, in units of each standardised guide's variance (default: 1e-2
            for FLR; FLNR uses its learned per-channel weights unless a value is given).
        scale: fit on ``scale x scale`` cells and apply the coefficients at full resolution (faster;
            default: 1 for FLR, the trained one, 4, for FLNR).
        weights: FLNR network weights: None (the bundled file; for colour at 1/2 or 1/4 of the guides'
            size the bundled weights trained for that, ``flnr_up2`` / ``flnr_up4.safetensors``), a
            ``.safetensors`` path, a state dict or a :class:`~vision.denoise.flnr.FLNR` (unused by FLR).
        tile: process tiles of about this many pixels a side (with an exact overlap), bounding memory.
        repair: replace NaN/Inf samples (warning with their count, :class:`BufferWarning`); with False
            they raise a ValueError.
        phase: for colour at 1/u of the guides' size, where each colour sample lies in the u x u block of
            full-resolution pixels it covers, ``(dy, dx)`` with 0 <= dy, dx < u: colour pixel ``(i, j)``
            was shaded at full-resolution pixel ``(u i + dy, u j + dx)`` (a renderer that shades one
            pixel of every block, e.g. ``(0, 0)``, or with a known per-frame jitter). The fit then reads
            the albedo, emission and guides at exactly those pixels; None (default): the sample may lie
            anywhere in its block and they are averaged over it.
        hdr: as OIDN's ``hdr``: True (default) for linear HDR radiance in [0, inf); False for linear LDR colour
            in [0, 1] (sRGB-encoded values linearised first): samples above 1 are taken as 1, and the result is
            clamped into [0, 1].
        history: frames averaged into each colour pixel, ``(H, W)``, ``(H, W, 1)`` or ``(B, 1, H, W)`` (>= 1; e.g.
            :attr:`~vision.denoise.TemporalDenoiser.history_length`), at the guides' size; None = one frame. FLNR
            weights trained with it (``"history": true`` in their configuration, as the bundled ones) read it;
            FLR and other weights ignore it.
        spp: samples per pixel the colour was rendered with (e.g. read from a Cycles EXR header, as ``vision
            denoise`` does), a number >= 1, or None (unknown: one). It tells the noise level to FLNR weights that
            read the history input (the frames averaged into a pixel times the samples of each frame), as the
            bundled ones do, and lets the input blend cap its noise estimate where signal no guide explains
            inflates it (:func:`.input_blend.noise_cap`), for FLR too. From 16 spp up FLNR's antialias blend
            weighs ``1 / spp`` of its learned weight: the guide buffers are then means over the pixel, not one ray
            through its centre (:func:`.flnr.finish.antialias_share`).
        input_blend: move the result back towards the noisy input wherever the input's own noise, estimated from
            the frame, is below the fit's bias (:func:`.input_blend.towards_input`): the result converges to the
            input as the noise falls (at high sample counts), and at 1 spp stays the fit's (``spp=1`` skips it).
            Default True; only for colour at the guides' size (joint upsampling has no input at full resolution).

    Returns:
        The denoised radiance, same kind (NumPy / torch) and layout (HWC / BCHW) as ``color``.

    Raises:
        ValueError: mis-sized buffers, albedo outside [0, 1], normals outside [-1, 1] (checked where the
            buffers may be read on the host: on CPU, or with ``VISION_CHECKS=on``), unknown model, a
            ``radius``, ``scale`` or ``tile`` that is not a positive int, an ``eps`` that is not positive,
            integer or 4-channel ``color``, integer guide buffers, an ``hdr`` or ``repair`` that is not a bool.

    Colour samples that are negative are clamped to 0, and extreme ones (a broken sample, e.g. 1e30) are replaced
    by the mean of their neighbours (:func:`.buffers.suppress_fireflies`; with a :class:`BufferWarning` on CPU).
    On CUDA (and on the Triton path) the call reads no tensor value on the host: the repairs run branch-free on
    the device and do not warn.
    """
    return _denoise(color, albedo, normal, depth, ao, emission, position, model, radius, eps, scale, weights, tile,
                    repair, phase, hdr, history, spp, input_blend)


def _denoise(color, albedo=None, normal=None, depth=None, ao=None, emission=None, position=None, model: str = "flnr",
             radius=None, eps=None, scale=None, weights=None, tile=None, repair: bool = True, phase=None,
             hdr: bool = True, history=None, spp=None, input_blend: bool = True, prepared: bool = False):
    """:func:`denoise`; ``prepared``: the buffers come from :class:`~.temporal.TemporalDenoiser`'s history, already
    repaired, range-checked and with their fireflies suppressed, so those steps are not run again (the same result,
    one pass over every buffer and the firefly test fewer)."""
    named = dict(locals())  # the guide keywords: the table's GUIDES, in its order (a test checks the signature)
    radius, eps, scale, tile, spp, hdr = _check_settings(model, radius, eps, scale, tile, spp, repair, hdr,
                                                         input_blend)
    _check_color(color)
    c = buffers.to_bchw(color, "color", 3)
    guides = _take_guides({k: named[k] for k in GUIDES}, history, c.device)
    work = torch.float64 if c.dtype == torch.float64 else torch.float32
    c = c.to(work)
    guides = {k: (None if v is None else v.to(work)) for k, v in guides.items()}
    present = {k: v for k, v in guides.items() if v is not None}
    _check_sizes(c, present)
    full = full_size(c, guides)
    u = upsample_factor(tuple(c.shape[-2:]), full)
    phase = check_phase(phase, u)
    if scale is not None and scale > max(full):  # a cell past the frame holds nothing more, and costs memory
        raise ValueError(f"scale must be at most the frame's larger side ({max(full)} pixels), got {scale}")
    net = None
    if model == "flnr":
        net = load_flnr(weights, upsample=u, device=c.device, dtype=c.dtype)
    else:
        radius = DEFAULT_RADIUS if radius is None else radius
        eps = DEFAULT_EPS if eps is None else eps
        scale = 1 if scale is None else scale
    _tell_noise(c, guides, present, net, spp)
    names = tuple(present)
    inputs = [c, *(guides[k] for k in names)]
    needs_grad = torch.is_grad_enabled() and (c.requires_grad or (net is not None and net.training))
    blend = bool(input_blend) and u == 1 and blends(spp)
    frame = functools.partial(_frame, names=names, model=model, net=net, radius=radius, eps=eps, scale=scale,
                              tile=tile, phase=phase, repair=repair, needs_grad=needs_grad, hdr=hdr, blend=blend,
                              spp=spp, prepared=prepared)
    # a frame that reads no tensor on the host (repair on, data checks off) can be a CUDA graph
    if (graphs.wanted(inputs, needs_grad) and repair and not buffers.host_reads(c)
            and not isinstance(eps, torch.Tensor)):
        # the graph reads the network's weights where they lie: moved (nn.Module.to replaces them), a new graph
        weights_at = () if net is None else tuple(t.data_ptr() for t in (*net.parameters(), *net.buffers()))
        key = (model, id(net), weights_at, radius, eps, scale, tile, phase, names, hdr, blend, spp, prepared,
               forced_backend())
        out = graphs.run(key, frame, inputs)
    else:
        out = frame(*inputs)
    return buffers.like(out, color)


def _check_settings(model, radius, eps, scale, tile, spp, repair, hdr, input_blend) -> tuple:
    """:func:`denoise`'s settings checked, one line naming the first bad one: (radius, eps, scale, tile, spp, hdr)
    as the rest of the call takes them."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose from {', '.join(MODELS)}")
    radius, scale, tile = (_positive_int(v, n) for v, n in ((radius, "radius"), (scale, "scale"), (tile, "tile")))
    if eps is not None and not isinstance(eps, torch.Tensor):
        try:
            ok = math.isfinite(float(eps)) and float(eps) > 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"eps must be a positive finite float or None, got {eps!r}")
    spp = _check_spp(spp)
    for flag, value in (("repair", repair), ("hdr", hdr), ("input_blend", input_blend)):
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{flag} must be True or False, got {value!r}")
    return radius, eps, scale, tile, spp, bool(hdr)


def _take_guides(named: dict, history, device) -> dict:
    """The guide buffers (and the history count) as (B, C, H, W) tensors on ``device``, None where absent; integer
    buffers and a history that is no count of frames >= 1 refused in one line."""
    for k, v in named.items():
        if v is not None and _integer_dtype(v):
            raise ValueError(f"{k} is {_dtype_name(v)}: pass a float buffer in the renderer's units"
                             + (" (x/255 for 8-bit values in [0, 1])" if k in UNIT_INTERVAL else ""))
    guides = {k: (None if v is None else buffers.to_bchw(v, k, buffers.CHANNELS[k]).to(device))
              for k, v in named.items()}
    if history is not None:  # a count per pixel: integer arrays are welcome
        try:
            h = history if isinstance(history, torch.Tensor) else torch.as_tensor(np.asarray(history))
        except (TypeError, ValueError, RuntimeError):
            h = None
        if h is None or h.dtype == torch.bool or h.is_complex():
            got = type(history).__name__ if h is None else _dtype_name(h)
            raise ValueError(f"history must be a real count of frames per pixel (>= 1), got {got}")
        h = h if h.is_floating_point() else h.float()
        # a count below one frame, NaN or inf is no history: refused where reading it costs no device sync
        if host_reads(h) and h.numel():
            good = (h >= 1) & torch.isfinite(h)
            if not bool(good.all()):
                raise ValueError(f"history must be a count of frames per pixel >= 1 (finite), got "
                                 f"{h[~good].flatten()[0].item()!r} at {int((~good).sum())} pixel(s)")
        guides["history"] = buffers.to_bchw(h, "history", 1).to(device)
    return guides


def _check_sizes(c: torch.Tensor, present: dict) -> None:
    """The present buffers share one size (and the colour's batch): the size most of them have (ties: the
    colour's), so that a message names the odd buffer out, not its neighbour."""
    if present:
        sizes = [tuple(v.shape[-2:]) for v in present.values()]
        size = max(dict.fromkeys(sizes), key=lambda s: (sizes.count(s), s == tuple(c.shape[-2:])))
        buffers.check_sizes(present, size, c.shape[0])


def _tell_noise(c: torch.Tensor, guides: dict, present: dict, net, spp: float | None) -> None:
    """The history input as the network reads it (in place in ``guides`` and ``present``): a history of n frames of
    s samples each holds n s samples; FLR and weights without the history input do not see it."""
    if spp is not None and spp != 1 and net is not None and net.config["history"]:
        n = guides["history"] if "history" in present else torch.ones_like(c[:, :1])
        present["history"] = guides["history"] = n * spp
    if "history" in present and (net is None or not net.config["history"]):
        del present["history"]  # checked above; only FLNR weights with the history input read it


def _frame(c, *present, names, model, net, radius, eps, scale, tile, phase, repair, needs_grad, hdr=True,
           blend=False, spp=None, prepared=False):
    """One frame of :func:`denoise` on validated (B, C, H, W) buffers: repairs and checks (:func:`_repaired`, not for
    ``prepared`` buffers), the model, the input blend; LDR colour (``hdr=False``) is taken at most 1 and the result
    clamped into [0, 1] (branch-free: no host reads)."""
    guides = dict.fromkeys(GUIDES)
    guides.update(zip(names, present))
    u = upsample_factor(tuple(c.shape[-2:]), full_size(c, guides))
    with torch.set_grad_enabled(needs_grad):
        if not prepared:
            c = _repaired(c, guides, names, repair, hdr, u, phase)
        if guides["emission"] is None and u == 1:  # a lamp seen without an emission buffer: put back as it is
            guides["emission"] = buffers.bright_regions(c)
        # every buffer is finite now: the ops below need not read their inputs again to check (3-5 ms a 1280 x 720
        # frame on CPU); checks forced on by the caller stay on
        with checks("off") if checks_mode() == "auto" else contextlib.nullcontext():
            out = _model(c, guides, model, net, radius, eps, scale, tile, phase, spp)
            out = blend_towards_input(out, c, guides, tile, spp, model) if blend else out
    return out if hdr else out.clamp(0.0, 1.0)


def _repaired(c, guides: dict, names, repair: bool, hdr: bool, u: int, phase) -> torch.Tensor:
    """The colour with its NaN/Inf samples repaired (or refused, ``repair=False``), taken at most 1 for LDR colour and
    its fireflies suppressed; the guides of ``names`` repaired in place in ``guides`` and range-checked."""
    for name in ("color", *names):
        t = c if name == "color" else guides[name]
        if repair:
            fixed, _ = buffers.repair_nonfinite(t, name)
        else:  # raising needs the values on the host: one synchronisation per buffer on a GPU
            bad = int((~torch.isfinite(t)).sum())
            if bad:
                raise ValueError(f"{name} contains {bad} NaN or Inf values")
            fixed = t
        if name == "color":
            c = fixed
        else:
            guides[name] = fixed
    if buffers.host_reads(c):  # range checks read the buffers: on the GPU only with VISION_CHECKS=on
        buffers.check_ranges(guides["albedo"], guides["normal"])
    if not hdr:
        c = c.clamp(max=1.0)
    return buffers.suppress_fireflies(c, sample_down(guides["emission"], u, phase))


def _model(c, guides: dict, model, net, radius, eps, scale, tile, phase, spp):
    """FLNR or FLR of the prepared colour ``c`` on ``guides``, over tiles when ``tile`` is given."""
    if model == "flnr":
        if tile is not None:
            return flnr_tiled(c, guides, net, radius, eps, scale, tile, phase=phase, spp=spp)
        return run_flnr(c, guides, net, radius, eps, scale, phase=phase, spp=spp)
    if tile is not None:
        return flr_tiled(c, guides, radius, eps, scale, tile, phase=phase)
    return flr(c, guides, radius, eps, scale, phase=phase)


def _dtype_name(x) -> str:
    return str(x.dtype).removeprefix("torch.")


def _integer_dtype(x) -> bool:
    """Whether ``x`` (NumPy or torch) holds integers or bools: pixel codes, not the float values a buffer means."""
    if isinstance(x, np.ndarray):
        return x.dtype.kind in "biu"
    return isinstance(x, torch.Tensor) and not (x.dtype.is_floating_point or x.dtype.is_complex)


def _check_color(color) -> None:
    """One-line refusals of the colour a denoiser is easily handed by mistake: 8/16-bit image codes (display values,
    not radiance) and RGBA (whose alpha is no radiance: OIDN too takes RGB only)."""
    if _integer_dtype(color):
        name = _dtype_name(color)
        full = {"uint8": "x/255", "uint16": "x/65535"}.get(name)
        raise ValueError(f"color is {name}: pass linear float radiance"
                         + (f", or convert with {full} and hdr=False" if full else ""))
    shape = tuple(getattr(color, "shape", ()))
    channels = shape[-1] if len(shape) == 3 else shape[1] if len(shape) == 4 else None
    if channels == 4:
        rgb = "color[..., :3]" if len(shape) == 3 else "color[:, :3]"
        raise ValueError(f"color has 4 channels (shape {shape}): denoise takes RGB; pass {rgb} and keep the alpha "
                         f"as it is")


def _check_spp(spp) -> float | None:
    """``spp`` as a float >= 1 (None stays None); ValueError naming it for anything else (bools, strings, NaN, inf,
    values below 1)."""
    if spp is None:
        return None
    try:
        ok = not isinstance(spp, (bool, np.bool_, str)) and math.isfinite(float(spp)) and float(spp) >= 1
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"spp must be a number of samples per pixel >= 1 or None, got {spp!r}")
    return float(spp)


def _positive_int(value, name: str) -> int | None:
    """``value`` as an int >= 1 (None stays None); ValueError for anything else (bools, fractions, 0, negatives)."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or int(value) < 1:
        raise ValueError(f"{name} must be a positive int or None, got {value!r}")
    return int(value)

