"""Public guided filter: input checks, centring, the fast (subsampled) variant, and dispatch.

The op declares its paths with ``register_path``, each with its implementation: Triton; OpenCV's CPU bands
(``cpu_banded``: q at scale 1 on CPU float32, the coefficients and the backward on the PyTorch formulas with
OpenCV's sums); the PyTorch formulas with OpenCV's window sums (CPU float32); the PyTorch formulas with
``avg_pool2d`` sums (any device and dtype). ``guided_filter`` asks ``runtime.choose`` which one takes the call and
passes the path's name to the ``torch.library`` custom ops ``vision::guided_filter`` and ``vision::guided_coeffs``
(the fast variant's low-resolution coefficients), which run that path's implementation and nothing else. The one
decision that needs the data, whether the CPU bands can square the guide in float32 (its range), is made inside
the op, where the banded path reads it anyway, through the registry too (op ``guided_filter_bands``: the bands, or
the rescaled formulas on OpenCV's sums). Each custom op has a fake implementation and a closed-form backward,
itself the custom op ``vision::guided_filter_backward`` running the same path's backward, so
``torch.compile(fullgraph=True)`` and CUDA graphs take them whole (ARCHITECTURE.md, "Adding an op").
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..border import check_border
from ..runtime import backend_of, choose, implementation, register_path, run_path
from ..box.op import effective_radius
from ..box.torch_path import OPENCV, TORCH, opencv_available
from ..validate import check_all_finite, check_eps, check_image, check_radius, check_scale, is_symbolic
from . import cpu_banded, torch_path
from .reference import low_res_radius, subsample_index


def _kernels():
    """The Triton entry points, :mod:`.triton_path`, imported on first use: its kernels load Triton (which may be
    absent) and read ``TRITON_INTERPRET`` as they are defined."""
    from . import triton_path  # lazy: its kernels load Triton; a `vision denoise` frame on CPU runs without them

    return triton_path


class _Triton:
    """The Triton kernels (imported on first use: Triton may be absent)."""

    @staticmethod
    def forward(I, p, eps, r, border, apply, need_grad=False):
        return _kernels().forward(I, p, eps, r, border, apply, need_grad=need_grad)

    @staticmethod
    def backward(saved, grads, eps, r, border, apply):
        return _kernels().backward(saved, grads, eps, r, border, apply)


class _Torch:
    """The PyTorch formulas on one window-sum engine (``box.torch_path.OPENCV`` or ``TORCH``)."""

    def __init__(self, box) -> None:
        self.box = box

    def forward(self, I, p, eps, r, border, apply, need_grad=False):
        return torch_path.forward(I, p, eps, r, border, apply, box=self.box)

    def backward(self, saved, grads, eps, r, border, apply):
        return torch_path.backward(saved, grads, eps, r, border, apply, box=self.box)


class _Banded(_Torch):
    """OpenCV's CPU bands for q (``filter``); the coefficients and the backward, which recompute their
    statistics, run the PyTorch formulas on OpenCV's sums."""

    def __init__(self) -> None:
        super().__init__(OPENCV)

    @staticmethod
    def filter(I, p, eps, radius, border):
        check_all_finite((I, "guide"), *(() if p is I else ((p, "src"),)), backend="torch")
        check_eps(eps, I.shape[0], I.device, backend="torch")
        # the values only: the backward recomputes its statistics from the inputs (_backward_op)
        Iv, pv = I.detach().contiguous(), p.detach().contiguous()
        ci, cp = Iv.mean((2, 3), keepdim=True), pv.mean((2, 3), keepdim=True)
        lo, hi = torch.aminmax(Iv)  # one pass, no temporary: |I - ci| <= hi - lo
        # the PyTorch path reads data anyway (its checks); the range decides whether the bands can square the guide
        sub = choose("guided_filter_bands", I, span=float(hi - lo))
        return run_path("guided_filter_bands", sub, I, p, eps, radius, border, Iv, pv, ci, cp)


