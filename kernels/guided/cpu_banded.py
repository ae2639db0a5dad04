"""The CPU float32 forward of the guided filter (q only; the op's backward recomputes its statistics on the
PyTorch path): the same maths as ``torch_path.forward``, computed in horizontal bands inside a small reused
workspace.

On CPU a fresh full-size float32 tensor costs more in page faults than the arithmetic done on it,
so the generic path (one new tensor per elementwise op) runs 3-10x slower than the work needs. Here
every op writes into a persistent band-sized buffer (``out=`` / in place), OpenCV's ``boxFilter``
(float64 accumulation, O(1) per pixel) does the window sums, and each band carries a 2r halo above and
below so that the rows it keeps see exactly the pixels the full image would give them.
"""
from __future__ import annotations

import cv2
import numpy as np
import torch

from ..box.large_radius import needs_reduction
from ..box.torch_path import _CV2_BORDER, inv_count
from .torch_path import inverse_sym3_into

WORKSPACE_BYTES = 16 << 20  # band height is chosen so that the workspace stays about this size: half the 32 MB L3
# of the 2-core box, so a band's planes stay cached between the box filters (1 thread, r=8, process time against
# 64 MB: gray 1024^2 8.6 -> 7.2 ms, colour 1024^2 58 -> 53 ms, gray 3840x2160 75 -> 67 ms; 8 MB: 6.9, 61, 70 ms)
_workspace: dict = {}


def _buffer(planes: int, rows: int, width: int) -> torch.Tensor:
    key = (planes, rows, width)
    buf = _workspace.get(key)
    if buf is None:
        _workspace.clear()  # keep one: the last shape used
        buf = _workspace[key] = torch.empty(planes, rows, width)
    return buf


def clear_workspace() -> None:
    """Release the CPU workspace kept between calls."""
    _workspace.clear()


def supported(I: torch.Tensor, p: torch.Tensor, r: int, border: str) -> bool:
    """Whether :func:`forward` takes these inputs. Tensors that require grad are fine: the op's forward runs on
    their values (detached), and its backward recomputes what it needs from the inputs."""
    h, w = I.shape[-2:]
    return (I.device.type == "cpu" and I.dtype == torch.float32 and p.dtype == torch.float32 and r > 0
            and (border == "valid" or border == "replicate" or r < min(h, w))
            and not needs_reduction(h, w, r, border))


_corrections: dict = {}


