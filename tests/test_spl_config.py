"""The SPL settings travel as one object: ``SPLConfig`` checks each setting once, in one place, with one line
naming it; every entry point (the configs, ``restore_structure``, the losses, the diffusers plugins, the
commands) refuses a bad value with that same line; and ``vision edit --spl-weight`` reaches the loss as one
config object. Tiny in-code models; nothing downloads."""
import math
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before diffusers/transformers are imported

import sys

import numpy as np
import pytest
import torch

from vision.kernels.spl.config import SETTINGS, SPL_DEFAULTS, SPLConfig
from vision.pipelines.cli import main

sys.path.insert(0, os.path.dirname(__file__))

BAD = [  # (setting, value, what the message must say after "got ")
    ("spl_weight", -1, "-1"), ("spl_weight", -1.0, "-1.0"), ("spl_weight", math.nan, "nan"),
    ("spl_weight", math.inf, "inf"), ("spl_weight", -math.inf, "-inf"), ("spl_weight", np.float64("nan"), "nan"),
    ("spl_weight", np.float64(-2.5), "-2.5"), ("spl_weight", True, "bool True"), ("spl_weight", "1e4", "str '1e4'"),
    ("spl_weight", None, "NoneType None"), ("spl_weight", torch.ones(2, dtype=torch.float64), "Tensor"),
    ("color_weight", -0.5, "-0.5"), ("color_weight", np.float32("inf"), "inf"), ("color_weight", False, "bool"),
    ("eps", 0, "0"), ("eps", -1e-4, "-0.0001"), ("eps", math.inf, "inf"), ("eps", math.nan, "nan"), ("eps", "1e-4", "str"),
    ("radius", -1, "-1"), ("radius", 2.5, "float 2.5"), ("radius", True, "bool True"), ("radius", "5", "str '5'"),
    ("radius", math.nan, "float nan"), ("bidirectional", "no", "str 'no'"), ("bidirectional", 1, "int 1"),
]


@pytest.mark.parametrize("name, value, shown", BAD, ids=[f"{n}={v!r}"[:40] for n, v, _ in BAD])
def test_each_bad_setting_is_refused_in_one_line_naming_it(name, value, shown):
    with pytest.raises(ValueError) as err:
        SPLConfig(**{name: value})
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"{name} must be "), text
    assert f"got {shown}" in text, text
    with pytest.raises(ValueError) as again:
        SPLConfig.check(name, value)
    assert str(again.value) == text


def test_the_refusals_read_as_the_rule():
    with pytest.raises(ValueError, match=r"^spl_weight must be a finite number >= 0, got -1$"):
        SPLConfig(spl_weight=-1)
    with pytest.raises(ValueError, match=r"^eps must be a finite number > 0, got 0$"):
        SPLConfig(eps=0)
    with pytest.raises(ValueError, match=r"^radius must be an integer >= 0, got float 2.5$"):
        SPLConfig(radius=2.5)
    with pytest.raises(TypeError, match="no setting 'weight'"):
        SPL_DEFAULTS.replace(weight=1)


def test_good_values_are_normalised_and_the_defaults_are_the_published_ones():
    assert (SPL_DEFAULTS.radius, SPL_DEFAULTS.eps, SPL_DEFAULTS.spl_weight, SPL_DEFAULTS.color_weight,
            SPL_DEFAULTS.bidirectional) == (5, 1e-4, 1e4, 1e3, True)
    cfg = SPLConfig(radius=np.int64(3), eps=np.float64(1e-3), spl_weight=0, color_weight=np.float32(0.5),
                    bidirectional=np.bool_(False))
    assert [type(getattr(cfg, n)) for n in SETTINGS] == [int, float, float, float, bool]
    assert (cfg.radius, cfg.eps, cfg.spl_weight, cfg.color_weight, cfg.bidirectional) == (3, 1e-3, 0.0, 0.5, False)
    assert SPLConfig(radius=4.0).radius == 4 and hash(cfg) == hash(SPLConfig(3, 1e-3, 0.0, 0.5, False))
    assert SPLConfig.build(cfg) is cfg and SPLConfig.build(cfg, eps=None) is cfg
    assert SPLConfig.build(None) is SPL_DEFAULTS and SPLConfig.build(cfg, radius=2) == cfg.replace(radius=2)
    import vision

    assert vision.SPLDefaults is SPLConfig and vision.SPL_DEFAULTS is SPL_DEFAULTS and vision.SPLConfig is SPLConfig


