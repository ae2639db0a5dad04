"""Read and write images as float32 arrays in [0, 1], and move them to and from torch tensors.

Arrays are ``(H, W, C)`` with channels in **RGB(A)** order (OpenCV's BGR is swapped on the way in and
out) and C in {1, 3, 4}. PNG, JPEG and TIFF are read at 8 or 16 bits per channel and scaled by the
largest code (255 or 65535); a floating-point TIFF is returned as stored. Writes are atomic: the file
is encoded in memory, written to a hidden temporary file in the same folder and renamed over the
target, so a crash never leaves a half-written image behind. EXR lives in ``vision.data.exr``.

    >>> img = read_image("photo.jpg")                 # (H, W, 3) float32 in [0, 1]
    >>> x = to_tensor(img)                            # (1, 3, H, W)
    >>> write_image("out.png", to_image(x))           # 8-bit PNG
    >>> write_image("out.tif", img, bits=16)          # 16-bit TIFF
"""
from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
import struct
import zlib

import numpy as np
from numpy.lib import format as npf

READ_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tif", ".tiff")
WRITE_BITS = {".png": (8, 16), ".jpg": (8,), ".jpeg": (8,), ".tif": (8, 16), ".tiff": (8, 16)}
_MAX_CODE = {np.dtype(np.uint8): 255, np.dtype(np.uint16): 65535}


# Pixels per image that a reader decodes at most (16384 x 16384): checked from the file's header before any
# decoding, so a small file that claims a huge size costs nothing. VISION_MAX_PIXELS overrides it.
MAX_PIXELS = 16384 * 16384


def max_pixels() -> int:
    """The pixel limit in force: ``VISION_MAX_PIXELS`` from the environment, else :data:`MAX_PIXELS`."""
    text = os.environ.get("VISION_MAX_PIXELS")
    if not text:
        return MAX_PIXELS
    try:
        value = int(float(text))
    except ValueError:
        raise ValueError(f"VISION_MAX_PIXELS={text!r} is not a number of pixels") from None
    if value < 1:
        raise ValueError(f"VISION_MAX_PIXELS={text!r} must be >= 1")
    return value


def check_pixels(path, shape, what: str = "image") -> None:
    """Refuse ``shape`` (its leading two entries: height, width) above :func:`max_pixels` in one line naming
    ``path``, the size and the limit (and what it would take in float32)."""
    h, w = int(shape[0]), int(shape[1])
    limit = max_pixels()
    if h * w > limit:
        need = h * w * (int(np.prod(shape[2:])) if len(shape) > 2 else 1) * 4 / 2**30
        raise ValueError(f"{path}: the {what} is {w}x{h} = {h * w / 1e6:.0f} MP, over the limit of {limit / 1e6:.0f} MP "
                         f"(about {need:.1f} GiB in float32); set VISION_MAX_PIXELS to raise it")


def check_image_header(path) -> None:
    """:func:`check_pixels` on the size an image file's header claims, read without decoding any pixel. A
    header that cannot be read is left to the decoder, which reports it."""
    from PIL import Image  # lazy: a `vision denoise` frame starts without PIL

    bomb = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = None  # our limit, not Pillow's warning (or error) about its own
    try:
        with Image.open(path) as im:
            w, h = im.size
    except Exception:  # noqa: BLE001 - not a header Pillow reads: the decoder's error names the file
        return
    finally:
        Image.MAX_IMAGE_PIXELS = bomb
    check_pixels(path, (h, w))


def check_exr_header(path, headers=None) -> None:
    """:func:`check_pixels` on the data window of every part of an EXR file (the readers decode every part), read
    from its headers only (``headers``: those of :func:`vision.data.exr.read_exr_part_headers`, when the caller has
    read them already); an unreadable header is left to the reader, which reports it."""
    # lazy: `vision edit` (until the model loads) starts without vision.data.exr (its buffer table: 15-20 ms)
    from vision.data.exr import read_exr_part_headers

    try:
        windows = [header["dataWindow"] for header in (read_exr_part_headers(path) if headers is None else headers)]
    except Exception:  # noqa: BLE001 - the reader's own error names the file
        return
    for lo, hi in windows:
        check_pixels(path, (int(hi[1]) - int(lo[1]) + 1, int(hi[0]) - int(lo[0]) + 1))


