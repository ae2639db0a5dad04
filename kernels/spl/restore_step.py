"""One SGD-with-momentum step of the structure-restoring objective in four Triton launches.

``vision.restore.restore_structure`` minimises ``g_spl * sum_k omega_k D_k(S, x) + sum_i c_i |J (x_i - e0_i)|^2 / 2``
(see ``RestoreObjective``). A step is: the SPL moments of (S, gray x), the fits and their coefficient planes
(``triton_kernels``), the adjoint horizontal sums scaled by ``g_spl`` on the device, then ``_restore_update``:
the adjoint vertical sums give the SPL gradient, to which it adds the chroma gradient ``c Q (x - e0)`` with
``Q = color_weight / 512^2 J^T J``, and applies ``buf = momentum buf + grad; x -= lr buf`` and the clamp, in
place. ``x`` is only read at each pixel's own position by the update, and neighbours are read only by
earlier launches, so updating in place is safe. Nothing reads a device value on the host, so the whole
loop can be captured in a CUDA graph.

The centring constant of gray x is the gray mean of the *initial* edit, not of the current x: the fits are
shift invariant, and x stays within the value range of the edit, so the moments stay as small as with the
exact mean.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_kernels import BX, BY, NUM_WARPS, tile, vsum_planes
from .triton_path import adjoint, fit, launch_grid, mask_args, moments


@triton.jit(do_not_specialize=["R", "C", "clamp"])
def _restore_update(U_ptr, S_ptr, X_ptr, E0_ptr, B_ptr, cE_ptr, W_ptr, CM_ptr, H, W, R, C, inv_c,
                    w_sb, w_sy, w_sx, cm_sb, cm_sy, cm_sx,
                    q00, q01, q02, q10, q11, q12, q20, q21, q22, lr, momentum, lo, hi, clamp,
                    MASKED: tl.constexpr, CHROMA: tl.constexpr, COLOR_MASKED: tl.constexpr,
                    BY: tl.constexpr, BX: tl.constexpr):
    b = tl.program_id(2)
    y, x = tile(BY, BX)
    out_in = (y < H) & (x < W)
    hw = H * W
    uE, uEE, uSE, _, _ = vsum_planes(U_ptr, b, 3, y, x, H, W, R, BY, BX)
    pix = y * W + x
    s = tl.load(S_ptr + b.to(tl.int64) * hw + pix, mask=out_in, other=0.0)
    xb = X_ptr + b.to(tl.int64) * C * hw + pix
    gsum = tl.load(xb, mask=out_in, other=0.0)
    for c in range(1, C):
        gsum += tl.load(xb + c * hw, mask=out_in, other=0.0)
    e = gsum * inv_c - tl.load(cE_ptr + b)
    g = uE + 2.0 * e * uEE + s * uSE
    if MASKED:
        g = g * tl.load(W_ptr + b.to(tl.int64) * w_sb + y * w_sy + x * w_sx, mask=out_in, other=0.0)
    g = g * inv_c  # the gray mean spreads the gradient evenly over the channels
    eb = E0_ptr + b.to(tl.int64) * C * hw + pix
    bb = B_ptr + b.to(tl.int64) * C * hw + pix
    if CHROMA:
        x0 = tl.load(xb, mask=out_in, other=0.0)
        x1 = tl.load(xb + hw, mask=out_in, other=0.0)
        x2 = tl.load(xb + 2 * hw, mask=out_in, other=0.0)
        d0 = x0 - tl.load(eb, mask=out_in, other=0.0)
        d1 = x1 - tl.load(eb + hw, mask=out_in, other=0.0)
        d2 = x2 - tl.load(eb + 2 * hw, mask=out_in, other=0.0)
        c0 = q00 * d0 + q01 * d1 + q02 * d2
        c1 = q10 * d0 + q11 * d1 + q12 * d2
        c2 = q20 * d0 + q21 * d1 + q22 * d2
        if COLOR_MASKED:
            cm = tl.load(CM_ptr + b.to(tl.int64) * cm_sb + y * cm_sy + x * cm_sx, mask=out_in, other=0.0)
            c0 = cm * c0
            c1 = cm * c1
            c2 = cm * c2
        v0 = momentum * tl.load(bb, mask=out_in, other=0.0) + (g + c0)
        v1 = momentum * tl.load(bb + hw, mask=out_in, other=0.0) + (g + c1)
        v2 = momentum * tl.load(bb + 2 * hw, mask=out_in, other=0.0) + (g + c2)
        tl.store(bb, v0, mask=out_in)
        tl.store(bb + hw, v1, mask=out_in)
        tl.store(bb + 2 * hw, v2, mask=out_in)
        n0 = x0 - lr * v0
        n1 = x1 - lr * v1
        n2 = x2 - lr * v2
        if clamp != 0:
            n0 = tl.minimum(tl.maximum(n0, lo), hi)
            n1 = tl.minimum(tl.maximum(n1, lo), hi)
            n2 = tl.minimum(tl.maximum(n2, lo), hi)
        tl.store(xb, n0, mask=out_in)
        tl.store(xb + hw, n1, mask=out_in)
        tl.store(xb + 2 * hw, n2, mask=out_in)
    else:
        for c in range(0, C):
            xc = tl.load(xb + c * hw, mask=out_in, other=0.0)
            v = momentum * tl.load(bb + c * hw, mask=out_in, other=0.0) + g
            tl.store(bb + c * hw, v, mask=out_in)
            nx = xc - lr * v
            if clamp != 0:
                nx = tl.minimum(tl.maximum(nx, lo), hi)
            tl.store(xb + c * hw, nx, mask=out_in)


class FusedSGD:
    """The restore loop's state and step on the Triton path.

    ``S``: (B, 1, H, W) centred gray source; ``e0``: (B, C, H, W) the edit (the colour term's target);
    ``mask``/``color_mask``: checked (1 or B, 1, H, W) weights or None; ``g_spl``: 0-d device tensor;
    ``Q``: the (3, 3) matrix as nine host floats, row-major, or None; ``clamp``: clamp x to [0, 1] after each step.
    """

    def __init__(self, S, e0, mask, color_mask, g_spl, Q, radius: int, eps: float, bidirectional: bool,
                 lr: float, momentum: float, clamp: bool):
        self.S, self.e0, self.mask, self.color_mask, self.g_spl = S, e0, mask, color_mask, g_spl
        self.Q = [0.0] * 9 if Q is None else list(Q)
        self.chroma = Q is not None
        self.radius, self.eps, self.bidirectional = radius, float(eps), bool(bidirectional)
        self.lr, self.momentum, self.clamp = float(lr), float(momentum), bool(clamp)
        self.zero = torch.zeros(S.shape[0], device=S.device, dtype=torch.float32)
        self.cE = torch.empty(S.shape[0], device=S.device, dtype=torch.float32)
        self.prepare()

    def prepare(self):
        """Recompute the centring constants from ``e0`` (a captured graph runs this on each call's new edit)."""
        torch.mean(self.e0, (1, 2, 3), out=self.cE)

    def step(self, x: torch.Tensor, buf: torch.Tensor):
        """Update contiguous float32 ``x`` and its momentum ``buf`` in place; returns the (n, 2) SPL tile partials
        (``sum omega D``, ``sum omega``) at the point where the gradient was taken."""
        bsz, C, h, w = x.shape
        r = self.radius
        M = moments(self.S, x, self.mask, self.zero, self.cE, r)
        _, planes, part = fit(M, self.mask is not None, self.eps, r, self.bidirectional, True, False, 3, False)
        U = adjoint(planes, self.g_spl.expand(bsz, 1, h, w), None, r)
        wt, wstr = mask_args(self.mask, x)
        cm, cmstr = mask_args(self.color_mask, x)
        _restore_update[launch_grid(bsz, h, w)](
            U, self.S, x, self.e0, buf, self.cE, wt, cm, h, w, r, C, 1.0 / C, *wstr, *cmstr, *self.Q,
            self.lr, self.momentum, 0.0, 1.0, int(self.clamp), MASKED=self.mask is not None,
            CHROMA=self.chroma, COLOR_MASKED=self.color_mask is not None, BY=BY, BX=BX, num_warps=NUM_WARPS)
        return part
