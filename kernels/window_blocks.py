"""Triton building blocks of the sliding-window kernels (box, guided forward and backward, gray and colour).

Every such kernel walks the image the same way: a one-warp program owns a strip of ``BWI`` columns (its
``BWI - 2R`` output columns plus a halo of R on each side) and a chunk of ``CH`` rows, steps down RB rows at a
time, takes horizontal window sums of the rows entering and leaving the window by a scan along the row, and keeps
per-column running sums. What the walks share lives here, with public names, so that no kernel module reaches
into another's private helpers:

- where a padded coordinate reads from (``src_index``) and how many in-image pixels a window covers
  (``window_count``, ``window_pixels``);
- the strip's prologue (``strip_start``) and its output mask (``strip_keep``);
- loads of a row set with the border applied (``load_rows``, ``frame``), per-program centring constants
  (``centre``), and horizontal window sums (``row_window_sums``);
- the adjoint of the "valid" window mean, walked the same way (``adjoint_centre``, ``adjoint_diff``,
  ``adjoint_warm``, ``adjoint_step``);
- the symmetric 3x3 algebra of the colour guide (``sym3_adjugate``, ``sym3_times``).

All are ``@triton.jit`` device functions: Triton inlines them, so a kernel built from them compiles to what it
would with the code written out (``tests/test_box_guided_gpu_contract.py`` checks registers and spills on sm_90).
"""
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


@triton.jit
def window_pixels(oy, oc, H, W, R: tl.constexpr, MODE: tl.constexpr):
    """Pixels the window centred at (oy, oc) averages, float32, at least 1: the in-image ones for "valid"
    (MODE 0), all (2R + 1)^2 for the padded modes."""
    if MODE == 0:
        n = (window_count(oy, H, R) * window_count(oc, W, R)).to(tl.float32)
    else:
        n = (oy * 0 + oc * 0 + (2 * R + 1) * (2 * R + 1)).to(tl.float32)
    return tl.maximum(n, 1.0)


@triton.jit
def strip_start(C, R: tl.constexpr, BWI: tl.constexpr, CH: tl.constexpr, RB: tl.constexpr):
    """The walk's prologue, from the grid (planes B * C, chunks of CH rows, strips of BWI - 2R output columns).

    Returns (pc, bi, y0, k, j, cols, oc): the plane (int64), its image, the chunk's first row, the row offsets
    within a step (RB, 1), the strip's lanes (1, BWI), the input columns they read (the output column x0 + j
    sits at lane j + R) and the output columns (valid for j < BWI - 2R).
    """
    pc = tl.program_id(0).to(tl.int64)
    y0 = tl.program_id(1) * CH
    x0 = tl.program_id(2) * (BWI - 2 * R)
    k = tl.arange(0, RB)[:, None]
    j = tl.arange(0, BWI)[None, :]
    return pc, pc // C, y0, k, j, x0 - R + j, x0 + j


@triton.jit
def strip_keep(oy, oc, j, y0, H, W, R: tl.constexpr, BWI: tl.constexpr, CH: tl.constexpr):
    """Which of a step's (row, lane) outputs this program writes: inside the image, its chunk and its strip."""
    return (oy < H) & (oy < y0 + CH) & (j < BWI - 2 * R) & (oc < W)


@triton.jit
def load_rows(ptr, rows, cols, H, W, MODE: tl.constexpr):
    """float32 values at (rows, cols) with the border applied, and the in-image mask ("valid" reads 0 outside)."""
    inside = (rows == rows) & (cols == cols)
    if MODE == 0:
        inside = inside & (rows >= 0) & (rows < H) & (cols >= 0) & (cols < W)
    t = tl.load(ptr + src_index(rows, H, MODE) * W + src_index(cols, W, MODE), mask=inside, other=0.0)
    return t.to(tl.float32), inside


@triton.jit
def row_window_sums(t, R: tl.constexpr, BWI: tl.constexpr):
    """Horizontal window sums along the rows of t; lane j holds the window of lanes j .. j + 2R."""
    j = tl.arange(0, BWI)[None, :] + tl.zeros_like(t).to(tl.int32)
    s = tl.cumsum(t, axis=1)
    return tl.gather(s, tl.minimum(j + 2 * R, BWI - 1), axis=1) - \
        tl.where(j >= 1, tl.gather(s, tl.maximum(j - 1, 0), axis=1), 0.0)


@triton.jit
def centre(ptr, rows, cols, H, W):
    """Mean of the in-image values among (rows, cols), and their largest distance from it: the constant a
    program centres its values on before forming any product (ARCHITECTURE.md, Numerics)."""
    t, inside = load_rows(ptr, rows, cols, H, W, 0)
    c = tl.sum(tl.sum(t, axis=1), axis=0) / tl.maximum(tl.sum(tl.sum(inside.to(tl.float32), axis=1), axis=0), 1.0)
    m = tl.max(tl.max(tl.where(inside, tl.abs(t - c), 0.0), axis=1), axis=0)
    return c, m


