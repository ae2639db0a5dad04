"""The hostile-input corpus: careless and crafted command lines for every `vision`
subcommand, each run as a real subprocess, counted by outcome.

    python tests/hostile/corpus.py            # prints the counts table and the cases that were not as expected
    python tests/hostile/corpus.py -k denoise # only the cases whose name holds "denoise"

Each case runs in its own folder (the command's working directory) holding the files it needs, made by the
case's ``setup``; each case's process is forked from a server that has imported torch once (tests/hostile/forkserver.py:
the same process state as ``python -m vision.pipelines.cli``, without paying the interpreter's start-up ~60 times;
``--no-fork`` starts a fresh interpreter per case), and cases with environment variables of their own always get a
fresh interpreter; the shared inputs (an image, frames, crafted headers, a pickle, crafted weights) sit in one
folder that no case may change. Outcomes: ``exit 0``; ``terminated`` (a SIGTERM case that stopped on the signal:
exit 143 from the command's handler, or the signal itself when it came during start-up); ``one-line error`` (exit != 0, one line of stderr says
"error", the last, and no traceback; progress lines before it are allowed); ``other error`` (exit != 0 with no
line or several that say "error"); ``traceback``; ``crash`` (killed by a signal); ``timeout``. Besides the
outcome each run is checked for writes outside its ``-o`` (any new file in its folder elsewhere), inputs changed
(any file of its folder or of the shared inputs whose bytes changed) and its peak memory (``os.wait4``'s
ru_maxrss) against ``MEMORY_BOUND``; a run that exits 0 has its EXR, NPY and safetensors outputs read back for
NaN / Inf (a silent non-finite result); cases with ``sigterm_after`` get SIGTERM that many seconds in (or as soon
as their ``sigterm_when`` file exists: a first output frame, a first epoch on disk), and every run's folder is
searched for temporary files left behind (``*.tmp*``: the denoiser's, the atomic writers' and the checkpoint
staging folders all carry it). tests/test_hostile_corpus.py runs it all and asserts no traceback, no
crash, no timeout, no write outside ``-o``, no input changed, no run over the bound, no silent non-finite result
and no stale temporary file.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import pickle
import queue
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np

OUTCOMES = ("exit 0", "one-line error", "other error", "terminated", "traceback", "crash", "timeout")
MEMORY_BOUND = 4 << 30  # bytes of peak resident memory per run (the huge-header cases reached 11-112 GB before)
TIMEOUT = 120.0  # seconds per case
TINY = json.dumps(dict(depth=4, embed_dim=32, num_heads=2))


@dataclasses.dataclass
class Case:
    name: str
    argv: list  # after `vision`; "{in}" is the shared inputs folder, "{case}" this case's folder
    expect: str = "error"  # "error" (refused) or "ok" (exit 0)
    setup: Callable[[Path, Path], None] | None = None  # (case folder, inputs folder) -> files this case needs
    out: str = "{case}/out"  # the -o of the case: new files elsewhere in its folder are writes outside -o
    env: dict = dataclasses.field(default_factory=dict)
    sigterm_after: float | None = None  # send SIGTERM this many seconds in (expect: exit 0 or 143, nothing stale)
    sigterm_when: str | None = None  # ... or as soon as this file exists ("{case}" filled), if that comes first


# --------------------------------------------------------------------------- shared inputs

def _png_header(path: Path, w: int, h: int) -> None:
    """A PNG whose header claims w x h (8-bit gray) and holds a few bytes: tiny, claiming any size."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def _npy_header(path: Path, shape) -> None:
    from numpy.lib import format as npf

    with open(path, "wb") as f:
        npf.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": shape})


