"""InfEdit's unified attention control in StructurePreservingEditPipeline: word swap, refinement,
re-weighting, self-attention replacement, LocalBlend, processors restored. Tiny random components, 32 px."""
import os

os.environ["HF_HUB_OFFLINE"] = "1"

import sys

import pytest
import torch

pytest.importorskip("diffusers")

from diffusers.models.attention_processor import AttnProcessor  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import tiny_diffusers as tiny  # noqa: E402

from vision.pipelines.editing.masks import _StoreCrossAttention  # noqa: E402
from vision.pipelines.editing import attention_control as ac  # noqa: E402


@pytest.fixture(scope="module")
def pipe():
    return tiny.edit_pipeline()


class Recorder(_StoreCrossAttention):
    """A processor that is also an attention observer: keeps every cross-attention call's probabilities
    (its own calls when no control is installed, the controlled ones through ``record`` otherwise)."""

    def __init__(self):
        super().__init__({})
        self.seen = []

    def record(self, probs, heads):
        self.seen.append(probs.view(-1, heads, *probs.shape[1:]).clone())


def _run(pipe, prompt="a blue dog", source="a red cat", steps=2, **kw):
    kw = {"structure_preservation": False, "cross_replace_steps": 0.0, "self_replace_steps": 0.0, **kw}
    return pipe(prompt=prompt, source_prompt=source, image=tiny.source_image(), num_inference_steps=steps,
                output_type="pt", generator=torch.Generator().manual_seed(0), **kw).images


def _recorded(pipe, **kw):
    rec = Recorder()
    pipe.unet.set_attn_processor(rec)
    try:
        _run(pipe, **kw)
        assert all(p is rec for p in pipe.unet.attn_processors.values()), "processors must be restored"
    finally:
        pipe.unet.set_attn_processor(AttnProcessor())
    assert rec.seen, "the observer saw no cross-attention"
    return rec.seen


def test_token_alignment(pipe):
    tok = pipe.tokenizer
    mapper, alphas, mode = ac.token_alignment(tok, "a red cat", "a blue dog")
    assert mode == "replace" and torch.equal(mapper, torch.arange(len(mapper))) and bool((alphas == 1).all())
    mapper, alphas, mode = ac.token_alignment(tok, "a cat", "a red cat")  # BOS a cat EOS -> BOS a red cat EOS
    assert mode == "refine"
    assert mapper[:5].tolist()[:2] == [0, 1] and mapper[3] == 2 and mapper[4] == 3  # cat -> cat, EOS -> EOS
    assert alphas[2] == 0 and bool((alphas[[0, 1, 3, 4]] == 1).all())  # "red" is new: keeps its own map
    with pytest.raises(ValueError, match="same token length"):
        ac.token_alignment(tok, "a cat", "a red cat", mode="replace")
    with pytest.raises(ValueError, match="cross_attention_mode"):
        ac.token_alignment(tok, "a cat", "a dog", mode="swap")


@pytest.mark.slow  # sampling with a tiny pipeline: over 5 s on 2 cores
def test_word_swap_gives_the_target_the_source_maps(pipe):
    plain = _recorded(pipe)
    swap = _recorded(pipe, cross_replace_steps=1.0)
    assert len(swap) == len(plain)
    for p in swap:  # batch [source, unconditional, target]
        assert torch.allclose(p[2], p[0], atol=1e-6)
    assert not torch.allclose(plain[-1][2], plain[-1][0], atol=1e-3), "without control the maps differ"
    half = _recorded(pipe, cross_replace_steps=0.5, steps=2)  # only the first of 2 steps is controlled
    per_step = len(half) // 2
    assert all(torch.allclose(p[2], p[0], atol=1e-6) for p in half[:per_step])
    assert not torch.allclose(half[-1][2], half[-1][0], atol=1e-3)


