"""The cell grid of the low-resolution fits (``scale > 1``): a window radius in full-resolution pixels becomes a
radius in cells. Shared by the guided filter and the local linear ops (a module of its own, so that neither loads
the other to read it)."""
from __future__ import annotations


def low_res_radius(radius: int, scale: int) -> int:
    """The radius in cells of ``scale`` x ``scale`` pixels that a ``radius`` in pixels becomes: at least one cell.

    Example:
        >>> low_res_radius(8, 4), low_res_radius(1, 4), low_res_radius(5, 1)
        (2, 1, 5)
    """
    return max(1, int(round(radius / scale))) if scale > 1 else radius
