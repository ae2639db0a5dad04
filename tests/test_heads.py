"""Dense-prediction heads: the token-local head's unpatchify order against an explicit loop, parameter counts,
the local-linear readout against a per-pixel float64 computation, guided refinement against a float64 NumPy
guided filter, and every head on features of ViG, H-ViG (stride-16 stage) and a timm ViT."""
import numpy as np
import pytest
import timm
import torch

import vision  # noqa: F401  registers the ViG family into timm
from vision.heads import HEADS, DPTHead, LocalLinearReadout, TokenLocalHead, guided_refine, head_parameter_count
from vision.heads.refine import GuidedRefine


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


# ------------------------------------------------------------------------------------------- token-local

def test_unpatchify_order_matches_explicit_loop():
    torch.manual_seed(0)
    B, C, p, K, h, w = 2, 5, 3, 2, 2, 3
    head = TokenLocalHead(C, p, K).double()
    tokens = torch.randn(B, h * w, C, dtype=torch.float64)
    out = head(tokens, grid_size=(h, w))
    assert out.shape == (B, K, h * p, w * p)
    W, bias = head.proj.weight, head.proj.bias
    want = torch.empty_like(out)
    for b in range(B):
        for y in range(h):
            for x in range(w):
                vec = W @ tokens[b, y * w + x] + bias
                for i in range(p):
                    for j in range(p):
                        for k in range(K):
                            want[b, k, y * p + i, x * p + j] = vec[(i * p + j) * K + k]
    torch.testing.assert_close(out, want, rtol=0, atol=1e-12)
    fmap = tokens.transpose(1, 2).reshape(B, C, h, w)  # row-major tokens == the (B, C, h, w) map
    torch.testing.assert_close(head(fmap), out, rtol=0, atol=0)


@pytest.mark.parametrize("dim,p,K", [(192, 16, 1), (384, 16, 3), (7, 4, 2)])
def test_token_local_parameter_count_is_exact(dim, p, K):
    assert head_parameter_count(TokenLocalHead(dim, p, K)) == dim * p * p * K + p * p * K
    assert head_parameter_count(TokenLocalHead(dim, p, K, bias=False)) == dim * p * p * K
    assert head_parameter_count(TokenLocalHead(192, 16, 1)) == 49_408  # the "about 33K" is at dim 128


def test_parameter_count_counts_trainable_only():
    head = LocalLinearReadout(16, 4, 1)
    head.detail.requires_grad_(False)
    assert head_parameter_count(head) == 16 * 4 + 4


def test_heads_registry():
    assert HEADS == {"token-local": TokenLocalHead, "local-linear": LocalLinearReadout, "dpt": DPTHead}


def test_token_local_shape_errors():
    head = TokenLocalHead(8, 4, 1)
    with pytest.raises(ValueError, match="grid_size"):
        head(torch.rand(1, 6, 8))
    with pytest.raises(ValueError, match="h \\* w"):
        head(torch.rand(1, 6, 8), grid_size=(2, 2))
    with pytest.raises(ValueError, match="dim=8"):
        head(torch.rand(1, 6, 9), grid_size=(2, 3))
    with pytest.raises(ValueError, match="dim=8"):
        head(torch.rand(1, 9, 2, 3))
    with pytest.raises(ValueError, match="does not match"):
        head(torch.rand(1, 8, 2, 3), grid_size=(3, 2))
    with pytest.raises(ValueError, match="tokens or"):
        head(torch.rand(8, 2))
    with pytest.raises(ValueError, match="positive integer"):
        TokenLocalHead(8, 0, 1)


# ------------------------------------------------------------------------------------------- local-linear readout

def _standardised(image: np.ndarray) -> np.ndarray:
    mean = image.mean(axis=(2, 3), keepdims=True)
    var = ((image - mean) ** 2).mean(axis=(2, 3), keepdims=True)
    return (image - mean) / np.sqrt(var + 1e-4)


def _learned_guide(head: LocalLinearReadout, guide: np.ndarray) -> np.ndarray:
    """The _GuideNet by hand: 3 x 3 convolution (zero padding) -> GELU (erf) -> 3 x 3 convolution -> tanh."""
    from math import erf

    def conv3(x, w, b):
        B, _, H, W = x.shape
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((B, w.shape[0], H, W)) + b[None, :, None, None]
        for dy in range(3):
            for dx in range(3):
                out += np.einsum("oc,bchw->bohw", w[:, :, dy, dx], xp[:, :, dy:dy + H, dx:dx + W])
        return out

    c1, c2 = head.guide_net.net[0], head.guide_net.net[2]
    hid = conv3(guide, c1.weight.detach().numpy(), c1.bias.detach().numpy())
    hid = 0.5 * hid * (1 + np.vectorize(erf)(hid / np.sqrt(2)))
    return np.tanh(conv3(hid, c2.weight.detach().numpy(), c2.bias.detach().numpy()))


