"""Float64 NumPy reference of the Structure Preservation Loss: literal least squares in every window.

Nothing here uses box filters or the closed-form moment algebra of the fast paths. For every window
the pixels are gathered, the weighted ridge regression ``min_{a,b} sum_i w_i (a x_i + b - y_i)^2 / W
+ eps a^2`` is solved from its normal equations (window-centred regressor, ``np.linalg.solve``), and
the residual ``D = sum_i w_i (a x_i + b - y_i)^2 / W`` is summed over the window's pixels. Gradients
are formed pixel by pixel from the same gathered windows:

* stop-gradient coefficients (the published code): ``dD/dy_j = -2 w_j r_j / W`` and
  ``dD/dx_j = 2 w_j r_j a / W`` with ``r_j = a x_j + b - y_j`` and ``a, b`` held fixed;
* true gradient: ``D = F(a*, b*) - eps a*^2`` with ``F`` the ridge objective, whose partial
  derivatives in ``a, b`` vanish at the optimum (envelope theorem), so ``dD/dz = dF/dz|_{a*,b*} -
  2 eps a* da*/dz``, with ``da*/dz`` differentiated literally from ``a* = cov / (var + eps)``.
  ``tests/test_spl.py`` checks this against central differences of the loss itself.

Conventions (shared with the fast paths): images are (B, C, H, W) with C in {1, 3}, reduced to gray
by the plain channel mean; a window is the (2r+1)^2 square around a pixel, completed by the border
mode (``"valid"``: only pixels inside the image); the mask ``w`` in [0, 1] weights every pixel of
every fit; a window's weight is ``omega = mean of w over its positions`` (1 without a mask) and a
window with ``omega <= EMPTY_WEIGHT`` is empty (residual 0). The loss is
``sum_k omega_k (D_k + D'_k) / sum_k omega_k`` (the plain mean over windows without a mask), ``D``
fitting the edit from the source and ``D'`` (bidirectional) the source from the edit.
"""
from __future__ import annotations

import numpy as np

from ..border import source_index

EMPTY_WEIGHT = 1e-6  # windows whose mean mask weight is at most this hold no pixels to fit


