"""The run folder of ``vision finetune``: its file names, the resume state, checkpoints to resume from, and the
guards that treat the folder as untrusted input.

``state/`` is the checkpoint of the last complete epoch (Accelerate's ``save_state`` plus ``resume.safetensors``,
staged and published as one unit by :mod:`.checkpoint`); :func:`find_checkpoint` picks it (or ``.state.old`` when a
kill fell between the two renames of a save). The resume state is one safetensors file, the non-tensor parts as
JSON in its metadata: nothing is unpickled. :func:`guard_run` refuses a folder whose files are links or lead
outside it, and :func:`removed_on_failure` undoes a start that failed before its first checkpoint.

    >>> where = find_checkpoint(Path("runs/depth"), print)   # None: no epoch was ever saved
    >>> state = read_resume(where) if where else None
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
import os
import shutil

import torch
from safetensors import SafetensorError, safe_open
import safetensors.torch  # its save_file looked up when called (tests stand in for it)

from .dense_config import ADAPTER, BASE, CONFIG, WEIGHTS
from vision.outputs import atomic_path, in_run
from . import checkpoint
from .checkpoint import check_state

RESUME = "resume.safetensors"  # tensors, with the rest of the training state as JSON in its header
LEGACY_RESUME = "resume.pt"    # the pickle format of earlier versions: never loaded


def _json_scalar(value):
    """One-element tensors (a learning rate some optimisers keep as a tensor) as JSON numbers."""
    if torch.is_tensor(value) and value.numel() == 1:
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def save_resume(path: Path, live: dict, opt_state: dict, sched_state: dict, ema, epoch: int,
                 history: list) -> None:
    """The training state as one safetensors file: every tensor in it, everything else as JSON in its
    metadata, so resuming reads data only (a pickle would run whatever code the file holds). Written to a
    temporary name and renamed, so an interruption never leaves a state file half written."""
    tensors = {f"model/{n}": t.detach().contiguous().cpu() for n, t in live.items()}
    if ema is not None:
        tensors.update({f"ema/{n}": t.detach().contiguous().cpu() for n, t in ema.shadow.items()})
    opt_rest = {}
    for pid, entry in opt_state["state"].items():
        opt_rest[str(pid)] = {}
        for key, value in entry.items():
            if torch.is_tensor(value):
                tensors[f"optimizer/{pid}/{key}"] = value.detach().contiguous().cpu()
            else:
                opt_rest[str(pid)][key] = value
    state = {"epoch": epoch, "history": history, "ema": ema is not None, "ema_step": ema.step if ema else 0,
             "optimizer": {"param_groups": opt_state["param_groups"], "state": opt_rest}, "scheduler": sched_state}
    with atomic_path(path) as tmp:
        safetensors.torch.save_file(tensors, str(tmp), metadata={"format": "vision-finetune-resume/1",
                                               "state": json.dumps(state, default=_json_scalar)})


def read_resume(run: Path) -> dict | None:
    """The state :func:`save_resume` wrote into ``run`` (a checkpoint folder, or a run folder of an earlier
    version; None when there is none), as the dicts the model, optimiser and scheduler load. A pickle
    checkpoint is refused, unread."""
    path = run / RESUME
    if not path.is_file():
        if (run / LEGACY_RESUME).exists():
            raise ValueError(f"{run / LEGACY_RESUME} is a pickle checkpoint of an earlier version and is not loaded "
                             f"(unpickling runs code stored in the file); resume needs {RESUME}: start a new run "
                             "folder, or delete the file to retrain this one from the start")
        return None

    try:
        with safe_open(str(path), framework="pt", device="cpu") as fh:
            meta = fh.metadata() or {}
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
        state = json.loads(meta["state"])
        check_state(state, {"epoch": "count", "history": "records", "ema": "flag", "ema_step": "count",
                            "optimizer": "object", "scheduler": "object"}, path)
        opt = state["optimizer"]
        opt_state = {int(pid): dict(rest) for pid, rest in opt["state"].items()}
        model, ema = {}, {}
        for key, t in tensors.items():
            kind, _, name = key.partition("/")
            if kind == "model":
                model[name] = t
            elif kind == "ema":
                ema[name] = t
            elif kind == "optimizer":
                pid, _, field = name.partition("/")
                opt_state.setdefault(int(pid), {})[field] = t
        for group in opt["param_groups"]:
            if isinstance(group.get("betas"), list):
                group["betas"] = tuple(group["betas"])
        return {"model": model, "ema": ema if state["ema"] else None, "ema_step": int(state["ema_step"]),
                "optimizer": {"state": opt_state, "param_groups": opt["param_groups"]},
                "scheduler": state["scheduler"], "epoch": int(state["epoch"]), "history": list(state["history"])}
    except (SafetensorError, OSError, KeyError, TypeError, ValueError, AttributeError, RecursionError) as err:
        if isinstance(err, ValueError) and str(err).startswith(str(path)):
            raise  # check_state's line names the file and the field already
        raise ValueError(f"{path} is not a readable resume state ({str(err).splitlines()[0] if str(err) else err!r}); "
                         "start a new run folder") from None


STATE = "state"  # accelerator.save_state folder: model, optimiser, schedule, RNG of every rank
CHECKPOINT_FORMAT = "vision-finetune-checkpoint/1"  # STATE as a checkpoint.py folder, with RESUME inside it
# every name a run writes in its folder (dense_model.save_run_files, the card, previews, checkpoints, the lock)
RUN_NAMES = (CONFIG, BASE, BASE + ".tmp", WEIGHTS, WEIGHTS + ".tmp", ADAPTER, f".{ADAPTER}.tmp", "README.md",
             "metrics.jsonl", "curves.png", "previews", RESUME, STATE, f".{STATE}.tmp", f".{STATE}.old", ".lock")


def guard_run(run: Path) -> None:
    """Refuse (one line naming the file and ``-o``) a run folder in which any file a run writes is a symbolic
    link or resolves outside it: a run folder is untrusted input."""
    if run.is_dir():
        for name in RUN_NAMES:
            in_run(run, name)
        if (run / "previews").is_dir():
            for p in (run / "previews").iterdir():
                in_run(run, f"previews/{p.name}")


def damage(folder: Path) -> str:
    """What makes ``folder`` no complete checkpoint, naming the file, for the one-line refusal."""
    manifest = folder / checkpoint.MANIFEST
    try:
        files = json.loads(manifest.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return f"{manifest} is missing or unreadable"
    for name, size in files.items():
        path = folder / name
        if not path.is_file():
            return f"{path} is missing"
        if path.stat().st_size != size:
            return f"{path} has {path.stat().st_size} bytes, not the {size} its {checkpoint.MANIFEST} names"
    return f"{manifest} is of another format"


def find_checkpoint(run: Path, log) -> Path | None:
    """The folder to resume ``run`` from: its last complete checkpoint (``state/``, or ``.state.old`` when a
    kill fell between the two renames of a save), the run folder itself for a run of an earlier version
    (``resume.safetensors`` beside ``state/``), or None when no epoch was ever saved. A ``state/`` that is
    not complete, with no complete one beside it, is refused in one line."""
    where, _ = checkpoint.latest(run / STATE, CHECKPOINT_FORMAT)
    if where is not None:
        return where
    if (run / RESUME).is_file() or (run / LEGACY_RESUME).exists():
        return run  # an earlier version's layout (read, or refused, by _read_resume)
    if (run / STATE).exists() or checkpoint.previous(run / STATE).exists():
        raise ValueError(f"{run / STATE} is not a complete checkpoint ({damage(run / STATE)}; a run killed while "
                         "saving?) and no earlier one is left; start a new run folder")
    if checkpoint.staging(run / STATE).exists():
        log(f"no complete checkpoint in {run} (the first save was interrupted): starting from epoch 1")
    return None


@contextlib.contextmanager
def removed_on_failure(run: Path, main_process: bool = True):
    """Undo a failed start: when what runs inside fails before the first checkpoint is published, ``run`` is
    removed if it did not exist before, and what the run wrote into it (names of :data:`RUN_NAMES` only) is
    removed if it did; a folder that holds a checkpoint is kept as it is."""
    created = main_process and not run.exists() and not run.is_symlink()
    before = set(os.listdir(run)) if main_process and run.is_dir() and not run.is_symlink() else None
    try:
        yield
    except BaseException:
        if (created or before is not None) and run.is_dir() and not run.is_symlink() and not (run / STATE).exists():
            if created:
                shutil.rmtree(run, ignore_errors=True)  # made in this call; rmtree follows no links
            else:
                for name in set(os.listdir(run)) - before:
                    if name in RUN_NAMES:
                        path = run / name
                        if path.is_dir() and not path.is_symlink():
                            shutil.rmtree(path, ignore_errors=True)
                        else:
                            path.unlink(missing_ok=True)
        raise
