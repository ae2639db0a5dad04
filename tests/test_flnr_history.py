"""FLNR's history input: how many frames each colour pixel averages (a temporal denoiser's history length).

The input against a float64 computation from its definition, the surgery that adds it against the model it starts
from, the plumbing through ``denoise`` (tiles, batches, one-line refusals) and the temporal denoiser, and the
training crops that average a scene's noisy frames against a per-pixel loop."""
import math

import numpy as np
import pytest
import torch

from vision.denoise import TemporalDenoiser, denoise
from vision.denoise.flnr import FLNR, load_flnr, model as flnr_model
from vision.denoise.flnr.cells import HISTORY_CAP, history_input
from vision.pipelines.training.denoiser_data import SINGLE_SHARE, averaged, history_map, sample_batch, scene_groups


def _frame(h=40, w=44, seed=0):
    g = torch.Generator().manual_seed(seed)
    color = torch.rand(1, 3, h, w, generator=g) * 2
    guides = {"albedo": torch.rand(1, 3, h, w, generator=g) * 0.8 + 0.1,
              "normal": torch.nn.functional.normalize(torch.randn(1, 3, h, w, generator=g), dim=1),
              "depth": torch.rand(1, 1, h, w, generator=g) + 1}
    return color, guides


def _plain():
    """The bundled weights without the history input (what they were before it was added: only its column trained)."""
    model = load_flnr()
    state = {k: (v[:, :-1] if k == "net.stem.0.weight" else v) for k, v in model.state_dict().items()}
    return FLNR.from_state_dict(state, dict(model.config, history=False))


def _history_model(gain=0.5):
    """The bundled weights with the history input, its stem weights on that input set to ``gain`` (not 0), so the
    input changes the result."""
    model = load_flnr().with_history()
    with torch.no_grad():
        model.net.stem[0].weight[:, -1] = gain
    return model


def test_history_input_is_the_cell_mean_of_the_capped_log_length():
    g = torch.Generator().manual_seed(1)
    n = torch.randint(0, 40, (2, 1, 10, 13), generator=g).float()
    n[0, 0, 0, 0], n[0, 0, 1, 1], n[1, 0, 2, 2], n[1, 0, 9, 12] = float("nan"), float("inf"), -3.0, 1e30
    like = torch.zeros(2, 13, 3, 4)  # the cell grid of 10 x 13 pixels: ceil(10 / 4) x ceil(13 / 4)
    got = history_input(n, like)
    expect = np.zeros((2, 1, 3, 4))
    for b in range(2):
        for i in range(3):
            for j in range(4):
                block = n[b, 0, 4 * i:4 * i + 4, 4 * j:4 * j + 4].double().numpy()
                block = np.where(np.isnan(block), 1.0, block)  # inf, 1e30: capped; below 1: one frame
                expect[b, 0, i, j] = np.mean(np.log(np.clip(block, 1.0, HISTORY_CAP)))
    np.testing.assert_allclose(got.double().numpy(), expect, atol=1e-6)
    assert torch.equal(history_input(None, like), torch.zeros(2, 1, 3, 4))


def test_with_history_starts_as_the_model_it_is_given():
    color, guides = _frame()
    base = _plain()
    added = base.with_history()
    assert added.config == dict(base.config, history=True) and not base.config["history"]
    with torch.no_grad():
        want = base(color, guides)
        for n in (None, torch.full((1, 1, 40, 44), 7.0)):
            got = added(color, dict(guides, history=n))
            assert torch.equal(got, want)
    assert added.with_history().config["history"]  # already there: a copy


@pytest.mark.parametrize("tile", [None, 24])
def test_denoise_hands_the_history_to_the_network(tile):
    color, guides = _frame()
    model = _history_model()
    n = torch.ones(1, 1, 40, 44)
    n[..., :, 20:] = 12.0  # one old history, one fresh one
    with torch.no_grad():
        want = model(color, dict(guides, history=n))
        without = model(color, guides)
    got = denoise(color, **guides, weights=model, history=n, tile=tile)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert float((want - without).abs().max()) > 1e-3  # the input is read
    # HWC NumPy in, integer counts: the same
    hwc = denoise(color[0].permute(1, 2, 0).numpy(), **{k: v[0].permute(1, 2, 0).numpy() for k, v in guides.items()},
                  weights=model, history=n[0, 0].numpy().astype(np.int32), tile=tile)
    np.testing.assert_allclose(hwc, want[0].permute(1, 2, 0).numpy(), rtol=1e-4, atol=1e-4)


