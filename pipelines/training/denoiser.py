"""FLNR training (``vision train-denoiser``) as a library function, with Accelerate, that survives long runs.

Adam at ``lr`` on transformers' cosine schedule (no warmup; with ``minutes`` it follows the time spent when
that is further along than the steps), gradient clipping at 1, timm's ``ModelEmaV3`` of the weights with
``ema`` decay per step (validated and kept instead of the weights themselves), the U-Net autocast in
``mixed_precision`` while training (the guide head and the regression stay float32), gradient accumulation over ``grad_accum`` micro-batches. The weights
of the best validation epoch are written to ``out`` (atomically, on the main process only).

Checkpoints (:mod:`.checkpoint`: a kill at any moment leaves the old or the new one complete) go to
``checkpoint_dir`` at the end of every epoch, and after the current step on SIGTERM or Ctrl-C (a second Ctrl-C
stops at once). Each holds ``accelerator.save_state`` (model, optimiser, schedule, the RNG of every rank) plus
``trainer.safetensors`` (the EMA, the best weights so far, every rank's crop generator) and the rest as JSON
in the manifest: epoch, step, validation history, best so far, time spent, and the settings, so that
``resume=True`` continues bit for bit where the checkpoint stopped and refuses one made with other settings.
Nothing in it is a pickle from an untrusted source: Accelerate loads its files with ``weights_only=True``.

Data-parallel under ``accelerate launch --num_processes N`` (gloo on CPUs, NCCL on GPUs): every rank draws its
own crops (``batch`` per rank and step), gradients are averaged, the weights stay identical (checked at the
end); only the main process validates, prints and writes (the other ranks add their RNG state to the
checkpoint being written, as ``save_state`` does).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from accelerate import DistributedDataParallelKwargs
import torch
from safetensors import SafetensorError
import safetensors.torch  # its save_file and load_file looked up when called (tests stand in for them)
from tqdm import tqdm

from . import checkpoint as C
from .signals import StopOnSignal as _StopOnSignal, agree as _agree
from .denoiser_data import FLNR_GUIDES, loss_fn, sample_batch, scene_groups, subsample, validate
from vision.denoise.flnr import frame_stats, parameter_count
from vision.outputs import atomic_path
from .accel import accelerator_for

FORMAT = "vision-train-denoiser/1"
EXTRA = "trainer.safetensors"  # EMA, best weights, crop generators; the rest of the state is the manifest's JSON


@dataclasses.dataclass
class DenoiserTraining:
    """The settings of one training run (``vision train-denoiser``'s flags of the same names)."""
    epochs: int = 30
    steps: int | None = None  # optimiser steps per epoch; None: frames / batch
    batch: int = 4
    crop: int = 96
    lr: float = 2e-3
    smape: float = 0.2
    tonemapped: str = "l1"
    upsample_prob: float = 0.0
    upsample_factor: int = 2
    drop_ao: float = 0.0
    history: int = 1  # crops average up to this many noisy frames of their scene (denoiser_data.history_map)
    history_only: bool = False  # only the history input's weights train (the model builder freezes the rest; recorded
    # in the settings so that --resume refuses a run without it)
    ema: float = 0.0
    minutes: float | None = None
    seed: int = 0
    grad_accum: int = 1
    mixed_precision: str | None = None  # None: accelerate config / accelerate launch, else "no"
    device: str | None = None  # None: CUDA or MPS when present, else the CPU (gloo between processes)
    checkpoint_dir: Path | None = None
    resume: bool = False
    quiet: bool = False

    @property
    def cpu(self) -> bool:
        """Whether to train on CPUs: asked for, or no GPU here (then Accelerate must be told, or processes
        started by ``accelerate launch`` would each train alone)."""
        if self.device is not None:
            return str(self.device).startswith("cpu")
        mps = getattr(torch.backends, "mps", None)
        return not (torch.cuda.is_available() or (mps is not None and mps.is_available()))


# the fields of a checkpoint's state (the manifest's "state") and what each must hold
STATE_FIELDS = {"epoch": "count", "step": "count", "loss_sum": "number", "best": "number", "best_epoch": "count",
                "history": "numbers", "seconds": "number", "settings": "object"}


def find_checkpoint(folder):
    """``(folder, state)`` of the last complete checkpoint in ``folder`` (or beside it), ``(None, None)`` if none."""
    return C.latest(folder, FORMAT)


def data_identity(root, frames) -> str:
    """The training frames as a checkpoint remembers them: count and a digest of their scene names."""
    names = "\n".join(f"{f['scene']}" for f in frames)
    return f"{Path(root).resolve()}: {len(frames)} frames {hashlib.sha256(names.encode()).hexdigest()[:12]}"


def _settings(cfg: DenoiserTraining, data: str, acc, steps: int, model=None) -> dict:
    out = {"--data": data, "--epochs": cfg.epochs, "--steps": steps, "--batch": cfg.batch, "--crop": cfg.crop,
           "--lr": cfg.lr, "--smape": cfg.smape, "--tonemapped": cfg.tonemapped,
           "--upsample-prob": cfg.upsample_prob, "--upsample-factor": cfg.upsample_factor, "--drop-ao": cfg.drop_ao,
           "--history": cfg.history, "--history-only": cfg.history_only,
           "--ema": cfg.ema, "--seed": cfg.seed, "--grad-accum": cfg.grad_accum,
           "--mixed-precision": str(acc.mixed_precision), "processes": acc.num_processes}
    out.update({f"model {k}": v for k, v in (model.config.items() if model is not None else ())})
    return json.loads(json.dumps(out))  # as JSON gives it back (tuples as lists)


# settings added after checkpoints were written: a checkpoint without them was made with these values
LATER_SETTINGS = {"--history": 1, "--history-only": False}


def _refuse_other_settings(where: Path, saved: dict | None, now: dict) -> None:
    if saved is None:
        return
    saved = {**LATER_SETTINGS, **saved}
    differ = [f"{k} {now[k]} here, {saved.get(k, 'none')} there" for k in now if saved.get(k) != now[k]]
    if differ:
        raise ValueError(f"--resume: the checkpoint {where} was made with other settings ({'; '.join(differ)}); "
                         "run without --resume to start over, or pass another --checkpoint-dir")


def _autocast_network(core, acc) -> None:
    """Autocast FLNR's U-Net (``core.net``: the convolutions, nearly all of its arithmetic) in the run's mixed
    precision while training, its output back in float32: the per-pixel guide head and the regression stay in
    float32 (their in-place float32 accumulations refuse half-precision operands). Validation (eval mode, the
    EMA copy included) runs in float32."""
    if str(acc.mixed_precision) == "no":
        return
    entered = []

    def enter(module, args):
        if module.training:
            ctx = acc.autocast()
            ctx.__enter__()
            entered.append(ctx)

    def leave(module, args, output):
        if entered:
            entered.pop().__exit__(None, None, None)
            return output.float()

    core.net.register_forward_pre_hook(enter)
    core.net.register_forward_hook(leave)


def _cpu(state: dict, prefix: str) -> dict:
    return {f"{prefix}/{k}": v.detach().contiguous().cpu() for k, v in state.items()}


def _write_errors() -> tuple:
    """What a write that runs out of space or permission raises: OSError, safetensors' own error, and torch's
    RuntimeError from ``torch.save`` (inside Accelerate's ``save_state``)."""
    return OSError, RuntimeError, SafetensorError


def _reason(err) -> str:
    """One line for a failed write: the system's words and the file, else the first line of the message."""
    if isinstance(err, OSError) and err.strerror:
        return f"{err.filename}: {err.strerror}" if err.filename else err.strerror
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def _save_checkpoint(acc, folder: Path, state: dict, core, ema, best_state, gen) -> str:
    """One checkpoint (every rank calls this): Accelerate's state and ours, published atomically by rank 0.
    Returns "" when it is published, else why not (a full disk, no permission: agreed by every rank); then the
    staging folder is removed (its space back) and the last complete checkpoint stays as it was."""
    tmp, failed = C.staging(folder), ""
    try:
        if acc.is_main_process:
            C.begin(folder)
        acc.wait_for_everyone()
        acc.save_state(str(tmp))
        gens = acc.gather(gen.get_state().to(torch.int32)[None].to(acc.device)).cpu()  # (ranks, bytes)
        acc.wait_for_everyone()
        if acc.is_main_process:
            tensors = {**_cpu(best_state, "best"), "sampler": gens.contiguous()}
            if ema is not None:
                tensors.update(_cpu(ema.module.state_dict(), "ema"))
            safetensors.torch.save_file(tensors, str(tmp / EXTRA))
            C.publish(tmp, folder, state, FORMAT)
    except _write_errors() as err:
        failed = _reason(err)
        if acc.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
    acc.wait_for_everyone()
    if acc.num_processes > 1 and _agree(acc, int(bool(failed)), 0.0)[0] and not failed:
        failed = "another process could not write its part"
    return failed


def _same_on_every_rank(acc, modules) -> bool:
    """Whether every rank holds bit-identical weights in ``modules`` (compared on the main process)."""
    flat = torch.cat([t.detach().float().reshape(-1) for m in modules for t in m.state_dict().values()])
    rows = acc.gather(flat[None].to(acc.device)).cpu()
    return all(torch.equal(rows[0], r) for r in rows[1:])


def train(cfg: DenoiserTraining, build, train_frames: list, val_frames: list, *, out, data: str,
          metadata: dict | None = None, from_init: bool = False, loss=loss_fn, log=None) -> SimpleNamespace:
    """Train the FLNR that ``build(train_frames, log)`` returns (frames already on the training device) on
    ``train_frames``, validate on ``val_frames`` (none: the first 8 training frames) after every epoch, write the best weights to ``out`` with
    ``metadata`` (plus epochs, best epoch, PSNR history) and return what happened: ``best``, ``best_epoch``,
    ``epochs`` (done, in total), ``history``, ``signum`` (the signal that stopped the run, else 0),
    ``interrupted``, ``path`` (None on other ranks, or when ``out`` could not be written), ``seconds``,
    ``processes``, ``same_weights``, ``main``. ``data`` identifies the training frames for the checkpoint
    (:func:`data_identity`).

    A write that fails (a full disk, lost permission) loses no training: a checkpoint that cannot be written
    stops the run (``save_failed``: why; the last complete checkpoint stays) and the best weights so far still go
    to ``out``; when ``out`` cannot be written (``write_failed``) the weights stay in the last checkpoint
    (``kept``: it is the end of the run, ``checkpoint``; ``--resume`` writes them without training) or else go
    to ``rescued`` beside it (None when that failed too; ``checkpoint_epoch``: where a resume starts)."""
    folder, where, saved = _check_resume(cfg, out)
    acc = _make_accelerator(cfg)
    main = acc.is_main_process
    say = (log or (lambda m: print(m, file=sys.stderr))) if main else (lambda m: None)
    train_frames, val_frames, stats, groups, steps = _prepare_frames(cfg, acc, train_frames, val_frames, say)
    _refuse_other_settings(where, saved and saved["settings"], _settings(cfg, data, acc, steps))  # before any work
    model = build(train_frames, say).to(acc.device)
    settings = _settings(cfg, data, acc, steps, model)
    _refuse_other_settings(where, saved and saved["settings"], settings)
    _announce(cfg, acc, model, train_frames, val_frames, steps, folder, say)
    total = cfg.epochs * steps
    model, opt, sched, core, ema = _prepare_model(cfg, acc, model, total)
    gen = torch.Generator().manual_seed(cfg.seed + 1000003 * acc.process_index)  # each rank its own crops
    run = SimpleNamespace(best=0.0, best_epoch=0, epochs=0, history=[], signum=0, interrupted=False, path=None,
                          seconds=0.0, processes=acc.num_processes, same_weights=True, folder=folder, main=main,
                          save_failed="", write_failed="", kept=False, checkpoint=None, checkpoint_epoch=None,
                          rescued=None)
    loop = SimpleNamespace(first=1, step0=0, loss_sum=0.0, best_state=None, t0=0.0, settings=settings, steps=steps,
                           total=total, budget=None if cfg.minutes is None else cfg.minutes * 60)
    spent = 0.0
    if saved is not None:
        spent = _resume_from(acc, where, saved, run, loop, ema, gen, say)
    else:
        _start_fresh(cfg, folder, model, core, val_frames, run, loop, main, from_init, say)
    loop.t0 = time.time() - spent
    with _StopOnSignal() as stop:
        try:
            _epochs(cfg, acc, model, opt, sched, core, ema, gen, loss, train_frames, val_frames, stats, groups,
                    run, loop, stop, say)
        except KeyboardInterrupt:  # a second Ctrl-C (or one raised by the code): the best weights, no checkpoint
            run.interrupted = True
            say(f"interrupted in epoch {run.epochs + 1}: writing the best weights so far")
    if acc.num_processes > 1 and not run.interrupted:
        run.same_weights = _same_on_every_rank(acc, [core] + ([ema.module] if ema is not None else []))
    run.seconds = time.time() - loop.t0
    if main:
        _write_best(cfg, acc, core, loop.best_state, metadata, run, out)
    acc.wait_for_everyone()
    return run


def _check_resume(cfg: DenoiserTraining, out) -> tuple:
    """``(folder, where, saved)``: the checkpoint folder and, with ``--resume``, its last complete checkpoint."""
    folder = Path(cfg.checkpoint_dir or f"{out}.state")
    where, saved = find_checkpoint(folder) if cfg.resume else (None, None)
    if cfg.resume and saved is None:
        raise ValueError(f"--resume: no complete checkpoint in {folder} (a run writes one after every epoch)")
    if saved is not None:  # a hand-edited manifest is one line here, not a traceback half-way through the resume
        C.check_state(saved, STATE_FIELDS, f"--resume: {where / C.MANIFEST}")
    return folder, where, saved


def _make_accelerator(cfg: DenoiserTraining):
    """The run's Accelerator on ``cfg.device`` (one schedule step per optimiser step, unused parameters allowed)."""
    if cfg.device and str(cfg.device).startswith("cuda:") and torch.cuda.is_available():
        torch.cuda.set_device(torch.device(cfg.device))  # Accelerate's single-process "cuda" is the current one
    return accelerator_for(cfg, None, step_scheduler_with_optimizer=False,  # one schedule step per optimiser step
                           kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])