@triton.jit
def frame(rows, cols, H, W, R: tl.constexpr):
    """Flat offsets (clamped to the image, for safe addresses), in-image mask and 1 / N at (rows, cols), N the
    pixel count of the "valid" window centred there: what every load of a row set in an adjoint walk shares."""
    inside = (rows >= 0) & (rows < H) & (cols >= 0) & (cols < W)
    offs = tl.minimum(tl.maximum(rows, 0), H - 1) * W + tl.minimum(tl.maximum(cols, 0), W - 1)
    n = tl.maximum(window_count(rows, H, R) * window_count(cols, W, R), 1).to(tl.float32)
    return offs, inside, 1.0 / n


@triton.jit
def adjoint_centre(ptr, I_ptr, cI, rows, cols, H, W, R: tl.constexpr, PROD: tl.constexpr):
    """Mean over the in-image (rows, cols) of x / N, or of x / N (I - cI) when PROD."""
    offs, inside, inv = frame(rows, cols, H, W, R)
    t = tl.load(ptr + offs, mask=inside, other=0.0) * inv
    if PROD:
        t = t * (tl.load(I_ptr + offs, mask=inside, other=0.0) - cI)
    n = tl.sum(tl.sum(inside.to(tl.float32), axis=1), axis=0)
    return tl.sum(tl.sum(tl.where(inside, t, 0.0), axis=1), axis=0) / tl.maximum(n, 1.0)


@triton.jit
def adjoint_diff(ptr, eo, ei, en, lo, li, ln, c, LEAVE: tl.constexpr, R: tl.constexpr, BWI: tl.constexpr):
    """Horizontal window sums of x / N - c over the entering rows (frame eo, ei, en) less those over the leaving
    rows (lo, li, ln) when LEAVE: the sums are linear, so one scan of the difference serves both."""
    t = tl.where(ei, tl.load(ptr + eo, mask=ei, other=0.0) * en - c, 0.0)
    if LEAVE:
        t -= tl.where(li, tl.load(ptr + lo, mask=li, other=0.0) * ln - c, 0.0)
    return row_window_sums(t, R, BWI)


@triton.jit
def adjoint_warm(ptr, y0, k, cols, H, W, c, R: tl.constexpr, BWI: tl.constexpr, RB: tl.constexpr):
    """Running adjoint sum (about c) of the window of row y0 - 1, per strip column."""
    s = tl.zeros([BWI], dtype=tl.float32)
    for w0 in range(0, 2 * R + 1, RB):
        o, i, v = frame(y0 - 1 - R + w0 + k, cols, H, W, R)
        i = i & ((w0 + k) < 2 * R + 1)
        s += tl.sum(adjoint_diff(ptr, o, i, v, o, i, v, c, False, R, BWI), axis=0)
    return s


@triton.jit
def adjoint_step(ptr, eo, ei, en, lo, li, ln, c, s, n, R: tl.constexpr, BWI: tl.constexpr):
    """M^T(x) at the RB rows of this step (n: their window pixel counts) and the running sum after them."""
    d = adjoint_diff(ptr, eo, ei, en, lo, li, ln, c, True, R, BWI)
    return s[None, :] + tl.cumsum(d, axis=0) + c * n, s + tl.sum(d, axis=0)


@triton.jit
def sym3_adjugate(q00, q01, q02, q11, q12, q22):
    """Adjugate (the cofactors, symmetric: 6 entries in the order of the input) and determinant of the
    symmetric 3x3 matrix [[q00, q01, q02], [q01, q11, q12], [q02, q12, q22]]; the inverse is adjugate / det."""
    k00 = q11 * q22 - q12 * q12
    k01 = q02 * q12 - q01 * q22
    k02 = q01 * q12 - q02 * q11
    k11 = q00 * q22 - q02 * q02
    k12 = q01 * q02 - q00 * q12
    k22 = q00 * q11 - q01 * q01
    return k00, k01, k02, k11, k12, k22, q00 * k00 + q01 * k01 + q02 * k02


@triton.jit
def sym3_times(k00, k01, k02, k11, k12, k22, v0, v1, v2):
    """The symmetric 3x3 matrix (6 entries, as ``sym3_adjugate`` returns them) times the vector (v0, v1, v2)."""
    return k00 * v0 + k01 * v1 + k02 * v2, k01 * v0 + k11 * v1 + k12 * v2, k02 * v0 + k12 * v1 + k22 * v2
