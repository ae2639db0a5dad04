"""Render buffers by name: the one table of what a renderer writes and the denoiser reads.

:data:`TABLE` holds one :class:`Field` per buffer (name, channels, the renderer layer names it is found
under, the component sets accepted, its role and a one-line meaning). Every other list of buffer names in
the package is derived from it:

* :data:`NAMES`: every field, in table order; :data:`CHANNELS`: field -> channel count;
* :data:`GUIDES`: the guide buffers ``vision.denoise.denoise`` takes (albedo, normal, depth, ao, emission,
  position); :data:`INPUTS`: ``color`` and those guides, what one frame passes to the denoiser;
* :data:`REGRESSION_ORDER`: the guides the local regression reads, in the order they are taken while its
  :data:`FEATURE_CHANNELS` feature channels last (normal, depth, ao, albedo, position);
* :data:`FLNR_LAYOUT`: the fixed layout of FLNR's guide channels, the regression order filled to
  :data:`FEATURE_CHANNELS` (normal, depth, ao, albedo); :data:`FLNR_GUIDES`: the guides FLNR reads, its
  layout plus the buffers that split the colour (albedo, emission), in table order.

:func:`find_fields` maps the channel names of a (multi-layer) EXR to fields: the names ``vision
render-scenes`` writes (see :data:`vision.data.exr.LAYERS`), Blender Cycles passes (``Combined`` / ``Noisy
Image``, ``Denoising Albedo``, ``Denoising Normal``, ``Denoising Depth``, ``Emit``, ``AO``, ``Vector``, ``IndexOB``, with
or without a view-layer prefix such as ``ViewLayer.``) and the usual Mitsuba 3 AOV names (``albedo``,
``sh_normal`` / ``nn``, ``depth`` / ``dd``, ``position`` / ``pp``; colour in the root ``R G B`` channels).
Pure Python: importing it loads neither NumPy nor torch.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# component sets a field accepts, best first: all of one set must be channels of the same layer
TRIPLES = (("R", "G", "B"), ("X", "Y", "Z"), ("r", "g", "b"), ("x", "y", "z"), ("U", "V", "W"))
# a 1-channel field takes one of these (a single unnamed channel such as Mitsuba's dd.T, Blender's Depth.Z)
SINGLES = (("Z",), ("Y",), ("T",), ("V",), ("R",), ("X",), ("A",))
QUADS = (("X", "Y", "Z", "W"), ("R", "G", "B", "A"))
# the local regression's feature channels: guides are taken whole in REGRESSION_ORDER until they are full
FEATURE_CHANNELS = 8


@dataclass(frozen=True)
class Field:
    """One render buffer.

    ``aliases``: accepted layer names, lower case, best first, matched against a layer's full name and its
    last dotted component (so ``ViewLayer.Denoising Albedo`` matches ``denoising albedo``); ``""`` is the
    root layer. ``components``: the channel sets accepted within a layer, best first. ``role``: ``color``
    (the noisy radiance), ``guide`` (a buffer the denoiser takes), ``reference`` (a converged target) or
    ``motion``. ``feature``: rank among the regression's guide features (None: not one). ``signal``: the
    buffer splits the colour before the fit (albedo divides, emission is subtracted).
    """

    name: str
    channels: int
    aliases: tuple[str, ...]
    components: tuple[tuple[str, ...], ...]
    role: str
    meaning: str
    feature: int | None = None
    signal: bool = False


# Blender's "Denoising" passes come first: they are the ones made for denoisers (the sky's depth is 0, normals and
# albedo are taken past near-specular hits), where "Normal" and "Depth" are the raw first hit. "Noisy Image"
# precedes "Combined": with Blender's own denoiser on, Combined is already denoised. No alias belongs to two fields
# (tests/test_fields.py), so the order of the fields never decides which one claims a layer.
TABLE: tuple[Field, ...] = (
    Field("color", 3, ("", "noisy image", "combined", "image", "color", "colour", "rgb", "rgba", "beauty",
                       "my_path"), TRIPLES, "color", "noisy linear HDR radiance to denoise"),
    Field("albedo", 3, ("denoising albedo", "albedo", "diffcol", "diffuse color", "diffuse_color"), TRIPLES,
          "guide", "reflectance at the first (non-specular) hit, in [0, 1]", feature=3, signal=True),
    Field("normal", 3, ("denoising normal", "normal", "normals", "sh_normal", "nn", "shading_normal", "n"),
          TRIPLES, "guide", "shading normal, unit length", feature=0),
    Field("depth", 1, ("denoising depth", "depth", "dd", "z"), SINGLES, "guide",
          "distance to the first hit; 0 where no surface", feature=1),
    Field("ao", 1, ("ao", "ambient occlusion", "ambient_occlusion", "occlusion"), SINGLES, "guide",
          "ambient occlusion, 1 = open", feature=2),
    Field("emission", 3, ("emission", "emit", "emitter", "emissive"), TRIPLES, "guide",
          "directly visible emitted radiance (pixel mean)", signal=True),
    Field("position", 3, ("position", "world_position", "pp", "p"), TRIPLES, "guide",
          "world-space first-hit position", feature=4),
    Field("reference", 3, ("reference", "ref", "clean"), TRIPLES, "reference",
          "converged radiance of the same frame"),
    Field("motion", 4, ("vector", "motion", "motion_vector", "motionvector", "mv"), QUADS, "motion",
          "screen-space motion in pixels: X,Y towards the previous frame, Z,W towards the next (Cycles' "
          "convention, tested by the temporal denoiser)"),
    Field("index", 1, ("indexob", "object index", "object_index", "objectindex", "indexma", "material index",
                       "segment", "instance", "instance_id"), (("X",), ("id",), ("Y",), ("R",), ("V",), ("Z",)),
          "index", "object (or material) id per pixel: pixels of different ids show different surfaces (the "
          "temporal denoiser keeps no history across them)"),
)

BY_NAME: dict[str, Field] = {f.name: f for f in TABLE}
NAMES: tuple[str, ...] = tuple(BY_NAME)
CHANNELS: dict[str, int] = {f.name: f.channels for f in TABLE}
ALIASES: dict[str, tuple[str, ...]] = {f.name: f.aliases for f in TABLE}
GUIDES: tuple[str, ...] = tuple(f.name for f in TABLE if f.role == "guide")
INPUTS: tuple[str, ...] = tuple(f.name for f in TABLE if f.role in ("color", "guide"))
REGRESSION_ORDER: tuple[str, ...] = tuple(f.name for f in sorted((f for f in TABLE if f.feature is not None),
                                                                  key=lambda f: f.feature))


def guide_list(available: Iterable[str], max_channels: int = FEATURE_CHANNELS) -> list[str]:
    """The guide buffers the regression uses, in :data:`REGRESSION_ORDER`, whole buffers up to ``max_channels``."""
    chosen, used = [], 0
    have = set(available)
    for name in REGRESSION_ORDER:
        if name in have and used + CHANNELS[name] <= max_channels:
            chosen.append(name)
            used += CHANNELS[name]
    return chosen


FLNR_LAYOUT: tuple[str, ...] = tuple(guide_list(REGRESSION_ORDER))
FLNR_GUIDES: tuple[str, ...] = tuple(g for g in GUIDES if g in FLNR_LAYOUT or BY_NAME[g].signal)


def _split(name: str) -> tuple[str, str]:
    return tuple(name.rsplit(".", 1)) if "." in name else ("", name)


def find_fields(channel_names: Iterable[str]) -> dict[str, list[str]]:
    """Map EXR channel names to fields: ``{"albedo": ["albedo.R", "albedo.G", "albedo.B"], ...}``.

    Fields not found are absent. A field takes the first of its component sets (:attr:`Field.components`)
    whose channels are all in one layer named by one of its aliases: a 3-channel field R G B or X Y Z (of an
    RGBA layer, R G B), a 1-channel field one of Z, Y, T, V, R, X, A in that order (a single unnamed channel
    such as Mitsuba's ``dd.T`` or Blender's ``Denoising Depth.Z``), a 4-channel field (``motion``: Cycles'
    ``Vector``) X Y Z W or R G B A. A layer goes to one field at most.
    """
    layers: dict[str, dict[str, str]] = {}
    for full in channel_names:
        layer, comp = _split(str(full))
        layers.setdefault(layer, {})[comp] = full
    found: dict[str, list[str]] = {}
    claimed: set[str] = set()
    for field in TABLE:
        for alias in field.aliases:
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
                for subset in field.components:
                    if all(c in comps for c in subset):
                        hit = (layer, [comps[c] for c in subset])
                        break
                if hit:
                    break
            if hit:
                claimed.add(hit[0])
                found[field.name] = hit[1]
                break
    return found
