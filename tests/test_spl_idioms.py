"""SPL options behave like diffusers options: per-call keywords are
checked, ``structure_preservation=False`` works per call on every pipeline kind, a public report of the guided
steps, the method form of disable, pickling, AutoPipeline loading of a saved enabled pipeline, one frozen config
object, progress on the pipeline's bar, and outputs equal to an independent re-statement of the guided step.
Tiny in-code components (32 px); nothing downloads."""
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before diffusers/transformers are imported

import dataclasses
import io
import pickle
import sys
import warnings

import pytest
import torch

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

sys.path.insert(0, os.path.dirname(__file__))
import tiny_diffusers as tiny  # noqa: E402

import diffusers  # noqa: E402
from diffusers import (  # noqa: E402
    AutoPipelineForImage2Image, DDIMScheduler, EulerDiscreteScheduler, FlowMatchEulerDiscreteScheduler,
    LatentConsistencyModelImg2ImgPipeline, LCMScheduler, StableDiffusion3Img2ImgPipeline,
    StableDiffusionImg2ImgPipeline, StableDiffusionInpaintPipeline, StableDiffusionXLImg2ImgPipeline,
)

from vision.pipelines import (  # noqa: E402
    StructurePreservingEditPipeline, disable_structure_preservation, enable_structure_preservation,
)
from vision.pipelines.editing import (  # noqa: E402
    SPLGuidanceCallback, StructurePreservationConfig, StructurePreservationReport,
)
from vision.pipelines.editing.restorer import LatentRestorer  # noqa: E402

diffusers.utils.logging.set_verbosity_error()
CFG = StructurePreservationConfig(start=0.3, steps_per_guidance=4, post_process=False)  # guides steps 2 and 3 of 1..3


def _ddim():
    return DDIMScheduler(clip_sample=False, set_alpha_to_one=False, steps_offset=1)


KINDS = {
    "sd": lambda: StableDiffusionImg2ImgPipeline(**tiny.sd_components(_ddim())),
    "inpaint": lambda: StableDiffusionInpaintPipeline(**tiny.sd_components(_ddim())),
    "lcm": lambda: LatentConsistencyModelImg2ImgPipeline(**tiny.sd_components(LCMScheduler())),
    "sdxl": lambda: StableDiffusionXLImg2ImgPipeline(**tiny.sdxl_components(EulerDiscreteScheduler())),
    "sd3": lambda: StableDiffusion3Img2ImgPipeline(**tiny.sd3_components(FlowMatchEulerDiscreteScheduler())),
}


def _pipe(kind="sd"):
    pipe = KINDS[kind]()
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _run(pipe, image, **kw):
    if isinstance(pipe, StableDiffusionInpaintPipeline):
        kw = {"mask_image": torch.ones(1, 1, 32, 32), "height": 32, "width": 32, **kw}
    kw = {"output_type": "pt", "num_inference_steps": 4, "strength": 0.75, **kw}
    return pipe(prompt="a red cat", image=image, generator=torch.Generator().manual_seed(0), **kw)


@pytest.fixture(scope="module")
def src():
    return tiny.source_image(seed=7)


@pytest.mark.parametrize("kind", ["sd", "sd3"])  # SD3's __call__ has no **kwargs, SD's swallows them
def test_misspelt_structure_keyword_is_a_type_error_naming_it(kind, src):
    pipe = enable_structure_preservation(_pipe(kind), config=CFG)
    steps = []
    never = dict(callback_on_step_end=lambda p, i, t, kw: steps.append(i) or kw)
    with pytest.raises(TypeError, match=r"'structure_sorce'; did you mean 'structure_source'\?") as err:
        _run(pipe, src, structure_sorce=src, **never)
    assert "\n" not in str(err.value)
    with pytest.raises(TypeError, match=r"'structure_preservaton'; did you mean 'structure_preservation'"):
        _run(pipe, src, structure_preservaton=False, **never)
    with pytest.raises(TypeError, match=r"'structur_source'; did you mean 'structure_source'"):  # no prefix, close
        _run(pipe, src, structur_source=src, **never)
    with pytest.raises(TypeError, match="structure_preservation must be True or False"):
        _run(pipe, src, structure_preservation="no", **never)
    with pytest.raises(TypeError, match="StructurePreservationConfig has no field 'strat'"):
        _run(pipe, src, structure_config={"strat": 0.5}, **never)
    assert steps == [], "the options must be checked before sampling starts"


