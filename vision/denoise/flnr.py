"""Fast Local Neural Regression (FLNR): a small U-Net sharpens the guides of the local regression.

Salmi, Csefalvay and Imber, "Fast Local Neural Regression for Low-Cost, Path Traced Lambertian Global
Illumination", 2024. FLR (:mod:`vision.denoise.flr`) explains the demodulated radiance in every window
as an affine function of the guide buffers; where the radiance changes without a guide changing
(shadow edges, contact shadows, light falloff) that model cannot follow it. FLNR keeps the regression
and lets a network rewrite the guides:

1. the signal model is FLR's: emission subtracted, albedo divided out (see :func:`.buffers.demodulate`);
2. the guides are laid out in a fixed order, :data:`GUIDES` (normal, log-depth, AO, albedo: 8 channels,
   the most :func:`vision.kernels.local_linear_fit` takes; a missing buffer is a zero channel) and
   standardised per frame as in FLR;
3. :class:`FLNRNet` sees those guides and ``log1p`` of the noisy demodulated colour and predicts a
   residual for each guide channel; the enhanced guides are ``standardised guides + residual`` (the last
   layer starts at zero, so an untrained network *is* FLR);
4. the same regression (``local_linear_fit`` on ``scale x scale`` cells, a learned ridge weight per
   channel, ``local_linear_apply`` at full resolution), clamp, remodulation, emission added back;
5. second mechanism, a per-cell radius blend (``radii``, the bundled weights use 4, 8 and 16): the
   regression is fitted at each radius and the network's softmax weights (at 1/4 resolution, resampled
   to the coefficient grid) blend the *coefficients* cell by cell, so one apply evaluates the blend (a
   blend of local linear models is a local linear model). Small windows where the guides explain the
   light, large ones where the noise dominates: FLR at any single radius is biased by up to ~2 dB even on
   the noise-free reference, and a per-8x8-block oracle choice of the radius would gain 1.3 dB.

The whole chain is differentiable (the regression has closed-form backwards), so the network is trained
end to end on the denoised result (``vision train-denoiser``). Since the regression produces every output
pixel as a local affine function of guides, edges the guides hold stay sharp; the network only has to
say which guide combinations predict the light.

Network (:class:`FLNRNet`): the 12 input channels are pixel-unshuffled 4 x 4, then a three-level U-Net
(widths 16, 24, 32 at 1/4, 1/8, 1/16 resolution, 3 x 3 convolutions, average-pool down, bilinear up, skip
concatenation) predicts a gain and a shift per guide channel at 1/4 resolution; they are upsampled
bilinearly and applied to the full-resolution guides (``g * (1 + gain) + shift``), so the enhanced guides
keep every edge of the buffers. All convolutions run at 1/16 of the pixels or fewer; the full-resolution
work is one 16-channel bilinear upsample and a multiply-add. The regression is fitted on 2 x 2 cells
(``scale=2``, as the paper fits at low resolution; FLR loses 0.01 dB at scale 2 on the bundled scenes).

Weights: ``weights=None`` loads the bundled ``assets/weights/flnr.safetensors``; a path or a state dict
(as :meth:`FLNR.state_dict` returns) or an :class:`FLNR` instance also work. The file's metadata holds the
network configuration (``vision.flnr.config``, JSON), and ``vision train-denoiser`` adds the training
command, epochs and the validation PSNR.
"""
from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from . import buffers as B
from .flr import _area_down, _fit_radius, _full_size, _solve, _upsample_factor, run_tiles

GUIDES = ("normal", "depth", "ao", "albedo")  # fixed network input layout: 3 + 1 + 1 + 3 = 8 channels
FEATURES = 8
IN_CHANNELS = FEATURES + 3 + 1  # standardised guides, log1p(demodulated colour), emitter mask
DEFAULT_CONFIG = {"widths": [16, 24, 32], "head": 16, "radius": 8, "scale": 2, "eps": 1e-2, "radii": [],
                  "modulate": True}
