"""Training losses of the dense tasks, each over an optional boolean mask of valid pixels.

Conventions: predictions and targets are ``(B, C, H, W)``; ``valid`` is a boolean ``(B, 1, H, W)``
(or ``(B, H, W)``) mask of pixels to count, ``None`` = every pixel. Losses are computed in float32
(float64 stays float64) and are means over the counted pixels (per-image terms are averaged over the
images that have any); with no valid pixel at all they are a differentiable zero.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def work(x: torch.Tensor) -> torch.Tensor:
    return x.double() if x.dtype == torch.float64 else x.float()


def check_pair(pred: torch.Tensor, target: torch.Tensor, valid, channels: int | None = None) -> torch.Tensor:
    """Validate shapes and return the mask as a boolean (B, 1, H, W) tensor."""
    if not isinstance(pred, torch.Tensor) or pred.dim() != 4:
        raise ValueError(f"prediction must be (B, C, H, W), got "
                         f"{tuple(pred.shape) if isinstance(pred, torch.Tensor) else type(pred).__name__}")
    if not isinstance(target, torch.Tensor) or target.dim() != 4:
        raise ValueError(f"target must be (B, C, H, W), got "
                         f"{tuple(target.shape) if isinstance(target, torch.Tensor) else type(target).__name__}")
    if pred.shape[0] != target.shape[0] or pred.shape[-2:] != target.shape[-2:]:
        raise ValueError(f"prediction {tuple(pred.shape)} and target {tuple(target.shape)} must share B, H, W")
    if channels is not None and (pred.shape[1] != channels or target.shape[1] != channels):
        raise ValueError(f"prediction and target must have {channels} channels, got {pred.shape[1]} and "
                         f"{target.shape[1]}")
    return as_mask(valid, pred)


def as_mask(valid, like: torch.Tensor) -> torch.Tensor:
    b, _, h, w = like.shape
    if valid is None:
        return torch.ones(b, 1, h, w, dtype=torch.bool, device=like.device)
    if not isinstance(valid, torch.Tensor):
        raise ValueError(f"valid must be a boolean tensor or None, got {type(valid).__name__}")
    if valid.dim() == 3:
        valid = valid[:, None]
    if tuple(valid.shape) != (b, 1, h, w):
        raise ValueError(f"valid must be (B, 1, H, W) = {(b, 1, h, w)}, got {tuple(valid.shape)}")
    if valid.dtype != torch.bool:
        raise ValueError(f"valid must be a boolean mask, got {valid.dtype}")
    return valid.to(like.device)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` (B, C, H, W) over the pixels of ``mask`` (B, 1, H, W) and all channels; 0 if none."""
    m = mask.expand_as(x)
    n = m.sum()
    return torch.where(m, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum() / n.clamp_min(1)


def silog_loss(pred_log: torch.Tensor, target: torch.Tensor, valid=None, variance_focus: float = 0.85) -> torch.Tensor:
    r"""Scale-invariant log loss (Eigen, Puhrsch, Fergus, NeurIPS 2014), in the form of BTS / AdaBins.

    Per image, with ``d = pred_log - log(target)`` over its valid pixels:
    ``sqrt(mean(d^2) - variance_focus * mean(d)^2)``; averaged over the images with valid pixels.
    ``variance_focus = 1`` is fully scale invariant, 0 is the log RMSE. (No x10 factor.)

    Args:
        pred_log: (B, 1, H, W) predicted log-depth (the head's raw output).
        target: (B, 1, H, W) depth, > 0 where valid.
        valid: (B, 1, H, W) bool; None = ``target > 0``.
    """
    if valid is None:
        valid = target > 0
    mask = check_pair(pred_log, target, valid, 1)
    p, t = work(pred_log), work(target)
    d = torch.where(mask, p - torch.log(torch.where(mask, t, torch.ones_like(t))), torch.zeros_like(p))
    n = mask.flatten(1).sum(1)
    m1 = d.flatten(1).sum(1) / n.clamp_min(1)
    m2 = (d * d).flatten(1).sum(1) / n.clamp_min(1)
    per_image = torch.sqrt((m2 - variance_focus * m1 * m1).clamp_min(1e-12))
    has = n > 0
    return (per_image * has).sum() / has.sum().clamp_min(1)


def align_scale_shift(pred: torch.Tensor, target: torch.Tensor,
                      mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image, the least-squares scale s and shift t with ``s * pred + t ~ target`` on the mask's pixels
    (MiDaS, Ranftl et al., TPAMI 2022); (B,) each. Images with fewer than 2 distinct predictions get s = 0."""
    m = mask.to(pred.dtype).flatten(1)
    p, t = pred.flatten(1) * m, target.flatten(1) * m
    n = m.sum(1).clamp_min(1)
    mp, mt = p.sum(1) / n, t.sum(1) / n
    cov = ((p - mp[:, None] * m) * (t - mt[:, None] * m)).sum(1)
    var = ((p - mp[:, None] * m) ** 2).sum(1)
    s = torch.where(var > 0, cov / var.clamp_min(torch.finfo(var.dtype).tiny), torch.zeros_like(var))
    return s, mt - s * mp


def scale_shift_invariant_loss(pred: torch.Tensor, target: torch.Tensor, valid=None) -> torch.Tensor:
    r"""Affine-invariant (scale-and-shift-invariant) loss for relative depth (MiDaS, Ranftl et al., TPAMI 2022).

    Per image, the prediction is aligned to the target by the least-squares scale and shift on the valid
    pixels (:func:`align_scale_shift`, differentiable), and the loss is the mean squared residual
    ``mean((s * pred + t - target)^2)`` (MiDaS' data term; its gradient-matching term is left out),
    averaged over images. Use it in whatever space the target is given: MiDaS aligns disparity (1 / depth).

    Args: pred, target (B, 1, H, W); valid (B, 1, H, W) bool, None = all.
    """
    mask = check_pair(pred, target, valid, 1)
    p, t = work(pred), work(target)
    t = torch.where(mask, t, torch.zeros_like(t))
    s, sh = align_scale_shift(p, t, mask)
    r = (s[:, None, None, None] * p + sh[:, None, None, None] - t) ** 2
    r = torch.where(mask, r, torch.zeros_like(r))
    n = mask.flatten(1).sum(1)
    has = n > 0
    return ((r.flatten(1).sum(1) / n.clamp_min(1)) * has).sum() / has.sum().clamp_min(1)


def angle_between(pred: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, angle in radians) between 3-vectors along dim 1, (B, 1, H, W) each. Vectors are normalised
    (zero vectors stay zero); the angle is ``atan2(|a x b|, a . b)``, accurate near 0 and pi, with a
    bounded gradient at 0 (the cross norm is ``sqrt(|a x b|^2 + 1e-12)``)."""
    a = F.normalize(pred, dim=1, eps=1e-8)
    b = F.normalize(target, dim=1, eps=1e-8)
    cos = (a * b).sum(1, keepdim=True)
    cross = torch.linalg.cross(a, b, dim=1)
    sin = torch.sqrt((cross * cross).sum(1, keepdim=True) + 1e-12)
    return cos, torch.atan2(sin, cos)


def normal_loss(pred: torch.Tensor, target: torch.Tensor, valid=None, angular_weight: float = 1.0) -> torch.Tensor:
    r"""Surface-normal loss on unnormalised predicted 3-vectors: ``mean(1 - cos) + angular_weight * mean(angle)``
    over valid pixels, the angle in radians (the cosine term as in ReChannel; the angular term as in
    Bae et al., ICCV 2021).

    Args: pred (B, 3, H, W) raw head output; target (B, 3, H, W) unit normals; valid None = ``|target| > 0.5``.
    """
    if valid is None:
        valid = target.norm(dim=1, keepdim=True) > 0.5
    mask = check_pair(pred, target, valid, 3)
    cos, angle = angle_between(work(pred), work(target))
    return masked_mean(1 - cos, mask) + angular_weight * masked_mean(angle, mask)


def image_gradients(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward differences (B, C, H, W -> same size): ``gx[..., j] = x[..., j+1] - x[..., j]`` and 0 in the
    last column; ``gy`` likewise along rows."""
    gx = F.pad(x[..., :, 1:] - x[..., :, :-1], (0, 1))
    gy = F.pad(x[..., 1:, :] - x[..., :-1, :], (0, 0, 0, 1))
    return gx, gy


def gradient_pair_masks(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where a forward difference joins two valid pixels (False in the last column / row)."""
    mx = F.pad(mask[..., :, 1:] & mask[..., :, :-1], (0, 1))
    my = F.pad(mask[..., 1:, :] & mask[..., :-1, :], (0, 0, 0, 1))
    return mx, my


def gradient_matching_loss(residual: torch.Tensor, valid=None, scales: int = 4) -> torch.Tensor:
    r"""Multi-scale gradient matching of a residual (MiDaS, Ranftl et al., TPAMI 2022; Li and Snavely,
    CVPR 2018): at scales ``k = 0..scales-1`` the residual is taken at every ``2**k``-th pixel and the
    loss is ``mean|dx R_k| + mean|dy R_k|`` over the forward differences joining two valid pixels,
    averaged over the scales. It penalises wrong *changes* of the prediction (edges put in the wrong
    place or blurred), not offsets: for log-depth, ``R = pred_log - log(target)``, it is invariant to
    the global scale that SILog also forgives.

    Args: residual (B, C, H, W); valid (B, 1, H, W) bool, None = all; scales >= 1.
    """
    if isinstance(scales, bool) or not isinstance(scales, int) or scales < 1:
        raise ValueError(f"scales must be a positive integer, got {scales!r}")
    mask = as_mask(valid, residual)
    r = work(residual)
    total = r.new_zeros(())
    for k in range(scales):
        step = 2 ** k
        rk, mk = r[..., ::step, ::step], mask[..., ::step, ::step]
        gx, gy = image_gradients(rk)
        mx, my = gradient_pair_masks(mk)
        total = total + masked_mean(gx.abs(), mx) + masked_mean(gy.abs(), my)
    return total / scales


def alpha_loss(alpha: torch.Tensor, target: torch.Tensor, valid=None, gradient_weight: float = 1.0) -> torch.Tensor:
    r"""Matting loss: ``mean|alpha - target| + gradient_weight * (mean|dx alpha - dx target| + mean|dy alpha -
    dy target|)``, the gradient means over the forward differences joining two valid pixels.

    Args: alpha (B, 1, H, W) in [0, 1] (decoded); target (B, 1, H, W) in [0, 1]; valid None = all.
    """
    mask = check_pair(alpha, target, valid, 1)
    a, t = work(alpha), work(target)
    l1 = masked_mean((a - t).abs(), mask)
    if gradient_weight == 0:
        return l1
    (ax, ay), (tx, ty) = image_gradients(a), image_gradients(t)
    mx, my = gradient_pair_masks(mask)
    return l1 + gradient_weight * (masked_mean((ax - tx).abs(), mx) + masked_mean((ay - ty).abs(), my))


def binary_loss(logits: torch.Tensor, target: torch.Tensor, valid=None) -> torch.Tensor:
    """Binary cross-entropy on logits (B, 1, H, W) against a {0, 1} (or soft) target, mean over valid pixels."""
    mask = check_pair(logits, target, valid, 1)
    bce = F.binary_cross_entropy_with_logits(work(logits), work(target), reduction="none")
    return masked_mean(bce, mask)


def semantic_loss(logits: torch.Tensor, target: torch.Tensor, valid=None, ignore_index: int = 255) -> torch.Tensor:
    """Cross-entropy on logits (B, K, H, W) against class ids (B, 1, H, W) (or (B, H, W)); pixels with
    ``ignore_index`` or outside ``valid`` do not count. Mean over the counted pixels."""
    if isinstance(target, torch.Tensor) and target.dim() == 3:
        target = target[:, None]
    mask = check_pair(logits, target, valid)
    if target.shape[1] != 1:
        raise ValueError(f"semantic target must be (B, 1, H, W) class ids, got {tuple(target.shape)}")
    t = target.long()
    k = logits.shape[1]
    mask = mask & (t != ignore_index)
    bad = mask & ((t < 0) | (t >= k))
    if bool(bad.any()):
        raise ValueError(f"target holds class ids outside 0..{k - 1} (and not ignore_index={ignore_index})")
    t = torch.where(mask, t, torch.zeros_like(t))
    ce = F.cross_entropy(work(logits), t[:, 0], reduction="none")[:, None]
    return masked_mean(ce, mask)


def l1_loss(pred: torch.Tensor, target: torch.Tensor, valid=None) -> torch.Tensor:
    """Mean absolute difference over valid pixels and all channels."""
    mask = check_pair(pred, target, valid)
    if pred.shape[1] != target.shape[1]:
        raise ValueError(f"prediction has {pred.shape[1]} channels, target {target.shape[1]}")
    return masked_mean((work(pred) - work(target)).abs(), mask)


DEGREES = 180.0 / math.pi