def _prepare_frames(cfg: DenoiserTraining, acc, train_frames: list, val_frames: list, say) -> tuple:
    """``(train_frames, val_frames, stats, groups, steps)``: frames on the device, their statistics, scene groups."""
    move = (lambda fs: [{k: (v.to(acc.device) if hasattr(v, "to") else v) for k, v in f.items()} for f in fs])
    if not val_frames:
        say("(no val scenes in this folder: validating on the training frames)")
        val_frames = train_frames[: max(1, min(8, len(train_frames)))]
    train_frames, val_frames = move(train_frames), move(val_frames)
    stats = [frame_stats({k: f[k] for k in FLNR_GUIDES}, f["color"], f["color"].shape[-2:]) for f in train_frames]
    groups = scene_groups(train_frames) if cfg.history > 1 else None
    steps = cfg.steps or max(1, math.ceil(len(train_frames) / cfg.batch))
    return train_frames, val_frames, stats, groups, steps


def _announce(cfg: DenoiserTraining, acc, model, train_frames, val_frames, steps: int, folder: Path, say) -> None:
    """Say what is about to train: parameters, frames, epochs and steps, device, precision, checkpoint folder."""
    say(f"FLNR: {parameter_count(model)} parameters; {len(train_frames)} train / {len(val_frames)} val frames; "
        f"{cfg.epochs} epochs x {steps} steps, batch {cfg.batch}" + (f" x {acc.num_processes} processes"
        if acc.num_processes > 1 else "") + f", crop {cfg.crop}; {acc.device}, {acc.mixed_precision} mixed "
        f"precision; checkpoints in {folder}")


