"""Dense prediction from the command line, small frictions: the split shares of `vision finetune`
(--val-fraction / --test-fraction, kept in the run and used by `vision evaluate`), an empty split said in one
line, `vision predict -q`, depth PNGs that state their scale, and picture labels that are never cut."""
from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from vision.io import write_image
from vision.pipelines.cli import main

from cli_checks import TINY, one_line_error  # noqa: E402


def _split(name: str, val: float, test: float) -> str:
    """The split of a name, written out independently: the crc32 of the name as a share of 2^32."""
    u = zlib.crc32(name.encode()) / 2 ** 32
    return "train" if u < 1 - val - test else "val" if u < 1 - test else "test"


def _names(count: int, want=None) -> list[str]:
    """``count`` names img_N, all in the splits ``want`` accepts (by the default shares) when given."""
    out, i = [], 0
    while len(out) < count:
        name = f"img_{i}"
        if want is None or want(_split(name, 0.1, 0.1)):
            out.append(name)
        i += 1
    return out


def _data(root: Path, names) -> Path:
    rng = np.random.default_rng(0)
    (root / "images").mkdir(parents=True)
    (root / "targets").mkdir()
    for name in names:
        write_image(root / "images" / f"{name}.png", rng.random((32, 32, 3), dtype=np.float32))
        np.save(root / "targets" / f"{name}.npy", 1 + 4 * rng.random((32, 32, 1), dtype=np.float32))
    return root


def _run(root: Path, **cfg) -> Path:
    from vision.pipelines.training.dense_model import DenseConfig, build_model, save_run_files

    config = DenseConfig(task="depth", head="token-local", lora_rank=0, img_size=32, extra=TINY, **cfg)
    torch.manual_seed(0)
    save_run_files(root, config, build_model(config))
    return root


def test_samples_fall_into_splits_by_the_shares_given(tmp_path):
    from vision.data.dense import DenseSamples

    names = _names(24)
    data = _data(tmp_path / "data", names)
    fractions = (0.5, 0.25, 0.25)
    for split in ("train", "val", "test"):
        want = sorted(n for n in names if _split(n, 0.25, 0.25) == split)
        if want:
            got = sorted(s["name"] for s in DenseSamples(data, "depth", split, fractions=fractions))
            assert got == want, split


def test_evaluate_on_an_empty_split_is_one_line_saying_how_the_names_fell(tmp_path, capsys):
    names = _names(12, want=lambda s: s != "test")  # twelve images, none in the default test share
    data = _data(tmp_path / "data", names)
    run = _run(tmp_path / "run")
    assert main(["evaluate", str(run), "--data", str(data), "--split", "test"]) == 2
    counts = {s: sum(_split(n, 0.1, 0.1) == s for n in names) for s in ("train", "val", "test")}
    line = one_line_error(capsys, "--split test", "empty", "12 samples",
                          f"{counts['train']} train, {counts['val']} val, 0 test", "--test-fraction")
    assert "Traceback" not in line


def test_evaluate_scores_the_test_share_the_run_was_trained_with(tmp_path, capsys):
    names = _names(12, want=lambda s: s != "test")
    data = _data(tmp_path / "data", names)
    run = _run(tmp_path / "run", val_fraction=0.25, test_fraction=0.4)
    assert json.loads((run / "config.json").read_text())["test_fraction"] == 0.4
    test = [n for n in names if _split(n, 0.25, 0.4) == "test"]
    assert test  # these names hold some test images at these shares
    assert main(["evaluate", str(run), "--data", str(data), "--split", "test", "--json", str(tmp_path / "s.json")]) == 0
    assert f"on {len(test)} test images" in capsys.readouterr().out


@pytest.mark.parametrize("argv,needle", [(["--val-fraction", "0.6", "--test-fraction", "0.6"], "--val-fraction"),
                                         (["--test-fraction", "-0.1"], "--test-fraction"),
                                         (["--val-fraction", "nan"], "--val-fraction")])
