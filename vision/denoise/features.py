"""Guide features of the regression: which guides it reads (:data:`~vision.data.fields.REGRESSION_ORDER`), log-depth,
standardisation."""
from __future__ import annotations

import torch

from vision.data.fields import REGRESSION_ORDER, guide_list  # noqa: F401 (re-exported)
from vision.kernels.runtime import decide, register_path

from .engines import NUMBA, TORCH, numba_takes


def log_depth(depth: torch.Tensor) -> torch.Tensor:
    """``log(depth)``, where pixels with no surface (depth <= 0, e.g. the sky) take the frame's largest depth.
    On the CPU path, (B, 1, H, W) float32 depth takes one numba pass instead of four tensor ops
    (:mod:`.log_cpu`); the registry decides (op ``denoise.log_depth``)."""
    return decide("denoise.log_depth", depth, tensors=(depth,), shape=tuple(depth.shape)).run(depth)


def _log_depth_torch(depth: torch.Tensor) -> torch.Tensor:
    far = depth.amax()  # the largest valid depth, when there is one (invalid ones are <= 0)
    far = torch.where(far > 0, far, torch.ones_like(far))  # on the device: no host read
    return torch.log(torch.where(depth > 0, depth, far).clamp_min(1e-6))


def _log_depth_numba(depth: torch.Tensor) -> torch.Tensor:
    from . import log_cpu  # lazy: numba (about 200 modules) loads when this path first runs

    return log_cpu.log_depth(depth)


def _numba_log_depth_takes(tensors, shape) -> str | None:
    if len(shape) != 4 or shape[1] != 1:
        return "takes (B, 1, H, W) depth"
    return numba_takes(*tensors)


register_path("denoise.log_depth", NUMBA, "torch", 5, supports=_numba_log_depth_takes, run=_log_depth_numba)
register_path("denoise.log_depth", TORCH, "torch", 0, run=_log_depth_torch)


def _guide_planes(buffers: dict[str, torch.Tensor | None]) -> tuple[list[torch.Tensor], list[str]]:
    """The present guide buffers in regression order, depth as :func:`log_depth`, and their names."""
    names = guide_list(k for k, v in buffers.items() if v is not None)
    return [log_depth(buffers[name]) if name == "depth" else buffers[name] for name in names], names


def raw_features(buffers: dict[str, torch.Tensor | None]) -> tuple[torch.Tensor | None, list[str]]:
    """Concatenate the guide buffers into (B, K, H, W) before standardisation.

    Depth becomes log-depth (radiance varies smoothly in log-depth across a wide depth range, and one
    far pixel no longer dominates the variance); pixels with no surface (depth <= 0, e.g. the sky) take
    the largest depth of the frame.
    """
    parts, names = _guide_planes(buffers)
    if not parts:
        return None, []
    b = max(p.shape[0] for p in parts)
    return torch.cat([p.expand(b, -1, -1, -1) for p in parts], 1), names


def standardised_features(buffers: dict[str, torch.Tensor | None], stats: tuple[torch.Tensor, torch.Tensor],
                          batch: int) -> torch.Tensor | None:
    """:func:`raw_features` of ``buffers`` standardised by ``stats`` (mean, std: (1 or B, K, 1, 1) each, as
    :func:`feature_stats` gives them), (batch, K, H, W): each buffer read once and written once, as
    ``x / std - mean / std`` (one multiply-add per value; stacking, then subtracting and dividing in place, took three
    passes). None without guides. No gradient flows through it."""
    parts, _ = _guide_planes(buffers)
    if not parts:
        return None
    mean, std = stats
    inv = 1 / std
    shift = -mean * inv
    out = parts[0].new_empty(batch, mean.shape[1], *parts[0].shape[-2:])
    i = 0
    for p in parts:
        n = p.shape[1]
        torch.addcmul(shift[:, i:i + n], p.detach().expand(batch, -1, -1, -1), inv[:, i:i + n], out=out[:, i:i + n])
        i += n
    return out


def feature_stats(f: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image and channel mean and standard deviation (floored), shapes (B, K, 1, 1)."""
    mean = f.mean((2, 3), keepdim=True)
    std = f.std((2, 3), keepdim=True, unbiased=False).clamp_min(1e-3)
    return mean, std