class _Payload:
    """Unpickling this writes a marker file: what a crafted checkpoint would do, harmlessly."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def make_inputs(root: Path) -> Path:
    """The shared inputs of every case, in ``root`` (created)."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from vision.bundled import asset_path
    from vision.data import write_exr
    from vision.denoise.flnr.model import CONFIG_KEY
    from vision.io import write_image

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    write_image(root / "img.png", rng.uniform(size=(24, 24, 3)).astype(np.float32))
    rgb = rng.random((16, 16, 3)).astype(np.float32)
    write_exr(root / "f_001.exr", {c: rgb[..., k] for k, c in enumerate("RGB")})
    write_exr(root / "f[1].exr", {c: rgb[..., k] for k, c in enumerate("RGB")})  # a name that is also a glob
    small = rng.random((8, 8, 3)).astype(np.float32)
    write_exr(root / "small.exr", {c: small[..., k] for k, c in enumerate("RGB")})
    big = rgb.copy()
    big[:4, :4] = 1e30
    write_exr(root / "huge_values.exr", {c: big[..., k] for k, c in enumerate("RGB")})
    shutil.copy(asset_path("scenes", "scene_00001", "frame_00.exr"), root / "scene.exr")
    _png_header(root / "huge.png", 100000, 100000)
    _npy_header(root / "huge.npy", (100000, 100000, 3))
    (root / "truncated.png").write_bytes((root / "img.png").read_bytes()[:60])
    (root / "garbage.exr").write_bytes(b"v/1\x01" + bytes(range(256)) * 4)
    shutil.copy(root / "img.png", root / "png_named.exr")
    (root / "w.pkl").write_bytes(pickle.dumps({"model": _Payload(root / "pwned")}))
    shutil.copy(root / "w.pkl", root / "pickle.safetensors")
    src = asset_path("weights", "flnr.safetensors")
    with safe_open(str(src), "pt") as f:
        meta = dict(f.metadata())
    cfg = json.loads(meta[CONFIG_KEY])
    meta[CONFIG_KEY] = json.dumps(dict(cfg, widths=[10 ** 8] + cfg["widths"][1:]))
    save_file(load_file(str(src)), str(root / "huge_widths.safetensors"), metadata=meta)
    # a dense data folder: two small image / target pairs, and folders whose one target or image is crafted
    for name, image, target in (("data", "img", "ok"), ("data_npy", "img", "huge"), ("data_png", "huge", "ok")):
        (root / name / "images").mkdir(parents=True)
        (root / name / "targets").mkdir()
        for i in range(2):
            if image == "huge":
                _png_header(root / name / "images" / f"s{i}.png", 100000, 100000)
            else:
                shutil.copy(root / "img.png", root / name / "images" / f"s{i}.png")
            if target == "huge":
                _npy_header(root / name / "targets" / f"s{i}.npy", (100000, 100000, 3))
            else:
                np.save(root / name / "targets" / f"s{i}.npy", 1 + rng.random((24, 24)).astype(np.float32))
    shutil.copytree(asset_path("scenes"), root / "scenes")
    return root


# --------------------------------------------------------------------------- per-case setups

def _run_with_link(name: str, folder: bool = False):
    """A run folder (-o RUN --resume) whose ``name`` is a symbolic link to the victim beside it."""
    def setup(case: Path, inputs: Path) -> None:
        victim = case / "victim"
        if folder:
            victim.mkdir()
            (victim / "keep.txt").write_text("mine")
        else:
            victim.write_text("mine")
        (case / "out").mkdir()
        (case / "out" / name).symlink_to(victim)
    return setup


def _crafted_resume(case: Path, inputs: Path) -> None:
    (case / "out").mkdir()
    (case / "out" / "resume.pt").write_bytes(pickle.dumps(_Payload(case / "pwned")))


def _garbage_run(case: Path, inputs: Path) -> None:
    (case / "run").mkdir()
    (case / "run" / "config.json").write_text("{not json")
    (case / "run" / "model.safetensors").write_bytes(b"\x00" * 64)


def _tampered_run(config):
    """A run folder whose config.json holds ``config`` (JSON text or a value), with weights that never load:
    the config must be refused before them."""
    def setup(case: Path, inputs: Path) -> None:
        (case / "run").mkdir()
        text = config if isinstance(config, str) else json.dumps(config)
        (case / "run" / "config.json").write_text(text)
        (case / "run" / "model.safetensors").write_bytes(b"\x00" * 64)
    return setup


def _looped_run(case: Path, inputs: Path) -> None:
    (case / "run").symlink_to(case / "loop")
    (case / "loop").symlink_to(case / "run")


def _linked_run(case: Path, inputs: Path) -> None:
    """A run folder that is a symbolic link to a folder whose files are links out of it."""
    (case / "elsewhere").mkdir()
    (case / "elsewhere" / "config.json").symlink_to(inputs / "img.png")
    (case / "run").symlink_to(case / "elsewhere")


