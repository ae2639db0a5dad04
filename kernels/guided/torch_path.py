"""PyTorch path of the guided filter: forward and closed-form backward, gray and colour guides.

Inputs arrive centred (the op subtracts each image's mean first), in float32. Every window mean goes
through one stacked call of :func:`box_mean`, so the CPU path costs two batched box passes forward
and two adjoint ones backward. The backward follows the forward's chain rule by hand (adjoint box
filters, no autograd through sums); ``eps`` is (B,).

Shapes: I (B, G, H, W) with G in {1, 3}; p (B, C, H, W). Coefficients: gray a, b (B, C, H, W);
colour a (B, C, 3, H, W), b (B, C, H, W).
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from ..box import torch_path as _torch_box

# The mean operator M and its adjoint; the Triton path passes its own kernels through ``box=``.
TORCH_BOX = SimpleNamespace(mean=_torch_box.box_mean, adjoint=_torch_box.box_mean_adjoint)

# unique entries of the symmetric 3x3 guide covariance, in storage order
PAIRS = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))


def _e(eps: torch.Tensor) -> torch.Tensor:
    return eps.view(-1, 1, 1, 1)


def inverse_sym3(s):
    """Inverse of symmetric 3x3 matrices given as their 6 unique entries (tuple of tensors), by cofactors."""
    s00, s01, s02, s11, s12, s22 = s
    c00 = s11 * s22 - s12 * s12
    c01 = s02 * s12 - s01 * s22
    c02 = s01 * s12 - s02 * s11
    c11 = s00 * s22 - s02 * s02
    c12 = s01 * s02 - s00 * s12
    c22 = s00 * s11 - s01 * s01
    inv_det = 1.0 / (s00 * c00 + s01 * c01 + s02 * c02)
    return tuple(c * inv_det for c in (c00, c01, c02, c11, c12, c22))


def inverse_sym3_into(s, cof, det) -> None:
    """:func:`inverse_sym3` without allocating, for a reused workspace (``cpu_banded``): the cofactors go to
    ``cof`` (6 tensors), the determinant to ``det``, then the inverse overwrites ``s`` (same entry order).

    Shapes: ``s`` and ``cof`` 6 tensors each, ``det`` one, all of one shape (a band's (rows, W) planes). Example::

        ws = torch.empty(13, H, W); s, cof, det = list(ws[:6]), list(ws[6:12]), ws[12]
        ...  # fill s with the unique entries 00 01 02 11 12 22 of each pixel's matrix
        inverse_sym3_into(s, cof, det)  # s now holds the inverse's entries, in the same order"""
    s00, s01, s02, s11, s12, s22 = s
    torch.mul(s11, s22, out=cof[0]).addcmul_(s12, s12, value=-1.0)
    torch.mul(s02, s12, out=cof[1]).addcmul_(s01, s22, value=-1.0)
    torch.mul(s01, s12, out=cof[2]).addcmul_(s02, s11, value=-1.0)
    torch.mul(s00, s22, out=cof[3]).addcmul_(s02, s02, value=-1.0)
    torch.mul(s01, s02, out=cof[4]).addcmul_(s00, s12, value=-1.0)
    torch.mul(s00, s11, out=cof[5]).addcmul_(s01, s01, value=-1.0)
    torch.mul(s00, cof[0], out=det).addcmul_(s01, cof[1]).addcmul_(s02, cof[2])
    for k in range(6):
        torch.div(cof[k], det, out=s[k])


def sym_matvec(m, v):
    """(symmetric 3x3 as 6 entries) @ (3-vector as a tensor with the vector on dim 2)."""
    m00, m01, m02, m11, m12, m22 = m
    v0, v1, v2 = v[:, :, 0], v[:, :, 1], v[:, :, 2]
    return torch.stack((m00 * v0 + m01 * v1 + m02 * v2, m01 * v0 + m11 * v1 + m12 * v2,
                        m02 * v0 + m12 * v1 + m22 * v2), 2)


def fit_gray(I, p, eps, r, border, box=TORCH_BOX):
    c = p.shape[1]
    m = box.mean(torch.cat((I, p, I * I, I * p), 1), r, border)
    mI, mp, mII, mIp = m[:, :1], m[:, 1:1 + c], m[:, 1 + c:2 + c], m[:, 2 + c:]
    var_raw = mII - mI * mI
    var = var_raw.clamp_min(0.0)
    denom = var + _e(eps)
    a = (mIp - mI * mp) / denom
    b = mp - a * mI
    return a, b, dict(mI=mI, mp=mp, denom=denom, var_pos=var_raw > 0)


def fit_color(I, p, eps, r, border, box=TORCH_BOX):
    c = p.shape[1]
    II = torch.stack([I[:, i] * I[:, j] for i, j in PAIRS], 1)
    Ip = (I[:, None] * p[:, :, None]).flatten(1, 2)  # (B, 3C): channel c*3 + i
    m = box.mean(torch.cat((I, p, II, Ip), 1), r, border)
    mI, mp, mII = m[:, :3], m[:, 3:3 + c], m[:, 3 + c:9 + c]
    mIp = m[:, 9 + c:].unflatten(1, (c, 3))
    raw = [mII[:, k] - mI[:, i] * mI[:, j] for k, (i, j) in enumerate(PAIRS)]
    var_pos = torch.stack([raw[k] > 0 for k in (0, 3, 5)], 1)
    e = eps.view(-1, 1, 1)
    s = [raw[k].clamp_min(0.0) + e if i == j else raw[k] for k, (i, j) in enumerate(PAIRS)]
    inv = inverse_sym3(s)
    cov = mIp - mI[:, None] * mp[:, :, None]  # (B, C, 3, H, W)
    a = sym_matvec(tuple(t[:, None] for t in inv), cov)
    b = mp - (a * mI[:, None]).sum(2)
    return a, b, dict(mI=mI, mp=mp, inv=inv, var_pos=var_pos)


def forward(I, p, eps, r, border, apply: bool, box=TORCH_BOX):
    """Returns (output, saved). apply: output = q; else output = (mean a, mean b)."""
    gray = I.shape[1] == 1
    a, b, aux = (fit_gray if gray else fit_color)(I, p, eps, r, border, box)
    c = p.shape[1]
    mab = box.mean(torch.cat((a.flatten(1, 2) if not gray else a, b), 1), r, border)
    ma = mab[:, :c] if gray else mab[:, :3 * c].unflatten(1, (c, 3))
    mb = mab[:, -c:]
    saved = dict(I=I, p=p, a=a, ma=ma, **aux)
    if not apply:
        return (ma, mb), saved
    q = (ma * I + mb) if gray else (ma * I[:, None]).sum(2) + mb
    return q, saved


def backward(saved, grads, eps, r, border, apply: bool, box=TORCH_BOX):
    """Gradients (dI, dp, deps) from the upstream gradient of q (apply) or of (mean a, mean b)."""
    I, p, a = saved["I"], saved["p"], saved["a"]
    gray = I.shape[1] == 1
    c = p.shape[1]
    if apply:
        g = grads
        g_ma = g * I if gray else g[:, :, None] * I[:, None]
        g_mb = g
    else:
        g_ma, g_mb = grads
        g_ma = torch.zeros_like(saved["ma"]) if g_ma is None else g_ma
        g_mb = torch.zeros_like(p) if g_mb is None else g_mb
    adj = box.adjoint(torch.cat((g_ma if gray else g_ma.flatten(1, 2), g_mb), 1), r, border)
    g_a = adj[:, :c] if gray else adj[:, :3 * c].unflatten(1, (c, 3))
    g_b = adj[:, -c:]
    mI, mp = saved["mI"], saved["mp"]
    if gray:
        denom = saved["denom"]
        g_a = g_a - g_b * mI
        g_mI = -(g_b * a).sum(1, keepdim=True)
        g_cov = g_a / denom
        g_var = torch.where(saved["var_pos"], -g_cov * a, 0.0)
        deps = (-(g_cov * a)).sum((1, 2, 3))
        g_mp = g_b - g_cov * mI
        g_mI = g_mI - (g_cov * mp).sum(1, keepdim=True) - 2.0 * g_var.sum(1, keepdim=True) * mI
        g_mII = g_var.sum(1, keepdim=True)
        adj2 = box.adjoint(torch.cat((g_mI, g_mII, g_mp, g_cov), 1), r, border)
        t_mI, t_mII, t_mp, t_mIp = adj2[:, :1], adj2[:, 1:2], adj2[:, 2:2 + c], adj2[:, 2 + c:]
        dI = t_mI + 2.0 * I * t_mII + (p * t_mIp).sum(1, keepdim=True)
        dp = t_mp + I * t_mIp
        if apply:
            dI = dI + (grads * saved["ma"]).sum(1, keepdim=True)
        return dI, dp, deps
    inv = saved["inv"]
    g_a = g_a - g_b[:, :, None] * mI[:, None]
    g_mI = -(g_b[:, :, None] * a).sum(1)  # (B, 3, H, W)
    g_cov = sym_matvec(tuple(t[:, None] for t in inv), g_a)  # (B, C, 3, H, W)
    # S = Sigma + eps*I, a = S^-1 cov: dL/dS = G = -sum_c g_cov a^T; dL/deps = trace(G)
    G = [[-(g_cov[:, :, i] * a[:, :, j]).sum(1) for j in range(3)] for i in range(3)]
    vp = saved["var_pos"]
    for i in range(3):
        G[i][i] = torch.where(vp[:, i], G[i][i], 0.0)
    deps = -(g_cov * a).sum((1, 2, 3, 4))
    Hs = [[G[i][j] + G[j][i] for j in range(3)] for i in range(3)]
    # dL/d mII per unique entry: diagonal G_ii, off-diagonal G_ij + G_ji
    g_mII = torch.stack([G[i][i] if i == j else Hs[i][j] for i, j in PAIRS], 1)
    for k in range(3):
        g_mI[:, k] -= sum(Hs[k][j] * mI[:, j] for j in range(3))
    g_mI = g_mI - (g_cov * mp[:, :, None]).sum(1)
    g_mp = g_b - (g_cov * mI[:, None]).sum(2)
    adj2 = box.adjoint(torch.cat((g_mI, g_mII, g_mp, g_cov.flatten(1, 2)), 1), r, border)
    t_mI, t_mII, t_mp = adj2[:, :3], adj2[:, 3:9], adj2[:, 9:9 + c]
    t_mIp = adj2[:, 9 + c:].unflatten(1, (c, 3))
    dI = t_mI + (p[:, :, None] * t_mIp).sum(1)
    dI = dI.clone()
    for k, (i, j) in enumerate(PAIRS):
        if i == j:
            dI[:, i] += 2.0 * I[:, i] * t_mII[:, k]
        else:
            dI[:, i] += I[:, j] * t_mII[:, k]
            dI[:, j] += I[:, i] * t_mII[:, k]
    dp = t_mp + (I[:, None] * t_mIp).sum(2)
    if apply:
        dI = dI + (grads[:, :, None] * saved["ma"]).sum(1)
    return dI, dp, deps
