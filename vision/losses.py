"""Losses that keep an edit faithful to its source: structure (SPL), colour (chroma), and both together.

From "Edge-Aware Image Manipulation via Diffusion Models with a Novel Structure-Preservation Loss"
(Gong, Ryu, Ok, Cho, WACV 2026): the Structure Preservation Loss measures how far an edit departs from
a locally affine function of its source (``vision.kernels.structure_loss``); the Colour Preservation
Loss is the MSE of the chroma channels (Cb, Cr of YCbCr), so luminance may change while hue stays.

    >>> src, edit = torch.rand(1, 3, 64, 64), torch.rand(1, 3, 64, 64)
    >>> spl = StructurePreservationLoss()(src, edit)
    >>> cpl = ColorPreservationLoss()(src, edit)
    >>> total = PreservationLoss(spl_weight=1e4, color_weight=1e3)(src, edit)
"""
from __future__ import annotations

import torch
from torch import nn

from vision.kernels import structure_loss
from vision.kernels.runtime import backend_for
from vision.kernels.spl.op import check_mask
from vision.kernels.validate import check_all_finite, check_image
from vision.kernels.spl.config import SPLConfig
from vision.kernels.spl.defaults import SPL_DEFAULTS


def _check_pair(reference: torch.Tensor, edited: torch.Tensor, what: str) -> None:
    check_image(reference, "reference", channels=(3,))
    check_image(edited, "edited", channels=(3,))
    if reference.shape != edited.shape:
        raise ValueError(f"{what}: reference {tuple(reference.shape)} and edited {tuple(edited.shape)} "
                         "must have the same shape")
    if reference.device != edited.device:
        raise ValueError(f"{what}: reference is on {reference.device} but edited on {edited.device}")
    check_all_finite((reference, "reference"), (edited, "edited"), backend=_checks(edited))


def _checks(x: torch.Tensor) -> str:
    """Which data checks apply: those of the backend the SPL kernels run on for ``x`` (none by default on a GPU,
    where reading values stalls the device), and none inside a compiled graph."""
    # not an engine choice (the colour loss runs the same code on every backend): data_checks' may-we-read question
    return "triton" if torch.compiler.is_compiling() else backend_for(x)


def color_preservation_loss(reference: torch.Tensor, edited: torch.Tensor,
                            mask: torch.Tensor | None = None) -> torch.Tensor:
    r"""Chroma MSE: mean of (Cb_e - Cb_r)^2 and (Cr_e - Cr_r)^2 over the pixels (weighted by ``mask``).

    YCbCr is kornia's (``kornia.color.rgb_to_ycbcr``, ITU-R BT.601). Luminance Y is left out, so a
    brightness or tone change costs nothing while a hue or saturation change does.

    Args:
        reference, edited: (B, 3, H, W) RGB in [0, 1].
        mask: optional weights in [0, 1], (H, W) or (1 or B, 1, H, W): where the colours must stay.

    Returns:
        A scalar tensor. ``sum w (dCb^2 + dCr^2) / (2 sum w)``; 0 when the mask is all zero.

    Example:
        >>> x = torch.rand(1, 3, 32, 32)
        >>> float(color_preservation_loss(x, 0.5 * x)) > 0, float(color_preservation_loss(x, x))
        (True, 0.0)
    """
    from kornia.color import rgb_to_ycbcr  # lazy: kornia loads slowly; only this path needs it

    _check_pair(reference, edited, "color_preservation_loss")
    d = rgb_to_ycbcr(edited)[:, 1:] - rgb_to_ycbcr(reference)[:, 1:]
    sq = d * d
    if mask is None:
        return sq.mean()
    m = check_mask(mask, edited, _checks(edited)).to(sq.dtype)
    total = (m * sq).sum()
    weight = m.expand(sq.shape[0], 1, *sq.shape[2:]).sum() * 2.0
    return torch.where(weight > 0, total / weight.clamp_min(1e-30), total * 0.0)