def test_finetune_refuses_shares_that_leave_nothing_to_train(tmp_path, capsys, argv, needle):
    data = _data(tmp_path / "data", _names(4))
    assert main(["finetune", "--task", "depth", "--data", str(data), "-o", str(tmp_path / "run"), *argv]) == 2
    one_line_error(capsys, needle)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_finetune_with_shares_trains_and_keeps_them_in_the_run(tmp_path, capsys, one_thread):
    names = _names(12, want=lambda s: s == "train")  # by the default shares there is no val image at all
    data = _data(tmp_path / "data", names)
    base = ["finetune", "--task", "depth", "--data", str(data), "--img-size", "32", "--epochs", "1", "--quiet",
            "--lora-rank", "0", "--batch-size", "4", "--backbone-kwargs", json.dumps(TINY)]
    assert main(base + ["-o", str(tmp_path / "a")]) == 2
    one_line_error(capsys, "no samples in split 'val'", "12 samples", "12 train, 0 val, 0 test")
    assert main(base + ["-o", str(tmp_path / "b"), "--val-fraction", "0.3", "--test-fraction", "0.3"]) == 0
    cfg = json.loads((tmp_path / "b" / "config.json").read_text())
    assert (cfg["val_fraction"], cfg["test_fraction"]) == (0.3, 0.3)


def test_predict_quiet_prints_nothing_and_depth_pngs_state_their_scale(tmp_path, capsys):
    from PIL import Image

    run = _run(tmp_path / "run")
    images = [tmp_path / "a.png", tmp_path / "b.png"]
    for i, path in enumerate(images):
        write_image(path, np.random.default_rng(i).random((32, 48, 3), dtype=np.float32))
    capsys.readouterr()
    assert main(["predict", str(run), *map(str, images), "-o", str(tmp_path / "png"), "-q"]) == 0
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    assert main(["predict", str(run), *map(str, images), "-o", str(tmp_path / "npy"), "--format", "npy", "-q"]) == 0
    for path in images:
        depth = np.load(tmp_path / "npy" / f"{path.stem}.npy")[:, :, 0]
        png = Image.open(tmp_path / "png" / f"{path.stem}.png")
        scale = float(png.text["vision.depth_scale"])
        assert png.text["vision.decode"] == "depth = code / 65535 * scale" and png.text["vision.task"] == "depth"
        decoded = np.asarray(png, dtype=np.float64) / 65535 * scale
        np.testing.assert_allclose(decoded, depth, rtol=0, atol=scale / 65535)
        np.testing.assert_allclose(scale, depth.max(), rtol=1e-6)


def test_predict_help_says_how_png_depth_is_scaled(capsys):
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    text = capsys.readouterr().out
    assert "vision.depth_scale" in text and "-q, --quiet" in text


def test_picture_labels_wider_than_their_image_show_whole(tmp_path):
    from PIL import Image, ImageDraw

    from vision.figures import _font, side_by_side

    labels = ["img_10", "target", "prediction"]
    side_by_side([np.full((16, 16, 3), 0.5, np.float32)] * 3, labels, tmp_path / "p.png", gap=8, font_size=18)
    picture = np.asarray(Image.open(tmp_path / "p.png").convert("L"))
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    widths = [probe.textlength(s, font=_font(18)) for s in labels]
    assert picture.shape[1] >= sum(widths) + 8 * 4  # room for every label and the gaps between them
    band = picture[: picture.shape[0] - 16 - 8]
    dark = np.nonzero((band < 128).any(axis=0))[0]
    assert dark.min() > 0 and dark.max() < picture.shape[1] - 1  # no label runs into the picture's edges


def test_the_finetune_preview_labels_each_picture(tmp_path, monkeypatch):
    import vision.figures as figures
    from vision.dense import TASKS
    from vision.pipelines.training.finetune import _preview

    seen = {}

    def record(images, labels, path, **kw):
        seen["labels"] = list(labels)
        seen["count"] = len(list(images))
        return path

    monkeypatch.setattr(figures, "side_by_side", record)
    samples = [{"image": torch.rand(3, 16, 16), "target": torch.rand(1, 16, 16) + 1, "name": f"img_{i}"}
               for i in range(2)]
    _preview(TASKS["depth"], samples, torch.rand(2, 1, 16, 16) + 1, tmp_path / "p.png")
    assert seen == {"labels": ["img_0", "target", "prediction", "img_1", "target", "prediction"], "count": 6}