def test_refinement_aligns_tokens_and_keeps_new_words(pipe):
    seen = _recorded(pipe, prompt="a red cat", source="a cat", cross_replace_steps=1.0)
    for p in seen:
        src, tgt = p[0], p[2]
        assert torch.allclose(tgt[..., 3], src[..., 2], atol=1e-6)  # "cat" reads the source's "cat"
        assert torch.allclose(tgt[..., :2], src[..., :2], atol=1e-6)
    assert not torch.allclose(seen[0][2][..., 2], seen[0][0][..., 2], atol=1e-4)  # "red" keeps its own map


@pytest.mark.slow  # sampling with a tiny pipeline: over 5 s on 2 cores
def test_equalizer_scales_the_chosen_word(pipe):
    plain = _recorded(pipe)
    eq = _recorded(pipe, equalizer={"dog": 3.0})
    dog = 3  # BOS a blue dog
    first_p, first_e = plain[0][2], eq[0][2]  # first layer of the first step: identical inputs
    assert torch.allclose(first_e[..., dog], 3.0 * first_p[..., dog], atol=1e-6)
    assert torch.allclose(first_e[..., :dog], first_p[..., :dog], atol=1e-6)
    assert torch.allclose(eq[0][0], plain[0][0], atol=1e-6), "the source branch is untouched"
    with pytest.raises(ValueError, match="not in the prompt"):
        _run(pipe, equalizer={"tree": 2.0})


def test_self_attention_replacement_uses_source_probabilities():
    from diffusers.models.attention_processor import Attention

    torch.manual_seed(0)
    attn = Attention(query_dim=8, heads=2, dim_head=4).eval()
    tok = tiny.tiny_tokenizer()
    ctl = ac.AttentionControl(tok, "a cat", "a dog", n=1, num_steps=2, self_replace_steps=0.5)
    proc = ac.UnifiedAttentionProcessor(ctl, "down_blocks.1.attentions.0.transformer_blocks.0.attn1")
    x = torch.randn(3, 5, 8)
    with torch.no_grad():
        out = proc(attn, x)
        q, k, v = attn.to_q(x), attn.to_k(x), attn.to_v(x)
        split = lambda t: t.view(3, 5, 2, 4).transpose(1, 2)  # noqa: E731
        p_src = torch.softmax(split(q)[0] @ split(k)[0].transpose(-1, -2) / 2.0, -1)
        expected = attn.to_out[0]((p_src @ split(v)[2]).transpose(0, 1).reshape(5, 8))
        assert torch.allclose(out[2], expected, atol=1e-5)
        assert torch.allclose(out[:2], attn.processor(attn, x)[:2], atol=1e-5)  # source, unconditional: plain
        ctl.step = 1  # past the window: plain attention
        assert torch.allclose(proc(attn, x), attn.processor(attn, x), atol=1e-5)


@pytest.mark.slow  # sampling with a tiny pipeline: over 5 s on 2 cores
def test_local_blend_keeps_the_source_outside_the_words(pipe, monkeypatch):
    masks = []
    orig = ac.AttentionControl.blend_mask

    def spy(self, shape):
        m = orig(self, shape)
        if m is not None:
            masks.append(m)
        return m

    monkeypatch.setattr(ac.AttentionControl, "blend_mask", spy)
    src = tiny.source_image()
    plain = _run(pipe, steps=3)
    blended = _run(pipe, steps=3, local_blend_words=["cat", "dog"],
                   local_blend_threshold=0.97)  # random weights: nearly flat maps (max-normalised 0.91-0.98)
    assert masks, "LocalBlend never produced a mask"
    mask = masks[-1]  # latent-sized (the tiny VAE does not down-sample)
    frac = float(mask.mean())
    assert 0.05 < frac < 0.95, f"blend region covers {frac:.2f} of the image"
    with torch.no_grad():  # the source branch's output: its clean latent z_src decoded (the VAE round trip)
        z = pipe.vae.encode(src * 2 - 1).latent_dist.mean
        source_out = ((pipe.vae.decode(z).sample + 1) / 2).clamp(0, 1)
    outside = torch.nn.functional.max_pool2d(mask, 3, 1, 1) == 0  # one pixel off the region (decoder blur)
    outside = outside.expand_as(blended)
    d_blend = float((blended - source_out).abs()[outside].max())
    d_plain = float((plain - source_out).abs()[outside].mean())
    print(f"LocalBlend: region {frac:.2f}; outside |out - source branch| max {d_blend:.2e} (plain mean {d_plain:.3f})")
    assert d_blend < 1e-4 and d_plain > 0.02
    inside = (mask > 0).expand_as(blended)
    assert float((blended - source_out).abs()[inside].mean()) > 0.01, "inside the region the edit stays"
    with pytest.raises(ValueError, match="neither"):
        _run(pipe, local_blend_words=["tree"])