def _foreign_scene(case: Path, inputs: Path) -> None:
    (case / "out" / "scene_00000").mkdir(parents=True)
    (case / "out" / "scene_00000" / "notes.txt").write_text("my work")


def _a_file(name: str):
    def setup(case: Path, inputs: Path) -> None:
        (case / name).write_text("keep me")
    return setup


def _a_folder(name: str):
    def setup(case: Path, inputs: Path) -> None:
        (case / name).mkdir()
    return setup


def _two_parts(case: Path, inputs: Path) -> None:
    """``mp.exr``: an 8 x 8 first part (R G B) and a 16 x 16 second one (albedo, normal): under a pixel limit of 100
    only the second part is over it."""
    import OpenEXR

    window = (np.array([0, 0], np.int32), np.array([15, 15], np.int32))  # the parts of a file share one display window
    parts = [OpenEXR.Part({"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage,
                           "displayWindow": window}, {n: np.full((size, size), 0.5, np.float32) for n in names},
                          name=name)
             for name, size, names in (("beauty", 8, ["R", "G", "B"]),
                                       ("aovs", 16, [f"albedo.{c}" for c in "RGB"] + [f"normal.{c}" for c in "XYZ"]))]
    OpenEXR.File(parts).write(str(case / "mp.exr"))


def _empty_checkpoint_dir(case: Path, inputs: Path) -> None:
    (case / "ckpt").mkdir()
    (case / "ckpt" / "notes.txt").write_text("not a checkpoint")


# --------------------------------------------------------------------------- the cases

def _dense_data(case: Path, inputs: Path) -> None:
    """16 image / target pairs of 32 x 32 (a multiple of the patch, for validation at full size): non-empty train
    and val splits."""
    from vision.io import write_image

    rng = np.random.default_rng(1)
    for sub in ("images", "targets"):
        (case / "data" / sub).mkdir(parents=True)
    for k in range(16):
        write_image(case / "data" / "images" / f"p{k:02d}.png", rng.uniform(size=(32, 32, 3)).astype(np.float32))
        np.save(case / "data" / "targets" / f"p{k:02d}.npy", 1 + rng.random((32, 32)).astype(np.float32))


RS = ["restore-structure", "--source", "{in}/img.png", "--edited", "{in}/img.png", "-o", "{case}/out/r.png"]
DN = ["denoise", "{in}/f_001.exr", "-o", "{case}/out", "-q"]
FT = ["finetune", "--task", "depth", "--data", "{in}/data", "-o", "{case}/out", "--img-size", "32", "--epochs", "1",
      "--batch-size", "2", "--lora-rank", "0", "--threads", "1", "--quiet", "--backbone-kwargs", TINY]
TD = ["train-denoiser", "--data", "{in}/scenes", "-o", "{case}/out/w.safetensors", "--epochs", "1", "--steps", "1",
      "--batch", "2", "--crop", "32", "--widths", "4,6,8", "--hidden", "0", "--quiet"]
ED = ["edit", "{in}/img.png", "--prompt", "a cat", "-o", "{case}/out/e.png"]

