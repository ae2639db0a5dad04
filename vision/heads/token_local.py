"""The token-local linear head of ReChannel: one shared linear map from each token to its own p x p x K patch."""
from __future__ import annotations

import torch
from torch import nn


def as_token_grid(x: torch.Tensor, dim: int, grid_size=None) -> torch.Tensor:
    """Tokens as a ``(B, h, w, C)`` grid from ``(B, N, C)`` tokens plus ``grid_size=(h, w)`` (row-major:
    token ``y * w + x`` is grid cell (y, x)) or from a ``(B, C, h, w)`` feature map."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"features must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"features must be floating point, got {x.dtype}")
    if x.dim() == 3:
        if grid_size is None:
            raise ValueError("(B, N, C) tokens need grid_size=(h, w)")
        try:
            h, w = (int(v) for v in grid_size)
        except (TypeError, ValueError):
            raise ValueError(f"grid_size must be a pair (h, w), got {grid_size!r}") from None
        b, n, c = x.shape
        if h < 1 or w < 1 or n != h * w:
            raise ValueError(f"{n} tokens do not fill a grid of {h} x {w} (need N == h * w)")
        if c != dim:
            raise ValueError(f"tokens have {c} channels, the head was built for dim={dim}")
        return x.reshape(b, h, w, c)
    if x.dim() == 4:
        if grid_size is not None and tuple(int(v) for v in grid_size) != tuple(x.shape[-2:]):
            raise ValueError(f"grid_size {tuple(grid_size)} does not match the feature map's {tuple(x.shape[-2:])}")
        if x.shape[1] != dim:
            raise ValueError(f"feature map has {x.shape[1]} channels, the head was built for dim={dim}")
        if min(x.shape) == 0:
            raise ValueError(f"features are empty: shape {tuple(x.shape)}")
        return x.permute(0, 2, 3, 1)
    raise ValueError(f"features must be (B, N, C) tokens or a (B, C, h, w) map, got shape {tuple(x.shape)}")


def unpatchify(y: torch.Tensor, patch_size: int, channels: int) -> torch.Tensor:
    """``(B, h, w, p*p*K)`` per-token vectors -> ``(B, K, h*p, w*p)``: entry ``(i*p + j)*K + k`` of token
    (y, x) goes to pixel ``(y*p + i, x*p + j)`` of channel k."""
    b, h, w, _ = y.shape
    p, k = patch_size, channels
    return y.reshape(b, h, w, p, p, k).permute(0, 5, 1, 3, 2, 4).reshape(b, k, h * p, w * p)


class TokenLocalHead(nn.Module):
    r"""Token-local linear head (ReChannel, Wang et al. 2026): one shared ``nn.Linear(dim, p*p*K)`` takes
    every backbone token to its own ``p x p`` patch of K output channels, with no spatial mixing.

    Unpatchify order: for token ``t = y*w + x`` (row-major over the ``h x w`` grid), linear output
    index ``(i*p + j)*K + k`` (``0 <= i, j < p``, ``0 <= k < K``) goes to
    ``out[b, k, y*p + i, x*p + j]``; i.e. the p*p*K vector is read as a ``(p, p, K)`` array of
    (row in patch, column in patch, channel).

    Parameters: exactly ``dim*p*p*K + p*p*K`` (``dim*p*p*K`` with ``bias=False``); 49,408 for
    dim = 192, p = 16, K = 1.

    Args:
        dim: token width C.
        patch_size: p, the backbone's stride (16 for ViT / ViG).
        out_channels: K.
        bias: whether the linear map has a bias.

    Shapes: ``forward(x, grid_size=None)`` with x ``(B, N, C)`` tokens and ``grid_size=(h, w)``, or a
    ``(B, C, h, w)`` feature map -> ``(B, K, h*p, w*p)``. Computed in the parameters' dtype, returned in
    x's dtype (so bfloat16 features from a half-precision backbone work with a float32 head).

    Example:
        >>> head = TokenLocalHead(dim=192, patch_size=16, out_channels=1)
        >>> head(torch.rand(2, 192, 8, 8)).shape
        torch.Size([2, 1, 128, 128])
        >>> head(torch.rand(2, 64, 192), grid_size=(8, 8)).shape
        torch.Size([2, 1, 128, 128])
    """

    def __init__(self, dim: int, patch_size: int, out_channels: int, bias: bool = True) -> None:
        super().__init__()
        for name, v in (("dim", dim), ("patch_size", patch_size), ("out_channels", out_channels)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        self.dim, self.patch_size, self.out_channels = dim, patch_size, out_channels
        self.proj = nn.Linear(dim, patch_size * patch_size * out_channels, bias=bias)

    def forward(self, x: torch.Tensor, grid_size=None) -> torch.Tensor:
        grid = as_token_grid(x, self.dim, grid_size)
        y = self.proj(grid.to(self.proj.weight.dtype))
        return unpatchify(y, self.patch_size, self.out_channels).to(x.dtype)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, patch_size={self.patch_size}, out_channels={self.out_channels}"
