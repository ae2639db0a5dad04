"""vision.data.fields: the one table of render buffers, the names derived from it, and find_fields on renderer names."""
import subprocess
import sys

import numpy as np
import pytest

from vision.data import fields as F

BLENDER = ["ViewLayer.Combined.R", "ViewLayer.Combined.G", "ViewLayer.Combined.B", "ViewLayer.Combined.A",
           "ViewLayer.Noisy Image.R", "ViewLayer.Noisy Image.G", "ViewLayer.Noisy Image.B",
           "ViewLayer.Denoising Albedo.R", "ViewLayer.Denoising Albedo.G", "ViewLayer.Denoising Albedo.B",
           "ViewLayer.Denoising Normal.X", "ViewLayer.Denoising Normal.Y", "ViewLayer.Denoising Normal.Z",
           "ViewLayer.Denoising Depth.Z", "ViewLayer.Emit.R", "ViewLayer.Emit.G", "ViewLayer.Emit.B",
           "ViewLayer.AO.R", "ViewLayer.AO.G", "ViewLayer.AO.B",
           "ViewLayer.Vector.X", "ViewLayer.Vector.Y", "ViewLayer.Vector.Z", "ViewLayer.Vector.W"]


def test_channel_counts():
    assert F.CHANNELS == {"color": 3, "albedo": 3, "normal": 3, "depth": 1, "ao": 1, "emission": 3, "position": 3,
                          "reference": 3, "motion": 4, "index": 1, "history": 1, "spp": 1, "camnormal": 3,
                          "segment": 1, "semantic": 1, "glossy": 1}
    assert F.NAMES == tuple(F.CHANNELS) and len(set(F.NAMES)) == len(F.TABLE)
    assert set(F.ALIASES) == {"color", "albedo", "normal", "depth", "ao", "emission", "position", "reference",
                              "motion", "index"}  # the buffers read from a renderer's layers
    for f in F.TABLE:
        assert all(len(c) == f.channels for c in f.components), f.name
        assert f.meaning and all(a == a.lower() and "." not in a for a in f.aliases), f.name
    assert F.BY_NAME["motion"].components[0] == ("X", "Y", "Z", "W")
    assert sum(F.CHANNELS[g] for g in F.FLNR_LAYOUT) == F.FEATURE_CHANNELS


def test_no_alias_names_two_fields():
    """A layer name belongs to one field at most, so the order of the table never decides which field claims it."""
    seen = {}
    for f in F.TABLE:
        for a in f.aliases:
            assert a not in seen, f"{a!r} names {seen.get(a)} and {f.name}"
            seen[a] = f.name


def test_former_tuples_are_the_derived_names():
    from vision.data import render_layers as R
    from vision.denoise import buffers as B, flnr
    from vision.denoise.flnr import cells
    from vision.pipelines.bench import denoise as bench, denoise_files
    from vision.pipelines.cli import denoise as cli
    from vision.pipelines.demos import denoise as demo

    every_guide = ("albedo", "normal", "depth", "ao", "emission", "position")
    assert F.GUIDES == every_guide == cli.GUIDES == bench.GUIDES == denoise_files.GUIDES
    assert F.INPUTS == ("color", *every_guide) == B.INPUTS
    assert F.REGRESSION_ORDER == ("normal", "depth", "ao", "albedo", "position") == B.REGRESSION_ORDER
    assert F.FLNR_LAYOUT == ("normal", "depth", "ao", "albedo") == cells.FLNR_LAYOUT == flnr.FLNR_LAYOUT
    assert F.FLNR_GUIDES == ("albedo", "normal", "depth", "ao", "emission") == demo.FLNR_GUIDES
    assert {n: F.CHANNELS[n] for n in R.RENDER_PASSES} == {"color": 3, "albedo": 3, "normal": 3, "depth": 1, "ao": 1,
                                                           "emission": 3, "position": 3, "motion": 4, "index": 1}
    assert {k: v for k, v in B.CHANNELS.items() if k not in ("motion", "index", "history", "spp", "camnormal",
                                                            "segment", "semantic", "glossy")} == {
        "color": 3, "albedo": 3, "normal": 3, "depth": 1, "ao": 1, "emission": 3, "position": 3, "reference": 3}
    assert B.find_fields is F.find_fields and cells.FEATURE_CHANNELS == 8
    assert B.guide_list(["position", "albedo", "depth"]) == ["depth", "albedo", "position"]
    assert B.guide_list(F.GUIDES) == list(F.FLNR_LAYOUT)


