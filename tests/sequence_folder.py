"""A ``vision bench denoise-sequences`` folder built from the bundled 40 x 30 orbit frames
(``tests/data/blender/seq``) with a stand-in reference per frame: the frame's own colour, halved. Shared by the tests
that score sequences."""
import json
import shutil
from pathlib import Path

import numpy as np

SEQ = Path(__file__).parent / "data" / "blender" / "seq"


def sequence_folder(folder: Path, name: str = "orbit", reverse: bool = False) -> Path:
    """``folder`` with ``n1..3.exr``, ``r1..3.exr`` and a ``manifest.json`` naming them as sequence ``name`` (its
    entries listed backwards with ``reverse``, to check that frames are taken in frame order)."""
    from vision.data import write_exr
    from vision.data.render_layers import read_render_file

    entries = []
    for t in (1, 2, 3):
        shutil.copy(SEQ / f"noisy_{t:04d}.exr", folder / f"n{t}.exr")
        c = read_render_file(SEQ / f"noisy_{t:04d}.exr").layers[0].buffers["color"]
        write_exr(folder / f"r{t}.exr", {k: np.ascontiguousarray(c[..., i] / 2) for i, k in enumerate("RGB")})
        entries.append({"sequence": name, "frame": t, "noisy": f"n{t}.exr", "reference": f"r{t}.exr"})
    (folder / "manifest.json").write_text(json.dumps({"frames": entries[::-1] if reverse else entries}))
    return folder
