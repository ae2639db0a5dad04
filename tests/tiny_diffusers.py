"""Tiny diffusers components built in code, for tests that must not download anything.

Shapes follow the dummy components of diffusers' own pipeline tests (UNet2DConditionModel with
block_out_channels (32, 64), CLIP text encoders with hidden size 32, one-layer SD3 transformer), made
smaller still. The tokenizer is a CLIPTokenizer over a vocabulary written here (whole words of the
test prompts are single tokens), so nothing reaches the Hub.

The VAE is the one component that is not left random: SPL guidance decodes the predicted clean
latent, optimises the image and encodes it again, which only means something if encode and decode
roughly invert each other (a random VAE maps the pixel correction to an unrelated latent change).
:func:`tiny_vae` sets the weights of a tiny AutoencoderKL by hand so that it does, with a blurring
decoder standing in for the detail a real VAE loses.
"""
from __future__ import annotations

import json
import os
import tempfile

import torch

WORDS = ("a photo of cat dog red blue green house tree in the on sky field painting bright dark "
         "square circle stripes left right").split()
LETTERS = "abcdefghijklmnopqrstuvwxyz"
TEXT_MAX_LENGTH = 16


def tiny_tokenizer(max_length: int = TEXT_MAX_LENGTH):
    """A CLIPTokenizer whose vocabulary holds the letters and :data:`WORDS` (each word one token)."""
    from transformers import CLIPTokenizer

    folder = tempfile.mkdtemp(prefix="tiny-tok-")
    vocab, merges = {}, []
    for c in LETTERS:
        vocab[c] = len(vocab)
    for c in LETTERS:
        vocab[c + "</w>"] = len(vocab)
    for w in WORDS:  # BPE merges that rebuild each word letter by letter into one token
        pieces = list(w[:-1]) + [w[-1] + "</w>"]
        while len(pieces) > 1:
            a, b = pieces[0], pieces[1]
            if (a, b) not in merges:
                merges.append((a, b))
            pieces = [a + b] + pieces[2:]
            vocab.setdefault(pieces[0], len(vocab))
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    with open(os.path.join(folder, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    with open(os.path.join(folder, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    return CLIPTokenizer(os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt"),
                         model_max_length=max_length)


def tiny_text_encoder(seed: int, hidden: int = 32, projection: bool = False, projection_dim: int = 32):
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    torch.manual_seed(seed)
    tok = tiny_tokenizer()
    config = CLIPTextConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                            pad_token_id=tok.pad_token_id, hidden_size=hidden, intermediate_size=37,
                            layer_norm_eps=1e-5, num_attention_heads=4, num_hidden_layers=2,
                            vocab_size=len(tok), max_position_embeddings=TEXT_MAX_LENGTH,
                            projection_dim=projection_dim, hidden_act="gelu")
    model = (CLIPTextModelWithProjection if projection else CLIPTextModel)(config).eval()
    return model, tok


def synthetic_images(n: int, size: int, seed: int) -> torch.Tensor:
    """(n, 3, size, size) in [-1, 1]: coloured rectangles and discs on smooth gradients (sharp edges)."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    out = []
    for _ in range(n):
        c = torch.rand(3, 3, generator=g)
        img = c[0].view(3, 1, 1) * (1 - xx) + c[1].view(3, 1, 1) * yy + 0.2 * c[2].view(3, 1, 1)
        img = img / img.amax().clamp_min(1e-3)
        for _ in range(int(torch.randint(2, 6, (1,), generator=g))):
            col = torch.rand(3, 1, 1, generator=g)
            x0, y0 = torch.rand(2, generator=g)
            w, h = 0.1 + 0.4 * torch.rand(2, generator=g)
            if torch.rand(1, generator=g) < 0.5:
                m = ((xx - x0).abs() < w / 2) & ((yy - y0).abs() < h / 2)
            else:
                m = (xx - x0) ** 2 + (yy - y0) ** 2 < (w / 2) ** 2
            img = torch.where(m, col.expand_as(img), img)
        out.append(img)
    return torch.stack(out).clamp(0, 1) * 2 - 1


def tiny_vae(latent_channels: int = 4, scaling_factor: float = 1.0, shift_factor: float | None = None,
             blur: bool = True):
    """A tiny AutoencoderKL (one block, no down-sampling) whose encode/decode nearly invert each other.

    The architecture is diffusers' own; the weights are set by hand: every residual branch (resnet
    ``conv2``, attention ``to_out``) is zeroed, so the blocks pass their input through; ``conv_in``
    writes each colour as the pair (v, -v), which makes every GroupNorm group zero-mean, and a huge
    GroupNorm eps with a matching scale and a large shift keeps norm + SiLU affine to ~1e-8; the
    output convolutions take (a - b) / 2 of each pair. So ``encode(x).mean`` is ``x`` (plus zero
    channels) and ``decode`` returns the first three latent channels, blurred by a [1, 2, 1]^2 / 16
    kernel when ``blur`` (the detail loss of a real VAE decoder, which post-processing must repair).
    """
    from diffusers import AutoencoderKL

    torch.manual_seed(0)
    width = 8  # three (v, -v) pairs and one spare pair
    vae = AutoencoderKL(block_out_channels=(width,), in_channels=3, out_channels=3,
                        down_block_types=("DownEncoderBlock2D",), up_block_types=("UpDecoderBlock2D",),
                        latent_channels=latent_channels, norm_num_groups=width // 2, layers_per_block=1,
                        scaling_factor=scaling_factor, shift_factor=shift_factor, sample_size=32)
    big, shift = 1e10, 20.0
    with torch.no_grad():
        for name, module in vae.named_modules():
            if name.endswith("conv2") or name.endswith("to_out.0"):
                module.weight.zero_()
                module.bias.zero_()
            if isinstance(module, torch.nn.GroupNorm) and name.endswith("conv_norm_out"):
                module.weight.fill_(big ** 0.5)
                module.bias.fill_(shift)
        restore_vae_eps(vae, big)

        def pairs_in(conv, n):
            conv.weight.zero_()
            conv.bias.zero_()
            for c in range(n):
                conv.weight[2 * c, c, 1, 1] = 1.0
                conv.weight[2 * c + 1, c, 1, 1] = -1.0

        def pairs_out(conv, n, kernel):
            conv.weight.zero_()
            conv.bias.zero_()
            for c in range(n):
                conv.weight[c, 2 * c] = 0.5 * kernel
                conv.weight[c, 2 * c + 1] = -0.5 * kernel

        delta = torch.zeros(3, 3)
        delta[1, 1] = 1.0
        k = torch.tensor([1.0, 2.0, 1.0])
        pairs_in(vae.encoder.conv_in, 3)
        pairs_out(vae.encoder.conv_out, 3, delta)  # mean = x; the log-variance channels get a bias below
        vae.encoder.conv_out.bias[latent_channels:] = -20.0
        pairs_in(vae.decoder.conv_in, 3)
        pairs_out(vae.decoder.conv_out, 3, torch.outer(k, k) / 16 if blur else delta)
        for conv in (vae.quant_conv, vae.post_quant_conv):
            if conv is not None:
                conv.weight.zero_()
                conv.bias.zero_()
                conv.weight[:, :, 0, 0] = torch.eye(conv.weight.shape[0])
    return vae.eval().requires_grad_(False)


def restore_vae_eps(vae, eps: float = 1e10):
    """Set the output GroupNorms' eps that :func:`tiny_vae` relies on (a module attribute that
    ``save_pretrained`` does not store; call it after ``from_pretrained`` of a saved tiny VAE)."""
    for name, module in vae.named_modules():
        if isinstance(module, torch.nn.GroupNorm) and name.endswith("conv_norm_out"):
            module.eps = eps
    return vae


def tiny_unet(cross_attention_dim: int = 32, time_cond_proj_dim: int | None = None, sdxl: bool = False,
              seed: int = 0):
    from diffusers import UNet2DConditionModel

    torch.manual_seed(seed)
    kwargs = dict(block_out_channels=(16, 32), layers_per_block=1, sample_size=16, in_channels=4, out_channels=4,
                  down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                  up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=cross_attention_dim,
                  norm_num_groups=8, attention_head_dim=(2, 4), time_cond_proj_dim=time_cond_proj_dim)
    if sdxl:  # text_time conditioning: 6 time ids x 8 + the pooled projection of text_encoder_2
        kwargs.update(addition_embed_type="text_time", addition_time_embed_dim=8, use_linear_projection=True,
                      projection_class_embeddings_input_dim=6 * 8 + 32, transformer_layers_per_block=(1, 1))
    return UNet2DConditionModel(**kwargs).eval()


def sd_components(scheduler):
    """Components for StableDiffusionImg2ImgPipeline / LatentConsistencyModelImg2ImgPipeline."""
    lcm = type(scheduler).__name__ == "LCMScheduler"
    text_encoder, tokenizer = tiny_text_encoder(seed=0)
    return dict(unet=tiny_unet(time_cond_proj_dim=32 if lcm else None), scheduler=scheduler, vae=tiny_vae(),
                text_encoder=text_encoder, tokenizer=tokenizer, safety_checker=None, feature_extractor=None,
                image_encoder=None, **({} if lcm else {"requires_safety_checker": False}))


def edit_pipeline(scheduler=None):
    """A tiny StructurePreservingEditPipeline: the LCM components of :func:`sd_components` (``scheduler`` replaces
    their LCMScheduler when given), progress bar off."""
    from diffusers import LCMScheduler

    from vision.pipelines import StructurePreservingEditPipeline

    c = sd_components(LCMScheduler())
    pipe = StructurePreservingEditPipeline(vae=c["vae"], text_encoder=c["text_encoder"], tokenizer=c["tokenizer"],
                                           unet=c["unet"], scheduler=scheduler or c["scheduler"])
    pipe.set_progress_bar_config(disable=True)
    return pipe


def sdxl_components(scheduler):
    te1, tok1 = tiny_text_encoder(seed=0)
    te2, tok2 = tiny_text_encoder(seed=1, projection=True)
    return dict(unet=tiny_unet(cross_attention_dim=64, sdxl=True), scheduler=scheduler, vae=tiny_vae(),
                text_encoder=te1, tokenizer=tok1, text_encoder_2=te2, tokenizer_2=tok2,
                requires_aesthetics_score=False, force_zeros_for_empty_prompt=True,
                image_encoder=None, feature_extractor=None)


def sd3_components(scheduler):
    from diffusers import SD3Transformer2DModel

    torch.manual_seed(0)
    transformer = SD3Transformer2DModel(sample_size=32, patch_size=1, in_channels=4, num_layers=1,
                                        attention_head_dim=8, num_attention_heads=4, caption_projection_dim=32,
                                        joint_attention_dim=32, pooled_projection_dim=64, out_channels=4).eval()
    te1, tok1 = tiny_text_encoder(seed=0, hidden=16, projection=True)
    te2, tok2 = tiny_text_encoder(seed=1, hidden=16, projection=True)
    return dict(transformer=transformer, scheduler=scheduler, vae=tiny_vae(scaling_factor=1.0, shift_factor=0.0),
                text_encoder=te1, tokenizer=tok1, text_encoder_2=te2, tokenizer_2=tok2,
                text_encoder_3=None, tokenizer_3=None, image_encoder=None, feature_extractor=None)


def source_image(size: int = 32, seed: int = 7) -> torch.Tensor:
    """(1, 3, size, size) in [0, 1]: a synthetic image with sharp edges."""
    return (synthetic_images(1, size, seed=seed) + 1) / 2