def _prepare_model(cfg: DenoiserTraining, acc, model, total: int) -> tuple:
    """``(model, opt, sched, core, ema)``: Adam on the cosine schedule, prepared by Accelerate, autocast, the EMA."""
    # lazy: seconds to import; they load once the run's inputs and checkpoint have been checked
    from timm.utils import ModelEmaV3
    from transformers.optimization import get_cosine_schedule_with_warmup  # lazy: as above

    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sched = get_cosine_schedule_with_warmup(opt, 0, total)
    model, opt, sched = acc.prepare(model, opt, sched)
    core = acc.unwrap_model(model)
    _autocast_network(core, acc)
    ema = ModelEmaV3(core, decay=cfg.ema) if cfg.ema > 0 else None  # no warmup: the flag's decay from step 1
    return model, opt, sched, core, ema


def _resume_from(acc, where: Path, saved: dict, run, loop, ema, gen, say) -> float:
    """Load the checkpoint at ``where`` into the model, ``ema``, ``gen``, ``run`` and ``loop``; the seconds spent."""
    bad = C.restore_rng(where, acc.process_index)
    if bad is not None:  # load_state would resume without its RNG states, and say nothing
        raise ValueError(f"--resume: {bad[0]} is damaged and cannot be loaded ({bad[1]})")
    try:
        acc.load_state(str(where))  # model, optimiser, schedule, RNG of this rank
        extra = safetensors.torch.load_file(str(where / EXTRA))
    except C.load_errors() as err:  # damaged files: safetensors, torch.load's refusals, a truncated zip
        bad = C.damaged_file(where)  # which file, when one does not load on its own
        if bad is not None:
            raise ValueError(f"--resume: {bad[0]} is damaged and cannot be loaded ({bad[1]})") from None
        raise ValueError(f"--resume: {where} cannot be loaded ({C.first_line(err)})") from None
    if ema is not None:
        ema.module.load_state_dict({k[4:]: v for k, v in extra.items() if k.startswith("ema/")})
    loop.best_state = {k[5:]: v.to(acc.device) for k, v in extra.items() if k.startswith("best/")}
    gen.set_state(extra["sampler"][acc.process_index].to(torch.uint8))
    run.best, run.best_epoch, run.history = saved["best"], saved["best_epoch"], list(saved["history"])
    run.epochs, loop.step0, loop.loss_sum = saved["epoch"], saved["step"], saved["loss_sum"]
    loop.first = run.epochs + 1
    say(f"resuming {where} after epoch {run.epochs}" + (f", step {loop.step0} of epoch {loop.first}"
                                                         if loop.step0 else ""))
    return saved["seconds"]


