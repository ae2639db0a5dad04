"""``restore_structure``: give an edited image back the structure of its source, keeping the edit's colours.

The post-processing step of Gong et al. (WACV 2026, "to mitigate LDM decoding distortions"), usable
on any edit: optimise the edit's pixels to minimise ``spl_weight * SPL(source, x) + color_weight *
CPL(edit, x)``. SPL pulls ``x`` towards a locally affine function of the source (edges the decoder
blurred, shifted or invented are removed), CPL keeps the edit's chroma. SPL acts on the gray channel,
so its updates are uniform over R, G, B and leave Cb, Cr unchanged; with stop-gradient coefficients
its gradient also sums to zero over the image, so the edit's mean colour stays where it was.

Step sizes do not depend on the image size: each mean-loss is multiplied by (its weight total) /
512^2 (see :class:`RestoreObjective`), so the published settings (SGD, lr 1, momentum 0.9, weights
1e4 / 1e3, tuned on 512 x 512 images) behave the same at any resolution.

The step's engine is a registry decision (op ``restore_step``, chosen once per call; ``runtime.explain(
"restore_step", e0, optimizer=...)`` says which): on the Triton backend an SGD step is four fused launches
(path "fused-sgd", ``vision.kernels.spl.restore_step``) and reads nothing on the host; on CUDA, without a
callback or progress bar, the whole loop is captured once per shape and settings as a CUDA graph and replayed on
later calls (``VISION_CUDA_GRAPHS=off``, ``runtime.set_cuda_graphs(False)`` or ``with
runtime.use_cuda_graphs(False)`` launches eagerly instead). Adam, and every call on the torch backend, take path
"torch": the objective's closed-form gradient stepped by a ``torch.optim`` optimizer.

    >>> restored = restore_structure(source, edited)                       # (B, 3, H, W), same range and dtype
    >>> restored = restore_structure(source, edited, mask=m, optimizer="adam", steps=200)
    >>> value, grad = RestoreObjective(source, edited).value_and_grad(x)   # the objective, for your own loop
"""
from __future__ import annotations

import functools
from typing import Callable

import torch
from tqdm.auto import tqdm

from vision.kernels.runtime import backend_for, choose, cuda_graphs_enabled, data_checks, implementation, register_path
from vision.kernels.spl.op import check_magnitude, check_mask, value_and_grad
from vision.kernels.spl.config import SPLConfig
from vision.kernels.validate import check_finite

REFERENCE_PIXELS = 512 * 512  # the resolution the published loss weights and step size were tuned at
DEFAULT_LR = {"sgd": 1.0, "adam": 5e-3}


def chroma_jacobian(device=None) -> torch.Tensor:
    """(2, 3): d(Cb, Cr) / d(R, G, B) of kornia's (affine) ``rgb_to_ycbcr``, read off kornia itself."""
    from kornia.color import rgb_to_ycbcr  # lazy: kornia loads slowly; only this path needs it

    basis = torch.cat([torch.zeros(1, 3), torch.eye(3)]).view(4, 3, 1, 1)
    ycc = rgb_to_ycbcr(basis)[:, 1:, 0, 0]
    return (ycc[1:] - ycc[0]).T.contiguous().to(device)


@functools.lru_cache(maxsize=1)
def _chroma_gram() -> tuple[float, ...]:
    """J^T J of :func:`chroma_jacobian`, row-major, as host floats."""
    J = chroma_jacobian().double()
    return tuple(float(v) for v in (J.T @ J).reshape(-1))


def _check_images(source, edited):
    for name, x in (("source", source), ("edited", edited)):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor (B, C, H, W) or (C, H, W), got {type(x).__name__}")
        if x.dim() not in (3, 4):
            raise ValueError(f"{name} must have shape (B, C, H, W) or (C, H, W), got {tuple(x.shape)}")
        if not (x.is_floating_point() or x.dtype == torch.uint8):
            raise ValueError(f"{name} must be a float or uint8 tensor, got {x.dtype}")
        if x.shape[-3] not in (1, 3):
            raise ValueError(f"{name} must have 1 (gray) or 3 (RGB) channels, got {x.shape[-3]}"
                             + (" (drop the alpha channel first)" if x.shape[-3] == 4 else ""))
        if min(x.shape) == 0:
            raise ValueError(f"{name} is empty: shape {tuple(x.shape)}")
    if source.shape != edited.shape:
        raise ValueError(f"source {tuple(source.shape)} and edited {tuple(edited.shape)} must have the same shape")
    if source.device != edited.device:
        raise ValueError(f"source is on {source.device} but edited on {edited.device}")




