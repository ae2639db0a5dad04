"""Edge-aware refinement of any head's output: the guided filter with the image as guide."""
from __future__ import annotations

import torch
from torch import nn

from vision.kernels import guided_filter


def guided_refine(image: torch.Tensor, prediction: torch.Tensor, radius: int = 8, eps: float = 1e-3,
                  border: str = "valid") -> torch.Tensor:
    r"""Refine a dense prediction with the guided filter (He, Sun and Tang, TPAMI 2013), the image as guide.

    Every channel of ``prediction`` is replaced by its local linear fit on the image in each
    ``(2r+1)^2`` window (:func:`vision.kernels.guided_filter`), so it takes the image's edges. A
    3-channel image is a colour guide (3x3 solve per window), a 1-channel one a gray guide, other channel
    counts are averaged to gray. ``eps`` is in squared image units (images in [0, 1]); smaller keeps more
    of the image's edges. Apply it to decoded or raw outputs alike (e.g. log-depth, unnormalised
    normals, logits); the filter is linear in the prediction and differentiable.

    Args:
        image: (B, G, H, W) guide.
        prediction: (B, K, H, W), any K.
        radius: window radius.
        eps: regularisation (> 0).
        border: the guided filter's border mode (default ``"valid"``).

    Returns:
        (B, K, H, W) in ``prediction``'s dtype.

    Example:
        >>> img, pred = torch.rand(1, 3, 64, 64), torch.rand(1, 2, 64, 64)
        >>> guided_refine(img, pred, radius=4).shape
        torch.Size([1, 2, 64, 64])
    """
    for name, t in (("image", image), ("prediction", prediction)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a (B, C, H, W) tensor, got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if image.shape[0] != prediction.shape[0] or image.shape[-2:] != prediction.shape[-2:]:
        raise ValueError(f"image {tuple(image.shape)} and prediction {tuple(prediction.shape)} must share batch, "
                         "height and width")
    guide = image if image.shape[1] in (1, 3) else image.mean(1, keepdim=True)
    return guided_filter(guide, prediction, radius, eps, border=border)


class GuidedRefine(nn.Module):
    r"""``nn.Module`` form of :func:`guided_refine` (guided filter, He, Sun and Tang, TPAMI 2013).

    Shapes: image (B, G, H, W), prediction (B, K, H, W) -> (B, K, H, W).

    Example:
        >>> refine = GuidedRefine(radius=8, eps=1e-3)
        >>> refine(torch.rand(1, 3, 64, 64), torch.rand(1, 1, 64, 64)).shape
        torch.Size([1, 1, 64, 64])
    """

    def __init__(self, radius: int = 8, eps: float = 1e-3, border: str = "valid") -> None:
        super().__init__()
        self.radius, self.eps, self.border = radius, eps, border

    def forward(self, image: torch.Tensor, prediction: torch.Tensor) -> torch.Tensor:
        return guided_refine(image, prediction, self.radius, self.eps, self.border)

    def extra_repr(self) -> str:
        return f"radius={self.radius}, eps={self.eps}, border={self.border!r}"
