"""SPL guidance behaving like diffusers: per-call sources, per-instance attachment (from_pipe siblings,
scheduler swaps), model offload, saving/loading the edit pipeline, its scheduler check, generators,
output types and no deprecated arguments. Tiny in-code components (32 px); nothing downloads."""
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before diffusers/transformers are imported
os.environ.setdefault("HF_MODULES_CACHE", __import__("tempfile").mkdtemp(prefix="hf-modules-"))

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
    DDIMScheduler, DiffusionPipeline, EulerDiscreteScheduler, LCMScheduler, PNDMScheduler,
    StableDiffusionImg2ImgPipeline, StableDiffusionPipeline,
)

from vision.kernels import structure_loss  # noqa: E402
from vision.pipelines import (  # noqa: E402
    StructurePreservingEditPipeline, disable_structure_preservation, enable_structure_preservation,
)

diffusers.utils.logging.set_verbosity_error()
GUIDE = dict(start=0.3, steps_per_guidance=30, post_process=False)  # the last 2 of the 3 steps run


def _sd():
    pipe = StableDiffusionImg2ImgPipeline(**tiny.sd_components(
        DDIMScheduler(clip_sample=False, set_alpha_to_one=False, steps_offset=1)))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _run(pipe, image, **kw):
    return pipe(prompt="a red cat", image=image, num_inference_steps=4, strength=0.75, output_type="pt",
                generator=torch.Generator().manual_seed(0), **kw).images


def _spl(source, out):
    return float(structure_loss(source, out.float().clamp(0, 1)))


@pytest.fixture(scope="module")
def images():
    return tiny.source_image(seed=7), tiny.source_image(seed=3)  # A, B: different structures


def test_guidance_follows_each_calls_image(images):
    a, b = images
    pipe = _sd()
    base_a, base_b = _run(pipe, a), _run(pipe, b)
    enable_structure_preservation(pipe, **GUIDE)  # no source: each call's own image
    guided_a, guided_b = _run(pipe, a), _run(pipe, b)
    assert pipe._spl_guidance.guided_steps == [2, 3]
    print(f"SPL to B: unguided {_spl(b, base_b):.5f}, guided {_spl(b, guided_b):.5f}; "
          f"to A: unguided {_spl(a, base_a):.5f}, guided {_spl(a, guided_a):.5f}")
    assert _spl(b, guided_b) <= 0.7 * _spl(b, base_b)
    assert _spl(a, guided_a) <= 0.7 * _spl(a, base_a)
    # a per-call source overrides the default, and the image of the call is then only the init image
    towards_a = _run(pipe, b, structure_source=a)
    assert _spl(a, towards_a) < _spl(a, guided_b) and not torch.allclose(towards_a, guided_b)
    # a source fixed at enable time stays fixed
    enable_structure_preservation(pipe, a, **GUIDE)
    assert torch.allclose(_run(pipe, b), towards_a, atol=1e-6)


def test_explicit_source_of_another_aspect_is_an_error(images):
    a, b = images
    pipe = _sd()
    wide = torch.nn.functional.interpolate(b, size=(32, 48), mode="bilinear", align_corners=False)
    enable_structure_preservation(pipe, a, **GUIDE)
    steps = []
    with pytest.raises(ValueError, match=r"source is 32x32 \(HxW\) but the output is 32x48: the aspect ratio differs"):
        _run(pipe, wide, callback_on_step_end=lambda p, i, t, kw: steps.append(i) or kw)
    assert steps == [], "the mismatch must be reported before sampling starts"
    # the same aspect at another size is resized, as the pipeline's image processor resizes `image`
    big = torch.nn.functional.interpolate(a, size=(64, 64), mode="bicubic", align_corners=False).clamp(0, 1)
    enable_structure_preservation(pipe, big, **GUIDE)
    out = _run(pipe, a)
    assert out.shape == (1, 3, 32, 32)
    # the call's own image is never an aspect error: the pipeline itself decides its output size
    enable_structure_preservation(pipe, **GUIDE)
    assert _run(pipe, wide).shape == (1, 3, 32, 48)


def test_from_pipe_sibling_is_untouched(images):
    a, b = images
    pipe = _sd()
    sibling = StableDiffusionPipeline.from_pipe(pipe)
    sibling.set_progress_bar_config(disable=True)
    assert sibling.scheduler is pipe.scheduler and sibling.vae is pipe.vae

    def text_to_image():
        return sibling("a red cat", num_inference_steps=3, height=32, width=32, output_type="pt",
                       generator=torch.Generator().manual_seed(0)).images

    before = text_to_image()
    enable_structure_preservation(pipe, a, **GUIDE)
    during = text_to_image()
    _run(pipe, b)  # a guided call on the original in between
    after = text_to_image()
    assert torch.equal(before, during) and torch.equal(before, after)
    for obj in (pipe.scheduler, pipe.vae):  # the shared objects carry nothing of the guidance
        assert not {"step", "decode", "set_timesteps"} & set(vars(obj))
    assert type(pipe.scheduler) is DDIMScheduler and type(pipe.vae) is diffusers.AutoencoderKL
    assert type(sibling) is StableDiffusionPipeline
    disable_structure_preservation(pipe)
    assert type(pipe) is StableDiffusionImg2ImgPipeline