def _value_range(source, edited, value_range):
    """(lo, hi) of the images' value range, or None for unbounded (HDR) values."""
    if value_range is None:
        return None
    if isinstance(value_range, str):
        if value_range != "auto":
            raise ValueError(f"value_range must be 'auto', None or (lo, hi), got {value_range!r}")
        if edited.dtype == torch.uint8:
            return 0.0, 255.0
        # one host read for all four extremes (each float() would wait for the device separately)
        smin, emin, smax, emax = torch.stack([v.float() for v in (source.min(), edited.min(), source.max(), edited.max())]).tolist()
        lo, hi = min(smin, emin), max(smax, emax)
        tol = 1e-3
        if lo >= -tol and hi <= 1 + tol:
            return 0.0, 1.0
        if lo >= -1 - tol and hi <= 1 + tol:
            return -1.0, 1.0
        if lo >= -tol and hi <= 255 + tol:
            return 0.0, 255.0
        raise ValueError(f"cannot tell the images' value range (values in [{lo:g}, {hi:g}]); pass value_range="
                         "(lo, hi), or None for unbounded (HDR) values")
    try:
        lo, hi = (float(v) for v in value_range)
    except (TypeError, ValueError):
        raise ValueError(f"value_range must be 'auto', None or (lo, hi), got {value_range!r}") from None
    if not hi > lo:
        raise ValueError(f"value_range must have hi > lo, got {value_range!r}")
    return lo, hi


class RestoreObjective:
    r"""The objective :func:`restore_structure` minimises, with its gradient in closed form.

    ``f(x) = (spl_weight * sum_k omega_k D_k(source, x) + color_weight * sum_i c_i |J (x_i - edited_i)|^2 / 2) / 512^2``

    i.e. ``spl_weight * SPL * sum(omega) / 512^2 + color_weight * CPL * sum(c) / 512^2`` with SPL the
    (masked) :func:`vision.kernels.structure_loss` with stop-gradient coefficients, CPL the (masked)
    chroma MSE :func:`vision.losses.color_preservation_loss` against ``edited``, ``omega`` the SPL
    window weights (the box-filtered ``mask``; 1 without one), ``c`` the ``color_mask`` and ``J`` the
    (Cb, Cr) rows of kornia's YCbCr conversion. Scaling each mean by its weight total keeps the step per
    pixel independent of the image size. The gradient uses the fused SPL kernels and ``J^T J``, so a
    step needs no autograd and no device synchronisation.

    Args:
        source, edited: (B, C, H, W) float32 in [0, 1], C in {1, 3} (the colour term needs C = 3).
        mask, color_mask, config: as in :func:`restore_structure` (``config.spl_weight``, ``config.color_weight``,
            ...; ``self.config``); spl_weight, color_weight, radius, eps, bidirectional: single settings that change
            ``config`` (None: keep).

    Example:
        >>> f = RestoreObjective(torch.rand(1, 3, 32, 32), torch.rand(1, 3, 32, 32))
        >>> value, grad = f.value_and_grad(torch.rand(1, 3, 32, 32))
        >>> grad.shape
        torch.Size([1, 3, 32, 32])
    """

    def __init__(self, source, edited, mask=None, color_mask=None, spl_weight: float | None = None,
                 color_weight: float | None = None, radius: int | None = None, eps: float | None = None,
                 bidirectional: bool | None = None, *, config: SPLConfig | None = None):
        # the keyword settings (None: keep) change ``config`` (default: the published settings); checked there
        self.config = cfg = SPLConfig.build(config, spl_weight=spl_weight, color_weight=color_weight, radius=radius,
                                            eps=eps, bidirectional=bidirectional)
        e0 = edited.to(torch.float32).contiguous()
        self.edited, self.channels = e0, e0.shape[1]
        checks = backend_for(e0)  # data_checks' question (may values be read on the host?), not an engine choice
        self.mask = None if mask is None else check_mask(mask, e0, checks).to(torch.float32).contiguous()
        self.color_mask = None if color_mask is None else check_mask(color_mask, e0, checks).to(torch.float32)
        src = source.to(torch.float32)
        S = src.mean(1, keepdim=True) if src.shape[1] == 3 else src
        self.S = (S - S.mean((2, 3), keepdim=True)).contiguous()
        self.g_spl = torch.tensor(cfg.spl_weight / REFERENCE_PIXELS, dtype=torch.float32, device=e0.device)
        self.Q = self.Q_host = None
        if self.channels == 3 and cfg.color_weight:
            J = chroma_jacobian()
            self.Q = ((cfg.color_weight / REFERENCE_PIXELS) * (J.T @ J)).to(e0.device)  # (3, 3)
            # the fused step takes Q as nine kernel scalars: read once from the host-side Jacobian, never the device
            self.Q_host = tuple(cfg.color_weight / REFERENCE_PIXELS * v for v in _chroma_gram())

    # the settings by name (read-only views of ``config``)
    spl_weight = property(lambda self: self.config.spl_weight)
    color_weight = property(lambda self: self.config.color_weight)
    radius = property(lambda self: self.config.radius)
    eps = property(lambda self: self.config.eps)
    bidirectional = property(lambda self: self.config.bidirectional)

    def value_and_grad(self, x: torch.Tensor, value: bool = True):
        """``(f(x) or None, df/dx)`` for ``x`` of the edit's shape; ``value=False`` skips the value."""
        with torch.no_grad():
            E = x.mean(1, keepdim=True) if self.channels == 3 else x
            E = (E - E.mean((2, 3), keepdim=True)).contiguous()
            cfg = self.config  # the scalars the kernels take, read from the one config
            total, _, dE = value_and_grad(self.S, E, self.mask, cfg.radius, cfg.eps, cfg.bidirectional, True,
                                          self.g_spl)
            grad = (dE / self.channels).expand_as(x)  # the gray mean spreads it evenly over R, G, B
            f = self.g_spl * total if value else None
            if self.Q is not None:
                delta = x - self.edited
                cg = torch.einsum("kc,bchw->bkhw", self.Q, delta)  # d/dx sum c |J delta|^2 / 2 = c J^T J delta
                if self.color_mask is not None:
                    cg = self.color_mask * cg
                grad = grad + cg
                if value:
                    f = f + 0.5 * (delta * cg).sum()
            return f, grad.contiguous()


