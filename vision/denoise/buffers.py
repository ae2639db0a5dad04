"""Render buffers for the denoiser: layouts, validation, repair, demodulation, guide features, channel names.

Layouts. Every buffer is a NumPy array or a torch tensor: 2-D ``(H, W)`` (one channel), 3-D ``(H, W, C)``
(HWC, what EXR readers return) or 4-D ``(B, C, H, W)``. The denoised result comes back in the kind
(NumPy or torch) and layout of ``color``.

Channel names. :func:`find_fields` maps the channel names of a (multi-layer) EXR to the denoiser's
fields; it recognises the names ``vision render-scenes`` writes (see :data:`vision.data.exr.LAYERS`),
Blender Cycles passes (``Combined`` / ``Noisy Image``, ``Denoising Albedo``, ``Denoising Normal``,
``Denoising Depth``, ``Emit``, ``AO``, with or without a view-layer prefix such as ``ViewLayer.``) and
the usual Mitsuba 3 AOV names (``albedo``, ``sh_normal`` / ``nn``, ``depth`` / ``dd``, ``position`` /
``pp``; colour in the root ``R G B`` channels).
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Iterable

import numpy as np
import torch
import torch.nn.functional as F

FIELDS = ("color", "albedo", "normal", "depth", "ao", "emission", "position")
CHANNELS = {"color": 3, "albedo": 3, "normal": 3, "depth": 1, "ao": 1, "emission": 3, "position": 3,
            "reference": 3}
# demodulation divides by max(albedo, ALBEDO_FLOOR) per channel: dividing by ~0 would blow up the noise. The
# clamp is continuous on purpose: not dividing below a floor (factor 1 there) made the target jump by 1 / floor
# between neighbouring pixels of a dark or saturated-colour surface, and the regression smeared the jump (cyan
# and magenta bands on Cycles' blue floors, 2-3 dB on Blender validation scenes). 0.1 was chosen on the Blender
# training set's validation and test splits (0.02, 0.05, 0.1, 0.2), never on the evaluation scenes.
ALBEDO_FLOOR = 0.1
# tolerances of the range checks: renderers write albedo slightly above 1 and normals slightly off unit
ALBEDO_RANGE = (-1e-3, 1.05)
NORMAL_RANGE = 1.05


class BufferWarning(UserWarning):
    """A buffer held NaN/Inf samples that were repaired, or was otherwise adjusted."""


# --------------------------------------------------------------------------- layouts

def to_bchw(x, name: str, channels: int | None = None) -> torch.Tensor:
    """``x`` (NumPy or torch, HW / HWC / BCHW) as a float32 ``(B, C, H, W)`` tensor (a view where possible)."""
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "fiu":
            raise ValueError(f"{name} must be a numeric array, got dtype {x.dtype}")
        t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    elif isinstance(x, torch.Tensor):
        if not (x.dtype.is_floating_point or x.dtype in (torch.uint8, torch.int32, torch.int64)):
            raise ValueError(f"{name} must be a float tensor, got {x.dtype}")
        t = x.float() if x.dtype != torch.float64 else x
    else:
        raise ValueError(f"{name} must be a NumPy array or a torch tensor, got {type(x).__name__}")
    if t.dim() == 2:
        t = t[None, None]
    elif t.dim() == 3:
        t = t.permute(2, 0, 1)[None]
    elif t.dim() != 4:
        raise ValueError(f"{name} must be (H, W), (H, W, C) or (B, C, H, W), got shape {tuple(t.shape)}")
    if min(t.shape) == 0:
        raise ValueError(f"{name} is empty: shape {tuple(t.shape)}")
    if channels is not None and t.shape[1] != channels:
        if channels == 1 and t.shape[1] in (3, 4) and name in ("depth", "ao"):
            t = t[:, :1]  # a gray buffer stored as RGB: all channels equal by construction
        elif t.shape[1] == 4 and channels == 3:
            t = t[:, :3]  # RGBA: drop alpha
        else:
            raise ValueError(f"{name} must have {channels} channel(s), got {t.shape[1]} (shape {tuple(x.shape)})")
    return t


def like(out: torch.Tensor, template):
    """``out`` (B, C, H, W) converted back to the kind and layout of ``template``."""
    nd = template.ndim if isinstance(template, np.ndarray) else template.dim()
    if nd == 3:
        out = out[0].permute(1, 2, 0)
    elif nd == 2:
        out = out[0, 0]
    if isinstance(template, np.ndarray):
        # one copy at most: none when ``out`` already lies in the template's layout (channels-last for HWC)
        return np.ascontiguousarray(out.detach().cpu().numpy(), dtype=np.float32)
    return out.to(dtype=template.dtype if template.dtype.is_floating_point else torch.float32,
                  device=template.device)


# --------------------------------------------------------------------------- validation

def host_reads(t: torch.Tensor) -> bool:
    """Whether the denoiser may read ``t``'s values on the host: :func:`vision.kernels.runtime.data_checks` for
    the backend its ops run with (by default yes for CPU tensors on the PyTorch path; no on CUDA or the Triton
    path, where every read stalls the GPU and breaks CUDA graph capture; ``VISION_CHECKS=on`` allows it)."""
    from vision.kernels.runtime import backend_for
    from vision.kernels.runtime import data_checks

    return data_checks(backend_for(t))


def cpu_path(t: torch.Tensor) -> bool:
    """Whether ``t`` takes the denoiser's CPU-specialised code (OpenCV, numba loops, bands of rows): a CPU tensor on
    the PyTorch backend. On the Triton path, interpreted on CPU, the code is the one CUDA runs."""
    from vision.kernels.runtime import backend_for

    return t.device.type == "cpu" and backend_for(t) == "torch"


def repair_nonfinite(x: torch.Tensor, name: str, warn: bool = True) -> tuple[torch.Tensor, int | torch.Tensor]:
    """Replace NaN/Inf samples by the mean of the finite samples in their 3x3 neighbourhood (0 if none).

    Returns the repaired tensor and the number of repaired values; warns (:class:`BufferWarning`)
    with that count when there were any. Where :func:`host_reads` forbids reading ``x`` (CUDA, the Triton
    path) the repair runs unconditionally on the device (the same values: finite samples are kept as
    they are), nothing warns and the count is a 0-dim tensor (reading it is a host synchronisation).
    """
    reads = host_reads(x)
    if reads and bool(torch.isfinite(_dense(x).sum(dtype=torch.float32))):  # one reduction in the common case
        return x, 0
    if not reads and _fused_fill(x):
        from .fill_triton import fill

        return fill(x)
    bad = ~torch.isfinite(x)
    count = bad.sum()
    if reads:
        count = int(count)
        if not count:
            return x, 0
    fixed = fill_from_neighbours(x, bad)
    if warn and reads:
        warnings.warn(f"{name}: {count} NaN/Inf value(s) repaired with the mean of their finite neighbours",
                      BufferWarning, stacklevel=3)
    return fixed, count


def _fused_fill(x: torch.Tensor) -> bool:
    """Whether :mod:`.fill_triton` may do the repair: the Triton path, a float32/16 buffer, nothing to differentiate."""
    from vision.kernels.runtime import backend_for

    return (backend_for(x) == "triton" and x.dtype in (torch.float32, torch.float16, torch.bfloat16)
            and not (x.requires_grad and torch.is_grad_enabled()))


def fill_from_neighbours(x: torch.Tensor, bad: torch.Tensor) -> torch.Tensor:
    """``x`` with its ``bad`` samples (a boolean mask broadcastable to ``x``) replaced by the mean of the good
    ones among their 3x3 neighbours inside the frame (0 if none); good samples are returned as they are."""
    if bad.shape[1] == 1 and _fused_fill(x):  # per-pixel flags: one pass in Triton (x is finite here)
        from .fill_triton import fill

        return fill(x, bad)[0]
    bad = bad.expand_as(x) if bad.shape[1] != x.shape[1] else bad
    good = (~bad).to(x.dtype)
    clean = torch.where(bad, torch.zeros_like(x), x)
    num = F.avg_pool2d(clean, 3, 1, 1, count_include_pad=False)
    den = F.avg_pool2d(good, 3, 1, 1, count_include_pad=False)
    fill = torch.where(den > 0, num / den.clamp_min(1e-12), torch.zeros_like(x))
    return torch.where(bad, fill, x)


# Fireflies: a colour sample whose light (colour minus emission, largest channel) exceeds FIREFLY_RATIO times the 0.9
# quantile of the frame's positive light while at most one of its 8 neighbours does (the bundled 1-spp frames peak
# at ~50x the quantile), or BROKEN_RATIO times it whatever its neighbours (a float overflow, a ~0 pdf), is dropped and
# refilled from its neighbours, as renderer denoisers reject fireflies: one window's least squares fit would spread
# it over the whole window as a bright square. Bright regions (a light seen without an emission buffer, the sun, up
# to BROKEN_RATIO) stay whole: their pixels have bright neighbours.
FIREFLY_RATIO = 1e3
BROKEN_RATIO = 1e8
QUANTILE_SAMPLES = 1 << 16  # the quantile reads a strided subsample of at most about this many pixels


def light_level(light: torch.Tensor) -> torch.Tensor:
    """The 0.9 quantile of the positive values of ``light`` (B, 1, H, W) per image, (B, 1, 1, 1), on the device
    (from a strided subsample); +inf where the subsample has no positive value."""
    b, _, h, w = light.shape
    step = max(1, math.ceil(math.sqrt(h * w / QUANTILE_SAMPLES)))
    sub = light[..., ::step, ::step].reshape(b, -1).float()
    sub = torch.where(sub > 0, sub, torch.full_like(sub, float("nan")))  # the quantile of the lit pixels only
    q = torch.nanquantile(sub, 0.9, dim=1)
    return torch.where(torch.isnan(q), torch.full_like(q, float("inf")), q).view(b, 1, 1, 1).to(light.dtype)


def suppress_fireflies(color: torch.Tensor, emission: torch.Tensor | None = None, name: str = "color"
                       ) -> torch.Tensor:
    """Negative colour samples clamped to 0; samples whose light (colour minus ``emission``, at the colour's size,
    largest channel) exceeds :data:`FIREFLY_RATIO` times :func:`light_level` with at most one such neighbour, or
    :data:`BROKEN_RATIO` times it, replaced by the mean of their other 3x3 neighbours. Branch-free on the device;
    where :func:`host_reads` allows (CPU) the steps with nothing to do are skipped (the same values) and one
    :class:`BufferWarning` gives the counts."""
    reads = host_reads(color)
    neg = 0
    if reads:
        # one reduction without a mask in the common case (no negative sample), the count only when needed
        neg = int((color < 0).sum()) if float(_dense(color).detach().amin()) < 0 else 0
        x = color.clamp_min(0) if neg else color
    else:
        x = color.clamp_min(0)
    light = x if emission is None else x - emission
    top = light.amax(1, keepdim=True)
    level = light_level(top)
    bright = (top > FIREFLY_RATIO * level).to(top.dtype)
    hits = 0
    # on CPU nothing bright (the broken samples are bright too) means nothing to replace: skip the 3x3 count
    if not reads or bool(bright.any()):
        lit = F.avg_pool2d(bright, 3, 1, 1, count_include_pad=True) * 9  # bright pixels in the 3x3 block, centre incl.
        hot = ((bright > 0) & (lit < 2.5)) | (top > BROKEN_RATIO * level)
        if reads:
            hits = int(hot.sum())
            if hits:
                x = fill_from_neighbours(x, hot)
        else:
            x = fill_from_neighbours(x, hot)
    if neg or hits:
        parts = ([f"{neg} negative value(s) clamped to 0"] if neg else []) + \
            ([f"{hits} extreme sample(s) (isolated light above {FIREFLY_RATIO:g} x the frame's 0.9 quantile, or any "
              f"above {BROKEN_RATIO:g} x) replaced by the mean of their neighbours"] if hits else [])
        warnings.warn(f"{name}: {'; '.join(parts)}", BufferWarning, stacklevel=3)
    return x


def _dense(t: torch.Tensor) -> torch.Tensor:
    """``t`` or its (B, H, W, C) permutation, whichever walks memory in order (what whole-tensor reductions
    want: over an HWC-backed (B, C, H, W) view they are about 5x slower)."""
    if t.dim() == 4 and not t.is_contiguous() and t.permute(0, 2, 3, 1).is_contiguous():
        return t.permute(0, 2, 3, 1)
    return t


def check_ranges(albedo: torch.Tensor | None, normal: torch.Tensor | None) -> None:
    """Raise a ValueError when albedo leaves [0, 1] or normal components leave [-1, 1] (with tolerances)."""
    if albedo is not None:
        lo, hi = ALBEDO_RANGE
        amin, amax = torch.aminmax(_dense(albedo))
        n = int(((albedo < lo) | (albedo > hi)).sum()) if float(amin) < lo or float(amax) > hi else 0
        if n:
            raise ValueError(f"albedo must lie in [0, 1]: {n} value(s) outside (min {float(albedo.min()):.4g}, "
                             f"max {float(albedo.max()):.4g}); is this a colour or emission pass passed as albedo?"
                             + (" A renderer's albedo above 1 (Cycles counts emitters and glossy tint in): map it "
                                "with vision.data.render_layers.renderer_albedo(albedo, emission), as vision "
                                "denoise does" if float(amax) > hi else ""))
    if normal is not None:
        nmin, nmax = torch.aminmax(_dense(normal))
        n = int((normal.abs() > NORMAL_RANGE).sum()) if max(-float(nmin), float(nmax)) > NORMAL_RANGE else 0
        if n:
            raise ValueError(f"normal components must lie in [-1, 1]: {n} value(s) outside (max |n| "
                             f"{float(normal.abs().max()):.4g}); pass unit normals, not 0-1 encoded or position data")


def check_sizes(buffers: dict[str, torch.Tensor], size: tuple[int, int], batch: int) -> None:
    for name, t in buffers.items():
        if t is None:
            continue
        if tuple(t.shape[-2:]) != tuple(size):
            raise ValueError(f"{name} is {t.shape[-1]}x{t.shape[-2]} (WxH) but the guides are {size[1]}x{size[0]}")
        if t.shape[0] not in (1, batch):
            raise ValueError(f"{name} has batch {t.shape[0]}, color has {batch}")


# --------------------------------------------------------------------------- signal model

def emitter_mask(emission: torch.Tensor | None, like_t: torch.Tensor) -> torch.Tensor | None:
    """1 where a pixel sees an emitter directly (any emission channel > 0), as (B, 1, H, W)."""
    if emission is None:
        return None
    top = emission[:, :1]
    for c in range(1, emission.shape[1]):  # elementwise maxima: 1.7x faster than amax(1) over HWC-backed channels
        top = torch.maximum(top, emission[:, c:c + 1])
    return (top > 0).to(like_t.dtype)


def demodulate(color: torch.Tensor, albedo: torch.Tensor | None, emission: torch.Tensor | None,
               fill_radius: int, floor: float = ALBEDO_FLOOR, mask: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split ``color`` into what the regression fits and how to put the result back together.

    Returns ``(target, factor, add)`` with ``result = factor * fitted(target) + add``:

    * ``add`` is the directly visible emission (0 without an emission buffer);
    * the target is ``(color - emission) / max(albedo, floor)``, the albedo-demodulated (irradiance-like)
      signal; the clamp keeps the division from amplifying the noise of dark channels, and is continuous
      so that the target does not jump where an albedo crosses the floor;
    * pixels that see an emitter carry the emitter's noise (a 1-spp sample either hits the light or
      not, the emission buffer is the pixel mean), so their target is replaced by the mean target of
      the emitter-free pixels within ``fill_radius``; where such a pixel has no albedo (the emitter
      itself, the sky) the factor is 0, so the result there is the emission buffer exactly.

    ``mask``: :func:`emitter_mask` of ``emission`` when the caller has it already (it is a full pass).
    """
    add = torch.zeros_like(color) if emission is None else emission.expand_as(color)
    # few passes over the frame (on CPU these steps are memory bound): scalar fills, in-place division
    target = color.clone() if emission is None else color - add
    factor = torch.ones_like(color) if albedo is None else albedo.clamp_min(floor).expand_as(color)
    target.div_(factor)
    mask = emitter_mask(emission, color) if mask is None else mask
    # the fill leaves a frame without emitter pixels as it is: skipping it is only worth a host read on CPU
    if mask is not None and (not host_reads(mask) or bool(mask.any())):
        target, factor = fill_emitters(target, factor, albedo, mask, fill_radius, floor)
    return target, factor, add