def _start_fresh(cfg: DenoiserTraining, folder: Path, model, core, val_frames, run, loop, main: bool,
                 from_init: bool, say) -> None:
    """A new run: validate the untrained (or ``--init``) weights as epoch 0 and keep them as the best so far."""
    if C.read(folder, FORMAT) is not None:
        say(f"(a new run: the checkpoint in {folder} is replaced after this run's first epoch; --resume "
            "continues it instead)")
    model.eval()
    if main:
        run.best, half = validate(core, val_frames, cfg.upsample_prob, cfg.upsample_factor, cfg.history)
        start = "from --init" if from_init else "untrained"
        say(f"epoch 0 ({start}): val PSNR {run.best:.2f} dB{_half_text(half, cfg)}")
    loop.best_state = {k: v.detach().clone() for k, v in core.state_dict().items()}


def _state(run, loop, epoch_done: int, step: int) -> dict:
    """The checkpoint manifest's state after ``epoch_done`` epochs and ``step`` steps of the next one."""
    return {"epoch": epoch_done, "step": step, "loss_sum": loop.loss_sum, "best": run.best,
            "best_epoch": run.best_epoch, "history": run.history, "seconds": time.time() - loop.t0,
            "settings": loop.settings}


def _epochs(cfg: DenoiserTraining, acc, model, opt, sched, core, ema, gen, loss, train_frames, val_frames, stats,
            groups, run, loop, stop, say) -> None:
    """Train epoch after epoch, validating and checkpointing after each, until the end, a signal or the budget."""
    judged = core if ema is None else ema.module  # what is validated and kept
    for epoch in range(loop.first, cfg.epochs + 1):
        model.train()
        _train_steps(cfg, acc, model, opt, sched, core, ema, gen, loss, train_frames, stats, groups, run, loop,
                     stop, epoch)
        if run.signum:
            break
        loop.step0 = 0
        model.eval()
        mean_loss = float(acc.reduce(torch.tensor(loop.loss_sum / (loop.steps * cfg.grad_accum), device=acc.device),
                                     "mean"))
        loop.loss_sum = 0.0
        run.epochs = epoch
        if acc.is_main_process:
            _validate_epoch(cfg, judged, val_frames, run, loop, epoch, mean_loss, say)
        run.save_failed = _save_checkpoint(acc, run.folder,
                                           _state(run, loop, epoch, 0), core, ema, loop.best_state, gen)
        run.signum, elapsed = _agree(acc, stop.signum, time.time() - loop.t0)
        if run.signum or run.save_failed:  # (a full disk: stop, and keep the best weights below)
            break
        if loop.budget is not None and elapsed > loop.budget and epoch < cfg.epochs:
            say(f"stopping after {epoch} epochs: --minutes {cfg.minutes:g} reached")
            break


