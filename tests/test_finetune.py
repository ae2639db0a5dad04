"""Dense fine-tuning: data layouts, LoRA injection, checkpoints (bit-for-bit round trip, resume, pretrained
backbone files), the CLI, and data-parallel training under Accelerate with 2 CPU processes (gloo)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from vision.bundled import asset_path
from vision.data.dense import DenseSamples
from vision.pipelines.training.dense_model import DenseConfig, build_model, load_run, lora_targets, predict_raw

TINY = dict(depth=4, embed_dim=32, num_heads=2)


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one intra-op thread is faster and avoids OpenMP stalls on a shared machine."""
    yield  # ViG with 4 blocks, 32 wide: a second per epoch on CPU


def tiny_cfg(**kw) -> DenseConfig:
    base = dict(task="depth", head="token-local", lora_rank=4, epochs=1, batch_size=2, img_size=32, extra=TINY,
                ema=0.9, mixed_precision="no")  # not whatever `accelerate config` left on this machine
    base.update(kw)
    return DenseConfig(**base)


class Crop:
    """The bundled scenes cut to 32 x 32 (four crops each): a 12-image set that trains in seconds."""

    def __init__(self, target: str):
        ds = DenseSamples(asset_path("scenes"), target, "all")
        self.items = []
        for s in ds:
            for y, x in ((0, 0), (0, 64), (64, 0), (64, 64)):
                self.items.append({"image": s["image"][:, y:y + 32, x:x + 32].clone(),
                                   "target": s["target"][:, y:y + 32, x:x + 32].clone(), "name": f"{s['name']}_{y}_{x}"})

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return dict(self.items[i])