@pytest.mark.parametrize("kind", list(KINDS))
def test_structure_preservation_false_runs_the_stock_pipeline_for_that_call(kind, src):
    pipe = _pipe(kind)
    stock = _run(pipe, src).images
    enable_structure_preservation(pipe, config=CFG)
    off = _run(pipe, src, structure_preservation=False)
    assert torch.equal(off.images, stock)
    assert off.structure_preservation == StructurePreservationReport(guided=False, config=CFG)
    on = _run(pipe, src)  # the next call is guided again
    assert on.structure_preservation.guided and on.structure_preservation.guided_steps
    assert not torch.equal(on.images, stock)


def test_edit_pipeline_takes_structure_preservation_false_and_a_config(src):
    c = tiny.sd_components(LCMScheduler())
    pipe = StructurePreservingEditPipeline(vae=c["vae"], text_encoder=c["text_encoder"], tokenizer=c["tokenizer"],
                                           unet=c["unet"], scheduler=c["scheduler"])
    pipe.set_progress_bar_config(disable=True)

    def edit(**kw):
        return pipe(prompt="a blue dog", source_prompt="a red cat", image=src, num_inference_steps=3,
                    output_type="pt", generator=torch.Generator().manual_seed(0), **kw)

    off = edit(structure_preservation=False)
    assert off.structure_preservation.guided is False and off.structure_preservation.guided_steps == ()
    cfg = StructurePreservationConfig(start=0.5, steps_per_guidance=3)
    by_config, by_keywords = edit(structure_config=cfg), edit(start=0.5, steps_per_guidance=3)
    assert torch.equal(by_config.images, by_keywords.images)
    assert by_config.structure_preservation.guided_steps == (2,) and pipe.structure_preservation_report.post_processed
    with pytest.raises(TypeError):
        edit(structure_sorce=src)
    with pytest.raises(ValueError, match="has SPL guidance built in"):
        enable_structure_preservation(pipe)


def test_report_is_public_and_matches_the_guided_steps(src):
    other = tiny.source_image(seed=3)
    pipe = _pipe("sd")
    enable_structure_preservation(pipe, config=CFG)
    assert pipe.structure_preservation_report is None and pipe.structure_preservation_config == CFG
    out = _run(pipe, src)
    report = pipe.structure_preservation_report
    assert out.structure_preservation is report
    assert report.guided and report.guided_steps == (2, 3) and report.num_steps == 4 and report.steps_run == 3
    assert report.guided_timesteps == tuple(float(t) for t in pipe.scheduler.timesteps[2:4])
    assert report.sgd_steps == 4 and not report.post_processed and report.source == "image"
    out = _run(pipe, src, structure_source=other, structure_config={"post_process": True})
    assert out.structure_preservation.source == "structure_source" and out.structure_preservation.post_processed
    enable_structure_preservation(pipe, other, config=CFG.replace(start=0.0))
    assert _run(pipe, src).structure_preservation.guided_steps == (1, 2, 3)
    assert pipe.structure_preservation_report.source == "enable"
    tup = _run(pipe, src, return_dict=False)  # a tuple output carries no attribute; the pipeline keeps it
    assert isinstance(tup, tuple) and pipe.structure_preservation_report.guided_steps == (1, 2, 3)


def test_disable_is_also_a_method(src):
    pipe = _pipe("sd")
    stock = _run(pipe, src).images
    enable_structure_preservation(pipe, config=CFG)
    assert isinstance(pipe, StableDiffusionImg2ImgPipeline)
    assert pipe.disable_structure_preservation() is pipe
    assert type(pipe) is StableDiffusionImg2ImgPipeline and not hasattr(pipe, "structure_preservation_report")
    assert torch.equal(_run(pipe, src).images, stock)
    disable_structure_preservation(pipe)  # the function form, a no-op now
    assert pipe.disable_structure_preservation() is pipe  # and the method form, called a second time
    assert type(pipe) is StableDiffusionImg2ImgPipeline and torch.equal(_run(pipe, src).images, stock)
    enable_structure_preservation(pipe, config=CFG)  # enabled again, then disabled again: the same twice
    assert not torch.equal(_run(pipe, src).images, stock)
    assert pipe.disable_structure_preservation() is pipe and pipe.disable_structure_preservation() is pipe
    loaded = pickle.loads(pickle.dumps(pipe))  # a disabled pipeline pickles, and its copy disables its copy
    assert type(loaded) is StableDiffusionImg2ImgPipeline and loaded.disable_structure_preservation() is loaded
    import gc
    import weakref

    gone = weakref.ref(pipe)
    gc.disable()
    try:
        del pipe, loaded
        assert gone() is None, "the disabled pipeline must be freed by reference counting (no cycle)"
    finally:
        gc.enable()