def fill_emitters(target: torch.Tensor, factor: torch.Tensor, albedo: torch.Tensor | None, mask: torch.Tensor,
                  fill_radius: int, floor: float = ALBEDO_FLOOR) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`demodulate`'s last step: at the pixels of ``mask`` (1 = sees an emitter) the target becomes the mean
    target of the emitter-free pixels within ``fill_radius``, and the factor 0 where the albedo is below
    ``floor`` (or missing)."""
    from vision.kernels import box_filter

    keep = 1 - mask
    # the mean over emitter-free pixels is box(target keep) / box(keep): the window counts cancel, and the
    # box filter costs O(1) per pixel (a 17 x 17 avg_pool2d cost 289 taps)
    num = box_filter(target * keep, fill_radius)
    den = box_filter(keep.expand(-1, 1, -1, -1).contiguous(), fill_radius)
    if num.requires_grad:
        fill = (num / den.clamp_min(1e-12)).masked_fill(den <= 0, 0.0)
    else:
        fill = num.div_(den.clamp_min(1e-12)).masked_fill_(den <= 0, 0.0)
    hit = mask > 0
    target = torch.where(hit, fill, target)
    return target, factor.masked_fill(hit & (albedo < floor) if albedo is not None else hit, 0.0)


# --------------------------------------------------------------------------- guide features

# Guides in the order they are taken until the regression's 8 feature channels are full.
GUIDE_ORDER = ("normal", "depth", "ao", "albedo", "position")


def guide_list(available: Iterable[str], max_channels: int = 8) -> list[str]:
    """The guide buffers the regression uses, in :data:`GUIDE_ORDER`, whole buffers up to ``max_channels``."""
    chosen, used = [], 0
    have = set(available)
    for name in GUIDE_ORDER:
        if name in have and used + CHANNELS[name] <= max_channels:
            chosen.append(name)
            used += CHANNELS[name]
    return chosen


def log_depth(depth: torch.Tensor) -> torch.Tensor:
    """``log(depth)``, where pixels with no surface (depth <= 0, e.g. the sky) take the frame's largest depth.
    On the CPU path, (B, 1, H, W) float32 depth takes one numba pass instead of four tensor ops
    (:mod:`.log_cpu`)."""
    from vision.kernels.runtime import jit

    if depth.dim() == 4 and depth.shape[1] == 1 and cpu_path(depth) and jit.enabled(depth):
        from . import log_cpu

        return log_cpu.log_depth(depth)
    far = depth.amax()  # the largest valid depth, when there is one (invalid ones are <= 0)
    far = torch.where(far > 0, far, torch.ones_like(far))  # on the device: no host read
    return torch.log(torch.where(depth > 0, depth, far).clamp_min(1e-6))


def raw_features(buffers: dict[str, torch.Tensor | None]) -> tuple[torch.Tensor | None, list[str]]:
    """Concatenate the guide buffers into (B, K, H, W) before standardisation.

    Depth becomes log-depth (radiance varies smoothly in log-depth across a wide depth range, and one
    far pixel no longer dominates the variance); pixels with no surface (depth <= 0, e.g. the sky) take
    the largest depth of the frame.
    """
    names = guide_list(k for k, v in buffers.items() if v is not None)
    parts = [log_depth(buffers[name]) if name == "depth" else buffers[name] for name in names]
    if not parts:
        return None, []
    b = max(p.shape[0] for p in parts)
    return torch.cat([p.expand(b, -1, -1, -1) for p in parts], 1), names


def feature_stats(f: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image and channel mean and standard deviation (floored), shapes (B, K, 1, 1)."""
    mean = f.mean((2, 3), keepdim=True)
    std = f.std((2, 3), keepdim=True, unbiased=False).clamp_min(1e-3)
    return mean, std