class _Box:
    """Window mean into ``dst``. "valid": OpenCV divides by (2r+1)^2 and only the r-wide frame of
    pixels whose windows leave the image is rescaled by (2r+1)^2 / N, so the interior costs nothing extra."""

    def __init__(self, r: int, border: str, rows: int, width: int):
        self.r, self.k = r, 2 * r + 1
        self.valid = border == "valid"
        self.code = _CV2_BORDER["zero" if self.valid else border]
        self.frame = None
        if self.valid:
            key = (rows, width, r)
            if key not in _corrections:
                if len(_corrections) > 8:
                    _corrections.clear()
                _corrections[key] = inv_count(rows, width, r, "cpu") * float(self.k * self.k)
            corr = _corrections[key]
            if rows > 2 * r and width > 2 * r:
                self.frame = [(sl, corr[sl]) for sl in (np.s_[:r], np.s_[rows - r:], np.s_[r:rows - r, :r],
                                                        np.s_[r:rows - r, width - r:])]
            else:
                self.frame = [(np.s_[:], corr)]

    def __call__(self, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        cv2.boxFilter(src.numpy(), -1, (self.k, self.k), dst=dst.numpy(), normalize=True, borderType=self.code)
        if self.valid:
            for sl, corr in self.frame:
                dst[sl].mul_(corr)
        return dst


def _bands(h: int, r: int, planes: int, width: int):
    """(band height incl. halo, [(y0, y1, ya, yb)]): rows [y0, y1) are kept from the rows [ya, yb) computed."""
    halo = 2 * r
    rows = max(WORKSPACE_BYTES // (4 * planes * max(width, 1)) - 2 * halo, 8 * r, 32)
    if rows + 2 * halo >= h:
        return h, [(0, h, 0, h)]
    return rows + 2 * halo, [(y0, min(h, y0 + rows), max(0, y0 - halo), min(h, y0 + rows + halo))
                             for y0 in range(0, h, rows)]


def forward(I, p, ci, cp, eps, r, border):
    """q for raw (uncentred) float32 I (B, G, H, W), p (B, C, H, W); ci/cp: per-image means; eps (B,)."""
    b_, g, h, w = I.shape
    c = p.shape[1]
    q = torch.empty_like(p)
    planes = 9 if g == 1 else 27
    height, bands = _bands(h, r, planes, w)
    buf = _buffer(planes, height, w)
    for b in range(b_):
        e = float(eps[b])
        for y0, y1, ya, yb in bands:
            n = yb - ya
            ws = buf[:, :n]
            box = _Box(r, border, n, w)
            keep = slice(y0 - ya, y1 - ya)
            if g == 1:
                _gray_band(I[b, 0, ya:yb], p[b, :, ya:yb], float(ci[b, 0]), cp[b, :, 0, 0].tolist(), e, box, ws,
                           q[b, :, y0:y1], keep)
            else:
                _color_band(I[b, :, ya:yb], p[b, :, ya:yb], ci[b, :, 0, 0].tolist(), cp[b, :, 0, 0].tolist(), e,
                            box, ws, q[b, :, y0:y1], keep)
    return q


def _gray_band(I, p, ci, cp, eps, box, ws, out, keep):
    Ib, mI, denom, t, pb, mp, A = (ws[i] for i in range(7))
    torch.sub(I, ci, out=Ib)
    box(Ib, mI)
    torch.mul(Ib, Ib, out=t)
    box(t, denom)
    torch.addcmul(denom, mI, mI, value=-1.0, out=denom)
    denom.clamp_(min=0.0).add_(eps)
    for ch in range(p.shape[0]):
        torch.sub(p[ch], cp[ch], out=pb)
        box(pb, mp)
        torch.mul(Ib, pb, out=t)
        box(t, A)
        A.addcmul_(mI, mp, value=-1.0).div_(denom)  # a = cov / (var + eps)
        mp.addcmul_(A, mI, value=-1.0)  # b = mean p - a mean I
        box(A, t)
        box(mp, pb)
        torch.addcmul(pb[keep], t[keep], Ib[keep], out=out[ch])
        out[ch].add_(cp[ch])


def _color_band(I, p, ci, cp, eps, box, ws, out, keep):
    Ic, mI = ws[0:3], ws[3:6]
    s = ws[6:12]  # covariance entries 00 01 02 11 12 22, then the inverse in place
    cof = ws[12:18]
    t, pb, mp = ws[18], ws[19], ws[20]
    cov, a = ws[21:24], ws[24:27]
    for i in range(3):
        torch.sub(I[i], ci[i], out=Ic[i])
        box(Ic[i], mI[i])
    pairs = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))
    for k, (i, j) in enumerate(pairs):
        torch.mul(Ic[i], Ic[j], out=t)
        box(t, s[k])
        s[k].addcmul_(mI[i], mI[j], value=-1.0)
        if i == j:
            s[k].clamp_(min=0.0).add_(eps)
    inverse_sym3_into(s, cof, t)  # s becomes the inverse, symmetric: entries in the same order
    inv = ((s[0], s[1], s[2]), (s[1], s[3], s[4]), (s[2], s[4], s[5]))
    for ch in range(p.shape[0]):
        torch.sub(p[ch], cp[ch], out=pb)
        box(pb, mp)
        for i in range(3):
            torch.mul(Ic[i], pb, out=t)
            box(t, cov[i])
            cov[i].addcmul_(mI[i], mp, value=-1.0)
        for i in range(3):
            torch.mul(inv[i][0], cov[0], out=a[i]).addcmul_(inv[i][1], cov[1]).addcmul_(inv[i][2], cov[2])
            mp.addcmul_(a[i], mI[i], value=-1.0)  # b = mean p - a . mean I
        for i in range(3):
            box(a[i], cov[i])
        box(mp, pb)
        o = out[ch]
        torch.addcmul(pb[keep], cov[0][keep], Ic[0][keep], out=o)
        o.addcmul_(cov[1][keep], Ic[1][keep]).addcmul_(cov[2][keep], Ic[2][keep]).add_(cp[ch])
