"""Image / dense-target pairs for dense-prediction fine-tuning, from two folder layouts.

1. A ``vision render-scenes`` folder: the input image is the scene's high-spp ``reference`` radiance,
   tonemapped (clamp to [0, 1], gamma 1/2.2, as in :func:`vision.denoise.metrics.tonemap`); the target
   is one of its ground-truth layers (``depth``, ``camnormal``, ``albedo``, ``semantic``, ``segment``).
   Scenes are split by a hash of their name (:func:`vision.data.dataset.scene_split`).
2. A plain folder::

       DIR/images/NAME.png|jpg|tif        the input image (RGB; gray is repeated, alpha dropped)
       DIR/targets/NAME.npy|exr|png|tif   its target: NumPy (H, W) or (H, W, C) values as stored;
                                          a single-layer EXR (all its channels, sorted by name);
                                          PNG/TIFF: integer labels as stored for segmentation
                                          targets, else codes / max code (so [0, 1])

   split by a hash of NAME with the same fractions.

Every pair is loaded once and kept in memory (these sets are small; 240 scenes at 128 x 128 are
about 60 MB).

    >>> ds = DenseSamples("data/scenes", target="depth", split="train")
    >>> ds[0]["image"].shape, ds[0]["target"].shape
    (torch.Size([3, 128, 128]), torch.Size([1, 128, 128]))
"""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import torch
from torch.utils.data import Dataset

from vision.io import check_image_header, check_npy_header, read_image

from .dataset import SPLITS, list_scenes, scene_split
from .exr import LAYERS, read_exr, read_frame
from .fields import ID_LAYERS

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tif", ".tiff")
TARGET_EXTENSIONS = (".npy", ".exr", ".png", ".tif", ".tiff")


def _tonemap(x: np.ndarray) -> np.ndarray:
    return np.clip(x, 0.0, 1.0) ** (1.0 / 2.2)


def _read_target(path: Path, labels: bool) -> np.ndarray:
    if path.suffix == ".npy":
        check_npy_header(path)  # a header claiming more pixels than the limit, or than the file holds: one line
        arr = np.load(path, allow_pickle=False)
    elif path.suffix == ".exr":
        layers = read_exr(path)
        names = sorted(layers)
        arr = np.stack([np.asarray(layers[n]) for n in names], axis=-1)
    else:
        check_image_header(path)
        arr = cv2.imdecode(np.fromfile(path, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
        if arr is None:
            raise ValueError(f"{path}: not a readable image")
        if arr.ndim == 3 and arr.shape[2] >= 3:
            arr = arr[:, :, [2, 1, 0] + list(range(3, arr.shape[2]))]
        if not labels and arr.dtype.kind == "u":
            arr = arr.astype(np.float32) / np.float32(np.iinfo(arr.dtype).max)
    arr = np.asarray(arr)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3:
        raise ValueError(f"{path}: target must be (H, W) or (H, W, C), got shape {arr.shape}")
    return arr


def _to_chw(arr: np.ndarray, labels: bool) -> torch.Tensor:
    if labels:
        return torch.from_numpy(np.ascontiguousarray(arr.astype(np.int64))).permute(2, 0, 1).contiguous()
    return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32)).permute(2, 0, 1).contiguous()