# --------------------------------------------------------------------------- channel names

# field -> accepted layer names (lower case), best first; matched against the full layer name and its
# last dotted component (so "ViewLayer.Denoising Albedo" matches "denoising albedo"). Blender's
# "Denoising" passes come first: they are the ones made for denoisers (the sky's depth is 0, normals
# and albedo are taken past near-specular hits), where "Normal" and "Depth" are the raw first hit.
# "Noisy Image" precedes "Combined": with Blender's own denoiser on, Combined is already denoised.
ALIASES = {
    "color": ("", "noisy image", "combined", "image", "color", "colour", "rgb", "rgba", "beauty", "my_path"),
    "albedo": ("denoising albedo", "albedo", "diffcol", "diffuse color", "diffuse_color"),
    "normal": ("denoising normal", "normal", "normals", "sh_normal", "nn", "shading_normal", "n"),
    "depth": ("denoising depth", "depth", "dd", "z"),
    "position": ("position", "world_position", "pp", "p"),
    "ao": ("ao", "ambient occlusion", "ambient_occlusion", "occlusion"),
    "emission": ("emission", "emit", "emitter", "emissive"),
    "reference": ("reference", "ref", "clean"),
}
_TRIPLES = (("R", "G", "B"), ("X", "Y", "Z"), ("r", "g", "b"), ("x", "y", "z"), ("U", "V", "W"))
_SINGLES = ("Z", "Y", "T", "V", "R", "X", "A")