def restore_structure(source: torch.Tensor, edited: torch.Tensor, mask: torch.Tensor | None = None,
                      steps: int = 100, lr: float | None = None, spl_weight: float | None = None,
                      color_weight: float | None = None, optimizer: str = "sgd", *, momentum: float = 0.9,
                      radius: int | None = None, eps: float | None = None, bidirectional: bool | None = None,
                      config: SPLConfig | None = None, color_mask: torch.Tensor | None = None, value_range="auto",
                      progress: bool = False, callback: Callable[[int, float], None] | None = None) -> torch.Tensor:
    r"""Optimise ``edited`` in pixel space towards the structure of ``source`` while keeping its colours.

    Minimises ``spl_weight * SPL(source, x; mask) + color_weight * CPL(edited, x; color_mask)`` over
    the pixels ``x`` (initialised with ``edited``), clamping to the value range after every step. SPL
    is :func:`vision.kernels.structure_loss` (stop-gradient coefficients, as published); CPL is the
    chroma MSE against the *edit*, not the source. Pixels where ``mask`` is 0 are left unchanged.

    Args:
        source: (B, C, H, W) or (C, H, W), C in {1, 3}: the image whose structure is wanted.
        edited: same shape: the edit to repair (e.g. a latent-diffusion output after VAE decoding).
        mask: optional weights in [0, 1], (H, W) or (1 or B, 1, H, W): where structure is restored.
        steps: optimisation steps (default 100, as published). ``lr``: step size (default 1.0 for
            SGD with ``momentum`` 0.9, the published setting; 5e-3 for Adam).
        config: the loss settings, a :class:`vision.kernels.spl.config.SPLConfig` (default: the published
            ones, ``vision.SPL_DEFAULTS``): term weights ``spl_weight``, ``color_weight`` (1e4, 1e3) and the SPL
            ``radius``, ``eps``, ``bidirectional`` (5, 1e-4, True). It reaches the loss as it is.
        spl_weight, color_weight, radius, eps, bidirectional: single settings that change ``config`` (None: keep).
        optimizer: ``"sgd"`` or ``"adam"``.
        color_mask: optional weights of the colour term (default: the whole image).
        value_range: ``"auto"`` (uint8 -> [0, 255]; floats: [0, 1], [-1, 1] or [0, 255], whichever
            holds the values), ``(lo, hi)``, or ``None`` for unbounded values (HDR; no clamping, eps
            then in the images' own units). The loss works on values mapped to [0, 1].
        progress: show a tqdm progress bar. callback: ``callback(step, loss)`` after every step
            (forces a device sync per step).

    Returns:
        The restored image, in ``edited``'s shape, range and dtype (float32 work on CPU; float16 and
        bfloat16 inputs are optimised in float32 and cast back; uint8 is rounded).

    Example:
        >>> src = torch.rand(1, 3, 96, 96)
        >>> blurred = torch.nn.functional.avg_pool2d(0.8 * src + 0.1, 3, 1, 1, count_include_pad=False)
        >>> out = restore_structure(src, blurred, steps=20)
        >>> out.shape, out.dtype
        (torch.Size([1, 3, 96, 96]), torch.float32)
    """
    _check_images(source, edited)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
    if optimizer not in DEFAULT_LR:
        raise ValueError(f"optimizer must be one of {tuple(DEFAULT_LR)}, got {optimizer!r}")
    lr = DEFAULT_LR[optimizer] if lr is None else float(lr)
    if not 0 < lr < float("inf"):  # NaN and inf fail too: they would end in a flat 0/1 image
        raise ValueError(f"lr must be a finite positive number, got {lr}")
    config = SPLConfig.build(config, spl_weight=spl_weight, color_weight=color_weight, radius=radius, eps=eps,
                             bidirectional=bidirectional)  # every setting is checked there
    # backend_for below asks data_checks' question (may values be read on the host?); restore_step picks the engine
    for name, x in (("source", source), ("edited", edited)):
        if x.is_floating_point():
            check_finite(x, name, backend_for(x))
    squeeze = edited.dim() == 3
    if squeeze:
        source, edited = source[None], edited[None]
        mask = mask if mask is None or mask.dim() != 3 else mask[None]
        color_mask = color_mask if color_mask is None or color_mask.dim() != 3 else color_mask[None]
    out_dtype = edited.dtype
    rng = _value_range(source, edited, value_range)
    if rng is None and data_checks(backend_for(edited)):
        check_magnitude((source, "source"), (edited, "edited"))
    lo, span = (0.0, 1.0) if rng is None else (rng[0], rng[1] - rng[0])
    src = (source.to(torch.float32) - lo) / span
    e0 = ((edited.to(torch.float32) - lo) / span).contiguous()
    objective = RestoreObjective(src, e0, mask, color_mask, config=config)
    step = implementation("restore_step", choose("restore_step", e0, optimizer=optimizer))
    x = step(objective, e0, steps, lr, momentum, optimizer, rng is not None, callback, progress)
    out = x * span + lo
    if not out_dtype.is_floating_point:
        out = out.round().clamp(rng[0], rng[1])
    out = out.to(out_dtype)
    return out[0] if squeeze else out