def _message(fn):
    with pytest.raises(ValueError) as err:
        fn()
    return str(err.value)


def test_every_library_entry_point_refuses_a_bad_weight_with_the_configs_line():
    """One place: the line is SPLConfig's wherever the value comes in. NaN and inf passed restore_structure and
    PreservationLoss before (their own checks were ``< 0``)."""
    from vision.losses import PreservationLoss
    from vision.restore import RestoreObjective, restore_structure

    x = torch.rand(1, 3, 16, 16)
    for bad in (-1.0, math.nan, math.inf):
        want = _message(lambda: SPLConfig(spl_weight=bad))
        assert _message(lambda: restore_structure(x, x, steps=1, spl_weight=bad)) == want
        assert _message(lambda: RestoreObjective(x, x, spl_weight=bad)) == want
        assert _message(lambda: PreservationLoss(spl_weight=bad)) == want
    assert _message(lambda: restore_structure(x, x, steps=1, color_weight=math.nan)) == \
        "color_weight must be a finite number >= 0, got nan"


def test_the_diffusers_plugins_refuse_with_the_configs_line():
    pytest.importorskip("diffusers")
    from vision.pipelines.editing import SPLGuidanceCallback, StructurePreservationConfig
    from vision.pipelines.editing.restorer import LatentRestorer

    want = "spl_weight must be a finite number >= 0, got nan"
    src = torch.zeros(1, 3, 8, 8)
    assert _message(lambda: StructurePreservationConfig(spl_weight=math.nan)) == want
    assert _message(lambda: StructurePreservationConfig().replace(spl_weight=math.nan)) == want
    assert _message(lambda: LatentRestorer(src, spl_weight=math.nan)) == want
    assert _message(lambda: SPLGuidanceCallback(src, spl_weight=math.nan)) == want


def test_the_edit_config_holds_one_loss_config_that_replace_shares():
    pytest.importorskip("diffusers")
    from vision.pipelines.editing import StructurePreservationConfig

    cfg = StructurePreservationConfig(start=0.5, spl_weight=2e3, radius=3)
    assert cfg.loss == SPLConfig(radius=3, spl_weight=2e3) and (cfg.spl_weight, cfg.radius) == (2e3, 3)
    assert cfg.replace(start=0.6, post_process=False).loss is cfg.loss  # not rebuilt, not checked again
    assert cfg.replace(color_weight=5.0).loss == cfg.loss.replace(color_weight=5.0)
    own = SPLConfig(eps=1e-3)
    assert StructurePreservationConfig(loss=own).loss is own
    assert StructurePreservationConfig(loss=own, radius=2).loss == own.replace(radius=2)
    assert StructurePreservationConfig.from_options(cfg, start=None) is cfg
    from vision.pipelines.editing.config import FIELDS

    assert set(SETTINGS) <= set(FIELDS)  # every loss setting is also a field name of the edit config


@pytest.mark.parametrize("command, flag, text", [("edit", "--spl-weight", "-1"), ("edit", "--spl-weight", "nan"),
                                                 ("edit", "--color-weight", "inf"),
                                                 ("restore-structure", "--spl-weight", "-1"),
                                                 ("restore-structure", "--eps", "0"),
                                                 ("restore-structure", "--radius", "-2")])