def _triton_takes(dtype: torch.dtype, radius: int, **_) -> str | None:
    if dtype == torch.float64:
        return "float64 runs the PyTorch path (the kernels accumulate in float32)"
    return None if _kernels().supported(radius, dtype) else f"radius {radius} runs the PyTorch path"


def _banded_takes(dtype, r, I, p, border, scale, **_) -> str | None:
    if scale != 1 or not cpu_banded.supported(I, p, r, border):
        return "needs CPU float32, scale 1, and a window OpenCV's bands can take"
    return None  # a guide whose squares would overflow float32 takes the generic formulas (guided_filter_bands)


def _opencv_takes(dtype, device, **_) -> str | None:
    return None if opencv_available(device, dtype) else "needs CPU float32 and OpenCV"


def _span_takes(span: float) -> str | None:
    return None if span <= HUGE else "the guide's range exceeds 2^32: its squares would overflow float32 in the " \
                                     "bands; the rescaled formulas run"


def _bands(I, p, eps, radius, border, Iv, pv, ci, cp):
    with torch.no_grad():
        return cpu_banded.forward(Iv, pv, ci, cp, eps.detach(), radius, border)


def _rescaled(I, p, eps, radius, border, *_):
    return _generic_filter(I, p, eps, radius, border, "torch+opencv")


register_path("guided_filter", "triton", "triton", 10, supports=_triton_takes, run=_Triton)
register_path("guided_filter", "cpu-banded", "torch", 5, supports=_banded_takes, run=_Banded())
register_path("guided_filter", "torch+opencv", "torch", 3, supports=_opencv_takes, run=_Torch(OPENCV))
register_path("guided_filter", "torch", "torch", 0, run=_Torch(TORCH))
# decided inside the op, where the guide's range is read (the banded path reads data anyway)
register_path("guided_filter_bands", "cpu-banded", "torch", 5, supports=_span_takes, run=_bands)
register_path("guided_filter_bands", "torch+opencv", "torch", 0, run=_rescaled)


def _centres_itself(I: torch.Tensor, r: int, border: str, backend: str, grad: bool, apply: bool) -> bool:
    """Whether the path's kernels centre every tile themselves (then no global centring glue runs): the fused
    Triton kernels, which the backward uses only for q in "valid" mode."""
    if backend != "triton":
        return False
    return r > 0 and _kernels().supported(r, I.dtype) and (not grad or (apply and border == "valid"))


# A guide whose centred values exceed this would square past float32's range: such images are filtered as
# guide / s with eps / s^2 (exactly the same filter), s the image's largest centred magnitude.
HUGE = 2.0**32


def _prepare(I, p, eps, r, border, backend, check: bool, grad: bool = False, apply: bool = True):
    """Checks, then the centred (and, for huge guides, rescaled) inputs of the PyTorch-side formulas.

    Returns (I, p, eps, ci, cp, s); ci, cp are None when the kernels centre per tile, s is None or (B,1,1,1)."""
    if check:
        check_all_finite((I, "guide"), *(() if p is I else ((p, "src"),)), backend=backend)
        check_eps(eps, I.shape[0], I.device, backend=backend)
    if _centres_itself(I, r, border, backend, grad, apply):
        return I, p, eps, None, None, None
    ci, cp = I.mean((2, 3), keepdim=True), p.mean((2, 3), keepdim=True)
    I, p = I - ci, p - cp
    s = torch.maximum(I.amax((1, 2, 3), keepdim=True), -I.amin((1, 2, 3), keepdim=True))
    s = torch.where(s > HUGE, s, torch.ones_like(s))
    tiny = torch.finfo(I.dtype).tiny
    return I / s, p, (eps / s.view(-1) / s.view(-1)).clamp_min(tiny), ci, cp, s


def _coeff_shapes(I, p):
    ma = p.new_empty(p.shape) if I.shape[1] == 1 else p.new_empty(p.shape[0], p.shape[1], 3, *p.shape[2:])
    return ma, p.new_empty(p.shape)