def test_enabled_pipeline_pickles_and_unpickles_enabled(src):
    pipe = enable_structure_preservation(_pipe("sd"), config=CFG)
    guided = _run(pipe, src).images
    loaded = pickle.loads(pickle.dumps(pipe))
    assert type(loaded).__name__ == "StableDiffusionImg2ImgPipeline" and isinstance(loaded, type(pipe).__mro__[2])
    assert loaded.structure_preservation_config == CFG
    assert torch.equal(_run(loaded, src).images, guided)
    assert loaded.structure_preservation_report.guided_steps == (2, 3)
    loaded.disable_structure_preservation()
    assert type(loaded) is StableDiffusionImg2ImgPipeline
    pickle.loads(pickle.dumps(loaded))
    # between calls the shared scheduler and VAE carry nothing of the guidance
    assert "step" not in vars(pipe.scheduler) and "decode" not in vars(pipe.vae)


def test_auto_pipeline_loads_a_pipeline_saved_after_enabling(tmp_path, src):
    pipe = enable_structure_preservation(_pipe("sd"), config=CFG)
    _run(pipe, src)
    pipe.save_pretrained(tmp_path / "saved")
    loaded = AutoPipelineForImage2Image.from_pretrained(tmp_path / "saved", local_files_only=True)
    assert type(loaded) is StableDiffusionImg2ImgPipeline
    tiny.restore_vae_eps(loaded.vae)
    loaded.set_progress_bar_config(disable=True)
    enable_structure_preservation(loaded, config=CFG)
    assert torch.allclose(_run(loaded, src).images, _run(pipe, src).images, atol=1e-5)


def test_config_is_one_frozen_validated_object():
    cfg = StructurePreservationConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.start = 0.5
    assert cfg.post_steps == cfg.steps_per_guidance == 100 and cfg.bidirectional
    assert hash(cfg) == hash(StructurePreservationConfig())
    for bad, match in ((dict(start=1.5), "start must be in"), (dict(steps_per_guidance=-1), "steps_per_guidance"),
                       (dict(latent_update="add"), "latent_update must be one of"), (dict(eps=0), "eps")):
        with pytest.raises(ValueError, match=match):
            StructurePreservationConfig(**bad)
    with pytest.raises(TypeError, match="no field 'steps'"):
        cfg.replace(steps=3)
    restorer = LatentRestorer(torch.zeros(1, 3, 8, 8), steps=7, radius=3)  # the older keywords build a config
    assert restorer.config == cfg.replace(steps_per_guidance=7, radius=3) and restorer.post_steps == 7


def test_enable_with_keywords_equals_enable_with_config(src):
    pipe = _pipe("sd")
    enable_structure_preservation(pipe, start=0.3, steps_per_guidance=4, post_process=False)
    by_keywords = _run(pipe, src)
    assert pipe.structure_preservation_config == CFG
    enable_structure_preservation(pipe, config=CFG)
    assert torch.equal(_run(pipe, src).images, by_keywords.images)


def test_guided_sgd_reports_on_the_pipelines_progress_bar(src):
    pipe = _pipe("sd")
    enable_structure_preservation(pipe, config=CFG.replace(post_process=True, post_process_steps=3))
    buf = io.StringIO()
    pipe.set_progress_bar_config(file=buf, disable=False, ascii=True)
    _run(pipe, src)
    text = buf.getvalue()
    assert "SPL guidance" in text and "11/11" in text  # 2 guided steps x 4 SGD steps + 3 post-processing steps
    buf = io.StringIO()
    pipe.set_progress_bar_config(file=buf, disable=True)
    _run(pipe, src)
    assert buf.getvalue() == ""