def test_the_commands_refuse_a_bad_setting_in_one_line_exit_2(tmp_path, capsys, command, flag, text):
    args = (["edit", str(tmp_path / "in.png"), "--prompt", "a cat"] if command == "edit" else
            ["restore-structure", "--source", str(tmp_path / "a.png"), "--edited", str(tmp_path / "b.png")])
    with pytest.raises(SystemExit) as stop:
        main(args + ["-o", str(tmp_path / "out.png"), flag, text])
    err = capsys.readouterr().err.strip()
    name = {"--spl-weight": "spl_weight", "--color-weight": "color_weight", "--eps": "eps", "--radius": "radius"}[flag]
    assert stop.value.code == 2 and len(err.splitlines()) == 1, err
    assert f"argument {flag}: {name} must be " in err and f"got {text}" in err, err
    assert not (tmp_path / "out.png").exists()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    pytest.importorskip("diffusers")
    import tiny_diffusers as tiny
    from diffusers import DDIMScheduler, StableDiffusionImg2ImgPipeline

    folder = tmp_path_factory.mktemp("models") / "tiny-sd"
    StableDiffusionImg2ImgPipeline(**tiny.sd_components(DDIMScheduler(clip_sample=False))).save_pretrained(folder)
    return folder


@pytest.mark.slow  # two edits with a tiny model: about 10 s on 2 cores
@pytest.mark.parametrize("how", ["img2img", "source-prompt"])
def test_vision_edit_hands_one_config_object_down_to_the_loss(tmp_path, tiny_model, monkeypatch, how):
    """Spies on the walk: the config ``vision edit`` builds from its options is the one whose ``loss`` every
    RestoreObjective holds (guided steps and post-processing; identity, not equality), and the kernel entry
    receives that object's radius, eps and two-way flag and a gradient scale from its weight."""
    import tiny_diffusers as tiny
    from vision import restore
    from vision.io import write_image
    from vision.pipelines.cli import edit_run as edit_cli

    built, losses, kernel_calls = [], [], []
    real_edit, real_init, real_vg = edit_cli.edit, restore.RestoreObjective.__init__, restore.value_and_grad

    def edit_spy(*a, config=None, **k):
        built.append(config)
        return real_edit(*a, config=config, **k)

    def init_spy(self, *a, **k):
        real_init(self, *a, **k)
        losses.append(self.config)

    def kernel_spy(S, E, w, radius, eps, bidirectional, detach, grad_scale):
        kernel_calls.append((radius, eps, bidirectional, float(grad_scale)))
        return real_vg(S, E, w, radius, eps, bidirectional, detach, grad_scale)

    monkeypatch.setattr(edit_cli, "edit", edit_spy)
    monkeypatch.setattr(restore.RestoreObjective, "__init__", init_spy)
    monkeypatch.setattr(restore, "value_and_grad", kernel_spy)
    write_image(tmp_path / "in.png", tiny.source_image(40)[0].permute(1, 2, 0).numpy())
    extra = ["--source-prompt", "a red cat", "--prompt", "a blue dog"] if how == "source-prompt" else \
        ["--prompt", "a red cat", "--working-size", "32", "--strength", "0.75"]  # post-processed at full size too
    rc = main(["edit", str(tmp_path / "in.png"), *extra, "--model", str(tiny_model), "--steps", "3",
               "--start", "0.3", "--spl-steps", "2", "--spl-weight", "1234.5", "--color-weight", "7",
               "--device", "cpu", "-o", str(tmp_path / "out.png")])
    assert rc == 0 and (tmp_path / "out.png").exists()
    assert len(built) == 1 and built[0].spl_weight == 1234.5 and built[0].color_weight == 7.0
    loss = built[0].loss
    assert len(losses) >= 2 and all(seen is loss for seen in losses), "a config was rebuilt on the way"
    assert kernel_calls and set(kernel_calls) == {(5, 1e-4, True, 1234.5 / 512 ** 2)}
