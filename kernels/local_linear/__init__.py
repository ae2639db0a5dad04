"""Local linear regression on K guide features: fit, apply, low-resolution fit (the general guided filter)."""
from .op import LocalLinearApply, LocalLinearFit, local_linear_apply, local_linear_fit

__all__ = ["local_linear_fit", "local_linear_apply", "LocalLinearFit", "LocalLinearApply"]
