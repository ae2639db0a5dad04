"""``vision denoise`` on renderer files as they come (real Blender Cycles frames, Mitsuba AOV names, OIDN-style
PFM buffers, bad files) and the output a compositor reads (alpha, passed-through layers, header, resume)."""
import json
from pathlib import Path

import numpy as np
import pytest

from vision.bundled import asset_path
from vision.data import read_exr, read_frame, write_exr, write_frame
from vision.data.exr import read_exr_header
from vision.data.pfm import read_pfm, write_pfm
from vision.data.render_layers import no_surface_depth, renderer_albedo, view_layers
from vision.denoise import denoise, find_fields
from vision.denoise import metrics as M
from vision.pipelines.cli import main

BLENDER = Path(__file__).resolve().parent / "data" / "blender"
GUIDES = ("albedo", "normal", "depth", "ao", "emission")


def _layer_rgb(channels, layer):
    return np.stack([np.asarray(channels[f"{layer}.{c}" if layer else c], np.float32) for c in "RGB"], -1)


def _run(capsys, *args):
    """``vision denoise ARGS``, with ``--model flr`` unless ARGS name a model: these tests compare the command with
    ``denoise()``'s FLR (the command's own default, FLNR, has its test in test_denoise_cli.py)."""
    capsys.readouterr()
    args = [*map(str, args)]
    rc = main(["denoise", *args, *([] if "--model" in args else ["--model", "flr"])])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def frame():
    return read_frame(asset_path("scenes", "scene_00001", "frame_00.exr"))


# --------------------------------------------------------------------------- real Blender files

def test_real_cycles_frame_is_denoised_towards_the_4096_spp_reference(tmp_path, capsys):
    src = BLENDER / "cycles_float.exr"
    rc, out, err = _run(capsys, src, "-o", tmp_path / "o", "-q")
    assert rc == 0, err
    # the Denoising passes were used, not Normal / Depth (whose sky depth is 1e10), and that was said
    assert "albedo <- ViewLayer.Denoising Albedo.RGB" in out and "normal <- ViewLayer.Denoising Normal.XYZ" in out
    assert "depth <- ViewLayer.Denoising Depth.Z" in out and "emission <- ViewLayer.Emit.RGB" in out
    assert "warning" not in err  # albedo up to 31 on the lamp is explained by its Emit pass
    noisy, got = read_exr(src), read_exr(tmp_path / "o" / "cycles_float.exr")
    ref = _layer_rgb(read_exr(BLENDER / "cycles_reference.exr"), "")
    before = M.psnr(_layer_rgb(noisy, "ViewLayer.Combined"), ref)
    after = M.psnr(_layer_rgb(got, "ViewLayer.Combined"), ref)
    assert after >= before + 7, (before, after)  # 17.6 -> 26.1 dB when written
    # alpha and every other pass come through bit for bit, the renderer's header too
    assert set(got) == set(noisy)
    for name, arr in noisy.items():
        if not name.startswith("ViewLayer.Combined.") or name.endswith(".A"):
            assert got[name].dtype == arr.dtype and np.array_equal(got[name], arr), name
    hdr = read_exr_header(tmp_path / "o" / "cycles_float.exr")
    assert hdr["BlenderMultiChannel"] == read_exr_header(src)["BlenderMultiChannel"]
    assert json.loads(hdr["vision.denoise.settings"])["model"] == "flr" and hdr["vision.denoiser"].startswith("flr ")