def test_processors_are_restored_after_an_error(pipe):
    saved = {k: type(v) for k, v in pipe.unet.attn_processors.items()}

    def boom(p, i, t, kw):
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        _run(pipe, cross_replace_steps=1.0, self_replace_steps=1.0, callback_on_step_end=boom)
    assert {k: type(v) for k, v in pipe.unet.attn_processors.items()} == saved
    with pytest.raises(ValueError, match="cross_replace_steps"):
        _run(pipe, cross_replace_steps=1.5)


# ----------------------------------------------------------------------------- SPL mask refinement
def test_refine_attention_map_adaptive_threshold_and_gamma():
    from vision.pipelines.editing.masks import refine_attention_map

    g = torch.Generator().manual_seed(0)
    rough = 0.2 + 0.05 * torch.rand(2, 1, 16, 16, generator=g)  # a weak background ...
    rough[0, :, 4:10, 3:8] += 0.5  # ... and a strong object, at two different contrasts
    rough[1, :, 8:14, 9:15] += 0.1
    truth = torch.zeros_like(rough, dtype=torch.bool)
    truth[0, :, 4:10, 3:8] = True
    truth[1, :, 8:14, 9:15] = True
    otsu = refine_attention_map(rough, threshold="otsu")
    assert otsu.shape == rough.shape and torch.equal(otsu.bool(), truth), "Otsu separates both maps"
    fixed = refine_attention_map(rough, threshold=0.5, normalise="max")
    assert not torch.equal(fixed.bool(), truth), "one fixed threshold on max-normalised maps does not"
    soft = refine_attention_map(rough, threshold=None)
    assert float(soft.amin()) == 0.0 and float(soft.amax()) == 1.0
    sharp = refine_attention_map(rough, threshold=None, gamma=3.0)
    assert torch.allclose(sharp, soft ** 3) and float(sharp[~truth].mean()) < float(soft[~truth].mean())
    assert torch.equal(refine_attention_map(torch.full((1, 1, 4, 4), 0.3)), torch.ones(1, 1, 4, 4))  # flat
    mean = refine_attention_map(rough[:1], threshold="mean")
    assert bool(mean[truth[:1]].all())
    for bad in (dict(threshold="median"), dict(gamma=0.0), dict(threshold=1.5), dict(normalise="l2")):
        with pytest.raises(ValueError):
            refine_attention_map(rough, **bad)
    with pytest.raises(ValueError, match="NaN"):
        refine_attention_map(torch.full((1, 1, 4, 4), float("nan")))


def test_attention_mask_with_otsu_from_the_edit_pipeline(pipe):
    """The mask dry run of the edit pipeline stores the controlled cross-attention; Otsu + gamma refine it."""
    from vision.pipelines.editing.masks import attention_mask

    src = tiny.source_image()
    m = attention_mask(pipe, ["dog"], prompt="a blue dog", guide_image=src, image=src, source_prompt="a red cat",
                       num_inference_steps=1, structure_preservation=False, threshold="otsu", gamma=2.0,
                       cross_replace_steps=1.0)
    assert m.shape == (1, 1, 32, 32) and float(m.min()) >= 0 and float(m.max()) <= 1
    assert 0.02 < float(m.mean()) < 0.98