class StructurePreservationLoss(nn.Module):
    r"""``nn.Module`` form of :func:`vision.kernels.structure_loss` (Gong et al., WACV 2026).

    In every (2r+1)^2 window of the gray images the edit is fitted as ``a * source + b``; the loss is
    the mean squared residual (plus the reverse fit when ``bidirectional``), averaged over windows.

    Args:
        radius: window radius (default 5). eps: ridge term (default 1e-4, for images in [0, 1]).
        bidirectional: also fit the source from the edit (default True).
        detach_coefficients: stop-gradient a, b as the published code (default True).
        reduction: ``"mean"`` or ``"none"`` (the (B, 1, H, W) residual map).
        border: ``"valid"`` (default) or a padded mode.

    Shapes: source, edited (B, 1 or 3, H, W); mask (H, W) or (1 or B, 1, H, W) in [0, 1].

    Example:
        >>> loss = StructurePreservationLoss(radius=5)
        >>> src = torch.rand(1, 3, 64, 64)
        >>> float(loss(src, 0.8 * src + 0.1)) < 1e-4
        True
    """

    def __init__(self, radius: int = SPL_DEFAULTS.radius, eps: float = SPL_DEFAULTS.eps, bidirectional: bool = True,
                 detach_coefficients: bool = True, reduction: str = "mean", border: str = "valid") -> None:
        super().__init__()
        self.radius, self.eps, self.bidirectional = radius, eps, bidirectional
        self.detach_coefficients, self.reduction, self.border = detach_coefficients, reduction, border

    def forward(self, source: torch.Tensor, edited: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return structure_loss(source, edited, self.radius, self.eps, mask, self.bidirectional,
                              self.detach_coefficients, self.reduction, self.border)

    def extra_repr(self) -> str:
        return (f"radius={self.radius}, eps={self.eps}, bidirectional={self.bidirectional}, "
                f"detach_coefficients={self.detach_coefficients}, reduction={self.reduction!r}")


class ColorPreservationLoss(nn.Module):
    r"""``nn.Module`` form of :func:`color_preservation_loss`: chroma (Cb, Cr) MSE between two RGB images.

    Example:
        >>> x = torch.rand(1, 3, 32, 32)
        >>> float(ColorPreservationLoss()(x, x + 0.1)) < 1e-12  # a uniform brightening keeps the chroma
        True
    """

    def forward(self, reference: torch.Tensor, edited: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return color_preservation_loss(reference, edited, mask)


class PreservationLoss(nn.Module):
    r"""The paper's composite loss: ``spl_weight * SPL(source, edited) + color_weight * CPL(reference, edited)``.

    Each term has its own mask (``spl_mask``, ``color_mask``; None = whole image). The colour
    reference defaults to the source (keep the input's colours, as the paper's pipeline); pass the
    original edit as ``color_reference`` to keep the edit's colours instead (what
    :func:`vision.restore_structure` does). The settings are one :class:`vision.kernels.spl.config.SPLConfig`
    (``config``, default the published code's: weights 1e4 and 1e3, radius 5, eps 1e-4, two-way fit); the keyword
    settings change single ones (None: keep).

    Example:
        >>> loss = PreservationLoss(spl_weight=1e4, color_weight=1e3)
        >>> src, edit = torch.rand(1, 3, 64, 64), torch.rand(1, 3, 64, 64)
        >>> loss(src, edit).shape, sorted(loss.terms(src, edit))
        (torch.Size([]), ['color', 'structure'])
    """

    def __init__(self, spl_weight: float | None = None, color_weight: float | None = None, radius: int | None = None,
                 eps: float | None = None, bidirectional: bool | None = None, detach_coefficients: bool = True, *,
                 config: SPLConfig | None = None) -> None:
        super().__init__()
        # the keyword settings (None: keep) change ``config`` (default: the published settings); checked there
        self.config = cfg = SPLConfig.build(config, spl_weight=spl_weight, color_weight=color_weight, radius=radius,
                                            eps=eps, bidirectional=bidirectional)
        self.spl_weight, self.color_weight = cfg.spl_weight, cfg.color_weight
        self.structure = StructurePreservationLoss(cfg.radius, cfg.eps, cfg.bidirectional, detach_coefficients)
        self.color = ColorPreservationLoss()

    def terms(self, source, edited, color_reference=None, spl_mask=None, color_mask=None) -> dict:
        """The unweighted terms: ``{"structure": SPL, "color": CPL}``."""
        ref = source if color_reference is None else color_reference
        out = {"structure": self.structure(source, edited, spl_mask)}
        out["color"] = (self.color(ref, edited, color_mask) if edited.shape[1] == 3
                        else edited.new_zeros((), dtype=out["structure"].dtype))
        return out

    def forward(self, source, edited, color_reference=None, spl_mask=None, color_mask=None) -> torch.Tensor:
        t = self.terms(source, edited, color_reference, spl_mask, color_mask)
        return self.spl_weight * t["structure"] + self.color_weight * t["color"]

    def extra_repr(self) -> str:
        return f"spl_weight={self.spl_weight:g}, color_weight={self.color_weight:g}"