def test_real_half_frame_with_two_view_layers(tmp_path, capsys):
    src = BLENDER / "cycles_half_2layers.exr"
    rc, out, err = _run(capsys, src, "-o", tmp_path / "o")
    assert rc == 0, err
    assert "[Layer2] color <- Layer2.Combined.RGB" in out and "[ViewLayer] color <- ViewLayer.Combined.RGB" in out
    # Layer2 has no Emit pass: its lamp's albedo (up to 31) is clamped, which loses information: one note
    assert err.count("warning") == 1 and "Layer2" in err and "99 pixel(s)" in err
    noisy, got = read_exr(src), read_exr(tmp_path / "o" / src.name)
    ref = _layer_rgb(read_exr(BLENDER / "cycles_reference.exr"), "")
    # without an Emit pass the lamp's light is smoothed into what it lights (what the warning says): +2.7 dB
    # where ViewLayer, with it, gains 8.5
    for layer, gain in (("ViewLayer", 7), ("Layer2", 1.5)):
        assert M.psnr(_layer_rgb(got, f"{layer}.Combined"), ref) >= M.psnr(_layer_rgb(noisy, f"{layer}.Combined"),
                                                                            ref) + gain, layer
        # the layer is written in the denoised colour's type (float32): the half alpha widened, exactly
        assert got[f"{layer}.Combined.A"].dtype == np.float32
        assert np.array_equal(got[f"{layer}.Combined.A"], noisy[f"{layer}.Combined.A"].astype(np.float32))
        assert np.array_equal(got[f"{layer}.Denoising Albedo.R"], noisy[f"{layer}.Denoising Albedo.R"])
    # each view layer is denoised on its own passes: ViewLayer's result is the float frame's, to half rounding
    single = read_exr(tmp_path / "o" / src.name)
    rc, _, _ = _run(capsys, BLENDER / "cycles_float.exr", "-o", tmp_path / "f", "-q")
    flt = _layer_rgb(read_exr(tmp_path / "f" / "cycles_float.exr"), "ViewLayer.Combined")
    np.testing.assert_allclose(_layer_rgb(single, "ViewLayer.Combined"), flt, rtol=0.02, atol=0.02)
    # --half --only-rgb: just the beauties and their alphas, as float16
    rc, _, _ = _run(capsys, src, "-o", tmp_path / "h", "-q", "--half", "--only-rgb")
    small = read_exr(tmp_path / "h" / src.name)
    assert rc == 0 and set(small) == {f"{la}.Combined.{c}" for la in ("ViewLayer", "Layer2") for c in "RGBA"}
    assert all(a.dtype == np.float16 for a in small.values())
    np.testing.assert_array_equal(small["Layer2.Combined.R"], got["Layer2.Combined.R"].astype(np.float16))


def test_noisy_image_is_denoised_into_combined(tmp_path, capsys):
    """With Blender's denoiser on, ``Combined`` holds Blender's result and ``Noisy Image`` the input."""
    real = read_exr(BLENDER / "cycles_float.exr")
    ch = dict(real)
    for c in "RGB":
        ch[f"ViewLayer.Noisy Image.{c}"] = real[f"ViewLayer.Combined.{c}"]
        ch[f"ViewLayer.Combined.{c}"] = np.zeros_like(real[f"ViewLayer.Combined.{c}"])  # not to be read
    write_exr(tmp_path / "on.exr", ch)
    rc, out, err = _run(capsys, tmp_path / "on.exr", "-o", tmp_path / "o", "-q")
    assert rc == 0, err
    assert "color <- ViewLayer.Noisy Image.RGB" in out and "denoised -> ViewLayer.Combined.RGB" in out
    _run(capsys, BLENDER / "cycles_float.exr", "-o", tmp_path / "ref", "-q")
    got = read_exr(tmp_path / "o" / "on.exr")
    want = _layer_rgb(read_exr(tmp_path / "ref" / "cycles_float.exr"), "ViewLayer.Combined")
    np.testing.assert_allclose(_layer_rgb(got, "ViewLayer.Combined"), want, rtol=1e-6, atol=1e-6)
    assert np.array_equal(got["ViewLayer.Noisy Image.G"], real["ViewLayer.Combined.G"])


