"""ViG, H-ViG and the Mamba-style ViG as timm models.

The official architecture is written out here independently of ``vision.backbones``, from hustvl/ViG's
``vig.py`` / ``vig_h.py``: the parameter names and shapes of its state dicts (``official_*_shapes``) and
its forward pass (``official_*_forward``, float64, with the naive GLA recurrence). Our models must have
exactly the official parameter counts (and be within 3% of the published ones), load official state
dicts through ``checkpoint_filter_fn``, and then compute the official logits.
"""
import math
import time

import pytest
import timm
import torch
import torch.nn.functional as F

import vision  # noqa: F401  registers the models
from vision.backbones import HierViG, ViG, checkpoint_filter_fn
from vision.kernels.linear_attention import naive_recurrent_gla
from vision.pipelines.bench.backbone import peak_memory

VIG = {  # name: (embed_dim, depth, heads, conv_act, out_act, published params)
    "vig_tiny_patch16_224": (192, 12, 3, True, True, 6e6),
    "vig_small_patch16_224": (384, 12, 6, False, False, 23e6),
    "vig_base_patch16_224": (768, 12, 12, False, False, 89e6),
}
HVIG = {  # name: (dims, depths, heads, published params)
    "hvig_tiny_224": ([96, 192, 384, 768], [2, 2, 5, 2], [3, 6, 12, 24], 29e6),
    "hvig_small_224": ([96, 192, 384, 768], [2, 2, 17, 2], [3, 6, 12, 24], 50e6),
    "hvig_base_224": ([128, 256, 512, 1024], [2, 2, 17, 2], [4, 8, 16, 32], 89e6),
}
MAMBA = ["vig_mamba_tiny_patch16_224", "vig_mamba_small_patch16_224"]
ALL = list(VIG) + list(HVIG) + MAMBA


# ------------------------------------------------------------------ the official architecture, independently

