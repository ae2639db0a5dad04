"""Multi-layer OpenEXR frames with named channels: what ``vision render-scenes`` writes and the denoiser reads.

One file per frame, one part, scanlines, ZIP compression (lossless), every channel full resolution.
Float channels are stored as 32-bit float and ids as 32-bit unsigned int, so reading a file back gives
the very bits that were written (NaN payloads, signed zeros and denormals included).

Channel names follow the EXR layer convention ``layer.channel``; a *field* is one layer read as an
``(H, W, C)`` array. The table :data:`LAYERS` is the documentation of record (the README repeats it):

======================  ============================================  ========  ==============================================
field                   channels                                      type      meaning
======================  ============================================  ========  ==============================================
``color``               ``R G B``                                     float32   noisy 1-spp path-traced radiance of this frame
``reference``           ``reference.R reference.G reference.B``      float32   high-spp radiance (same integrator and filter)
``albedo``              ``albedo.R albedo.G albedo.B``                float32   diffuse reflectance at the first hit, in [0, 1]
``normal``              ``normal.X normal.Y normal.Z``                float32   world-space shading normal, unit, facing the camera
``depth``               ``depth.Z``                                   float32   camera z-depth in metres (0 = no surface)
``position``            ``position.X position.Y position.Z``          float32   world-space first-hit position in metres
``ao``                  ``ao.Y``                                      float32   ambient occlusion, 1 = open, 0 = fully occluded
``emission``            ``emission.R emission.G emission.B``          float32   directly visible emitted radiance (pixel mean)
``camnormal``           ``camnormal.X camnormal.Y camnormal.Z``       float32   camera-space normal: x right, y up, z to the viewer
``segment``             ``segment.id``                                uint32    instance id (0 = background), see manifest
``semantic``            ``segment.class``                             uint32    semantic class id, index into ``CLASSES``
``glossy``              ``glossy.Y``                                  float32   1 where the first hit is a glossy material
======================  ============================================  ========  ==============================================
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

# field -> (channel names, dtype, meaning)
LAYERS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "color": (("R", "G", "B"), "float32", "noisy 1-spp path-traced radiance of this frame (linear HDR)"),
    "reference": (("reference.R", "reference.G", "reference.B"), "float32",
                  "high-spp radiance, same integrator and box pixel filter"),
    "albedo": (("albedo.R", "albedo.G", "albedo.B"), "float32", "diffuse reflectance at the first hit, in [0, 1]"),
    "normal": (("normal.X", "normal.Y", "normal.Z"), "float32", "world-space shading normal, unit length, facing the camera"),
    "depth": (("depth.Z",), "float32", "camera z-depth (along the optical axis) in metres; 0 where no surface"),
    "position": (("position.X", "position.Y", "position.Z"), "float32", "world-space first-hit position in metres"),
    "ao": (("ao.Y",), "float32", "ambient occlusion: fraction of cosine-weighted rays unoccluded within the AO radius"),
    "emission": (("emission.R", "emission.G", "emission.B"), "float32",
                 "directly visible emitted radiance (lights, sky), mean over the pixel"),
    "camnormal": (("camnormal.X", "camnormal.Y", "camnormal.Z"), "float32",
                  "camera-space shading normal: x right, y up, z towards the viewer (OpenGL)"),
    "segment": (("segment.id",), "uint32", "instance id, 0 = background; objects listed in manifest.json"),
    "semantic": (("segment.class",), "uint32", "semantic class id: index into vision.data.scenes.CLASSES"),
    "glossy": (("glossy.Y",), "float32", "1 where the first hit has a glossy material, else 0"),
}

_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.uint32))


def _openexr():
    import OpenEXR

    return OpenEXR


def write_exr(path, channels: Mapping[str, np.ndarray], header: Mapping | None = None) -> Path:
    """Write 2-D arrays (float32, float16 or uint32, all the same shape) as named channels of one EXR.

    ``header`` adds attributes (str, int or float values). Nothing is converted: a float64 or int64
    array is refused, so what is read back is bit for bit what was passed in.
    """
    if not channels:
        raise ValueError("write_exr needs at least one channel")
    shape = None
    data = {}
    for name, arr in channels.items():
        arr = np.asarray(arr)
        if arr.dtype not in _DTYPES:
            raise ValueError(f"channel {name!r} has dtype {arr.dtype}; EXR stores float32, float16 or uint32 "
                             f"(convert explicitly, e.g. .astype(np.float32))")
        if arr.ndim != 2:
            raise ValueError(f"channel {name!r} must be 2-D (H, W), got shape {arr.shape}")
        if shape is None:
            shape = arr.shape
        elif arr.shape != shape:
            raise ValueError(f"channel {name!r} has shape {arr.shape}, others {shape}")
        data[str(name)] = np.ascontiguousarray(arr).copy()  # OpenEXR.File takes ownership of the dict values
    OpenEXR = _openexr()
    hdr = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    for key, value in (header or {}).items():
        hdr[str(key)] = value
    path = Path(path)
    OpenEXR.File(hdr, data).write(str(path))
    return path


def read_exr(path, channels: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Read named channels (all when ``channels`` is None) as 2-D arrays in their stored type."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no EXR file at {path}")
    OpenEXR = _openexr()
    with OpenEXR.File(str(path), separate_channels=True) as f:
        stored = f.channels()
        names = list(stored) if channels is None else list(channels)
        missing = [n for n in names if n not in stored]
        if missing:
            raise ValueError(f"{path} has no channel(s) {', '.join(missing)}; it has {', '.join(sorted(stored))}")
        return {n: np.array(stored[n].pixels) for n in names}


def read_exr_header(path) -> dict:
    """The header attributes of an EXR file (the ``vision.*`` ones are written by render-scenes)."""
    OpenEXR = _openexr()
    return dict(OpenEXR.File(str(path), header_only=True).header())


def write_frame(path, fields: Mapping[str, np.ndarray], header: Mapping | None = None) -> Path:
    """Write fields (``(H, W)`` or ``(H, W, C)`` arrays keyed by the names in :data:`LAYERS`) to one EXR."""
    channels = {}
    for field, arr in fields.items():
        if field not in LAYERS:
            raise ValueError(f"unknown field {field!r}; known fields: {', '.join(LAYERS)}")
        names, dtype, _ = LAYERS[field]
        arr = np.asarray(arr)
        if arr.ndim == 2:
            arr = arr[..., None]
        if arr.ndim != 3 or arr.shape[2] != len(names):
            raise ValueError(f"field {field!r} needs shape (H, W, {len(names)}), got {arr.shape}")
        if arr.dtype != np.dtype(dtype):
            raise ValueError(f"field {field!r} must be {dtype}, got {arr.dtype}")
        for k, name in enumerate(names):
            channels[name] = arr[..., k]
    return write_exr(path, channels, header)


def read_frame(path, fields: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Read fields of a frame as ``(H, W, C)`` arrays; all fields present in the file when ``fields`` is None."""
    everything = fields is None
    fields = list(LAYERS) if everything else list(fields)
    unknown = [f for f in fields if f not in LAYERS]
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; known fields: {', '.join(LAYERS)}")
    if everything:
        stored = read_exr(path)
        fields = [f for f in fields if all(c in stored for c in LAYERS[f][0])]
    else:
        stored = read_exr(path, [c for f in fields for c in LAYERS[f][0]])
    return {f: np.stack([stored[c] for c in LAYERS[f][0]], axis=-1) for f in fields}
