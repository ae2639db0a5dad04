"""The FLNR model: :class:`FLNR` wires the stages (:mod:`.prepare`, :mod:`.cells`, the cell network
(:mod:`.network`), :mod:`.head`, the regression, :mod:`.finish`, :mod:`.detail`) and reads and writes its weights.

See :mod:`vision.denoise.flnr` for the method.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import safetensors.torch  # its save_file and load_file looked up when called (tests stand in for them)
import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import nn

from vision import kernels  # the ops are looked up on the package when called: it loads them on first use

from .. import buffers as B
from ..flr import area_down, check_phase, fit_radius, full_size, sample_down, upsample_factor
from .cells import (FEATURE_CHANNELS, NET_IN, cells as cell_stats, guide_buffers, guide_stats,
                    history_input)
from .config import check_config, check_weights_file
from .detail import detail_blend
from .finish import antialias_share, finish, scaled_top
from .head import head
from .hub import FLNRHubMixin
from .network import FLNRNet
from .prepare import prepare
from .surgery import head_rows, pruned, widened, with_history, with_outputs

DEFAULT_CONFIG = {"widths": [16, 24, 32, 48], "hidden": 16, "guides": 4, "radii": [4, 8, 16], "scale": 4,
                  "fit_down": 1, "eps": 1e-2, "antialias": False, "detail": False, "history": False}
FILL_RADIUS = 8  # emitter pixels take the mean signal of the emitter-free pixels within this radius
CONFIG_KEY = "vision.flnr.config"
# FLNR's antialias at the start of training: logit = BLEND_BIAS + EDGE_GAIN c(albedo), the weight 0.5 sigmoid(logit)
EDGE_GAIN, BLEND_BIAS = 200.0, -5.0
DETAIL_BIAS = -6.0  # FLNR's detail blend at the start of training: weight sigmoid(-6) = 0.25 % everywhere


def _layout(t: torch.Tensor) -> torch.memory_format:
    """channels_last for (B, C > 1, H, W) tensors laid out as HWC (what HWC arrays become), else contiguous."""
    interleaved = t.shape[1] > 1 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()
    return torch.channels_last if interleaved else torch.contiguous_format


class FLNR(nn.Module, FLNRHubMixin):
    """FLNR: the cell network, the guide head, a learned ridge weight per learned guide, and the regression.

    Args:
        widths: :class:`FLNRNet` widths (the first at the 4 x 4 cell grid, then one per 2x coarser level).
        hidden: width of the guide head's hidden layer; 0 = a linear head.
        guides: Q, the number of learned guides (at most 8, :func:`vision.kernels.local_linear_fit`'s limit).
        radii: radii (full-resolution pixels) whose fits are blended per cell.
        scale: the regression's cell size in full-resolution pixels (the paper fits at low resolution).
        fit_down: the regression's moments are taken from the learned guides and the signal averaged over
            ``fit_down x fit_down`` pixels (1 = every pixel; must divide ``scale``); the fit is still
            applied to the full-resolution guides.
        eps: initial ridge weight of every learned guide.
        antialias: blend the light (the result without the emission) per pixel towards its 3 x 3 mean
            (:func:`~.finish.antialias`) with the weight ``sigmoid(m) sigmoid(l + v c)``: ``l`` one more output of the
            guide head, ``c`` the albedo's :func:`~.finish.local_contrast` (the head is per pixel; the contrast is what
            tells it where an edge is), ``v`` and ``m`` learned scalars. The buffers are one ray through each
            pixel centre, so at an edge they name one surface (one albedo) where the pixel, and the
            reference, average two; the regression and the remodulation cannot mix them, the blend can.
        detail: blend the result per pixel towards the noisy signal's own trimmed 3 x 3 mean, remodulated
            (:func:`~.detail.detail_blend`), with the weight ``sigmoid(d) s``: ``d`` one more output of the guide head,
            ``s`` a James-Stein shrinkage by those samples' spread (0 at pixels that see an emitter). Where no
            local affine function of the guides follows the light (a mirror or glass showing its surroundings,
            a caustic, a texture the buffers miss), the frame's own samples, lightly smoothed, beat any fit;
            the head learns where that is, the shrinkage keeps out what is only noise. Only for colour at the
            guides' resolution (ignored when upsampling).
        history: the network also reads how many frames each colour pixel averages (``guides["history"]``, (B, 1,
            H, W), >= 1; absent = 1, a single frame), as the cell mean of ``log(min(n, HISTORY_CAP))``
            (:func:`~.cells.history_input`). A temporal denoiser's accumulated colour has about n times less
            noise variance than one frame; told so, the network picks smaller windows and sharper guides there
            instead of reading the noise level off the samples alone. Trained with ``vision train-denoiser
            --history N`` (crops averaging 1 to N noisy frames of a scene, per pixel).

    The guide head, per pixel, with f the 8 guides standardised per frame and ``up`` the bilinear
    upsampling from the 4 x 4 cells: ``g = W2 leaky(W1 f + up(code)) + b2`` (``hidden > 0``) or
    ``g = W f + up(code)`` (``hidden = 0``). The standardisation is folded into W1 (or W), so the
    full-resolution work is a few matrix products on the buffers as they are.

    ``forward(color, guides)`` takes (B, 3, h, w) noisy radiance and a dict of full-resolution (B, *, H, W)
    guide buffers (``albedo, normal, depth, ao, emission``; any may be None) and returns the denoised
    (B, 3, H, W) radiance. Colour smaller than the guides by an integer factor is joint denoising and
    upsampling, as in FLR (the network then sees the colour nearest-upsampled; the fit runs at the
    colour's resolution, on the learned guides averaged over each colour pixel's block or, with ``phase``
    (dy, dx), read at the samples' own pixels, and is applied to the full-resolution learned guides).
    ``forward(..., spp=N)``: the samples per pixel the guide buffers average; from 16 up the antialias blend keeps
    ``1 / N`` of its learned weight (:func:`~.finish.antialias_share`; None, the default: its whole weight).

    Example:
        >>> model = FLNR()   # untrained; load_flnr() gives the bundled, trained one
        >>> out = model(color, {"albedo": albedo, "normal": normal, "depth": depth, "ao": ao})
        >>> model.save_pretrained("my-flnr")   # config.json + model.safetensors; FLNR.from_pretrained("my-flnr")
    """

    def __init__(self, widths=(16, 24, 32, 48), hidden: int = 16, guides: int = 4, radii=(4, 8, 16),
                 scale: int = 4, fit_down: int = 1, eps: float = 1e-2, antialias: bool = False,
                 detail: bool = False, history: bool = False):
        super().__init__()
        radii = [int(r) for r in radii]
        if not radii or min(radii) < 1:
            raise ValueError(f"radii must be one or more positive radii, got {radii}")
        if not 1 <= int(guides) <= 8:
            raise ValueError(f"guides must be 1 to 8 (the regression's feature limit), got {guides}")
        if int(scale) < 1 or int(fit_down) < 1 or int(scale) % int(fit_down) or not (eps > 0) or int(hidden) < 0:
            raise ValueError(f"need scale >= 1, fit_down >= 1 dividing scale, hidden >= 0 and eps > 0, got "
                             f"scale={scale}, fit_down={fit_down}, hidden={hidden}, eps={eps}")
        self.config = {"widths": [int(w) for w in widths], "hidden": int(hidden), "guides": int(guides),
                       "radii": radii, "scale": int(scale), "fit_down": int(fit_down), "eps": float(eps),
                       "antialias": bool(antialias), "detail": bool(detail), "history": bool(history)}
        rows = head_rows(self.config)
        outputs = rows["total"]  # the learned guides, then the blends' logits
        width = int(hidden) or outputs  # what the network's code adds to, per pixel
        self.net = FLNRNet(widths, width, len(radii), in_channels=NET_IN + int(bool(history)))
        self.head_in = nn.Linear(FEATURE_CHANNELS, width)
        self.head_out = nn.Linear(int(hidden), outputs) if hidden else None
        self.log_eps = nn.Parameter(torch.full((int(guides),), math.log(eps)))
        last = self.head_out if self.head_out is not None else self.head_in
        if antialias:
            self.edge_gain = nn.Parameter(torch.tensor(EDGE_GAIN))
            self.blend_max = nn.Parameter(torch.zeros(()))
            with torch.no_grad():  # start with no blend except where the albedo has an edge
                last.bias[rows["blend"]] = BLEND_BIAS
        if detail:
            with torch.no_grad():
                last.bias[rows["detail"]] = DETAIL_BIAS

    @property
    def radius(self) -> int:
        """The largest radius of the blend (what tiling must cover)."""
        return max(self.config["radii"])

    @property
    def scale(self) -> int:
        return self.config["scale"]

    def learned_guides(self, buffers: list, target_full: torch.Tensor, mask_full: torch.Tensor, stats=None,
                       history=None):
        """The Q learned guides (B, Q, H, W), with the :func:`~.finish.antialias` logit as channel Q+1 when the model
        has one, and the radius logits on the 4 x 4 cell grid (B, R, h, w). ``history``: frames per pixel (B or 1, 1,
        H, W), read when the model was built with ``history=True``."""
        dt = self.log_eps.dtype
        whole_frame = self._whole_frame(target_full)
        cells, inputs = cell_stats(buffers, target_full, mask_full, whole_frame)
        mean, std = guide_stats(cells) if stats is None else stats
        x = inputs((cells - mean) / std)
        if self.config["history"]:
            x = torch.cat([x, history_input(history, x)], 1)
        out = self.net(x.to(dt).contiguous(memory_format=torch.channels_last))
        weight = self.head_in.weight.t()[None] / std.reshape(-1, FEATURE_CHANNELS, 1).to(dt)  # (B or 1, 8, width)
        bias = self.head_in.bias - (mean.reshape(-1, 1, FEATURE_CHANNELS).to(dt) @ weight)  # (B or 1, 1, width)
        return head(out, buffers, weight, bias, self.head_out, target_full, whole_frame)

    def _whole_frame(self, target: torch.Tensor) -> str | None:
        """Why the cell statistics and the guide head must run PyTorch on the whole frame (None: numba or bands of
        rows may take them): another device or backend, forward hooks on the guide head's output layer (only the
        whole-frame path calls it as a module, so only there do the hooks see the hidden layer; what
        :func:`~.surgery.pruned` records), or autograd."""
        if not B.cpu_path(target):
            return "needs the CPU path (a CPU tensor on the PyTorch backend)"
        layer = self.head_out
        if layer is not None and (layer._forward_hooks or layer._forward_pre_hooks):  # what nn.Module.__call__ reads
            return "forward hooks watch the guide head's output layer"
        if torch.is_grad_enabled() and (target.requires_grad or any(p.requires_grad for p in self.parameters())):
            return "autograd is on"
        return None

    def forward(self, color: torch.Tensor, guides: dict, radius: int | None = None, eps=None,
                scale: int | None = None, stats=None, phase=None, spp: float | None = None) -> torch.Tensor:
        scale = self.scale if scale is None else int(scale)
        h, w = color.shape[-2:]
        hf, wf = full_size(color, guides)
        u = upsample_factor((h, w), (hf, wf))
        phase = check_phase(phase, u)
        # the signal in planar (B, C, H, W) layout: HWC arrays come in as channels-last views, and ops that
        # broadcast a (B, 1, H, W) mask or weight over their 3 interleaved channels run ~10x slower than on
        # planes (on CPU float32 one numba pass reads them as they lie and writes the planes it needs); the
        # result goes back to the colour's layout at the end
        result_layout = _layout(color)
        albedo, emission = guides.get("albedo"), guides.get("emission")
        radii = self.config["radii"] if radius is None else [int(radius)]
        color, target, factor, add, mask, albedo, emission = prepare(color, albedo, emission, u, phase,
                                                                     fit_radius(FILL_RADIUS, u))
        guides = dict(guides, albedo=albedo, emission=emission)
        if u > 1:
            t_full = F.interpolate(target, scale_factor=u, mode="nearest")[..., :hf, :wf]
            m_full = F.interpolate(mask, scale_factor=u, mode="nearest")[..., :hf, :wf]
        else:
            t_full, m_full = target, mask
        history = guides.get("history")
        if history is not None and u > 1:
            history = F.interpolate(history, size=(hf, wf), mode="nearest")
        g, logits = self.learned_guides(guide_buffers(guides, color), t_full, m_full, stats, history)
        rows = head_rows(self.config)
        blend, detail = (g[:, rows[k]:rows[k] + 1] if k in rows else None for k in ("blend", "detail"))
        g = g[:, :rows["guides"]].contiguous() if rows["total"] > rows["guides"] else g
        eps_t = self.log_eps.exp().to(color.dtype) if eps is None else eps
        # the fit's samples: colour resolution, then averaged over fit_down x fit_down when the cells allow it
        fd = self.config["fit_down"] if scale % self.config["fit_down"] == 0 else 1
        g_lo = (area_down(g, u * fd) if phase is None else area_down(sample_down(g, u, phase), fd)).contiguous()
        t_lo = area_down(target, fd).contiguous()
        r_lo = [fit_radius(r, u * fd) for r in radii]
        s_lo = scale // fd
        if len(r_lo) == 1:
            coeffs = kernels.local_linear_fit(g_lo, t_lo, r_lo[0], eps_t, scale=s_lo)
        else:
            grid = (-(-t_lo.shape[-2] // s_lo), -(-t_lo.shape[-1] // s_lo))
            if tuple(logits.shape[-2:]) != grid:
                logits = F.interpolate(logits, size=grid, mode="bilinear", align_corners=False)
            coeffs = kernels.local_linear_fit(g_lo, t_lo, r_lo, eps_t, scale=s_lo, weights=torch.softmax(logits, 1))
        cell = scale * u
        if -(-hf // cell) == coeffs.shape[-2] and -(-wf // cell) == coeffs.shape[-1]:
            fitted = kernels.local_linear_apply(g, coeffs, scale=cell)
        else:
            fitted = kernels.local_linear_apply(g, coeffs)
        if u > 1:
            _, factor, add = B.demodulate(torch.zeros(color.shape[0], color.shape[1], hf, wf, dtype=color.dtype,
                                                      device=color.device), albedo, emission, 0)
        # the result in the colour's layout (HWC arrays come in as channels-last views: no copy back to HWC)
        out = None if fitted.requires_grad else torch.empty_like(fitted, memory_format=result_layout)
        # the antialias blend's weight for guides averaged over spp rays per pixel (finish.antialias_share)
        gains = ((self.edge_gain, scaled_top(self.blend_max, antialias_share(spp))) if blend is not None
                 else (None, None))
        res = finish(fitted, factor, add, blend, albedo, *gains, out)
        return res if detail is None or u > 1 else detail_blend(res, add, factor, target, detail, mask)

    def pruned(self, hidden: int, frames, fit_down: int | None = None) -> "FLNR":
        """A copy with the guide head cut to its ``hidden`` most useful units, to fine-tune into a faster model
        (``vision train-denoiser --init OLD --hidden 8``); see :func:`.surgery.pruned`.

        Example:
            >>> small = load_flnr().pruned(8, [(f["color"], f) for f in frames])   # then fine-tune it
        """
        return pruned(self, hidden, frames, fit_down)

    def widened(self, guides: int | None = None, hidden: int | None = None, widths=None) -> "FLNR":
        """A copy with more learned guides, guide-head units or network channels that computes the same function
        (new guides: nearly), to fine-tune into a larger model (``vision train-denoiser --init OLD --guides 5``); see
        :func:`.surgery.widened`.

        Example:
            >>> bigger = load_flnr().widened(guides=5, widths=[16, 24, 64, 96])   # then fine-tune it
        """
        return widened(self, guides, hidden, widths)

    def with_antialias(self) -> "FLNR":
        """A copy with the antialias blend added, starting as this model plus a blend at albedo edges
        (``vision train-denoiser --init OLD --antialias``); see :func:`.surgery.with_outputs`."""
        return with_outputs(self, antialias=True)

    def with_detail(self) -> "FLNR":
        """A copy with the detail blend added, starting as this model (the blend's weight near 0)
        (``vision train-denoiser --init OLD --detail``); see :func:`.surgery.with_outputs`."""
        return with_outputs(self, detail=True)

    def with_history(self) -> "FLNR":
        """A copy whose network also reads the history length, starting as this model (the new input's weights
        0) (``vision train-denoiser --init OLD --history 16``); see :func:`.surgery.with_history`."""
        return with_history(self)

    # ------------------------------------------------------------------ weights

    def metadata(self, **extra) -> dict[str, str]:
        meta = {CONFIG_KEY: json.dumps(self.config)}
        meta.update({str(k): (v if isinstance(v, str) else json.dumps(v)) for k, v in extra.items()})
        return meta

    def save(self, path, **metadata) -> Path:
        """Write the weights as safetensors, with the configuration (and ``metadata``) in the header."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        safetensors.torch.save_file(state, str(path), metadata=self.metadata(**metadata))
        return path

    @classmethod
    def from_state_dict(cls, state: dict, config: dict | None = None) -> "FLNR":
        cfg = dict(DEFAULT_CONFIG, **(config or {}))
        unknown = set(cfg) - set(DEFAULT_CONFIG)
        if unknown:
            raise ValueError(f"FLNR weights were written for another FLNR network (configuration keys "
                             f"{sorted(unknown)}); retrain them with vision train-denoiser")
        check_config(cfg)  # sizes within bounds before anything is allocated
        odd = sorted({str(v.dtype).removeprefix("torch.") for v in state.values()
                      if isinstance(v, torch.Tensor) and not v.dtype.is_floating_point})
        if odd:  # load_state_dict would cast integers and booleans into the weights without a word
            raise ValueError(f"FLNR weights hold {', '.join(odd)} tensors; weights are floating point")
        model = cls(**cfg)
        try:
            model.load_state_dict(state)
        except RuntimeError as err:
            raise ValueError(f"FLNR weights do not match the network {cfg}: {err}") from None
        return model.eval()

    @classmethod
    def from_file(cls, path) -> "FLNR":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no FLNR weights file at {path}")
        check_weights_file(path)  # a pickle or a crafted header: one line, never loaded
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
        try:
            config = json.loads(meta[CONFIG_KEY]) if CONFIG_KEY in meta else None
        except (json.JSONDecodeError, RecursionError):
            raise ValueError(f"{path}: its FLNR configuration is not JSON") from None
        check_config({} if config is None else config, f"{path}")  # before any network is built: the file named
        return cls.from_state_dict(safetensors.torch.load_file(str(path)), config)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
