"""Triton kernels of the Structure Preservation Loss: separable direct window sums that stay in registers.

A window sum over the (2R+1)^2 square is a horizontal sum along the row followed by a vertical sum down
the column. Each pass is its own kernel over a (BY, BX) tile with a runtime loop over the 2R+1 taps,
re-reading the shifted neighbours from L1/L2: every output is a *direct* sum of in-image terms (no prefix
sums, so no cancellation), the per-thread state is a few accumulators (no spills, whatever the radius),
and the radius is a runtime argument (one compile serves every radius). The intermediate planes cost a
few bytes per pixel of HBM traffic, which is far below what the old band-matrix products spent.

* ``_hsum_moments``: gray conversion (channel mean, strided input) and centring (a per-image constant
  read from the device: the fits are shift invariant) fused into the horizontal sums of the 5 moments
  (6 with a mask: w, wS, wE, wSS, wEE, wSE).
* ``_vsum_fit``: vertical sums, both fits, the residual, per-tile partial sums of ``omega D`` and
  ``omega``, the residual map (``write_d``) and the backward coefficient planes (see ``torch_path.py``).
* ``_finish``: one program sums the partials into the loss and ``1 / sum(omega)`` (no host read).
* ``_hsum_adjoint``: horizontal sums of ``plane * g * k`` (one plane per program): the adjoint of a
  zero-outside window sum is itself.
* ``_vsum_grad``: vertical sums combined with the pixels: ``dE = w (U_E + 2 E U_EE + S U_SE)``, and dS alike.
"""
from __future__ import annotations

import triton
import triton.language as tl

BY = 8
BX = 64
NUM_WARPS = 4


@triton.jit
def _count(c, n, R):
    return (tl.minimum(c + R, n - 1) - tl.maximum(c - R, 0) + 1).to(tl.float32)


@triton.jit
def tile(BY: tl.constexpr, BX: tl.constexpr):
    y = tl.program_id(1) * BY + tl.arange(0, BY)[:, None] + tl.arange(0, BX)[None, :] * 0
    x = tl.program_id(0) * BX + tl.arange(0, BX)[None, :] + tl.arange(0, BY)[:, None] * 0
    return y, x


@triton.jit
def _gray(ptr, b, C, sb, sc, offs, m, inv_c, centre):
    """Channel mean of a strided (B, C, H, W) image at ``offs`` minus ``centre``; 0 where ``m`` is false."""
    acc = tl.load(ptr + b.to(tl.int64) * sb + offs, mask=m, other=0.0)
    for c in range(1, C):
        acc += tl.load(ptr + b.to(tl.int64) * sb + c * sc + offs, mask=m, other=0.0)
    return tl.where(m, acc * inv_c - centre, 0.0)


