"""Renderer output files as the denoiser reads them, and the file a compositor gets back.

Reading (:func:`read_render_file`). A frame is one file: an OpenEXR written by ``vision render-scenes``,
Blender Cycles (multi-layer, any number of view layers, half or full float) or Mitsuba (root ``R G B
A`` plus AOV layers), single- or multi-part (parts are merged, written back as one), or a PFM as Open
Image Denoise uses. Channels are grouped by view layer (the
first part of a three-part Blender name ``ViewLayer.Denoising Albedo.R``; everything else is one
unnamed layer) and each layer that holds a colour is denoised on its own passes, found by name with
:func:`vision.data.fields.find_fields`. Buffers may also come from separate files (EXR or PFM). Cycles'
``Vector`` pass, when present, is read as ``motion`` (4 channels; the denoiser of one frame ignores it).

What renderers write is brought to the denoiser's conventions here, so real files are not refused:

* **albedo above 1.** Cycles adds the emitted colour into ``Denoising Albedo`` (values up to the lamp's
  strength on an emitter) and sums the albedos of a surface's layered closures (diffuse, specular, clearcoat,
  sheen: Blender's default Principled BSDF reaches 1.74 at grazing angles, a glossy one about 1.03). Where a
  pixel sees an emitter and the emission is known, the emission is taken out of the albedo; then albedo is
  clamped to [0, 1] for demodulation. Only albedo above :data:`SURFACE_ALBEDO` that no emission explains
  (more than layered surfaces reach: a lamp's light, which cannot be kept apart from what it lights) gives
  a note.
* **depth of the sky.** Depth at or beyond :data:`NO_SURFACE_DEPTH` (Cycles' ``Depth`` pass writes
  1e10) or infinite means no surface, which the denoiser spells 0.
* **Blender's compositor output** (``Composite.Combined`` beside the view layers) is post-processed: it
  passes through, replaced only where it is a bit-exact copy of a view layer's noisy colour.

Writing (:func:`output_channels`): the denoised RGB replaces the beauty of its view layer (root ``R G B``,
or Blender's ``Combined``, also when the noisy colour came from ``Noisy Image``), alpha and every other
channel pass through in their stored type unless only the RGB is asked for; ``half`` writes the
denoised RGB and alpha as float16.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vision.io import check_exr_header

from .exr import EXR_MAGIC, copyable_header, describe_bad_file, read_exr_part_headers, read_exr_parts
from .fields import CHANNELS, REGRESSION_ORDER, RENDER_PASSES, SAMPLE_COUNT_KEYS, SEQUENCE, find_fields
from .pfm import PFM_MAGIC, read_pfm

# depths at or beyond this are "no surface": renderers write 1e10 (Cycles) or FLT_MAX for the sky
NO_SURFACE_DEPTH = 1e9
# albedo up to this is a glossy surface's tint (Cycles writes about 1.03): no emission is taken out below it
GLOSSY_ALBEDO = 1.05
# albedo up to this is a surface's layered closures, summed by Cycles (diffuse and specular each up to 1, plus
# clearcoat and sheen; the default Principled BSDF reaches 1.74): clamped without a note. Above it, an emitter.
SURFACE_ALBEDO = 2.5
HALF_MAX = float(np.finfo(np.float16).max)


@dataclass
class Layer:
    """One view layer to denoise: its buffers and where each came from and goes to."""

    name: str                                   # view layer ("" when the file has none)
    buffers: dict[str, np.ndarray]              # field -> float32 (H, W, C), in the denoiser's conventions
    sources: dict[str, str]                     # field -> channels or file it was read from
    beauty: list[str]                           # the three channels the denoised RGB is written to
    alpha: str | None = None                    # the alpha channel that goes with the beauty
    copies: list[list[str]] = field(default_factory=list)  # other RGB channels that held the same noisy colour
    notes: list[str] = field(default_factory=list)  # adjustments that lost information, one line each


@dataclass
class RenderFile:
    path: Path
    channels: dict[str, np.ndarray]             # every stored channel, in its stored type
    header: dict                                # the attributes worth copying to the output
    layers: list[Layer]
    # where the pixels lie on the canvas (a crop's data window inside the display window), copied to an
    # output of the same size so a compositor places it where the input was
    windows: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- files

def file_kind(path) -> str:
    """``"exr"`` or ``"pfm"`` from the first bytes; a ValueError naming the file for anything else."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    with open(path, "rb") as f:
        head = f.read(4)
    if head == EXR_MAGIC:
        return "exr"
    if head[:2] in PFM_MAGIC and head[2:3].isspace():
        return "pfm"
    raise ValueError(describe_bad_file(path))