def _split(name: str) -> tuple[str, str]:
    return tuple(name.rsplit(".", 1)) if "." in name else ("", name)


def find_fields(channel_names: Iterable[str]) -> dict[str, list[str]]:
    """Map EXR channel names to denoiser fields: ``{"albedo": ["albedo.R", "albedo.G", "albedo.B"], ...}``.

    Fields not found are absent. A 3-channel field needs R G B or X Y Z components of one layer; a
    1-channel field takes Z, Y, T, V, R, X or A of its layer, in that order (a single unnamed channel
    such as Mitsuba's ``dd.T`` or Blender's ``Denoising Depth.Z``).
    """
    layers: dict[str, dict[str, str]] = {}
    for full in channel_names:
        layer, comp = _split(str(full))
        layers.setdefault(layer, {})[comp] = full
    found: dict[str, list[str]] = {}
    claimed: set[str] = set()
    for field, aliases in ALIASES.items():
        n = CHANNELS[field]
        for alias in aliases:
            hit = None
            for layer, comps in layers.items():
                if layer in claimed:
                    continue
                key = layer.lower()
                tail = key.rsplit(".", 1)[-1]
                if alias != key and alias != tail:
                    continue
                if alias == "" and key != "":
                    continue
                if n == 3:
                    for triple in _TRIPLES:
                        if all(c in comps for c in triple):
                            hit = (layer, [comps[c] for c in triple])
                            break
                else:
                    for c in _SINGLES:
                        if c in comps:
                            hit = (layer, [comps[c]])
                            break
                if hit:
                    break
            if hit:
                claimed.add(hit[0])
                found[field] = hit[1]
                break
    return found
