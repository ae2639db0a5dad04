"""``vision demo`` section "dense": small bundled fine-tuned heads predicting depth and normals on a bundled
rendered scene, beside the ground truth.

The heads sit on a small ViG (4 blocks, 96 wide) trained by ``vision finetune`` on rendered scenes
(the commands are in assets/SOURCES.md); the bundled scenes were not among its training scenes.
Each row: the input image, depth prediction / ground truth (inverse depth, TURBO colour map), normal
prediction / ground truth (``(n + 1) / 2``), with AbsRel and mean angular error under the panels.
"""
from __future__ import annotations

from pathlib import Path

TITLE = "dense prediction: token-local heads on a small ViG, depth and normals vs ground truth"

SCENES = ("scene_00000", "scene_00001")
RUNS = {"depth": ("dense", "depth"), "normals": ("dense", "normals")}


def run(out_dir: Path, device: str) -> list[Path]:
    import numpy as np
    import torch

    from vision.bundled import asset_path
    from vision.data.dense import DenseSamples
    from vision.dense import TASKS
    from vision.dense.colourise import colourise
    from vision.figures import side_by_side
    from vision.pipelines.training.dense_model import load_run, predict_raw

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    models = {name: load_run(asset_path("weights", *parts), device)[0] for name, parts in RUNS.items()}
    data = {name: {s["name"]: s for s in DenseSamples(asset_path("scenes"), TASKS[name].target_field, "all")}
            for name in RUNS}
    for scene in SCENES:
        image = data["depth"][scene]["image"]
        panels, labels = [image.permute(1, 2, 0).numpy()], ["input (reference render)"]
        for name, model in models.items():
            task = TASKS[name]
            target = task.make_target(data[name][scene]["target"])
            with torch.no_grad():
                pred = task.decode(predict_raw(model, task, image[None].to(device)).float()).cpu()
            m = task.metrics(pred, target, task.valid_mask(target))
            score = f"AbsRel {m['abs_rel']:.3f}" if name == "depth" else f"mean angle {m['mean_angle']:.1f} deg"
            panels += [colourise(name, pred[0]), colourise(name, target[0])]
            labels += [f"{name}: {score}", f"{name}: ground truth"]
        big = [np.repeat(np.repeat(p, 2, 0), 2, 1) for p in panels]
        written.append(side_by_side(big, labels, out_dir / f"{scene}_dense.png", font_size=14))
    return written
