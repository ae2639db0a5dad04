"""Public local linear regression: input checks, centring and dispatch.

The op declares its paths with ``register_path``, each with its implementation: Triton (:mod:`.triton_path`);
PyTorch with numba loops for the cell moments, the solve and the apply's upsampling, and OpenCV's window sums
(``torch+numba``: CPU float32, numba importable, ``VISION_NUMBA`` on); PyTorch with OpenCV's window sums
(``torch+opencv``, the fit: CPU float32); plain PyTorch (any device and dtype). The engines are fixed by the
path (``torch_path.Engine``): nothing below the choice asks again. Each call asks ``runtime.choose`` which path
takes it and passes the path's name to the ``torch.library`` custom ops of :mod:`.library`
(``vision::local_linear_fit`` and ``vision::local_linear_apply``, with fake implementations and closed-form
backwards that are custom ops too), which run that path's implementation (ARCHITECTURE.md, "Adding an op").
The conditions are those of the working tensors inside the ops, where autograd is off: inputs that require grad
take the same engines as inputs that do not, and half inputs are computed in float32 like float32 inputs.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from ..border import check_border
from ..box.torch_path import opencv_available
from ..runtime import backend_of, choose, jit, register_path
from ..cells import low_res_radius
from ..runtime import data_checks
from ..validate import (as_float, check_all_finite, check_float_tensor, check_image, check_not_meta_beside_real,
                        check_positive, check_radius, check_scale, is_symbolic)
from ..runtime.calls import run_op
from .library import apply, apply_op, fit, fit_op
from .torch_path import Engine

MAX_FEATURES = 8
MAX_TARGETS = 4


class _Triton:
    """The Triton module's entry points (imported on first use: Triton may be absent)."""

    def __getattr__(self, name):
        # lazy: a `vision denoise` frame starts without vision.kernels.local_linear.triton_path
        from . import triton_path

        return getattr(triton_path, name)


def _triton_takes(dtype: torch.dtype, device=None) -> str | None:
    return None if dtype == torch.float32 else f"{str(dtype).replace('torch.', '')} runs the PyTorch path (the kernels are float32)"


def _numba_takes(dtype: torch.dtype, device) -> str | None:
    # jit.enabled() without tensors: numba importable and VISION_NUMBA on; the working tensors are CPU float32
    if device.type == "cpu" and dtype == torch.float32 and jit.enabled():
        return None
    return "needs CPU float32, numba importable and VISION_NUMBA on"


def _opencv_takes(dtype: torch.dtype, device) -> str | None:
    return None if opencv_available(device, dtype) else "needs CPU float32 and OpenCV"


for _op in ("local_linear_fit", "local_linear_apply"):
    register_path(_op, "triton", "triton", 10, supports=_triton_takes, run=_Triton())
    register_path(_op, "torch+numba", "torch", 5, supports=_numba_takes, run=Engine("opencv", numba=True))
    register_path(_op, "torch", "torch", 0, run=Engine("torch", numba=False))
# the apply sums no windows: OpenCV has nothing to do there
register_path("local_linear_fit", "torch+opencv", "torch", 3, supports=_opencv_takes,
              run=Engine("opencv", numba=False))


def _choose(op: str, x: torch.Tensor, dtype: torch.dtype) -> tuple[str, str]:
    """(path, backend): the path :func:`vision.kernels.runtime.choose` takes for this call, and its backend."""
    path = choose(op, x, dtype=dtype, device=x.device)
    return path, backend_of(op, path)


def _reads_data(backend: str) -> bool:
    """Whether the checks that read tensor values run: as ``runtime.data_checks`` says, and never while
    torch.compile traces (a graph cannot branch on values; the traced op itself still computes them)."""
    return data_checks(backend) and not torch.compiler.is_compiling()


def _work_dtype(*tensors) -> torch.dtype:
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def _check_features(features: torch.Tensor) -> int:
    features = check_image(features, "features")
    k = features.shape[1]
    if not 1 <= k <= MAX_FEATURES:
        raise ValueError(f"features must have K = 1 to {MAX_FEATURES} channels, got K = {k}")
    return k


