"""Triton path of the guided filter: two fused kernels per call.

The forward runs the sliding-window kernels of ``sliding.py`` (gray guide) and ``sliding_color.py``
(colour guide); the tile kernels below (``_fit_*_kernel``, ``_apply_kernel``) are the previous tile-based
forward. The fused backward (``triton_backward.py``, ``triton_backward_color.py``) walks like the forward.

K1 (``_fit_*_kernel``): load guide and src tiles with a 2R halo, form every window moment in
registers (see ``box/triton_path.py`` for the tile scheme), solve for a and b (gray: one division;
colour: 3x3 cofactor inverse per pixel), store a and b. K2 (``_apply_kernel``): box-average a and b
and either apply them to the guide (q = mean(a) . I + mean(b)) or store the averages (fast guided
filter, which applies them after a bilinear upsample). Each tile is centred on its own mean before
any second moment is formed; the shift is undone exactly in b.

Training ("valid" border, q output): the forward also keeps mean(a), and the backward is two more
fused sliding-window kernels (``triton_backward.py``). Other cases keep the window statistics by running the PyTorch
path's formulas on the Triton box kernels, and their backward is the PyTorch path's closed form with
every adjoint box filter a Triton kernel.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
import triton
import triton.language as tl

from ..box import triton_path as box
from ..box.triton_index import window_count
from ..box.triton_path import MODES, tile_box_sum, tile_mean, tile_program, tile_shape
from . import torch_path, triton_backward

TRITON_BOX = SimpleNamespace(mean=box.box_mean, adjoint=box.box_mean_adjoint)


@triton.jit
def _counts(oy, ox, H, W, R: tl.constexpr, MODE: tl.constexpr):
    if MODE == 0:
        n = (window_count(oy, H, R) * window_count(ox, W, R)).to(tl.float32)
    else:
        n = (oy * 0 + (2 * R + 1) * (2 * R + 1)).to(tl.float32)
    return tl.maximum(n, 1.0)


@triton.jit
def _load_centred(ptr, offs, inside):
    t = tl.load(ptr + offs, mask=inside, other=0.0).to(tl.float32)
    c = tile_mean(t, inside)
    return tl.where(inside, t - c, 0.0), c


@triton.jit
def _tile_scale(t):
    """1 for ordinary data; the tile's largest centred magnitude when squares would leave float32's range.
    Dividing the guide by s and eps by s^2 is the same filter (a scales by 1/s, b is unchanged)."""
    m = tl.max(tl.max(tl.abs(t), axis=1), axis=0)
    return tl.where(m > 4294967296.0, m, 1.0)


@triton.jit
def _fit_gray_kernel(I_ptr, p_ptr, a_ptr, b_ptr, eps_ptr, C, H, W, R: tl.constexpr, MODE: tl.constexpr,
                     TH: tl.constexpr, TW: tl.constexpr):
    pc, i, j, offs, inside, oy, ox, keep = tile_program(H, W, R, MODE, TH, TW)
    bi = pc // C
    I, cI = _load_centred(I_ptr + bi * H * W, offs, inside)
    p, cp = _load_centred(p_ptr + pc * H * W, offs, inside)
    sc = _tile_scale(I)
    I = I / sc
    inv_n = 1.0 / _counts(oy, ox, H, W, R, MODE)
    mI = tile_box_sum(I, R, TH, TW) * inv_n
    mp = tile_box_sum(p, R, TH, TW) * inv_n
    var = tl.maximum(tile_box_sum(I * I, R, TH, TW) * inv_n - mI * mI, 0.0)
    cov = tile_box_sum(I * p, R, TH, TW) * inv_n - mI * mp
    eps = tl.load(eps_ptr + bi)
    a = cov / (var * sc + eps / sc)
    b = mp + cp - a * (mI * sc + cI)
    out = pc * H * W + oy * W + ox
    tl.store(a_ptr + out, a, mask=keep)
    tl.store(b_ptr + out, b, mask=keep)


@triton.jit
def _fit_color_kernel(I_ptr, p_ptr, a_ptr, b_ptr, eps_ptr, C, H, W, R: tl.constexpr, MODE: tl.constexpr,
                      TH: tl.constexpr, TW: tl.constexpr):
    pc, i, j, offs, inside, oy, ox, keep = tile_program(H, W, R, MODE, TH, TW)
    bi = pc // C
    plane = H * W
    I0, c0 = _load_centred(I_ptr + (bi * 3 + 0) * plane, offs, inside)
    I1, c1 = _load_centred(I_ptr + (bi * 3 + 1) * plane, offs, inside)
    I2, c2 = _load_centred(I_ptr + (bi * 3 + 2) * plane, offs, inside)
    p, cp = _load_centred(p_ptr + pc * plane, offs, inside)
    sc = tl.maximum(tl.maximum(_tile_scale(I0), _tile_scale(I1)), _tile_scale(I2))
    I0 = I0 / sc
    I1 = I1 / sc
    I2 = I2 / sc
    inv_n = 1.0 / _counts(oy, ox, H, W, R, MODE)
    m0 = tile_box_sum(I0, R, TH, TW) * inv_n
    m1 = tile_box_sum(I1, R, TH, TW) * inv_n
    m2 = tile_box_sum(I2, R, TH, TW) * inv_n
    mp = tile_box_sum(p, R, TH, TW) * inv_n
    eps = tl.load(eps_ptr + bi) / sc / sc
    s00 = tl.maximum(tile_box_sum(I0 * I0, R, TH, TW) * inv_n - m0 * m0, 0.0) + eps
    s11 = tl.maximum(tile_box_sum(I1 * I1, R, TH, TW) * inv_n - m1 * m1, 0.0) + eps
    s22 = tl.maximum(tile_box_sum(I2 * I2, R, TH, TW) * inv_n - m2 * m2, 0.0) + eps
    s01 = tile_box_sum(I0 * I1, R, TH, TW) * inv_n - m0 * m1
    s02 = tile_box_sum(I0 * I2, R, TH, TW) * inv_n - m0 * m2
    s12 = tile_box_sum(I1 * I2, R, TH, TW) * inv_n - m1 * m2
    v0 = tile_box_sum(I0 * p, R, TH, TW) * inv_n - m0 * mp
    v1 = tile_box_sum(I1 * p, R, TH, TW) * inv_n - m1 * mp
    v2 = tile_box_sum(I2 * p, R, TH, TW) * inv_n - m2 * mp
    k00 = s11 * s22 - s12 * s12
    k01 = s02 * s12 - s01 * s22
    k02 = s01 * s12 - s02 * s11
    k11 = s00 * s22 - s02 * s02
    k12 = s01 * s02 - s00 * s12
    k22 = s00 * s11 - s01 * s01
    inv_det = 1.0 / ((s00 * k00 + s01 * k01 + s02 * k02) * sc)
    a0 = (k00 * v0 + k01 * v1 + k02 * v2) * inv_det
    a1 = (k01 * v0 + k11 * v1 + k12 * v2) * inv_det
    a2 = (k02 * v0 + k12 * v1 + k22 * v2) * inv_det
    b = mp + cp - a0 * (m0 * sc + c0) - a1 * (m1 * sc + c1) - a2 * (m2 * sc + c2)
    pix = oy * W + ox
    tl.store(a_ptr + (pc * 3 + 0) * plane + pix, a0, mask=keep)
    tl.store(a_ptr + (pc * 3 + 1) * plane + pix, a1, mask=keep)
    tl.store(a_ptr + (pc * 3 + 2) * plane + pix, a2, mask=keep)
    tl.store(b_ptr + pc * plane + pix, b, mask=keep)


@triton.jit
def _apply_kernel(a_ptr, b_ptr, I_ptr, q_ptr, ma_ptr, mb_ptr, C, H, W, R: tl.constexpr, MODE: tl.constexpr,
                  G: tl.constexpr, APPLY: tl.constexpr, STORE_MA: tl.constexpr, TH: tl.constexpr, TW: tl.constexpr):
    pc, i, j, offs, inside, oy, ox, keep = tile_program(H, W, R, MODE, TH, TW)
    bi = pc // C
    plane = H * W
    inv_n = 1.0 / _counts(oy, ox, H, W, R, MODE)
    pix = oy * W + ox
    b, cb = _load_centred(b_ptr + pc * plane, offs, inside)
    acc = tile_box_sum(b, R, TH, TW) * inv_n + cb
    if APPLY == 0:
        tl.store(mb_ptr + pc * plane + pix, acc, mask=keep)
    for g in tl.static_range(G):
        a, ca = _load_centred(a_ptr + (pc * G + g) * plane, offs, inside)
        ma = tile_box_sum(a, R, TH, TW) * inv_n + ca
        if APPLY:
            guide = tl.load(I_ptr + (bi * G + g) * plane + pix, mask=keep, other=0.0).to(tl.float32)
            acc += ma * guide
        if STORE_MA:
            tl.store(ma_ptr + (pc * G + g) * plane + pix, ma, mask=keep)
    if APPLY:
        tl.store(q_ptr + pc * plane + pix, acc, mask=keep)


def supported(r: int, dtype: torch.dtype) -> bool:
    return box.supported(r) and dtype != torch.float64


def fused_forward(I, p, eps, r, border, apply: bool, keep_ma: bool = False):
    """K1 then K2. I (B, G, H, W), p (B, C, H, W) float32 contiguous, eps (B,) float32.

    Returns q (apply), or (mean a, mean b); ``keep_ma`` returns (q, mean a) for the fused backward."""
    bsz, g, h, w = I.shape
    c = p.shape[1]
    mode = MODES[border]
    if g == 1:
        from . import sliding

        return sliding.forward_gray(I, p, eps.float().contiguous(), r, mode, apply, keep_ma)
    from . import sliding_color

    return sliding_color.forward_color(I, p, eps.float().contiguous(), r, mode, apply, keep_ma)
    th, tw = tile_shape(r, wide=g == 1)
    grid = (bsz * c, triton.cdiv(h, th - 2 * r), triton.cdiv(w, tw - 2 * r))
    a = torch.empty(bsz, c, *((g,) if g == 3 else ()), h, w, device=I.device, dtype=torch.float32)
    b = torch.empty_like(p, dtype=torch.float32)
    eps = eps.float().contiguous()
    fit = _fit_gray_kernel if g == 1 else _fit_color_kernel
    fit[grid](I, p, a, b, eps, c, h, w, R=r, MODE=mode, TH=th, TW=tw, num_warps=4 if g == 1 else 8)
    th, tw = tile_shape(r)
    grid = (bsz * c, triton.cdiv(h, th - 2 * r), triton.cdiv(w, tw - 2 * r))
    if apply:
        q = torch.empty_like(b)
        ma = torch.empty_like(a) if keep_ma else q
        _apply_kernel[grid](a, b, I, q, ma, q, c, h, w, R=r, MODE=mode, G=g, APPLY=True, STORE_MA=keep_ma, TH=th,
                            TW=tw, num_warps=4)
        return (q, ma) if keep_ma else q
    ma, mb = torch.empty_like(a), torch.empty_like(b)
    _apply_kernel[grid](a, b, I, mb, ma, mb, c, h, w, R=r, MODE=mode, G=g, APPLY=False, STORE_MA=True, TH=th,
                        TW=tw, num_warps=4)
    return ma, mb


def forward(I, p, eps, r, border, apply: bool, need_grad: bool = False):
    if r == 0 or not supported(r, I.dtype):
        return torch_path.forward(I, p, eps, r, border, apply)
    I, p = I.contiguous(), p.contiguous()
    if not need_grad:
        return fused_forward(I, p, eps, r, border, apply), None
    if apply and border == "valid":  # fused backward: keep only the inputs and mean(a)
        q, ma = fused_forward(I, p, eps, r, border, apply, keep_ma=True)
        return q, dict(fused=True, I=I, p=p, ma=ma)
    return torch_path.forward(I, p, eps, r, border, apply, box=TRITON_BOX)


def backward(saved, grads, eps, r, border, apply: bool):
    if saved.get("fused"):
        return triton_backward.backward(saved["I"], saved["p"], grads, saved["ma"], eps.float().contiguous(), r)
    return torch_path.backward(saved, grads, eps, r, border, apply, box=TRITON_BOX)
