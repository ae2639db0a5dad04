"""The denoiser's conventions, as OIDN's: one default model for the library and the command,
an explicit ``hdr`` switch, uint8 and RGBA colour refused in one line, sizes as HxW in every message, and EXR
outputs whose layers each hold one pixel type (so ``OpenEXR.File(out)`` reads them)."""
import shutil

import numpy as np
import pytest
import torch

from vision.bundled import asset_path
from vision.data import read_exr, read_frame, write_exr
from vision.denoise import denoise
from vision.pipelines.cli import main

SCENE = "scene_00001"
GUIDES = ("albedo", "normal", "depth", "ao", "emission")


@pytest.fixture(scope="module")
def frame():
    return read_frame(asset_path("scenes", SCENE, "frame_00.exr"))


def _crop(d, n=48):
    return {k: np.ascontiguousarray(v[:n, :n]) for k, v in d.items()}


# --------------------------------------------------------------------------- uint8 and RGBA colour

@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_uint8_colour_is_refused_in_one_line(kind):
    img = np.random.default_rng(0).integers(0, 256, (16, 24, 3), dtype=np.uint8)
    color = img if kind == "numpy" else torch.from_numpy(img).permute(2, 0, 1)[None]
    with pytest.raises(ValueError) as err:
        denoise(color)
    assert str(err.value) == "color is uint8: pass linear float radiance, or convert with x/255 and hdr=False"
    # what the message says to do is accepted
    out = denoise(img / np.float32(255), model="flr", hdr=False)
    assert out.dtype == np.float32 and out.shape == (16, 24, 3)
    with pytest.raises(ValueError, match=r"^albedo is uint8: pass a float buffer"):
        denoise(img / np.float32(255), albedo=img, model="flr")
    with pytest.raises(ValueError, match=r"^color is int32: pass linear float radiance$"):
        denoise(img.astype(np.int32))


def test_rgba_colour_is_refused_naming_the_argument_and_shape(frame):
    c = _crop(frame)["color"]
    rgba = np.concatenate([c, np.ones_like(c[..., :1])], -1)
    with pytest.raises(ValueError) as err:
        denoise(rgba, model="flr")
    assert str(err.value).startswith("color has 4 channels (shape (48, 48, 4)): denoise takes RGB; pass "
                                     "color[..., :3]")
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"color has 4 channels \(shape \(1, 4, 48, 48\)\).*color\[:, :3\]"):
        denoise(torch.from_numpy(rgba).permute(2, 0, 1)[None], model="flr")


# --------------------------------------------------------------------------- hdr

def test_hdr_false_takes_colour_at_most_1_and_clamps_the_result(frame):
    d = _crop(frame)
    g = {k: d[k] for k in ("albedo", "normal", "depth", "ao")}
    color = d["color"] * np.float32(4.0)  # a bright LDR image: many samples above 1
    assert (color > 1).mean() > 0.01
    hdr = denoise(color, **g, model="flr")
    assert hdr.max() > 1.05  # so the clamp below is not idle
    ldr = denoise(color, **g, model="flr", hdr=False)
    assert ldr.min() >= 0 and ldr.max() <= 1
    # LDR = the HDR denoiser on the colour clipped to [0, 1], its result clipped into [0, 1]
    want = np.clip(denoise(np.minimum(color, 1), **g, model="flr"), 0, 1)
    np.testing.assert_allclose(ldr, want, rtol=0, atol=1e-6)
    # colour inside [0, 1] whose denoised result stays inside [0, 1]: hdr=False changes nothing
    dim = d["color"] * np.float32(0.1)
    np.testing.assert_array_equal(denoise(dim, **g, model="flr", hdr=False),
                                  np.clip(denoise(dim, **g, model="flr"), 0, 1))
    for bad in ("yes", 1, None):
        with pytest.raises(ValueError, match=r"^hdr must be True or False"):
            denoise(color, **g, model="flr", hdr=bad)


# --------------------------------------------------------------------------- one default model