@pytest.mark.parametrize("post", ["copy", "gamma"])
def test_blender_composite_layer_is_not_denoised_as_a_render(tmp_path, capsys, post):
    """Blender writes its compositor's output as ``Composite.Combined``: a plain copy of the view layer gets
    the denoised result too, a post-processed one (here a gamma node) passes through untouched."""
    real = read_exr(BLENDER / "cycles_float.exr")
    ch = dict(real)
    for c in "RGBA":
        v = real[f"ViewLayer.Combined.{c}"]
        ch[f"Composite.Combined.{c}"] = v.copy() if post == "copy" or c == "A" else np.sqrt(v)
    write_exr(tmp_path / "comp.exr", ch)
    rc, out, err = _run(capsys, tmp_path / "comp.exr", "-o", tmp_path / "o", "-q")
    assert rc == 0 and "[Composite]" not in out, out + err
    got = read_exr(tmp_path / "o" / "comp.exr")
    beauty = _layer_rgb(got, "ViewLayer.Combined")
    if post == "copy":
        assert "+ Composite.Combined.RGB" in out and np.array_equal(_layer_rgb(got, "Composite.Combined"), beauty)
    else:
        assert np.array_equal(_layer_rgb(got, "Composite.Combined"), _layer_rgb(ch, "Composite.Combined"))
    _run(capsys, BLENDER / "cycles_float.exr", "-o", tmp_path / "ref", "-q")
    np.testing.assert_array_equal(beauty, _layer_rgb(read_exr(tmp_path / "ref" / "cycles_float.exr"),
                                                     "ViewLayer.Combined"))


def test_denoising_passes_are_preferred_over_normal_and_depth():
    names = [f"VL.{p}.{c}" for p, cs in [("Combined", "RGBA"), ("Normal", "XYZ"), ("Depth", "Z"),
                                          ("Denoising Normal", "XYZ"), ("Denoising Depth", "Z"),
                                          ("Denoising Albedo", "RGB"), ("DiffCol", "RGB")] for c in cs]
    for order in (names, names[::-1]):
        f = find_fields(order)
        assert f["normal"] == ["VL.Denoising Normal.X", "VL.Denoising Normal.Y", "VL.Denoising Normal.Z"]
        assert f["depth"] == ["VL.Denoising Depth.Z"] and f["albedo"][0] == "VL.Denoising Albedo.R"
    # without them the plain passes are still used
    f = find_fields([n for n in names if "Denoising" not in n])
    assert f["normal"][0] == "VL.Normal.X" and f["depth"] == ["VL.Depth.Z"] and f["albedo"][0] == "VL.DiffCol.R"
    assert view_layers(["R", "albedo.R", "A.Combined.R", "B.Depth.Z"]) == {"": ["R", "albedo.R"],
                                                                         "A": ["A.Combined.R"], "B": ["B.Depth.Z"]}


# --------------------------------------------------------------------------- renderer conventions

def test_albedo_above_one_by_hand():
    alb = np.array([[[0.5, 0.5, 0.5], [0.73, 1.03, 0.73], [31.1, 28.1, 22.1], [3.0, 0.2, 0.1]]], np.float32)
    emi = np.array([[[0, 0, 0], [0, 0, 0], [30.0, 27.0, 21.0], [0, 0, 0]]], np.float32)
    got, note = renderer_albedo(alb, emi)
    want = np.array([[[0.5, 0.5, 0.5], [0.73, 1.0, 0.73], [1.0, 1.0, 1.0], [1.0, 0.2, 0.1]]], np.float32)
    np.testing.assert_allclose(got, want, atol=1e-5)  # the lamp: 31.1 - 30 = 1.1, clamped
    assert "1 pixel(s)" in note and "max 3" in note  # only the unexplained one loses information
    got, note = renderer_albedo(alb[:, :2], None)  # glossy just above 1: clamped without a note
    np.testing.assert_allclose(got, want[:, :2]) and note is None
    assert note is None
    got, note = renderer_albedo(alb, None)
    assert "2 pixel(s)" in note and "max 31.1" in note and "Passes > Light > Emission" in note
    # Cycles sums a surface's layered closures: the default Principled BSDF writes up to 1.74 at grazing angles
    # with no emitter anywhere (diffuse 0.8 + specular); clamped to 1 without a note, with or without an Emit pass
    layered = np.array([[[1.74, 1.74, 1.74], [2.2, 1.9, 1.6], [0.8, 0.8, 0.8]]], np.float32)
    for emission in (None, np.zeros_like(layered)):
        got, note = renderer_albedo(layered, emission)
        assert note is None
        np.testing.assert_array_equal(got, np.minimum(layered, 1))
    got, note = renderer_albedo(layered + np.float32(0.8), None)  # 2.54 and 3.0: more than surfaces reach
    assert "at 2 pixel(s)" in note and "max 3" in note