def test_scheduler_swap_keeps_guidance_or_raises(images):
    _, b = images
    pipe = _sd()
    pipe.scheduler = EulerDiscreteScheduler.from_config(pipe.scheduler.config)
    base = _run(pipe, b)
    pipe.scheduler = DDIMScheduler.from_config(pipe.scheduler.config)
    enable_structure_preservation(pipe, **GUIDE)
    pipe.scheduler = EulerDiscreteScheduler.from_config(pipe.scheduler.config)  # after enabling
    guided = _run(pipe, b)
    assert pipe._spl_guidance.guided_steps, "the swapped scheduler was not guided"
    print(f"Euler after the swap: SPL {_spl(b, base):.5f} -> {_spl(b, guided):.5f}")
    assert _spl(b, guided) <= 0.7 * _spl(b, base)
    pipe.scheduler = PNDMScheduler.from_config(pipe.scheduler.config)
    with pytest.raises(ValueError, match="current scheduler cannot be guided.*PNDMScheduler.*supported: DDIM"):
        _run(pipe, b)


def test_model_offload_keeps_the_denoiser_on_the_device(images, monkeypatch):
    """With enable_model_cpu_offload the guided stages run the VAE without offloading the UNet, and call it a
    bounded number of times: per stage one decode and one encode, per call one source round trip."""
    from accelerate.hooks import CpuOffload

    a, b = images
    pipe = _sd()
    enable_structure_preservation(pipe, **GUIDE)
    plain = _run(pipe, b)
    pipe.enable_model_cpu_offload(device="cpu")
    calls = {"encode": 0, "decode": 0, "vae_evicts_unet": 0}
    vae_cls = type(pipe.vae)
    for name in ("encode", "decode"):
        original = getattr(vae_cls, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(vae_cls, name, counted)
    pre_forward = CpuOffload.pre_forward

    def watched(self, module, *args, **kwargs):
        # on a GPU this is the moment the VAE's hook would move the UNet to the CPU
        if isinstance(module, vae_cls) and self.prev_module_hook is not None:
            calls["vae_evicts_unet"] += 1
        return pre_forward(self, module, *args, **kwargs)

    monkeypatch.setattr(CpuOffload, "pre_forward", watched)
    offloaded = _run(pipe, b)
    stages = len(pipe._spl_guidance.guided_steps)
    print(f"offload: {stages} guided stages, VAE calls {calls}")
    assert torch.allclose(offloaded, plain, atol=1e-5)
    assert calls["decode"] == stages + 2  # stages + the source round trip + the final decode
    assert calls["encode"] == stages + 2  # stages + the source round trip + the pipeline's init image
    assert calls["vae_evicts_unet"] == 2  # only the pipeline's own encode and final decode
    assert all(h.model is not None and type(h.model) in (vae_cls, type(pipe.unet), type(pipe.text_encoder))
               for h in pipe._all_hooks)


# ----------------------------------------------------------------------------- StructurePreservingEditPipeline
_edit_pipe = tiny.edit_pipeline


def _edit(pipe, src, generator=None, **kw):
    kw = {"start": 0.5, "steps_per_guidance": 10, "output_type": "pt", **kw}
    return pipe(prompt="a blue dog", source_prompt="a red cat", image=src, num_inference_steps=3,
                generator=generator or torch.Generator().manual_seed(0), **kw).images


def test_saved_edit_pipeline_loads_with_diffusion_pipeline(tmp_path, images):
    a, _ = images
    pipe = _edit_pipe()
    ref = _edit(pipe, a)
    pipe.save_pretrained(tmp_path / "edit")
    with pytest.raises(ValueError, match="trust_remote_code=True"):  # diffusers' rule for a folder's code
        DiffusionPipeline.from_pretrained(tmp_path / "edit")
    for loaded in (DiffusionPipeline.from_pretrained(tmp_path / "edit", trust_remote_code=True),
                   StructurePreservingEditPipeline.from_pretrained(tmp_path / "edit")):
        assert type(loaded) is StructurePreservingEditPipeline
        tiny.restore_vae_eps(loaded.vae)
        loaded.set_progress_bar_config(disable=True)
        assert torch.allclose(_edit(loaded, a), ref, atol=1e-5)
    loaded.save_pretrained(tmp_path / "again")  # a loaded pipeline saves the same way
    assert (tmp_path / "again" / "pipeline.py").read_text() == (tmp_path / "edit" / "pipeline.py").read_text()


def test_edit_pipeline_names_the_schedulers_it_needs(images):
    pipe = _edit_pipe(DDIMScheduler())
    with pytest.raises(ValueError, match="needs LCMScheduler, got DDIMScheduler.*LCMScheduler.from_config"):
        _edit(pipe, images[0])
    pipe.scheduler = LCMScheduler.from_config(pipe.scheduler.config)
    assert _edit(pipe, images[0], structure_preservation=False).shape == (1, 3, 32, 32)


def test_edit_pipeline_generators_outputs_and_callbacks(images):
    a, _ = images
    pipe = _edit_pipe()
    kw = dict(structure_preservation=False, num_images_per_prompt=2)
    both = _edit(pipe, a, generator=[torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)], **kw)
    one = _edit(pipe, a, generator=torch.Generator().manual_seed(2), structure_preservation=False)
    assert torch.allclose(both[1:], one, atol=1e-4), "image i must follow generator i"
    with pytest.raises(ValueError, match="list of generators of length 1"):
        _edit(pipe, a, generator=[torch.Generator()], **kw)
    out = pipe(prompt="a blue dog", source_prompt="a red cat", image=a, num_inference_steps=2,
               structure_preservation=False, output_type="np", return_dict=False)
    assert isinstance(out, tuple) and out[0].shape == (1, 32, 32, 3)
    from diffusers.callbacks import MultiPipelineCallbacks, PipelineCallback

    class Scale(PipelineCallback):
        tensor_inputs = ["latents"]

        def callback_fn(self, pipeline, step_index, timestep, callback_kwargs):
            seen.append(step_index)
            return callback_kwargs

    seen = []
    _edit(pipe, a, structure_preservation=False, callback_on_step_end=MultiPipelineCallbacks([Scale()]))
    assert seen == [0, 1, 2]


