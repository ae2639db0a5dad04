"""Dense-prediction fine-tuning: frozen backbone with LoRA (or fully trainable), our head, one task.

AdamW (head at ``lr``, backbone / adapters at ``backbone_lr``), transformers' cosine-with-warmup schedule,
the weights of the best validation epoch kept (``select_best``; else the last epoch's),
gradient clipping, timm's ``ModelEmaV3`` of the weights (used for validation and saved), horizontal-flip
augmentation and test-time augmentation (normals mirror their x component). Everything device-related
is Accelerate's: mixed precision from ``--mixed-precision`` or ``accelerate config``, CUDA / MPS / CPU,
gradient accumulation, trackers (``log_with``) and ``save_state`` / ``load_state`` for resume (RNG
included; the data order is a function of seed and epoch), so 1 + 1 epochs equal 2. It is data-parallel under
``accelerate launch --multi_gpu --num_processes N -m vision.pipelines.cli finetune ...`` (DDP: every rank sees a different
shard of each epoch, gradients are averaged, weights stay identical); only the main process writes.

The run folder is untrusted input: no file is written through a symbolic link or outside it
(:func:`guard_run`), one run holds it at a time (``.lock``), and each epoch's checkpoint (``state/``: the
Accelerate state plus ``resume.safetensors``) is staged and published as one unit by :mod:`.checkpoint`, so
a kill at any moment leaves the previous complete checkpoint or the new one.

    >>> cfg = DenseConfig(task="normals", data="data/scenes", epochs=5)
    >>> history = train(cfg, "runs/normals")
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from pathlib import Path
from types import SimpleNamespace
import warnings

from accelerate.utils import set_seed
import numpy as np
import torch
from tqdm.auto import tqdm

from . import checkpoint as _checkpoint, checkpoint
from .accel import accelerator_for as _accelerator
from .accel import configured_precision  # noqa: F401 (re-exported: callers import it from here)
from .curves import write_history
from .dense_model import DenseConfig, build_model, predict_raw, save_run_files, trainable_state
from .run_state import (CHECKPOINT_FORMAT, RESUME, STATE, find_checkpoint, guard_run, read_resume,
                        removed_on_failure, save_resume)
from .signals import StopOnSignal, agree, signal_name
from vision.data.dense import DenseSamples
from vision.dense import get_task
from vision.dense.colourise import colourise
from vision import figures  # its side_by_side looked up when called (tests stand in for it)
from vision.heads import guided_refine
from vision.outputs import run_lock, in_run
from .run_card import edge_metrics, write_card
from .run_config import check_task_kwargs


class TrainingStopped(RuntimeError):
    """SIGTERM or Ctrl-C stopped :func:`train` after a step: ``signum``, ``epochs`` (the epochs complete and saved;
    the steps of the unfinished one are dropped, and ``resume=True`` repeats it) and ``run`` (the folder)."""

    def __init__(self, signum: int, epochs: int, run: Path):
        self.signum, self.epochs, self.run = signum, epochs, run
        super().__init__(f"stopped by {signal_name(signum)} after {epochs} complete epoch{'s' if epochs != 1 else ''}"
                         + (f"; add --resume (resume=True) to continue {run}" if epochs else "; nothing was saved"))


class EMA:
    """The EMA state as the resume file stores it (``shadow`` tensors and ``step``); training itself uses
    timm's ``ModelEmaV3``. Exponential moving average of the trainable tensors, with the usual warmup of the decay
    (``min(decay, (1 + step) / (10 + step))``) so early averages are not dominated by the init."""

    def __init__(self, model: torch.nn.Module, decay: float):
        self.decay, self.step = decay, 0
        self.shadow = {n: p.detach().clone().float() for n, p in model.named_parameters() if p.requires_grad}

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        self.step += 1
        d = min(self.decay, (1 + self.step) / (10 + self.step))
        for n, p in model.named_parameters():
            if n in self.shadow:
                self.shadow[n].mul_(d).add_(p.detach().float(), alpha=1 - d)

    def weights(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        dtypes = {n: p.dtype for n, p in model.named_parameters()}
        return {n: t.to(dtypes[n]).contiguous().cpu() for n, t in self.shadow.items()}


def _param_groups(model, cfg: DenseConfig):
    head = [p for p in model.head.parameters() if p.requires_grad]
    back = [p for p in model.backbone.parameters() if p.requires_grad]
    # pretrained backbone, fully trainable: a tenth of the head's rate; adapters or a random backbone: the same
    default = cfg.lr / 10 if (cfg.pretrained and cfg.lora_rank == 0) else cfg.lr
    blr = cfg.backbone_lr if cfg.backbone_lr is not None else default
    groups = [{"params": head, "lr": cfg.lr}]
    if back:
        groups.append({"params": back, "lr": blr})
    return groups


class _Collate:
    """Stack samples; targets become the task's training targets (``task.make_target``)."""

    def __init__(self, task):
        self.task = task

    def __call__(self, batch):
        return {"image": torch.stack([b["image"] for b in batch]),
                "target": self.task.make_target(torch.stack([b["target"] for b in batch])),
                "name": [b["name"] for b in batch]}