def _readout_by_pixel(head: LocalLinearReadout, tokens: np.ndarray, image: np.ndarray) -> np.ndarray:
    """Per pixel: bilinear blend (weights from the pixel's position between cell centres, clamped at the
    outer centres) of the four nearest cells' affine maps, applied to the standardised guide pixel (plus the
    learned guide channels), plus the token-local detail term. A token owns c x c cells of its patch
    (c = ``cells``), cell (i, j) being linear outputs ``((i*c + j)*K + k)*(G+1) + g``."""
    B, h, w, _ = tokens.shape
    p, K, c = head.patch_size, head.out_channels, head.cells
    G = head.guide_channels + head.learned_guides
    q = p // c
    Wc, bc = head.coeffs.weight.detach().numpy(), head.coeffs.bias.detach().numpy()
    per_token = (tokens @ Wc.T + bc).reshape(B, h, w, c, c, K, G + 1)
    coef = np.zeros((B, h * c, w * c, K, G + 1))
    for i in range(h * c):
        for j in range(w * c):
            coef[:, i, j] = per_token[:, i // c, j // c, i % c, j % c]
    guide = _standardised(image)
    if head.learned_guides:
        guide = np.concatenate([guide, _learned_guide(head, guide)], 1)
    Wd, bd = head.detail.proj.weight.detach().numpy(), head.detail.proj.bias.detach().numpy()
    out = np.zeros((B, K, h * p, w * p))
    for b in range(B):
        for Y in range(h * p):
            u = min(max((Y + 0.5) / q - 0.5, 0.0), h * c - 1)
            y0 = int(np.floor(u))
            y1, wy = min(y0 + 1, h * c - 1), u - y0
            for X in range(w * p):
                v = min(max((X + 0.5) / q - 0.5, 0.0), w * c - 1)
                x0 = int(np.floor(v))
                x1, wx = min(x0 + 1, w * c - 1), v - x0
                cf = ((1 - wy) * (1 - wx) * coef[b, y0, x0] + (1 - wy) * wx * coef[b, y0, x1]
                      + wy * (1 - wx) * coef[b, y1, x0] + wy * wx * coef[b, y1, x1])
                detail = Wd @ tokens[b, Y // p, X // p] + bd
                for k in range(K):
                    out[b, k, Y, X] = (cf[k, :G] @ guide[b, :, Y, X] + cf[k, G]
                                       + detail[((Y % p) * p + X % p) * K + k])
    return out


@pytest.mark.parametrize("K,cells,learned", [(2, 1, 0), (5, 1, 0), (2, 2, 0), (1, 4, 2)])
def test_local_linear_readout_matches_per_pixel_float64(K, cells, learned):
    """K = 5 crosses local_linear_apply's 4-channel chunk; cells > 1 puts c x c coefficient cells in a patch."""
    torch.manual_seed(1)
    B, C, p, G, h, w = 2, 6, 4, 3, 2, 3
    head = LocalLinearReadout(C, p, K, guide_channels=G, cells=cells, learned_guides=learned).double()
    with torch.no_grad():
        for prm in head.parameters():  # hand-set weights: large slopes, so the guide matters
            prm.copy_(torch.randn_like(prm))
    tokens = torch.randn(B, h, w, C, dtype=torch.float64)
    image = torch.rand(B, G, h * p, w * p, dtype=torch.float64)
    got = head(tokens.reshape(B, h * w, C), image, grid_size=(h, w))
    want = _readout_by_pixel(head, tokens.numpy(), image.numpy())
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=0, atol=1e-10)
    # the (B, C, h, w) map gives the same
    torch.testing.assert_close(head(tokens.permute(0, 3, 1, 2), image), got, rtol=0, atol=1e-12)


def test_local_linear_readout_parameter_count_and_superset():
    dim, p, K, G = 192, 16, 1, 3
    want = dim * K * (G + 1) + K * (G + 1) + dim * p * p * K + p * p * K
    assert head_parameter_count(LocalLinearReadout(dim, p, K)) == want
    assert head_parameter_count(LocalLinearReadout(dim, p, K)) == 50_180
    assert head_parameter_count(LocalLinearReadout(dim, p, 2, detail=False)) == dim * 2 * 4 + 2 * 4
    no_bias = LocalLinearReadout(dim, p, 2, guide_channels=1, bias=False)
    assert head_parameter_count(no_bias) == dim * 2 * 2 + dim * p * p * 2
    # zero coefficients: exactly the plain token-local head it contains
    torch.manual_seed(0)
    head = LocalLinearReadout(8, 4, 2)
    with torch.no_grad():
        head.coeffs.weight.zero_()
        head.coeffs.bias.zero_()
    x, img = torch.randn(1, 8, 3, 2), torch.rand(1, 3, 12, 8)
    torch.testing.assert_close(head(x, img), head.detail(x), rtol=0, atol=1e-6)
    # cells and learned guides: c*c*K*(G+L+1) coefficients per token, plus the guide net's two convolutions
    big = LocalLinearReadout(dim, p, K, cells=4, learned_guides=2)
    width = 16  # the guide net's hidden width
    want_guides = (G * 9 + 1) * width + (width * 9 + 1) * 2
    assert head_parameter_count(big) == 16 * K * 6 * (dim + 1) + dim * p * p * K + p * p * K + want_guides


def test_local_linear_readout_init_has_small_slopes():
    torch.manual_seed(0)
    head = LocalLinearReadout(64, 8, 2, detail=False)
    x, img = torch.randn(4, 64, 4, 4), torch.rand(4, 3, 32, 32)
    with torch.no_grad():
        c = head.coefficient_grid(x)
    slopes, intercept = c[:, :, :3], c[:, :, 3]
    assert float(slopes.std()) < 0.2 * float(intercept.std())
    # the output stays close to the bilinearly blended intercepts (the slopes see a unit-variance guide)
    blended = torch.nn.functional.interpolate(intercept, size=(32, 32), mode="bilinear", align_corners=False)
    with torch.no_grad():
        out = head(x, img)
    assert float((out - blended).pow(2).mean()) < 0.1 * float(blended.pow(2).mean())


def test_local_linear_readout_shape_errors():
    head = LocalLinearReadout(8, 4, 1)
    x = torch.rand(1, 8, 2, 3)
    with pytest.raises(ValueError, match="does not fit"):
        head(x, torch.rand(1, 3, 8, 8))
    with pytest.raises(ValueError, match="does not fit"):
        head(x, torch.rand(1, 1, 8, 12))
    with pytest.raises(ValueError, match="does not fit"):
        head(x, torch.rand(2, 3, 8, 12))
    with pytest.raises(ValueError, match="image must be"):
        head(x, torch.rand(3, 8, 12))
    with pytest.raises(ValueError, match="at most 8"):
        LocalLinearReadout(8, 4, 1, guide_channels=9)
    with pytest.raises(ValueError, match="at most 8"):
        LocalLinearReadout(8, 4, 1, learned_guides=6)
    with pytest.raises(ValueError, match="must divide patch_size"):
        LocalLinearReadout(8, 16, 1, cells=3)
    with pytest.raises(ValueError, match="cells must be a positive integer"):
        LocalLinearReadout(8, 16, 1, cells=0)
    with pytest.raises(ValueError, match="learned_guides must be a non-negative integer"):
        LocalLinearReadout(8, 16, 1, learned_guides=-1)


# ------------------------------------------------------------------------------------------- guided refine

def _box_mean(x: np.ndarray, r: int) -> np.ndarray:
    """Mean over the in-image pixels of each (2r+1)^2 window (the "valid" border), by direct sums."""
    h, w = x.shape[-2:]
    out = np.empty_like(x)
    for i in range(h):
        for j in range(w):
            out[..., i, j] = x[..., max(i - r, 0):i + r + 1, max(j - r, 0):j + r + 1].mean(axis=(-2, -1))
    return out


def _guided_gray(I, p, r, eps):
    mI, mp = _box_mean(I, r), _box_mean(p, r)
    a = (_box_mean(I * p, r) - mI * mp) / (_box_mean(I * I, r) - mI * mI + eps)
    return _box_mean(a, r) * I + _box_mean(mp - a * mI, r)


def _guided_colour(I, p, r, eps):
    mI, mp = _box_mean(I, r), _box_mean(p, r)
    sigma = np.empty(p.shape + (3, 3))
    cov = np.empty(p.shape + (3,))
    for i in range(3):
        cov[..., i] = _box_mean(I[i] * p, r) - mI[i] * mp
        for j in range(3):
            sigma[..., i, j] = _box_mean(I[i] * I[j], r) - mI[i] * mI[j] + (eps if i == j else 0)
    a = np.linalg.solve(sigma, cov[..., None])[..., 0]
    b = mp - (a * np.moveaxis(mI, 0, -1)).sum(-1)
    return sum(_box_mean(a[..., c], r) * I[c] for c in range(3)) + _box_mean(b, r)


@pytest.mark.parametrize("guide_channels", [3, 1, 4])
def test_guided_refine_matches_float64_guided_filter(rng, guide_channels):
    r, eps = 3, 1e-2
    image = rng.random((2, guide_channels, 14, 17))
    pred = rng.standard_normal((2, 2, 14, 17))
    got = guided_refine(torch.from_numpy(image), torch.from_numpy(pred), radius=r, eps=eps).numpy()
    for b in range(2):
        for k in range(2):
            if guide_channels == 3:
                want = _guided_colour(image[b], pred[b, k], r, eps)
            else:  # gray guide; other channel counts are averaged to gray
                want = _guided_gray(image[b].mean(0), pred[b, k], r, eps)
            np.testing.assert_allclose(got[b, k], want, rtol=0, atol=1e-8)  # corner 3x3 solves: cond ~1e6
    module = GuidedRefine(radius=r, eps=eps)
    np.testing.assert_allclose(module(torch.from_numpy(image), torch.from_numpy(pred)).numpy(), got, rtol=0, atol=0)


def test_guided_refine_float32_many_channels_and_errors():
    torch.manual_seed(0)
    img, pred = torch.rand(1, 3, 32, 32), torch.randn(1, 12, 32, 32)
    out = guided_refine(img, pred, radius=4, eps=1e-3)
    assert out.shape == pred.shape and out.dtype == torch.float32
    ref = guided_refine(img.double(), pred.double(), radius=4, eps=1e-3)
    assert float((out.double() - ref).abs().max()) < 1e-4
    with pytest.raises(ValueError, match="share"):
        guided_refine(img, torch.rand(1, 1, 16, 16))
    with pytest.raises(ValueError, match="B, C, H, W"):
        guided_refine(img, torch.rand(16, 16))


# ------------------------------------------------------------------------------------------- on real backbones

@pytest.fixture(scope="module")
def backbone_features():
    """Four feature maps and image size from ViG-T (64x64), H-ViG-T (its stride-16 stage, and all four
    stages) and a 4-block ViT-T (64x64): random weights, nothing downloaded."""
    torch.manual_seed(0)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    image = torch.rand(2, 3, 64, 64)
    out = {}
    with torch.no_grad():
        vig = timm.create_model("vig_tiny_patch16_224", pretrained=False, features_only=True, img_size=64).eval()
        out["vig"] = ([f.clone() for f in vig(image)], vig.feature_info.reduction())
        hvig = timm.create_model("hvig_tiny_224", pretrained=False, features_only=True).eval()
        out["hvig"] = ([f.clone() for f in hvig(image)], hvig.feature_info.reduction())
        vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64, depth=4, features_only=True,
                                out_indices=(0, 1, 2, 3)).eval()
        out["vit"] = ([f.clone() for f in vit(image)], vit.feature_info.reduction())
    torch.set_num_threads(n)
    return image, out


