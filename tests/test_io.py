"""vision.io: bit-exact round trips, RGB order checked with Pillow as an independent codec, clear errors."""
import os

import numpy as np
import pytest
import torch
from PIL import Image

from vision.io import ImageNotFoundError, read_image, to_image, to_tensor, write_image


def _codes(rng, shape, bits):
    top = 255 if bits == 8 else 65535
    a = rng.integers(0, top + 1, size=shape, dtype=np.int64)
    a.flat[0], a.flat[1] = 0, top  # both ends of the range
    return a.astype(np.uint8 if bits == 8 else np.uint16)


@pytest.mark.parametrize("ext", [".png", ".tif", ".tiff"])
@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_round_trip_is_bit_exact(tmp_path, rng, ext, bits, channels):
    codes = _codes(rng, (13, 17, channels), bits)
    top = np.float32(255 if bits == 8 else 65535)
    path = tmp_path / f"img{ext}"
    write_image(path, codes, bits=bits)  # integer codes written as they are
    back = read_image(path)
    assert back.dtype == np.float32 and back.shape == (13, 17, channels)
    np.testing.assert_array_equal(back, codes.astype(np.float32) / top)
    # and float input in [0, 1] maps back onto the same codes
    write_image(path, back, bits=bits)
    np.testing.assert_array_equal(np.rint(read_image(path) * top).astype(np.int64), codes.astype(np.int64))


def test_rgb_order_against_pillow(tmp_path):
    # Pillow is an independent codec and stores RGB: pixel (0, 0) red, (0, 1) blue.
    px = np.zeros((2, 3, 3), np.uint8)
    px[0, 0] = (255, 0, 0)
    px[0, 1] = (0, 0, 255)
    px[1, 2] = (10, 20, 30)
    Image.fromarray(px, "RGB").save(tmp_path / "pil.png")
    img = read_image(tmp_path / "pil.png")
    np.testing.assert_array_equal(img[0, 0], [1, 0, 0])
    np.testing.assert_array_equal(img[0, 1], [0, 0, 1])
    np.testing.assert_allclose(img[1, 2], np.array([10, 20, 30]) / 255, rtol=0, atol=1e-7)
    # and what we write, Pillow reads in the same order
    write_image(tmp_path / "ours.png", img)
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "ours.png").convert("RGB")), px)
    write_image(tmp_path / "ours.tif", img)
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "ours.tif").convert("RGB")), px)


def test_16bit_scaling_against_pillow(tmp_path):
    codes = np.array([[0, 1, 32768, 65535]], np.uint16)
    Image.fromarray(codes).save(tmp_path / "g16.png")  # Pillow writes a 16-bit gray PNG
    img = read_image(tmp_path / "g16.png")
    assert img.shape == (1, 4, 1)
    np.testing.assert_array_equal(img[0, :, 0], codes[0].astype(np.float32) / np.float32(65535))


def test_float_is_clipped_and_rounded(tmp_path):
    a = np.array([[[-0.5], [0.0], [0.5 / 255 + 1e-4], [1.0], [7.0]]], np.float32)
    write_image(tmp_path / "c.png", a)
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "c.png")).ravel(), [0, 0, 1, 255, 255])


def test_jpeg_round_trip_is_close_and_keeps_colour(tmp_path, rng):
    y, x = np.mgrid[0:48, 0:64].astype(np.float32)
    img = np.stack([x / 63, y / 47, 0.25 + 0 * x], axis=2)  # smooth ramps: JPEG keeps them well
    write_image(tmp_path / "a.jpg", img, quality=95)
    back = read_image(tmp_path / "a.jpg")
    assert back.shape == img.shape
    assert np.abs(back - img).mean() < 0.01
    red = np.zeros((16, 16, 3), np.float32)
    red[..., 0] = 1.0
    write_image(tmp_path / "red.jpeg", red)
    np.testing.assert_allclose(read_image(tmp_path / "red.jpeg").mean((0, 1)), [1, 0, 0], atol=0.02)


