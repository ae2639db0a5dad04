"""Triton path of the Structure Preservation Loss ("valid" border, float32): host side of ``triton_kernels``.

Forward: horizontal moment sums (gray conversion and centring fused), vertical sums + fits + coefficient
planes + tile partials, one program to finish the loss: 3 launches, plus one mean per image for the centring
constants. Backward: 2 launches. Nothing reads a device value on the host, so the path runs inside CUDA
graphs and ``torch.compile`` without breaks. Other border modes and float64 run the PyTorch path.
"""
from __future__ import annotations

import torch
import triton

from .reference import EMPTY_WEIGHT
from .triton_kernels import BX, BY, NUM_WARPS, _finish, _hsum_adjoint, _hsum_moments, _vsum_fit, _vsum_grad

def supported(r: int, border: str) -> bool:
    """The tap loops run at any radius (cost grows as 2r+1 loads per pixel and pass); only "valid" borders."""
    return border == "valid"


def launch_grid(b: int, h: int, w: int, per_b: int = 1):
    return (triton.cdiv(w, BX), triton.cdiv(h, BY), b * per_b)


def centres(source: torch.Tensor, edited: torch.Tensor):
    """Per-image centring constants (B,): the mean of each image over channels and pixels (= its gray mean)."""
    return (source.mean((1, 2, 3), dtype=torch.float32), edited.mean((1, 2, 3), dtype=torch.float32))


def _img_args(x: torch.Tensor):
    c = x.shape[1]
    return (c, x.stride(0), x.stride(1), x.stride(2), x.stride(3), 1.0 / c)


def mask_args(w, like):
    if w is None:
        return like, (0, 0, 0)
    w = w.expand(like.shape[0], 1, *like.shape[2:])
    return w, (w.stride(0), w.stride(2), w.stride(3))


def moments(source, edited, w, cS, cE, r: int):
    """(B, 5 or 6, H, W) horizontal window sums of the centred gray moments."""
    bsz, _, h, wd = source.shape
    wt, wstr = mask_args(w, source)
    M = torch.empty((bsz, 5 if w is None else 6, h, wd), device=source.device, dtype=torch.float32)
    _hsum_moments[launch_grid(bsz, h, wd)](source, edited, wt, cS, cE, M, h, wd, r, *_img_args(source),
                                     *_img_args(edited), *wstr, MASKED=w is not None, BY=BY, BX=BX,
                                     num_warps=NUM_WARPS)
    return M


def fit(M, masked: bool, eps: float, r: int, bidirectional: bool, detach: bool, write_d: bool, nplanes: int,
        per_weight: bool):
    """Vertical sums and fits: (D map or None, planes or None, (n, 2) tile partials)."""
    bsz, _, h, wd = M.shape
    grid = launch_grid(bsz, h, wd)
    part = torch.empty((grid[2], grid[1], grid[0], 2), device=M.device, dtype=torch.float32)
    D = torch.empty((bsz, 1, h, wd), device=M.device, dtype=torch.float32) if write_d else M
    planes = torch.empty((bsz, nplanes, h, wd), device=M.device, dtype=torch.float32) if nplanes else M
    _vsum_fit[grid](M, D, planes, part, h, wd, r, float(eps), EMPTY_WEIGHT, int(bidirectional), int(detach),
                    int(write_d), nplanes, int(per_weight), MASKED=masked, BY=BY, BX=BX, num_warps=NUM_WARPS)
    return (D if write_d else None), (planes if nplanes else None), part


def finish(part):
    """(loss, 1 / sum(omega)) as 0-d device tensors."""
    loss = torch.empty((), device=part.device, dtype=torch.float32)
    invw = torch.empty((), device=part.device, dtype=torch.float32)
    _finish[(1,)](part, part.numel() // 2, loss, invw, BLOCK=1024, num_warps=4)
    return loss, invw


def adjoint(planes, g, k, r: int):
    """(B, P, H, W) horizontal window sums of ``planes * g * k``; ``g`` (B, 1, H, W) possibly stride-0, ``k`` a
    0-d device tensor or None."""
    bsz, nplanes, h, wd = planes.shape
    U = torch.empty_like(planes)
    _hsum_adjoint[launch_grid(bsz, h, wd, nplanes)](planes, g, g.stride(0), g.stride(2), g.stride(3),
                                              planes if k is None else k, int(k is not None), U, h, wd, r, nplanes,
                                              BY=BY, BX=BX, num_warps=NUM_WARPS)
    return U


def forward(source, edited, w, cS, cE, eps: float, r: int, bidirectional: bool, detach: bool, reduction: str,
            need_grad: bool, need_source_grad: bool):
    """source, edited: float32 (B, C, H, W), any strides; w: mask (1 or B, 1, H, W) or None; cS, cE: (B,)
    centring constants. Returns (loss or map, planes or None, 1 / sum(omega))."""
    M = moments(source, edited, w, cS, cE, r)
    nplanes = (5 if need_source_grad else 3) if need_grad else 0
    D, planes, part = fit(M, w is not None, eps, r, bidirectional, detach, reduction == "none", nplanes,
                          reduction == "none")
    loss, invw = finish(part)
    return (D if reduction == "none" else loss), planes, invw


def backward(grad, source, edited, w, cS, cE, planes, invw, r: int, reduction: str):
    """(d gray source / C_S or None, d gray edited / C_E), each (B, 1, H, W): the caller expands over channels."""
    bsz, nplanes, h, wd = planes.shape
    g = grad.to(torch.float32).expand(bsz, 1, h, wd)  # a scalar becomes a stride-0 view: no copy
    U = adjoint(planes, g, invw if reduction == "mean" else None, r)
    dE = torch.empty((bsz, 1, h, wd), device=planes.device, dtype=torch.float32)
    dS = torch.empty_like(dE) if nplanes == 5 else dE
    wt, wstr = mask_args(w, source)
    _vsum_grad[launch_grid(bsz, h, wd)](U, source, edited, wt, cS, cE, dS, dE, h, wd, r, nplanes,
                                  *_img_args(source), *_img_args(edited), *wstr, MASKED=w is not None,
                                  BY=BY, BX=BX, num_warps=NUM_WARPS)
    return (dS if nplanes == 5 else None), dE