def task_of(cfg):
    """``cfg.task`` with ``cfg.task_kwargs`` (``--task-kwargs``) applied; unknown fields are a ValueError."""
    check_task_kwargs(cfg.task_kwargs, "task settings (task_kwargs)", "")
    task = get_task(cfg.task)  # unknown names are its ValueError
    known = {f.name for f in dataclasses.fields(task)} - {"name", "target_field", "primary_metric", "lower_is_better",
                                                          "flip_negate", "out_channels"}
    wrong = sorted(set(cfg.task_kwargs) - known)
    if wrong:
        raise ValueError(f"--task-kwargs {wrong} are not settings of the {cfg.task} task; it has "
                         f"{', '.join(sorted(known)) or 'none'}")
    return task(**cfg.task_kwargs)


@torch.no_grad()
def predict_samples(model, task, samples, tta: bool = True, refine=None, batch_size: int = 16,
                    device="cpu") -> torch.Tensor:
    """Decoded predictions (N, C, H, W) for a list / dataset of samples; ``refine=(radius, eps)`` applies
    :func:`vision.heads.guided_refine` (image as guide) to the raw output first."""
    model.eval()
    preds = []
    for i in range(0, len(samples), batch_size):
        image = torch.stack([samples[j]["image"] for j in range(i, min(len(samples), i + batch_size))]).to(device)
        raw = predict_raw(model, task, image, tta=tta).float()
        if refine is not None:
            raw = guided_refine(image, raw, radius=refine[0], eps=refine[1])
        preds.append(task.decode(raw).cpu())
    return torch.cat(preds)


def stacked_targets(task, samples) -> torch.Tensor:
    """The training targets (``task.make_target``) of all samples, stacked."""
    return task.make_target(torch.stack([samples[i]["target"] for i in range(len(samples))]))


def evaluate(model, task, samples, tta: bool = True, batch_size: int = 16, device="cpu") -> tuple[dict, torch.Tensor]:
    """Metrics of ``model`` on a list / dataset of samples (pixels pooled over the set), and the decoded predictions."""
    pred = predict_samples(model, task, samples, tta=tta, batch_size=batch_size, device=device)
    target = stacked_targets(task, samples)
    return task.metrics(pred, target, task.valid_mask(target)), pred


def mean_prediction(task, train, val) -> torch.Tensor:
    """The training mean (``task.mean_baseline``) as a prediction for every sample of ``val``."""
    val_t = stacked_targets(task, val)
    pred = task.mean_baseline(stacked_targets(task, train)).to(val_t.dtype)
    return pred.expand(val_t.shape[0], pred.shape[1], *val_t.shape[-2:])


def baseline_metrics(task, train, val) -> dict:
    """Metrics of predicting the training mean everywhere (the floor the acceptance compares with)."""
    val_t = stacked_targets(task, val)
    return task.metrics(mean_prediction(task, train, val), val_t, task.valid_mask(val_t))


def _preview(task, samples, pred, path: Path, count: int = 4) -> Path:
    images, labels = [], []
    for i in range(min(count, len(samples))):
        s = samples[i]
        images += [s["image"].permute(1, 2, 0).numpy(), colourise(task.name, task.make_target(s["target"])[0]),
                   colourise(task.name, pred[i])]
        labels += [s["name"], "target", "prediction"]
    return figures.side_by_side([np.asarray(im) for im in images], labels, path)  # one label per picture, each whole


