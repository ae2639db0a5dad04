"""``vision bench denoise --frames MANIFEST``: renderer files as written, scored against their references."""
import json
from pathlib import Path

import numpy as np
import OpenEXR
import pytest

from cli_checks import one_line_error
from vision.pipelines.cli import main

DATA = Path(__file__).resolve().parent / "data"


def _rgb(path, layer=""):
    with OpenEXR.File(str(path), separate_channels=True) as f:
        ch = f.channels()
        prefix = f"{layer}." if layer else ""
        return np.stack([np.asarray(ch[prefix + c].pixels, np.float64) for c in "RGB"], -1)


def _psnr(x, y):  # tonemap of the issue: clamp to [0, 1], gamma 1/2.2
    t = lambda v: np.clip(v, 0, 1) ** (1 / 2.2)  # noqa: E731
    return 10 * np.log10(1 / np.mean((t(x) - t(y)) ** 2))


@pytest.mark.slow  # every denoiser over two real frames: over 5 s on 2 cores
def test_manifest_rows_score_the_files_as_the_renderer_wrote_them(tmp_path, capsys):
    out = tmp_path / "b.json"
    rc = main(["bench", "denoise", "--frames", str(DATA / "manifest.json"), "--no-oidn", "--repeat", "1",
               "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "blender 2spp" in text and "mitsuba 1spp" in text and "FLNR below FLR on" in text
    rows = {(r["scene"], r["method"]): r for r in json.loads(out.read_text())["rows"]}
    # the noisy rows, recomputed here straight from the files with OpenEXR
    blender = _psnr(_rgb(DATA / "blender/cycles_float.exr", "ViewLayer.Combined"),
                    _rgb(DATA / "blender/cycles_reference.exr"))
    mitsuba = _psnr(_rgb(DATA / "mitsuba/mitsuba_aov.exr"), _rgb(DATA / "mitsuba/mitsuba_reference.exr"))
    assert rows[("blender 2spp", "noisy")]["psnr"] == pytest.approx(blender, abs=1e-6)
    assert rows[("mitsuba 1spp", "noisy")]["psnr"] == pytest.approx(mitsuba, abs=1e-6)
    for scene in ("blender 2spp", "mitsuba 1spp"):  # the denoisers help on real files too
        assert rows[(scene, "flr")]["psnr"] > rows[(scene, "noisy")]["psnr"] + 4
    assert not any("1/2" in m for _, m in rows)  # no generator-set upsampling rows on real files


@pytest.mark.parametrize("manifest, needle", [
    ('{"frames": [{"noisy": "../x.exr", "reference": "r.exr"}]}', "not inside"),
    ('{"frames": [{"noisy": "x.exr"}]}', "needs 'noisy' and 'reference'"),
    ('{"frames": []}', "non-empty 'frames' list"),
    ("not json", "non-empty 'frames' list"),
    ('{"frames": [{"noisy": "missing.exr", "reference": "r.exr"}]}', "no such file"),
])
def test_hostile_manifests_fail_in_one_line(tmp_path, capsys, manifest, needle):
    path = tmp_path / "m.json"
    path.write_text(manifest)
    assert main(["bench", "denoise", "--frames", str(path), "--no-oidn", "--no-flnr"]) == 2
    one_line_error(capsys, needle, "m.json")


def test_scene_checks_report_scenes_and_frames(capsys):
    """The real-file acceptance lines: the average gap to OIDN high, scene groups where FLNR loses to FLR (FAIL),
    and, for information, the frames where it does."""
    from vision.pipelines.bench.denoise_files import scene_checks

    per = {("a 1spp", "flnr"): [{"psnr": 20.0}, {"psnr": 22.0}], ("a 1spp", "flr"): [{"psnr": 19.0}, {"psnr": 22.5}],
           ("b 4spp", "flnr"): [{"psnr": 25.0}], ("b 4spp", "flr"): [{"psnr": 26.0}]}
    means = {"flnr": {"psnr": 22.3}, "flr": {"psnr": 22.5}, "oidn high aux": {"psnr": 23.0}}
    assert scene_checks(per, ["a 1spp", "b 4spp"], means) is False
    out = capsys.readouterr().out
    assert "FLNR - OIDN high aux = -0.70 dB on average (>= -1.5): PASS" in out
    assert "FLNR below FLR on 1 of 2 scene group(s) (b 4spp -1.00 dB): FAIL" in out
    assert "per frame: FLNR below FLR on 2 of 3 frame(s) (worst: b 4spp #0 -1.00 dB, a 1spp #1 -0.50 dB)" in out