@triton.jit(do_not_specialize=["R", "CS", "CE"])
def _hsum_moments(S_ptr, E_ptr, W_ptr, cS_ptr, cE_ptr, M_ptr, H, W, R,
                  CS, s_sb, s_sc, s_sy, s_sx, inv_cs, CE, e_sb, e_sc, e_sy, e_sx, inv_ce, w_sb, w_sy, w_sx,
                  MASKED: tl.constexpr, BY: tl.constexpr, BX: tl.constexpr):
    b = tl.program_id(2)
    y, x = tile(BY, BX)
    hw = H * W
    cs = tl.load(cS_ptr + b)
    ce = tl.load(cE_ptr + b)
    a0 = tl.zeros((BY, BX), tl.float32)
    a1 = tl.zeros((BY, BX), tl.float32)
    a2 = tl.zeros((BY, BX), tl.float32)
    a3 = tl.zeros((BY, BX), tl.float32)
    a4 = tl.zeros((BY, BX), tl.float32)
    a5 = tl.zeros((BY, BX), tl.float32)
    for d in range(0, 2 * R + 1):
        xx = x + (d - R)
        m = (y < H) & (xx >= 0) & (xx < W)
        s = _gray(S_ptr, b, CS, s_sb, s_sc, y * s_sy + xx * s_sx, m, inv_cs, cs)
        e = _gray(E_ptr, b, CE, e_sb, e_sc, y * e_sy + xx * e_sx, m, inv_ce, ce)
        if MASKED:
            wt = tl.load(W_ptr + b.to(tl.int64) * w_sb + y * w_sy + xx * w_sx, mask=m, other=0.0)
            ws = wt * s
            we = wt * e
            a0 += wt
            a1 += ws
            a2 += we
            a3 += ws * s
            a4 += we * e
            a5 += ws * e
        else:
            a0 += s
            a1 += e
            a2 += s * s
            a3 += e * e
            a4 += s * e
    out = M_ptr + b.to(tl.int64) * (6 if MASKED else 5) * hw + y * W + x
    m = (y < H) & (x < W)
    tl.store(out, a0, mask=m)
    tl.store(out + hw, a1, mask=m)
    tl.store(out + 2 * hw, a2, mask=m)
    tl.store(out + 3 * hw, a3, mask=m)
    tl.store(out + 4 * hw, a4, mask=m)
    if MASKED:
        tl.store(out + 5 * hw, a5, mask=m)


# runtime flags are not specialised (Triton would compile a variant per flag value 1): one compile per mask mode
@triton.jit(do_not_specialize=["R", "bidir", "detach", "write_d", "nplanes", "per_weight"])
def _vsum_fit(M_ptr, D_ptr, P_ptr, part_ptr, H, W, R, eps, empty, bidir, detach, write_d, nplanes, per_weight,
              MASKED: tl.constexpr, BY: tl.constexpr, BX: tl.constexpr):
    b = tl.program_id(2)
    y, x = tile(BY, BX)
    hw = H * W
    out_in = (y < H) & (x < W)
    base = M_ptr + b.to(tl.int64) * (6 if MASKED else 5) * hw + x
    q0 = tl.zeros((BY, BX), tl.float32)
    q1 = tl.zeros((BY, BX), tl.float32)
    q2 = tl.zeros((BY, BX), tl.float32)
    q3 = tl.zeros((BY, BX), tl.float32)
    q4 = tl.zeros((BY, BX), tl.float32)
    q5 = tl.zeros((BY, BX), tl.float32)
    for d in range(0, 2 * R + 1):
        yy = y + (d - R)
        m = (yy >= 0) & (yy < H) & (x < W)
        p = base + yy * W
        q0 += tl.load(p, mask=m, other=0.0)
        q1 += tl.load(p + hw, mask=m, other=0.0)
        q2 += tl.load(p + 2 * hw, mask=m, other=0.0)
        q3 += tl.load(p + 3 * hw, mask=m, other=0.0)
        q4 += tl.load(p + 4 * hw, mask=m, other=0.0)
        if MASKED:
            q5 += tl.load(p + 5 * hw, mask=m, other=0.0)
    n = tl.maximum(_count(y, H, R) * _count(x, W, R), 1.0)
    if MASKED:
        omega = q0 / n
        good = (omega > empty) & out_in
        inv = tl.where(good, 1.0 / tl.maximum(q0, 1e-30), 0.0)
        mS = q1 * inv
        mE = q2 * inv
        mSS = q3 * inv
        mEE = q4 * inv
        mSE = q5 * inv
    else:
        good = out_in
        inv = tl.where(good, 1.0 / n, 0.0)
        omega = tl.where(out_in, 1.0, 0.0)
        mS = q0 * inv
        mE = q1 * inv
        mSS = q2 * inv
        mEE = q3 * inv
        mSE = q4 * inv
    vS_raw = mSS - mS * mS
    vE_raw = mEE - mE * mE
    vS = tl.maximum(vS_raw, 0.0)
    vE = tl.maximum(vE_raw, 0.0)
    c = mSE - mS * mE
    dS = vS + eps
    dE = vE + eps
    a = c / dS
    a2 = c / dE
    bi = (bidir != 0).to(tl.float32)
    D = vE - a * (c + a * eps) + bi * (vS - a2 * (c + a2 * eps))
    D = tl.where(good, tl.maximum(D, 0.0), 0.0)
    part = part_ptr + ((b * tl.num_programs(1) + tl.program_id(1)) * tl.num_programs(0) + tl.program_id(0)) * 2
    tl.store(part, tl.sum(tl.sum(omega * D, axis=1), axis=0))
    tl.store(part + 1, tl.sum(tl.sum(tl.where(out_in, omega, 0.0), axis=1), axis=0))
    ooffs = b.to(tl.int64) * hw + y * W + x
    tl.store(D_ptr + ooffs, D, mask=out_in & (write_d != 0))
    if nplanes > 0:
        # per-window derivative of the residual w.r.t. (var_S, var_E, c); detach: a, b held constant
        kd = (detach != 0).to(tl.float32)
        fs = (1.0 - kd) * (eps / dS)
        fe = (1.0 - kd) * (eps / dE)
        G_vS = a * a * (1.0 + 2.0 * fs) + bi
        G_vE = 1.0 + bi * a2 * a2 * (1.0 + 2.0 * fe)
        G_c = -2.0 * a * (1.0 + fs) - bi * 2.0 * a2 * (1.0 + fe)
        # the true gradient of a clamped variance is 0
        G_vS = tl.where((vS_raw > 0) | (detach != 0), G_vS, 0.0)
        G_vE = tl.where((vE_raw > 0) | (detach != 0), G_vE, 0.0)
        # "mean": upstream omega_k / sum(omega) times 1/W_k -> 1/N_k; "none": upstream g_k times 1/W_k
        scale = tl.where(per_weight != 0, inv, tl.where(good, 1.0 / n, 0.0))
        G_vS = G_vS * scale
        G_vE = G_vE * scale
        G_c = G_c * scale
        pbase = P_ptr + b.to(tl.int64) * nplanes * hw + y * W + x
        tl.store(pbase, -(2.0 * mE * G_vE + mS * G_c), mask=out_in)
        tl.store(pbase + hw, G_vE, mask=out_in)
        tl.store(pbase + 2 * hw, G_c, mask=out_in)
        m5 = out_in & (nplanes == 5)
        tl.store(pbase + 3 * hw, -(2.0 * mS * G_vS + mE * G_c), mask=m5)
        tl.store(pbase + 4 * hw, G_vS, mask=m5)