def test_default_guidance_equals_an_independent_statement_of_the_guided_step(src):
    """The guided output, default settings (post-processing included), equals the stock pipeline run with a
    scheduler whose step applies the guidance written out here, then decoded and post-processed by hand."""
    pipe = _pipe("sd")
    cfg = StructurePreservationConfig(steps_per_guidance=6)  # the defaults but fewer SGD steps: start 0.8
    source = ((pipe.image_processor.preprocess(src) + 1) / 2).clamp(0, 1)
    restorer = LatentRestorer(source, cfg, check_aspect=False)
    restorer.vae, restorer.decode_fn = pipe.vae, pipe.vae.decode

    class Guided(DDIMScheduler):
        def step(self, model_output, timestep, sample, *args, **kwargs):
            idx = int((self.timesteps == timestep).nonzero()[0])
            if idx / 5 >= 0.8 - 1e-9:  # 5 steps at strength 1: the last one
                abar = self.alphas_cumprod[int(timestep)].float()  # DDIM, epsilon: x0 = (x - sqrt(1-abar) eps) / sqrt(abar)
                a, b = 1 / abar.sqrt(), -(1 - abar).sqrt() / abar.sqrt()
                x0 = a * sample.float() + b * model_output.float()
                model_output = (model_output.float() + (restorer.optimise_latent(x0) - x0) / b).to(model_output.dtype)
            return super().step(model_output, timestep, sample, *args, **kwargs)

    stock_scheduler = pipe.scheduler
    pipe.scheduler = Guided.from_config(stock_scheduler.config)
    run = dict(num_inference_steps=5, strength=1.0)
    latents = _run(pipe, src, output_type="latent", **run).images
    decoded = pipe.vae.decode(latents / pipe.vae.config.scaling_factor, return_dict=False)[0]
    expect = pipe.image_processor.postprocess(restorer.post_process(decoded), output_type="pt")
    pipe.scheduler = stock_scheduler
    enable_structure_preservation(pipe, config=cfg)
    out = _run(pipe, src, **run)
    assert out.structure_preservation.guided_steps == (4,) and out.structure_preservation.post_processed
    assert torch.equal(out.images, expect)


def test_the_report_counts_guided_steps_in_the_steps_asked_for(src):
    """20 steps at strength 0.6: diffusers runs the last 12 (schedule steps 8 .. 19); start 0.8 guides the runs' steps
    k with k / 12 >= 0.8, k = 10 and 11, which are steps 18 and 19 of the 20 asked for."""
    pipe = enable_structure_preservation(_pipe("sd"), config=CFG.replace(start=0.8, steps_per_guidance=1))
    report = _run(pipe, src, num_inference_steps=20, strength=0.6).structure_preservation
    assert (report.guided_steps, report.num_steps, report.steps_run) == ((18, 19), 20, 12)
    assert all(0 <= k < report.num_steps for k in report.guided_steps)
    assert report.guided_timesteps == tuple(float(t) for t in pipe.scheduler.timesteps[18:20])


def test_a_call_that_would_guide_no_step_warns(src):
    pipe = enable_structure_preservation(_pipe("sd"), config=CFG.replace(start=0.8, steps_per_guidance=1))
    with pytest.warns(UserWarning, match=r"SPL guidance guides no step: 3 steps with start=0\.8 .* use start <= 0\.67 "
                                         r"or at least 5 steps"):
        report = _run(pipe, src).structure_preservation  # 4 steps at strength 0.75: 3 run
    assert report.guided_steps == () and report.steps_run == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _run(pipe, src, structure_config={"steps_per_guidance": 0})  # guidance off on purpose: no warning
        _run(pipe, src, num_inference_steps=8)  # 6 run, the last one guided


def test_the_callback_at_lcms_default_steps_warns_that_it_guides_nothing(src):
    pipe = _pipe("lcm")
    cb = SPLGuidanceCallback(src, steps_per_guidance=2)  # the default start, 0.8
    with pytest.warns(UserWarning, match=r"SPLGuidanceCallback guides no step: 4 steps with start=0\.8"):
        pipe(prompt="a red cat", image=src, output_type="pt", callback_on_step_end=cb, strength=1.0,
             callback_on_step_end_tensor_inputs=cb.tensor_inputs)  # LCM img2img's default: 4 steps
    assert cb.guided_steps == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pipe(prompt="a red cat", image=src, output_type="pt", callback_on_step_end=cb, strength=1.0,
             num_inference_steps=5, callback_on_step_end_tensor_inputs=cb.tensor_inputs)
    assert cb.guided_steps == [4]


def test_the_callback_on_a_pipeline_without_denoised_says_so_in_our_words(src):
    pipe = _pipe("sd")
    cb = SPLGuidanceCallback(src, steps_per_guidance=2)
    with pytest.raises(ValueError) as err:
        _run(pipe, src, callback_on_step_end=cb)
    text = str(err.value)
    assert text.startswith("SPLGuidanceCallback guides the clean latent") and "StableDiffusionImg2ImgPipeline" in text
    assert "enable_structure_preservation(pipe)" in text and "has to be in" not in text
    from diffusers.callbacks import MultiPipelineCallbacks  # the same through diffusers' list of callbacks

    with pytest.raises(ValueError, match="SPLGuidanceCallback guides the clean latent"):
        _run(pipe, src, callback_on_step_end=MultiPipelineCallbacks([cb]))
    assert cb.tensor_inputs == ["latents", "denoised"]  # read outside a pipeline: the list
