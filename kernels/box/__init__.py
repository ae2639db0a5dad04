"""Box filter: the (2r+1)^2 window mean, in every border mode."""
from .op import BoxFilter, box_filter

__all__ = ["box_filter", "BoxFilter"]
