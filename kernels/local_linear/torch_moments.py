"""PyTorch path of local linear regression, first half: the moment layout, window sums and cell moments.

Every window quantity of the fit is a window mean of one of NM = K + C + K(K+1)/2 + KC "moment" channels, stacked
in the order of :class:`Layout` (f_k, p_c, f_i f_j for j <= i, f_k p_c). At ``scale = s > 1`` the moments are
first summed over s x s cells straight from the centred inputs. The solve, fit and apply that use them are in
:mod:`.torch_path`. The engines are the caller's (the path the registry chose): ``box`` "opencv" or "torch" for
the window sums (``box.torch_path``), ``numba`` for the fused cell-moment loops.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from ..runtime.threads import n_workers, parallel_for
from ..box.torch_path import _CV2_BORDER, box_mean, box_mean_adjoint, cv2, inv_count, opencv_folds, valid_border_
from ..box import large_radius
from . import cpu_path

BAND_PIXELS = 1 << 16  # grid pixels per band of the per-pixel solve (~ a few MB of working set)
MOMENT_BAND_PIXELS = 1 << 20  # pixel-channels per band of the cell moments (4 MB of float32; smaller bands
# cost more in per-op overhead than they win in cache hits)
UPSAMPLE_PIXELS = 1 << 19  # output pixels per band of the apply (1 << 17 was ~1.2x, 1 << 15 ~1.8x slower at 1280 x 720, K = 4)


@dataclass(frozen=True)
class Layout:
    """Channel layout of the stacked moments for K features and C targets."""
    K: int
    C: int

    @property
    def P(self) -> int:
        return self.K * (self.K + 1) // 2

    @property
    def NM(self) -> int:
        return self.K + self.C + self.P + self.K * self.C

    @property
    def ff(self) -> int:  # first f_i f_j channel; pair (i, j), j <= i, at ff + i (i + 1) / 2 + j
        return self.K + self.C

    @property
    def fp(self) -> int:  # first f_k p_c channel, at fp + c K + k
        return self.ff + self.P


@lru_cache(maxsize=None)
def layout(K: int, C: int) -> Layout:
    return Layout(K, C)


@lru_cache(maxsize=None)
def pairs(K: int):
    i, j = zip(*[(i, j) for i in range(K) for j in range(i + 1)])
    return torch.tensor(i), torch.tensor(j)


@lru_cache(maxsize=None)
def pair_slots(K: int, device: str):
    """(I, J, I K + J, J K + I) on ``device``: the pairs j <= i and where each lands in a flattened K x K block,
    below and above the diagonal (so the blocks fill with two ``index_copy_`` rows, not an element scatter)."""
    i, j = pairs(K)
    return tuple(t.to(device) for t in (i, j, i * K + j, j * K + i))


def rows_per_band(n_pixels: int, row_pixels: int, device) -> int:
    if device.type != "cpu":
        return 1 << 30  # one band: accelerators want big ops
    return max(1, n_pixels // max(row_pixels, 1))


# ---------------------------------------------------------------------------------------------- boxes

def chunks(n: int, device) -> list[range]:
    """``range(n)`` cut into one contiguous chunk per worker (one task each: small planes are too cheap to pay a
    task's overhead each)."""
    k = max(1, min(n, n_workers(device)))
    return [range(n * i // k, n * (i + 1) // k) for i in range(k)]


def box_mean_(x: torch.Tensor, r: int, border: str, out: torch.Tensor | None = None,
              box: str = "torch") -> torch.Tensor:
    """Window mean over the last two axes, in place where OpenCV does the sums (``box="opencv"``: CPU float32), or
    into ``out`` (a contiguous tensor shaped like x; x is then left as it is)."""
    if r == 0:
        return x if out is None else out.copy_(x)
    h, w = x.shape[-2:]
    mode = "zero" if border == "valid" else border
    # a window past the image is reduced exactly to one of the image's size (box.large_radius) before any engine
    # sums it: OpenCV would fold a replicate window of 2r + 1 taps at r = 10^6 (seconds per plane)
    reduce = large_radius.needs_reduction(h, w, r, border)
    if box == "opencv" and not reduce and x.is_contiguous() and (out is None or out.is_contiguous()) \
            and opencv_folds(r, mode, h, w):
        k = 2 * r + 1
        src = x.detach().view(-1, h, w)
        planes = src if out is None else out.detach().view(-1, h, w)
        arrays, dst = src.numpy(), planes.numpy()

        def some(chunk):  # OpenCV divides by k^2 as it sums
            for i in chunk:
                cv2.boxFilter(arrays[i], -1, (k, k), dst=dst[i], normalize=True, borderType=_CV2_BORDER[mode])

        parallel_for(some, chunks(planes.shape[0], x.device), x.device)
        if border == "valid":  # rescale the border strips, all planes at once
            valid_border_(planes, r)
        return x if out is None else out
    m = box_mean(x, r, border, box)
    return m if out is None else out.copy_(m)


def box_mean_adjoint_(g: torch.Tensor, r: int, border: str, box: str = "torch") -> torch.Tensor:
    """The adjoint of :func:`box_mean_` (``M^T g = B(g / N)`` for "valid"), in place where OpenCV does the sums."""
    if r == 0:
        return g
    h, w = g.shape[-2:]
    if box == "opencv" and border == "valid" and g.is_contiguous():
        k = 2 * r + 1
        planes = g.detach().view(-1, h, w)
        inv = inv_count(h, w, r, g.device, g.dtype)
        arrays = planes.numpy()

        def some(chunk):
            for i in chunk:
                planes[i].mul_(inv)
                cv2.boxFilter(arrays[i], -1, (k, k), dst=arrays[i], normalize=False, borderType=_CV2_BORDER["zero"])

        parallel_for(some, chunks(planes.shape[0], g.device), g.device)
        return g
    return box_mean_adjoint(g, r, border, box)


# ---------------------------------------------------------------------------------------------- moments

def grid_shape(h: int, w: int, s: int) -> tuple[int, int]:
    return -(-h // s), -(-w // s)


@lru_cache(maxsize=64)
def _cell_count(h: int, w: int, s: int) -> np.ndarray:
    gh, gw = grid_shape(h, w, s)
    ny = np.minimum(s, h - s * np.arange(gh))
    nx = np.minimum(s, w - s * np.arange(gw))
    return np.outer(ny, nx).astype(np.float64)


def _centred_padded(x, c, s):
    """x - c in a (B, n, H' s, W' s) buffer, zero past the image (so partial cells sum their real pixels)."""
    B, n, H, W = x.shape
    gh, gw = grid_shape(H, W, s)
    pad = (gh * s, gw * s) != (H, W)
    z = x.new_zeros(B, n, gh * s, gw * s) if pad else torch.empty_like(x)
    torch.sub(x, c[:, :, None, None], out=z[:, :, :H, :W])
    return z


def _cell_moment_sums_(out, z, lay, acc):
    """out (B, NM, n, W') = the sums over every s x s cell of the moment channels of z (B, K + C, n, s, W' s), the
    centred features and targets of n cell rows, in :class:`Layout` order; acc a (B, NM, n, W' s) buffer.

    The channels are formed in groups that broadcast (z_i times z_0..z_i, z_(K+c) times z_0..z_(K-1)), a cell's
    rows are summed first and its columns last, each for all moments at once: a few dozen large ops per band
    instead of several per moment (whose per-op overhead dominated)."""
    K, C, s = lay.K, lay.C, z.shape[3]
    rows = [z[:, :, :, dy] for dy in range(s)]  # (B, K + C, n, W' s) each
    means = acc[:, :K + C]
    means.copy_(rows[0])
    for r in rows[1:]:
        means.add_(r)
    for i in range(K):  # f_i f_j, j <= i: channels ff + i (i + 1) / 2 + j
        o = acc[:, lay.ff + i * (i + 1) // 2: lay.ff + (i + 1) * (i + 2) // 2]
        torch.mul(rows[0][:, i:i + 1], rows[0][:, :i + 1], out=o)
        for r in rows[1:]:
            o.addcmul_(r[:, i:i + 1], r[:, :i + 1])
    o = acc[:, lay.fp:].view(*acc.shape[:1], C, K, *acc.shape[2:])  # f_k p_c at fp + c K + k
    torch.mul(rows[0][:, K:, None], rows[0][:, None, :K], out=o)
    for r in rows[1:]:
        o.addcmul_(r[:, K:, None], r[:, None, :K])
    cols = acc.view(*acc.shape[:3], -1, s)
    if s == 1:
        out.copy_(cols[..., 0])
        return out
    torch.add(cols[..., 0], cols[..., 1], out=out)
    for dx in range(2, s):
        out.add_(cols[..., dx])
    return out


@lru_cache(maxsize=None)
def _moment_pairs(K: int, C: int):
    """For every moment channel, the indices (a, b) into z = (f_0..f_K-1, p_0..p_C-1) of its product (b None: z_a)."""
    pairs = [(k, None) for k in range(K + C)]
    pairs += [(i, j) for i in range(K) for j in range(i + 1)]
    pairs += [(k, K + c) for c in range(C) for k in range(K)]
    return tuple(pairs)


def cell_moments(f, p, cf, cp, s: int, numba: bool = False) -> torch.Tensor:
    """Cell means (B, NM, H', W') of the moment channels of the centred f and p (no window pass yet); ``numba``:
    the fused loops of the torch+numba path (CPU float32)."""
    B, K, H, W = f.shape
    C = p.shape[1]
    lay = layout(K, C)
    if s > 1 and numba:  # (at s = 1 the products go straight into X: nothing to fuse)

        X = f.new_empty(B, lay.NM, *grid_shape(H, W, s))
        cpu_path.cell_moments(f.contiguous(), p.contiguous(), cf.contiguous(), cp.contiguous(), s, X)
        return X
    if s == 1:
        X = f.new_empty(B, lay.NM, H, W)
        fc, pc = X[:, :K], X[:, K:K + C]
        torch.sub(f, cf[:, :, None, None], out=fc)
        torch.sub(p, cp[:, :, None, None], out=pc)
        z = [fc[:, k] for k in range(K)] + [pc[:, c] for c in range(C)]
        pairs = _moment_pairs(K, C)[K + C:]
        parallel_for(lambda m: torch.mul(z[pairs[m][0]], z[pairs[m][1]], out=X[:, lay.ff + m]), range(len(pairs)),
                     f.device)
        return X
    gh, gw = grid_shape(H, W, s)
    X = f.new_empty(B, lay.NM, gh, gw)
    count = torch.as_tensor(_cell_count(H, W, s), device=f.device, dtype=f.dtype)
    # bands of cell rows: a band's centred pixels stay in cache while all NM moments read them
    rows = max(1, MOMENT_BAND_PIXELS // (B * (K + C) * s * s * gw)) if f.device.type == "cpu" else gh
    rows = min(rows, -(-gh // n_workers(f.device)))  # at least one band per worker

    def band(i0):
        i1 = min(gh, i0 + rows)
        n, y0, y1 = i1 - i0, i0 * s, min(H, i1 * s)
        pad = (y1 - y0, W) != (n * s, gw * s)
        z = (f.new_zeros if pad else f.new_empty)(B, K + C, n * s, gw * s)  # zero past the image
        torch.sub(f[:, :, y0:y1], cf[:, :, None, None], out=z[:, :K, :y1 - y0, :W])
        torch.sub(p[:, :, y0:y1], cp[:, :, None, None], out=z[:, K:, :y1 - y0, :W])
        _cell_moment_sums_(X[:, :, i0:i1], z.view(B, K + C, n, s, gw * s), lay, f.new_empty(B, lay.NM, n, gw * s))
        X[:, :, i0:i1].div_(count[i0:i1])

    parallel_for(band, range(0, gh, rows), f.device)
    return X


def cell_moments_adjoint(gX, f, p, cf, cp, s: int):
    """Gradients (df, dp) from the gradient of :func:`cell_moments`."""
    B, K, H, W = f.shape
    C = p.shape[1]
    lay = layout(K, C)
    if s == 1:
        fc, pc = f - cf[:, :, None, None], p - cp[:, :, None, None]
        z = [fc[:, k] for k in range(K)] + [pc[:, c] for c in range(C)]
        df = gX[:, :K].clone()
        dp = gX[:, K:K + C].clone()
        terms = [[] for _ in range(K + C)]  # per output channel: (moment channel, factor, other z)
        for m, (a, b) in enumerate(_moment_pairs(K, C)):
            if b is None:
                continue
            if a == b:
                terms[a].append((m, 2.0, a))
            else:
                terms[a].append((m, 1.0, b))
                terms[b].append((m, 1.0, a))

        def one(ch):
            out = df[:, ch] if ch < K else dp[:, ch - K]
            for m, factor, other in terms[ch]:
                out.addcmul_(gX[:, m], z[other], value=factor)

        parallel_for(one, range(K + C), f.device)
        return df, dp
    # s > 1: every pixel of a cell gets the cell's moment gradients / (its real pixel count), times z
    gh, gw = grid_shape(H, W, s)
    count = torch.as_tensor(_cell_count(H, W, s), device=f.device, dtype=f.dtype)
    gc = gX / count
    zf, zp = _centred_padded(f, cf, s), _centred_padded(p, cp, s)
    z = [zf[:, k] for k in range(K)] + [zp[:, c] for c in range(C)]
    dzf, dzp = torch.empty_like(zf), torch.empty_like(zp)
    dz = [dzf[:, k] for k in range(K)] + [dzp[:, c] for c in range(C)]
    terms = [[] for _ in range(K + C)]  # per channel of z: (moment channel, factor, other channel or None)
    for m, (a, b) in enumerate(_moment_pairs(K, C)):
        if b is None:
            terms[a].append((m, 1.0, None))
        elif a == b:
            terms[a].append((m, 2.0, a))
        else:
            terms[a].append((m, 1.0, b))
            terms[b].append((m, 1.0, a))
    rows = lambda t: t.view(B, gh, s, gw * s)  # noqa: E731 - the s pixel rows of each cell row

    def spread(m):  # a cell's value over its s columns; broadcast over its s rows below (rows stay contiguous)
        return gc[:, m].repeat_interleave(s, dim=-1)[:, :, None]

    def one(ch):
        out = rows(dz[ch])
        out.copy_(spread(terms[ch][0][0]).expand_as(out))  # the plain mean term comes first
        for m, factor, other in terms[ch][1:]:
            out.addcmul_(spread(m), rows(z[other]), value=factor)

    parallel_for(one, range(K + C), f.device)
    return dzf[:, :, :H, :W], dzp[:, :, :H, :W]