def _check_eps(eps, batch: int, k: int, device, dtype, backend: str) -> torch.Tensor:
    """eps as a (B, K) tensor: a positive float, a per-feature tensor (K,) or a per-image one (B, K).

    A float is checked on the host; a tensor's values only where ``runtime.data_checks(backend)`` allows.
    """
    if isinstance(eps, torch.Tensor):
        check_float_tensor(eps, "eps")
        check_not_meta_beside_real(eps, "eps", device)
        if eps.dim() == 0 or (eps.dim() == 1 and eps.numel() in (1, k)) or (eps.dim() == 2 and tuple(eps.shape) == (batch, k)):
            t = eps.to(device=device, dtype=dtype)
        else:
            raise ValueError(f"eps must be a float, a tensor of shape ({k},) (one per feature) or ({batch}, {k}), "
                             f"got shape {tuple(eps.shape)}")
        values = t.detach()
    elif is_symbolic(eps):  # a compiled module's float eps: torch._check, no reading (validate.is_symbolic)
        return torch.full((batch, k), check_positive(eps, "eps"), device=device, dtype=dtype)
    else:
        value = as_float(eps, "eps", "a float or a tensor")
        if not (math.isfinite(value) and value > 0):  # checked here: no device round trip for a plain float
            raise ValueError(f"eps must be positive and finite (it keeps every window's system solvable), got "
                             f"{value}")
        return torch.full((batch, k), value, device=device, dtype=dtype)
    if _reads_data(backend) and (not bool(torch.isfinite(values).all()) or bool((values <= 0).any())):
        raise ValueError(f"eps must be positive and finite (it keeps every window's system solvable), got "
                         f"{values.flatten().tolist()[:8]}")
    return t.expand(batch, k) if t.dim() < 2 else t


def _check_radii(radius, weights, batch: int, grid: tuple[int, int], device, dtype, backend: str):
    """(radii tuple, weights or None) from an int radius or a sequence of radii with their blend weights."""
    if isinstance(radius, (list, tuple)):
        radii = tuple(check_radius(r) for r in radius)
        if not radii:
            raise ValueError("radius must be an int or a non-empty sequence of ints")
    else:
        radii = (check_radius(radius),)
        if weights is not None:
            raise ValueError("weights blend the fits of several radii: pass radius as a sequence with them")
    if weights is None:
        if len(radii) > 1:
            raise ValueError(f"{len(radii)} radii need weights of shape ({batch}, {len(radii)}, {grid[0]}, {grid[1]})")
        return radii, None
    want = (batch, len(radii), *grid)
    if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != want:
        got = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise ValueError(f"weights must have shape {want} (batch, radii, coefficient grid), got {got}")
    if weights.device != device:
        raise ValueError(f"weights are on {weights.device} but features on {device}")
    if _reads_data(backend):
        check_all_finite((weights, "weights"), backend=backend)
    return radii, weights.to(dtype).contiguous()


