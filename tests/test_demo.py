"""`vision demo --only guided-filter` end to end, checked against an independent float64 guided filter;
and vision.figures.side_by_side."""
import numpy as np
import pytest
import torch

from vision.bundled import asset_path
from vision.figures import side_by_side
from vision.io import read_image
from vision.pipelines.demos import guided_filter as section
from vision.pipelines.bench.peers import cumsum_guided_filter_color
from vision.pipelines.cli import main


def total_variation(img: np.ndarray) -> float:
    img = img.astype(np.float64)
    return float(np.abs(np.diff(img, axis=0)).sum() + np.abs(np.diff(img, axis=1)).sum())


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    assert main(["demo", "--only", "guided-filter", "-o", str(out), "--device", "cpu"]) == 0
    return out / "guided-filter"


def test_demo_writes_its_files(demo_dir):
    photo = read_image(asset_path(*section.PHOTO))
    for name in ("smoothed.png", "enhanced.png", "comparison.png"):
        assert (demo_dir / name).is_file(), name
    h, w = photo.shape[:2]
    assert read_image(demo_dir / "smoothed.png").shape == (h, w, 3)
    assert read_image(demo_dir / "enhanced.png").shape == (h, w, 3)
    comp = read_image(demo_dir / "comparison.png")
    assert comp.shape[0] > h and comp.shape[1] > 3 * w and comp.shape[2] == 3  # three tiles + label band


def test_smoothing_lowers_and_enhancement_raises_total_variation(demo_dir):
    photo = read_image(asset_path(*section.PHOTO))[:, :, :3]
    tv_in = total_variation(photo)
    tv_smooth = total_variation(read_image(demo_dir / "smoothed.png"))
    tv_enh = total_variation(read_image(demo_dir / "enhanced.png"))
    assert tv_smooth < 0.8 * tv_in, (tv_smooth, tv_in)
    assert tv_enh > 1.5 * tv_in, (tv_enh, tv_in)


def test_demo_output_matches_an_independent_colour_guided_filter(demo_dir):
    # float64 cumsum colour guided filter (checked against a direct window sum in test_bench_peers.py),
    # same parameters and the default "valid" border: the demo's PNGs may differ only by 8-bit rounding.
    photo = read_image(asset_path(*section.PHOTO))[:, :, :3].astype(np.float64)
    x = torch.from_numpy(photo.transpose(2, 0, 1))[None]
    ref = cumsum_guided_filter_color(x, x, section.RADIUS, section.EPS)[0].numpy().transpose(1, 2, 0)
    ref = np.clip(ref, 0, 1)
    smoothed = read_image(demo_dir / "smoothed.png")
    assert np.abs(smoothed - ref).max() <= 0.5 / 255 + 1e-4
    enhanced = np.clip(photo + section.BOOST * (photo - ref), 0, 1)
    assert np.abs(read_image(demo_dir / "enhanced.png") - enhanced).max() <= 0.5 / 255 + 1e-3


def test_side_by_side_layout(tmp_path):
    red = np.zeros((40, 30, 3), np.float32)
    red[..., 0] = 1
    gray = np.full((20, 50), 0.5, np.float32)  # other height: resized to 40 rows, 100 columns
    path = side_by_side([red, gray], ["red", "gray"], tmp_path / "cmp.png", gap=8)
    img = read_image(path)
    assert img.shape[1] == 8 + 30 + 8 + 100 + 8
    band = img.shape[0] - 40 - 8  # label band above the tiles
    assert band > 8
    np.testing.assert_allclose(img[band + 20, 8 + 15], [1, 0, 0], atol=1 / 255)
    np.testing.assert_allclose(img[band + 20, 8 + 30 + 8 + 50], [0.5, 0.5, 0.5], atol=1 / 255)
    assert img[:band].min() < 0.3  # dark label text was drawn on the white band
    assert img[:band, 8 + 30 + 8:].min() < 0.3  # one label over each tile
    assert (img[band - 1] == 1).all()  # nothing leaks between the band and the tiles but white


def test_side_by_side_footer_is_a_line_of_text_under_the_row(tmp_path):
    tile = np.full((40, 30, 3), 0.5, np.float32)
    plain = read_image(side_by_side([tile], ["a"], tmp_path / "plain.png", gap=8))
    note = "a note wider than the one tile it sits under"
    img = read_image(side_by_side([tile], ["a"], tmp_path / "note.png", gap=8, footer=note))
    assert img.shape[0] > plain.shape[0] + 8 and img.shape[1] > plain.shape[1]  # a band below; as wide as the text
    np.testing.assert_array_equal(img[:plain.shape[0], :plain.shape[1]], plain)  # the row itself is unchanged
    assert img[plain.shape[0]:].min() < 0.3  # dark text in the band under the row


def test_side_by_side_errors(tmp_path):
    a = np.zeros((4, 4, 3), np.float32)
    with pytest.raises(ValueError, match="labels"):
        side_by_side([a, a], ["one"], tmp_path / "x.png")
    with pytest.raises(ValueError, match="no images"):
        side_by_side([], [], tmp_path / "x.png")
    with pytest.raises(ValueError, match="PNG"):
        side_by_side([a], ["a"], tmp_path / "x.jpg")
    with pytest.raises(ValueError, match="NaN"):
        side_by_side([np.full((4, 4), np.nan)], ["a"], tmp_path / "x.png")