def test_rendered_layout_reads_tonemapped_reference_and_target():
    from vision.data.exr import read_frame

    ds = DenseSamples(asset_path("scenes"), "depth", "all")
    assert len(ds) == 3
    s = ds[0]
    raw = read_frame(asset_path("scenes", s["name"], "frame_00.exr"), ["reference", "depth"])
    expect = np.clip(raw["reference"], 0, 1) ** (1 / 2.2)  # the documented tonemap
    np.testing.assert_allclose(s["image"].permute(1, 2, 0).numpy(), expect, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(s["target"][0].numpy(), raw["depth"][:, :, 0])
    assert DenseSamples(asset_path("scenes"), "semantic", "all")[0]["target"].dtype == torch.int64


def test_plain_layout_png_npy_and_errors(tmp_path):
    from vision.io import write_image

    (tmp_path / "images").mkdir()
    (tmp_path / "targets").mkdir()
    rng = np.random.default_rng(0)
    img = rng.uniform(size=(16, 24, 3)).astype(np.float32)
    write_image(tmp_path / "images" / "a.png", img, bits=16)
    depth = rng.uniform(1, 5, size=(16, 24)).astype(np.float32)
    np.save(tmp_path / "targets" / "a.npy", depth)
    ds = DenseSamples(tmp_path, "depth", "all")
    assert ds[0]["target"].shape == (1, 16, 24)
    np.testing.assert_array_equal(ds[0]["target"][0].numpy(), depth)
    np.testing.assert_allclose(ds[0]["image"].permute(1, 2, 0).numpy(), img, atol=1 / 65535)
    write_image(tmp_path / "images" / "b.png", img[:8], bits=8)
    np.save(tmp_path / "targets" / "b.npy", depth)  # 16 rows: does not match the 8-row image
    with pytest.raises(ValueError, match="target is"):
        DenseSamples(tmp_path, "depth", "all")
    (tmp_path / "targets" / "b.npy").unlink()
    with pytest.raises(ValueError, match="no target"):
        DenseSamples(tmp_path, "depth", "all")
    with pytest.raises(ValueError, match="neither"):
        DenseSamples(tmp_path / "targets", "depth", "all")


def test_lora_freezes_backbone_and_adapts_every_projection():
    torch.manual_seed(0)
    model = build_model(tiny_cfg(lora_rank=4))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert all(n.startswith("head.") or "lora_" in n for n in trainable)
    base = build_model(tiny_cfg(lora_rank=0)).backbone
    projections = lora_targets(base)
    adapted = {n.split(".lora_A")[0] for n in trainable if ".lora_A" in n}
    # the backbone is a peft PeftModel: its modules sit under base_model.model
    assert adapted == {"backbone.base_model.model." + p for p in projections} and len(projections) == 4 * 8
    head_params = sum(p.numel() for p in model.head.parameters())
    assert head_params == 32 * 16 * 16 * 1 + 16 * 16 * 1  # token-local: dim p^2 K + p^2 K
    # LoRA's B starts at zero: at init the adapted backbone computes exactly what the frozen one does
    torch.manual_seed(0)
    plain = build_model(tiny_cfg(lora_rank=0))
    x = torch.rand(2, 3, 32, 32)
    torch.testing.assert_close(model.backbone(x)[-1], plain.backbone(x)[-1], rtol=0, atol=0)


@pytest.mark.parametrize("head,lora,head_kwargs", [("token-local", 4, {}),
                                                    ("local-linear", 0, {"cells": 2, "learned_guides": 1}),
                                                    ("dpt", 0, {})])
def test_train_then_reload_gives_bit_identical_predictions(tmp_path, head, lora, head_kwargs, one_thread):
    from vision.dense import TASKS
    from vision.pipelines.training.finetune import train

    data = Crop("camnormal")
    cfg = tiny_cfg(task="normals", head=head, lora_rank=lora, epochs=2, head_kwargs=head_kwargs)
    history = train(cfg, tmp_path / "run", train_set=data, val_set=data, progress=False, log=lambda *a: None)
    assert [h["epoch"] for h in history] == [1, 2]
    assert np.isfinite(history[-1]["loss"]) and "mean_angle" in history[-1]
    files = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert {"config.json", "model.safetensors", "state", "metrics.jsonl", "previews"} <= set(files)
    assert (tmp_path / "run" / "state" / "resume.safetensors").is_file()  # inside the atomic checkpoint folder
    assert (tmp_path / "run" / "previews" / "epoch_002.png").stat().st_size > 0
    # checkpoint = trainable tensors only
    from safetensors.torch import load_file

    saved = load_file(str(tmp_path / "run" / "model.safetensors"))
    model, loaded_cfg = load_run(tmp_path / "run")
    assert loaded_cfg == cfg
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert set(saved) == trainable
    x = torch.stack([data[i]["image"] for i in range(4)])
    first = predict_raw(model, TASKS["normals"], x)
    again, _ = load_run(tmp_path / "run")
    assert torch.equal(first, predict_raw(again, TASKS["normals"], x))
    # and the metrics the run logged are those of the saved weights
    from vision.pipelines.training.finetune import evaluate

    metrics, _ = evaluate(again, TASKS["normals"], data, tta=cfg.tta)
    best = min(history, key=lambda r: (r["mean_angle"], r["epoch"]))  # the best validation epoch is what is kept
    assert [r["saved"] for r in history] == [True, best["epoch"] == 2]
    assert metrics["mean_angle"] == pytest.approx(best["mean_angle"], rel=1e-5)


def test_resume_continues_from_the_last_epoch(tmp_path, one_thread):
    from vision.pipelines.training.finetune import train

    data = Crop("depth")
    train(tiny_cfg(epochs=1), tmp_path, train_set=data, val_set=data, progress=False, log=lambda *a: None)
    logs = []
    history = train(tiny_cfg(epochs=2), tmp_path, train_set=data, val_set=data, resume=True, progress=False,
                    log=logs.append)
    assert [h["epoch"] for h in history] == [1, 2]
    assert any("resuming" in line for line in logs)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2]
    # curves.png beside it: the loss and the validation metric, each panel's range written from these numbers
    from PIL import Image

    from vision.pipelines.training.curves import PANEL, curves

    img = np.asarray(Image.open(tmp_path / "curves.png").convert("RGB"))
    assert img.shape == (PANEL[1], 2 * PANEL[0], 3)
    np.testing.assert_array_equal(img, curves([json.loads(line) for line in lines], "abs_rel"))
    blue = (np.abs(img.astype(int) - (31, 119, 180)).sum(-1) < 30).sum()
    red = (np.abs(img.astype(int) - (214, 39, 40)).sum(-1) < 30).sum()
    assert blue > 20 and red > 20  # both curves drawn (two points and the line between them each)


