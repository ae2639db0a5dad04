"""Where a render buffer lies and how it is laid out: NumPy or torch, HW / HWC / BCHW, CPU or device.

Every buffer is a NumPy array or a torch tensor: 2-D ``(H, W)`` (one channel), 3-D ``(H, W, C)`` (HWC, what
EXR readers return) or 4-D ``(B, C, H, W)``. The denoised result comes back in the kind (NumPy or torch) and
layout of ``color``. :func:`host_reads` and :func:`cpu_path` say which code a tensor takes.
"""
from __future__ import annotations

import numpy as np
import torch

from vision.data.fields import CHANNELS
from vision.kernels import runtime  # looked up when called: a backend forced on the package reaches here


def to_bchw(x, name: str, channels: int | None = None) -> torch.Tensor:
    """``x`` (NumPy or torch, HW / HWC / BCHW) as a float32 ``(B, C, H, W)`` tensor (a view where possible)."""
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "fiu":
            raise ValueError(f"{name} must be a numeric array, got dtype {x.dtype}")
        t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    elif isinstance(x, torch.Tensor):
        if x.is_meta:  # a shape without values: the repairs and range checks read values
            raise ValueError(f"{name} is a meta tensor (a shape without values); the denoiser reads its values: "
                             "pass it on the CPU or a GPU")
        if not (x.dtype.is_floating_point or x.dtype in (torch.uint8, torch.int32, torch.int64)):
            raise ValueError(f"{name} must be a float tensor, got {x.dtype}")
        t = x.float() if x.dtype != torch.float64 else x
    else:
        raise ValueError(f"{name} must be a NumPy array or a torch tensor, got {type(x).__name__}")
    if t.dim() == 2:
        t = t[None, None]
    elif t.dim() == 3:
        t = t.permute(2, 0, 1)[None]
    elif t.dim() != 4:
        raise ValueError(f"{name} must be (H, W), (H, W, C) or (B, C, H, W), got shape {tuple(t.shape)}")
    if min(t.shape) == 0:
        raise ValueError(f"{name} is empty: shape {tuple(t.shape)}")
    if channels is not None and t.shape[1] != channels:
        if channels == 1 and t.shape[1] in (3, 4) and CHANNELS.get(name) == 1:
            t = t[:, :1]  # a gray buffer stored as RGB: all channels equal by construction
        elif t.shape[1] == 4 and channels == 3:
            t = t[:, :3]  # RGBA: drop alpha
        else:
            raise ValueError(f"{name} must have {channels} channel(s), got {t.shape[1]} (shape {tuple(x.shape)})")
    return t


def like(out: torch.Tensor, template):
    """``out`` (B, C, H, W) converted back to the kind and layout of ``template``."""
    nd = template.ndim if isinstance(template, np.ndarray) else template.dim()
    if nd == 3:
        out = out[0].permute(1, 2, 0)
    elif nd == 2:
        out = out[0, 0]
    if isinstance(template, np.ndarray):
        # one copy at most: none when ``out`` already lies in the template's layout (channels-last for HWC)
        return np.ascontiguousarray(out.detach().cpu().numpy(), dtype=np.float32)
    return out.to(dtype=template.dtype if template.dtype.is_floating_point else torch.float32,
                  device=template.device)


def host_reads(t: torch.Tensor) -> bool:
    """Whether the denoiser may read ``t``'s values on the host: :func:`vision.kernels.runtime.data_checks` for
    the backend its ops run with (by default yes for CPU tensors on the PyTorch path; no on CUDA or the Triton
    path, where every read stalls the GPU and breaks CUDA graph capture; ``VISION_CHECKS=on`` allows it)."""
    if t.is_meta:  # no values to read: refused by name where the buffer is taken in (to_bchw)
        return False
    # a data_checks question (may values be read on the host), not an engine choice: engines are registry paths
    return runtime.data_checks(runtime.backend_for(t))


def cpu_path(t: torch.Tensor) -> bool:
    """Whether ``t`` takes the denoiser's CPU-specialised code (OpenCV, numba loops, bands of rows): a CPU tensor on
    the PyTorch backend. On the Triton path, interpreted on CPU, the code is the one CUDA runs. The stages' engine
    choices ask it inside their registry paths' ``supports`` (:mod:`.engines`), not at their call sites."""
    return t.device.type == "cpu" and runtime.backend_for(t) == "torch"


def dense(t: torch.Tensor) -> torch.Tensor:
    """``t`` or its (B, H, W, C) permutation, whichever walks memory in order (what whole-tensor reductions
    want: over an HWC-backed (B, C, H, W) view they are about 5x slower)."""
    if t.dim() == 4 and not t.is_contiguous() and t.permute(0, 2, 3, 1).is_contiguous():
        return t.permute(0, 2, 3, 1)
    return t


def check_sizes(buffers: dict[str, torch.Tensor], size: tuple[int, int], batch: int) -> None:
    for name, t in buffers.items():
        if t is None:
            continue
        if tuple(t.shape[-2:]) != tuple(size):
            raise ValueError(f"{name} is {t.shape[-2]}x{t.shape[-1]} (HxW) but the guides are {size[0]}x{size[1]}")
        if t.shape[0] not in (1, batch):
            raise ValueError(f"{name} has batch {t.shape[0]}, color has {batch}")
