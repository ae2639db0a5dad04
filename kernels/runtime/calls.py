"""Calling an op's ``torch.library`` custom op, or its plain function where the custom op adds nothing.

A custom op is what torch.compile traces whole and what carries the closed-form backward. Outside both it only
costs: torch wraps every custom op's implementation in a guard whose first call imports ``torch._dynamo`` (3 s of
a command's start-up on a CPU machine, for a denoiser that compiles nothing). :func:`run_op` calls the plain
function instead when nothing is being compiled, no argument needs a gradient and every tensor argument is a plain
dense tensor (meta, fake and other subclasses take the custom op, whose fake implementation gives their shapes).
"""
from __future__ import annotations

import torch


def plain_call_allowed(args) -> bool:
    """Whether the custom op's plain function may stand in for it with these arguments (module docstring)."""
    if torch.compiler.is_compiling():
        return False
    grad = torch.is_grad_enabled()
    for a in args:
        items = a if isinstance(a, (list, tuple)) else (a,)
        for t in items:
            if isinstance(t, torch.Tensor):
                if type(t) is not torch.Tensor or t.is_meta or (grad and t.requires_grad):
                    return False
    return True


def run_op(op, plain, *args):
    """``op(*args)`` (a ``torch.library`` custom op), or ``plain(*args)``, the function it was made from, where
    :func:`plain_call_allowed`: the same values, without the custom op's dispatch. A result that is one of the
    arguments (which a custom op may not return) is copied, as the op would have given a new tensor."""
    if not plain_call_allowed(args):
        return op(*args)
    out = plain(*args)
    ids = {id(a) for a in args if isinstance(a, torch.Tensor)}
    if isinstance(out, torch.Tensor):
        return out.clone() if id(out) in ids else out
    return out
