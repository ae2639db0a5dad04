"""`vision demo --only dense`: it writes its pictures, and the bundled dense runs' errors near edges on the three
bundled scenes are at least 20 % below those of the token-local runs bundled before them. The errors are computed
here in float64 NumPy from the ground truth (edge band, AbsRel and angles re-derived from their definitions)."""
import numpy as np
import pytest
import torch

from vision.bundled import asset_path
from vision.data.dense import DenseSamples
from vision.dense import TASKS
from vision.io import read_image
from vision.pipelines.cli import main
from vision.pipelines.demos import dense as section
from vision.pipelines.training.dense_model import load_run, predict_raw

# The token-local runs bundled before (4-block ViG, 240 training scenes), flip TTA, all three bundled scenes:
# `vision evaluate assets/weights/dense/{depth,normals} --data assets/scenes --split all` at commit b625393.
OLD_EDGE = {"depth": 0.2805, "normals": 35.29}
WIDTH = 4


def edge_band_np(segment: np.ndarray, depth: np.ndarray, width: int = WIDTH, rel_jump: float = 0.05) -> np.ndarray:
    """(H, W) bool: pixels within ``width`` (Chebyshev) of a pixel whose right or lower neighbour has another
    instance id, a relative depth jump above ``rel_jump``, or has / lacks a surface where it does not."""
    h, w = segment.shape
    edge = np.zeros((h, w), bool)
    for dy, dx in ((0, 1), (1, 0)):
        a_s, b_s = segment[:h - dy, :w - dx], segment[dy:, dx:]
        a_d, b_d = depth[:h - dy, :w - dx].astype(np.float64), depth[dy:, dx:].astype(np.float64)
        both = (a_d > 0) & (b_d > 0)
        jump = ((a_d > 0) != (b_d > 0)) | (both & (np.abs(a_d - b_d) > rel_jump * np.maximum(np.minimum(a_d, b_d),
                                                                                           1e-12)))
        pair = (a_s != b_s) | jump
        edge[:h - dy, :w - dx] |= pair
        edge[dy:, dx:] |= pair
    band = np.zeros_like(edge)
    for y, x in zip(*np.nonzero(edge)):
        band[max(0, y - width):y + width + 1, max(0, x - width):x + width + 1] = True
    return band


@pytest.fixture(scope="module")
def bundled():
    """Per task: float64 predictions as the demo makes them, ground truth and edge bands of the bundled scenes."""
    from vision.heads import guided_refine

    out = {}
    for name in ("depth", "normals"):
        task = TASKS[name]
        model, _ = load_run(asset_path("weights", "dense", name))
        rows = []
        for s in DenseSamples(asset_path("scenes"), task.target_field, "all", extras=("segment", "depth")):
            image = s["image"][None]
            with torch.no_grad():
                raw = predict_raw(model, task, image).float()
                if section.REFINE.get(name) is not None:
                    raw = guided_refine(image, raw, radius=section.REFINE[name][0], eps=section.REFINE[name][1])
            pred = task.decode(raw)[0].double().numpy()
            band = edge_band_np(s["extras"]["segment"][0].numpy(), s["extras"]["depth"][0].numpy())
            rows.append((s["name"], pred, s["target"].double().numpy(), band))
        out[name] = rows
    return out


def depth_edge_absrel(rows) -> float:
    per_image = []
    for _, pred, target, band in rows:
        m = band & (target[0] > 0) & np.isfinite(target[0])
        per_image.append(np.mean(np.abs(pred[0][m] - target[0][m]) / target[0][m]))
    return float(np.mean(per_image))


def normals_edge_angle(rows) -> float:
    errors = []
    for _, pred, target, band in rows:
        m = band & (np.linalg.norm(target, axis=0) > 0.5)
        p = pred[:, m] / np.linalg.norm(pred[:, m], axis=0)
        t = target[:, m] / np.linalg.norm(target[:, m], axis=0)
        errors.append(np.degrees(np.arccos(np.clip((p * t).sum(0), -1, 1))))
    return float(np.concatenate(errors).mean())


def test_the_bundled_runs_are_20_percent_better_near_edges(bundled):
    assert [r[0] for r in bundled["depth"]] == list(section.SCENES)
    depth, normals = depth_edge_absrel(bundled["depth"]), normals_edge_angle(bundled["normals"])
    assert depth < 0.8 * OLD_EDGE["depth"], depth
    assert normals < 0.8 * OLD_EDGE["normals"], normals


def test_the_demo_prints_the_independent_figures(bundled):
    """The demo's scores (the numbers it writes on the pictures) agree with the float64 ones computed here."""
    from vision.dense.edges import edge_band

    for name, ours in (("depth", depth_edge_absrel), ("normals", normals_edge_angle)):
        preds, targets, bands = (torch.from_numpy(np.stack([r[i] for r in bundled[name]])) for i in (1, 2, 3))
        valid = TASKS[name].valid_mask(targets)
        seg_depth = [(s["extras"]["segment"], s["extras"]["depth"])
                     for s in DenseSamples(asset_path("scenes"), "depth", "all", extras=("segment", "depth"))]
        band = edge_band(torch.stack([a for a, _ in seg_depth]), torch.stack([b for _, b in seg_depth]), width=WIDTH)
        assert torch.equal(band[:, 0], bands)
        _, edge = section.scores(preds, targets, valid, band, name)
        assert edge == pytest.approx(ours(bundled[name]), rel=1e-6)


def test_demo_writes_one_picture_per_bundled_scene(tmp_path):
    assert main(["demo", "--only", "dense", "-o", str(tmp_path), "--device", "cpu"]) == 0
    for scene in section.SCENES:
        img = read_image(tmp_path / "dense" / f"{scene}_dense.png")
        tile = 128 * section.ZOOM
        assert img.shape[0] > 2 * tile and img.shape[1] > 4 * tile, img.shape  # two rows of four tiles + text
        assert img.std() > 0.1  # pictures, not a blank canvas