def test_pretrained_backbone_file_is_loaded(tmp_path):
    import timm

    import vision  # noqa: F401

    torch.manual_seed(3)
    ref = timm.create_model("vig_tiny_patch16_224", img_size=32, **TINY)
    torch.save({"model": ref.state_dict()}, tmp_path / "vig.pth")  # a training checkpoint, as published
    torch.manual_seed(99)  # a different seed: only the file can make the weights equal
    model = build_model(tiny_cfg(pretrained=str(tmp_path / "vig.pth"), lora_rank=0))
    got = dict(model.backbone.named_parameters())
    w = ref.state_dict()["blocks.0.attn.qkv.weight"]
    assert torch.equal(got["model.blocks.0.attn.qkv.weight"], w)
    with pytest.raises(FileNotFoundError):
        build_model(tiny_cfg(pretrained=str(tmp_path / "missing.pth")))


def test_bad_config_errors():
    with pytest.raises(ValueError, match="unknown task"):
        build_model(tiny_cfg(task="optical-flow"))
    with pytest.raises(ValueError, match="unknown head"):
        build_model(tiny_cfg(head="mlp"))
    with pytest.raises(ValueError, match="unknown backbone"):
        build_model(tiny_cfg(backbone="no_such_model"))
    with pytest.raises(ValueError, match="it takes guide_channels, detail, bias, cells, learned_guides"):
        build_model(tiny_cfg(head="local-linear", head_kwargs={"cell": 4}))
    with pytest.raises(ValueError, match=r"head arguments \['patch_size'\] are set by the backbone"):
        build_model(tiny_cfg(head_kwargs={"patch_size": 8}))
    assert build_model(tiny_cfg(head="local-linear", head_kwargs={"cells": 4})).head.cells == 4
    from vision.pipelines.training.finetune import task_of

    with pytest.raises(ValueError, match=r"\['weight'\] are not settings of the depth task; it has gradient_weight"):
        task_of(tiny_cfg(task_kwargs={"weight": 1.0}))
    assert task_of(tiny_cfg(task="normals", task_kwargs={"gradient_weight": 0.5})).gradient_weight == 0.5
    model = build_model(tiny_cfg())
    with pytest.raises(ValueError, match="multiple of"):
        model(torch.rand(1, 3, 30, 32))


def test_predict_pads_odd_sizes_and_flip_tta_mirrors_normals():
    from vision.dense import TASKS

    torch.manual_seed(0)
    model = build_model(tiny_cfg(task="normals", lora_rank=0)).eval()
    task = TASKS["normals"]
    x = torch.rand(1, 3, 30, 45)
    out = predict_raw(model, task, x, tta=True)
    assert out.shape == (1, 3, 30, 45)
    # TTA of the mirrored image is the mirror of TTA, with the x component negated
    mirrored = predict_raw(model, task, x.flip(-1)[..., :, :], tta=True)
    pad = torch.nn.functional.pad
    xp = pad(x, (0, 3, 0, 2), mode="replicate")
    a = model(xp)
    b = task.flip(model(xp.flip(-1)))
    torch.testing.assert_close(out, (0.5 * (a + b))[..., :30, :45])
    assert mirrored.shape == out.shape


def write_crops(root, task: str = "depth"):
    """:class:`Crop` written as a ``vision finetune`` data folder (``root/images`` 16-bit PNGs + ``root/targets``
    NPYs); returns the Crop."""
    from vision.io import write_image

    (root / "images").mkdir(parents=True)
    (root / "targets").mkdir()
    src = Crop(task)
    for i in range(len(src)):
        s = src[i]
        write_image(root / "images" / f"{s['name']}.png", s["image"].permute(1, 2, 0).numpy(), bits=16)
        np.save(root / "targets" / f"{s['name']}.npy", s["target"][0].numpy())
    return src