def check_readable(path) -> None:
    """Fail early, with one line naming the file, on what cannot be a frame (empty, not EXR/PFM, bad header, a data
    window of any part over :func:`vision.io.max_pixels`, refused from the headers before any pixel is decoded)."""
    if file_kind(path) == "exr":
        check_exr_header(path, read_exr_part_headers(path))  # a damaged header: the reader's line naming the file


WINDOWS = ("dataWindow", "displayWindow", "pixelAspectRatio", "screenWindowCenter", "screenWindowWidth")


def read_channels(path, windows: dict | None = None) -> tuple[dict[str, np.ndarray], dict]:
    """Every channel of an EXR or PFM file (a PFM gives ``R G B`` or ``Y``) and its copyable header (the first
    part's); ``windows``, when given, receives the EXR's :data:`WINDOWS` attributes. An EXR with any part over the
    pixel limit is refused from its headers before any pixel is decoded."""
    if file_kind(path) == "pfm":
        img = read_pfm(path)
        names = "RGB" if img.shape[2] == 3 else "Y"
        return {c: np.ascontiguousarray(img[..., k]) for k, c in enumerate(names)}, {}
    headers = read_exr_part_headers(path)
    check_exr_header(path, headers)
    header = headers[0]
    if windows is not None:
        windows.update({k: header[k] for k in WINDOWS if k in header})
    return read_exr_parts(path), copyable_header(header)


# --------------------------------------------------------------------------- names

def view_layers(names: Iterable[str]) -> dict[str, list[str]]:
    """Channel names by view layer: Blender's ``Layer.Pass.Comp`` under ``Layer``, all others under ``""``."""
    groups: dict[str, list[str]] = {}
    for name in names:
        parts = str(name).split(".")
        groups.setdefault(parts[0] if len(parts) >= 3 else "", []).append(str(name))
    return groups


def compact(names: list[str]) -> str:
    """``["L.Albedo.R", "L.Albedo.G", "L.Albedo.B"]`` -> ``"L.Albedo.RGB"`` (how the one-line summary names them)."""
    heads = {n.rsplit(".", 1)[0] if "." in n else "" for n in names}
    if len(heads) != 1:
        return ",".join(names)
    head = heads.pop()
    comps = [n.rsplit(".", 1)[-1] for n in names]
    joined = "".join(comps) if all(len(c) == 1 for c in comps) else ",".join(comps)
    return f"{head}.{joined}" if head else joined