def test_find_fields_blender_with_motion():
    f = F.find_fields(BLENDER)
    assert f["color"] == ["ViewLayer.Noisy Image.R", "ViewLayer.Noisy Image.G", "ViewLayer.Noisy Image.B"]
    assert f["motion"] == ["ViewLayer.Vector.X", "ViewLayer.Vector.Y", "ViewLayer.Vector.Z", "ViewLayer.Vector.W"]
    assert f["albedo"][0] == "ViewLayer.Denoising Albedo.R" and f["normal"][2] == "ViewLayer.Denoising Normal.Z"
    assert f["depth"] == ["ViewLayer.Denoising Depth.Z"] and f["ao"] == ["ViewLayer.AO.R"]
    assert f["emission"] == ["ViewLayer.Emit.R", "ViewLayer.Emit.G", "ViewLayer.Emit.B"]
    assert "position" not in f and "reference" not in f
    # three of the four components are not a motion pass; R G B A of a layer named for it are
    assert "motion" not in F.find_fields([n for n in BLENDER if not n.endswith("Vector.W")])
    assert F.find_fields([f"mv.{c}" for c in "RGBA"])["motion"] == ["mv.R", "mv.G", "mv.B", "mv.A"]


def test_four_component_layers_of_three_channel_fields_are_read_as_before():
    rgba = [f"{layer}.{c}" for layer in ("Combined", "albedo", "Emit", "normal") for c in "RGBA"]
    f = F.find_fields(rgba)
    assert f["color"] == ["Combined.R", "Combined.G", "Combined.B"]
    assert f["albedo"] == ["albedo.R", "albedo.G", "albedo.B"] and f["emission"] == ["Emit.R", "Emit.G", "Emit.B"]
    assert f["normal"] == ["normal.R", "normal.G", "normal.B"] and "motion" not in f


def test_find_fields_mitsuba_without_motion():
    mitsuba = ["R", "G", "B", "A", "my_path.R", "my_path.G", "my_path.B", "my_path.A", "albedo.R", "albedo.G",
               "albedo.B", "sh_normal.X", "sh_normal.Y", "sh_normal.Z", "dd.T", "pp.X", "pp.Y", "pp.Z"]
    f = F.find_fields(mitsuba)
    assert f == {"color": ["R", "G", "B"], "albedo": ["albedo.R", "albedo.G", "albedo.B"],
                 "normal": ["sh_normal.X", "sh_normal.Y", "sh_normal.Z"], "depth": ["dd.T"],
                 "position": ["pp.X", "pp.Y", "pp.Z"]}


def test_the_table_imports_without_numpy_or_torch():
    res = subprocess.run([sys.executable, "-c", "import sys, vision.data.fields, vision.pipelines.cli.denoise\n"
                          "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[]"  # neither the table nor the command's parser loads numpy or torch


@pytest.fixture
def blender_frame(tmp_path):
    from vision.data.exr import write_exr

    rng = np.random.default_rng(3)
    h, w = 24, 32
    ch = {}
    for name in BLENDER:
        layer = name.split(".")[1]
        v = rng.random((h, w), dtype=np.float32)
        ch[name] = {"Denoising Normal": v * 2 - 1, "Denoising Albedo": v * 0.9, "Emit": v * 0, "Vector": v * 8 - 4,
                    "Denoising Depth": v + 1}.get(layer, v)
    write_exr(tmp_path / "f.exr", ch)
    return tmp_path / "f.exr", ch


def test_render_file_reads_motion_and_the_denoiser_passes_it_through(blender_frame, tmp_path, capsys):
    from vision.data.exr import read_exr
    from vision.data.render_layers import describe, read_render_file
    from vision.denoise import denoise
    from vision.pipelines.cli import main

    path, ch = blender_frame
    rf = read_render_file(path)
    layer = rf.layers[0]
    motion = layer.buffers["motion"]
    assert motion.dtype == np.float32 and motion.shape == (24, 32, 4)
    np.testing.assert_array_equal(motion[..., 3], ch["ViewLayer.Vector.W"])
    assert "motion <- ViewLayer.Vector.XYZW" in describe(rf)
    assert main(["denoise", str(path), "-o", str(tmp_path / "o"), "--model", "flr", "-q"]) == 0
    assert "motion <- ViewLayer.Vector.XYZW" in capsys.readouterr().out
    got = read_exr(tmp_path / "o" / "f.exr")
    for c in "XYZW":
        np.testing.assert_array_equal(got[f"ViewLayer.Vector.{c}"], ch[f"ViewLayer.Vector.{c}"])
    b = layer.buffers
    want = denoise(b["color"], **{k: b[k] for k in F.GUIDES if k in b}, model="flr")
    np.testing.assert_array_equal(np.stack([got[f"ViewLayer.Combined.{c}"] for c in "RGB"], -1), want)


def test_cycles_object_index_is_found_and_read():
    found = F.find_fields(["ViewLayer.Combined.R", "ViewLayer.Combined.G", "ViewLayer.Combined.B",
                           "ViewLayer.IndexOB.X", "ViewLayer.Depth.Z"])
    assert found["index"] == ["ViewLayer.IndexOB.X"] and found["depth"] == ["ViewLayer.Depth.Z"]
    assert F.find_fields(["R", "G", "B", "segment.id"])["index"] == ["segment.id"]