@triton.jit
def _finish(part_ptr, n, loss_ptr, invw_ptr, BLOCK: tl.constexpr):
    """Sum the (n, 2) tile partials in a fixed order: the loss, and 1 / sum(omega) for the backward."""
    acc_d = tl.zeros((BLOCK,), tl.float32)
    acc_w = tl.zeros((BLOCK,), tl.float32)
    for i in range(0, n, BLOCK):
        k = i + tl.arange(0, BLOCK)
        acc_d += tl.load(part_ptr + 2 * k, mask=k < n, other=0.0)
        acc_w += tl.load(part_ptr + 2 * k + 1, mask=k < n, other=0.0)
    total = tl.sum(acc_d, axis=0)
    weight = tl.sum(acc_w, axis=0)
    inv = tl.where(weight > 0, 1.0 / tl.maximum(weight, 1e-30), 0.0)
    tl.store(loss_ptr, total * inv)
    tl.store(invw_ptr, inv)


@triton.jit(do_not_specialize=["R", "use_k", "nplanes"])
def _hsum_adjoint(P_ptr, G_ptr, g_sb, g_sy, g_sx, K_ptr, use_k, U_ptr, H, W, R, nplanes,
                  BY: tl.constexpr, BX: tl.constexpr):
    bp = tl.program_id(2)
    b = bp // nplanes
    y, x = tile(BY, BX)
    hw = H * W
    # a scalar factor on the device (1 / sum(omega), or the restore step's loss weight): no host read
    k = tl.load(K_ptr, mask=use_k != 0, other=1.0)
    pbase = P_ptr + bp.to(tl.int64) * hw + y * W
    gbase = G_ptr + b.to(tl.int64) * g_sb + y * g_sy
    acc = tl.zeros((BY, BX), tl.float32)
    for d in range(0, 2 * R + 1):
        xx = x + (d - R)
        m = (y < H) & (xx >= 0) & (xx < W)
        acc += tl.load(pbase + xx, mask=m, other=0.0) * (tl.load(gbase + xx * g_sx, mask=m, other=0.0) * k)
    tl.store(U_ptr + bp.to(tl.int64) * hw + y * W + x, acc, mask=(y < H) & (x < W))