def _train_steps(cfg: DenoiserTraining, acc, model, opt, sched, core, ema, gen, loss, train_frames, stats, groups,
                 run, loop, stop, epoch: int) -> None:
    """One epoch's optimiser steps from ``loop.step0``; on a signal, checkpoint after the current step and return."""
    bar = tqdm(range(loop.step0, loop.steps), desc=f"epoch {epoch}/{cfg.epochs}", unit="step", file=sys.stderr,
               disable=cfg.quiet or not acc.is_main_process, leave=False, initial=loop.step0, total=loop.steps)
    for i in bar:
        for _ in range(cfg.grad_accum):
            value = _micro_step(cfg, acc, model, opt, gen, loss, train_frames, stats, groups)
            loop.loss_sum += float(value.detach())
        signum, elapsed = _agree(acc, stop.signum, time.time() - loop.t0)
        if not opt.step_was_skipped:  # (fp16: a step with overflowing gradients is skipped)
            # the cosine follows the time spent when --minutes is further along than the steps
            ahead = 0 if loop.budget is None else int(min(1.0, elapsed / loop.budget) * loop.total)
            sched.scheduler.last_epoch = min(max(sched.scheduler.last_epoch + 1, ahead), loop.total) - 1
            sched.step()
        if ema is not None:
            ema.update(core)
        bar.set_postfix(loss=f"{float(value.detach()):.4f}")
        if signum:
            run.signum = signum
            run.save_failed = _save_checkpoint(acc, run.folder, _state(run, loop, epoch - 1, i + 1), core, ema,
                                               loop.best_state, gen)
            break


