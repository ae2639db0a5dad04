"""``vision edit``: local-only model loading, clear missing-model error, odd sizes, working size."""
import os

os.environ["HF_HUB_OFFLINE"] = "1"

import sys

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")

sys.path.insert(0, os.path.dirname(__file__))
import tiny_diffusers as tiny  # noqa: E402

from vision.io import read_image, write_image  # noqa: E402
from vision.pipelines.cli import main  # noqa: E402


def test_help_has_an_example(capsys):
    with pytest.raises(SystemExit):
        main(["edit", "--help"])
    text = capsys.readouterr().out
    assert "vision edit photo.jpg --prompt" in text and "--mask" in text and "--working-size" in text
    assert 'vision edit cat.jpg --source-prompt "a cat on grass"' in text and "--blend-words" in text


def test_missing_model_is_one_clear_sentence(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-home" / "hub"))
    write_image(tmp_path / "in.png", np.full((16, 16, 3), 0.5, np.float32))
    rc = main(["edit", str(tmp_path / "in.png"), "--prompt", "a cat", "--model", "someone/not-cached-model",
               "-o", str(tmp_path / "out.png")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "not-cached-model" in err and "hf download someone/not-cached-model" in err
    assert not (tmp_path / "out.png").exists()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from diffusers import DDIMScheduler, StableDiffusionImg2ImgPipeline

    folder = tmp_path_factory.mktemp("models") / "tiny-sd"
    pipe = StableDiffusionImg2ImgPipeline(**tiny.sd_components(DDIMScheduler(clip_sample=False)))
    pipe.save_pretrained(folder)
    return folder


def test_edit_local_folder_odd_size_rgba(tmp_path, tiny_model, capsys):
    rgba = np.concatenate([tiny.source_image(48)[0].permute(1, 2, 0).numpy()[:37, :45],
                           np.ones((37, 45, 1), np.float32)], -1)  # RGBA, 37 x 45: not multiples of 8
    write_image(tmp_path / "in.png", rgba)
    mask = np.zeros((37, 45), np.float32)
    mask[:, :20] = 1
    write_image(tmp_path / "mask.png", mask)
    rc = main(["edit", str(tmp_path / "in.png"), "--prompt", "a red cat", "--model", str(tiny_model),
               "--mask", str(tmp_path / "mask.png"), "--steps", "4", "--strength", "0.75", "--spl-steps", "10",
               "--device", "cpu", "-o", str(tmp_path / "out.png")])
    assert rc == 0, capsys.readouterr().err
    out = read_image(tmp_path / "out.png")
    assert out.shape[:2] == (37, 45) and np.isfinite(out).all()


@pytest.mark.slow  # edits with a tiny model: over 5 s on 2 cores
def test_working_size_edits_small_and_post_processes_full(tmp_path, tiny_model):
    from diffusers import StableDiffusionImg2ImgPipeline

    from vision.kernels import structure_loss
    from vision.pipelines.cli.edit_run import edit

    pipe = StableDiffusionImg2ImgPipeline.from_pretrained(tiny_model, local_files_only=True, safety_checker=None,
                                                          requires_safety_checker=False)
    tiny.restore_vae_eps(pipe.vae)
    pipe.set_progress_bar_config(disable=True)
    src = tiny.source_image(64)
    seen = []
    orig = pipe.unet.forward

    def spy(sample, *a, **k):
        seen.append(tuple(sample.shape[-2:]))
        return orig(sample, *a, **k)

    pipe.unet.forward = spy
    common = dict(steps=4, strength=0.75, start=0.3, spl_steps=20, working_size=32)
    plain = edit(pipe, src, "a red cat", post_process=False, **common)
    full = edit(pipe, src, "a red cat", post_process=True, **common)
    assert plain.shape == full.shape == (1, 3, 64, 64)
    assert set(seen) == {(32, 32)}, "the model must see the working size"
    assert float(structure_loss(src, full)) < float(structure_loss(src, plain))


@pytest.mark.slow
def test_importing_vision_pipelines_does_not_import_diffusers():
    import subprocess

    code = ("import sys, vision, vision.pipelines, vision.pipelines.editing.spl_guidance, vision.pipelines.cli.edit; "
            "assert 'diffusers' not in sys.modules, 'diffusers imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bench_edit_help(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "edit", "--help"])
    assert "vision bench edit" in capsys.readouterr().out


@pytest.mark.slow  # edits with a tiny model: over 5 s on 2 cores
def test_edit_with_mask_words(tmp_path, tiny_model):
    write_image(tmp_path / "in.png", tiny.source_image(32)[0].permute(1, 2, 0).numpy())
    rc = main(["edit", str(tmp_path / "in.png"), "--prompt", "a red cat", "--model", str(tiny_model),
               "--mask-words", "cat", "--steps", "2", "--spl-steps", "5", "--device", "cpu",
               "-o", str(tmp_path / "out.png")])
    assert rc == 0 and read_image(tmp_path / "out.png").shape[:2] == (32, 32)
    rc = main(["edit", str(tmp_path / "in.png"), "--prompt", "a red cat", "--blend-words", "cat",
               "--model", str(tiny_model), "-o", str(tmp_path / "out2.png")])
    assert rc == 2  # attention control options need --source-prompt


@pytest.mark.slow  # edits with a tiny model: over 5 s on 2 cores
def test_edit_with_source_prompt_drives_the_edit_pipeline(tmp_path, tiny_model, capsys, monkeypatch):
    """--source-prompt: StructurePreservingEditPipeline from the saved img2img folder (its scheduler
    replaced by LCM), odd RGBA input, mask words of the source prompt, LocalBlend words of both."""
    from vision.pipelines.editing import StructurePreservingEditPipeline

    calls = []
    orig = StructurePreservingEditPipeline.__call__

    def spy(self, *a, **k):
        calls.append((type(self.scheduler).__name__, tuple(k["image"].shape[-2:]), k.get("source_prompt"),
                      k.get("local_blend_words"), k.get("mask") is not None))
        return orig(self, *a, **k)

    monkeypatch.setattr(StructurePreservingEditPipeline, "__call__", spy)
    rgba = np.concatenate([tiny.source_image(48)[0].permute(1, 2, 0).numpy()[:37, :45],
                           np.ones((37, 45, 1), np.float32)], -1)
    write_image(tmp_path / "in.png", rgba)
    rc = main(["edit", str(tmp_path / "in.png"), "--source-prompt", "a red cat", "--prompt", "a blue dog",
               "--mask-words", "cat", "--mask-threshold", "otsu", "--blend-words", "cat", "dog",
               "--cross-replace-steps", "1",
               "--model", str(tiny_model), "--steps", "2", "--spl-steps", "5", "--device", "cpu",
               "-o", str(tmp_path / "out.png")])
    assert rc == 0, capsys.readouterr().err
    out = read_image(tmp_path / "out.png")
    assert out.shape[:2] == (37, 45) and np.isfinite(out).all()
    # the mask's dry run (source words: source branch), then the edit with the mask, both at the padded size
    assert [c[0] for c in calls] == ["LCMScheduler", "LCMScheduler"]
    assert all(c[1] == (40, 48) and c[2] == "a red cat" and c[3] == ["cat", "dog"] for c in calls)
    assert calls[-1][4], "the attention mask must reach the edit"
    rc = main(["edit", str(tmp_path / "in.png"), "--source-prompt", "a red cat", "--prompt", "a blue dog",
               "--mask-words", "tree", "--model", str(tiny_model), "--steps", "1", "--device", "cpu",
               "-o", str(tmp_path / "out3.png")])
    assert rc == 2 and "--mask-words" in capsys.readouterr().err


def _vision(*args, env=None):
    import subprocess
    import time

    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "vision.pipelines.cli", *args], capture_output=True, text=True,
                         timeout=120, env=env)
    return res, time.perf_counter() - t0


def test_missing_model_fails_fast_without_torch_or_diffusers(tmp_path):
    """One line, and nothing heavy (torch, diffusers, transformers) imported before the model is found missing:
    what keeps the failure fast. The time itself (target < 2 s) is measured by ``vision bench startup``."""
    write_image(tmp_path / "in.png", np.full((16, 16, 3), 0.5, np.float32))
    env = dict(os.environ, HF_HOME=str(tmp_path / "empty"), HF_HUB_CACHE=str(tmp_path / "empty" / "hub"),
               PYTHONPROFILEIMPORTTIME="1")
    res, _ = _vision("edit", str(tmp_path / "in.png"), "--prompt", "x", "--model", "someone/missing",
                     "-o", str(tmp_path / "o.png"), env=env)
    errors = [line for line in res.stderr.splitlines() if not line.startswith("import time:")]
    imported = {line.split("|")[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    assert res.returncode == 2 and len(errors) == 1 and "hf download someone/missing" in errors[0]
    assert not imported & {"torch", "diffusers", "transformers"}, imported & {"torch", "diffusers", "transformers"}


def test_a_model_path_that_does_not_exist_is_called_a_path(tmp_path):
    write_image(tmp_path / "in.png", np.full((16, 16, 3), 0.5, np.float32))
    for model in ("./nonexistent", str(tmp_path / "nope"), "~/no/such/model"):
        res, _ = _vision("edit", str(tmp_path / "in.png"), "--prompt", "x", "--model", model, "-o",
                         str(tmp_path / "o.png"))
        assert res.returncode == 2 and "no such folder" in res.stderr and "hf download" not in res.stderr, model


def test_three_images_load_the_model_once(tmp_path, tiny_model, monkeypatch, capsys):
    import vision.pipelines.cli.edit_run as edit_cli

    loads = []
    real = edit_cli.load_pipeline
    monkeypatch.setattr(edit_cli, "load_pipeline", lambda *a, **k: loads.append(a) or real(*a, **k))
    for i, name in enumerate(["a.v1.png", "a.v2.png", "b.png"]):
        write_image(tmp_path / name, tiny.source_image(32)[0].permute(1, 2, 0).numpy() * (0.5 + 0.2 * i))
    rc = main(["edit", str(tmp_path / "*.png"), "--prompt", "a red cat", "--model", str(tiny_model), "--steps", "2",
               "--strength", "0.5", "--spl-steps", "2", "--no-post-process", "--device", "cpu",
               "-o", str(tmp_path / "out")])
    assert rc == 0, capsys.readouterr().err
    assert len(loads) == 1
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["a.v1.png", "a.v2.png", "b.png"]  # whole stems: a.v1 and a.v2 do not collide
    # -o a file with several images is refused before the model loads
    assert main(["edit", str(tmp_path / "*.png"), "--prompt", "x", "--model", str(tiny_model),
                 "-o", str(tmp_path / "one.png")]) == 2
    assert "is a folder" in capsys.readouterr().err and len(loads) == 1


@pytest.fixture(scope="module")
def pndm_model(tmp_path_factory):
    """A Stable Diffusion 1.5-style folder as it comes: PNDMScheduler, which SPL guidance cannot guide."""
    from diffusers import PNDMScheduler, StableDiffusionImg2ImgPipeline

    folder = tmp_path_factory.mktemp("models") / "tiny-sd15"
    pndm = PNDMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", skip_prk_steps=True,
                         steps_offset=1)
    StableDiffusionImg2ImgPipeline(**tiny.sd_components(pndm)).save_pretrained(folder)
    return folder


def test_an_unguidable_scheduler_is_swapped_for_ddim_on_the_same_schedule():
    from types import SimpleNamespace

    from diffusers import DDIMScheduler, FlowMatchEulerDiscreteScheduler, PNDMScheduler

    from vision.pipelines.editing.schedulers import use_guidable_scheduler

    pipe = SimpleNamespace(scheduler=PNDMScheduler(beta_schedule="scaled_linear", prediction_type="v_prediction"))
    note = use_guidable_scheduler(pipe)
    assert "PNDMScheduler cannot be guided" in note and "DDIMScheduler" in note and "\n" not in note
    assert type(pipe.scheduler) is DDIMScheduler and pipe.scheduler.config.prediction_type == "v_prediction"
    betas = np.linspace(0.0001 ** 0.5, 0.02 ** 0.5, 1000, dtype=np.float64) ** 2  # PNDM's defaults, scaled linear
    np.testing.assert_allclose(pipe.scheduler.alphas_cumprod.double().numpy(), np.cumprod(1 - betas), rtol=1e-5)
    kept = pipe.scheduler
    assert use_guidable_scheduler(pipe) is None and pipe.scheduler is kept  # a guidable one stays
    assert use_guidable_scheduler(pipe, "unipc") is None and type(pipe.scheduler).__name__ == "UniPCMultistepScheduler"
    flow = SimpleNamespace(scheduler=FlowMatchEulerDiscreteScheduler())
    with pytest.raises(ValueError, match="--scheduler ddim: this model samples by flow matching .*; use flow-euler"):
        use_guidable_scheduler(flow, "ddim")
    with pytest.raises(ValueError, match="--scheduler ddim: .*thresholding"):
        use_guidable_scheduler(SimpleNamespace(scheduler=DDIMScheduler(thresholding=True)), "ddim")


@pytest.mark.slow
def test_a_model_with_an_unguidable_scheduler_samples_with_ddim_and_says_so(tmp_path, pndm_model, capsys,
                                                                               monkeypatch):
    import vision.pipelines.cli.edit_run as edit_cli

    used = []
    real = edit_cli.edit
    monkeypatch.setattr(edit_cli, "edit", lambda pipe, *a, **k: used.append(pipe.scheduler) or real(pipe, *a, **k))
    write_image(tmp_path / "in.png", tiny.source_image(32)[0].permute(1, 2, 0).numpy())
    common = ["--prompt", "a red cat", "--model", str(pndm_model), "--steps", "4", "--strength", "0.5",
              "--spl-steps", "2", "--no-post-process", "--device", "cpu"]
    rc = main(["edit", str(tmp_path / "in.png"), *common, "-o", str(tmp_path / "a.png")])
    err = capsys.readouterr().err
    assert rc == 0, err
    notes = [line for line in err.splitlines() if "PNDMScheduler" in line]
    assert len(notes) == 1 and "DDIMScheduler" in notes[0] and "--scheduler" in notes[0], err
    # 4 steps at strength 0.5 run 2, and start 0.8 guides neither: one line says so, not a Python warning
    unguided = [line[line.index("vision edit: SPL"):] for line in err.splitlines() if "guides no step" in line]
    assert unguided == ["vision edit: SPL guidance guides no step: 2 steps with start=0.8 (step k of 2 is guided "
                        "when k / 2 >= start); use start <= 0.50 or at least 5 steps (--steps, --start)"], err
    assert "UserWarning" not in err
    assert type(used[0]).__name__ == "DDIMScheduler"
    # the model's noise schedule, by the scaled-linear formula: betas = linspace(sqrt(b0), sqrt(b1), 1000) ** 2
    betas = np.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000, dtype=np.float64) ** 2
    np.testing.assert_allclose(used[0].alphas_cumprod.double().numpy(), np.cumprod(1 - betas), rtol=1e-5)
    assert (tmp_path / "a.png").is_file()
    rc = main(["edit", str(tmp_path / "in.png"), *common, "--scheduler", "euler", "-o", str(tmp_path / "b.png")])
    err = capsys.readouterr().err
    assert rc == 0 and "PNDMScheduler" not in err and type(used[1]).__name__ == "EulerDiscreteScheduler", err
    rc = main(["edit", str(tmp_path / "in.png"), *common, "--scheduler", "flow-euler", "-o", str(tmp_path / "c.png")])
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]  # (and progress bars)
    assert rc == 2 and len(errors) == 1 and "--scheduler flow-euler: this model samples by noise prediction" in errors[0]
    assert not (tmp_path / "c.png").exists()


def test_scheduler_with_source_prompt_must_be_lcm(tmp_path, capsys):
    write_image(tmp_path / "in.png", np.full((16, 16, 3), 0.5, np.float32))
    rc = main(["edit", str(tmp_path / "in.png"), "--prompt", "a dog", "--source-prompt", "a cat", "--scheduler", "ddim",
               "-o", str(tmp_path / "o.png")])
    assert rc == 2 and "--scheduler ddim: --source-prompt samples with the LCM scheduler" in capsys.readouterr().err
