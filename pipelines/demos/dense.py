"""``vision demo`` section "dense": the local-linear readout (tokens predict per-patch affine maps of the image's
pixels, so outputs follow image edges) on a small ViG, depth and normals on the three bundled rendered scenes,
beside the ground truth, with errors over the whole image and near edges printed on the picture.

The runs (``assets/weights/dense/{depth,normals}``; how they were trained is in assets/SOURCES.md) never saw the
bundled scenes. One PNG per scene, one row per task: input | prediction | ground truth | error map with the edge
band (valid pixels within ``BAND`` px of an instance or depth edge, :func:`vision.dense.edges.edge_band`, as
``vision evaluate`` scores it) at full brightness and the rest dimmed. The footer gives the figures over all three
scenes, as ``vision evaluate RUN --data assets/scenes --split all`` reports them.
"""
from __future__ import annotations

from pathlib import Path
import tempfile

import cv2
import numpy as np
import torch
from PIL import Image, ImageDraw

from vision.bundled import asset_path
from vision.data.dense import DenseSamples
from vision.dense import TASKS
from vision.dense.colourise import colourise
from vision.dense.edges import edge_band
from vision.dense.losses import DEGREES, angle_between
from vision.figures import _font, side_by_side
from vision.heads import guided_refine
from vision.io import write_image
from vision.pipelines.training.dense_model import predict_raw, load_run

TITLE = "dense prediction: local-linear readout on a small ViG, depth and normals vs ground truth, near edges"

SCENES = ("scene_00000", "scene_00001", "scene_00002")
RUNS = {"depth": ("dense", "depth"), "normals": ("dense", "normals")}
BAND = 4
# guided_refine (radius, eps) on each task's raw output, or None; chosen on the validation split of the training
# renders: edge-band AbsRel 0.275 -> 0.272 for depth, edge mean angle 25.78 -> 25.86 deg (worse) for normals
REFINE = {"depth": (4, 1e-3), "normals": None}
ZOOM = 2  # 128-px scenes are drawn at twice their size so that boundaries can be seen


def predict(models: dict, scenes: dict, device: str) -> dict:
    """Decoded predictions, targets, valid masks and the edge band of every scene and task:
    ``{task: {scene: (pred, target, valid, band)}}``, all (1, C, H, W) on the CPU."""
    out = {}
    for name, model in models.items():
        task, out[name] = TASKS[name], {}
        for scene, s in scenes[name].items():
            image = s["image"][None].to(device)
            with torch.no_grad():
                raw = predict_raw(model, task, image).float()
                if REFINE.get(name) is not None:
                    raw = guided_refine(image, raw, radius=REFINE[name][0], eps=REFINE[name][1])
            target = task.make_target(s["target"])
            band = edge_band(s["extras"]["segment"][None], s["extras"]["depth"][None], width=BAND)
            out[name][scene] = (task.decode(raw).cpu(), target, task.valid_mask(target), band)
    return out


def scores(pred, target, valid, band, name: str) -> tuple[float, float]:
    """The task's headline error (depth AbsRel, normals mean angle in degrees) over the valid pixels and over
    the valid pixels of the edge band."""
    task = TASKS[name]
    key = "abs_rel" if name == "depth" else "mean_angle"
    return task.metrics(pred, target, valid)[key], task.metrics(pred, target, valid & band)[key]


def _error_map(pred, target, valid, band, name: str):
    """(H, W, 3) error picture: depth |p - g| / g on [0, 0.5], normals angle on [0, 60] deg (INFERNO colour map);
    outside the edge band dimmed to a third, no surface black."""
    if name == "depth":
        err, top = ((pred - target).abs() / target.clamp_min(1e-6))[0, 0], 0.5
    else:
        err, top = (angle_between(pred.double(), target.double())[1] * DEGREES)[0, 0], 60.0
    v, b = valid[0, 0].numpy(), band[0, 0].numpy()
    scaled = np.clip(np.nan_to_num(err.float().numpy()) / top, 0, 1)
    rgb = cv2.applyColorMap(np.rint(scaled * 255).astype(np.uint8), cv2.COLORMAP_INFERNO)[:, :, ::-1] / 255.0
    rgb = np.where(b[..., None], rgb, rgb / 3)
    rgb[~v] = 0
    return rgb.astype(np.float32)


def _depth_colours(pred, target, valid):
    """Prediction and ground truth as inverse depth on one colour scale (the ground truth's 1st-99th percentile,
    TURBO), so that colours compare across the two; no surface black."""
    v = valid[0, 0].numpy()
    inv_p, inv_t = (1 / x[0, 0].double().clamp_min(1e-6).numpy() for x in (pred, target))
    lo, hi = np.percentile(inv_t[v], [1, 99])

    def paint(inv):
        codes = np.rint(np.clip((inv - lo) / max(hi - lo, 1e-12), 0, 1) * 255).astype(np.uint8)
        rgb = cv2.applyColorMap(codes, cv2.COLORMAP_TURBO)[:, :, ::-1].astype(np.float32) / 255
        rgb[~v] = 0
        return rgb

    return paint(inv_p), paint(inv_t)