def test_albedo_above_one_is_not_refused(tmp_path, capsys):
    frame = read_frame(asset_path("scenes", "scene_00002", "frame_00.exr"))  # a lamp of radiance 29 in view
    alb = frame["albedo"].copy()
    lamp = frame["emission"].max(-1) > 1  # bright emitters: their albedo then exceeds 1.05 for sure
    alb[lamp] += frame["emission"][lamp]  # as Cycles writes it
    alb[40:44, 40:44] *= 1.04  # glossy tint
    d = dict(frame, albedo=alb)
    write_frame(tmp_path / "f.exr", {k: d[k] for k in ("color", *GUIDES)})
    rc, out, err = _run(capsys, tmp_path / "f.exr", "-o", tmp_path / "o", "-q")
    assert rc == 0 and "warning" not in err, err
    hand = np.minimum(np.where(lamp[..., None], alb - frame["emission"], alb), 1)
    want = denoise(frame["color"], **{k: frame[k] for k in GUIDES if k != "albedo"}, albedo=hand, model="flr")
    np.testing.assert_allclose(_layer_rgb(read_exr(tmp_path / "o" / "f.exr"), ""), want, rtol=1e-6, atol=1e-6)
    # the same albedo without the emission buffer: clamped, and a warning that counts what was lost
    write_frame(tmp_path / "g.exr", {k: d[k] for k in ("color", "albedo", "normal", "depth")})
    rc, out, err = _run(capsys, tmp_path / "g.exr", "-o", tmp_path / "o")
    assert rc == 0 and f"albedo above 2.5 " in err and f"at {int((alb.max(-1) > 2.5).sum())} pixel(s)" in err
    assert "g.exr" in err and (alb.max(-1) > 2.5).sum() < (alb.max(-1) > 1.05).sum()  # the glossy tint: no note


@pytest.mark.parametrize("sky", [1e10, np.inf, 3.4e38])
def test_sky_depth_is_no_surface(frame, tmp_path, capsys, sky):
    depth = frame["depth"].copy()
    hole = depth[..., 0] <= 0
    hole[:6, :] = True  # make sure there is sky
    depth[hole] = 0
    far = depth.copy()
    far[hole] = sky
    np.testing.assert_array_equal(no_surface_depth(far), depth)
    # Cycles writes the sky's colour into the Denoising Albedo (here above 1 in blue) on half the sky, and
    # albedo 0 (as Mitsuba does) on the other half
    albedo = frame["albedo"].copy()
    env = hole.copy()
    env[:, ::2] = False
    albedo[env] = (0.4, 0.7, 1.3)
    albedo[hole & ~env] = 0
    fields = dict(frame, depth=far, albedo=albedo)
    write_frame(tmp_path / "f.exr", {k: fields[k] for k in ("color", *GUIDES)})
    rc, out, err = _run(capsys, tmp_path / "f.exr", "-o", tmp_path / "o", "-q")
    assert rc == 0 and "NaN/Inf" not in err and "albedo above" not in err, err  # the sky is neither
    # where the albedo holds the environment's colour, the pixel's colour is kept exactly (emission, albedo 0)
    want = denoise(frame["color"], **{k: frame[k] for k in GUIDES if k not in ("depth", "albedo", "emission")},
                   depth=depth, albedo=np.where(env[..., None], 0, albedo),
                   emission=np.where(env[..., None], frame["color"], frame["emission"]), model="flr")
    got = _layer_rgb(read_exr(tmp_path / "o" / "f.exr"), "")
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got[env], frame["color"][env])