def _ema_state(ema, core) -> SimpleNamespace:
    """The EMA's trainable tensors (what checkpoints keep of it) and its step, as the resume file stores them."""
    names = {n for n, p in core.named_parameters() if p.requires_grad}
    return SimpleNamespace(shadow={n: t.detach().float() for n, t in ema.module.named_parameters() if n in names},
                           step=ema.step)


def train(cfg: DenseConfig, run_dir, *, train_set=None, val_set=None, resume: bool = False, progress: bool = True,
          log=print, command: str | None = None) -> list[dict]:
    """Fine-tune ``cfg``'s model on ``cfg.data`` (or the given datasets); write the run folder; return the
    per-epoch records (loss, validation metrics, optimiser steps, seconds). ``command`` goes into the card."""
    run = Path(run_dir)
    task = task_of(cfg)
    if cfg.lora_rank > 0 and not cfg.pretrained:
        warnings.warn(f"LoRA (rank {cfg.lora_rank}) on a {cfg.backbone} without pretrained weights: the adapters "
                      "adapt random features; give pretrained= or train the whole backbone (lora_rank=0)",
                      UserWarning, stacklevel=2)
    guard_run(run)
    where = find_checkpoint(run, log) if resume else None
    saved = read_resume(where) if where is not None else None  # before any work: a bad state fails at once
    acc = _accelerator(cfg, run)
    with removed_on_failure(run, acc.is_main_process), contextlib.ExitStack() as held:
        if acc.is_main_process:  # one run per folder (the system releases the lock even on SIGKILL)
            run.mkdir(parents=True, exist_ok=True)
            held.enter_context(run_lock(run, command="vision finetune"))
        return _train(cfg, run, task, acc, where, saved, train_set, val_set, progress, log, command)


def _train(cfg, run, task, acc, where, saved, train_set, val_set, progress, log, command) -> list[dict]:
    # lazy: seconds to import, for training only (`vision evaluate` imports this module for predict_samples)
    from timm.utils import ModelEmaV3
    from transformers.optimization import get_cosine_schedule_with_warmup  # lazy: as above

    set_seed(cfg.seed)
    if train_set is None:
        if not cfg.data:
            raise ValueError("no training data: pass --data DIR (a `vision render-scenes` folder or images/ + targets/)")
        train_set = DenseSamples(cfg.data, task.target_field, "train", fractions=cfg.fractions, limit=cfg.limit)
        val_set = DenseSamples(cfg.data, task.target_field, "val", fractions=cfg.fractions, limit=cfg.limit)
    if len(train_set) == 0 or len(val_set) == 0:
        raise ValueError("training and validation sets must not be empty")
    torch.manual_seed(cfg.seed)  # the base (random or pretrained) weights, the adapters' and head's init
    model = build_model(cfg)
    opt = torch.optim.AdamW(_param_groups(model, cfg), weight_decay=cfg.weight_decay)
    order = torch.Generator()  # reseeded every epoch: the data order is a function of (seed, epoch)
    loader = torch.utils.data.DataLoader(train_set, batch_size=cfg.batch_size, shuffle=True,
                                         drop_last=len(train_set) > cfg.batch_size, collate_fn=_Collate(task),
                                         generator=order)
    # Accelerate steps a prepared scheduler once per process per optimiser step: count in global steps
    total = math.ceil(len(loader) / cfg.grad_accum) * cfg.epochs
    sched = get_cosine_schedule_with_warmup(opt, max(1, int(cfg.warmup * total)), total)
    model, opt, loader, sched = acc.prepare(model, opt, loader, sched)
    core = acc.unwrap_model(model)
    ema = ModelEmaV3(core, decay=cfg.ema, use_warmup=True) if cfg.ema > 0 else None
    if ema is not None:
        ema.step = 0
    start, history, steps = 0, [], 0
    if saved is not None:
        _load_state(acc, where, run, saved, core, opt, sched)
        if ema is not None and saved["ema"] is not None:
            ema.module.load_state_dict(saved["ema"], strict=False)
            ema.step = saved["ema_step"]
        start, history = saved["epoch"], saved["history"]
        steps = history[-1].get("steps", 0) if history else 0
        log(f"resuming {run} after epoch {start}")
    base = baseline_metrics(task, train_set, val_set) if acc.is_main_process else {}
    if acc.is_main_process:
        run.mkdir(parents=True, exist_ok=True)
        in_run(run, "previews").mkdir(exist_ok=True)
        log(f"{cfg.task} on {cfg.backbone} + {cfg.head} head ({'LoRA r=%d' % cfg.lora_rank if cfg.lora_rank else 'full'}):"
            f" {sum(p.numel() for p in core.parameters() if p.requires_grad):,} trainable parameters, "
            f"{len(train_set)} train / {len(val_set)} val images on {acc.device} ({acc.mixed_precision} mixed "
            f"precision, {cfg.grad_accum} micro-batches per step); mean-prediction baseline "
            + ", ".join(f"{k} {v:.4g}" for k, v in base.items()))
    if cfg.log_with:
        acc.init_trackers("vision-finetune", config={k: v for k, v in dataclasses.asdict(cfg).items()
                                                     if isinstance(v, (int, float, str, bool))})
    t0, c0 = time.perf_counter(), time.process_time()
    with StopOnSignal() as signals:  # SIGTERM / Ctrl-C: finish the step (and a save under way), then stop
        _epochs(cfg, run, task, acc, model, core, ema, opt, sched, loader, order, train_set, val_set, base, start,
                history, steps, t0, c0, progress, log, command, signals)
    if cfg.log_with:
        acc.end_training()
    return history