def local_linear_fit(features: torch.Tensor, target: torch.Tensor, radius: int | Sequence[int],
                     eps: float | torch.Tensor, scale: int = 1,
                     border: str = "valid", weights: torch.Tensor | None = None) -> torch.Tensor:
    r"""Local linear regression: in every window, a ridge fit of each target channel on K feature channels
    plus a constant; returns the coefficients averaged over the overlapping windows.

    This is the guided filter (He, Sun, Tang, TPAMI 2013) with K guide channels: with the window means
    and the centred window covariance ``Sigma_w`` of the features (moments divided by the pixel count),
    every window w solves ``(Sigma_w + diag(eps)) a_w = cov_w(features, target)`` and sets
    ``b_w = mean_w(target) - a_w . mean_w(features)``. eps regularises the slopes a only, never the
    intercept b, and is in the squared units of each feature: callers that want scale-free
    regularisation standardise their features (e.g. to unit variance) before the call.

    Averaging over the overlapping windows. At ``scale = 1`` the window of pixel x is the
    ``(2r+1) x (2r+1)`` square centred on x (completed by ``border``), and the returned coefficients at x
    are the means of the window coefficients over that same window of window centres, i.e. the box
    filter of a and of b, exactly the guided filter's ``mean(a)`` and ``mean(b)``. So
    ``local_linear_apply(f, local_linear_fit(f, p, r, eps))`` is ``guided_filter(f, p, r, eps)`` for
    K = 1, and for K = 3 with a scalar eps (the colour guided filter).

    Low-resolution fit (``scale = s > 1``, as in the fast guided filter and in Fast Local Neural
    Regression, Salmi et al. 2024). The image is cut into ``s x s`` cells (cell (i, j) holds pixels
    ``[i s, (i+1) s) x [j s, (j+1) s)``; the last row and column of cells may be partial). Every moment
    (f_k, p_c, f_k f_l, f_k p_c) is first averaged over each cell's real pixels, then the windows are
    ``(2r'+1)^2`` cells of that ``ceil(H/s) x ceil(W/s)`` grid, with ``r' = max(1, round(r / s))`` (the
    radius stays in full-resolution pixels, as in :func:`guided_filter`), each cell weighing the same.
    The coefficients are averaged over the overlapping windows on the grid, and coefficient (i, j)
    belongs at the centre of its cell: :func:`local_linear_apply` places it at pixel
    ``((i + 1/2) s - 1/2, (j + 1/2) s - 1/2)``.

    Args:
        features: (B, K, H, W), 1 <= K <= 8 feature (guide) channels.
        target: (B, C, H, W), 1 <= C <= 4 channels to explain; same B, H, W as ``features``.
        radius: window radius r >= 0 in full-resolution pixels, or a sequence of R radii to blend (with
            ``weights``). Any radius costs at most what the image costs: with ``"valid"`` a window wider
            than the grid is the whole grid, so r is clamped to max(H', W') - 1 cells (same result);
            padded borders keep r (repeats weigh in by r) and visit at most 2n - 1 taps on an axis of n.
        eps: ridge weight (> 0) on the slopes: a float, a per-feature tensor (K,), or (B, K).
            Differentiable when it is a tensor that requires grad.
        scale: s >= 1; ``s > 1`` fits on the grid of s x s cells.
        border: ``"valid"`` (default; windows keep their in-image pixels, or cells),
            ``"reflect"``, ``"replicate"``, ``"symmetric"`` (see :mod:`vision.kernels.border`); applied to
            pixels at scale 1, to cells of the grid at scale > 1.
        weights: with R radii, (B, R, ceil(H/s), ceil(W/s)) per-cell blend weights (e.g. a softmax over R):
            the result is ``sum_j weights[:, j] * fit at radius j``, each fit exactly as above. The fits
            share one pass over the pixels (the cell moments), which is most of the cost at scale > 1.
            A blend of local linear models is a local linear model, so one ``local_linear_apply``
            evaluates it. Differentiable w.r.t. the weights.

    Returns:
        (B, C, K + 1, ceil(H/s), ceil(W/s)) coefficients for the raw (not centred) features: entries
        0..K-1 the slopes, entry K the constant term. dtype: the promoted input dtype (float16/bfloat16
        inputs are computed in float32). Differentiable w.r.t. features and target (closed-form
        backward: adjoint box filters and one more per-pixel solve with the same factorisation).

    Example:
        >>> f = torch.rand(1, 6, 64, 64)   # e.g. albedo, normal, depth guides
        >>> p = torch.rand(1, 3, 64, 64)   # noisy radiance
        >>> coeffs = local_linear_fit(f, p, radius=8, eps=1e-3, scale=4)
        >>> coeffs.shape
        torch.Size([1, 3, 7, 16, 16])
        >>> local_linear_apply(f, coeffs).shape
        torch.Size([1, 3, 64, 64])
        >>> w = torch.softmax(torch.randn(1, 3, 16, 16), 1)  # per-cell blend of three radii
        >>> local_linear_fit(f, p, radius=(4, 8, 16), eps=1e-3, scale=4, weights=w).shape
        torch.Size([1, 3, 7, 16, 16])
    """
    k = _check_features(features)
    target = check_image(target, "target")
    c = target.shape[1]
    if not 1 <= c <= MAX_TARGETS:
        raise ValueError(f"target must have C = 1 to {MAX_TARGETS} channels, got C = {c}")
    if features.shape[0] != target.shape[0] or features.shape[-2:] != target.shape[-2:]:
        raise ValueError(f"features {tuple(features.shape)} and target {tuple(target.shape)} must share batch, "
                         "height and width")
    if features.device != target.device:
        raise ValueError(f"features are on {features.device} but target on {target.device}")
    scale = check_scale(scale)
    border = check_border(border)
    work = _work_dtype(features, target)
    grid = (-(-features.shape[-2] // scale), -(-features.shape[-1] // scale))
    path, backend = _choose("local_linear_fit", features, work)
    if features.is_meta or target.is_meta:  # shapes only: no value to check (as on the Triton path)
        backend = "triton"
    radii, weights = _check_radii(radius, weights, features.shape[0], grid, features.device, work, backend)
    out_dtype = torch.promote_types(features.dtype, target.dtype)
    eps_t = _check_eps(eps, features.shape[0], k, features.device, work, backend)
    f, p = features.to(work), target.to(work)
    # Shift invariance: fitting f - cf and p - cp gives the same slopes; the op adds the means back into
    # the intercept. Small centred moments keep Sigma = M(f f^T) - M(f) M(f)^T from cancelling in float32.
    cf = f.detach().mean((2, 3))
    cp = p.detach().mean((2, 3))
    # the means are finite unless an input holds NaN/Inf (or their float32 sum overflows, which the exact
    # check settles); read on the host only where data checks run (never on the Triton path by default)
    if _reads_data(backend) and not bool(torch.isfinite(cf.sum() + cp.sum())):
        check_all_finite((features, "features"), (target, "target"), backend=backend)
    r = [_equivalent_radius(low_res_radius(v, scale), grid, border) for v in radii]
    save = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (f, p, eps_t, weights))
    coeffs, _, _ = run_op(fit_op, fit, f.contiguous(), p.contiguous(), eps_t, weights, cf, cp, r, border, scale,
                          path, save)
    return coeffs.to(out_dtype)


def _equivalent_radius(r: int, grid: tuple[int, int], border: str) -> int:
    """The smallest radius with the same windows as r on this grid, so cost is bounded by the image.

    With ``"valid"`` a window of radius >= n - 1 on an axis of n pixels (or cells) already holds the whole
    axis, so r is clamped to max(H', W') - 1. Padded borders weigh the repeated pixels by r (a window of
    10^6 reflections is not a window of 127), so r stays; their window tables are built in O(n^2) whatever
    r is (:func:`.triton_path._window_counts`) and the window passes visit at most 2n - 1 taps.
    """
    return min(r, max(grid) - 1) if border == "valid" else r


def _infer_scale(h: int, w: int, gh: int, gw: int) -> tuple[float, float]:
    """Cell size of a (gh, gw) coefficient grid for (h, w) features: the smallest integer s with
    ceil(h / s) = gh and ceil(w / s) = gw; if none, the size ratios (a plain align_corners=False resize)."""
    if (gh, gw) == (h, w):
        return 1.0, 1.0
    lo = max(1, math.ceil(max(h / gh, w / gw) - 1e-9))
    for s in range(lo, max(h, w) + 1):
        if -(-h // s) == gh and -(-w // s) == gw:
            return float(s), float(s)
        if -(-h // s) < gh or -(-w // s) < gw:
            break
    return h / gh, w / gw


def local_linear_apply(features: torch.Tensor, coeffs: torch.Tensor, scale: int | None = None) -> torch.Tensor:
    r"""Evaluate local linear models: ``sum_k up(a_k) f_k + up(b)`` at every pixel.

    ``up`` is the bilinear upsampling of the coefficient grid to the features' size with
    ``align_corners=False``: coefficient (i, j) of a grid of s x s cells sits at pixel
    ``((i + 1/2) s - 1/2, (j + 1/2) s - 1/2)``, the centre of its cell (for a partial last cell, of the
    s x s cell it starts), and pixels beyond the outermost centres take the edge value. At equal sizes
    it is the identity. Applying coefficients fitted at
    low resolution (``local_linear_fit(..., scale=s)``, or a fit on a downsampled image) to full-resolution
    features is the joint denoise-and-upsample path.

    Args:
        features: (B, K, H, W) the features the coefficients were fitted on (or their full-resolution version).
        coeffs: (B, C, K + 1, H', W') from :func:`local_linear_fit`, H' <= H, W' <= W.
        scale: the cell size s. By default the smallest integer s with ``ceil(H/s) = H'`` and
            ``ceil(W/s) = W'`` (what ``local_linear_fit(..., scale=s)`` returns; pass it for tiny images
            where several s fit), else the size ratios H / H', W / W' (a plain resize).

    Returns:
        (B, C, H, W) in the promoted dtype of features and coeffs (computed in float32 for half inputs).
        Differentiable w.r.t. features and coeffs.

    Example:
        >>> f, p = torch.rand(2, 3, 40, 60), torch.rand(2, 1, 40, 60)
        >>> q = local_linear_apply(f, local_linear_fit(f, p, radius=4, eps=1e-2, scale=2))
        >>> q.shape
        torch.Size([2, 1, 40, 60])
    """
    k = _check_features(features)
    if not isinstance(coeffs, torch.Tensor) or coeffs.dim() != 5:
        shape = tuple(coeffs.shape) if isinstance(coeffs, torch.Tensor) else type(coeffs).__name__
        raise ValueError(f"coeffs must have shape (B, C, K + 1, H', W'), got {shape}")
    b, c, k1, gh, gw = coeffs.shape
    h, w = features.shape[-2:]
    if b != features.shape[0] or k1 != k + 1:
        raise ValueError(f"coeffs {tuple(coeffs.shape)} do not fit features {tuple(features.shape)}: need batch "
                         f"{features.shape[0]} and K + 1 = {k + 1} coefficients per channel")
    if not 1 <= c <= MAX_TARGETS:
        raise ValueError(f"coeffs must have C = 1 to {MAX_TARGETS} channels, got C = {c}")
    if min(coeffs.shape) == 0 or gh > h or gw > w:
        raise ValueError(f"coeffs grid {gh}x{gw} must be non-empty and no larger than the features' {h}x{w}")
    if coeffs.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise ValueError(f"coeffs must be float32, float16 or bfloat16, got {coeffs.dtype}")
    if coeffs.device != features.device:
        raise ValueError(f"features are on {features.device} but coeffs on {coeffs.device}")
    if scale is None:
        sh, sw = _infer_scale(h, w, gh, gw)
    else:
        s = check_scale(scale)
        if -(-h // s) != gh or -(-w // s) != gw:
            raise ValueError(f"scale={s} makes a {-(-h // s)}x{-(-w // s)} grid for {h}x{w} features, but coeffs "
                             f"are {gh}x{gw}")
        sh = sw = float(s)
    work = _work_dtype(features, coeffs)
    path, backend = _choose("local_linear_apply", features, work)
    if _reads_data(backend):
        check_all_finite((features, "features"), (coeffs, "coeffs"), backend=backend)
    out_dtype = torch.promote_types(features.dtype, coeffs.dtype)
    f, co = features.to(work).contiguous(), coeffs.to(work).contiguous()
    return run_op(apply_op, apply, f, co, float(sh), float(sw), path).to(out_dtype)


class LocalLinearFit(nn.Module):
    r"""``nn.Module`` form of :func:`local_linear_fit`: per-window ridge regression of a target on K
    feature channels (the guided filter of He, Sun and Tang, TPAMI 2013, generalised to K guides; the
    ``scale`` fit on cells as in Salmi et al., "Fast Local Neural Regression", 2024).

    Shapes: features (B, K, H, W), target (B, C, H, W) -> (B, C, K + 1, ceil(H/s), ceil(W/s)).

    Example:
        >>> fit = LocalLinearFit(radius=4, eps=1e-2, scale=2)
        >>> fit(torch.rand(1, 4, 32, 32), torch.rand(1, 3, 32, 32)).shape
        torch.Size([1, 3, 5, 16, 16])
    """

    eps: float | torch.Tensor

    def __init__(self, radius: int, eps: float | torch.Tensor, scale: int = 1, border: str = "valid") -> None:
        super().__init__()
        self.radius = check_radius(radius)
        self.scale, self.border = check_scale(scale), check_border(border)
        if isinstance(eps, torch.Tensor):  # follows .to() as GuidedFilter's does; not in the state_dict
            self.register_buffer("eps", eps, persistent=False)
        else:
            self.eps = eps

    def forward(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return local_linear_fit(features, target, self.radius, self.eps, self.scale, self.border)

    def extra_repr(self) -> str:
        return f"radius={self.radius}, eps={self.eps}, scale={self.scale}, border={self.border!r}"


class LocalLinearApply(nn.Module):
    r"""``nn.Module`` form of :func:`local_linear_apply`: bilinearly upsampled coefficients applied to features.

    Shapes: features (B, K, H, W), coeffs (B, C, K + 1, H', W') -> (B, C, H, W).

    Example:
        >>> f, p = torch.rand(1, 4, 32, 32), torch.rand(1, 3, 32, 32)
        >>> coeffs = LocalLinearFit(radius=4, eps=1e-2, scale=2)(f, p)
        >>> LocalLinearApply()(f, coeffs).shape
        torch.Size([1, 3, 32, 32])
    """

    def __init__(self, scale: int | None = None) -> None:
        super().__init__()
        self.scale = None if scale is None else check_scale(scale)

    def forward(self, features: torch.Tensor, coeffs: torch.Tensor) -> torch.Tensor:
        return local_linear_apply(features, coeffs, self.scale)

    def extra_repr(self) -> str:
        return f"scale={self.scale}"
