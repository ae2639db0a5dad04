"""Structure Preservation Loss (Gong, Ryu, Ok, Cho, WACV 2026): local linear fit residuals of an edit against its source.

``structure_loss`` resolves on first access, so ``vision.kernels.spl.defaults`` (the published defaults) imports
without torch.
"""
__all__ = ["structure_loss"]


def __getattr__(name):
    if name == "structure_loss":
        from .op import structure_loss  # lazy: `vision edit --help` starts without vision.kernels.spl.op

        return structure_loss
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