BUNDLED = ("weights", "flnr.safetensors")
CONFIG_KEY = "vision.flnr.config"


def _conv(cin, cout, k=3):
    return nn.Conv2d(cin, cout, k, padding=k // 2)


class FLNRNet(nn.Module):
    r"""The guide network: ``(B, 12, H, W)`` inputs -> per-channel gain and shift of the 8 guides at 1/4 resolution.

    Inputs are the 8 standardised guide channels (:data:`GUIDES`), ``log1p`` of the demodulated noisy
    colour and the emitter mask, pixel-unshuffled 4 x 4; a three-level U-Net (1/4, 1/8, 1/16 resolution)
    returns ``(B, 16, ceil(H/4), ceil(W/4))``: channels 0-7 the gains, 8-15 the shifts of the guides.
    :meth:`FLNR.enhanced_guides` upsamples them bilinearly and applies ``g * (1 + gain) + shift``, so the
    enhanced guides keep the full-resolution edges of the buffers at the cost of one 16-channel upsample.
    Any H, W work (inputs are padded by replication to a multiple of 16). The last convolution is
    zero-initialised (an untrained network leaves the guides unchanged).

    Example:
        >>> net = FLNRNet()
        >>> net(torch.rand(1, 12, 64, 96)).shape
        torch.Size([1, 16, 16, 24])
    """

    MULTIPLE = 16  # total downsampling: unshuffle 4, then two 2x pools
    UNSHUFFLE = 4

    def __init__(self, widths=(16, 24, 32), head: int = 16, in_channels: int = IN_CHANNELS,
                 out_channels: int = 2 * FEATURES):
        super().__init__()
        w0, w1, w2 = (int(w) for w in widths)
        act = nn.LeakyReLU(0.1)
        u2 = self.UNSHUFFLE ** 2
        self.stem = nn.Sequential(nn.Conv2d(u2 * in_channels, w0, 1), act, _conv(w0, w0), act)
        self.down1 = nn.Sequential(_conv(w0, w1), act, _conv(w1, w1), act)
        self.down2 = nn.Sequential(_conv(w1, w2), act, _conv(w2, w2), act)
        self.up2 = nn.Sequential(_conv(w2 + w1, w1), act)
        self.up1 = nn.Sequential(_conv(w1 + w0, w0), act)
        self.head = nn.Sequential(_conv(w0, head), act, nn.Conv2d(head, out_channels, 1))
        nn.init.zeros_(self.head[-1].weight)
        nn.init.zeros_(self.head[-1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        m = self.MULTIPLE
        ph, pw = -h % m, -w % m
        xp = F.pad(x, (0, pw, 0, ph), mode="replicate") if ph or pw else x
        e1 = self.stem(F.pixel_unshuffle(xp, self.UNSHUFFLE))
        e2 = self.down1(F.avg_pool2d(e1, 2))
        e3 = self.down2(F.avg_pool2d(e2, 2))
        d2 = self.up2(torch.cat([F.interpolate(e3, scale_factor=2, mode="bilinear", align_corners=False), e2], 1))
        d1 = self.up1(torch.cat([F.interpolate(d2, scale_factor=2, mode="bilinear", align_corners=False), e1], 1))
        u = self.UNSHUFFLE
        return self.head(d1)[..., :-(-h // u), :-(-w // u)]


def guide_features(guides: dict, like: torch.Tensor, size) -> torch.Tensor:
    """The raw (unstandardised) guides in the fixed :data:`GUIDES` layout, (B, 8, H, W); missing ones are 0."""
    parts = []
    b = like.shape[0]
    for name in GUIDES:
        v = guides.get(name)
        n = B.CHANNELS[name]
        if v is None:
            parts.append(torch.zeros(b, n, *size, dtype=like.dtype, device=like.device))
            continue
        if name == "depth":
            valid = v > 0
            far = v[valid].max() if bool(valid.any()) else torch.ones((), dtype=v.dtype, device=v.device)
            v = torch.log(torch.where(valid, v, far).clamp_min(1e-6))
        parts.append(v.to(like.dtype).expand(b, -1, -1, -1))
    return torch.cat(parts, 1)


class FLNR(nn.Module):
    """FLNR: the guide network, a learned ridge weight per guide channel, and FLR's regression.

    ``radii`` (optional): fit at these radii and blend the coefficients per cell with the network's weights
    (see the module docstring); ``radius`` is then only used when a different radius is asked for.
    ``modulate=False`` keeps the guides as they are (blend only).

    ``forward(color, guides)`` takes (B, 3, h, w) noisy radiance and a dict of full-resolution (B, *, H, W)
    guide buffers (``albedo, normal, depth, ao, emission``; any may be None) and returns the denoised
    (B, 3, H, W) radiance. Colour smaller than the guides by an integer factor is joint denoising and
    upsampling, as in FLR (the network then sees the colour nearest-upsampled).

    Example:
        >>> model = FLNR()                     # untrained, no radii: equals FLR at its radius and scale
        >>> out = model(color, {"albedo": albedo, "normal": normal, "depth": depth, "ao": ao})
    """

    def __init__(self, widths=(16, 24, 32), head: int = 16, radius: int = 8, scale: int = 2, eps: float = 1e-2,
                 radii=(), modulate: bool = True):
        super().__init__()
        radii = [int(r) for r in radii]
        if not modulate and not radii:
            raise ValueError("FLNR needs modulate=True or radii to blend (else it is FLR)")
        self.config = {"widths": [int(w) for w in widths], "head": int(head), "radius": int(radius),
                       "scale": int(scale), "eps": float(eps), "radii": radii, "modulate": bool(modulate)}
        self.net = FLNRNet(widths, head, out_channels=(2 * FEATURES if modulate else 0) + len(radii))
        self.log_eps = nn.Parameter(torch.full((FEATURES,), math.log(eps)))

    @property
    def radius(self) -> int:
        return self.config["radius"]

    @property
    def scale(self) -> int:
        return self.config["scale"]

    def enhanced_guides(self, target_full, mask_full, raw, stats=None):
        """The enhanced guides (B, 8, H, W) and the radius-blend logits at 1/4 resolution (or None)."""
        mean, std = stats if stats is not None else B.feature_stats(raw)
        feat = (raw - mean) / std
        x = torch.cat([feat, torch.log1p(target_full.clamp_min(0)), mask_full], 1)
        out = self.net(x.to(next(self.net.parameters()).dtype)).to(feat.dtype)
        nm = 2 * FEATURES if self.config["modulate"] else 0
        logits = out[:, nm:] if self.config["radii"] else None
        if not nm:
            return feat, logits
        mod = out[:, :nm]
        # each coefficient at the centre of its 4 x 4 cell, as local_linear_apply places a cell's coefficients
        u = self.net.UNSHUFFLE
        h, w = feat.shape[-2:]
        mod = F.interpolate(mod, size=(mod.shape[-2] * u, mod.shape[-1] * u), mode="bilinear",
                            align_corners=False)[..., :h, :w]
        gain, shift = mod[:, :FEATURES], mod[:, FEATURES:]
        return torch.addcmul(shift, feat, 1 + gain), logits

    def forward(self, color: torch.Tensor, guides: dict, radius: int | None = None, eps=None,
                scale: int | None = None, stats=None) -> torch.Tensor:
        radius = self.radius if radius is None else int(radius)
        scale = self.scale if scale is None else int(scale)
        h, w = color.shape[-2:]
        hf, wf = _full_size(color, guides)
        u = _upsample_factor((h, w), (hf, wf))
        albedo, emission = guides.get("albedo"), guides.get("emission")
        raw = guide_features(guides, color, (hf, wf))
        r = _fit_radius(radius, u)
        target, factor, add = B.demodulate(color, _area_down(albedo, u), _area_down(emission, u), r)
        mask = B.emitter_mask(_area_down(emission, u), color)
        mask = torch.zeros_like(color[:, :1]) if mask is None else mask.expand(color.shape[0], -1, -1, -1)
        if u > 1:
            t_full = F.interpolate(target, scale_factor=u, mode="nearest")[..., :hf, :wf]
            m_full = F.interpolate(mask, scale_factor=u, mode="nearest")[..., :hf, :wf]
        else:
            t_full, m_full = target, mask
        feat, logits = self.enhanced_guides(t_full, m_full, raw, stats)
        feat = feat.contiguous()
        eps_t = self.log_eps.exp().to(color.dtype) if eps is None else eps
        if logits is None or radius != self.radius:
            fitted = _solve(_area_down(feat, u), target.contiguous(), feat, r, eps_t, scale, u)
        else:
            fitted = self._blended(_area_down(feat, u), target.contiguous(), feat, logits, eps_t, scale, u)
        fitted = fitted.clamp_min(0)
        if u == 1:
            return fitted * factor + add
        _, factor_full, add_full = B.demodulate(torch.zeros(color.shape[0], color.shape[1], hf, wf,
                                                            dtype=color.dtype, device=color.device),
                                                albedo, emission, 0)
        return fitted * factor_full + add_full

    def _blended(self, feat_lo, target, feat, logits, eps, scale, u):
        """Fits at every radius of ``radii``, their coefficients blended per grid cell by the softmax of
        the network's logits, applied once (a blend of local linear models is a local linear model)."""
        from vision.kernels import local_linear_apply, local_linear_fit

        coeffs = None
        for j, rad in enumerate(self.config["radii"]):
            c = local_linear_fit(feat_lo, target, _fit_radius(rad, u), eps, scale=scale)
            if coeffs is None:
                gh, gw = c.shape[-2:]
                if tuple(logits.shape[-2:]) != (gh, gw):
                    logits = F.interpolate(logits, size=(gh, gw), mode="bilinear", align_corners=False)
                wts = torch.softmax(logits, 1)[:, None, :, None]  # (B, 1, R, 1, gh, gw)
                coeffs = c * wts[:, :, j]
            else:
                coeffs = coeffs + c * wts[:, :, j]
        cell = scale * u
        h, w = feat.shape[-2:]
        if -(-h // cell) == coeffs.shape[-2] and -(-w // cell) == coeffs.shape[-1]:
            return local_linear_apply(feat, coeffs, scale=cell)
        return local_linear_apply(feat, coeffs)

    # ------------------------------------------------------------------ weights

    def metadata(self, **extra) -> dict[str, str]:
        meta = {CONFIG_KEY: json.dumps(self.config)}
        meta.update({str(k): (v if isinstance(v, str) else json.dumps(v)) for k, v in extra.items()})
        return meta

    def save(self, path, **metadata) -> Path:
        """Write the weights as safetensors, with the configuration (and ``metadata``) in the header."""
        from safetensors.torch import save_file

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(path), metadata=self.metadata(**metadata))
        return path

    @classmethod
    def from_state_dict(cls, state: dict, config: dict | None = None) -> "FLNR":
        cfg = dict(DEFAULT_CONFIG, **(config or {}))
        model = cls(cfg["widths"], cfg["head"], cfg["radius"], cfg["scale"], cfg["eps"], cfg["radii"],
                    cfg["modulate"])
        try:
            model.load_state_dict(state)
        except RuntimeError as err:
            raise ValueError(f"FLNR weights do not match the network {cfg}: {err}") from None
        return model.eval()

    @classmethod
    def from_file(cls, path) -> "FLNR":
        from safetensors import safe_open
        from safetensors.torch import load_file

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no FLNR weights file at {path}")
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
        config = json.loads(meta[CONFIG_KEY]) if CONFIG_KEY in meta else None
        return cls.from_state_dict(load_file(str(path)), config)


def read_metadata(path) -> dict[str, str]:
    """The safetensors header metadata of a weights file (configuration, training command, val PSNR)."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return dict(f.metadata() or {})


@lru_cache(maxsize=4)
def _cached(path: str, mtime: float) -> FLNR:
    return FLNR.from_file(path)


def load_flnr(weights=None) -> FLNR:
    """An :class:`FLNR` from ``weights``: None (the bundled file), a path, a state dict or an FLNR."""
    if isinstance(weights, FLNR):
        return weights
    if isinstance(weights, dict):
        return FLNR.from_state_dict(weights)
    if weights is None:
        from vision.bundled import asset_path

        weights = asset_path(*BUNDLED)
    if not isinstance(weights, (str, Path)):
        raise ValueError(f"FLNR weights must be None, a path, a state dict or an FLNR, got {type(weights).__name__}")
    path = Path(weights)
    if not path.is_file():
        raise FileNotFoundError(f"no FLNR weights file at {path}")
    return _cached(str(path.resolve()), path.stat().st_mtime)


def flnr(color: torch.Tensor, guides: dict, model: FLNR, radius: int | None = None, eps=None,
         scale: int | None = None, stats=None) -> torch.Tensor:
    """FLNR on (B, 3, h, w) colour and full-resolution guides with ``model`` (see :class:`FLNR`)."""
    dev, dt = color.device, color.dtype
    if next(model.parameters()).device != dev or next(model.parameters()).dtype != dt:
        model = model.to(device=dev, dtype=dt)  # a copy only when needed: nn.Module.to moves in place
    return model(color, guides, radius, eps, scale, stats)


def flnr_tiled(color: torch.Tensor, guides: dict, model: FLNR, radius: int | None, eps, scale: int | None,
               tile: int) -> torch.Tensor:
    """:func:`flnr` over tiles of about ``tile`` pixels with an overlap margin covering the regression's reach
    and the network's receptive field; tiles use the whole frame's guide statistics. The network pads
    with zeros at tile borders, so the result matches the whole frame to within float rounding where the
    margin covers the receptive field (:data:`NET_MARGIN` pixels) and very nearly elsewhere."""
    h, w = color.shape[-2:]
    hf, wf = _full_size(color, guides)
    if hf <= tile and wf <= tile:
        return flnr(color, guides, model, radius, eps, scale)
    u = _upsample_factor((h, w), (hf, wf))
    radius = model.radius if radius is None else int(radius)
    scale = model.scale if scale is None else int(scale)
    raw = guide_features(guides, color, (hf, wf))
    stats = B.feature_stats(raw)
    del raw
    reach = max([radius, *model.config["radii"]]) if radius == model.radius else radius
    r = _fit_radius(reach, u)
    r_cells = max(1, round(r / scale)) if scale > 1 else r
    # regression reach as in flr_tiled, plus the network's receptive field; origins on a common grid
    unit = math.lcm(u * scale, FLNRNet.MULTIPLE * u)
    margin = (r + (2 * r_cells + 2) * scale) * u + NET_MARGIN
    margin = int(math.ceil(margin / unit)) * unit
    return run_tiles(color, guides, (hf, wf), u, margin, unit, tile,
                     lambda c, sub: flnr(c, sub, model, radius, eps, scale, stats=stats))


# receptive field of FLNRNet in full-resolution pixels (two 3x3 convs at 1/16, three at 1/8, three at
# 1/4, plus the bilinear taps and pooling: about 100), rounded up
NET_MARGIN = 128


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["FLNR", "FLNRNet", "flnr", "flnr_tiled", "load_flnr", "read_metadata", "parameter_count", "GUIDES"]