def _layer_of(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


# Blender's compositor output in a multilayer file: post-processed, so never denoised as a render (only
# replaced when it is a plain copy of a view layer's noisy colour)
COMPOSITE = "Composite"


def _copies(stored: Mapping[str, np.ndarray], group: list[str], color: list[str]) -> list[list[str]]:
    """Other RGB layers holding exactly the noisy colour: Mitsuba's aov integrator writes its nested
    integrator's image twice, as root ``R G B`` and as ``<name>.R G B A`` (which carries the alpha);
    Blender's ``Composite.Combined`` is the view layer's Combined when the compositor only passes it on."""
    found = []
    for layer in sorted({_layer_of(n) for n in group} - {_layer_of(color[0])}):
        names = [f"{layer}.{c}" if layer else c for c in "RGB"]
        if all(n in stored for n in names) and all(
                stored[n].dtype == stored[c].dtype and np.array_equal(stored[n], stored[c], equal_nan=True)
                for n, c in zip(names, color)):
            found.append(names)
    return found


def _beauty_and_alpha(group: list[str], color: list[str], copies: list[list[str]]) -> tuple[list[str], str | None]:
    """Where the denoised RGB goes: the layer's ``Combined`` when the colour is Blender's ``Noisy Image``
    (Combined is what compositors read; with Blender's own denoiser on it holds that result), else the
    colour's own channels. Alpha: the beauty layer's ``A``, else the colour layer's, else a copy's."""
    beauty = list(color)
    source = _layer_of(color[0])
    if source.rsplit(".", 1)[-1].lower() == "noisy image":
        combined = source[: -len("noisy image")] + "Combined"
        if all(f"{combined}.{c}" in group for c in "RGB"):
            beauty = [f"{combined}.{c}" for c in "RGB"]
    for layer in (_layer_of(beauty[0]), source, *(_layer_of(c[0]) for c in copies)):
        alpha = f"{layer}.A" if layer else "A"
        if alpha in group:
            return beauty, alpha
    return beauty, None


# --------------------------------------------------------------------------- conventions

def samples_per_pixel(header: Mapping, layer: str = "") -> tuple[float | None, str]:
    """The samples per pixel a view layer's colour was rendered with, from a file's header, and where it was
    found: Blender Cycles writes ``cycles.<ViewLayer>.samples`` (the most samples of a pixel under adaptive
    sampling), ``vision render-scenes`` writes ``vision.spp``. ``(None, reason)`` when the header has neither or
    the value is not a count >= 1.

    Example:
        >>> samples_per_pixel({"cycles.ViewLayer.samples": "64"}, "ViewLayer")
        (64.0, 'EXR header cycles.ViewLayer.samples')
    """
    cycles, *others = SAMPLE_COUNT_KEYS  # the table's header attributes of the sample count, Cycles' first
    keys = [cycles.format(layer=layer)] if layer else []
    if not layer:  # a file without view layers: the one Cycles layer it names, if only one
        head, tail = cycles.split("{layer}")
        keys += [k for k in header if k.startswith(head) and k.endswith(tail)][:1]
    for key in [*keys, *others]:
        if key in header:
            try:
                value = float(str(header[key]).strip())
            except ValueError:
                return None, f"EXR header {key} is {header[key]!r}, not a number"
            if not (math.isfinite(value) and value >= 1):
                return None, f"EXR header {key} is {header[key]!r}, not a count >= 1"
            return value, f"EXR header {key}"
    return None, "not in the EXR header"


def no_surface_depth(depth: np.ndarray) -> np.ndarray:
    """Depth with the sky (infinite, or at least :data:`NO_SURFACE_DEPTH`) as 0, the denoiser's "no surface"."""
    sky = np.isinf(depth) | (depth >= NO_SURFACE_DEPTH)
    return np.where(sky, np.float32(0), depth).astype(np.float32) if sky.any() else depth


def environment_as_emission(bufs: dict[str, np.ndarray]) -> None:
    """Where a pixel sees no surface (depth 0 after :func:`no_surface_depth`) and the renderer wrote a colour into
    its albedo, the renderer is saying the rays missed everything and returned the environment: Cycles' Denoising
    Albedo holds the sky's colour there (often above 1). That colour is known exactly, with nothing to denoise, so
    it becomes emission (kept as it is) with albedo 0, instead of a "surface" with the sky as its albedo.
    Renderers that write albedo 0 for the sky (Mitsuba) are left as they are. Only when the colour has the
    guides' size (not for half-resolution colour). In place."""
    albedo, depth, color = bufs.get("albedo"), bufs["depth"], bufs["color"]
    if albedo is None or albedo.shape[:2] != depth.shape[:2] or color.shape[:2] != depth.shape[:2]:
        return
    sky = (depth[..., 0] == 0) & (albedo.max(axis=-1) > 0)
    if not sky.any():
        return
    emission = bufs.get("emission")
    base = np.zeros_like(color) if emission is None else emission
    bufs["emission"] = np.where(sky[..., None], color, base).astype(np.float32)
    bufs["albedo"] = np.where(sky[..., None], np.float32(0), albedo).astype(np.float32)


def renderer_albedo(albedo: np.ndarray, emission: np.ndarray | None, emission_pass: bool | None = None
                    ) -> tuple[np.ndarray, str | None]:
    """Albedo in [0, 1] for demodulation, and a note when that lost information.

    Where the albedo exceeds :data:`GLOSSY_ALBEDO` and the pixel sees an emitter, the renderer has counted
    the emitted colour in (Cycles does): the emission is subtracted first. The note is only for albedo above
    :data:`SURFACE_ALBEDO` that no emission explains; it asks for the emission pass unless ``emission_pass`` says the
    file has one (default: ``emission`` is given; the sky's colour becomes emission without a pass). Negative values
    are left for the denoiser's range check (they are a wrong buffer, not a renderer's convention).

    Example (float32 (H, W, 3) in and out; Cycles' default Principled BSDF at a grazing angle):
        >>> renderer_albedo(np.full((1, 1, 3), 1.74, np.float32), None)[1] is None
        True
    """
    top = albedo.max(axis=-1)
    high = top > GLOSSY_ALBEDO
    if not high.any():
        return (np.minimum(albedo, np.float32(1)) if (top > 1).any() else albedo), None
    out = albedo
    lit = np.zeros_like(high)
    if emission is not None:
        lit = high & (emission.max(axis=-1) > 0)
        if lit.any():
            out = np.where(lit[..., None], np.maximum(albedo - emission, 0), albedo)
    lost = high & ~lit & (top > SURFACE_ALBEDO)
    out = np.minimum(out, np.float32(1)).astype(np.float32)
    if not lost.any():
        return out, None
    if emission_pass is None:
        emission_pass = emission is not None
    fix = ("the emission pass does not explain it" if emission_pass else "give the emission pass (Blender: View "
           "Layer Properties > Passes > Light > Emission) to keep emitters exact")
    return out, (f"albedo above {SURFACE_ALBEDO:g} (more than a surface's layered closures reach: an emitter's "
                 f"light, which Cycles adds to its Denoising Albedo) at {int(lost.sum())} pixel(s) (max "
                 f"{float(top[lost].max()):.4g}): clamped to 1 for demodulation, so their light may be smoothed "
                 f"into their surroundings; {fix}")


# --------------------------------------------------------------------------- reading

def _stack(stored: Mapping[str, np.ndarray], names: list[str]) -> np.ndarray:
    return np.stack([np.asarray(stored[n], dtype=np.float32) for n in names], axis=-1)


def read_buffer_file(path: Path, name: str) -> tuple[np.ndarray, str]:
    """One buffer (``albedo``, ``normal``, ...) from a separate EXR or PFM file, and where it was found."""
    other, _ = read_channels(path)
    found = find_fields(other)
    names = found.get(name) or found.get("color")
    if names is None and len(other) == 1:
        names = list(other)
    if names is None and CHANNELS[name] == 1:
        names = next(([v[0]] for k, v in found.items() if k not in SEQUENCE), None)  # another field's first channel
    if names is None:
        raise ValueError(f"{path}: no {name} channels found; channels: {', '.join(sorted(other))}")
    arr = _stack(other, names)
    if CHANNELS[name] == 1:
        arr, names = arr[..., :1], names[:1]
    return arr, f"{path}:{compact(names)}"


def read_render_file(path, extra: Mapping[str, Path] | None = None) -> RenderFile:
    """Read a frame and split it into the view layers to denoise (see the module docstring).

    ``extra``: field -> a separate file to read that buffer from, for every layer of the frame.
    """
    path = Path(path)
    windows: dict = {}
    stored, header = read_channels(path, windows)
    separate = {name: read_buffer_file(Path(p), name) for name, p in (extra or {}).items()}
    layers = []
    groups = view_layers(stored)
    composite = groups.pop(COMPOSITE, None) if len(groups) > 1 else None
    for layer_name, group in groups.items():
        fields = find_fields(group)
        if "color" not in fields:
            continue
        bufs = {"color": _stack(stored, fields["color"])}
        sources = {"color": compact(fields["color"])}
        for name in RENDER_PASSES:  # colour, the guides, motion and the object index, when the file has them
            if name == "color":
                continue
            if name in separate:
                bufs[name], sources[name] = separate[name]
            elif name in fields:
                bufs[name], sources[name] = _stack(stored, fields[name]), compact(fields[name])
        copies = _copies(stored, group + (composite or []), fields["color"])
        beauty, alpha = _beauty_and_alpha(group, fields["color"], copies)
        layer = Layer(layer_name, bufs, sources, beauty, alpha, [c for c in copies if c != beauty])
        if "depth" in bufs:
            bufs["depth"] = no_surface_depth(bufs["depth"])
            environment_as_emission(bufs)
        if "albedo" in bufs:
            bufs["albedo"], note = renderer_albedo(bufs["albedo"], bufs.get("emission"), "emission" in sources)
            if note:
                layer.notes.append((f"view layer {layer_name}: " if layer_name else "") + note)
        layers.append(layer)
    if not layers:
        raise ValueError(f"{path}: no colour channels found (looked for R G B, Combined.*, Noisy Image.*, ...); "
                         f"channels: {', '.join(sorted(stored))}")
    return RenderFile(path, stored, header, layers, windows)


def describe(rf: RenderFile, only_rgb: bool = False) -> str:
    """One line: which channels were used for what, where the result goes, what passes through."""
    parts = []
    for layer in rf.layers:
        used = ", ".join(f"{k} <- {v}" for k, v in layer.sources.items())
        alpha = f", alpha {layer.alpha}" if layer.alpha else ""
        dest = " + ".join(compact(names) for names in [layer.beauty, *layer.copies])
        lights = "" if "emission" in layer.sources else (" (no emission buffer: lights in view get smoothed into "
                                                          "their surroundings; give one, e.g. --emission)")
        parts.append((f"[{layer.name}] " if layer.name else "") + f"{used}{lights}; denoised -> {dest}{alpha}")
    written = {c for layer in rf.layers for c in sum(layer.copies, layer.beauty) + ([layer.alpha] if layer.alpha else [])}
    rest = len([c for c in rf.channels if c not in written])
    tail = f"; {rest} other channel(s) " + ("dropped (--only-rgb)" if only_rgb else "passed through") if rest else ""
    return " | ".join(parts) + tail


def missing_guides(rf: RenderFile) -> str | None:
    """A warning for layers denoised without any guide buffer (the regression then can only blur), else None."""
    # the guides the regression reads (emission alone splits the colour but guides nothing)
    bare = [layer.name or "the image" for layer in rf.layers
            if not any(g in layer.sources for g in REGRESSION_ORDER)]
    if not bare:
        return None
    return (f"no guide buffers ({', '.join(REGRESSION_ORDER)}) for {', '.join(bare)}: the regression can only "
            "blur; render the Denoising Data passes (Blender) or albedo/normal/depth AOVs, or give them with "
            "--albedo/--normal/--depth")


# --------------------------------------------------------------------------- writing

def _half(x: np.ndarray) -> tuple[np.ndarray, int]:
    """float16 with values beyond its range clamped to its largest finite value (not inf), and their count."""
    x = np.asarray(x, dtype=np.float32)
    over = int((np.abs(x) > HALF_MAX).sum())
    return np.clip(x, -HALF_MAX, HALF_MAX).astype(np.float16), over


def output_channels(rf: RenderFile, results: list[np.ndarray], only_rgb: bool = False, half: bool = False
                    ) -> tuple[dict[str, np.ndarray], list[str]]:
    """The channels of the output file, and notes on anything that could not be kept as it was.

    ``results``: the denoised RGB of each layer of ``rf.layers`` as float32 (H, W, 3).
    """
    notes: list[str] = []
    size = results[0].shape[:2]
    out: dict[str, np.ndarray] = {}
    if not only_rgb:
        out = {n: a for n, a in rf.channels.items() if a.shape == size}
        written = {c for layer in rf.layers for c in sum(layer.copies, layer.beauty) + [layer.alpha]}
        dropped = len([n for n in rf.channels if n not in out and n not in written])
        if dropped:
            notes.append(f"{dropped} channel(s) at the colour's resolution were not passed through: the output "
                         f"has the guides' size {size[0]}x{size[1]} (HxW)")
    clamped = 0
    for layer, rgb in zip(rf.layers, results):
        if layer.alpha:
            alpha = rf.channels[layer.alpha]
            if alpha.shape != size:  # colour (and its alpha) at 1/u of the guides: each alpha sample covers u x u
                uy, ux = size[0] // alpha.shape[0], size[1] // alpha.shape[1]
                alpha = np.repeat(np.repeat(alpha, uy, 0), ux, 1)
            out[layer.alpha] = _half(alpha)[0] if half and alpha.dtype.kind == "f" else alpha
        for names in [layer.beauty, *layer.copies]:
            for k, name in enumerate(names):
                if half:
                    out[name], over = _half(rgb[..., k])
                    clamped += over if names is layer.beauty else 0
                else:
                    out[name] = np.ascontiguousarray(rgb[..., k], dtype=np.float32)
    if clamped:
        notes.append(f"--half: {clamped} value(s) beyond +-{HALF_MAX:g} clamped to it")
    return out, notes
