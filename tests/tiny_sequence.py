"""A long animation of tiny frames for the tests of long ``vision denoise --temporal`` runs: each frame is one EXR
holding what the command asks of a frame (colour, albedo, normal and Cycles' ``Vector`` pass), so the run takes the
path users run, without ``--allow-no-guides`` or ``--static-camera``. Shared by the tests that stop a long run and
that measure its memory."""
from __future__ import annotations

from pathlib import Path

import numpy as np

# the camera pans by this much each frame, in pixels (x right, y up: the Vector pass's X, Y towards the previous
# frame), so every frame's history is resampled between pixels and the border is disoccluded
PAN = (0.5, -0.25)


def tiny_sequence(folder: Path, count: int, size: int = 8, spp: int = 4) -> str:
    """``folder`` (created) with ``count`` frames ``f.00000.exr`` ... of ``size`` x ``size`` pixels: uniform random
    colour in [0, 1) (a new draw each frame, seeded), grey albedo 0.5, normals facing the camera, a constant pan
    (:data:`PAN`) in ``Vector.XYZW`` and ``vision.spp`` = ``spp`` in the header. Returns the glob pattern of the
    frames, as ``vision denoise`` takes it."""
    from vision.data.exr import write_exr

    folder.mkdir(parents=True, exist_ok=True)
    shape = (size, size)
    fixed = {f"albedo.{c}": np.full(shape, 0.5, np.float32) for c in "RGB"}
    fixed |= {"normal.X": np.zeros(shape, np.float32), "normal.Y": np.zeros(shape, np.float32),
              "normal.Z": np.ones(shape, np.float32)}
    fixed |= {f"Vector.{c}": np.full(shape, v, np.float32) for c, v in zip("XYZW", (*PAN, *(-p for p in PAN)))}
    rng = np.random.default_rng(0)
    for i in range(count):
        colour = {c: rng.random(shape, dtype=np.float32) for c in "RGB"}
        write_exr(folder / f"f.{i:05d}.exr", colour | fixed, {"vision.spp": spp})
    return str(folder / "f.*.exr")