def _load_state(acc, where: Path, run: Path, saved: dict, core, opt, sched) -> None:
    """The checkpoint at ``where`` into the prepared model, optimiser and schedule, and the RNGs; a damaged file is
    one ValueError naming it."""
    folder = where if where != run else run / STATE
    whole = where != run or folder.is_dir()  # else a run of an earlier version: its weights and optimiser, no RNG
    # the RNG states first: load_state goes on without them, silently, when their file does not load
    bad = _checkpoint.restore_rng(folder, acc.process_index) if whole else None
    if bad is None:
        try:
            if whole:
                acc.load_state(str(folder))  # model, optimiser, schedule, RNGs
            else:
                core.load_state_dict(saved["model"], strict=False)
                opt.optimizer.load_state_dict(saved["optimizer"])
                sched.scheduler.load_state_dict(saved["scheduler"])
        except _checkpoint.load_errors() as err:  # damaged files: safetensors, torch.load's refusals, a bad zip
            bad = _checkpoint.damaged_file(folder)  # which file, when one does not load on its own
            if bad is None:
                raise ValueError(f"{folder} does not fit this model and its settings, or is damaged "
                                 f"({_checkpoint.first_line(err)})") from None
    if bad is not None:
        raise ValueError(f"{bad[0]} is damaged and cannot be loaded ({bad[1]}); resume needs the checkpoint as it was "
                         "written: start a new run folder")


def _epochs(cfg, run, task, acc, model, core, ema, opt, sched, loader, order, train_set, val_set, base, start,
            history, steps, t0, c0, progress, log, command, signals) -> None:
    """The epochs from ``start``; each appends its record to ``history``. Raises :class:`TrainingStopped` after
    the step in which a signal came (after the save, when it came while the epoch was being saved)."""
    for epoch in range(start, cfg.epochs):
        losses, steps = _epoch_steps(cfg, run, task, acc, model, core, ema, opt, sched, loader, order, epoch, steps,
                                     progress, signals)
        over_budget = cfg.max_minutes is not None and time.perf_counter() - t0 > 60 * cfg.max_minutes
        stop = cfg.stop_after is not None and epoch + 1 >= cfg.stop_after
        last = epoch + 1 == cfg.epochs or over_budget or stop
        record = {"epoch": epoch + 1, "loss": sum(losses) / max(1, len(losses)), "steps": steps,
                  "seconds": time.perf_counter() - t0,
                  "cpu_seconds": time.process_time() - c0}  # this process's CPU time: steady on a shared machine
        if acc.is_main_process:
            metrics = _validate_and_stage(cfg, run, task, acc, core, ema, opt, sched, val_set, base, history, record,
                                          epoch, command)
        if cfg.log_with:
            acc.log({k: v for k, v in record.items() if isinstance(v, (int, float))}, step=epoch + 1)
        acc.wait_for_everyone()
        acc.save_state(str(checkpoint.staging(run / STATE)))  # every rank: its RNG state is part of it
        acc.wait_for_everyone()
        if acc.is_main_process:
            checkpoint.publish(checkpoint.staging(run / STATE), run / STATE, {"epoch": epoch + 1}, CHECKPOINT_FORMAT)
            write_history(run, history + [record], task.primary_metric)  # + curves.png; a resume repeats no line
            log(f"epoch {epoch + 1}: loss {record['loss']:.4f}, " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items())
                + f" ({record['seconds']:.0f} s)" + (" saved" if record["saved"] else ""))
        history.append(record)
        acc.wait_for_everyone()
        if last:
            break
        signum = agree(acc, signals.signum, 0.0)[0]
        if signum:
            raise TrainingStopped(signum, epoch + 1, run)