def test_mitsuba_aov_layout_keeps_alpha_and_aovs(frame, tmp_path, capsys):
    """What Mitsuba's hdrfilm + aov integrator writes: root R G B A, then albedo.*, nn.*, dd.T, pp.*."""
    ch = {c: np.ascontiguousarray(frame["color"][..., k]) for k, c in enumerate("RGB")}
    alpha = np.linspace(0, 1, frame["color"].shape[1], dtype=np.float32)[None].repeat(frame["color"].shape[0], 0)
    ch["A"] = alpha
    for layer, field, comps in (("albedo", "albedo", "RGB"), ("nn", "normal", "XYZ"), ("pp", "position", "XYZ")):
        ch.update({f"{layer}.{c}": np.ascontiguousarray(frame[field][..., k]) for k, c in enumerate(comps)})
    ch["dd.T"] = np.ascontiguousarray(frame["depth"][..., 0])
    write_exr(tmp_path / "mi.exr", ch)
    rc, out, err = _run(capsys, tmp_path / "mi.exr", "-o", tmp_path / "o", "-q")
    assert rc == 0, err
    assert "normal <- nn.XYZ" in out and "depth <- dd.T" in out and "alpha A" in out
    got = read_exr(tmp_path / "o" / "mi.exr")
    assert set(got) == set(ch) and np.array_equal(got["A"], alpha) and np.array_equal(got["pp.Y"], ch["pp.Y"])
    want = denoise(frame["color"], **{k: frame[k] for k in ("albedo", "normal", "depth", "position")}, model="flr")
    np.testing.assert_allclose(_layer_rgb(got, ""), want, rtol=1e-6, atol=1e-6)


def test_real_mitsuba_aov_frame(tmp_path, capsys):
    """Mitsuba's aov integrator writes the image twice (root R G B and the nested integrator's img.R G B A)
    and has no emission AOV: both copies get the result, img.A is the alpha, and the missing emission is said."""
    mi = Path(__file__).resolve().parent / "data" / "mitsuba"
    src = mi / "mitsuba_aov.exr"
    rc, out, err = _run(capsys, src, "-o", tmp_path / "a", "-q")
    assert rc == 0 and "no emission buffer" in out and "denoised -> RGB + img.RGB, alpha img.A" in out, out + err
    rc, out, err = _run(capsys, src, "-o", tmp_path / "o", "-q", "--emission", mi / "mitsuba_emission.exr")
    assert rc == 0 and "normal <- nn.XYZ" in out and "depth <- dd.T" in out and "no emission" not in out, out + err
    noisy, got = read_exr(src), read_exr(tmp_path / "o" / src.name)
    ref = _layer_rgb(read_exr(mi / "mitsuba_reference.exr"), "")
    before, after = M.psnr(_layer_rgb(noisy, ""), ref), M.psnr(_layer_rgb(got, ""), ref)
    assert after >= before + 5, (before, after)  # 17.9 -> 24.6 dB when written
    assert np.array_equal(_layer_rgb(got, "img"), _layer_rgb(got, "")) and set(got) == set(noisy)
    kept = [n for n in noisy if n not in ("R", "G", "B", "img.R", "img.G", "img.B")]
    assert all(np.array_equal(got[n], noisy[n]) for n in kept) and "img.A" in kept