def test_cli_finetune_then_predict(tmp_path):
    from vision.pipelines.cli import main

    data = tmp_path / "data"
    src = write_crops(data)
    run = tmp_path / "run"
    args = ["finetune", "--task", "depth", "--data", str(data), "-o", str(run), "--epochs", "1", "--batch-size", "2",
            "--img-size", "32", "--lora-rank", "0", "--threads", "1", "--quiet", "--backbone-kwargs", json.dumps(TINY)]
    assert main(args) == 0
    assert main(args) == 2  # a non-empty run folder without --resume is refused
    assert main(args[:-2] + ["--backbone-kwargs", "{bad"]) == 2
    assert main(args + ["--head-kwargs", "[4]"]) == 2  # must be a JSON object
    run_g = tmp_path / "run_g"
    with_g = [a if a != str(run) else str(run_g) for a in args]
    assert main(with_g + ["--task-kwargs", '{"gradient_weight": 0.5}']) == 0
    assert json.loads((run_g / "config.json").read_text())["task_kwargs"] == {"gradient_weight": 0.5}
    assert main([a if a != str(run) else str(tmp_path / "run_bad") for a in args]
                + ["--task-kwargs", '{"gradient_wieght": 0.5}']) == 2  # a typo is an error, not ignored
    out = tmp_path / "pred"
    assert main(["predict", str(run), str(data / "images" / "*.png"), "-o", str(out), "--format", "npy"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert len([n for n in names if n.endswith(".npy")]) == len(src)
    assert len([n for n in names if n.endswith("_preview.png")]) == len(src)
    pred = np.load(out / f"{src[0]['name']}.npy")
    assert pred.shape == (32, 32, 1) and (pred > 0).all()  # decoded depth: exp of the log-depth output


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_accelerate_two_cpu_processes_agree(tmp_path):
    """``accelerate launch --multi_gpu --num_processes 2`` on a machine without GPU: DDP over gloo (accelerate's
    MULTI_CPU); each rank trains on its half of every epoch and both end with the same weights."""
    script = tmp_path / "ddp_train.py"
    script.write_text(DDP_SCRIPT.format(tests=str(Path(__file__).parent), run=str(tmp_path / "run"),
                                        out=str(tmp_path)))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).parent))
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()), str(script)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    from safetensors.torch import load_file

    info = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [i["world"] for i in info] == [2, 2] and sorted(i["rank"] for i in info) == [0, 1]
    assert info[0]["steps"] == info[1]["steps"] == 3  # 12 images, batch 2, two ranks: 3 steps each
    a, b = (load_file(str(tmp_path / f"rank{r}.safetensors")) for r in (0, 1))
    assert set(a) == set(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    start = load_file(str(tmp_path / "rank0_init.safetensors"))
    assert any(not torch.equal(a[k], start[k]) for k in a)  # it trained
    assert (tmp_path / "run" / "model.safetensors").is_file()  # the main process wrote the run


DDP_SCRIPT = r"""
import json, torch
torch.set_num_threads(1)
from accelerate import PartialState
from safetensors.torch import save_file
from test_finetune import Crop, tiny_cfg
import vision.pipelines.training.finetune as ft
from vision.pipelines.training.dense_model import trainable_state

state = PartialState(cpu=True)
steps = {{"n": 0}}
orig_build = ft.build_model
def build(cfg):
    model = orig_build(cfg)
    save_file(trainable_state(model), {out!r} + f"/rank{{state.process_index}}_init.safetensors")
    hook = model.head.register_forward_hook(lambda *a: steps.__setitem__("n", steps["n"] + 1) if model.training else None)
    ft._last_model = model
    return model
ft.build_model = build
data = Crop("depth")
ft.train(tiny_cfg(epochs=1, ema=0), {run!r}, train_set=data, val_set=data, progress=False, log=lambda *a: None)
model = ft._last_model
save_file(trainable_state(model), {out!r} + f"/rank{{state.process_index}}.safetensors")
with open({out!r} + f"/rank{{state.process_index}}.json", "w") as fh:
    json.dump({{"rank": state.process_index, "world": state.num_processes, "steps": steps["n"]}}, fh)
"""


def test_edge_band_by_hand():
    from vision.dense.edges import edge_band, edge_pixels

    seg = torch.zeros(1, 1, 5, 7, dtype=torch.int64)
    seg[..., :, 4:] = 2                      # an id edge between columns 3 and 4
    depth = torch.full((1, 1, 5, 7), 2.0)
    depth[..., 4, :] = 2.05                  # +2.5 %: below the 5 % jump, no edge
    e = edge_pixels(seg, depth)
    expect = torch.zeros(5, 7, dtype=torch.bool)
    expect[:, 3:5] = True
    assert torch.equal(e[0, 0], expect)
    depth[..., 0, 0] = 3.0                   # +50 %: a depth edge around pixel (0, 0)
    e = edge_pixels(None, depth)
    assert e[0, 0].nonzero().tolist() == [[0, 0], [0, 1], [1, 0]]
    band = edge_band(seg, None, width=1)
    assert band[0, 0].sum(1).tolist() == [4] * 5   # columns 2..5
    assert torch.equal(edge_band(seg, None, width=0), edge_pixels(seg))
    hole = torch.full((1, 1, 1, 3), 1.0)
    hole[..., 2] = 0                          # no surface next to a surface is an edge
    assert edge_pixels(depth=hole)[0, 0, 0].tolist() == [False, True, True]
    with pytest.raises(ValueError):
        edge_pixels()


def test_cli_evaluate_reports_edge_band_and_refinement(tmp_path, capsys, one_thread):
    from vision.pipelines.cli import main
    from vision.pipelines.training.finetune import train

    data = Crop("depth")
    train(tiny_cfg(epochs=1), tmp_path / "run", train_set=data, val_set=data, progress=False, log=lambda *a: None)
    out = tmp_path / "scores.json"
    assert main(["evaluate", str(tmp_path / "run"), "--data", str(asset_path("scenes")), "--split", "all",
                 "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["model"].split(" (")[0] for r in rows] == ["training mean", "run", "run"]
    assert rows[2]["model"].endswith("+ guided_refine")
    assert {"abs_rel", "edge_abs_rel", "delta1", "edge_delta1"} <= set(rows[1])
    assert "within 4 px of an instance / depth edge" in capsys.readouterr().out
    # --median-scale: the same predictions, each scaled by median(target) / median(prediction) before scoring
    from vision.data.dense import DenseSamples
    from vision.dense import TASKS, depth_metrics, median_scale
    from vision.dense.edges import edge_band
    from vision.pipelines.training.dense_model import load_run
    from vision.pipelines.training.finetune import predict_samples, stacked_targets

    assert main(["evaluate", str(tmp_path / "run"), "--data", str(asset_path("scenes")), "--split", "all",
                 "--median-scale", "--json", str(out)]) == 0
    scaled = json.loads(out.read_text())
    assert "depth (median-scaled)" in capsys.readouterr().out
    task, (model, cfg) = TASKS["depth"], load_run(tmp_path / "run")
    samples = DenseSamples(asset_path("scenes"), "depth", "all", extras=("segment", "depth"))
    target = stacked_targets(task, samples)
    valid = task.valid_mask(target)
    pred = median_scale(predict_samples(model, task, samples, tta=cfg.tta), target, valid)
    band = edge_band(torch.stack([s["extras"]["segment"] for s in samples]),
                     torch.stack([s["extras"]["depth"] for s in samples]), width=4)
    assert scaled[1]["abs_rel"] == pytest.approx(depth_metrics(pred, target, valid)["abs_rel"], rel=1e-5)
    assert scaled[1]["edge_abs_rel"] == pytest.approx(depth_metrics(pred, target, valid & band)["abs_rel"], rel=1e-5)
    assert scaled[1]["abs_rel"] != pytest.approx(rows[1]["abs_rel"], rel=1e-3)


def test_demo_dense_section_beats_the_training_mean(tmp_path):
    """The bundled small runs load through load_run and beat predicting the mean on a held-out bundled scene."""
    from vision.dense import TASKS
    from vision.pipelines.demos import dense as demo_dense

    written = demo_dense.run(tmp_path, "cpu")
    assert [p.name for p in written] == [f"{s}_dense.png" for s in demo_dense.SCENES]
    for name in ("depth", "normals"):
        model, cfg = load_run(asset_path("weights", "dense", name))
        task = TASKS[name]
        s = DenseSamples(asset_path("scenes"), task.target_field, "all")[0]
        target = task.make_target(s["target"])
        pred = task.decode(predict_raw(model, task, s["image"][None]))
        mean = task.mean_baseline(target).expand_as(target) if name == "depth" else \
            torch.tensor([0.0, 0.0, 1.0]).view(1, 3, 1, 1).expand_as(target)  # facing the camera
        key = task.primary_metric
        ours = task.metrics(pred, target, task.valid_mask(target))[key]
        floor = task.metrics(mean, target, task.valid_mask(target))[key]
        assert ours < 0.8 * floor, (name, ours, floor)


class _SignalAt(Crop):
    """The crops, sending ``signum`` to this process when item ``at`` is read (a scheduler's SIGTERM mid-epoch)."""

    def __init__(self, target: str, at: int, signum: int):
        super().__init__(target)
        self.reads, self.at, self.signum = 0, at, signum

    def __getitem__(self, i):
        self.reads += 1
        if self.reads == self.at:
            os.kill(os.getpid(), self.signum)
        return super().__getitem__(i)


@pytest.fixture(scope="module")
def never_stopped(tmp_path_factory):
    """The weights of a 2-epoch run never stopped (read only by the tests that compare with it)."""
    from safetensors.torch import load_file

    from vision.pipelines.training.dense_model import WEIGHTS
    from vision.pipelines.training.finetune import train

    data = Crop("depth")
    run = tmp_path_factory.mktemp("whole") / "whole"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the tests' own one_thread, which a module fixture runs before
    try:
        train(tiny_cfg(epochs=2), run, train_set=data, val_set=data, progress=False, log=lambda *a: None)
    finally:
        torch.set_num_threads(threads)
    return load_file(run / WEIGHTS)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [15, 2])
def test_a_signal_mid_epoch_stops_after_the_step_and_resume_equals_the_run_never_stopped(tmp_path, signum,
                                                                                         never_stopped):
    import signal

    from safetensors.torch import load_file

    from vision.pipelines.training.finetune import TrainingStopped, train

    data = Crop("depth")
    quiet = dict(val_set=data, progress=False, log=lambda *a: None)
    handler = signal.getsignal(signal.SIGTERM)
    # reads: the mean-prediction baseline's pass, epoch 1, then the second batch of epoch 2
    stopping = _SignalAt("depth", at=2 * len(data) + 3, signum=signum)
    with pytest.raises(TrainingStopped, match="after 1 complete epoch; add --resume") as stopped:
        train(tiny_cfg(epochs=2), tmp_path / "cut", train_set=stopping, **quiet)
    assert (stopped.value.signum, stopped.value.epochs) == (signum, 1)
    assert signal.getsignal(signal.SIGTERM) is handler  # the handlers are put back
    assert not [p for p in (tmp_path / "cut").rglob("*") if ".tmp" in p.name or ".old" in p.name]
    assert [json.loads(x)["epoch"] for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()] == [1]
    history = train(tiny_cfg(epochs=2), tmp_path / "cut", train_set=data, resume=True, **quiet)
    assert [h["epoch"] for h in history] == [1, 2]
    from vision.pipelines.training.dense_model import WEIGHTS

    whole, cut = never_stopped, load_file(tmp_path / "cut" / WEIGHTS)
    assert whole.keys() == cut.keys()
    for name in whole:  # the run that was stopped and resumed is the run that was not, bit for bit
        torch.testing.assert_close(cut[name], whole[name], rtol=0, atol=0)


def test_a_sigterm_while_an_epoch_is_saved_keeps_that_epoch(tmp_path, monkeypatch):
    from vision.pipelines.training import checkpoint
    from vision.pipelines.training.finetune import STATE, TrainingStopped, train

    publish = checkpoint.publish

    def publish_under_sigterm(*args, **kw):
        os.kill(os.getpid(), 15)  # arrives while the checkpoint is being sealed: the save goes on
        return publish(*args, **kw)

    monkeypatch.setattr(checkpoint, "publish", publish_under_sigterm)
    data = Crop("depth")
    with pytest.raises(TrainingStopped) as stopped:
        train(tiny_cfg(epochs=3), tmp_path, train_set=data, val_set=data, progress=False, log=lambda *a: None)
    assert stopped.value.epochs == 1
    assert json.loads((tmp_path / STATE / checkpoint.MANIFEST).read_text())["state"]["epoch"] == 1
    assert not [p for p in tmp_path.rglob("*") if ".tmp" in p.name]