def _generic_filter(I, p, eps, radius, border, path: str) -> torch.Tensor:
    """q through the centring glue and the path's forward (every path but the CPU bands)."""
    I2, p2, e2, ci, cp, s = _prepare(I, p, eps, radius, border, backend_of("guided_filter", path), check=True)
    q, _ = _forward(I2, p2, e2, radius, border, True, path)
    return q if cp is None else q + cp


@torch.library.custom_op("vision::guided_filter", mutates_args=())
def _filter_op(I: torch.Tensor, p: torch.Tensor, eps: torch.Tensor, radius: int, border: str,
               path: str) -> torch.Tensor:
    """q for guide I (B, G, H, W) and src p (B, C, H, W) in the working dtype; eps (B,); ``path`` as chosen."""
    impl = implementation("guided_filter", path)
    if hasattr(impl, "filter"):
        return impl.filter(I, p, eps, radius, border)
    return _generic_filter(I, p, eps, radius, border, path)


@_filter_op.register_fake
def _(I, p, eps, radius, border, path):
    return torch.empty_like(p)


@torch.library.custom_op("vision::guided_coeffs", mutates_args=())
def _coeffs_op(I: torch.Tensor, p: torch.Tensor, eps: torch.Tensor, radius: int, border: str,
               path: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean a, mean b) of the uncentred filter: q = mean_a . I + mean_b (the fast guided filter's fit)."""
    backend = backend_of("guided_filter", path)
    I2, p2, e2, ci, cp, s = _prepare(I, p, eps, radius, border, backend, check=True, apply=False)
    (ma, mb), _ = _forward(I2, p2, e2, radius, border, False, path)
    if cp is None:
        return ma, mb
    ma = ma / (s if I.shape[1] == 1 else s[:, None])
    # shift back: b of the uncentred data is b - a . ci + cp, and the window mean of a constant is itself
    mb = mb + cp - (ma * ci if I.shape[1] == 1 else (ma * ci[:, None]).sum(2))
    return ma, mb


@_coeffs_op.register_fake
def _(I, p, eps, radius, border, path):
    return _coeff_shapes(I, p)


def _forward(I, p, eps, r, border, apply, path: str, need_grad=False):
    return implementation("guided_filter", path).forward(I, p, eps, r, border, apply, need_grad=need_grad)


@torch.library.custom_op("vision::guided_filter_backward", mutates_args=())
def _backward_op(I: torch.Tensor, p: torch.Tensor, eps: torch.Tensor, g0: torch.Tensor | None,
                 g1: torch.Tensor | None, radius: int, border: str, apply: bool,
                 path: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dI, dp, deps) of q (apply; g0 = dL/dq) or of (mean a, mean b) (g0, g1). The forward's
    window statistics are recomputed here (the custom op's outputs are only what the caller sees)."""
    backend = backend_of("guided_filter", path)
    I2, p2, e2, ci, cp, s = _prepare(I, p, eps, radius, border, backend, check=False, grad=True, apply=apply)
    gray = I.shape[1] == 1
    if g0 is None:
        g0 = torch.zeros_like(p) if apply or gray else p.new_zeros(p.shape[0], p.shape[1], 3, *p.shape[2:])
    if not apply and g1 is None:
        g1 = torch.zeros_like(p)
    g0, g1 = g0.to(I.dtype).contiguous(), None if g1 is None else g1.to(I.dtype).contiguous()
    if not apply and cp is not None:  # chain rule through the shift back and the rescale of the coefficients
        g0 = g0 - (g1 * ci if gray else g1[:, :, None] * ci[:, None])
        g0 = g0 / (s if gray else s[:, None])
    _, saved = _forward(I2, p2, e2, radius, border, apply, path, need_grad=True)
    impl = implementation("guided_filter", path)
    dI, dp, deps = impl.backward(saved, g0 if apply else (g0, g1), e2, radius, border, apply)
    if s is not None:
        dI, deps = dI / s, deps / s.view(-1) / s.view(-1)
    return dI, dp, deps.to(eps.dtype)


@_backward_op.register_fake
def _(I, p, eps, g0, g1, radius, border, apply, path):
    return torch.empty_like(I), torch.empty_like(p), torch.empty_like(eps)


def _setup(apply):
    def setup_context(ctx, inputs, output):
        I, p, eps, radius, border, path = inputs
        ctx.save_for_backward(I, p, eps)
        ctx.args = (radius, border, apply, path)
    return setup_context


def _filter_backward(ctx, g):
    I, p, eps = ctx.saved_tensors
    dI, dp, deps = _backward_op(I, p, eps, g, None, *ctx.args)
    return dI, dp, deps, None, None, None


def _coeffs_backward(ctx, g_ma, g_mb):
    I, p, eps = ctx.saved_tensors
    dI, dp, deps = _backward_op(I, p, eps, g_ma, g_mb, *ctx.args)
    return dI, dp, deps, None, None, None


_filter_op.register_autograd(_filter_backward, setup_context=_setup(True))
_coeffs_op.register_autograd(_coeffs_backward, setup_context=_setup(False))


def guided_filter(guide: torch.Tensor, src: torch.Tensor, radius: int, eps: float | torch.Tensor, border: str = "valid",
                  scale: int = 1) -> torch.Tensor:
    r"""Guided filter of He, Sun and Tang (ECCV 2010 / TPAMI 2013): ``src`` smoothed as a local linear
    function of ``guide`` in every (2r+1)^2 window, so edges of the guide survive.

    In every window, ``a = cov(I, p) / (var(I) + eps)`` (colour guide: ``(Sigma + eps U)^-1 cov(I, p)``)
    and ``b = mean(p) - a mean(I)``; the output is ``mean(a) * I + mean(b)``.

    Args:
        guide: (B, 1, H, W) gray guide (applied to every channel of ``src``) or (B, 3, H, W) colour guide.
        src: (B, C, H, W) image to filter; same B, H, W as ``guide``. ``src is guide`` filters an image by itself.
        radius: window radius r >= 0.
        eps: regularisation (> 0), in squared intensity units (1e-4 .. 1e-1 for images in [0, 1]); a
            float or a per-batch tensor of shape (B,). Differentiable.
        border: ``"valid"`` (default; mean over in-image pixels, as He's code), ``"reflect"`` /
            ``"replicate"`` (kornia's ``guided_blur`` modes), ``"symmetric"`` (``cv2.ximgproc.guidedFilter``).
        scale: ``s > 1`` is the fast guided filter (He & Sun 2015): the coefficients are fitted and
            box-averaged on the images subsampled by ``s`` (nearest pixel, ``max(H // s, 1)`` rows) with
            radius ``round(r / s)``, upsampled bilinearly and applied to the full-resolution guide.

    Returns:
        (B, C, H, W) in ``src``'s dtype. float16/bfloat16 inputs are computed in float32.
        Differentiable w.r.t. guide, src and eps (closed-form backward through adjoint box filters).
        Registered as custom ops (``torch.ops.vision.guided_filter``, ``guided_coeffs`` and their
        backward), so ``torch.compile(fullgraph=True)`` and CUDA graphs take the call whole.

    Any radius costs what the image costs: in "valid" mode a radius >= max(H, W) gives the result of
    max(H, W) - 1 (the window already holds the whole image); in the padded modes large radii are
    reduced exactly (see ``box.large_radius``). A guide too large to square in float32 (e.g. 1e30) is
    filtered as guide / s with eps / s^2, the same filter, s its largest centred magnitude.

    Example:
        >>> img = torch.rand(1, 3, 64, 64)
        >>> smooth = guided_filter(img, img, radius=4, eps=1e-2)
        >>> gray = guided_filter(img.mean(1, keepdim=True), img, radius=4, eps=1e-2, scale=2)
        >>> smooth.shape, gray.shape
        (torch.Size([1, 3, 64, 64]), torch.Size([1, 3, 64, 64]))
    """
    guide = check_image(guide, "guide", channels=(1, 3))
    src = check_image(src, "src")
    if guide.shape[0] != src.shape[0] or guide.shape[-2:] != src.shape[-2:]:
        raise ValueError(f"guide {tuple(guide.shape)} and src {tuple(src.shape)} must share batch, height and width")
    if guide.device != src.device:
        raise ValueError(f"guide is on {guide.device} but src on {src.device}")
    radius = check_radius(radius)
    scale = check_scale(scale)
    border = check_border(border)
    # float32 accumulation for every input dtype; float64 stays float64 (gradcheck, references)
    work = torch.float64 if src.dtype == torch.float64 else torch.float32
    out_dtype = src.dtype
    I = guide.to(work)
    p = I if src is guide else src.to(work)
    h, w = I.shape[-2:]
    path = choose("guided_filter", guide, dtype=work, device=guide.device, radius=radius, border=border,
                  scale=scale, I=I, p=p, r=effective_radius(radius, h, w, border) if scale == 1 else radius)
    bsz = guide.shape[0]
    if isinstance(eps, torch.Tensor):
        check_eps(eps, bsz, guide.device, backend="triton")  # shape only here: values are checked inside the op
        eps_t = eps.to(device=guide.device, dtype=work).reshape(-1).expand(bsz)
    else:
        eps_t = check_eps(eps, bsz, guide.device).to(work)  # a float is checked on the host, no sync
    if scale == 1:
        r = effective_radius(radius, h, w, border)
        return _filter_op(I, p, eps_t, r, border, path).to(out_dtype)
    iy, ix = _subsample_index(h, scale, I.device), _subsample_index(w, scale, I.device)
    I_lo = I.index_select(2, iy).index_select(3, ix).contiguous()
    p_lo = I_lo if p is I else p.index_select(2, iy).index_select(3, ix).contiguous()
    r = effective_radius(low_res_radius(radius, scale), *I_lo.shape[-2:], border)
    ma, mb = _coeffs_op(I_lo, p_lo, eps_t, r, border, path)
    up = lambda t: F.interpolate(t, size=(h, w), mode="bilinear", align_corners=False)  # noqa: E731
    if I.shape[1] == 1:
        q = up(ma) * I + up(mb)
    else:
        c = ma.shape[1]
        q = (up(ma.flatten(1, 2)).unflatten(1, (c, 3)) * I[:, None]).sum(2) + up(mb)
    return q.to(out_dtype)


def _subsample_index(n: int, scale: int, device) -> torch.Tensor:
    """``reference.subsample_index`` as a tensor; the same integer formula in torch ops where ``n`` is symbolic
    (torch.export with dynamic sizes cannot build a NumPy array from it)."""
    if not is_symbolic(n):
        return torch.as_tensor(subsample_index(n, scale), device=device)
    m = torch.sym_max(n // scale, 1)
    i = torch.arange(m, device=device)
    return (((2 * i + 1) * n + m * (1 - scale)) // (2 * m)).clamp(0, n - 1)


class GuidedFilter(nn.Module):
    r"""``nn.Module`` form of :func:`guided_filter` (He, Sun, Tang, "Guided Image Filtering", TPAMI 2013).

    Example:
        >>> gf = GuidedFilter(radius=8, eps=1e-2)
        >>> img = torch.rand(1, 3, 64, 64)
        >>> gf(img, img).shape
        torch.Size([1, 3, 64, 64])
    """

    eps: float | torch.Tensor

    def __init__(self, radius: int, eps: float | torch.Tensor, border: str = "valid", scale: int = 1) -> None:
        super().__init__()
        self.radius = check_radius(radius)
        self.border, self.scale = check_border(border), check_scale(scale)
        if isinstance(eps, torch.Tensor):
            # a buffer follows .to() / .cuda() with the module; not persistent, so state_dicts stay as they were
            self.register_buffer("eps", eps, persistent=False)
        else:
            self.eps = eps

    def forward(self, guide: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return guided_filter(guide, src, self.radius, self.eps, self.border, self.scale)

    def extra_repr(self) -> str:
        return f"radius={self.radius}, eps={self.eps}, border={self.border!r}, scale={self.scale}"
