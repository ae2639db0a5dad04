"""local_linear_fit / local_linear_apply as torch.library custom ops, so torch.compile traces them whole.

Each op is opaque to the compiler: a fake (meta) implementation gives its output shapes, and
``register_autograd`` attaches the closed-form backward, itself a custom op so that the backward graph
traces too. The fit returns what its backward needs (the window means per radius, and the per-radius fits
when blending with weights) as extra outputs instead of Python attributes on a context, which a traced
graph could not carry; ``save`` says whether to produce them (False under no_grad: nothing extra is kept).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..runtime import backend_of, implementation
from .torch_moments import grid_shape, layout

# ``path`` is the name of the path ``runtime.choose`` took for the call (op.py registers each with its
# implementation: the Triton module or a ``torch_path.Engine``); the ops run that implementation only.


def fit(f: Tensor, p: Tensor, eps: Tensor, weights: Optional[Tensor], cf: Tensor, cp: Tensor, radii: list[int],
           border: str, s: int, path: str, save: bool) -> tuple[Tensor, list[Tensor], list[Tensor]]:
    impl = implementation("local_linear_fit", path)
    coeffs, saved = impl.fit_forward(f, p, cf, cp, eps, tuple(radii), border, s, save, weights)
    if saved is None:
        return coeffs, [], []
    return coeffs, list(saved["X"]), list(saved["fits"])


fit_op = torch.library.custom_op("vision::local_linear_fit", mutates_args=())(fit)


@fit_op.register_fake
def _fit_fake(f, p, eps, weights, cf, cp, radii, border, s, path, save):
    B, K, H, W = f.shape
    C = p.shape[1]
    gh, gw = grid_shape(H, W, s)
    coeffs = f.new_empty(B, C, K + 1, gh, gw)
    if not save:
        return coeffs, [], []
    # the channel counts pick the moment layout (a cached table): symbolic under torch.compile(dynamic=True),
    # so they are specialised here (int() guards on them), as the real kernel's layout is per (K, C) anyway
    X = [f.new_empty(B, layout(int(K), int(C)).NM, gh, gw) for _ in radii]
    fits = [f.new_empty(B, C, K + 1, gh, gw) for _ in radii] if weights is not None else []
    return coeffs, X, fits


@torch.library.custom_op("vision::local_linear_fit_backward", mutates_args=())
def fit_backward_op(g: Tensor, f: Tensor, p: Tensor, eps: Tensor, weights: Optional[Tensor], cf: Tensor, cp: Tensor,
                    X: list[Tensor], fits: list[Tensor], radii: list[int], border: str, s: int, path: str,
                    need_eps: bool, need_weights: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    # the Triton path runs float32 only (float64, e.g. gradcheck, takes the PyTorch path there too)
    saved = dict(X=X, fits=fits, weights=weights, f=f, p=p, cf=cf, cp=cp, radii=tuple(radii), border=border, s=s,
                 triton=backend_of("local_linear_fit", path) == "triton" and f.dtype == torch.float32)
    df, dp, deps, dw = implementation("local_linear_fit", path).fit_backward(saved, g, eps, need_eps, need_weights)
    deps = eps.new_empty(0) if deps is None else deps.to(eps.dtype)
    dw = g.new_empty(0) if dw is None else dw
    return df, dp, deps, dw


@fit_backward_op.register_fake
def _fit_backward_fake(g, f, p, eps, weights, cf, cp, X, fits, radii, border, s, path, need_eps, need_weights):
    deps = eps.new_empty(f.shape[0], f.shape[1]) if need_eps else eps.new_empty(0)
    dw = weights.new_empty(weights.shape) if need_weights and weights is not None else g.new_empty(0)
    return torch.empty_like(f), torch.empty_like(p), deps, dw


def _fit_setup(ctx, inputs, output):
    f, p, eps, weights, cf, cp, radii, border, s, path, save = inputs
    _, X, fits = output
    ctx.save_for_backward(f, p, eps, weights, cf, cp, *X, *fits)
    ctx.n_x, ctx.meta = len(X), (list(radii), border, s, path)


def _fit_backward(ctx, g, _gX, _gfits):
    f, p, eps, weights, cf, cp, *rest = ctx.saved_tensors
    X, fits = rest[:ctx.n_x], rest[ctx.n_x:]
    radii, border, s, path = ctx.meta
    need_eps, need_w = ctx.needs_input_grad[2], ctx.needs_input_grad[3]
    df, dp, deps, dw = fit_backward_op(g.to(eps.dtype).contiguous(), f, p, eps, weights, cf, cp, list(X),
                                       list(fits), radii, border, s, path, need_eps, need_w and weights is not None)
    return (df, dp, deps if need_eps else None, dw if need_w and weights is not None else None,
            None, None, None, None, None, None, None)


fit_op.register_autograd(_fit_backward, setup_context=_fit_setup)


def apply(f: Tensor, coeffs: Tensor, sh: float, sw: float, path: str) -> Tensor:
    return implementation("local_linear_apply", path).apply_forward(f, coeffs, sh, sw)


apply_op = torch.library.custom_op("vision::local_linear_apply", mutates_args=())(apply)


@apply_op.register_fake
def _apply_fake(f, coeffs, sh, sw, path):
    return f.new_empty(f.shape[0], coeffs.shape[1], *f.shape[-2:])


@torch.library.custom_op("vision::local_linear_apply_backward", mutates_args=())
def apply_backward_op(f: Tensor, coeffs: Tensor, g: Tensor, sh: float, sw: float, path: str, need_f: bool,
                      need_coeffs: bool) -> tuple[Tensor, Tensor]:
    df, dco = implementation("local_linear_apply", path).apply_backward(f, coeffs, g, sh, sw, need_f, need_coeffs)
    return (f.new_empty(0) if df is None else _laid_out_like(df, f)), \
        (coeffs.new_empty(0) if dco is None else _laid_out_like(dco, coeffs))


def _laid_out_like(out: Tensor, ref: Tensor) -> Tensor:
    """``out`` with the strides of ``empty_like(ref)``, which the fake promises (Inductor asserts them; a path may
    return a view into a padded buffer)."""
    like = torch.empty_like(ref)
    return out if out.stride() == like.stride() else like.copy_(out)


@apply_backward_op.register_fake
def _apply_backward_fake(f, coeffs, g, sh, sw, path, need_f, need_coeffs):
    return (torch.empty_like(f) if need_f else f.new_empty(0)), \
        (torch.empty_like(coeffs) if need_coeffs else coeffs.new_empty(0))


def _apply_setup(ctx, inputs, output):
    f, coeffs, sh, sw, path = inputs
    ctx.save_for_backward(f, coeffs)
    ctx.meta = (sh, sw, path)


def _apply_backward(ctx, g):
    f, coeffs = ctx.saved_tensors
    sh, sw, path = ctx.meta
    need_f, need_c = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    df, dco = apply_backward_op(f, coeffs, g.to(f.dtype).contiguous(), sh, sw, path, need_f, need_c)
    return (df if need_f else None), (dco if need_c else None), None, None, None


apply_op.register_autograd(_apply_backward, setup_context=_apply_setup)