def test_the_library_default_is_the_command_default(frame, tmp_path):
    """Both run FLNR with the bundled weights: the library's default call gives what ``model="flnr"`` gives, and
    the command's default output holds the same pixels."""
    d = frame
    g = {k: d[k] for k in GUIDES}
    explicit = denoise(d["color"], **g, model="flnr")
    flr = denoise(d["color"], **g, model="flr")
    default = denoise(d["color"], **g)
    np.testing.assert_array_equal(default, explicit)
    assert np.abs(default - flr).max() > 1e-3  # the two models differ on this frame: the check has teeth
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(asset_path("scenes", SCENE, "frame_00.exr"), src / "frame_00.exr")
    assert main(["denoise", str(src / "frame_00.exr"), "-o", str(tmp_path / "out"), "-q"]) == 0
    ch = read_exr(tmp_path / "out" / "frame_00.exr", ["R", "G", "B"])
    np.testing.assert_allclose(np.stack([ch[c] for c in "RGB"], -1), explicit, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- HxW in messages

def test_sizes_in_messages_are_height_by_width():
    """Every size mismatch names its sizes as HxW (never WxH): the shapes here are not square, so the order shows."""
    rng = np.random.default_rng(1)

    def f(h, w, c=3):
        return rng.random((h, w, c), np.float32) * np.float32(0.5)

    with pytest.raises(ValueError, match=r"^normal is 16x32 \(HxW\) but the guides are 24x40$"):
        denoise(f(24, 40), albedo=f(24, 40), normal=f(16, 32), model="flr")
    with pytest.raises(ValueError, match=r"^color is 10x15 \(HxW\) but the guides are 24x40: for joint upsampling"):
        denoise(f(10, 15), albedo=f(24, 40), model="flr")
    from vision.denoise.flr import full_size

    with pytest.raises(ValueError, match=r"\(HxW\), got \{'albedo': '24x40', 'normal': '16x32'\}"):
        full_size(torch.zeros(1, 3, 24, 40), {"albedo": torch.zeros(1, 3, 24, 40),
                                              "normal": torch.zeros(1, 3, 16, 32)})


# --------------------------------------------------------------------------- one type per EXR layer

def _half_cycles_file(path, frame):
    """What Blender writes with half float output: a multi-layer EXR whose every channel is half, beauty in
    ``ViewLayer.Combined`` with its alpha, guides in the Denoising passes."""
    d = _crop(frame, 64)
    passes = {"Combined": ("color", "RGB"), "Denoising Albedo": ("albedo", "RGB"),
              "Denoising Normal": ("normal", "XYZ"), "Denoising Depth": ("depth", "Z"), "Emit": ("emission", "RGB")}
    ch = {f"ViewLayer.{p}.{c}": d[field][..., k].astype(np.float16)
          for p, (field, cs) in passes.items() for k, c in enumerate(cs)}
    alpha = np.ones((64, 64), np.float16)
    alpha[:8] = 0.25  # not all ones, so a conversion that changed values would show
    ch["ViewLayer.Combined.A"] = alpha
    write_exr(path, ch)
    return ch, d


@pytest.mark.parametrize("half", [False, True])
def test_half_cycles_exr_comes_back_readable_by_openexr_file(frame, tmp_path, half):
    """A half-float Cycles EXR denoised: ``OpenEXR.File(out)`` (which gathers each layer's R G B A into one
    array, so they must share a type) opens it and every channel reads. Without --half the beauty layer is float32,
    its alpha widened exactly; with --half it is all half. Other layers keep their stored type."""
    import OpenEXR

    src = tmp_path / "in" / "shot_0001.exr"
    src.parent.mkdir()
    ch, d = _half_cycles_file(src, frame)
    assert main(["denoise", str(src), "-o", str(tmp_path / "out"), "-q", *(["--half"] if half else [])]) == 0
    out = tmp_path / "out" / "shot_0001.exr"
    with OpenEXR.File(str(out)) as f:
        got = {name: np.array(c.pixels) for name, c in f.channels().items()}
    want = np.float16 if half else np.float32
    combined = got["ViewLayer.Combined"]
    assert combined.shape == (64, 64, 4) and combined.dtype == want
    np.testing.assert_array_equal(combined[..., 3], ch["ViewLayer.Combined.A"].astype(want))
    albedo = got["ViewLayer.Denoising Albedo"]
    assert albedo.dtype == np.float16
    np.testing.assert_array_equal(albedo[..., 0], ch["ViewLayer.Denoising Albedo.R"])
    assert got["ViewLayer.Denoising Depth.Z"].dtype == np.float16
    # the beauty holds a denoised frame: far closer to the 512-spp reference than the noisy input
    ref, noisy = d["reference"].astype(np.float64), ch_rgb(ch).astype(np.float64)
    mse = lambda x: np.mean((np.clip(x, 0, 1) - np.clip(ref, 0, 1)) ** 2)  # noqa: E731
    assert mse(combined[..., :3].astype(np.float64)) < mse(noisy) / 4


def ch_rgb(ch):
    return np.stack([ch[f"ViewLayer.Combined.{c}"] for c in "RGB"], -1)


def test_one_type_per_layer_widens_exactly_and_never_narrows_passed_through_data():
    from vision.data.exr import one_type_per_layer

    f32 = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    f16 = f32.astype(np.float16)
    ids = np.arange(12, dtype=np.uint32).reshape(3, 4)
    out = one_type_per_layer({"R": f32, "G": f32, "B": f32, "A": f16, "Z": f16, "id": ids, "x.A": f16},
                             ["R", "G", "B"])
    assert {k: v.dtype for k, v in out.items()} == {"R": np.float32, "G": np.float32, "B": np.float32,
                                                    "A": np.float32, "Z": np.float32, "id": np.uint32,
                                                    "x.A": np.float16}
    np.testing.assert_array_equal(out["A"], f16.astype(np.float32))
    # half colour: its alpha follows it (readers gather R G B A), a float32 depth beside it keeps its bits
    out = one_type_per_layer({"L.R": f16, "L.G": f16, "L.B": f16, "L.A": f32, "L.Z": f32}, ["L.R", "L.G", "L.B"])
    assert out["L.A"].dtype == np.float16 and out["L.Z"] is not None and out["L.Z"].dtype == np.float32
