"""Triton helpers shared by every window kernel: where a padded coordinate reads from, and how many in-image
coordinates a window covers ("valid" border)."""
import triton
import triton.language as tl


@triton.jit
def src_index(i, n, MODE: tl.constexpr):
    """Image coordinate read for (possibly outside) coordinate i on an axis of length n; padded modes."""
    if MODE == 1:  # reflect-101: even about 0, period 2n - 2
        period = tl.maximum(2 * n - 2, 1)
        j = tl.abs(i) % period
        idx = tl.where(j >= n, period - j, j)
    elif MODE == 2:  # replicate
        idx = tl.minimum(tl.maximum(i, 0), n - 1)
    elif MODE == 3:  # symmetric: even about -1/2, period 2n
        j = tl.where(i < 0, -i - 1, i) % (2 * n)
        idx = tl.where(j >= n, 2 * n - 1 - j, j)
    else:  # valid: clamp for a safe address; the caller masks with `inside`
        idx = tl.minimum(tl.maximum(i, 0), n - 1)
    return idx


@triton.jit
def window_count(c, n, R: tl.constexpr):
    """Number of in-image coordinates in [c - R, c + R] on an axis of length n (0 if none)."""
    return tl.maximum(tl.minimum(c + R, n - 1) - tl.maximum(c - R, 0) + 1, 0)