def test_a_crop_keeps_its_place_on_the_canvas(frame, tmp_path, capsys):
    """A data window inside the display window (a border render, a compositor's crop) is kept."""
    import OpenEXR

    crop = {k: np.ascontiguousarray(frame[k][8:40, 16:64]) for k in ("color", *GUIDES)}
    ch = {f"{prefix}{c}": np.ascontiguousarray(crop[field][..., k])
          for field, prefix, comps in (("color", "", "RGB"), ("albedo", "albedo.", "RGB"), ("normal", "normal.", "XYZ"),
                                      ("depth", "depth.", "Z"), ("emission", "emission.", "RGB"))
          for k, c in enumerate(comps)}
    window = (np.array([16, 8], np.int32), np.array([63, 39], np.int32))
    hdr = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage, "dataWindow": window,
           "displayWindow": (np.array([0, 0], np.int32), np.array([127, 127], np.int32))}
    OpenEXR.File(hdr, {k: v.copy() for k, v in ch.items()}).write(str(tmp_path / "crop.exr"))
    rc, out, err = _run(capsys, tmp_path / "crop.exr", "-o", tmp_path / "o", "-q")
    assert rc == 0, err
    got = read_exr_header(tmp_path / "o" / "crop.exr")
    assert [list(v) for v in got["dataWindow"]] == [[16, 8], [63, 39]]
    assert [list(v) for v in got["displayWindow"]] == [[0, 0], [127, 127]]
    want = denoise(crop["color"], **{k: crop[k] for k in ("albedo", "normal", "depth", "emission")}, model="flr")
    np.testing.assert_allclose(_layer_rgb(read_exr(tmp_path / "o" / "crop.exr"), ""), want, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- PFM

def _pfm_by_hand(path, img, big_endian=False, one_line=False):
    """PFM written without the module under test: header text, then rows bottom to top."""
    img = np.asarray(img, np.float32)
    kind = b"PF" if img.ndim == 3 else b"Pf"
    sep = b" " if one_line else b"\n"
    head = kind + sep + b"%d %d" % (img.shape[1], img.shape[0]) + sep + (b"1.0" if big_endian else b"-1.0") + b"\n"
    Path(path).write_bytes(head + img[::-1].astype(">f4" if big_endian else "<f4").tobytes())


def test_pfm_reader_and_writer(tmp_path, rng):
    img = rng.standard_normal((5, 7, 3)).astype(np.float32)
    for big, one in ((False, False), (True, False), (False, True)):
        _pfm_by_hand(tmp_path / "a.pfm", img, big, one)
        assert np.array_equal(read_pfm(tmp_path / "a.pfm"), img)
    _pfm_by_hand(tmp_path / "g.pfm", img[..., 0])
    assert np.array_equal(read_pfm(tmp_path / "g.pfm"), img[..., :1])
    write_pfm(tmp_path / "w.pfm", img)
    _pfm_by_hand(tmp_path / "h.pfm", img)
    assert (tmp_path / "w.pfm").read_bytes() == (tmp_path / "h.pfm").read_bytes()
    (tmp_path / "t.pfm").write_bytes((tmp_path / "h.pfm").read_bytes()[:-8])
    with pytest.raises(ValueError, match="t.pfm: truncated PFM"):
        read_pfm(tmp_path / "t.pfm")


def test_oidn_style_pfm_buffers(frame, tmp_path, capsys):
    """``oidnDenoise``-style inputs: colour, albedo and normal as separate PFM files."""
    for name, field in (("color", "color"), ("albedo", "albedo"), ("normal", "normal")):
        _pfm_by_hand(tmp_path / f"{name}.0003.pfm", frame[field])
    _pfm_by_hand(tmp_path / "depth.0003.pfm", frame["depth"][..., 0])  # Pf: one channel
    args = [tmp_path / "color.0003.pfm", "-o", tmp_path / "o", "-q"]
    for name in ("albedo", "normal", "depth"):
        args += [f"--{name}", str(tmp_path / f"{name}.{{frame}}.pfm")]
    rc, out, err = _run(capsys, *args)
    assert rc == 0, err
    assert "albedo <- " in out and "albedo.0003.pfm:RGB" in out and "depth.0003.pfm:Y" in out
    want = denoise(frame["color"], **{k: frame[k] for k in ("albedo", "normal", "depth")}, model="flr")
    np.testing.assert_allclose(_layer_rgb(read_exr(tmp_path / "o" / "color.0003.exr"), ""), want,
                               rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- bad files

def _bad_file(kind, path):
    real = (BLENDER / "cycles_float.exr").read_bytes()
    data = {"empty": b"", "text": b"not an image\n" * 20, "png": b"\x89PNG\r\n\x1a\n" + b"\0" * 64,
            "header": real[:300], "truncated": real[: len(real) // 2]}[kind]
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("kind, match", [
    ("empty", "the file is empty"),
    ("text", "not an OpenEXR file"),
    ("png", "it is a PNG image"),
    ("header", "truncated or damaged OpenEXR file (300 bytes)"),
    ("truncated", "truncated or damaged OpenEXR file"),
])
def test_bad_input_files_stop_with_one_line(tmp_path, capsys, kind, match):
    bad = _bad_file(kind, tmp_path / "frame_0001.exr")
    out = tmp_path / "new" / "out"
    rc, stdout, err = _run(capsys, bad, "-o", out, "-q")
    assert rc == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and match in lines[0] and str(bad) in lines[0], err
    assert "Traceback" not in err and not stdout.strip()
    assert not out.exists()  # no empty output folder left behind
    # as a separate buffer file: the same line names that file
    good = BLENDER / "cycles_float.exr"
    rc, _, err = _run(capsys, good, "-o", out, "-q", "--albedo", bad)
    assert rc == 2 and match in err and str(bad) in err and not out.exists()


# --------------------------------------------------------------------------- resume

def test_resume_skips_only_outputs_made_with_the_same_settings(tmp_path, capsys):
    src = BLENDER / "cycles_float.exr"
    out = tmp_path / "o"
    target = out / src.name
    assert _run(capsys, src, "-o", out, "-q")[0] == 0
    stamp = target.stat().st_mtime_ns
    rc, stdout, _ = _run(capsys, src, "-o", out, "-q")
    assert rc == 0 and "skipped 1" in stdout and target.stat().st_mtime_ns == stamp
    flr = read_exr(target)
    rc, stdout, _ = _run(capsys, src, "-o", out, "-q", "--model", "flnr")
    assert rc == 0 and "denoised 1 frame" in stdout
    assert f"redoing {target}: made with other settings (model flr -> flnr" in stdout
    assert json.loads(read_exr_header(target)["vision.denoise.settings"])["model"] == "flnr"
    assert not np.array_equal(read_exr(target)["ViewLayer.Combined.R"], flr["ViewLayer.Combined.R"])
    rc, stdout, _ = _run(capsys, src, "-o", out, "-q", "--model", "flnr")
    assert "skipped 1" in stdout and "redoing" not in stdout
    rc, stdout, _ = _run(capsys, src, "-o", out, "-q", "--model", "flnr", "--radius", "4", "--only-rgb")
    assert "radius default -> 4" in stdout and "only_rgb false -> true" in stdout
    # an output from before settings were recorded, or one that cannot be read, is redone
    write_exr(target, {"R": np.zeros((2, 2), np.float32)})
    rc, stdout, _ = _run(capsys, src, "-o", out, "-q")
    assert "records no settings" in stdout and "denoised 1 frame" in stdout
    target.write_bytes(b"")
    rc, stdout, _ = _run(capsys, src, "-o", out, "-q")
    assert "cannot be read" in stdout and "denoised 1 frame" in stdout
    assert read_exr(target)["ViewLayer.Combined.R"].shape == (48, 64)


def test_temporal_keeps_one_history_per_view_layer(tmp_path, capsys):
    from vision.denoise import TemporalDenoiser

    frames = [read_frame(asset_path("scenes", "scene_00001", f"frame_{k:02d}.exr")) for k in range(2)]
    passes = (("Combined", "color", "RGB"), ("Denoising Albedo", "albedo", "RGB"),
              ("Denoising Normal", "normal", "XYZ"), ("Denoising Depth", "depth", "Z"), ("Emit", "emission", "RGB"))
    for k, d in enumerate(frames):
        ch = {}
        for layer, gain in (("A", 1.0), ("B", 0.25)):  # B: the same scene, a quarter as bright
            for pas, field, comps in passes:
                v = d[field] * (gain if field in ("color", "emission") else 1.0)
                ch.update({f"{layer}.{pas}.{c}": np.ascontiguousarray(v[..., i], np.float32)
                           for i, c in enumerate(comps)})
        write_exr(tmp_path / f"f_{k}.exr", ch)
    rc, out, err = _run(capsys, tmp_path / "f_*.exr", "-o", tmp_path / "o", "-q", "--temporal", "--static-camera")
    assert rc == 0, err
    for layer, gain in (("A", 1.0), ("B", 0.25)):
        tf = TemporalDenoiser(model="flr", tile=1024)  # what the command runs per view layer (no Vector pass here)
        for k, d in enumerate(frames):
            want = tf(d["color"] * gain, albedo=d["albedo"], normal=d["normal"], depth=d["depth"],
                      emission=d["emission"] * gain)
            got = _layer_rgb(read_exr(tmp_path / "o" / f"f_{k}.exr"), f"{layer}.Combined")
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{layer} {k}")


def test_half_resolution_colour_keeps_alpha_and_says_what_was_left_out(frame, tmp_path, capsys):
    """Colour (and its alpha and AOVs) at 1/2 of the guides: the output has the guides' size, the alpha is
    carried over (each sample covers its 2 x 2 block), the other half-size channels cannot be, and are named."""
    h, w, _ = frame["color"].shape
    small = np.ascontiguousarray(frame["color"][::2, ::2])
    alpha = (np.arange(h // 2 * (w // 2), dtype=np.float32).reshape(h // 2, w // 2) % 3) / 2
    ch = {**{c: np.ascontiguousarray(small[..., k]) for k, c in enumerate("RGB")}, "A": alpha,
          "extra.Y": np.ones_like(alpha)}
    write_exr(tmp_path / "half.exr", ch)
    write_frame(tmp_path / "g.exr", {k: frame[k] for k in GUIDES})
    args = [tmp_path / "half.exr", "-o", tmp_path / "o"] + sum([[f"--{k}", tmp_path / "g.exr"] for k in GUIDES], [])
    rc, out, err = _run(capsys, *args)
    assert rc == 0, err
    assert "1 channel(s) at the colour's resolution were not passed through" in err
    got = read_exr(tmp_path / "o" / "half.exr")
    assert set(got) == {"R", "G", "B", "A"} and got["R"].shape == (h, w)
    np.testing.assert_array_equal(got["A"], np.kron(alpha, np.ones((2, 2), np.float32)))


def test_half_output_clamps_to_the_largest_half_not_inf():
    from vision.data.render_layers import Layer, RenderFile, output_channels

    rgb = np.array([[[1.0, 7e4, -1e6]]], np.float32)
    rf = RenderFile(Path("x.exr"), {c: np.zeros((1, 1), np.float32) for c in "RGB"}, {},
                    [Layer("", {}, {}, ["R", "G", "B"])])
    out, notes = output_channels(rf, [rgb], half=True)
    assert [float(out[c][0, 0]) for c in "RGB"] == [1.0, 65504.0, -65504.0]
    assert all(out[c].dtype == np.float16 for c in "RGB") and notes == ["--half: 2 value(s) beyond +-65504 clamped to it"]


def test_multi_part_exr_is_read_whole(frame, tmp_path, capsys):
    """Compositing packages write AOVs as parts of one file: every part is read (a name in several parts
    is told apart by its part's name) and the output holds them all."""
    import OpenEXR

    def hdr():  # one dict per part: Part() writes the part's name into the header it is given
        return {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}

    rgba = {c: np.ascontiguousarray(frame["color"][..., k]) for k, c in enumerate("RGB")}
    aov = {f"{f}.{c}": np.ascontiguousarray(frame[f][..., k]) for f, cs in (("albedo", "RGB"), ("normal", "XYZ"),
                                                                            ("emission", "RGB")) for k, c in enumerate(cs)}
    deep = {"depth.Z": np.ascontiguousarray(frame["depth"][..., 0])}
    OpenEXR.File([OpenEXR.Part(hdr(), {k: v.copy() for k, v in rgba.items()}, name="beauty"),
                  OpenEXR.Part(hdr(), {k: v.copy() for k, v in aov.items()}, name="aovs"),
                  OpenEXR.Part(hdr(), {k: v.copy() for k, v in deep.items()}, name="depth")]).write(str(tmp_path / "mp.exr"))
    rc, out, err = _run(capsys, tmp_path / "mp.exr", "-o", tmp_path / "o", "-q")
    assert rc == 0 and "normal <- normal.XYZ" in out and "depth <- depth.Z" in out, out + err
    got = read_exr(tmp_path / "o" / "mp.exr")
    assert set(got) == set(rgba) | set(aov) | set(deep)
    want = denoise(frame["color"], **{k: frame[k] for k in ("albedo", "normal", "depth", "emission")}, model="flr")
    np.testing.assert_allclose(_layer_rgb(got, ""), want, rtol=1e-6, atol=1e-6)