class _Progress:
    """tqdm bar and user callback; ``wants(step)``: whether this step's objective value must be read (a sync)."""

    def __init__(self, steps, callback, progress):
        self.steps, self.callback, self.bar = steps, callback, None
        if progress:
            self.bar = tqdm(total=steps, desc="restore-structure", unit="step")

    def wants(self, step):
        return self.callback is not None or (self.bar is not None and (step % 10 == 9 or step == self.steps - 1))

    def done(self, step, value):
        if value is not None:
            value = float(value)  # the objective where the gradient was taken
            if self.callback is not None:
                self.callback(step, value)
            if self.bar is not None:
                self.bar.set_postfix(loss=f"{value:.4g}")
        if self.bar is not None:
            self.bar.update(1)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _restore_eager(objective, e0, steps, lr, momentum, optimizer, clamp, callback, progress):
    x = e0.clone().requires_grad_(True)
    opt = (torch.optim.SGD([x], lr=lr, momentum=momentum) if optimizer == "sgd"
           else torch.optim.Adam([x], lr=lr))
    bar = _Progress(steps, callback, progress)
    try:
        with torch.no_grad():
            for step in range(steps):
                report = bar.wants(step)
                value, x.grad = objective.value_and_grad(x, value=report)
                opt.step()
                if clamp:
                    x.clamp_(0.0, 1.0)
                bar.done(step, value if report else None)
    finally:
        bar.close()
    return x.detach()


