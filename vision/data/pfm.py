"""Portable Float Map (PFM) images: the format Intel Open Image Denoise's ``oidnDenoise`` reads and writes.

A PFM file is a text header then raw float32 pixels: ``PF`` (3 channels) or ``Pf`` (1 channel), a line
``WIDTH HEIGHT``, a line with a scale whose sign gives the byte order (negative = little endian), then
the rows from the *bottom* of the image to the top. Some writers put the header on one line separated by
single spaces; both are accepted.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

PFM_MAGIC = (b"PF", b"Pf")


def _tokens(data: bytes, count: int) -> tuple[list[bytes], int]:
    """The first ``count`` whitespace-separated header tokens and the offset just past the single
    whitespace byte that ends the last one (where the pixels start)."""
    tokens, pos = [], 0
    while len(tokens) < count:
        while pos < len(data) and data[pos:pos + 1].isspace():
            pos += 1
        start = pos
        while pos < len(data) and not data[pos:pos + 1].isspace():
            pos += 1
        if start == pos:
            break
        tokens.append(data[start:pos])
    return tokens, pos + 1


def read_pfm(path) -> np.ndarray:
    """A PFM image as a float32 ``(H, W, 3)`` (``PF``) or ``(H, W, 1)`` (``Pf``) array, top row first.

    An empty, truncated or non-PFM file raises a ValueError naming it.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no PFM file at {path}")
    data = path.read_bytes()
    if not data:
        raise ValueError(f"{path}: the file is empty (0 bytes), not a PFM image")
    tokens, offset = _tokens(data[:256], 4)
    if len(tokens) < 4 or tokens[0] not in PFM_MAGIC:
        raise ValueError(f"{path}: not a PFM file (it must start with PF or Pf, then width, height and scale)")
    try:
        width, height, scale = int(tokens[1]), int(tokens[2]), float(tokens[3])
    except ValueError:
        raise ValueError(f"{path}: damaged PFM header {b' '.join(tokens).decode('latin-1')!r}") from None
    if width <= 0 or height <= 0 or scale == 0:
        raise ValueError(f"{path}: damaged PFM header: size {width}x{height}, scale {scale:g}")
    channels = 3 if tokens[0] == b"PF" else 1
    need = width * height * channels * 4
    if len(data) - offset < need:
        raise ValueError(f"{path}: truncated PFM file: {len(data) - offset} bytes of pixels, "
                         f"{width}x{height}x{channels} float32 need {need}")
    pixels = np.frombuffer(data, dtype="<f4" if scale < 0 else ">f4", count=width * height * channels, offset=offset)
    return np.ascontiguousarray(pixels.reshape(height, width, channels)[::-1], dtype=np.float32)


def write_pfm(path, image: np.ndarray) -> Path:
    """Write a float ``(H, W)``, ``(H, W, 1)`` or ``(H, W, 3)`` image as little-endian PFM (top row first in
    ``image``; the file stores it bottom-up as the format requires)."""
    image = np.asarray(image)
    if image.ndim == 2:
        image = image[..., None]
    if image.ndim != 3 or image.shape[2] not in (1, 3) or image.dtype.kind != "f":
        raise ValueError(f"PFM holds float (H, W, 1) or (H, W, 3) images, got {image.dtype} {image.shape}")
    h, w, c = image.shape
    path = Path(path)
    with open(path, "wb") as f:
        f.write(b"%s\n%d %d\n-1.0\n" % (PFM_MAGIC[0] if c == 3 else PFM_MAGIC[1], w, h))
        f.write(np.ascontiguousarray(image[::-1], dtype="<f4").tobytes())
    return path