def check_npy_header(path) -> tuple:
    """The shape a ``.npy`` file's header declares, refused in one line (naming the file) when it is over the
    pixel limit or larger than the data the file holds; reads the header only."""
    with open(path, "rb") as f:
        try:
            version = npf.read_magic(f)
            shape, _, dtype = (npf.read_array_header_1_0(f) if version == (1, 0) else npf.read_array_header_2_0(f))
        except ValueError as err:
            raise ValueError(f"{path}: not a .npy array ({err})") from None
        start = f.tell()
    if len(shape) >= 2:
        check_pixels(path, shape, "array")
    need = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
    if not dtype.hasobject and need > os.path.getsize(path) - start:
        raise ValueError(f"{path}: its header declares {shape} {dtype} ({need / 2**20:.1f} MiB) but the file holds "
                         f"{(os.path.getsize(path) - start) / 2**20:.1f} MiB")
    return shape


class ImageNotFoundError(FileNotFoundError, ValueError):
    """The image file does not exist. Both a ``FileNotFoundError`` and a ``ValueError``."""


def _extension(path: Path, allowed) -> str:
    ext = path.suffix.lower()
    if ext not in allowed:
        raise ValueError(f"{path}: unsupported image extension {path.suffix or '(none)'!r}; "
                         f"use one of {', '.join(allowed)}")
    return ext


def _cv2():
    """OpenCV, the PNG / JPEG / TIFF codec of :func:`read_image` and :func:`write_image`."""
    import cv2  # lazy: OpenCV takes a while to load; the header checks and EXR paths here do without it

    return cv2


@contextlib.contextmanager
def _decoder_quiet(cv2):
    log = getattr(getattr(cv2, "utils", None), "logging", None)
    if log is None:
        yield
        return
    level = log.getLogLevel()
    log.setLogLevel(log.LOG_LEVEL_SILENT)
    try:
        yield
    finally:
        log.setLogLevel(level)


def read_image(path) -> np.ndarray:
    """Read a PNG, JPEG or TIFF (8 or 16 bit) as a float32 ``(H, W, C)`` array in [0, 1], RGB(A) order.

    Gray images come back as ``(H, W, 1)``. Raises ``ValueError`` (``ImageNotFoundError`` when the
    file is missing) naming the path for a missing file, an unsupported extension or undecodable data.
    """
    cv2 = _cv2()
    path = Path(path)
    _extension(path, READ_EXTENSIONS)
    if not path.is_file():
        raise ImageNotFoundError(f"{path}: no such image file")
    check_image_header(path)  # a huge size is refused before a byte is decoded
    # Decode from bytes: cv2.imread cannot open non-ASCII paths on some platforms, and returns None silently.
    data = np.fromfile(path, dtype=np.uint8)
    with _decoder_quiet(cv2):  # a damaged file is reported once, below, not also by libtiff through OpenCV's log
        try:
            img = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
        except cv2.error:  # OpenCV's own limits (a header past CV_IO_MAX_IMAGE_PIXELS): ours, in one line
            img = None
    if img is None:
        raise ValueError(f"{path}: not a readable image (empty or corrupt file?)")
    if img.ndim == 2:
        img = img[:, :, None]
    if img.ndim != 3 or img.shape[2] not in (1, 3, 4):
        raise ValueError(f"{path}: unsupported image layout {img.shape}")
    if img.shape[2] == 3:
        img = img[:, :, ::-1]
    elif img.shape[2] == 4:
        img = img[:, :, [2, 1, 0, 3]]
    if img.dtype in _MAX_CODE:
        return np.ascontiguousarray(img, dtype=np.float32) / np.float32(_MAX_CODE[img.dtype])
    if img.dtype.kind == "f":
        return np.ascontiguousarray(img, dtype=np.float32)
    raise ValueError(f"{path}: unsupported sample type {img.dtype} (8/16-bit integer or float TIFF expected)")


def _to_codes(array: np.ndarray, bits: int, path: Path) -> np.ndarray:
    dtype = np.uint8 if bits == 8 else np.uint16
    if array.dtype == dtype:
        return array
    if array.dtype.kind in "ui":
        raise ValueError(f"{path}: integer array of type {array.dtype} cannot be written at {bits} bits; "
                         f"pass {np.dtype(dtype).name} codes or floats in [0, 1]")
    if array.dtype.kind != "f":
        raise ValueError(f"{path}: unsupported array type {array.dtype}")
    if not np.isfinite(array).all():
        raise ValueError(f"{path}: image contains NaN or Inf")
    top = 255.0 if bits == 8 else 65535.0
    return np.rint(np.clip(array.astype(np.float64), 0.0, 1.0) * top).astype(dtype)


