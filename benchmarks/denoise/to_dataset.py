"""Turn renderer scene folders (``blender_train.py``'s) into ``vision train-denoiser`` data.

    python benchmarks/denoise/to_dataset.py SRC DST

Every ``SRC/NAME/`` holding ``noisy_*.exr`` and ``reference.exr`` becomes ``DST/NAME/`` with ``frame_KK.exr`` (the
fields of :data:`vision.data.exr.LAYERS` the denoiser trains on) and a ``manifest.json``, so
:class:`vision.data.RenderedScenes` reads it beside ``vision render-scenes`` output (link both into one folder
to train on the union). The buffers go through :func:`vision.data.render_layers.read_render_file`, the reader
``vision denoise`` uses, so training sees exactly what inference will: the renderer's own noisy albedo and
normal of each frame, its Denoising Depth with the sky set to the no-surface depth, the albedo adjusted where
emission or specular tint lifts it above 1, and an all-zero ambient-occlusion channel (Cycles writes none,
which the denoiser also treats as zero at inference).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from vision.data.fields import FLNR_GUIDES

# the fields the denoiser trains on (ao is written as zeros below: Cycles writes none)
FIELDS = ("color", *FLNR_GUIDES)


def convert_scene(src: Path, dst: Path) -> int:
    from vision.data import write_frame
    from vision.data.render_layers import read_render_file

    noisy = sorted(src.glob("noisy_*.exr"))
    ref_file = src / "reference.exr"
    if not noisy or not ref_file.is_file():
        return 0
    reference = read_render_file(ref_file).layers[0].buffers["color"]
    if not float(np.abs(reference).max()) > 0:  # every light hidden from every surface the camera sees
        print(f"{src.name}: black reference, skipped", file=sys.stderr)
        return 0
    dst.mkdir(parents=True, exist_ok=True)
    frames = []
    for k, path in enumerate(noisy):
        layer = read_render_file(path).layers[0]
        b = layer.buffers
        h, w = b["color"].shape[:2]
        fields = {name: b[name] for name in FIELDS if name in b}
        fields.setdefault("emission", np.zeros((h, w, 3), np.float32))
        fields["ao"] = np.zeros((h, w, 1), np.float32)
        fields["reference"] = reference
        name = f"frame_{k:02d}.exr"
        write_frame(dst / name, fields)
        frames.append({"file": name, "source": path.name, "notes": layer.notes})
    manifest = {"name": dst.name, "renderer": "blender cycles", "source": str(src), "frames": frames,
                "reference": ref_file.name}
    info = src / "scene.txt"
    if info.is_file():
        manifest["scene"] = info.read_text()
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return len(frames)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    src, dst = Path(argv[0]), Path(argv[1])
    done = 0
    for folder in sorted(p for p in src.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if (dst / folder.name / "manifest.json").exists():
            continue
        done += convert_scene(folder, dst / folder.name)
    print(f"{done} frame(s) written under {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