def _band_overlay(image, band):
    """The input with the edge band tinted cyan, to show which pixels the edge figures count."""
    b = band[0, 0].numpy()[..., None]
    return np.where(b, 0.5 * image + 0.5 * np.array([0.0, 1.0, 1.0], np.float32), image).astype(np.float32)


def _describe(cfg, refine) -> str:
    """A run in a few words: head, backbone size, refinement."""
    guides = cfg.head_kwargs.get("learned_guides", 0)
    head = cfg.head + (f" (RGB + {guides} learned guides)" if cfg.head == "local-linear" and guides else "")
    size = f"ViG {cfg.extra.get('depth', '?')} x {cfg.extra.get('embed_dim', '?')}"
    return f"{head}, {size}" + (f", guided_refine r {refine[0]}" if refine else "")


def _zoom(a):
    return np.repeat(np.repeat(a, ZOOM, 0), ZOOM, 1)


def _stack(rows: list[Path], header: str, footer: str, path: Path) -> Path:
    """One PNG of the row pictures ``rows`` one above the other, with a line of text above and below."""
    tiles = [Image.open(p).convert("RGB") for p in rows]
    font, gap = _font(14), 8
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    line = probe.textbbox((0, 0), "Ag", font=font)[3] + gap
    width = max(t.width for t in tiles)
    head_lines, foot_lines = header.split("\n"), footer.split("\n")
    top = gap + line * len(head_lines)
    canvas = Image.new("RGB", (width, top + sum(t.height for t in tiles) + line * len(foot_lines) + gap), "white")
    draw = ImageDraw.Draw(canvas)
    for i, text in enumerate(head_lines):
        draw.text((gap, gap + i * line), text, fill="black", font=font)
    y = top
    for t in tiles:
        canvas.paste(t, (0, y))
        y += t.height
    for i, text in enumerate(foot_lines):
        draw.text((gap, y + i * line), text, fill="black", font=font)
    return write_image(path, np.asarray(canvas))


def run(out_dir: Path, device: str) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    loaded = {name: load_run(asset_path("weights", *parts), device) for name, parts in RUNS.items()}
    models = {name: model for name, (model, _) in loaded.items()}
    scenes = {name: {s["name"]: s for s in DenseSamples(asset_path("scenes"), TASKS[name].target_field, "all",
                                                        extras=("segment", "depth")) if s["name"] in SCENES}
              for name in RUNS}
    results = predict(models, scenes, device)
    model_line = "\n".join(f"{name}: {_describe(cfg, REFINE.get(name))}" for name, (_, cfg) in loaded.items())
    # over all scenes, as `vision evaluate` pools them: depth per image then averaged, angles over all pixels
    overall = {}
    for name in RUNS:
        pred, target, valid, band = (torch.cat(t) for t in zip(*(results[name][s] for s in SCENES)))
        overall[name] = scores(pred, target, valid, band, name)
    d, n = overall["depth"], overall["normals"]
    footer = (f"all {len(SCENES)} bundled scenes, depth: AbsRel {d[0]:.3f}, edge band {d[1]:.3f}\n"
              f"all {len(SCENES)} bundled scenes, normals: mean angle {n[0]:.1f} deg, edge band {n[1]:.1f} deg")
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        for scene in SCENES:
            rows = []
            image = scenes["depth"][scene]["image"].permute(1, 2, 0).numpy()
            for name in RUNS:
                pred, target, valid, band = results[name][scene]
                whole, edge = scores(pred, target, valid, band, name)
                fmt = "{:.3f}" if name == "depth" else "{:.1f}"
                err = "|error| / depth (0-0.5)" if name == "depth" else "angle error (0-60 deg)"
                shown = _depth_colours(pred, target, valid) if name == "depth" else \
                    (colourise(name, pred[0]), colourise(name, target[0]))
                first = image if not rows else _band_overlay(image, band)
                panels = [first, *shown, _error_map(pred, target, valid, band, name)]
                labels = ["input (reference render)" if not rows else f"edge band ({BAND} px) on the input",
                          f"{name}: {'AbsRel' if name == 'depth' else 'mean angle'} {fmt.format(whole)}, "
                          f"edge band {fmt.format(edge)}",
                          f"{name}: ground truth", f"{err}, off-band dimmed"]
                rows.append(side_by_side([_zoom(p) for p in panels], labels, Path(tmp) / f"{name}.png",
                                         font_size=14))
            band_share = float(results["depth"][scene][3].float().mean())
            header = (f"{scene} (never trained on); edge band = within {BAND} px of an instance or depth edge "
                      f"({band_share:.0%} of the pixels); flip TTA\n{model_line}")
            written.append(_stack(rows, header, footer, out_dir / f"{scene}_dense.png"))
    return written