def test_no_future_warnings_from_our_calls(tmp_path, images):
    a, b = images
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        pipe = _sd()
        enable_structure_preservation(pipe, **GUIDE)
        _run(pipe, b, structure_source=a * 2 - 1)  # a [-1, 1] source tensor is ours to convert
        edit = _edit_pipe()
        _edit(edit, a * 2 - 1, steps_per_guidance=2)  # the edit pipeline documents [-1, 1] tensors
        edit.save_pretrained(tmp_path / "edit")
        loaded = StructurePreservingEditPipeline.from_pretrained(tmp_path / "edit", dtype=torch.float32)
        assert loaded.unet.dtype == torch.float32


def test_inpaint_is_guided_towards_its_image(images):
    from diffusers import StableDiffusionInpaintPipeline

    _, b = images
    pipe = StableDiffusionInpaintPipeline(**tiny.sd_components(
        DDIMScheduler(clip_sample=False, set_alpha_to_one=False, steps_offset=1)))
    pipe.set_progress_bar_config(disable=True)
    everywhere = torch.ones(1, 1, 32, 32)  # repaint the whole image: only the guidance keeps its structure
    base = _run(pipe, b, mask_image=everywhere, height=32, width=32)
    enable_structure_preservation(pipe, **GUIDE)
    guided = _run(pipe, b, mask_image=everywhere, height=32, width=32)
    print(f"inpaint: SPL {_spl(b, base):.5f} -> {_spl(b, guided):.5f}")
    assert pipe._spl_guidance.guided_steps and _spl(b, guided) <= 0.7 * _spl(b, base)


def test_vae_tiling_and_slicing_apply_to_the_guidance(images, monkeypatch):
    _, b = images
    pipe = _sd()
    base = _run(pipe, b, num_images_per_prompt=2)
    vae = pipe.vae
    vae.enable_tiling()
    vae.enable_slicing()
    vae.tile_sample_min_size = vae.tile_latent_min_size = 16  # tiles smaller than the 32 px test images
    tiled = []
    original = type(vae).tiled_decode
    monkeypatch.setattr(type(vae), "tiled_decode", lambda self, *a, **k: tiled.append(1) or original(self, *a, **k))
    enable_structure_preservation(pipe, **GUIDE)
    guided = _run(pipe, b, num_images_per_prompt=2)
    stages = len(pipe._spl_guidance.guided_steps)
    b2 = b.expand(2, -1, -1, -1)
    print(f"tiled + sliced: SPL {_spl(b2, base):.5f} -> {_spl(b2, guided):.5f}, {len(tiled)} tiled decodes")
    assert guided.shape == (2, 3, 32, 32) and _spl(b2, guided) <= 0.7 * _spl(b2, base)
    assert len(tiled) == 2 * stages + 1 + 2  # sliced, so per image: 2 per stage, the source once, the final 2