def test_weights_without_the_input_and_flr_ignore_the_history():
    color, guides = _frame()
    n = torch.full((1, 1, 40, 44), 9.0)
    plain = _plain()
    assert torch.equal(denoise(color, **guides, weights=plain, history=n), denoise(color, **guides, weights=plain))
    assert torch.equal(denoise(color, **guides), denoise(color, **guides, weights=plain))  # bundled: single frames kept
    assert torch.equal(denoise(color, **guides, model="flr", history=n), denoise(color, **guides, model="flr"))


@pytest.mark.parametrize("bad, message", [
    ("many", "history must be a real count of frames per pixel"),
    (np.ones((40, 44), bool), "history must be a real count of frames per pixel"),
    (torch.ones(1, 1, 41, 44), "history is 41x44"),
    (torch.ones(1, 2, 40, 44), "history"),
])
def test_bad_history_is_refused_in_one_line(bad, message):
    color, guides = _frame()
    with pytest.raises(ValueError, match=message) as err:
        denoise(color, **guides, weights=_history_model(), history=bad)
    assert "\n" not in str(err.value)


def test_temporal_denoiser_tells_the_network_each_pixel_s_history(monkeypatch):
    seen = []

    def spy(history, like):
        seen.append(None if history is None else history.clone())
        return history_input(history, like)

    monkeypatch.setattr(flnr_model, "history_input", spy)
    color, guides = _frame(32, 32)
    den = TemporalDenoiser(weights=_history_model())
    motion = torch.zeros(1, 4, 32, 32)
    for k in range(3):
        den(color, motion=motion, **guides)
        assert seen[-1] is not None and torch.equal(seen[-1], den.history_length)
    assert float(seen[-1].min()) == 3.0  # a still camera: every pixel has its three frames


def test_training_crops_average_the_first_n_frames_of_their_scene():
    g = torch.Generator().manual_seed(3)
    colors = torch.rand(6, 1, 3, 9, 7, generator=g)
    n = torch.randint(1, 7, (1, 1, 9, 7), generator=g).float()
    got = averaged(colors, n)
    for i in range(9):
        for j in range(7):
            k = int(n[0, 0, i, j])
            want = colors[:k, 0, :, i, j].double().mean(0)
            torch.testing.assert_close(got[0, :, i, j].double(), want, rtol=1e-6, atol=1e-6)
    maps = [history_map((16, 16), 8, g) for _ in range(400)]
    assert all(1 <= float(m.min()) and float(m.max()) <= 8 and m.shape == (1, 1, 16, 16) for m in maps)
    single = sum(bool((m == 1).all()) for m in maps) / len(maps)
    assert abs(single - SINGLE_SHARE) < 0.08
    assert torch.equal(history_map((5, 5), 1, g), torch.ones(1, 1, 5, 5))


def test_sample_batch_with_history_draws_from_the_crop_s_own_scene():
    # two scenes whose noisy frames are constants: scene a's frames 1, 2, 3; scene b's 10, 20. The emission (ones)
    # carries the crop's exposure factor
    def frame(scene, value):
        f = {k: torch.zeros(1, 3, 8, 8) for k in ("reference", "albedo", "normal")}
        f.update(color=torch.full((1, 3, 8, 8), float(value)), depth=torch.ones(1, 1, 8, 8), ao=torch.ones(1, 1, 8, 8),
                 emission=torch.ones(1, 3, 8, 8), scene=scene)
        return f

    scenes = {"a": [1.0, 2.0, 3.0], "b": [10.0, 20.0]}
    frames = [frame(s, v) for s, vs in scenes.items() for v in vs]
    groups = scene_groups(frames)
    assert groups[1] == [1, 0, 2] and groups[4] == [4, 3]
    stats = [(torch.zeros(1, 8, 1, 1), torch.ones(1, 8, 1, 1))] * len(frames)
    g = torch.Generator().manual_seed(0)
    lengths = set()
    for _ in range(30):
        b, _ = sample_batch(frames, stats, 4, 8, g, history=3, groups=groups)
        assert b["history"].shape == (4, 1, 8, 8)
        for c, n, e in zip(b["color"], b["history"], b["emission"]):
            v = (c[0] / e[0]).double()
            first = float(v[n[0] == 1][0]) if bool((n[0] == 1).any()) else None
            scene = "b" if float(v.max()) > 5 else "a"  # scene a's means lie in [1, 3], scene b's in [10, 20]
            assert float(n.max()) <= len(scenes[scene])
            for k in n.unique().tolist():
                lengths.add(int(k))
                at = v[n[0] == k]
                assert float(at.max() - at.min()) < 1e-5  # one order of frames per crop
                assert any(abs(float(at[0]) * k - t) < 1e-4 for t in _sums(scenes[scene], int(k)))
            if first is not None:
                assert min(abs(first - x) for x in scenes[scene]) < 1e-4  # history 1: one frame as it is
    assert lengths == {1, 2, 3}