def write_image(path, array, *, bits: int = 8, quality: int = 95, text: dict | None = None) -> Path:
    """Write ``array`` (``(H, W)`` or ``(H, W, C)``, C in {1, 3, 4}, RGB(A)) atomically; returns the path.

    Float arrays are clipped to [0, 1] and rounded to ``bits`` (8, or 16 for PNG/TIFF); uint8/uint16
    arrays are written as they are when their width matches ``bits``. ``quality`` is JPEG's (1..100).
    ``text``: PNG only, Latin-1 key/value pairs stored as ``tEXt`` chunks (``PIL.Image.open(path).text``
    reads them), e.g. how the codes map to values.
    Raises ``ValueError`` for an unsupported extension or bit depth, a missing folder, a bad shape,
    NaN/Inf values, or a 4-channel JPEG.
    """
    cv2 = _cv2()
    path = Path(path)
    ext = _extension(path, tuple(WRITE_BITS))
    if bits not in WRITE_BITS[ext]:
        raise ValueError(f"{path}: {ext} images can be written at {WRITE_BITS[ext]} bits, not {bits!r}")
    if not path.parent.is_dir():
        raise ValueError(f"{path}: folder {path.parent} does not exist")
    array = np.asarray(array)
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] not in (1, 3, 4) or array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{path}: expected an (H, W) or (H, W, C) array with C in 1, 3, 4, got shape {array.shape}")
    if ext in (".jpg", ".jpeg") and array.shape[2] == 4:
        raise ValueError(f"{path}: JPEG has no alpha channel; drop it or write a PNG/TIFF")
    codes = _to_codes(array, bits, path)
    if codes.shape[2] == 3:
        codes = codes[:, :, ::-1]
    elif codes.shape[2] == 4:
        codes = codes[:, :, [2, 1, 0, 3]]
    codes = np.ascontiguousarray(codes[:, :, 0] if codes.shape[2] == 1 else codes)
    if ext in (".jpg", ".jpeg") and not 0 <= quality <= 100:  # OpenCV would clamp it with a warning
        raise ValueError(f"{path}: JPEG quality must be in [0, 100], got {quality}")
    params = [cv2.IMWRITE_JPEG_QUALITY, int(quality)] if ext in (".jpg", ".jpeg") else []
    ok, buf = cv2.imencode(ext, codes, params)
    if not ok:
        raise ValueError(f"{path}: OpenCV could not encode a {codes.dtype} {codes.shape} image as {ext}")
    data = buf.tobytes()
    if text:
        if ext != ".png":
            raise ValueError(f"{path}: text metadata is written to PNG files only")
        data = _png_with_text(data, text)
    # Temporary file beside the target (same file system, so the rename is atomic); created with
    # os.open's mode so the final file gets the user's umask, not mkstemp's 0600.
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _png_with_text(png: bytes, text: dict) -> bytes:
    """``png`` with one ``tEXt`` chunk per item of ``text`` after its header chunk (IHDR: 8 + 25 bytes)."""
    chunks = b""
    for key, value in text.items():
        body = str(key).encode("latin-1") + b"\0" + str(value).encode("latin-1")
        if not 1 <= len(str(key)) <= 79:
            raise ValueError(f"PNG text keys have 1 to 79 characters, got {key!r}")
        chunks += struct.pack(">I", len(body)) + b"tEXt" + body + struct.pack(">I", zlib.crc32(b"tEXt" + body))
    head = 8 + 8 + 13 + 4  # signature, IHDR length + type, its 13 bytes, its CRC
    return png[:head] + chunks + png[head:]


def to_tensor(image, *, device=None, dtype=None):
    """``(H, W, C)`` or ``(H, W)`` array -> ``(1, C, H, W)`` torch tensor (float32 unless ``dtype``)."""
    import torch  # lazy: `vision edit` (until the model loads) starts without torch

    array = np.asarray(image)
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3:
        raise ValueError(f"to_tensor expects an (H, W) or (H, W, C) array, got shape {array.shape}")
    t = torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1), dtype=np.float32))[None]
    return t.to(device=device, dtype=dtype or torch.float32)


def to_image(tensor) -> np.ndarray:
    """``(1, C, H, W)`` or ``(C, H, W)`` tensor -> float32 ``(H, W, C)`` NumPy array (detached, on CPU)."""
    if tensor.ndim == 4:
        if tensor.shape[0] != 1:
            raise ValueError(f"to_image takes one image, got a batch of {tensor.shape[0]}; index it first")
        tensor = tensor[0]
    if tensor.ndim != 3:
        raise ValueError(f"to_image expects a (1, C, H, W) or (C, H, W) tensor, got shape {tuple(tensor.shape)}")
    return np.ascontiguousarray(tensor.detach().float().cpu().numpy().transpose(1, 2, 0))