CASES = [
    # demo
    Case("demo --device cuda without a GPU", ["demo", "--device", "cuda", "-o", "{case}/out"]),
    Case("demo --device nonsense", ["demo", "--device", "warp9", "-o", "{case}/out"]),
    Case("demo -o an existing file", ["demo", "--only", "guided-filter", "-o", "{case}/blocker"],
         setup=_a_file("blocker"), out="{case}/blocker"),
    # bench
    Case("bench guided-filter --sizes 1000000", ["bench", "guided-filter", "--sizes", "1000000"]),
    Case("bench guided-filter --eps nan", ["bench", "guided-filter", "--eps", "nan"]),
    Case("bench spl --eps inf", ["bench", "spl", "--eps", "inf"]),
    Case("bench local-regression --radius -1", ["bench", "local-regression", "--radius", "-1"]),
    Case("bench guided-filter --json a folder", ["bench", "guided-filter", "--json", "{case}/x.json"],
         setup=_a_folder("x.json"), out="{case}/x.json"),
    Case("bench denoise --weights a pickle", ["bench", "denoise", "--data", "{in}/scenes", "--weights",
                                              "{in}/pickle.safetensors", "--no-oidn", "--json", "{case}/out/b.json"]),
    # restore-structure
    Case("restore-structure --lr nan", RS + ["--lr", "nan"]),
    Case("restore-structure --lr inf", RS + ["--lr", "inf"]),
    Case("restore-structure --quality 500", RS[:-1] + ["{case}/out/r.jpg", "--quality", "500"]),
    Case("restore-structure --eps nan", RS + ["--eps", "nan"]),
    Case("restore-structure huge PNG header", ["restore-structure", "--source", "{in}/huge.png", "--edited",
                                               "{in}/huge.png", "-o", "{case}/out/r.png"]),
    Case("restore-structure truncated PNG", ["restore-structure", "--source", "{in}/truncated.png", "--edited",
                                             "{in}/img.png", "-o", "{case}/out/r.png"]),
    Case("restore-structure missing file", ["restore-structure", "--source", "{in}/nope.png", "--edited",
                                            "{in}/img.png", "-o", "{case}/out/r.png"]),
    Case("restore-structure -o onto its input", ["restore-structure", "--source", "{in}/img.png", "--edited",
                                                 "{in}/img.png", "-o", "{in}/img.png"]),
    Case("restore-structure EXR with 1e30 values", ["restore-structure", "--source", "{in}/f_001.exr", "--edited",
                                                    "{in}/huge_values.exr", "-o", "{case}/out/r.exr", "--steps",
                                                    "3", "-q"]),
    Case("restore-structure over VISION_MAX_PIXELS", RS, env={"VISION_MAX_PIXELS": "100"}),
    # edit
    Case("edit --guidance-scale nan", ED + ["--guidance-scale", "nan"]),
    Case("edit --steps -3", ED + ["--steps", "-3"]),
    Case("edit huge PNG header", ["edit", "{in}/huge.png", "--prompt", "x", "-o", "{case}/out/e.png"]),
    Case("edit an uncached hub model, offline", ED + ["--model", "someone/not-cached-model"],
         env={"HF_HUB_OFFLINE": "1"}),
    # denoise
    Case("denoise --eps nan", DN + ["--eps", "nan"]),
    Case("denoise --suffix escaping -o", DN + ["--suffix", "/../../../escaped"]),
    Case("denoise -o an existing file", ["denoise", "{in}/f_001.exr", "-o", "{case}/blocker", "-q"],
         setup=_a_file("blocker"), out="{case}/blocker"),
    Case("denoise a garbage EXR", ["denoise", "{in}/garbage.exr", "-o", "{case}/out", "-q"]),
    Case("denoise a PNG named .exr", ["denoise", "{in}/png_named.exr", "-o", "{case}/out", "-q"]),
    Case("denoise --weights a pickle", DN + ["--model", "flnr", "--weights", "{in}/pickle.safetensors"]),
    Case("denoise --weights with huge widths", DN + ["--weights", "{in}/huge_widths.safetensors"]),
    Case("denoise a mis-sized --albedo", DN + ["--albedo", "{in}/small.exr"]),
    Case("denoise --temporal --max-history nan", DN + ["--temporal", "--max-history", "nan"]),
    Case("denoise a literal name that is a glob", ["denoise", "{in}/f[1].exr", "-o", "{case}/out", "-q",
                                                   "--model", "flr", "--allow-no-guides"], expect="ok"),
    Case("denoise --radius 1000000", ["denoise", "{in}/scene.exr", "-o", "{case}/out", "-q", "--model", "flr",
                                      "--radius", "1000000"], expect="ok"),
    Case("denoise --scale 1e9", DN + ["--model", "flr", "--allow-no-guides", "--scale", "1000000000"]),
    Case("denoise --radius 0", DN + ["--model", "flr", "--allow-no-guides", "--radius", "0"]),
    Case("denoise --tile -1", DN + ["--model", "flr", "--allow-no-guides", "--tile", "-1"]),
    Case("denoise a second EXR part over VISION_MAX_PIXELS", ["denoise", "{case}/mp.exr", "-o", "{case}/out", "-q"],
         setup=_two_parts, env={"VISION_MAX_PIXELS": "100"}),
    Case("denoise a frame that is a link loop", ["denoise", "{case}/a.exr", "-o", "{case}/out", "-q"],
         setup=lambda case, inp: [(case / "a.exr").symlink_to(case / "b.exr"),
                                  (case / "b.exr").symlink_to(case / "a.exr")]),
    Case("denoise -o a link loop", ["denoise", "{in}/f_001.exr", "-o", "{case}/run", "-q"], setup=_looped_run,
         out="{case}/run"),
    # SIGTERM part-way (a job scheduler's stop): exit 0 or 143, never a traceback, no temporary file left behind
    Case("denoise --temporal, SIGTERM part-way", ["denoise", "{case}/s_*.exr", "-o", "{case}/out", "-q", "--temporal",
                                                  "--allow-no-guides", "--static-camera"],
         setup=lambda case, inp: [shutil.copy(inp / "scene.exr", case / f"s_{k:02d}.exr") for k in range(40)],
         sigterm_after=6.0, sigterm_when="{case}/out/s_01.exr"),  # two frames written, 38 to go
    # the two training commands: once the first epoch is on disk (a run in progress), at the latest 25 s in
    Case("finetune, SIGTERM part-way", [("{case}/data" if a == "{in}/data" else a) for a in FT] + ["--epochs", "400"],
         setup=_dense_data, sigterm_after=25.0, sigterm_when="{case}/out/metrics.jsonl"),
    Case("train-denoiser, SIGTERM part-way", TD + ["--epochs", "400", "--steps", "4"], sigterm_after=25.0,
         sigterm_when="{case}/out/w.safetensors.state/checkpoint.json"),
    # finetune
    Case("finetune --lr nan", FT + ["--lr", "nan"]),
    Case("finetune --img-size 7", FT + ["--img-size", "7"]),
    Case("finetune --threads -1", FT + ["--threads", "-1"]),
    Case("finetune --lora-targets '(unclosed'", FT + ["--lora-targets", "(unclosed"]),
    Case("finetune --backbone-kwargs not JSON", FT[:-1] + ["{bad"]),
    Case("finetune run/config.json links out", FT + ["--resume"], setup=_run_with_link("config.json")),
    Case("finetune run/metrics.jsonl links out", FT + ["--resume"], setup=_run_with_link("metrics.jsonl")),
    Case("finetune run/previews links out", FT + ["--resume"], setup=_run_with_link("previews", folder=True)),
    Case("finetune crafted resume.pt pickle", FT + ["--resume"], setup=_crafted_resume),
    Case("finetune .npy target with a huge header", [("{in}/data_npy" if a == "{in}/data" else a) for a in FT]),
    Case("finetune image with a huge PNG header", [("{in}/data_png" if a == "{in}/data" else a) for a in FT]),
    # predict, evaluate
    Case("predict a missing run", ["predict", "{case}/none", "{in}/img.png", "-o", "{case}/out"]),
    Case("predict a garbage run folder", ["predict", "{case}/run", "{in}/img.png", "-o", "{case}/out"],
         setup=_garbage_run),
    Case("predict a symlinked run folder", ["predict", "{case}/run", "{in}/img.png", "-o", "{case}/out"],
         setup=_linked_run),
    *[Case(f"predict a run config with {name}", ["predict", "{case}/run", "{in}/img.png", "-o", "{case}/out"],
           setup=_tampered_run(config)) for name, config in [
        ("pretrained and a URL", {"task": "depth", "extra": {"pretrained": True, "pretrained_cfg_overlay": {
            "url": "http://127.0.0.1:9/weights.pth"}}}),
        ("a hub id", {"task": "depth", "extra": {"hf_hub_id": "someone/evil"}}),
        ("depth 1e5", {"task": "depth", "extra": {"depth": 100000}}),
        ("a hub backbone name", {"task": "depth", "backbone": "hf-hub:someone/evil"}),
        ("a list", [1, 2]),
        ("100k nested objects", '{"extra": ' * 100000 + "{}" + "}" * 100000)]],
    Case("predict a run folder that is a link loop", ["predict", "{case}/run", "{in}/img.png", "-o", "{case}/out"],
         setup=_looped_run),
    Case("evaluate a run config with pretrained", ["evaluate", "{case}/run", "--data", "{in}/scenes", "--json",
                                                   "{case}/out/e.json"],
         setup=_tampered_run({"task": "depth", "extra": {"pretrained": True}})),
    Case("evaluate a garbage run folder", ["evaluate", "{case}/run", "--data", "{in}/scenes", "--json",
                                           "{case}/out/e.json"], setup=_garbage_run),
    # render-scenes
    Case("render-scenes --count -1", ["render-scenes", "--out", "{case}/out", "--count", "-1"]),
    Case("render-scenes over a folder it did not make", ["render-scenes", "--out", "{case}/out", "--count", "1",
                                                         "--size", "8", "--spp-ref", "1", "--noisy-seeds", "1",
                                                         "--ao-rays", "1", "--variant", "scalar_rgb"],
         setup=_foreign_scene),
    # train-denoiser
    Case("train-denoiser --lr nan", TD + ["--lr", "nan"]),
    Case("train-denoiser --radii a,b", TD + ["--radii", "a,b"]),
    Case("train-denoiser --init a pickle", TD + ["--init", "{in}/w.pkl"]),
    Case("train-denoiser --widths 1e8", TD[:TD.index("--widths")] + ["--widths", "100000000,24,32"]
         + TD[TD.index("--widths") + 2:]),
    Case("train-denoiser -o a folder", [("{case}/out" if a == "{case}/out/w.safetensors" else a) for a in TD],
         setup=_a_folder("out")),
    Case("train-denoiser --device cuda without a GPU", TD + ["--device", "cuda"]),
    Case("train-denoiser --resume without a checkpoint", TD + ["--resume"]),
    Case("train-denoiser --checkpoint-dir not a checkpoint", TD + ["--checkpoint-dir", "{case}/ckpt"],
         setup=_empty_checkpoint_dir),
    # blender-addon
    Case("blender-addon -o a folder", ["blender-addon", "-o", "{case}/out"], setup=_a_folder("out")),
    Case("blender-addon -o a zip", ["blender-addon", "-o", "{case}/out/vision_denoise.zip"], expect="ok"),
]


