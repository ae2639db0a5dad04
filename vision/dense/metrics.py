"""Standard metrics of the dense tasks, on decoded predictions, over an optional boolean valid mask.

All return Python floats. Depth, alpha and albedo metrics are computed per image and averaged over
the images with valid pixels (as the NYU / KITTI evaluation code does); angular errors and IoU pool
every valid pixel of the batch. When accumulating over a dataset, weight batch results by batch size
(or by pixel count for the pooled ones). With no valid pixel a metric is NaN.
"""
from __future__ import annotations

import math

import torch

from .losses import DEGREES, angle_between, as_mask, check_pair, gradient_pair_masks, image_gradients

NAN = float("nan")


def _f64(x: torch.Tensor) -> torch.Tensor:
    return x.detach().double()


def _per_image_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) means of ``values`` (B, 1, H, W) over each image's mask; NaN for images without valid pixels."""
    v = torch.where(mask, values, torch.zeros_like(values)).flatten(1).sum(1)
    n = mask.flatten(1).sum(1)
    return torch.where(n > 0, v / n.clamp_min(1), torch.full_like(v, NAN))


def _mean_over_images(x: torch.Tensor) -> float:
    x = x[~torch.isnan(x)]
    return float(x.mean()) if x.numel() else NAN


def depth_metrics(pred: torch.Tensor, target: torch.Tensor, valid=None) -> dict[str, float]:
    """AbsRel ``mean(|p - g| / g)``, RMSE ``sqrt(mean((p - g)^2))`` (metres) and delta1 (share of pixels with
    ``max(p / g, g / p) < 1.25``), per image then averaged. pred: (B, 1, H, W) depth > 0;
    valid None = ``target > 0``."""
    if valid is None:
        valid = target > 0
    mask = check_pair(pred, target, valid, 1)
    p, g = _f64(pred), _f64(target)
    g_safe = torch.where(mask, g, torch.ones_like(g))
    p_safe = torch.where(mask, p, torch.ones_like(p))
    absrel = _per_image_mean((p_safe - g_safe).abs() / g_safe, mask)
    rmse = torch.sqrt(_per_image_mean((p_safe - g_safe) ** 2, mask))
    ratio = torch.maximum(p_safe / g_safe, g_safe / p_safe.clamp_min(1e-12))
    delta1 = _per_image_mean((ratio < 1.25).double(), mask)
    return {"abs_rel": _mean_over_images(absrel), "rmse": _mean_over_images(rmse), "delta1": _mean_over_images(delta1)}


