"""Token-local head whose tokens predict local affine maps of the image instead of raw values."""
from __future__ import annotations

import torch
from torch import nn

from vision.kernels import local_linear_apply

from .token_local import TokenLocalHead, as_token_grid

GUIDE_STD_FLOOR = 1e-2   # std floor of the guide standardisation, in image units (images in [0, 1])
SLOPE_INIT = 0.1         # slope rows start at this fraction of nn.Linear's default init
_APPLY_CHANNELS = 4      # local_linear_apply takes at most 4 target channels per call


def standardize_guide(image: torch.Tensor, floor: float = GUIDE_STD_FLOOR) -> torch.Tensor:
    """Per-image, per-channel standardisation ``(I - mean) / sqrt(var + floor**2)`` over H and W, in
    float32 (float64 stays float64). The statistics are constants (detached): they only set the scale
    at which the head's slopes live. The floor keeps flat channels at ~0 instead of amplifying noise."""
    work = torch.float64 if image.dtype == torch.float64 else torch.float32
    g = image.to(work)
    mean = g.detach().mean((2, 3), keepdim=True)
    var = g.detach().var((2, 3), keepdim=True, unbiased=False)
    return (g - mean) / torch.sqrt(var + floor ** 2)


class LocalLinearReadout(nn.Module):
    r"""Local-linear readout: every token predicts, for its own patch, the coefficients of an affine map of
    the image's pixels, so the output follows the image's edges at full resolution with no decoder.

    Token (y, x) predicts, per output channel k, slopes ``a[k, 0..G-1]`` and an intercept ``b[k]``
    (``K x (G + 1)`` numbers) from one shared ``nn.Linear(dim, K*(G+1))``. The coefficient grid
    ``(B, K, G+1, h, w)`` sits at the patch centres ``((y + 1/2) p - 1/2, (x + 1/2) p - 1/2)`` and is
    blended bilinearly across patch borders (``align_corners=False``; edge values beyond the outer
    centres) by :func:`vision.kernels.local_linear_apply` with ``scale=p``:

        ``out[k](X) = sum_g up(a[k, g])(X) * guide[g](X) + up(b[k])(X)``

    where ``guide`` is the image standardised per image and channel (:func:`standardize_guide`:
    ``(I - mean) / sqrt(var + 1e-2**2)``). Linear output index ``k*(G+1) + g`` is coefficient g of
    channel k (``g = G``: the intercept). This is the guided filter's local linear model (He, Sun and
    Tang, TPAMI 2013) with the coefficients read out of the backbone's tokens instead of fitted.

    With ``detail=True`` a plain :class:`TokenLocalHead` (ReChannel, Wang et al. 2026) is added, so the
    head is a strict superset of the plain token-local head (zero coefficients give exactly it).

    Initialisation: intercept rows use ``nn.Linear``'s default init, slope rows the same scaled by 0.1
    and zero bias, so at init the output is close to the bilinearly blended per-token intercept (plus
    the detail term).

    Parameters: ``dim*K*(G+1) + K*(G+1)`` for the coefficients, plus ``dim*p*p*K + p*p*K`` with
    ``detail=True`` (no bias terms with ``bias=False``); for dim = 192, p = 16, K = 1, G = 3:
    772 + 49,408 = 50,180.

    Args:
        dim: token width C.
        patch_size: p, the backbone's stride.
        out_channels: K.
        guide_channels: G, the image's channels (3 for RGB; at most 8).
        detail: add the plain token-local term.
        bias: biases in the linear maps.
        cells: c (dividing p): each token predicts c x c sets of coefficients, one per (p/c)-pixel cell of its
            patch (linear output ``((i*c + j)*K + k)*(G+L+1) + g`` is cell (i, j)), blended at scale p/c; the
            coefficients may then change inside a patch. ``c*c*K*(G+L+1)*(dim+1)`` coefficient parameters.
        learned_guides: L extra guide channels computed from the standardised image by two 3 x 3
            convolutions (width 16, GELU, tanh-bounded), appended after the G image channels; G + L <= 8.

    Shapes: ``forward(x, image, grid_size=None)``: x ``(B, N, C)`` tokens with ``grid_size=(h, w)`` or a
    ``(B, C, h, w)`` map; image ``(B, G, h*p, w*p)`` -> ``(B, K, h*p, w*p)`` in x's dtype.

    Example:
        >>> head = LocalLinearReadout(dim=192, patch_size=16, out_channels=1)
        >>> head(torch.rand(2, 192, 8, 8), torch.rand(2, 3, 128, 128)).shape
        torch.Size([2, 1, 128, 128])
    """

    def __init__(self, dim: int, patch_size: int, out_channels: int, guide_channels: int = 3, detail: bool = True,
                 bias: bool = True, cells: int = 1, learned_guides: int = 0) -> None:
        super().__init__()
        for name, v in (("dim", dim), ("patch_size", patch_size), ("out_channels", out_channels),
                        ("guide_channels", guide_channels), ("cells", cells)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if isinstance(learned_guides, bool) or not isinstance(learned_guides, int) or learned_guides < 0:
            raise ValueError(f"learned_guides must be a non-negative integer, got {learned_guides!r}")
        if guide_channels + learned_guides > 8:
            raise ValueError(f"guide_channels + learned_guides must be at most 8 (local_linear_apply's limit), got "
                             f"{guide_channels} + {learned_guides}")
        if patch_size % cells:
            raise ValueError(f"cells ({cells}) must divide patch_size ({patch_size})")
        self.dim, self.patch_size, self.cells = dim, patch_size, cells
        self.out_channels, self.guide_channels, self.learned_guides = out_channels, guide_channels, learned_guides
        g1 = guide_channels + learned_guides + 1
        self.coeffs = nn.Linear(dim, cells * cells * out_channels * g1, bias=bias)
        with torch.no_grad():
            w = self.coeffs.weight.view(cells * cells, out_channels, g1, dim)
            w[:, :, :g1 - 1].mul_(SLOPE_INIT)
            if bias:
                self.coeffs.bias.view(cells * cells, out_channels, g1)[:, :, :g1 - 1].zero_()
        self.guide_net = _GuideNet(guide_channels, learned_guides) if learned_guides else None
        self.detail = TokenLocalHead(dim, patch_size, out_channels, bias=bias) if detail else None

    def coefficient_grid(self, x: torch.Tensor, grid_size=None) -> torch.Tensor:
        """The per-cell coefficients as ``(B, K, G+1, h*c, w*c)`` (slopes first, intercept last; c = ``cells``)."""
        grid = as_token_grid(x, self.dim, grid_size)
        b, h, w, _ = grid.shape
        c, g1 = self.cells, self.guide_channels + self.learned_guides + 1
        out = self.coeffs(grid.to(self.coeffs.weight.dtype)).reshape(b, h, w, c, c, self.out_channels, g1)
        return out.permute(0, 5, 6, 1, 3, 2, 4).reshape(b, self.out_channels, g1, h * c, w * c)

    def guide(self, image: torch.Tensor) -> torch.Tensor:
        """The guide the coefficients multiply: the standardised image, then the learned channels if any."""
        g = standardize_guide(image)
        if self.guide_net is None:
            return g
        return torch.cat([g, self.guide_net(g.to(self.guide_net.weight_dtype)).to(g.dtype)], 1)

    def forward(self, x: torch.Tensor, image: torch.Tensor, grid_size=None) -> torch.Tensor:
        grid = as_token_grid(x, self.dim, grid_size)
        b, h, w, _ = grid.shape
        p = self.patch_size
        if not isinstance(image, torch.Tensor) or image.dim() != 4 or not image.is_floating_point():
            raise ValueError(f"image must be a floating-point (B, G, H, W) tensor, got "
                             f"{tuple(image.shape) if isinstance(image, torch.Tensor) else type(image).__name__}")
        if tuple(image.shape[:2]) != (b, self.guide_channels) or tuple(image.shape[-2:]) != (h * p, w * p):
            raise ValueError(f"image {tuple(image.shape)} does not fit {b} x {h} x {w} tokens: need "
                             f"({b}, {self.guide_channels}, {h * p}, {w * p})")
        coeffs = self.coefficient_grid(grid.permute(0, 3, 1, 2))
        guide = self.guide(image)
        out = torch.cat([local_linear_apply(guide, coeffs[:, i:i + _APPLY_CHANNELS], scale=p // self.cells)
                         for i in range(0, self.out_channels, _APPLY_CHANNELS)], 1)
        if self.detail is not None:
            out = out + self.detail(grid.permute(0, 3, 1, 2)).to(out.dtype)
        return out.to(x.dtype)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, patch_size={self.patch_size}, out_channels={self.out_channels}, "
                f"guide_channels={self.guide_channels}, cells={self.cells}, learned_guides={self.learned_guides}")


class _GuideNet(nn.Module):
    """Learned full-resolution guide channels: two 3 x 3 convolutions of the standardised image, tanh-bounded."""

    def __init__(self, in_channels: int, out_channels: int, width: int = 16) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1), nn.GELU(),
                                 nn.Conv2d(width, out_channels, 3, padding=1), nn.Tanh())

    @property
    def weight_dtype(self) -> torch.dtype:
        return self.net[0].weight.dtype

    def forward(self, g: torch.Tensor) -> torch.Tensor:
        return self.net(g)