def _mixer_shapes(prefix, d, heads):
    kd = d // 2  # expand_k 0.5, expand_v 1
    return {f"{prefix}in_proj.0.weight": (d, 1, 3, 3), f"{prefix}qkv_proj.weight": (2 * kd + d, d),
            f"{prefix}gk_proj.0.weight": (16, d), f"{prefix}gk_proj.1.weight": (2 * kd, 16),
            f"{prefix}gk_proj.1.bias": (2 * kd,), f"{prefix}o_proj.weight": (d, d),
            f"{prefix}g_norm.weight": (d // heads,), f"{prefix}l_norm.weight": (d // heads,),
            f"{prefix}g_proj.weight": (d, d), f"{prefix}g_proj.bias": (d,)}


def official_vig_shapes(d, depth, heads, num_classes=1000, grid=14):
    hidden = 256 * math.ceil(int(d * 4 * 2 / 3) / 256)  # GLAMLP: 2/3 of 4d, multiple of 256
    s = {"patch_embed.proj.0.weight": (d // 2, 3, 9, 9), "patch_embed.proj.0.bias": (d // 2,),
         "patch_embed.proj.1.weight": (d // 2,), "patch_embed.proj.1.bias": (d // 2,),
         "patch_embed.proj.3.weight": (d, d // 2, 3, 3), "patch_embed.proj.3.bias": (d,),
         "patch_embed.proj.4.weight": (d,), "patch_embed.proj.4.bias": (d,),
         "pos_embed": (1, grid * grid, d)}
    for i in range(depth):
        s[f"blocks.{i}.attn_norm.weight"] = (d,)
        s.update(_mixer_shapes(f"blocks.{i}.attn.", d, heads))
        s[f"blocks.{i}.mlp_norm.weight"] = (d,)
        s[f"blocks.{i}.mlp.gate_proj.weight"] = (2 * hidden, d)
        s[f"blocks.{i}.mlp.down_proj.weight"] = (d, hidden)
    s.update({"norm.weight": (d,), "head.weight": (num_classes, d), "head.bias": (num_classes,)})
    return s


def official_hvig_shapes(dims, depths, heads, num_classes=1000, conv_linear=False):
    """``conv_linear``: store the Linear2d layers as (out, in, 1, 1), as a channels-first checkpoint may."""
    d0 = dims[0]
    s = {"patch_embed.0.weight": (d0 // 2, 3, 3, 3), "patch_embed.0.bias": (d0 // 2,),
         "patch_embed.2.weight": (d0 // 2,), "patch_embed.2.bias": (d0 // 2,),
         "patch_embed.5.weight": (d0, d0 // 2, 3, 3), "patch_embed.5.bias": (d0,),
         "patch_embed.7.weight": (d0,), "patch_embed.7.bias": (d0,)}
    for i, (d, depth, h) in enumerate(zip(dims, depths, heads)):
        hidden = 32 * math.ceil(int(d * 4 * 2 / 3) / 32)  # gMlp: 2/3 of 4d, multiple of 32
        for j in range(depth):
            p = f"layers.{i}.blocks.{j}."
            s[p + "norm.weight"], s[p + "norm.bias"] = (d,), (d,)
            s.update(_mixer_shapes(p + "op.", d, h))
            s[p + "norm2.weight"], s[p + "norm2.bias"] = (d,), (d,)
            s[p + "mlp.fc1.weight"], s[p + "mlp.fc2.weight"] = (2 * hidden, d), (d, hidden)
        if i < len(dims) - 1:
            s[f"layers.{i}.downsample.1.weight"] = (dims[i + 1], d, 3, 3)
            s[f"layers.{i}.downsample.1.bias"] = (dims[i + 1],)
            s[f"layers.{i}.downsample.3.weight"] = s[f"layers.{i}.downsample.3.bias"] = (dims[i + 1],)
    s.update({"classifier.norm.weight": (dims[-1],), "classifier.norm.bias": (dims[-1],),
              "classifier.head.weight": (num_classes, dims[-1]), "classifier.head.bias": (num_classes,)})
    if conv_linear:
        for k, shape in s.items():
            if len(shape) == 2 and any(t in k for t in ("qkv_proj", "gk_proj", "g_proj", "mlp.fc")):
                s[k] = shape + (1, 1)
    return s


NORMS = (".norm.", "norm.weight", "norm.bias", "_norm.", "norm2.", "patch_embed.proj.1.", "patch_embed.proj.4.",
         "patch_embed.2.", "patch_embed.7.", "downsample.3.")


def random_state(shapes, seed=0):
    """Random float64 tensors for an official state dict: norm gains near 1, weights scaled by 1/sqrt(fan-in)."""
    gen = torch.Generator().manual_seed(seed)
    sd = {}
    for k, shape in shapes.items():
        t = torch.randn(shape, generator=gen, dtype=torch.float64)
        if any(n in k for n in NORMS) and k.endswith("weight"):
            t = 1 + 0.1 * t
        elif k.endswith("weight") and len(shape) >= 2:
            t = t / math.sqrt(math.prod(shape[1:]))
        else:  # biases, norm shifts, position embedding
            t = 0.1 * t
        sd[k] = t
    return sd


def _rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _ln2d(x, w, b, eps=1e-5):
    return F.layer_norm(x.permute(0, 2, 3, 1), x.shape[1:2], w, b, eps).permute(0, 3, 1, 2)


def _official_mixer(sd, p, x2d, heads, conv_act, out_act):
    """GatedLinearAttention / GLA2D (training path): x2d (B, C, H, W) -> (B, L, C)."""
    B, C, H, W = x2d.shape
    local = F.conv2d(x2d, sd[p + "in_proj.0.weight"], padding=1, groups=C)
    local = F.silu(local) if conv_act else local
    xs = local.flatten(2).transpose(1, 2)  # (B, L, C)
    L, kd = H * W, C // 2
    q, k, v = torch.split(xs @ sd[p + "qkv_proj.weight"].reshape(2 * kd + C, C).T, [kd, kd, C], dim=-1)
    gk = (xs @ sd[p + "gk_proj.0.weight"].reshape(16, C).T) @ sd[p + "gk_proj.1.weight"].reshape(2 * kd, 16).T \
        + sd[p + "gk_proj.1.bias"]
    fw, bw = (F.logsigmoid(t) / 16 for t in gk.chunk(2, dim=-1))
    r = lambda t: t.reshape(B, L, heads, -1)  # noqa: E731
    # the official code stacks [x, flip(x)] on the batch axis, runs one forward scan, flips back, averages
    o = 0.5 * (naive_recurrent_gla(r(q), r(k), r(v), r(fw)) + naive_recurrent_gla(r(q), r(k), r(v), r(bw), reverse=True))
    o = _rms(o, sd[p + "g_norm.weight"])
    loc = _rms(r(xs), sd[p + "l_norm.weight"])
    g = torch.sigmoid(xs @ sd[p + "g_proj.weight"].reshape(C, C).T + sd[p + "g_proj.bias"])
    o = (o * r(g) + loc * (1 - r(g))).reshape(B, L, C)
    o = F.silu(o) if out_act else o
    return o @ sd[p + "o_proj.weight"].T


def official_vig_forward(sd, x, depth, heads, conv_act, out_act):
    y = F.conv2d(x, sd["patch_embed.proj.0.weight"], sd["patch_embed.proj.0.bias"], stride=8, padding=1)
    y = F.silu(_ln2d(y, sd["patch_embed.proj.1.weight"], sd["patch_embed.proj.1.bias"]))
    y = F.conv2d(y, sd["patch_embed.proj.3.weight"], sd["patch_embed.proj.3.bias"], stride=2, padding=1)
    y = _ln2d(y, sd["patch_embed.proj.4.weight"], sd["patch_embed.proj.4.bias"])
    B, C, H, W = y.shape
    t = y.flatten(2).transpose(1, 2) + sd["pos_embed"]
    for i in range(depth):
        z = _rms(t, sd[f"blocks.{i}.attn_norm.weight"])
        t = t + _official_mixer(sd, f"blocks.{i}.attn.", z.transpose(1, 2).reshape(B, C, H, W), heads, conv_act, out_act)
        z = _rms(t, sd[f"blocks.{i}.mlp_norm.weight"])
        gate, val = (z @ sd[f"blocks.{i}.mlp.gate_proj.weight"].T).chunk(2, dim=-1)
        t = t + (F.silu(gate) * val) @ sd[f"blocks.{i}.mlp.down_proj.weight"].T
    t = _rms(t, sd["norm.weight"])
    return t.mean(1) @ sd["head.weight"].T + sd["head.bias"]


def official_hvig_forward(sd, x, dims, depths, heads):
    y = F.conv2d(x, sd["patch_embed.0.weight"], sd["patch_embed.0.bias"], stride=2, padding=1)
    y = F.gelu(_ln2d(y, sd["patch_embed.2.weight"], sd["patch_embed.2.bias"]))
    y = F.conv2d(y, sd["patch_embed.5.weight"], sd["patch_embed.5.bias"], stride=2, padding=1)
    y = _ln2d(y, sd["patch_embed.7.weight"], sd["patch_embed.7.bias"])
    for i, (d, depth, h) in enumerate(zip(dims, depths, heads)):
        for j in range(depth):
            p = f"layers.{i}.blocks.{j}."
            B, C, H, W = y.shape
            o = _official_mixer(sd, p + "op.", _ln2d(y, sd[p + "norm.weight"], sd[p + "norm.bias"]), h, False, False)
            y = y + o.transpose(1, 2).reshape(B, C, H, W)
            z = _ln2d(y, sd[p + "norm2.weight"], sd[p + "norm2.bias"])
            w1 = sd[p + "mlp.fc1.weight"]
            gate, val = F.conv2d(z, w1.reshape(w1.shape[0], -1, 1, 1)).chunk(2, dim=1)
            w2 = sd[p + "mlp.fc2.weight"]
            y = y + F.conv2d(F.silu(gate) * val, w2.reshape(w2.shape[0], -1, 1, 1))
        if i < len(dims) - 1:  # downsampling closes stage i in the official layout
            y = F.conv2d(y, sd[f"layers.{i}.downsample.1.weight"], sd[f"layers.{i}.downsample.1.bias"], stride=2, padding=1)
            y = _ln2d(y, sd[f"layers.{i}.downsample.3.weight"], sd[f"layers.{i}.downsample.3.bias"])
    y = _ln2d(y, sd["classifier.norm.weight"], sd["classifier.norm.bias"])
    return y.mean((2, 3)) @ sd["classifier.head.weight"].T + sd["classifier.head.bias"]


def n_params(model):
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(autouse=True)
def one_thread():
    """Many small ops: on a shared 2-core machine one thread is faster and steadier."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ------------------------------------------------------------------ sizes

@pytest.mark.parametrize("name", ALL)
def test_parameter_counts_match_official_and_published(name):
    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False)
    count = n_params(model)
    if name in VIG:
        d, depth, heads, _, _, published = VIG[name]
        official = sum(math.prod(s) for s in official_vig_shapes(d, depth, heads).values())
    elif name in HVIG:
        dims, depths, heads, published = HVIG[name]
        official = sum(math.prod(s) for s in official_hvig_shapes(dims, depths, heads).values())
    else:  # ours, no published size: ViG with per-head dt / A instead of the rank-16 per-channel gate projection
        d, depth, heads = VIG[name.replace("_mamba", "")][:3]
        published = sum(math.prod(s) for s in official_vig_shapes(d, depth, heads).values())  # its ViG twin
        gla_gate, scalar_gate = 16 * d + 16 * d + d, d * 2 * heads + 2 * heads + 2 * heads
        official = published + depth * (scalar_gate - gla_gate)
    assert count == official
    assert abs(count / published - 1) <= 0.03, f"{name}: {count / 1e6:.2f}M vs published {published / 1e6:.0f}M"


# ------------------------------------------------------------------ running

@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_every_model_runs_at_224_and_non_square(name):
    model = timm.create_model(name, pretrained=False).eval()
    with torch.inference_mode():
        for h, w in ((224, 224), (96, 160)):  # multiples of 32 (H-ViG) and of 16 (ViG)
            out = model(torch.randn(1, 3, h, w))
            assert out.shape == (1, 1000) and torch.isfinite(out).all()
    if isinstance(model, ViG):  # ViG: any multiple of 16
        with torch.inference_mode():
            assert model.forward_features(torch.randn(1, 3, 48, 112)).shape == (1, 3 * 7, model.embed_dim)


def test_features_only_strides_and_channels():
    x = torch.randn(1, 3, 96, 160)
    vig = timm.create_model("vig_tiny_patch16_224", features_only=True).eval()
    hvig = timm.create_model("hvig_tiny_224", features_only=True).eval()
    with torch.inference_mode():
        fv, fh = vig(x), hvig(x)
    assert vig.feature_info.reduction() == [16] * 4 and vig.feature_info.channels() == [192] * 4
    assert [t.shape for t in fv] == [(1, 192, 6, 10)] * 4
    assert hvig.feature_info.reduction() == [4, 8, 16, 32]
    assert hvig.feature_info.channels() == [96, 192, 384, 768]
    assert [tuple(t.shape) for t in fh] == [(1, 96, 24, 40), (1, 192, 12, 20), (1, 384, 6, 10), (1, 768, 3, 5)]
    # chosen blocks of the isotropic model, and the Mamba-style one
    some = timm.create_model("vig_mamba_tiny_patch16_224", features_only=True, out_indices=(3, 11)).eval()
    with torch.inference_mode():
        assert [t.shape for t in some(x)] == [(1, 192, 6, 10)] * 2


def test_forward_intermediates_agree_with_forward_features():
    x = torch.randn(2, 3, 64, 96)
    for name in ("vig_tiny_patch16_224", "hvig_tiny_224"):
        model = timm.create_model(name, pretrained=False).eval()
        with torch.inference_mode():
            final, inter = model.forward_intermediates(x)
            torch.testing.assert_close(final, model.forward_features(x))
            last = model.forward_intermediates(x, indices=1, intermediates_only=True)
        if isinstance(model, ViG):
            assert len(inter) == 12 and inter[-1].shape == (2, 192, 4, 6)
            with torch.inference_mode():
                nlc = model.forward_intermediates(x, indices=[0, 11], norm=True, output_fmt="NLC", intermediates_only=True)
            torch.testing.assert_close(nlc[1], final)
            torch.testing.assert_close(last[0].flatten(2).transpose(1, 2), inter[-1].flatten(2).transpose(1, 2))
        else:
            assert [t.shape[1] for t in inter] == [96, 192, 384, 768] and len(last) == 1
            torch.testing.assert_close(last[0], inter[-1])


def test_timm_api():
    assert {"vig_tiny_patch16_224", "hvig_base_224", "vig_mamba_small_patch16_224"} <= set(timm.list_models("*vig*"))
    model = timm.create_model("vig_tiny_patch16_224", pretrained=False, num_classes=10)
    cfg = model.pretrained_cfg
    assert cfg["input_size"] == (3, 224, 224) and cfg["license"] == "mit" and len(cfg["mean"]) == 3
    assert "pos_embed" in model.no_weight_decay()
    assert "A_log" in " ".join(timm.create_model("vig_mamba_tiny_patch16_224").no_weight_decay())
    x = torch.randn(2, 3, 64, 64)
    assert model(x).shape == (2, 10)
    model.reset_classifier(5)
    assert model(x).shape == (2, 5)
    model.reset_classifier(0)
    assert model(x).shape == (2, 192)
    hv = timm.create_model("hvig_tiny_224", pretrained=False, num_classes=0)
    assert hv(x).shape == (2, 768) and hv.forward_features(x).shape == (2, 768, 2, 2)
    hv.reset_classifier(7)
    assert hv(x).shape == (2, 7) and hv.get_classifier().out_features == 7


@pytest.mark.parametrize("name", ["vig_tiny_patch16_224", "hvig_tiny_224", "vig_mamba_tiny_patch16_224"])
def test_grad_checkpointing_gives_the_same_gradients(name):
    kw = dict(depth=2) if "hvig" not in name else dict(depths=(1, 1, 1, 1))
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=3, **kw).train()
    x = torch.randn(2, 3, 64, 64)

    def grads():
        model.zero_grad()
        model(x).square().sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    plain = grads()
    model.set_grad_checkpointing(True)
    ckpt = grads()
    for n in plain:
        torch.testing.assert_close(ckpt[n], plain[n], rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------ official checkpoints

@pytest.mark.parametrize("variant", ["vig_tiny_patch16_224", "vig_small_patch16_224"])
def test_official_vig_state_dict_loads_and_computes_the_official_logits(variant):
    d, depth, heads, conv_act, out_act, _ = VIG[variant]
    d, depth, heads = 32, 2, 2  # the variant's switches at a test size
    sd = random_state(official_vig_shapes(d, depth, heads, num_classes=7, grid=4), seed=1)
    model = timm.create_model(variant, pretrained=False, embed_dim=d, depth=depth, num_heads=heads,
                              num_classes=7, img_size=64).double().eval()
    wrapped = {"model": {"module." + k: v for k, v in sd.items()}}  # a DDP training checkpoint
    missing, unexpected = model.load_state_dict(checkpoint_filter_fn(wrapped, model), strict=True)
    assert not missing and not unexpected
    x = torch.randn(2, 3, 64, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(model(x), official_vig_forward(sd, x, depth, heads, conv_act, out_act),
                                   rtol=1e-9, atol=1e-9)
    # a model built for another size gets the position embedding resized
    big = timm.create_model(variant, pretrained=False, embed_dim=d, depth=depth, num_heads=heads,
                            num_classes=7, img_size=96).double()
    big.load_state_dict(checkpoint_filter_fn(sd, big), strict=True)
    assert big.pos_embed.shape == (1, 36, d)


@pytest.mark.parametrize("conv_linear", [False, True])
def test_official_hvig_state_dict_loads_and_computes_the_official_logits(conv_linear):
    dims, depths, heads = [16, 32, 64, 128], [1, 2, 1, 1], [1, 2, 2, 4]
    shapes = official_hvig_shapes(dims, depths, heads, num_classes=5, conv_linear=conv_linear)
    sd = random_state(shapes, seed=2)
    sd["outnorm0.weight"] = torch.ones(dims[0], dtype=torch.float64)  # detection backbone extra, dropped
    model = timm.create_model("hvig_tiny_224", pretrained=False, dims=dims, depths=depths, num_heads=heads,
                              num_classes=5).double().eval()
    missing, unexpected = model.load_state_dict(checkpoint_filter_fn(sd, model), strict=True)
    assert not missing and not unexpected
    # the downsampling that closes official stage i opens our stage i + 1
    torch.testing.assert_close(model.stages[1].downsample.conv.weight, sd["layers.0.downsample.1.weight"])
    x = torch.randn(2, 3, 64, 96, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    ref_sd = {k: (v.reshape(v.shape[0], v.shape[1]) if v.dim() == 4 and v.shape[-1] == 1 and v.shape[-2] == 1 else v)
              for k, v in sd.items()}
    with torch.no_grad():
        torch.testing.assert_close(model(x), official_hvig_forward(ref_sd, x, dims, depths, heads), rtol=1e-9, atol=1e-9)


def test_mamba_style_mixer_matches_its_definition():
    """The scalar-gate mixer: log a = -exp(A_log) * softplus(dt), inputs scaled by each direction's dt,
    recomputed here with the naive recurrence."""
    from vision.backbones import GatedLinearAttention2D

    torch.manual_seed(0)
    mixer = GatedLinearAttention2D(16, 2, gate="scalar", conv_act=True, out_act=True).double()
    x = torch.randn(2, 5, 7, 16, dtype=torch.float64)
    B, H, W, C = x.shape
    xs = F.silu(F.conv2d(x.permute(0, 3, 1, 2), mixer.dwconv.weight, padding=1, groups=C)).flatten(2).transpose(1, 2)
    q, k, v = torch.split(xs @ mixer.qkv.weight.T, [8, 8, 16], dim=-1)
    r = lambda t: t.reshape(B, H * W, 2, -1)  # noqa: E731
    dt = F.softplus(xs @ mixer.dt_proj.weight.T + mixer.dt_proj.bias)  # (B, L, 4): [forward heads | backward heads]
    a = -mixer.A_log.exp()
    g_f, g_b = (dt * a)[..., :2], (dt * a)[..., 2:]
    o = 0.5 * (naive_recurrent_gla(r(q), r(k) * dt[..., :2, None], r(v), g_f)
               + naive_recurrent_gla(r(q), r(k) * dt[..., 2:, None], r(v), g_b, reverse=True))
    o = _rms(o, mixer.global_norm.weight)
    loc = _rms(r(xs), mixer.local_norm.weight)
    blend = torch.sigmoid(r(xs @ mixer.out_gate.weight.T + mixer.out_gate.bias))
    ref = F.silu((loc + blend * (o - loc)).reshape(B, H * W, C)) @ mixer.proj.weight.T
    with torch.no_grad():
        torch.testing.assert_close(mixer(x).reshape(B, H * W, C), ref, rtol=1e-10, atol=1e-12)
    ref.sum().backward()  # and the autograd path agrees with the inference path
    out = mixer(x)
    torch.testing.assert_close(out.reshape(B, H * W, C), ref.detach(), rtol=1e-10, atol=1e-12)


def test_bfloat16_model_runs_close_to_float32():
    model = timm.create_model("vig_tiny_patch16_224", pretrained=False, depth=2).eval()
    x = torch.randn(2, 3, 64, 96)
    with torch.inference_mode():
        ref = model(x)
        out = model.to(torch.bfloat16)(x.bfloat16())
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), ref, rtol=0.1, atol=0.1 * ref.abs().max().item())


def test_our_own_state_dict_passes_the_filter_unchanged():
    for name in ("vig_tiny_patch16_224", "hvig_tiny_224", "vig_mamba_tiny_patch16_224"):
        kw = dict(depth=2) if "hvig" not in name else dict(depths=(1, 1, 1, 1))
        model = timm.create_model(name, pretrained=False, **kw)
        sd = model.state_dict()
        out = checkpoint_filter_fn(sd, model)
        assert out.keys() == sd.keys() and all(out[k] is sd[k] for k in sd)


@pytest.mark.parametrize("fmt", ["safetensors", "official-pth"])
def test_local_weights_load_through_pretrained_cfg_overlay(tmp_path, fmt):
    kw = dict(embed_dim=32, depth=2, num_heads=2, num_classes=7, img_size=64)
    if fmt == "safetensors":
        from safetensors.torch import save_file

        src = timm.create_model("vig_small_patch16_224", pretrained=False, **kw)
        expected = src.state_dict()
        path = tmp_path / "vig.safetensors"
        save_file({k: v.contiguous() for k, v in expected.items()}, str(path))
    else:
        official = {k: v.float() for k, v in random_state(official_vig_shapes(32, 2, 2, num_classes=7, grid=4)).items()}
        path = tmp_path / "vig_official.pth"
        torch.save({"model": official, "epoch": 299}, path)
        probe = timm.create_model("vig_small_patch16_224", pretrained=False, **kw)
        expected = checkpoint_filter_fn(official, probe)
    model = timm.create_model("vig_small_patch16_224", pretrained=True, **kw,
                              pretrained_cfg_overlay=dict(file=str(path), num_classes=7))
    got = model.state_dict()
    assert got.keys() == expected.keys()
    for k in expected:
        torch.testing.assert_close(got[k], expected[k].to(got[k].dtype), rtol=0, atol=0)


# ------------------------------------------------------------------ it learns

def render_shapes(n, size=64, seed=0):
    """Four classes (disc, square, triangle, cross) at random position, size and colours, with noise."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 4, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32),
                            indexing="ij")
    r = torch.empty(n).uniform_(size * 0.2, size * 0.35, generator=g)
    cx = torch.rand(n, generator=g) * (size - 2 * r) + r
    cy = torch.rand(n, generator=g) * (size - 2 * r) + r
    dx = (xx[None] - cx[:, None, None]) / r[:, None, None]
    dy = (yy[None] - cy[:, None, None]) / r[:, None, None]
    masks = torch.stack([
        dx ** 2 + dy ** 2 <= 1,
        (dx.abs() <= 0.8) & (dy.abs() <= 0.8),
        (dy <= 0.8) & (dy >= -1 + 2 * dx.abs()),
        ((dx.abs() <= 0.3) | (dy.abs() <= 0.3)) & (dx.abs() <= 1) & (dy.abs() <= 1),
    ], 1)[torch.arange(n), labels].float()
    fg = torch.rand(n, 3, 1, 1, generator=g) * 0.5 + 0.5
    bg = torch.rand(n, 3, 1, 1, generator=g) * 0.5
    img = bg + (fg - bg) * masks[:, None] + 0.05 * torch.randn(n, 3, size, size, generator=g)
    return (img - 0.5) / 0.25, labels


@pytest.mark.slow
def test_tiny_vig_learns_rendered_shapes():
    """A 2-block, 64-wide ViG (165k parameters) on 1024 rendered 64x64 images of four shapes, 8 epochs
    of AdamW on CPU: validation accuracy on 256 held-out images goes from chance (0.25) to >= 0.9
    (0.98 when written)."""
    torch.manual_seed(0)
    xtr, ytr = render_shapes(1024, seed=1)
    xva, yva = render_shapes(256, seed=2)
    model = timm.create_model("vig_tiny_patch16_224", pretrained=False, embed_dim=64, depth=2, num_heads=2,
                              num_classes=4, img_size=64)
    epochs, bs, lr = 8, 32, 4e-3
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=epochs * (len(xtr) // bs), pct_start=0.15)

    def accuracy():
        model.eval()
        with torch.no_grad():
            acc = (model(xva).argmax(1) == yva).float().mean().item()
        model.train()
        return acc

    start, t0 = accuracy(), time.perf_counter()
    for epoch in range(epochs):
        perm = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(epoch))
        for i in range(0, len(xtr) - bs + 1, bs):
            idx = perm[i:i + bs]
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    acc = accuracy()
    print(f"validation accuracy {start:.3f} -> {acc:.3f} in {time.perf_counter() - t0:.1f} s")
    assert start < 0.4
    assert acc >= 0.9


# ------------------------------------------------------------------ memory at 1024^2 (CPU)

@pytest.mark.slow
def test_vig_tiny_uses_less_memory_than_deit_tiny_at_1024():
    """Peak tensor memory of one inference forward at 1024x1024 (batch 1, random weights), timm's DeiT-T as
    shipped (fused scaled-dot-product attention, itself linear in memory on CPU)."""
    x = torch.randn(1, 3, 1024, 1024)
    peaks = {}
    for name in ("vig_tiny_patch16_224", "deit_tiny_patch16_224"):
        model = timm.create_model(name, pretrained=False, img_size=1024).eval()
        with torch.inference_mode():
            peaks[name] = peak_memory(lambda: model(x), "cpu")
    print({k: f"{v / 2 ** 20:.1f} MB" for k, v in peaks.items()})
    assert peaks["vig_tiny_patch16_224"] < peaks["deit_tiny_patch16_224"]


def test_bad_configurations_raise_value_error():
    with pytest.raises(ValueError, match="patch_size"):
        ViG(patch_size=8)
    with pytest.raises(ValueError, match="divisible"):
        ViG(embed_dim=100, num_heads=3)
    with pytest.raises(ValueError, match="one entry per stage"):
        HierViG(dims=[16, 32], depths=(1, 1, 1), num_heads=(1, 1))
    with pytest.raises(ValueError, match="gate"):
        ViG(gate="matrix")