def _median(x: torch.Tensor) -> torch.Tensor:
    """Median of a non-empty 1-D tensor: the mean of the two middle values for an even count (as ``np.median``)."""
    s = x.sort().values
    return (s[(s.numel() - 1) // 2] + s[s.numel() // 2]) / 2


def median_scale(pred: torch.Tensor, target: torch.Tensor, valid=None) -> torch.Tensor:
    """``pred`` (B, 1, H, W) depth times ``median(target) / median(pred)`` of each image over its valid pixels:
    the per-image scale alignment of monocular depth evaluation (Zhou et al., CVPR 2017), which scores the
    shape of the prediction without its global scale. Medians average the two middle values for even
    counts; images without valid pixels, or with a zero median prediction, are returned unscaled."""
    mask = check_pair(pred, target, valid, 1)
    p, t = _f64(pred), _f64(target)
    out = p.clone()
    for i in range(p.shape[0]):
        m = mask[i]
        if m.any():
            mp = _median(p[i][m])
            if mp != 0:
                out[i] = p[i] * (_median(t[i][m]) / mp)
    return out


def normal_metrics(pred: torch.Tensor, target: torch.Tensor, valid=None) -> dict[str, float]:
    """Angular error in degrees over all valid pixels of the batch: mean, median (the mean of the two middle
    values for an even count, as ``np.median``) and the percentages below 11.25, 22.5 and 30 degrees.
    pred: (B, 3, H, W) (normalised inside); valid None = ``|target| > 0.5``."""
    if valid is None:
        valid = target.norm(dim=1, keepdim=True) > 0.5
    mask = check_pair(pred, target, valid, 3)
    _, angle = angle_between(_f64(pred), _f64(target))
    err = angle[mask] * DEGREES
    if err.numel() == 0:
        return {k: NAN for k in ("mean_angle", "median_angle", "within_11.25", "within_22.5", "within_30")}
    return {"mean_angle": float(err.mean()), "median_angle": float(_median(err)),
            "within_11.25": 100 * float((err < 11.25).double().mean()),
            "within_22.5": 100 * float((err < 22.5).double().mean()),
            "within_30": 100 * float((err < 30).double().mean())}


def alpha_metrics(pred: torch.Tensor, target: torch.Tensor, valid=None) -> dict[str, float]:
    """Matting errors (Rhemann et al., CVPR 2009), per image then averaged, alpha in [0, 1]:

    - ``sad``: sum of |p - g| over the valid pixels, divided by 1000 (the customary unit of matting
      benchmarks, which quote SAD in thousands);
    - ``mse``: mean of (p - g)^2 over the valid pixels;
    - ``grad``: sum over valid pixels of ``(|grad p| - |grad g|)^2`` / 1000, the gradients by forward
      differences (:func:`vision.dense.losses.image_gradients`; 0 in the last row / column). Published
      benchmarks use Gaussian-derivative gradients (sigma = 1.4), so values are not comparable with them.
    """
    mask = check_pair(pred, target, valid, 1)
    p, g = _f64(pred), _f64(target)
    n = mask.flatten(1).sum(1)
    diff = torch.where(mask, p - g, torch.zeros_like(p))
    sad = torch.where(n > 0, diff.abs().flatten(1).sum(1) / 1000, torch.full_like(n, NAN, dtype=p.dtype))
    mse = _per_image_mean((p - g) ** 2, mask)

    def mag(x):
        gx, gy = image_gradients(x)
        return torch.sqrt(gx * gx + gy * gy)

    ge = torch.where(mask, (mag(p) - mag(g)) ** 2, torch.zeros_like(p)).flatten(1).sum(1) / 1000
    ge = torch.where(n > 0, ge, torch.full_like(ge, NAN))
    return {"sad": _mean_over_images(sad), "mse": _mean_over_images(mse), "grad": _mean_over_images(ge)}


def binary_metrics(pred: torch.Tensor, target: torch.Tensor, valid=None, threshold: float = 0.5) -> dict[str, float]:
    """Foreground IoU ``|P & G| / |P | G|`` and pixel accuracy over all valid pixels of the batch; P is
    ``pred > threshold`` (pred: probabilities (B, 1, H, W)), G is ``target > 0.5``. IoU is 1 when both are empty."""
    mask = check_pair(pred, target, valid, 1)
    P, G = (pred > threshold) & mask, (target > 0.5) & mask
    n = int(mask.sum())
    if n == 0:
        return {"iou": NAN, "accuracy": NAN}
    union = int((P | G).sum())
    iou = int((P & G).sum()) / union if union else 1.0
    return {"iou": iou, "accuracy": int(((P == G) & mask).sum()) / n}


def semantic_metrics(pred: torch.Tensor, target: torch.Tensor, valid=None, num_classes: int | None = None,
                     ignore_index: int = 255) -> dict[str, float]:
    """mIoU and pixel accuracy over all valid pixels of the batch. pred, target: (B, 1, H, W) class ids.

    The IoU of class c is ``|P_c & G_c| / |P_c | G_c|``; mIoU averages it over the classes present in the
    target or the prediction on the counted pixels (union > 0), so absent classes do not count as 0 or 1.
    """
    if pred.dim() == 3:
        pred = pred[:, None]
    if target.dim() == 3:
        target = target[:, None]
    mask = check_pair(pred, target, valid, 1)
    t, p = target.long(), pred.long()
    mask = mask & (t != ignore_index)
    t, p = t[mask], p[mask]
    if t.numel() == 0:
        return {"miou": NAN, "accuracy": NAN}
    k = int(num_classes) if num_classes is not None else int(max(t.max(), p.max())) + 1
    if int(min(t.min(), p.min())) < 0 or int(max(t.max(), p.max())) >= k:
        raise ValueError(f"class ids must lie in 0..{k - 1}")
    conf = torch.bincount(t * k + p, minlength=k * k).reshape(k, k).double()
    inter = conf.diag()
    union = conf.sum(0) + conf.sum(1) - inter
    present = union > 0
    return {"miou": float((inter[present] / union[present]).mean()), "accuracy": float(inter.sum() / conf.sum())}


def albedo_metrics(pred: torch.Tensor, target: torch.Tensor, valid=None) -> dict[str, float]:
    """Mean absolute error and RMSE over valid pixels and channels, per image then averaged, and PSNR (dB,
    peak 1) of the averaged MSE."""
    mask = check_pair(pred, target, valid)
    p, g = _f64(pred), _f64(target)
    c = p.shape[1]
    l1 = _per_image_mean((p - g).abs().sum(1, keepdim=True) / c, mask)
    mse = _per_image_mean(((p - g) ** 2).sum(1, keepdim=True) / c, mask)
    m = _mean_over_images(mse)
    psnr = NAN if math.isnan(m) else (math.inf if m == 0 else -10 * math.log10(m))
    return {"l1": _mean_over_images(l1), "rmse": _mean_over_images(torch.sqrt(mse)), "psnr": psnr}


__all__ = ["depth_metrics", "normal_metrics", "alpha_metrics", "binary_metrics", "semantic_metrics",
           "albedo_metrics", "as_mask"]