def _micro_step(cfg: DenoiserTraining, acc, model, opt, gen, loss, train_frames, stats, groups):
    """One micro-batch: draw crops (some at lower resolution), forward, backward, clip, step; the loss."""
    b, st = sample_batch(train_frames, stats, cfg.batch, cfg.crop, gen, cfg.drop_ao, cfg.history, groups)
    phase = None
    if cfg.upsample_prob > 0 and float(torch.rand(1, generator=gen)) < cfg.upsample_prob:
        b["color"], phase = subsample(b["color"], gen, cfg.upsample_factor)
    with acc.accumulate(model):
        guides = {k: b[k] for k in (*FLNR_GUIDES, "history") if k in b}
        pred = model(b["color"], guides, stats=st, phase=phase)
        value = loss(pred.float(), b["reference"], cfg.smape, cfg.tonemapped)
        acc.backward(value)
        if acc.sync_gradients:
            acc.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return value


def _validate_epoch(cfg: DenoiserTraining, judged, val_frames, run, loop, epoch: int, mean_loss: float,
                    say) -> None:
    """Validate ``judged`` after ``epoch``, keep its weights when they are the best so far, and say so."""
    score, half = validate(judged, val_frames, cfg.upsample_prob, cfg.upsample_factor, cfg.history)
    run.history.append(round(score, 3))
    mark = ""
    if score > run.best:
        run.best, run.best_epoch, mark = score, epoch, " (best)"
        loop.best_state = {k: v.detach().clone() for k, v in judged.state_dict().items()}
    say(f"epoch {epoch}: train loss {mean_loss:.4f}, val PSNR {score:.2f} dB{_half_text(half, cfg)}{mark}")


