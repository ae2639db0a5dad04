"""``RenderedScenes``: a PyTorch dataset over the folders ``vision render-scenes`` writes.

Layout (one folder per scene; a scene counts once its ``manifest.json`` exists)::

    DIR/scene_00000/frame_00.exr ... frame_NN.exr   one multi-layer EXR per noisy 1-spp frame
    DIR/scene_00000/preview.png                      contact sheet
    DIR/scene_00000/manifest.json                    renderer, spp, seeds, camera, objects, channels
    DIR/dataset.json                                 the command line and settings of the run
"""
from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from .exr import LAYERS, read_frame
from .fields import ID_LAYERS

SPLITS = ("train", "val", "test", "all")


def scene_split(name: str, fractions=(0.8, 0.1, 0.1)) -> str:
    """Split of a scene, from a hash of its folder name: stable as scenes are added or removed."""
    u = (zlib.crc32(name.encode()) & 0xFFFFFFFF) / 2 ** 32
    if u < fractions[0]:
        return "train"
    return "val" if u < fractions[0] + fractions[1] else "test"


def list_scenes(root) -> list[Path]:
    """Finished scene folders under ``root``, sorted by name."""
    root = Path(root)
    # hidden folders are scenes still being written (see pipelines/render_scenes.py)
    return sorted(p.parent for p in root.glob("*/manifest.json") if not p.parent.name.startswith("."))


def file_inside(root, name) -> bool:
    """Whether ``name`` (read from a user's file) is a non-empty string whose path stays inside ``root`` once
    resolved (links and ``..`` followed)."""
    return isinstance(name, str) and bool(name) and Path(root).resolve() in (Path(root) / name).resolve().parents


def _read_manifest(path: Path) -> dict:
    """A scene's manifest, refused unless every frame it lists is a file inside the scene's folder (a
    ``../`` or absolute name would read outside the dataset)."""
    try:
        manifest = json.loads(path.read_text())
        files = [f["file"] for f in manifest["frames"]]
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a scene manifest with a frames list of files ({err})") from None
    for name in files:
        if not (file_inside(path.parent, name) and not Path(name).is_absolute() and ".." not in Path(name).parts):
            raise ValueError(f"{path}: frame file {name!r} is not inside the scene folder {path.parent}; "
                             "refusing to read it")
    return manifest


class RenderedScenes(Dataset):
    """Frames of rendered scenes as dicts of ``(C, H, W)`` tensors, split by scene.

    Args:
        root: the ``--out`` folder of ``vision render-scenes`` (or ``vision.bundled.asset_path("scenes")``).
        split: ``"train"``, ``"val"``, ``"test"`` (by a hash of the scene name, so every frame of a
            scene lands in the same split, and a scene keeps its split as the dataset grows) or ``"all"``.
        fields: names from :data:`vision.data.exr.LAYERS`, e.g. ``["color", "albedo", "normal",
            "depth", "ao", "emission", "reference"]`` for the denoiser or ``["reference", "depth",
            "camnormal", "semantic"]`` for dense prediction. Float fields come as float32 tensors,
            ``segment`` and ``semantic`` as int64.
        frames: which noisy frames of each scene to use (indices; default all). Fields other than
            ``color`` are the same in every frame of a scene.
        fractions: train / val / test shares.
        transform: called on each sample dict before it is returned.

    Each item also carries ``"scene"`` (folder name) and ``"frame"`` (index).

    Example:
        >>> ds = RenderedScenes("data/scenes", split="train", fields=["color", "albedo", "reference"])
        >>> loader = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True)
    """

    def __init__(self, root, split: str = "train", fields: Iterable[str] = ("color", "reference"),
                 frames: Iterable[int] | None = None, fractions=(0.8, 0.1, 0.1),
                 transform: Callable | None = None):
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"no rendered-scenes folder at {self.root}")
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
        self.fields = list(fields)
        unknown = [f for f in self.fields if f not in LAYERS]
        if unknown:
            raise ValueError(f"unknown field(s) {', '.join(unknown)}; known fields: {', '.join(LAYERS)}")
        if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1) > 1e-6:
            raise ValueError(f"fractions must be three non-negative shares summing to 1, got {fractions}")
        self.split, self.transform = split, transform
        self.scenes = [p for p in list_scenes(self.root)
                       if split == "all" or scene_split(p.name, fractions) == split]
        self.items: list[tuple[Path, int, str]] = []
        self.manifests: dict[str, dict] = {}
        for folder in self.scenes:
            manifest = _read_manifest(folder / "manifest.json")
            self.manifests[folder.name] = manifest
            wanted = range(len(manifest["frames"])) if frames is None else list(frames)
            for k in wanted:
                if not 0 <= k < len(manifest["frames"]):
                    raise ValueError(f"scene {folder.name} has {len(manifest['frames'])} frames, no frame {k}")
                self.items.append((folder, k, manifest["frames"][k]["file"]))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict:
        folder, k, fname = self.items[index]
        arrays = read_frame(folder / fname, self.fields)
        sample = {}
        for name, arr in arrays.items():
            if name in ID_LAYERS:  # integer ids
                t = torch.from_numpy(arr.astype(np.int64))
            else:
                t = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))
            sample[name] = t.permute(2, 0, 1).contiguous()
        sample["scene"], sample["frame"] = folder.name, k
        return self.transform(sample) if self.transform else sample

    def manifest(self, index: int) -> dict:
        """The manifest (camera, seeds, objects, ...) of the scene of item ``index``."""
        return self.manifests[self.items[index][0].name]

    def __repr__(self) -> str:
        return (f"RenderedScenes({str(self.root)!r}, split={self.split!r}, scenes={len(self.scenes)}, "
                f"frames={len(self)}, fields={self.fields})")

