"""Render buffers by name: the one table of what a renderer writes and the denoiser reads.

:data:`TABLE` holds one :class:`Field` per buffer: its name, channel count, role, meaning and units, the renderer
layer names it is found under and the component sets accepted there, the channels and type ``vision
render-scenes`` writes it as, the Cycles pass that holds it and where Blender turns that pass on. Every other list
of buffer names in the package is derived from it (``tests/test_buffer_table.py`` checks each one, and fails on a
literal list of buffer names elsewhere):

* :data:`NAMES`: every field, in table order; :data:`CHANNELS`: field -> channel count;
* :data:`GUIDES`: the guide buffers ``vision.denoise.denoise`` takes, as its keywords (albedo, normal, depth, ao,
  emission, position); :data:`INPUTS`: ``color`` and those guides, what one frame passes to the denoiser;
  :data:`SCORED`: the inputs and the ``reference`` a benchmark scores them against;
* :data:`REGRESSION_ORDER`: the guides the local regression reads, in the order they are taken while its
  :data:`FEATURE_CHANNELS` feature channels last (normal, depth, ao, albedo, position);
* :data:`FLNR_LAYOUT`: the fixed layout of FLNR's guide channels, the regression order filled to
  :data:`FEATURE_CHANNELS` (normal, depth, ao, albedo); :data:`FLNR_GUIDES`: the guides FLNR reads, its
  layout plus the buffers that split the colour (albedo, emission), in table order; :data:`FLNR_TRAINING`: the
  colour, its reference and those guides, what a training frame holds;
* :data:`SIGNAL`: the buffers that split the colour before the fit (albedo divides, emission is subtracted);
  :data:`RADIANCE`: the buffers in units of radiance, which an exposure scales; :data:`BOUNDED`: the buffers whose
  values lie in a fixed range; :data:`UNIT_INTERVAL`: those in [0, 1] (albedo, ao);
* :data:`RENDER_PASSES`: what one view layer of a renderer's file is read as (colour, guides, motion, index);
  :data:`SEQUENCE`: the buffers only a sequence denoiser reads (motion, index);
* ``vision.data.exr.LAYERS``: field -> (channel names, type, meaning) of a ``vision render-scenes`` frame;
  :data:`ID_LAYERS`: the fields it stores as integer ids;
* :data:`IN_BLENDER`: field -> where Blender (3.4 and later) turns its pass on; :data:`SAMPLE_COUNT_KEYS`: the
  EXR header attributes that hold the sample count.

:func:`find_fields` maps the channel names of a (multi-layer) EXR to fields: the names ``vision
render-scenes`` writes, Blender Cycles passes (``Combined`` / ``Noisy Image``, ``Denoising Albedo``, ``Denoising
Normal``, ``Denoising Depth``, ``Emit``, ``AO``, ``Vector``, ``IndexOB``, with or without a view-layer prefix such as
``ViewLayer.``) and the usual Mitsuba 3 AOV names (``albedo``, ``sh_normal`` / ``nn``, ``depth`` / ``dd``,
``position`` / ``pp``; colour in the root ``R G B`` channels).
Pure Python: importing it loads neither NumPy nor torch.

Example:
    >>> from vision.data.fields import BY_NAME, GUIDES
    >>> GUIDES
    ('albedo', 'normal', 'depth', 'ao', 'emission', 'position')
    >>> BY_NAME["albedo"].cycles, BY_NAME["albedo"].exr
    ('Denoising Albedo', ('albedo.R', 'albedo.G', 'albedo.B'))
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
ROLES = ("color", "reference", "guide", "motion", "index", "history", "count", "label")


@dataclass(frozen=True)
class Field:
    """One render buffer: a row of :data:`TABLE`.

    ``role``: one of :data:`ROLES`: ``color`` (the noisy radiance), ``reference`` (a converged target), ``guide`` (a
    buffer ``denoise()`` takes), ``motion``, ``index`` (what a sequence denoiser adds), ``history`` (frames accumulated
    per pixel), ``count`` (the sample count: a number per frame, from the file's header), ``label`` (a dense task's
    target). ``meaning`` and ``units`` say what the values are. ``aliases``: layer names :func:`find_fields` accepts,
    lower case, best first, matched against a layer's full name and its last dotted component (so ``ViewLayer.Denoising
    Albedo`` matches ``denoising albedo``); ``""`` is the root layer; none: never read from a renderer's layers.
    ``components``: the channel sets accepted within a layer, best first. ``exr`` and ``dtype``: the channels and type
    ``vision render-scenes`` writes it as (none: not written). ``cycles``: the Cycles pass that holds it;
    ``blender``: the view-layer property that turns that pass on and where Blender's interface shows it.
    ``header``: EXR header attributes that hold it (``{layer}`` is the view layer). ``feature``: rank among the
    regression's guide features (None: not one). ``signal``: the buffer splits the colour before the fit (albedo
    divides, emission is subtracted). ``bounded``: its values lie in a fixed range (reflectance, unit vectors,
    fractions), so a change between frames is measured as it is rather than relative to the value.
    """

    name: str
    channels: int
    role: str
    meaning: str
    units: str
    aliases: tuple[str, ...] = ()
    components: tuple[tuple[str, ...], ...] = ()
    exr: tuple[str, ...] = ()
    dtype: str = "float32"
    cycles: str = ""
    blender: tuple[str, str] | None = None
    header: tuple[str, ...] = ()
    feature: int | None = None
    signal: bool = False
    bounded: bool = False


_DENOISING_DATA = ("cycles.denoising_store_passes", "View Layer Properties > Passes > Data > Denoising Data")

# Blender's "Denoising" passes come first: they are the ones made for denoisers (the sky's depth is 0, normals and
# albedo are taken past near-specular hits), where "Normal" and "Depth" are the raw first hit. "Noisy Image"
# precedes "Combined": with Blender's own denoiser on, Combined is already denoised. No alias belongs to two fields
# (tests/test_fields.py), so the order of the fields never decides which one claims a layer.
TABLE: tuple[Field, ...] = (
    Field("color", 3, "color", "noisy radiance to denoise (vision render-scenes: its noisy samples per pixel, box "
          "pixel filter)", "linear HDR radiance",
          ("", "noisy image", "combined", "image", "color", "colour", "rgb", "rgba", "beauty", "my_path"), TRIPLES,
          exr=("R", "G", "B"), cycles="Combined"),
    Field("reference", 3, "reference", "converged radiance of the same frame (same integrator and pixel filter)",
          "linear HDR radiance", ("reference", "ref", "clean"), TRIPLES,
          exr=("reference.R", "reference.G", "reference.B")),
    Field("albedo", 3, "guide", "diffuse reflectance at the first (non-specular) hit", "reflectance in [0, 1]",
          ("denoising albedo", "albedo", "diffcol", "diffuse color", "diffuse_color"), TRIPLES,
          exr=("albedo.R", "albedo.G", "albedo.B"), cycles="Denoising Albedo", blender=_DENOISING_DATA,
          feature=3, signal=True, bounded=True),
    Field("normal", 3, "guide", "shading normal at the first hit, facing the camera (world space)", "unit vector",
          ("denoising normal", "normal", "normals", "sh_normal", "nn", "shading_normal", "n"), TRIPLES,
          exr=("normal.X", "normal.Y", "normal.Z"), cycles="Denoising Normal", blender=_DENOISING_DATA, feature=0,
          bounded=True),
    Field("depth", 1, "guide", "how far the first hit is: camera z-depth as vision render-scenes writes it, or the "
          "renderer's own depth pass (the regression reads its logarithm, so either serves); 0 where no surface",
          "scene units (metres)", ("denoising depth", "depth", "dd", "z"), SINGLES, exr=("depth.Z",),
          cycles="Denoising Depth", blender=_DENOISING_DATA, feature=1),
    Field("ao", 1, "guide", "ambient occlusion: the share of cosine-weighted rays unoccluded within the AO radius",
          "fraction in [0, 1], 1 = open", ("ao", "ambient occlusion", "ambient_occlusion", "occlusion"), SINGLES,
          exr=("ao.Y",), cycles="AO", blender=("use_pass_ambient_occlusion",
                                                "View Layer Properties > Passes > Light > Ambient Occlusion"),
          feature=2, bounded=True),
    Field("emission", 3, "guide", "directly visible emitted radiance (lights, sky), mean over the pixel",
          "linear HDR radiance", ("emission", "emit", "emitter", "emissive"), TRIPLES,
          exr=("emission.R", "emission.G", "emission.B"), cycles="Emit",
          blender=("use_pass_emit", "View Layer Properties > Passes > Light > Emission"), signal=True),
    Field("position", 3, "guide", "world-space first-hit position", "scene units (metres)",
          ("position", "world_position", "pp", "p"), TRIPLES, exr=("position.X", "position.Y", "position.Z"),
          cycles="Position", blender=("use_pass_position", "View Layer Properties > Passes > Data > Position"),
          feature=4),
    Field("motion", 4, "motion", "screen-space motion: X,Y towards the previous frame, Z,W towards the next (Cycles' "
          "convention, tested by the temporal denoiser)", "pixels",
          ("vector", "motion", "motion_vector", "motionvector", "mv"), QUADS, cycles="Vector",
          blender=("use_pass_vector", "View Layer Properties > Passes > Data > Vector, with Render Properties > "
                                      "Motion Blur off")),
    Field("index", 1, "index", "object (or material) id per pixel: pixels of different ids show different surfaces "
          "(the temporal denoiser keeps no history across them)", "id",
          ("indexob", "object index", "object_index", "objectindex", "indexma", "material index", "segment",
           "instance", "instance_id"), (("X",), ("id",), ("Y",), ("R",), ("V",), ("Z",)), cycles="IndexOB",
          blender=("use_pass_object_index", "View Layer Properties > Passes > Data > Indexes > Object Index")),
    Field("history", 1, "history", "frames accumulated per pixel by a sequence denoiser (>= 1); FLNR weights with "
          "the history input read it times the samples per frame", "frames"),
    Field("spp", 1, "count", "samples per pixel the colour was rendered with (Cycles: the most samples of a pixel "
          "under adaptive sampling); one number per frame", "samples",
          header=("cycles.{layer}.samples", "vision.spp")),
    Field("camnormal", 3, "label", "camera-space shading normal: x right, y up, z towards the viewer (OpenGL)",
          "unit vector", exr=("camnormal.X", "camnormal.Y", "camnormal.Z")),
    Field("segment", 1, "label", "instance id, 0 = background; objects listed in manifest.json", "id",
          exr=("segment.id",), dtype="uint32"),
    Field("semantic", 1, "label", "semantic class id: index into vision.data.scenes.CLASSES", "id",
          exr=("segment.class",), dtype="uint32"),
    Field("glossy", 1, "label", "1 where the first hit has a glossy material, else 0", "flag",
          exr=("glossy.Y",)),
)

BY_NAME: dict[str, Field] = {f.name: f for f in TABLE}
NAMES: tuple[str, ...] = tuple(BY_NAME)
CHANNELS: dict[str, int] = {f.name: f.channels for f in TABLE}
ALIASES: dict[str, tuple[str, ...]] = {f.name: f.aliases for f in TABLE if f.aliases}
GUIDES: tuple[str, ...] = tuple(f.name for f in TABLE if f.role == "guide")
INPUTS: tuple[str, ...] = tuple(f.name for f in TABLE if f.role in ("color", "guide"))
SCORED: tuple[str, ...] = tuple(f.name for f in TABLE if f.role in ("color", "reference", "guide"))
REGRESSION_ORDER: tuple[str, ...] = tuple(f.name for f in sorted((f for f in TABLE if f.feature is not None),
                                                                  key=lambda f: f.feature))
SIGNAL: tuple[str, ...] = tuple(f.name for f in TABLE if f.signal)
BOUNDED: tuple[str, ...] = tuple(f.name for f in TABLE if f.bounded)
UNIT_INTERVAL: tuple[str, ...] = tuple(f.name for f in TABLE if "[0, 1]" in f.units)
RADIANCE: tuple[str, ...] = tuple(f.name for f in TABLE if f.units == "linear HDR radiance")
SEQUENCE: tuple[str, ...] = tuple(f.name for f in TABLE if f.role in ("motion", "index"))
RENDER_PASSES: tuple[str, ...] = tuple(f.name for f in TABLE if f.aliases and f.role != "reference")
ID_LAYERS: tuple[str, ...] = tuple(f.name for f in TABLE if f.exr and f.dtype == "uint32")
IN_BLENDER: dict[str, str] = {f.name: f.blender[1] for f in TABLE if f.blender}
SAMPLE_COUNT_KEYS: tuple[str, ...] = BY_NAME["spp"].header


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
FLNR_TRAINING: tuple[str, ...] = tuple(f.name for f in TABLE if f.role in ("color", "reference")) + FLNR_GUIDES


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
        for alias in field.aliases:  # a field without aliases is never read from a renderer's layers
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
