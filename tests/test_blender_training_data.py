"""benchmarks/denoise/to_dataset.py: renderer scene folders become train-denoiser data through the reader
``vision denoise`` uses (so training sees what inference sees)."""
import importlib.util
import shutil
from pathlib import Path

import numpy as np
import OpenEXR

from vision.data import RenderedScenes

ROOT = Path(__file__).resolve().parents[1]
BLENDER = ROOT / "tests" / "data" / "blender"


def _load():
    spec = importlib.util.spec_from_file_location("to_dataset", ROOT / "benchmarks" / "denoise" / "to_dataset.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _channels(path):
    with OpenEXR.File(str(path), separate_channels=True) as f:
        return {k: np.asarray(v.pixels, np.float64) for k, v in f.channels().items()}


def test_blender_folder_becomes_rendered_scenes(tmp_path):
    src = tmp_path / "raw" / "blender_00_00000"
    src.mkdir(parents=True)
    shutil.copy(BLENDER / "cycles_float.exr", src / "noisy_0.exr")
    shutil.copy(BLENDER / "cycles_reference.exr", src / "reference.exr")
    (tmp_path / "raw" / "unfinished").mkdir()  # no reference yet: skipped
    assert _load().main([str(tmp_path / "raw"), str(tmp_path / "data")]) == 0
    ds = RenderedScenes(tmp_path / "data", split="all",
                        fields=["color", "reference", "albedo", "normal", "depth", "ao", "emission"])
    assert len(ds) == 1
    s = ds[0]
    ch, ref = _channels(BLENDER / "cycles_float.exr"), _channels(BLENDER / "cycles_reference.exr")
    rgb = np.stack([ch[f"ViewLayer.Combined.{c}"] for c in "RGB"])
    np.testing.assert_array_equal(s["color"].numpy(), rgb.astype(np.float32))
    np.testing.assert_array_equal(s["reference"].numpy(), np.stack([ref[c] for c in "RGB"]).astype(np.float32))
    assert not s["ao"].any()  # Cycles writes none; zero is what the denoiser sees at inference too
    # Cycles' Denoising Depth (preferred over Depth) is 0 where every sample missed: the sky, "no surface"
    sky = ch["ViewLayer.Denoising Depth.Z"] == 0
    assert sky.any() and (ch["ViewLayer.Depth.Z"][sky] >= 1e9).all()
    np.testing.assert_array_equal(s["depth"][0].numpy(), ch["ViewLayer.Denoising Depth.Z"].astype(np.float32))
    # where the sky shows, Cycles' albedo holds its colour: it becomes emission (colour kept), albedo 0
    assert (s["albedo"].numpy()[:, sky] == 0).all()
    np.testing.assert_array_equal(s["emission"].numpy()[:, sky], rgb.astype(np.float32)[:, sky])
    surf = ~sky & (ch["ViewLayer.Emit.R"] == 0)
    alb = np.stack([ch[f"ViewLayer.Denoising Albedo.{c}"] for c in "RGB"])
    np.testing.assert_allclose(s["albedo"].numpy()[:, surf], np.minimum(alb[:, surf], 1), atol=1e-7)
    # a second run converts nothing new
    assert _load().main([str(tmp_path / "raw"), str(tmp_path / "data")]) == 0