class DenseSamples(Dataset):
    """``{"image": (3, H, W) float32 in [0, 1], "target": (C, H, W), "name": str}`` pairs, kept in memory.

    Args:
        root: a ``vision render-scenes`` folder or a plain ``images/`` + ``targets/`` folder (see the
            module docstring); the layout is detected.
        target: for rendered scenes the layer to predict (``"depth"``, ``"camnormal"``, ``"albedo"``,
            ``"semantic"``, ``"segment"``); for a plain folder it only decides whether PNG targets are
            integer labels (``"semantic"`` / ``"segment"``) or values.
        split: ``"train"``, ``"val"``, ``"test"`` or ``"all"`` (by a hash of the scene / file name).
        fractions: train / val / test shares.
        limit: keep at most this many pairs (the first ones by name), e.g. for a quick run.
        extras: more layers of rendered scenes to keep per sample under ``"extras"`` (e.g.
            ``("segment", "depth")`` for :func:`vision.dense.edges.edge_band`).

    Targets of semantic / segment labels are int64, others float32. Raises ``ValueError`` for an
    empty split, an image without a target, or image/target sizes that differ.
    """

    def __init__(self, root, target: str, split: str = "train", fractions=(0.8, 0.1, 0.1), limit: int | None = None,
                 extras=()):
        self.root, self.target, self.extras = Path(root), target, tuple(extras)
        if not self.root.is_dir():
            raise FileNotFoundError(f"no data folder at {self.root}")
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
        self.split = split
        labels = target in ID_LAYERS
        if (self.root / "images").is_dir():
            if self.extras:
                raise ValueError(f"extra layers {self.extras} need a `vision render-scenes` folder")
            pairs = self._plain(fractions, labels, limit)
        elif list_scenes(self.root):
            pairs = self._rendered(fractions, labels, limit)
        else:
            raise ValueError(f"{self.root} is neither a `vision render-scenes` folder (scene_*/manifest.json) nor a "
                             "folder with images/ and targets/")
        if not pairs:
            raise ValueError(f"{self.root}: no samples in split {split!r} ({self._split_counts(fractions)})")
        self.samples = pairs

    def _split_counts(self, fractions) -> str:
        """How this folder's names fall into the splits, for the message about an empty one."""
        if (self.root / "images").is_dir():
            names = [p.stem for p in (self.root / "images").iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS]
        else:
            names = [p.name for p in list_scenes(self.root)]
        counts = {s: 0 for s in SPLITS[:3]}
        for name in names:
            counts[scene_split(name, fractions)] += 1
        shares = "/".join(f"{f:g}" for f in fractions)
        return (f"{len(names)} samples split by a hash of their names with fractions {shares}: "
                + ", ".join(f"{n} {s}" for s, n in counts.items()))

    def _keep(self, name: str, fractions) -> bool:
        return self.split == "all" or scene_split(name, fractions) == self.split

    def _rendered(self, fractions, labels, limit):
        if self.target not in LAYERS:
            raise ValueError(f"unknown target layer {self.target!r}; rendered scenes have {', '.join(LAYERS)}")
        out = []
        for folder in list_scenes(self.root):
            if not self._keep(folder.name, fractions):
                continue
            if limit is not None and len(out) >= limit:
                break
            arrays = read_frame(folder / "frame_00.exr", list(dict.fromkeys(["reference", self.target, *self.extras])))
            image = _to_chw(_tonemap(np.asarray(arrays["reference"], dtype=np.float32)), False)
            sample = {"image": image, "target": _to_chw(arrays[self.target], labels), "name": folder.name}
            if self.extras:
                sample["extras"] = {k: _to_chw(arrays[k], k in ID_LAYERS) for k in self.extras}
            out.append(sample)
        return out

    def _plain(self, fractions, labels, limit):
        images = sorted(p for p in (self.root / "images").iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
        out = []
        for path in images:
            if not self._keep(path.stem, fractions):
                continue
            if limit is not None and len(out) >= limit:
                break
            found = [self.root / "targets" / (path.stem + ext) for ext in TARGET_EXTENSIONS]
            found = [p for p in found if p.is_file()]
            if not found:
                raise ValueError(f"{path}: no target targets/{path.stem}.{{{','.join(e[1:] for e in TARGET_EXTENSIONS)}}}")
            img = read_image(path)[:, :, :3]
            if img.shape[2] == 1:
                img = np.repeat(img, 3, axis=2)
            tgt = _read_target(found[0], labels)
            if tgt.shape[:2] != img.shape[:2]:
                raise ValueError(f"{found[0]}: target is {tgt.shape[1]}x{tgt.shape[0]}, image {img.shape[1]}x{img.shape[0]}")
            out.append({"image": _to_chw(img, False), "target": _to_chw(tgt, labels), "name": path.stem})
        return out

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict:
        return dict(self.samples[index])

    def __repr__(self) -> str:
        return f"DenseSamples({str(self.root)!r}, target={self.target!r}, split={self.split!r}, n={len(self)})"