def test_write_is_atomic_and_leaves_no_temporaries(tmp_path, rng):
    path = tmp_path / "x.png"
    first = _codes(rng, (5, 6, 3), 8)
    write_image(path, first)
    write_image(path, _codes(rng, (5, 6, 3), 8))  # overwrite in place
    bad = np.full((5, 6, 3), np.nan, np.float32)
    with pytest.raises(ValueError, match="NaN"):
        write_image(path, bad)
    assert sorted(os.listdir(tmp_path)) == ["x.png"]  # no .tmp left behind, target still there
    assert read_image(path).shape == (5, 6, 3)


def test_bad_paths_and_arguments_raise_value_error(tmp_path):
    ok = np.zeros((4, 4, 3), np.float32)
    with pytest.raises(ValueError, match="no such image"):
        read_image(tmp_path / "missing.png")
    with pytest.raises(FileNotFoundError):  # the same error is also a FileNotFoundError
        read_image(tmp_path / "missing.png")
    assert issubclass(ImageNotFoundError, ValueError)
    for name in ("a.bmp", "a.exr", "noext"):
        with pytest.raises(ValueError, match="unsupported image extension"):
            read_image(tmp_path / name)
        with pytest.raises(ValueError, match="unsupported image extension"):
            write_image(tmp_path / name, ok)
    (tmp_path / "junk.png").write_bytes(b"this is not a png")
    with pytest.raises(ValueError, match="not a readable image"):
        read_image(tmp_path / "junk.png")
    (tmp_path / "empty.tif").write_bytes(b"")
    with pytest.raises(ValueError, match="not a readable image"):
        read_image(tmp_path / "empty.tif")
    with pytest.raises(ValueError, match="does not exist"):
        write_image(tmp_path / "no" / "such" / "dir.png", ok)
    with pytest.raises(ValueError, match="bits"):
        write_image(tmp_path / "a.jpg", ok, bits=16)
    with pytest.raises(ValueError, match="bits"):
        write_image(tmp_path / "a.png", ok, bits=12)
    with pytest.raises(ValueError, match="alpha"):
        write_image(tmp_path / "a.jpg", np.zeros((4, 4, 4), np.float32))
    with pytest.raises(ValueError, match="shape"):
        write_image(tmp_path / "a.png", np.zeros((4, 4, 2), np.float32))
    with pytest.raises(ValueError, match="shape"):
        write_image(tmp_path / "a.png", np.zeros((4,), np.float32))
    with pytest.raises(ValueError, match="uint16"):
        write_image(tmp_path / "a.png", np.zeros((4, 4), np.uint16), bits=8)
    with pytest.raises(ValueError, match="Inf"):
        write_image(tmp_path / "a.tif", np.full((4, 4), np.inf, np.float32), bits=16)
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_tensor_conversions(rng):
    img = rng.random((5, 7, 3)).astype(np.float32)
    t = to_tensor(img)
    assert t.shape == (1, 3, 5, 7) and t.dtype == torch.float32
    assert float(t[0, 2, 4, 6]) == img[4, 6, 2]
    np.testing.assert_array_equal(to_image(t), img)
    np.testing.assert_array_equal(to_image(t[0]), img)
    assert to_tensor(img[:, :, 0]).shape == (1, 1, 5, 7)
    assert to_tensor(img, dtype=torch.float16).dtype == torch.float16
    back = to_image(to_tensor(img, dtype=torch.bfloat16).requires_grad_(True))  # detached, float32
    assert back.dtype == np.float32 and np.abs(back - img).max() < 1 / 128
    # a transposed (non-contiguous) view converts by value
    view = img.transpose(1, 0, 2)
    np.testing.assert_array_equal(to_image(to_tensor(view)), view)
    with pytest.raises(ValueError, match="batch"):
        to_image(torch.zeros(2, 3, 4, 4))
    with pytest.raises(ValueError):
        to_image(torch.zeros(4, 4))
    with pytest.raises(ValueError):
        to_tensor(np.zeros((1, 2, 3, 4)))
