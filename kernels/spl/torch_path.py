"""PyTorch path of the Structure Preservation Loss: forward and closed-form backward in every border mode.

Inputs arrive as gray, centred (each image's mean removed: the fits are shift invariant) float32 or
float64 tensors of shape (B, 1, H, W); ``w`` is the mask (B or 1, 1, H, W) or None. With the window
mean operator M (``box_mean``) and the weighted moments ``Q_x = M(w x)``, the weighted window means are
``m_x = Q_x / Q_1``; from them

    var_S = m_SS - m_S^2,  var_E = m_EE - m_E^2,  c = m_SE - m_S m_E   (variances clamped at 0)
    a = c / (var_S + eps),  D  = var_E - a (c + a eps)   (= the weighted mean squared residual of the fit)
    a' = c / (var_E + eps), D' = var_S - a' (c + a' eps) (bidirectional)

and the window weight is ``omega = Q_1`` (1 without a mask). Both gradient modes share one backward:
the residual's derivative w.r.t. (var_S, var_E, c) is a per-window triple (G_vS, G_vE, G_c),

    stop-gradient a, b:  G_vS = a^2 + 1,                     G_vE = 1 + a'^2,
                         G_c  = -2 (a + a')
    true gradient:       G_vS = a^2 (1 + 2 eps / (var_S + eps)) + 1,   G_vE = 1 + a'^2 (1 + 2 eps / (var_E + eps)),
                         G_c  = -2 a (1 + eps / (var_S + eps)) - 2 a' (1 + eps / (var_E + eps))

(the ``1`` and primed terms belong to D'; drop them when not bidirectional), chained to the moments,
``dL/dQ_SS = G_vS / Q_1``, ``dL/dQ_S = -(2 m_S G_vS + m_E G_c) / Q_1``, ``dL/dQ_SE = G_c / Q_1`` (and E
alike), and brought back to pixels by the adjoint M^T: ``dS = w (M^T P_S + 2 S M^T P_SS + E M^T P_SE)``.
So the backward is five adjoint box filters (three when the source needs no gradient).
"""
from __future__ import annotations

import torch

from ..box.torch_path import box_mean, box_mean_adjoint
from .reference import EMPTY_WEIGHT

# order of the saved per-window coefficient planes (what the Triton path stores too)
PLANES = ("E", "EE", "SE", "S", "SS")


def moments(S, E, w, r, border, box: str | None = None):
    """Weighted window means (m_S, m_E, m_SS, m_EE, m_SE), the window weight Q_1 (None: no mask), and 1/Q_1.

    ``box``: the window-sum engine, "opencv" or "torch", as the path the registry chose names it."""
    if w is None:
        m = box_mean(torch.cat((S, E, S * S, E * E, S * E), 1), r, border, box)
        return m.split(1, 1), None, None
    wS, wE = w * S, w * E
    w = w.expand_as(S)
    m = box_mean(torch.cat((w, wS, wE, wS * S, wE * E, wS * E), 1), r, border, box)
    q1 = m[:, :1]
    inv = torch.where(q1 > EMPTY_WEIGHT, 1.0 / q1.clamp_min(EMPTY_WEIGHT), 0.0)
    return (m[:, 1:] * inv).split(1, 1), q1, inv


def fit(mom, eps: float, bidirectional: bool):
    """Per-window variances, covariance, coefficients and the residual map D (+ D')."""
    mS, mE, mSS, mEE, mSE = mom
    vS_raw = mSS - mS * mS
    vE_raw = mEE - mE * mE
    vS, vE = vS_raw.clamp_min(0.0), vE_raw.clamp_min(0.0)
    c = mSE - mS * mE
    dS = vS + eps
    a = c / dS
    D = vE - a * (c + a * eps)
    f = dict(mS=mS, mE=mE, vS_pos=vS_raw > 0, vE_pos=vE_raw > 0, dS=dS, a=a)
    if bidirectional:
        dE = vE + eps
        a2 = c / dE
        D = D + vS - a2 * (c + a2 * eps)
        f.update(dE=dE, a2=a2)
    return D.clamp_min(0.0), f


def coefficients(f, eps: float, bidirectional: bool, detach: bool):
    """(G_vS, G_vE, G_c): derivative of the window residual w.r.t. (var_S, var_E, c)."""
    a = f["a"]
    if detach:
        G_vS, G_vE, G_c = a * a, torch.ones_like(a), -2.0 * a
        if bidirectional:
            a2 = f["a2"]
            G_vS, G_vE, G_c = G_vS + 1.0, G_vE + a2 * a2, G_c - 2.0 * a2
        return G_vS, G_vE, G_c
    fs = eps / f["dS"]
    G_vS = a * a * (1.0 + 2.0 * fs)
    G_vE = torch.ones_like(a)
    G_c = -2.0 * a * (1.0 + fs)
    if bidirectional:
        a2 = f["a2"]
        fe = eps / f["dE"]
        G_vS = G_vS + 1.0
        G_vE = G_vE + a2 * a2 * (1.0 + 2.0 * fe)
        G_c = G_c - 2.0 * a2 * (1.0 + fe)
    # a clamped variance is constant: no gradient flows into its moments
    return torch.where(f["vS_pos"], G_vS, 0.0), torch.where(f["vE_pos"], G_vE, 0.0), G_c


def forward(S, E, w, eps: float, r: int, border: str, bidirectional: bool, detach: bool, reduction: str,
            need_grad: bool, need_source_grad: bool, box: str | None = None):
    """Returns (out, saved): out = dict(map (reduction "none"), total = sum omega D, weight = sum omega)."""
    mom, q1, inv = moments(S, E, w, r, border, box)
    D, f = fit(mom, eps, bidirectional)
    if q1 is not None:
        D = torch.where(q1 > EMPTY_WEIGHT, D, 0.0)
        out = dict(total=(q1 * D).sum(), weight=q1.sum())
    else:
        out = dict(total=D.sum(), weight=torch.tensor(float(D.numel()), dtype=D.dtype, device=D.device))
    if reduction == "none":
        out["map"] = D
    if not need_grad:
        return out, None
    G_vS, G_vE, G_c = coefficients(f, eps, bidirectional, detach)
    if q1 is not None:
        # "none": dL/dQ = g G / Q_1; "mean": g_k = omega_k / sum(omega) = Q_1 / sum(Q_1), so Q_1 cancels
        scale = inv if reduction == "none" else (inv > 0).to(inv.dtype)
        G_vS, G_vE, G_c = G_vS * scale, G_vE * scale, G_c * scale
    mS, mE = f["mS"], f["mE"]
    planes = [-(2.0 * mE * G_vE + mS * G_c), G_vE, G_c]
    if need_source_grad:
        planes += [-(2.0 * mS * G_vS + mE * G_c), G_vS]
    return out, dict(S=S, E=E, w=w, planes=torch.cat(planes, 1), r=r, border=border, box=box)


def backward(saved, g):
    """(dS or None, dE) from the upstream per-window gradient ``g``: a 0-d tensor or a (B, 1, H, W) map."""
    S, E, w, planes = saved["S"], saved["E"], saved["w"], saved["planes"]
    u = box_mean_adjoint(planes * g, saved["r"], saved["border"], saved.get("box"))
    dE = u[:, 0:1] + 2.0 * E * u[:, 1:2] + S * u[:, 2:3]
    dS = u[:, 3:4] + 2.0 * S * u[:, 4:5] + E * u[:, 2:3] if planes.shape[1] == 5 else None
    if w is not None:
        dE = dE * w
        dS = None if dS is None else dS * w
    return dS, dE