def _write_best(cfg: DenoiserTraining, acc, core, best_state: dict, metadata, run, out) -> None:
    """Write the best weights to ``out`` (main process); when that fails, keep or rescue them (see :func:`train`)."""
    final = type(core).from_state_dict({k: v.detach().cpu() for k, v in best_state.items()}, core.config)
    meta = dict(metadata or {})
    meta.update({"vision.train.epochs": run.epochs, "vision.train.best_epoch": run.best_epoch,
                 "vision.train.val_psnr": round(run.best, 3), "vision.train.val_history": run.history,
                 "vision.train.processes": acc.num_processes,
                 "vision.train.mixed_precision": str(acc.mixed_precision)})
    try:
        with atomic_path(out) as tmp:
            final.save(tmp, **meta)
        run.path = Path(out)
    except _write_errors() as err:  # a full disk at the end: the trained weights must survive
        run.write_failed = err.strerror if isinstance(err, OSError) and err.strerror else _reason(err)
    run.checkpoint, saved_now = find_checkpoint(run.folder)
    run.checkpoint_epoch = None if saved_now is None else saved_now["epoch"]
    if run.write_failed:
        run.kept = (not run.save_failed and not run.interrupted and not run.signum  # the run's last state
                    and saved_now is not None and saved_now["epoch"] == cfg.epochs == run.epochs)
        if not run.kept:
            _rescue(run, final, meta, out)


def _rescue(run, final, meta: dict, out) -> None:
    """``out`` could not be written and the last checkpoint is not the end of the run (a failed save, a signal,
    ``--minutes``: ``--resume`` would train on): write the weights beside the checkpoint folder instead
    (``run.rescued``), where a failed checkpoint's staging folder has just given its space back."""
    rescued = run.folder.parent / f"{Path(out).stem}.rescued.safetensors"
    try:
        with atomic_path(rescued) as tmp:
            final.save(tmp, **meta)
        run.rescued = rescued
    except _write_errors():
        pass


def _half_text(half, cfg) -> str:
    if half is None:
        return ""
    u = cfg.upsample_factor
    return f" (1/{u}-resolution colour {half:.2f} dB)" if cfg.upsample_prob < 1 else f" (from 1/{u}-resolution colour)"
