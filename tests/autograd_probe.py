"""``value_and_grads(fn, args)``: fn(*args) and the gradients of a fixed random projection of its output with
respect to every input, what the compile tests compare between eager and compiled calls."""
import torch


def value_and_grads(fn, args):
    leaves = [a.clone().requires_grad_() for a in args]
    out = fn(*leaves)
    w = torch.rand(out.shape, generator=torch.Generator().manual_seed(1))
    (out * w).sum().backward()
    return out.detach(), [leaf.grad for leaf in leaves]