def _fused_sgd():
    """The fused Triton restore step's class, ``spl.restore_step.FusedSGD``."""
    from vision.kernels.spl.restore_step import FusedSGD  # lazy: its kernels load Triton (CUDA, or the interpreter)

    return FusedSGD


def _fused(objective, e0, lr, momentum, clamp):
    o = objective
    cfg = o.config
    return _fused_sgd()(o.S, e0, o.mask, o.color_mask, o.g_spl, o.Q_host, cfg.radius, cfg.eps,
                        cfg.bidirectional, lr, momentum, clamp)


def _restore_fused(objective, e0, steps, lr, momentum, optimizer, clamp, callback, progress):
    """SGD with momentum on the fused Triton step (4 launches a step; ``optimizer`` is "sgd", as the path's
    ``supports`` requires); on CUDA, without a callback or a progress bar, all steps replay from one CUDA graph
    per shape and settings."""
    if e0.is_cuda and steps and callback is None and not progress and cuda_graphs_enabled():
        out = _graph_run(objective, e0, steps, lr, momentum, clamp)
        if out is not None:
            return out
    fused = _fused(objective, e0, lr, momentum, clamp)
    x, buf = e0.clone(), torch.zeros_like(e0)
    bar = _Progress(steps, callback, progress)
    try:
        for step in range(steps):
            report = bar.wants(step)
            value = objective.value_and_grad(x, value=True)[0] if report else None
            fused.step(x, buf)
            bar.done(step, value)
    finally:
        bar.close()
    return x


def _fused_takes(optimizer: str, **_) -> str | None:
    return None if optimizer == "sgd" else f"{optimizer} runs the torch path (the fused step is SGD with momentum)"


# each path runs its engine's whole loop, chosen once per call: (objective, e0, steps, lr, momentum, optimizer,
# clamp, callback, progress) -> x
register_path("restore_step", "fused-sgd", "triton", 10, supports=_fused_takes, run=_restore_fused)
register_path("restore_step", "torch", "torch", 0, run=_restore_eager)


_GRAPHS: dict = {}  # settings and shapes -> (static inputs, x, graph); a few entries, oldest dropped first
_MAX_GRAPHS = 4


def _graph_run(objective, e0, steps, lr, momentum, clamp):
    """Replay a captured ``steps``-step loop on copies of this call's inputs; None where capture fails."""
    o = objective
    shape = lambda t: None if t is None else tuple(t.shape)  # noqa: E731
    key = (e0.device, tuple(e0.shape), shape(o.mask), shape(o.color_mask), steps, lr, momentum, clamp, o.config,
           o.Q is not None)
    entry = _GRAPHS.get(key)
    if entry is None:
        try:
            entry = _capture(objective, e0, steps, lr, momentum, clamp)
        except Exception:  # capture is impossible here (e.g. inside another capture): run eagerly
            return None
        if len(_GRAPHS) >= _MAX_GRAPHS:
            _GRAPHS.pop(next(iter(_GRAPHS)))
        _GRAPHS[key] = entry
    static, x, buf, graph = entry
    for dst, src in zip(static, (o.S, e0, o.mask, o.color_mask)):
        if dst is not None:
            dst.copy_(src)
    x.copy_(e0)
    buf.zero_()
    graph.replay()
    return x.clone()


def _capture(objective, e0, steps, lr, momentum, clamp):
    o = objective
    static = [None if t is None else t.clone() for t in (o.S, e0, o.mask, o.color_mask)]
    cfg = o.config
    fused = _fused_sgd()(static[0], static[1], static[2], static[3], o.g_spl.clone(),
                         o.Q_host, cfg.radius, cfg.eps, cfg.bidirectional, lr, momentum, clamp)
    x, buf = e0.clone(), torch.zeros_like(e0)
    side = torch.cuda.Stream(e0.device)
    side.wait_stream(torch.cuda.current_stream(e0.device))
    with torch.cuda.stream(side):
        fused.step(x, buf)  # compiles the kernels before capture
    torch.cuda.current_stream(e0.device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fused.prepare()
        for _ in range(steps):
            fused.step(x, buf)
    return static, x, buf, graph