@pytest.mark.parametrize("name", ["vig", "hvig", "vit"])
def test_heads_on_backbone_features_with_gradients(backbone_features, name):
    image, feats = backbone_features
    maps, strides = feats[name]
    stage = strides.index(16)  # H-ViG: its stride-16 stage; ViG / ViT: every map is at stride 16
    x = maps[stage].detach().clone().requires_grad_(True)
    dim = x.shape[1]
    heads = {"token-local": TokenLocalHead(dim, 16, 2), "local-linear": LocalLinearReadout(dim, 16, 2),
             "dpt": DPTHead([m.shape[1] for m in maps], 2, features=32, in_strides=strides)}
    dense = [m.detach().clone().requires_grad_(True) for m in maps]
    outs = {"token-local": heads["token-local"](x), "local-linear": heads["local-linear"](x, image),
            "dpt": heads["dpt"](dense, image.shape[-2:])}
    for key, out in outs.items():
        assert out.shape == (2, 2, 64, 64), key
        out.square().mean().backward()
        for pname, prm in heads[key].named_parameters():
            assert prm.grad is not None and torch.isfinite(prm.grad).all(), (key, pname)
            assert float(prm.grad.abs().sum()) > 0, (key, pname)
    assert float(x.grad.abs().sum()) > 0
    assert all(float(m.grad.abs().sum()) > 0 for m in dense)
    # tokens (B, N, C) from the map give the same output
    tokens = maps[stage].flatten(2).transpose(1, 2)
    from_tokens = heads["token-local"](tokens, grid_size=maps[stage].shape[-2:])
    torch.testing.assert_close(from_tokens, outs["token-local"].detach())


