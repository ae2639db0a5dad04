"""Image-quality metrics for HDR denoising, with their conventions stated.

Inputs are linear HDR ``(H, W, C)`` NumPy arrays (or anything ``np.asarray`` takes), ``test`` first,
``reference`` second, except HDR-FLIP, which follows ``flip_evaluator`` (reference first) internally.

* **Tonemap** for PSNR and SSIM: :func:`tonemap` = clamp to [0, 1], then gamma 1/2.2 (what BMFR's
  output kernel does). PSNR and SSIM are computed on tonemapped images with peak / data range 1.
* **PSNR**: ``10 log10(1 / MSE)``, MSE over all pixels and channels of the tonemapped images.
* **SSIM**: Wang et al. 2004 with an 11 x 11 Gaussian window (sigma 1.5), K1 = 0.01, K2 = 0.03,
  data range 1, mean over the window positions fully inside the image and over channels
  (``kornia.metrics.ssim`` with ``padding="valid"``).
* **relMSE**: ``mean((test - ref)^2 / (ref^2 + 0.01))`` per pixel and channel on linear HDR values,
  eps = 0.01, *without* the 0.5 factor some codes (SBMC) apply.
* **HDR-FLIP**: mean of NVIDIA's HDR-FLIP map (``flip-evaluator``, default parameters: ACES tonemapper,
  exposures from the reference); lower is better. Optional dependency.
"""
from __future__ import annotations

import numpy as np
import torch

GAMMA = 2.2
RELMSE_EPS = 1e-2
TONEMAP = "clamp to [0, 1], then gamma 1/2.2"


def _pair(test, reference) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(test, dtype=np.float64)
    y = np.asarray(reference, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"test {x.shape} and reference {y.shape} must have the same shape")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("metrics need finite inputs (repair NaN/Inf first)")
    return x, y


def tonemap(x) -> np.ndarray:
    """Clamp linear radiance to [0, 1], then apply gamma 1/2.2."""
    return np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0) ** (1.0 / GAMMA)


def _kornia_metrics():
    """``kornia.metrics``, which :func:`psnr` and :func:`ssim` run."""
    import kornia.metrics  # lazy: kornia (about 400 modules) loads for the first metric, not for tonemap

    return kornia.metrics


def psnr(test, reference) -> float:
    """PSNR in dB on tonemapped images (see the module docstring; kornia's ``metrics.psnr`` with data range 1, in
    float64); inf for identical images."""
    kpsnr = _kornia_metrics().psnr
    x, y = _pair(test, reference)
    return float(kpsnr(torch.from_numpy(tonemap(x)), torch.from_numpy(tonemap(y)), 1.0))


def relmse(test, reference, eps: float = RELMSE_EPS) -> float:
    """Relative MSE on linear HDR values: ``mean((x - y)^2 / (y^2 + eps))``, eps = 0.01."""
    x, y = _pair(test, reference)
    return float(np.mean((x - y) ** 2 / (y ** 2 + eps)))


def ssim(test, reference) -> float:
    """SSIM on tonemapped images, 11x11 Gaussian window (sigma 1.5), data range 1, valid windows only."""
    kssim = _kornia_metrics().ssim
    x, y = _pair(test, reference)
    if x.ndim == 2:
        x, y = x[..., None], y[..., None]
    if min(x.shape[:2]) < 11:
        raise ValueError(f"SSIM needs images of at least 11x11 pixels, got {x.shape[1]}x{x.shape[0]}")
    tx = torch.from_numpy(tonemap(x)).permute(2, 0, 1)[None]
    ty = torch.from_numpy(tonemap(y)).permute(2, 0, 1)[None]
    return float(kssim(tx, ty, 11, max_val=1.0, padding="valid").mean())


def hdr_flip(test, reference) -> float:
    """Mean HDR-FLIP error (``flip_evaluator``; raises ImportError when it is not installed)."""
    import flip_evaluator as flip  # lazy: the optional [bench] extra

    x, y = _pair(test, reference)
    _, mean, _ = flip.evaluate(np.ascontiguousarray(np.maximum(y, 0), dtype=np.float32),
                               np.ascontiguousarray(np.maximum(x, 0), dtype=np.float32), "HDR",
                               applyMagma=False, computeMeanError=True)
    return float(mean)


def flicker(frames) -> float:
    """Mean absolute difference between successive frames of a sequence, on tonemapped values."""
    seq = [tonemap(f) for f in frames]
    if len(seq) < 2:
        raise ValueError("flicker needs at least two frames")
    return float(np.mean([np.mean(np.abs(b - a)) for a, b in zip(seq, seq[1:])]))