def _epoch_steps(cfg, run, task, acc, model, core, ema, opt, sched, loader, order, epoch: int, steps: int, progress,
                 signals) -> tuple[list, int]:
    """One epoch's optimiser steps (random horizontal flips); ``(losses, steps)``, or :class:`TrainingStopped`."""
    model.train()
    order.manual_seed(cfg.seed * 1000003 + epoch)
    losses = []
    bar = tqdm(loader, desc=f"epoch {epoch + 1}/{cfg.epochs}", disable=not (progress and acc.is_main_process),
               leave=False)
    for batch in bar:
        image, target = batch["image"], batch["target"]
        flip = torch.rand(image.shape[0], device=image.device) < 0.5
        if flip.any():
            image = torch.where(flip.view(-1, 1, 1, 1), image.flip(-1), image)
            target = torch.where(flip.view(-1, 1, 1, 1), task.flip(target), target)
        with acc.accumulate(model):
            with acc.autocast():
                raw = model(image)
            loss = task.loss(raw.float(), target, task.valid_mask(target))
            acc.backward(loss)
            if cfg.clip > 0 and acc.sync_gradients:
                acc.clip_grad_norm_(model.parameters(), cfg.clip)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
        if acc.sync_gradients:
            steps += 1
            if ema is not None:
                ema.step += 1
                ema.update(core, step=ema.step)
        losses.append(float(loss.detach()))
        bar.set_postfix(loss=f"{losses[-1]:.4f}")
        signum = agree(acc, signals.signum, 0.0)[0] if acc.sync_gradients else 0  # all ranks: the same step
        if signum:
            bar.close()
            raise TrainingStopped(signum, epoch, run)
    return losses, steps


def _validate_and_stage(cfg, run, task, acc, core, ema, opt, sched, val_set, base, history: list, record: dict,
                        epoch: int, command) -> dict:
    """Main process: validate, save the run's files when best, preview, stage the resume state; the metrics."""
    live = trainable_state(core)
    judged = ema.module if ema is not None else core  # validate (and save) the EMA weights
    weights = {n: t.to(live[n].dtype).contiguous().cpu() for n, t in trainable_state_all(judged).items()
               if n in live}
    metrics, pred = evaluate(judged, task, val_set, tta=cfg.tta, device=acc.device)
    record.update(metrics)
    record["baseline"] = base
    score = metrics[task.primary_metric]
    better = [r for r in history if task.primary_metric in r and (
        r[task.primary_metric] <= score if task.lower_is_better else r[task.primary_metric] >= score)]
    record["saved"] = not cfg.select_best or not better  # keep the best validation epoch's weights
    guard_run(run)  # again at every save: nothing in the folder may have become a link meanwhile
    if record["saved"]:
        save_run_files(run, cfg, core, weights)
        write_card(run, cfg, record, edge_metrics(task, val_set, pred), acc.mixed_precision, command,
                   getattr(core, "create_kwargs", None))
    _preview(task, val_set, pred, in_run(run, f"previews/epoch_{epoch + 1:03d}.png"))
    stage = checkpoint.begin(run / STATE)  # the whole checkpoint is staged, then published as one unit
    save_resume(stage / RESUME, live, opt.optimizer.state_dict(), sched.scheduler.state_dict(),
                _ema_state(ema, core) if ema is not None else None, epoch + 1, history + [record])
    return metrics


def trainable_state_all(model) -> dict[str, torch.Tensor]:
    """Every parameter of ``model`` (the EMA copy has none marked trainable), detached on the CPU."""
    return {n: p.detach().contiguous().cpu() for n, p in model.named_parameters()}
