"""Prove that a call never reads a tensor's value on the host (what stalls a GPU and breaks CUDA graph capture).

``no_host_sync()`` replaces ``Tensor.item``, ``__bool__``, ``__float__``, ``__int__``, ``__index__``,
``tolist`` and ``numpy`` with functions that raise ``HostSync``; on CPU tensors through the Triton
interpreter this catches exactly the reads that would synchronise on CUDA. Example::

    with no_host_sync():
        y = box_filter(x, 3)        # raises HostSync if box_filter reads x's values on the host
"""
import contextlib

import torch

TRAPPED = ("item", "__bool__", "__float__", "__int__", "__index__", "tolist", "numpy")


class HostSync(AssertionError):
    pass


@contextlib.contextmanager
def no_host_sync():
    saved = {name: getattr(torch.Tensor, name) for name in TRAPPED}

    def trap(name):
        def raiser(self, *args, **kwargs):
            raise HostSync(f"Tensor.{name} called inside no_host_sync(): a host synchronisation on CUDA")
        return raiser

    for name in TRAPPED:
        setattr(torch.Tensor, name, trap(name))
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch.Tensor, name, fn)