def test_dpt_head_cost_and_errors(backbone_features):
    image, feats = backbone_features
    maps, strides = feats["vig"]
    head = DPTHead([192] * 4, 1)
    assert head(maps, (64, 64)).shape == (2, 1, 64, 64)
    # the token-local head needs <= 1/10 of the DPT head's parameters
    assert head_parameter_count(TokenLocalHead(192, 16, 1)) * 10 <= head_parameter_count(head)
    with pytest.raises(ValueError, match="four"):
        head(maps[:3], (64, 64))
    with pytest.raises(ValueError, match="in_strides"):  # H-ViG maps at strides 4..32, head built for 16
        DPTHead([96, 192, 384, 768], 1)(feats["hvig"][0], (64, 64))
    with pytest.raises(ValueError, match="features\\[0\\]"):
        DPTHead([96, 192, 384, 768], 1)(maps, (64, 64))
    with pytest.raises(ValueError, match="four"):
        DPTHead([192] * 3, 1)
    h = DPTHead([96, 192, 384, 768], 1, in_strides=feats["hvig"][1])
    assert h(feats["hvig"][0], (64, 64)).shape == (2, 1, 64, 64)


def test_heads_take_bfloat16_features(backbone_features):
    image, feats = backbone_features
    maps, _ = feats["vig"]
    x = maps[0].to(torch.bfloat16)
    heads = [TokenLocalHead(192, 16, 1), LocalLinearReadout(192, 16, 1)]
    with torch.no_grad():
        ref = [heads[0](maps[0]), heads[1](maps[0], image)]
        got = [heads[0](x), heads[1](x, image)]
    for got, want in zip(got, ref):
        assert got.dtype == torch.bfloat16 and torch.isfinite(got).all()
        assert float((got.float() - want).abs().max()) < 0.05 * float(want.abs().max()) + 1e-2
    # half-precision heads on half-precision features and image
    assert TokenLocalHead(192, 16, 1).to(torch.bfloat16)(x).dtype == torch.bfloat16
    llr = LocalLinearReadout(192, 16, 1).to(torch.bfloat16)
    assert torch.isfinite(llr(x, image.to(torch.bfloat16)).float()).all()
    dpt = DPTHead([192] * 4, 1, features=32)
    out = dpt([m.to(torch.bfloat16) for m in maps], (64, 64))
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()
    out = dpt.to(torch.bfloat16)([m.to(torch.bfloat16) for m in maps], (64, 64))
    assert out.dtype == torch.bfloat16
    refined = guided_refine(image, out)
    assert refined.dtype == torch.bfloat16 and torch.isfinite(refined.float()).all()


