"""What the numba loops of FLNR's stages share (see :mod:`vision.kernels.runtime.jit`): a stand-in array for a missing
buffer, and reading the guide buffers row by row in the :data:`~vision.data.fields.FLNR_LAYOUT` layout. Imported
only where numba is available (by the stages' numba modules, which their registry paths load when they run).
"""
from __future__ import annotations

from numba import njit

from ..signal_numba import NONE  # noqa: F401 - stands in for a missing buffer (its flag is 0)


@njit(cache=True, inline="always")
def add_rows(sums, at, v, b, y, W):
    """sums[at + c] += row y of the buffer v (B or 1, c, H, W) for image b, every channel c."""
    vb = v[min(b, v.shape[0] - 1)]
    for c in range(vb.shape[0]):
        src, dst = vb[c, y], sums[at + c]
        for x in range(W):
            dst[x] += src[x]


@njit(cache=True, inline="always")
def add_guides(sums, normal, depth, ao, albedo, present, b, y, W):
    """sums[0:8] += row y of the guide buffers in the FLNR_LAYOUT layout (normal 3, depth 1, AO 1, albedo 3) for image b;
    a buffer whose ``present`` flag is 0 adds nothing."""
    if present[0]:
        add_rows(sums, 0, normal, b, y, W)
    if present[1]:
        add_rows(sums, 3, depth, b, y, W)
    if present[2]:
        add_rows(sums, 4, ao, b, y, W)
    if present[3]:
        add_rows(sums, 5, albedo, b, y, W)