def _sums(values, k):
    from itertools import combinations

    return [sum(c) for c in combinations(values, k)]


def test_train_denoiser_history_adds_the_input_to_init_weights_and_records_it(tmp_path):
    import shutil

    from vision.bundled import asset_path
    from vision.denoise.flnr import read_metadata
    from vision.pipelines.cli import main

    data = tmp_path / "scenes"
    shutil.copytree(asset_path("scenes"), data)  # two noisy frames per scene
    out = tmp_path / "h.safetensors"
    assert main(["train-denoiser", "--data", str(data), "--epochs", "1", "--steps", "2", "--batch", "2", "--crop", "32",
                 "--init", str(asset_path("weights", "flnr.safetensors")), "--history", "4", "--quiet",
                 "-o", str(out)]) == 0
    meta = read_metadata(out)
    assert '"history": true' in meta["vision.flnr.config"] and "--history 4" in meta["vision.train.command"]
    assert FLNR.from_file(out).config["history"]


def test_train_denoiser_history_needs_scenes_with_several_noisy_frames(tmp_path, capsys):
    import json
    import shutil

    from vision.bundled import asset_path
    from vision.pipelines.cli import main

    data = tmp_path / "scenes"
    shutil.copytree(asset_path("scenes"), data)
    for manifest in data.glob("*/manifest.json"):  # one noisy frame per scene
        m = json.loads(manifest.read_text())
        m["frames"] = m["frames"][:1]
        manifest.write_text(json.dumps(m))
    args = ["train-denoiser", "--data", str(data), "--epochs", "1", "--steps", "1", "--batch", "2", "--crop", "32",
            "--widths", "4,6,8", "--hidden", "0", "--quiet", "-o", str(tmp_path / "w.safetensors")]
    assert main(args + ["--history", "4"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert "--history 4: every training scene" in err[-1] and "has one noisy frame" in err[-1]
    assert main(args + ["--history", "0"]) != 0
    assert "--history" in capsys.readouterr().err.strip().splitlines()[-1]
    assert main(args + ["--history", "4", "--history-only"]) != 0  # no --init
    assert "--history-only" in capsys.readouterr().err.strip().splitlines()[-1]
    assert main(args + ["--history", "4", "--upsample-prob", "0.5"]) != 0
    assert "does not combine with --upsample-prob" in capsys.readouterr().err.strip().splitlines()[-1]


def test_history_only_training_changes_nothing_but_the_history_weights(tmp_path):
    import shutil

    from safetensors.torch import load_file

    from vision.bundled import asset_path
    from vision.pipelines.cli import main

    data = tmp_path / "scenes"
    shutil.copytree(asset_path("scenes"), data)
    init, out = asset_path("weights", "flnr.safetensors"), tmp_path / "h.safetensors"
    assert main(["train-denoiser", "--data", str(data), "--epochs", "1", "--steps", "3", "--batch", "2", "--crop", "32",
                 "--lr", "0.01", "--init", str(init), "--history", "4", "--history-only", "--quiet", "-o", str(out)]) == 0
    before, after = load_file(str(init)), load_file(str(out))
    assert set(before) == set(after)
    for k, v in before.items():
        if k == "net.stem.0.weight":  # the bundled weights have the input already: all but its column kept
            assert torch.equal(v[:, :-1], after[k][:, :-1])
            assert not torch.equal(v[:, -1], after[k][:, -1])  # the history weights trained
        else:
            assert torch.equal(v, after[k]), k
    # so a single frame comes out as with the init, bit for bit
    color, guides = _frame()
    assert torch.equal(denoise(color, **guides, weights=str(out)), denoise(color, **guides, weights=str(init)))
    with pytest.raises(ValueError, match="train_history_only needs a model with the history input"):
        from vision.denoise.flnr.surgery import train_history_only
        train_history_only(_plain())
    assert load_flnr().config["history"]  # the bundled weights read the history


def test_resume_takes_a_checkpoint_from_before_the_history_settings_and_refuses_other_ones(tmp_path):
    from vision.pipelines.training.denoiser import _refuse_other_settings

    now = {"--lr": 0.001, "--history": 1, "--history-only": False}
    _refuse_other_settings(tmp_path, {"--lr": 0.001}, now)  # written before --history existed: single frames
    with pytest.raises(ValueError, match="--history 4 here, 1 there"):
        _refuse_other_settings(tmp_path, {"--lr": 0.001}, dict(now, **{"--history": 4}))
    with pytest.raises(ValueError, match="--history-only True here, False there"):
        _refuse_other_settings(tmp_path, {"--lr": 0.001, "--history": 4}, {**now, "--history": 4, "--history-only": True})