@triton.jit
def vsum_planes(U_ptr, b, nplanes, y, x, H, W, R, BY: tl.constexpr, BX: tl.constexpr):
    """Vertical window sums of the (3 or 5) adjoint planes at the tile."""
    hw = H * W
    base = U_ptr + b.to(tl.int64) * nplanes * hw + x
    u0 = tl.zeros((BY, BX), tl.float32)
    u1 = tl.zeros((BY, BX), tl.float32)
    u2 = tl.zeros((BY, BX), tl.float32)
    u3 = tl.zeros((BY, BX), tl.float32)
    u4 = tl.zeros((BY, BX), tl.float32)
    for d in range(0, 2 * R + 1):
        yy = y + (d - R)
        m = (yy >= 0) & (yy < H) & (x < W)
        p = base + yy * W
        u0 += tl.load(p, mask=m, other=0.0)
        u1 += tl.load(p + hw, mask=m, other=0.0)
        u2 += tl.load(p + 2 * hw, mask=m, other=0.0)
        m5 = m & (nplanes == 5)
        u3 += tl.load(p + 3 * hw, mask=m5, other=0.0)
        u4 += tl.load(p + 4 * hw, mask=m5, other=0.0)
    return u0, u1, u2, u3, u4


@triton.jit(do_not_specialize=["R", "nplanes", "CS", "CE"])
def _vsum_grad(U_ptr, S_ptr, E_ptr, W_ptr, cS_ptr, cE_ptr, dS_ptr, dE_ptr, H, W, R, nplanes,
               CS, s_sb, s_sc, s_sy, s_sx, inv_cs, CE, e_sb, e_sc, e_sy, e_sx, inv_ce, w_sb, w_sy, w_sx,
               MASKED: tl.constexpr, BY: tl.constexpr, BX: tl.constexpr):
    """d loss / d gray(S), d gray(E), each already divided by its channel count (the gray mean's adjoint)."""
    b = tl.program_id(2)
    y, x = tile(BY, BX)
    out_in = (y < H) & (x < W)
    uE, uEE, uSE, uS, uSS = vsum_planes(U_ptr, b, nplanes, y, x, H, W, R, BY, BX)
    s = _gray(S_ptr, b, CS, s_sb, s_sc, y * s_sy + x * s_sx, out_in, inv_cs, tl.load(cS_ptr + b))
    e = _gray(E_ptr, b, CE, e_sb, e_sc, y * e_sy + x * e_sx, out_in, inv_ce, tl.load(cE_ptr + b))
    gE = uE + 2.0 * e * uEE + s * uSE
    gS = uS + 2.0 * s * uSS + e * uSE
    if MASKED:
        wt = tl.load(W_ptr + b.to(tl.int64) * w_sb + y * w_sy + x * w_sx, mask=out_in, other=0.0)
        gE = gE * wt
        gS = gS * wt
    ooffs = b.to(tl.int64) * H * W + y * W + x
    tl.store(dE_ptr + ooffs, gE * inv_ce, mask=out_in)
    tl.store(dS_ptr + ooffs, gS * inv_cs, mask=out_in & (nplanes == 5))