def gray(x) -> np.ndarray:
    """(B, C, H, W) with C in {1, 3} -> (B, H, W): the plain RGB mean, in float64."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 4 or x.shape[1] not in (1, 3):
        raise ValueError(f"expected (B, 1 or 3, H, W), got {x.shape}")
    return x.mean(axis=1)


def _windows(h: int, w: int, r: int, border: str):
    """Flat pixel index (H, W, n) of every window position and whether it exists (valid mode)."""
    offs = np.arange(-r, r + 1)
    iy = source_index(np.arange(h)[:, None] + offs[None, :], h, border)  # (H, k)
    ix = source_index(np.arange(w)[:, None] + offs[None, :], w, border)  # (W, k)
    present = (iy[:, None, :, None] >= 0) & (ix[None, :, None, :] >= 0)  # (H, W, k, k)
    flat = np.maximum(iy, 0)[:, None, :, None] * w + np.maximum(ix, 0)[None, :, None, :]
    n = (2 * r + 1) ** 2
    return flat.reshape(h, w, n), present.reshape(h, w, n)


def _fit(x, y, wt, W, eps):
    """Weighted ridge fit y ~ a x + b in every window (last axis = window pixels), literally."""
    safe_W = np.where(W > 0, W, 1.0)
    mx = (wt * x).sum(-1) / safe_W
    xc = x - mx[..., None]  # window-centred regressor: the normal matrix is then diagonal-dominant
    A = np.zeros(x.shape[:-1] + (2, 2))
    A[..., 0, 0] = (wt * xc * xc).sum(-1) / safe_W + eps
    A[..., 0, 1] = A[..., 1, 0] = (wt * xc).sum(-1) / safe_W
    A[..., 1, 1] = 1.0
    rhs = np.stack([(wt * xc * y).sum(-1) / safe_W, (wt * y).sum(-1) / safe_W], -1)
    a, b0 = np.moveaxis(np.linalg.solve(A, rhs[..., None])[..., 0], -1, 0)
    b = b0 - a * mx  # back from the centred regressor: y ~ a (x - mx) + b0
    res = a[..., None] * x + b[..., None] - y
    D = (wt * res * res).sum(-1) / safe_W
    return a, b, res, D


def window_fits(source, edited, radius: int, eps: float, mask=None, border: str = "valid") -> dict:
    """Every window's fits and residuals, float64.

    Returns a dict of (B, H, W) arrays: ``a, b, D`` (edit from source), ``a_rev, b_rev, D_rev`` (source
    from edit), ``omega`` (window weight) and ``empty``; plus the gathered windows used by the gradient.
    """
    S, E = gray(source), gray(edited)
    bsz, h, w = S.shape
    wmap = np.ones_like(S) if mask is None else np.broadcast_to(_mask(mask, bsz, h, w), S.shape)
    flat, present = _windows(h, w, radius, border)
    s = S.reshape(bsz, -1)[:, flat]  # (B, H, W, n)
    e = E.reshape(bsz, -1)[:, flat]
    wt = wmap.reshape(bsz, -1)[:, flat] * present
    W = wt.sum(-1)
    omega = W / present.sum(-1)
    empty = omega <= EMPTY_WEIGHT
    wt = np.where(empty[..., None], 0.0, wt)
    W = np.where(empty, 0.0, W)
    a, b, res, D = _fit(s, e, wt, W, eps)
    a2, b2, res2, D2 = _fit(e, s, wt, W, eps)
    return dict(a=a, b=b, D=D, res=res, a_rev=a2, b_rev=b2, D_rev=D2, res_rev=res2, omega=omega, empty=empty,
                W=W, s=s, e=e, wt=wt, flat=flat, shape=(bsz, h, w))


def _mask(mask, bsz, h, w) -> np.ndarray:
    m = np.asarray(mask, dtype=np.float64)
    if m.ndim == 2:
        m = m[None, None]
    if m.ndim != 4 or m.shape[1] != 1 or m.shape[0] not in (1, bsz) or m.shape[2:] != (h, w):
        raise ValueError(f"mask must be (H, W) or (1|B, 1, H, W) with H, W = {h}, {w}; got {m.shape}")
    return m[:, 0]


def residual_map(fits: dict, bidirectional: bool = True) -> np.ndarray:
    """Per-window residual (B, H, W): D (+ D_rev), 0 in empty windows."""
    d = fits["D"] + (fits["D_rev"] if bidirectional else 0.0)
    return np.where(fits["empty"], 0.0, d)


def structure_loss_reference(source, edited, radius: int = 5, eps: float = 1e-4, mask=None,
                             bidirectional: bool = True, reduction: str = "mean", border: str = "valid"):
    """The Structure Preservation Loss in float64: a float (``"mean"``) or the (B, 1, H, W) map (``"none"``)."""
    fits = window_fits(source, edited, radius, eps, mask, border)
    d = residual_map(fits, bidirectional)
    if reduction == "none":
        return d[:, None]
    omega = fits["omega"]
    total = omega.sum()
    return float((omega * d).sum() / total) if total > 0 else 0.0


def structure_loss_grad_reference(source, edited, radius: int = 5, eps: float = 1e-4, mask=None,
                                  bidirectional: bool = True, detach_coefficients: bool = True,
                                  reduction: str = "mean", border: str = "valid", grad_output=None):
    """Gradients (d source, d edited), each (B, C, H, W) float64, of the loss (``"mean"``) or of
    ``sum(grad_output * map)`` (``"none"``, ``grad_output`` of shape (B, 1, H, W))."""
    fits = window_fits(source, edited, radius, eps, mask, border)
    bsz, h, w = fits["shape"]
    if reduction == "none":
        g = np.asarray(grad_output, dtype=np.float64)[:, 0]
    else:
        total = fits["omega"].sum()
        g = fits["omega"] / total if total > 0 else np.zeros_like(fits["omega"])
    g = np.where(fits["empty"], 0.0, g)
    s, e, wt, W = fits["s"], fits["e"], fits["wt"], fits["W"]
    invW = np.where(W > 0, 1.0 / np.where(W > 0, W, 1.0), 0.0)
    dS = np.zeros((bsz, h * w))
    dE = np.zeros((bsz, h * w))

    def add(target, contrib):
        # scatter every window pixel's contribution onto the pixel it was gathered from
        idx = fits["flat"].reshape(-1)
        for i in range(bsz):
            target[i] += np.bincount(idx, weights=contrib[i].reshape(-1), minlength=h * w)

    def direction(x, y, a, res, dx_target, dy_target):
        # D = sum_j w_j (a x_j + b - y_j)^2 / W; partial derivatives with a, b fixed
        k = (g * invW)[..., None] * wt * 2.0 * res
        dx = k * a[..., None]
        dy = -k
        if not detach_coefficients:
            # envelope theorem: add -2 eps a da/dz, da/dz from a = cov / (var + eps)
            mx = (wt * x).sum(-1) * invW
            my = (wt * y).sum(-1) * invW
            var = (wt * (x - mx[..., None]) ** 2).sum(-1) * invW
            den = var + eps
            da_dy = wt * (x - mx[..., None]) * invW[..., None] / den[..., None]
            da_dx = (wt * (y - my[..., None]) * invW[..., None]
                     - a[..., None] * 2.0 * wt * (x - mx[..., None]) * invW[..., None]) / den[..., None]
            f = (-2.0 * eps * g * a)[..., None]
            dx = dx + f * da_dx
            dy = dy + f * da_dy
        add(dx_target, dx)
        add(dy_target, dy)

    direction(s, e, fits["a"], fits["res"], dS, dE)
    if bidirectional:
        direction(e, s, fits["a_rev"], fits["res_rev"], dE, dS)
    cs, ce = np.asarray(source).shape[1], np.asarray(edited).shape[1]
    dS = np.repeat(dS.reshape(bsz, 1, h, w) / cs, cs, axis=1)
    dE = np.repeat(dE.reshape(bsz, 1, h, w) / ce, ce, axis=1)
    return dS, dE