# --------------------------------------------------------------------------- running and counting

def _digests(root: Path) -> dict:
    """Every file under ``root`` (links not followed) and its SHA-256; a link as its target's name."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            out[path] = "link:" + os.readlink(path)
        elif path.is_file():
            out[path] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def classify(rc: int | None, stderr: str, timed_out: bool) -> str:
    if timed_out:
        return "timeout"
    if "Traceback (most recent call last)" in stderr:
        return "traceback"
    if rc is not None and rc < 0:
        return "crash"
    if rc == 0:
        return "exit 0"
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return "one-line error" if len(errors) == 1 and lines[-1] == errors[0] else "other error"


def _wait(proc: subprocess.Popen, timeout: float):
    """Wait for ``proc`` and return (exit code, peak resident bytes, timed out): os.wait4 gives this child's
    own resource use."""
    end = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_maxrss * 1024, False
        if time.monotonic() > end:
            os.killpg(proc.pid, signal.SIGKILL)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_maxrss * 1024, True
        time.sleep(0.02)


def _terminate(proc: subprocess.Popen) -> None:
    if proc.returncode is None:
        try:
            os.kill(proc.pid, signal.SIGTERM)  # the command itself, as a job scheduler or Ctrl-\\ would
        except ProcessLookupError:
            pass


def _nonfinite(out: Path) -> list[str]:
    """Output files under ``out`` (EXR, NPY, safetensors) holding NaN or Inf; PNG and JPEG cannot."""
    bad = []
    files = [out] if out.is_file() else (sorted(out.rglob("*")) if out.is_dir() else [])
    for f in files:
        try:
            if f.suffix == ".exr":
                from vision.data import read_exr

                arrays = list(read_exr(f).values())
            elif f.suffix == ".npy":
                arrays = [np.load(f, allow_pickle=False)]
            elif f.suffix == ".safetensors":
                from safetensors.numpy import load_file

                arrays = list(load_file(str(f)).values())
            else:
                continue
        except Exception as err:  # noqa: BLE001 - an unreadable output is reported, not raised
            bad.append(f"{f} (unreadable: {type(err).__name__})")
            continue
        if any(a.dtype.kind == "f" and not np.isfinite(a).all() for a in arrays):
            bad.append(str(f))
    return bad


def _base_env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONWARNINGS="ignore")
    env.pop("TRITON_INTERPRET", None)
    return env


def run_case(index: int, case: Case, root: Path, inputs: Path, timeout: float = TIMEOUT, server=None) -> dict:
    """Run one case and check it. With ``server`` (a :class:`forkserver.Server`) the case's process is forked from
    one that has imported torch already; a case with an ``env`` of its own, which may be read at import time, is
    always a fresh interpreter."""
    folder = root / f"case{index:02d}"
    folder.mkdir(parents=True)
    if case.setup:
        case.setup(folder, inputs)
    fill = (lambda s: s.replace("{in}", str(inputs)).replace("{case}", str(folder)))
    argv = [fill(a) for a in case.argv]
    out = Path(fill(case.out))
    before = _digests(folder)
    env = dict(_base_env(), **case.env)
    logs = root / "logs"
    logs.mkdir(exist_ok=True)
    when = None if case.sigterm_when is None else fill(case.sigterm_when)
    t0 = time.monotonic()
    if server is not None and not case.env:
        rc, peak, timed_out = server.run(argv, folder, env, logs / f"{index:02d}.out", logs / f"{index:02d}.err",
                                         timeout, case.sigterm_after, when)
    else:
        rc, peak, timed_out = _run_fresh(argv, folder, env, logs, index, timeout, case.sigterm_after, when)
    seconds = time.monotonic() - t0
    stderr = (logs / f"{index:02d}.err").read_text(errors="replace")
    stdout = (logs / f"{index:02d}.out").read_text(errors="replace")
    after = _digests(folder)
    changed = sorted(str(p) for p, d in before.items() if after.get(p) != d)
    outside = sorted(str(p) for p in set(after) - set(before) if p != out and out not in p.parents)
    outcome = classify(rc, stderr + ("" if "Traceback" not in stdout else stdout), timed_out)
    if case.sigterm_after is not None:
        # 143: the command's own handler; -SIGTERM: the signal came before the handler was installed (start-up)
        if rc in (128 + signal.SIGTERM, -signal.SIGTERM) and outcome != "traceback":
            outcome = "terminated"
        expected = outcome in ("exit 0", "terminated")
    else:
        expected = outcome == "exit 0" if case.expect == "ok" else outcome in ("one-line error", "other error")
    stale = sorted(str(q) for q in folder.rglob("*") if ".tmp" in q.name)
    nonfinite = _nonfinite(out) if rc == 0 else []
    last = [line for line in stderr.strip().splitlines() if line.strip()]
    return dict(index=index, name=case.name, outcome=outcome, expected=expected, rc=rc,
                seconds=round(seconds, 1), peak_mb=round(peak / 2 ** 20), over_memory=peak > MEMORY_BOUND,
                inputs_changed=changed, outside_writes=outside, last_line=last[-1][:300] if last else "",
                argv=" ".join(case.argv), stale_temporaries=stale, nonfinite_outputs=nonfinite,
                terminated=outcome == "terminated")


def _run_fresh(argv, folder: Path, env: dict, logs: Path, index: int, timeout: float, sigterm_after,
               sigterm_when=None):
    """(exit code, peak resident bytes, timed out) of ``python -m vision.pipelines.cli ARGV`` in a new interpreter;
    SIGTERM as :func:`forkserver._wait` sends it."""
    with open(logs / f"{index:02d}.out", "w") as so, open(logs / f"{index:02d}.err", "w") as se:
        proc = subprocess.Popen([sys.executable, "-m", "vision.pipelines.cli", *argv], cwd=folder, env=env,
                                stdout=so, stderr=se, stdin=subprocess.DEVNULL, start_new_session=True)
        done = threading.Event()
        if sigterm_after is not None:
            threading.Thread(target=_terminate_when, args=(proc, done, sigterm_after, sigterm_when),
                             daemon=True).start()
        rc, peak, timed_out = _wait(proc, timeout)
        done.set()
    return rc, peak, timed_out


def _terminate_when(proc: subprocess.Popen, done: threading.Event, after: float, when: str | None) -> None:
    """SIGTERM to ``proc`` at ``after`` seconds or once the file ``when`` exists, unless ``done`` is set first."""
    end = time.monotonic() + after
    while not done.wait(0.02):
        if time.monotonic() >= end or (when is not None and os.path.exists(when)):
            _terminate(proc)
            return


def run_corpus(root: Path, cases=None, workers: int = 2, timeout: float = TIMEOUT, fork: bool = True) -> dict:
    """Run ``cases`` (all by default) under ``root`` with ``workers`` at a time; return the results, the counts
    by outcome and the counts of the other checks."""
    cases = list(CASES if cases is None else cases)
    inputs = make_inputs(root / "inputs")
    shared = _digests(inputs)
    t0 = time.monotonic()
    servers, forking = queue.Queue(), fork and hasattr(os, "fork")
    if forking:  # one start-up server per worker (see forkserver.py)
        try:
            from hostile.forkserver import Server
        except ImportError:  # run as a script
            from forkserver import Server

        with ThreadPoolExecutor(workers) as pool:
            for server in pool.map(lambda _: Server(_base_env()), range(workers)):
                servers.put(server)

    def one(ic):
        server = servers.get() if forking else None
        try:
            return run_case(ic[0], ic[1], root, inputs, timeout, server)
        finally:
            if server is not None:
                servers.put(server)

    try:
        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(one, enumerate(cases)))
    finally:
        while not servers.empty():
            servers.get().close()
    shared_changed = sorted(str(p) for p, d in _digests(inputs).items() if shared.get(p) != d)
    shared_changed += sorted(str(p) for p in set(shared) - set(_digests(inputs)))
    counts = {k: sum(r["outcome"] == k for r in results) for k in OUTCOMES}
    checks = {"writes outside -o": sum(bool(r["outside_writes"]) for r in results),
              "inputs changed": sum(bool(r["inputs_changed"]) for r in results) + len(shared_changed),
              "over the memory bound": sum(r["over_memory"] for r in results),
              "silent NaN/Inf results": sum(bool(r["nonfinite_outputs"]) for r in results),
              "stale temporary files": sum(bool(r["stale_temporaries"]) for r in results),
              "stopped by SIGTERM": sum(r["terminated"] for r in results),
              "not as expected": sum(not r["expected"] for r in results)}
    return dict(results=results, counts=counts, checks=checks, shared_changed=shared_changed,
                seconds=round(time.monotonic() - t0, 1), cases=len(cases))


def table(report: dict) -> str:
    rows = [f"hostile corpus: {report['cases']} cases in {report['seconds']:.0f} s",
            f"{'outcome':<24}{'count':>6}"]
    rows += [f"{k:<24}{v:>6}" for k, v in report["counts"].items()]
    rows += [f"{k:<24}{v:>6}" for k, v in report["checks"].items()]
    peak = max((r["peak_mb"] for r in report["results"]), default=0)
    rows.append(f"{'largest peak memory':<24}{peak:>6} MB (bound {MEMORY_BOUND >> 20} MB)")
    bad = [r for r in report["results"] if not r["expected"] or r["outcome"] in ("traceback", "crash", "timeout")
           or r["inputs_changed"] or r["outside_writes"] or r["over_memory"] or r["stale_temporaries"]
           or r["nonfinite_outputs"]]
    for r in bad:
        rows.append(f"  [{r['outcome']}] {r['name']}: rc {r['rc']}, {r['seconds']} s: {r['last_line']}")
        for key in ("inputs_changed", "outside_writes", "stale_temporaries", "nonfinite_outputs"):
            if r[key]:
                rows.append(f"      {key}: {r[key][:3]}")
    for path in report["shared_changed"]:
        rows.append(f"  shared input changed: {path}")
    return "\n".join(rows)


def main(argv=None) -> int:
    import tempfile

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-k", default="", help="only the cases whose name holds this text")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--keep", type=Path, default=None, help="run in this folder and keep it (default: a temporary one)")
    p.add_argument("--json", type=Path, default=None, help="also write every result here")
    p.add_argument("--no-fork", action="store_true", help="a fresh interpreter per case (no start-up server)")
    args = p.parse_args(argv)
    cases = [c for c in CASES if args.k in c.name]
    root = args.keep or Path(tempfile.mkdtemp(prefix="vision-hostile-"))
    try:
        report = run_corpus(root, cases, args.workers, fork=not args.no_fork)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    bad = report["counts"]["traceback"] + report["counts"]["crash"] + report["counts"]["timeout"]
    return 1 if bad or report["checks"]["writes outside -o"] or report["checks"]["inputs changed"] else 0


if __name__ == "__main__":
    sys.exit(main())
