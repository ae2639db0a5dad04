"""A small DPT-style decoder (reassemble, fusion with residual conv units, conv head): the baseline to beat on cost."""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

LEVEL_STRIDES = (4, 8, 16, 32)


class ResidualConvUnit(nn.Module):
    """``x + conv3x3(relu(conv3x3(relu(x))))`` (DPT's RCU, without batch norm)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(F.relu(self.conv1(F.relu(x))))


class FusionBlock(nn.Module):
    """Adds the coarser path (bilinearly upsampled to this level's size) to the RCU-refined skip, refines
    the sum with a second RCU and mixes it with a 1x1 conv."""

    def __init__(self, channels: int, has_skip: bool = True) -> None:
        super().__init__()
        self.skip_unit = ResidualConvUnit(channels) if has_skip else None
        self.unit = ResidualConvUnit(channels)
        self.out = nn.Conv2d(channels, channels, 1)

    def forward(self, skip: torch.Tensor, coarse: torch.Tensor | None = None) -> torch.Tensor:
        x = self.skip_unit(skip) if self.skip_unit is not None else skip
        if coarse is not None:
            x = x + F.interpolate(coarse, size=skip.shape[-2:], mode="bilinear", align_corners=False)
        return self.out(self.unit(x))


def _resample(channels: int, in_stride: int, out_stride: int) -> nn.Module:
    """Stride ``in_stride`` -> ``out_stride``: transposed conv (kernel = stride = factor) to go finer,
    3x3 conv with stride = factor to go coarser, identity when equal."""
    if in_stride == out_stride:
        return nn.Identity()
    if in_stride > out_stride:
        f = in_stride // out_stride
        if f * out_stride != in_stride:
            raise ValueError(f"cannot resample stride {in_stride} to {out_stride} by an integer factor")
        return nn.ConvTranspose2d(channels, channels, f, stride=f)
    f = out_stride // in_stride
    if f * in_stride != out_stride:
        raise ValueError(f"cannot resample stride {in_stride} to {out_stride} by an integer factor")
    return nn.Conv2d(channels, channels, 3, stride=f, padding=1)


class DPTHead(nn.Module):
    r"""DPT-style dense decoder (Ranftl, Bochkovskiy, Koltun, "Vision Transformers for Dense Prediction",
    ICCV 2021), written small: the baseline the token-local heads are measured against.

    1. Reassemble: feature map i goes through a 1x1 projection to ``features`` channels, is resampled
       from its stride ``in_strides[i]`` to stride ``(4, 8, 16, 32)[i]`` (transposed conv with kernel =
       stride = factor to go finer, a 3x3 stride-factor conv to go coarser, nothing when equal) and a
       3x3 conv. For ViT / ViG (all maps at stride 16) that is DPT's x4 up, x2 up, identity, x2 down; for
       hierarchical backbones (strides 4, 8, 16, 32) only projections and 3x3 convs.
    2. Fusion, coarse to fine: each level adds the coarser path, bilinearly upsampled, to its own map
       refined by a residual conv unit, then a second residual conv unit and a 1x1 conv.
    3. Head: 3x3 conv to ``features // 2``, bilinear upsampling from stride 4 to the image size, 3x3 conv
       to 32, ReLU, 1x1 conv to K.

    Args:
        in_dims: channels of the four feature maps (e.g. ``model.feature_info.channels()``).
        out_channels: K.
        features: width of the decoder.
        patch_size: the backbone's stride; the default stride of every input map.
        in_strides: the four maps' strides (e.g. ``model.feature_info.reduction()``), default
            ``(patch_size,) * 4``. The forward pass checks them against ``image_size / h_i``.

    Shapes: ``forward(features, image_size)``: a list of four ``(B, C_i, h_i, w_i)`` maps and the image's
    ``(H, W)`` -> ``(B, K, H, W)``, computed in the parameters' dtype, returned in the maps' dtype.

    Example:
        >>> head = DPTHead([192] * 4, out_channels=1)
        >>> feats = [torch.rand(2, 192, 8, 8) for _ in range(4)]
        >>> head(feats, (128, 128)).shape
        torch.Size([2, 1, 128, 128])
    """

    def __init__(self, in_dims: Sequence[int], out_channels: int, features: int = 64, patch_size: int = 16,
                 in_strides: Sequence[int] | None = None) -> None:
        super().__init__()
        in_dims = [int(d) for d in in_dims]
        if len(in_dims) != 4 or min(in_dims) < 1:
            raise ValueError(f"in_dims must list four positive channel counts, got {in_dims}")
        if out_channels < 1 or features < 2:
            raise ValueError(f"need out_channels >= 1 and features >= 2, got {out_channels}, {features}")
        strides = [int(s) for s in (in_strides if in_strides is not None else (patch_size,) * 4)]
        if len(strides) != 4 or min(strides) < 1:
            raise ValueError(f"in_strides must list four positive strides, got {strides}")
        self.in_dims, self.in_strides, self.out_channels, self.features = in_dims, strides, out_channels, features
        self.reassemble = nn.ModuleList(
            nn.Sequential(nn.Conv2d(d, features, 1), _resample(features, s, t),
                          nn.Conv2d(features, features, 3, padding=1, bias=False))
            for d, s, t in zip(in_dims, strides, LEVEL_STRIDES))
        self.fusion = nn.ModuleList(FusionBlock(features, has_skip=i < 3) for i in range(4))
        self.head = nn.ModuleDict(dict(
            conv=nn.Conv2d(features, features // 2, 3, padding=1),
            refine=nn.Conv2d(features // 2, 32, 3, padding=1),
            out=nn.Conv2d(32, out_channels, 1)))

    def forward(self, features: Sequence[torch.Tensor], image_size) -> torch.Tensor:
        if not isinstance(features, (list, tuple)) or len(features) != 4:
            raise ValueError(f"features must be a list of four (B, C, h, w) maps, got {type(features).__name__}"
                             f"{'' if not isinstance(features, (list, tuple)) else f' of {len(features)}'}")
        try:
            H, W = (int(v) for v in image_size)
        except (TypeError, ValueError):
            raise ValueError(f"image_size must be (H, W), got {image_size!r}") from None
        dtype = self.head["out"].weight.dtype
        for i, (f, d, s) in enumerate(zip(features, self.in_dims, self.in_strides)):
            if not isinstance(f, torch.Tensor) or f.dim() != 4 or f.shape[1] != d:
                raise ValueError(f"features[{i}] must be (B, {d}, h, w), got "
                                 f"{tuple(f.shape) if isinstance(f, torch.Tensor) else type(f).__name__}")
            if f.shape[0] != features[0].shape[0]:
                raise ValueError("all feature maps must share the batch size")
            if round(H / f.shape[-2]) != s or round(W / f.shape[-1]) != s:
                raise ValueError(f"features[{i}] is {f.shape[-2]}x{f.shape[-1]} for a {H}x{W} image (stride about "
                                 f"{H / f.shape[-2]:.3g}), but the head was built for stride {s}: pass in_strides")
        maps = [block(f.to(dtype)) for block, f in zip(self.reassemble, features)]
        x = self.fusion[3](maps[3])
        for i in (2, 1, 0):
            x = self.fusion[i](maps[i], x)
        x = self.head["conv"](x)
        x = F.interpolate(x, size=(H, W), mode="bilinear", align_corners=False)
        x = self.head["out"](F.relu(self.head["refine"](x)))
        return x.to(features[0].dtype)

    def extra_repr(self) -> str:
        return f"in_dims={self.in_dims}, in_strides={self.in_strides}, out_channels={self.out_channels}"