# ------------------------------------------------------------------------------------------- bench

def test_bench_dense_head_runs_end_to_end(tmp_path, capsys):
    import json

    from vision.pipelines.cli import main

    out = tmp_path / "dense-head.json"
    assert main(["bench", "dense-head", "--sizes", "32", "--batch", "1", "--repeat", "1", "--device", "cpu",
                 "--threads", "1", "--dpt-features", "16", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "token-local" in text and "local-linear" in text and "x DPT" in text
    payload = json.loads(out.read_text())
    rows = {r["head"]: r for r in payload["rows"]}
    assert set(rows) == {"token-local", "local-linear", "local-linear +5 guides", "dpt"}
    assert rows["token-local"]["params"] == 192 * 256 + 256
    # coefficients (192 + 1) * (3 + 5 + 1), the token-local detail term, convolutions 3->16 and 16->5 (3 x 3)
    assert rows["local-linear +5 guides"]["params"] == 193 * 9 + 192 * 256 + 256 + (3 * 16 * 9 + 16) + (16 * 5 * 9 + 5)
    for r in rows.values():
        assert r["forward_seconds"] > 0 and r["fwd+bwd_seconds"] > 0 and r["forward_images_per_s"] > 0
    assert rows["dpt"]["params_x_dpt"] == 1.0
    assert rows["token-local"]["params_x_dpt"] == pytest.approx(rows["token-local"]["params"] / rows["dpt"]["params"])
    assert [c["check"] for c in payload["acceptance"]][0].startswith("32x32: token-local params")
