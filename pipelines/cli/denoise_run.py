"""What ``vision denoise`` runs once the command line and the frames' headers have passed
(:func:`~vision.pipelines.cli.denoise_frames.check_before_loading`): the model chosen and loaded, the run planned
(this shard's frames, the --temporal warm-up, one output per frame, none of them an input), then each frame read,
denoised layer by layer (a --temporal history per view layer) and written, with the lines
:class:`~vision.pipelines.cli.denoise_report.Report` says."""
from __future__ import annotations

import functools
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import torch
from tqdm import tqdm

from vision import __version__
from vision.data.fields import GUIDES
from vision.data.render_layers import describe, missing_guides, samples_per_pixel
from vision.denoise import BufferWarning, TemporalDenoiser, TemporalFLR, denoise, load_flnr
from vision.kernels.runtime import get_logger, verbosity
from vision.outputs import InputIndex, prepare_folder, refuse_inputs
from vision.pipelines.cli import torch_device

from .denoise_frames import load_weights, read_frame_file, why_redo, write_output, written_rgb
from .denoise_io import (SETTINGS_KEY, buffer_path, exit_on_sigterm, expand_frames, format_settings, natural_key,
                         output_path, parse_phase, parse_shard, remove_stale_temps, run_settings, shard)
from .denoise_report import Report, missing_setup


# --------------------------------------------------------------------------- sequences

def check_sequence(patterns, frames: list[Path]) -> None:
    """--temporal: one file reached twice (named twice, or through a link) is refused; files named in another order
    than their names' is said once (the history needs the frames in time order, which is name order)."""
    named = [Path(p) for p in patterns if not any(ch in p for ch in "*?[")]
    given: dict[Path, Path] = {}
    for p in named:
        key = p.resolve()
        if key in given:
            raise ValueError(f"FRAMES: {p} is given twice; a --temporal sequence takes each frame once, in order")
        given[key] = p
    seen: dict = {}
    for p in frames:  # one file reached twice (named twice, or through a symbolic or hard link) is one frame
        try:
            st = p.stat()
        except OSError:
            continue  # a file that cannot be read is reported by the reader, naming it
        key = (st.st_dev, st.st_ino)
        if key in seen:
            raise ValueError(f"FRAMES: {p} is the same file as {seen[key]}; a --temporal sequence takes each frame "
                             "once, in order")
        seen[key] = p
    if len(named) > 1 and named != sorted(named, key=natural_key):
        get_logger(__name__).warning(f"vision denoise: --temporal takes the frames in name order ({frames[0].name} ... "
                                  f"{frames[-1].name}), not in the order given")


def _window(rf) -> tuple | None:
    """A frame's EXR data window as ((xmin, ymin), (xmax, ymax)) of ints, or None (a PFM, or no window)."""
    w = rf.windows.get("dataWindow")
    return None if w is None else tuple(tuple(int(v) for v in corner) for corner in w)


def new_history(args, net, phase):
    """The history of one view layer: :class:`TemporalDenoiser`, or for colour at 1/u resolution (--phase) the
    static-camera :class:`TemporalFLR`."""
    tile = args.tile or None
    if phase is not None:
        return TemporalFLR(args.radius, args.eps, args.scale, alpha=1.0 / args.max_history, tile=tile)
    return TemporalDenoiser(model=args.model, weights=net, radius=args.radius, eps=args.eps, scale=args.scale,
                            tile=tile, max_history=args.max_history, input_blend=not args.no_input_blend)


# --------------------------------------------------------------------------- run

def run(args) -> int:
    """Denoise the frames ``args`` name (checked by :func:`~vision.pipelines.cli.denoise_frames.check_before_loading`
    already); the exit code. With ``-q`` the library's log says errors only, as the command's own lines do."""
    if args.quiet:
        with verbosity("error"):
            return _run(args)
    return _run(args)


def _run(args) -> int:
    net = _model_settings(args)
    phase = parse_phase(args.phase)
    device = torch_device(args.device)
    plan = _plan(args)
    report = Report(json_stream=args.progress == "json", quiet=args.quiet)
    # (a bad frame file stopped the run in check_before_loading, before anything was made)
    created = not plan.out.exists()
    prepare_folder(plan.out, "-o")  # before any compute
    remove_stale_temps(plan.out, plan.targets)  # what a killed run left (names of this run's frames only)
    settings = run_settings(args, phase, plan.patterns)
    eps_text = "learned" if args.eps is None else f"{args.eps:g}"
    radius_text = args.radius if args.radius is not None else "blend " + ",".join(map(str, net.config["radii"]))
    header = {"vision.denoiser": f"{args.model} radius={radius_text} eps={eps_text} scale={args.scale}"
                                 + ("" if phase is None else f" phase={phase[0]},{phase[1]}"),
              SETTINGS_KEY: format_settings(settings), "vision.version": __version__}
    state = _RunState(args, net, phase, device, plan.patterns, report)
    items = [(f, None) for f in plan.warm] + list(zip(plan.mine, plan.targets))
    bar = tqdm(items, desc="denoise", unit="frame", disable=args.quiet or report.json, file=sys.stderr)
    if report.json:
        report.emit("start", frames=len(plan.mine), warmup=len(plan.warm), total=len(items), out=str(plan.out))
    sigterm = exit_on_sigterm("denoise")  # SIGTERM unwinds: write_atomic removes its temporary file; exit 143
    watch = sigterm.__enter__()
    try:
        for position, (frame, target) in enumerate(bar, 1):
            state.frame(position, len(items), frame, target, settings, header)
            watch.check()  # a SIGTERM swallowed inside this frame (numba compiling) stops the run here
    except BaseException:
        if created and plan.out.is_dir() and not any(plan.out.iterdir()):
            plan.out.rmdir()  # a run that made nothing leaves nothing behind
        raise
    finally:
        sigterm.__exit__(None, None, None)
    _summary(report, state, plan)
    return 0


def _model_settings(args):
    """The model's defaults filled into ``args`` (radius, eps, scale; each number's range was checked while the
    command line was parsed) and the model's own settings checked, one line naming the flag; returns the FLNR
    network (None for FLR)."""
    if args.model is None:  # FLNR beats FLR on every evaluation family
        args.model = "flnr"
    net = None
    if args.model == "flnr":
        if args.temporal and args.phase is not None:
            raise ValueError("--temporal with --phase (colour at 1/u resolution) is the static-camera FLR filter: "
                             "add --model flr")
        net = load_weights(load_flnr, args.weights)
        defaults = (None, None, net.scale)  # radius None: the trained per-cell blend of its radii
    else:
        if args.weights is not None:
            raise ValueError("--weights is for --model flnr")
        defaults = (8, 1e-2, 1)
    args.radius = defaults[0] if args.radius is None else args.radius
    args.eps = defaults[1] if args.eps is None else args.eps
    args.scale = defaults[2] if args.scale is None else args.scale
    return net


def _plan(args):
    """What this run reads and writes: the frames (``frames``), this shard's (``mine``, ``index`` of ``count``),
    the frames read first into a --temporal history (``warm``), the buffer patterns, the output folder and one
    output per frame (``targets``), none of which may be an input."""
    frames = expand_frames(args.frames)
    if args.temporal:
        check_sequence(args.frames, frames)
    index, count = parse_shard(args.shard)
    mine = shard(frames, index, count)
    start = frames.index(mine[0]) if mine else 0
    warm = frames[max(0, start - args.warmup):start] if args.temporal else []
    patterns = {name: getattr(args, name) for name in GUIDES}
    out = Path(args.out)
    # never overwrite an input: no output may be, or link to, a frame, a buffer file or the weights
    inputs = InputIndex([("FRAMES", f) for f in frames] + [("--weights", args.weights)]
                        + [(f"--{name}", buffer_path(p, f)) for f in mine for name, p in patterns.items() if p])
    targets = [output_path(out, f, args.suffix) for f in mine]
    for t in targets:
        refuse_inputs(t, inputs, "-o")
    if len(set(targets)) != len(targets):
        raise ValueError("two frames map to the same output name; use frames with distinct file names")
    return SimpleNamespace(frames=frames, index=index, count=count, mine=mine, warm=warm, patterns=patterns,
                           out=out, targets=targets)


class _RunState:
    """What a run carries from frame to frame: the counts, what was said once, and for --temporal one history per
    view layer with the size and data window of its sequence and the frames without motion vectors."""

    def __init__(self, args, net, phase, device, patterns, report):
        self.args, self.net, self.phase, self.device, self.patterns, self.report = (args, net, phase, device,
                                                                                   patterns, report)
        self.temporal = {} if args.temporal else None  # one history per view layer
        self.done = self.skipped = self.repaired = 0
        self.said = self.said_spp = None
        self.sizes, self.windows, self.static = {}, {}, []

    def frame(self, position: int, total: int, frame: Path, target, settings: dict, header: dict) -> None:
        """One frame: skipped when its output is current (a --temporal history still reads it), else read, checked,
        denoised layer by layer and written, with one progress event."""
        args, report = self.args, self.report
        began = time.perf_counter()
        skip = target is None or (target.exists() and not args.overwrite)
        if skip and target is not None:
            reason = why_redo(target, settings)
            if reason:
                report.info(f"redoing {target}: {reason}")
                skip = False
        if skip and self.temporal is None:
            self.skipped += 1
            _frame_event(report, position, total, frame, target, "skipped", began)
            return
        rf = read_frame_file(frame, self.patterns)
        lacking = missing_setup(rf, args.temporal, self.phase, args.allow_no_guides, args.static_camera)
        if lacking:
            raise ValueError(f"{frame}: {lacking}")
        line = describe(rf, args.only_rgb)
        if line != self.said:  # once per run, again only when a frame is laid out differently
            report.info(f"{'' if self.said is None else f'from {frame.name} on: '}{line}")
            self.said = line
            bare = missing_guides(rf)
            if bare:
                report.warning(bare, frame)
        results = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", BufferWarning)
            for layer in rf.layers:
                res = self.layer(frame, target, rf, layer, skip)
                if res is not None:
                    results.append(res)
        if skip:
            self.skipped += target is not None
            _frame_event(report, position, total, frame, target, "skipped" if target else "warmup", began)
            return
        notes = [n for layer in rf.layers for n in layer.notes]
        for w in caught:
            if issubclass(w.category, BufferWarning):
                self.repaired += 1
                notes.append(str(w.message))
        notes += write_output(target, rf, results, header, args.only_rgb, args.half)
        for note in notes:
            report.warning(note, frame)
        self.done += 1
        _frame_event(report, position, total, frame, target, "denoised", began)

    def layer(self, frame: Path, target, rf, layer, skip: bool):
        """One view layer of a frame denoised (an (H, W, 3) array), or only taken into its --temporal history when
        ``skip`` (None); errors name the frame."""
        args = self.args
        spp, source = (args.spp, "--spp") if args.spp is not None else samples_per_pixel(rf.header, layer.name)
        spp_line = (f"samples per pixel: {spp:g} ({source})" if spp is not None else
                    f"samples per pixel: unknown ({source}): the noise is estimated from the frame")
        if spp_line != self.said_spp:
            self.report.info(spp_line)
            self.said_spp = spp_line
        t = {k: torch.from_numpy(v).to(self.device) for k, v in layer.buffers.items()}
        guides = {k: t.get(k) for k in GUIDES}
        try:
            if self.temporal is None:
                res = denoise(t["color"], **guides, model=args.model, radius=args.radius, eps=args.eps,
                              scale=args.scale, tile=args.tile or None,
                              weights=self.net if args.weights else None, phase=self.phase,  # None: bundled
                              spp=spp, input_blend=not args.no_input_blend)
            else:
                step = self.history_step(frame, target, rf, layer, t, spp, skip)
                if skip:  # the frame still feeds the history
                    step(t["color"], **guides)
                    return None
                res = step(t["color"], **guides)
        except ValueError as err:
            raise ValueError(f"{frame}: {err}") from None
        return res.detach().cpu().numpy()

    def history_step(self, frame: Path, target, rf, layer, t: dict, spp, skip: bool):
        """The call that takes this layer's frame into its --temporal history (denoising it unless ``skip``): the
        sequence's size and data window checked, the history made at its first frame."""
        size = self.sizes.setdefault(layer.name, t["color"].shape)
        if t["color"].shape != size:
            raise ValueError(f"colour is {t['color'].shape[0]}x{t['color'].shape[1]} (HxW) but the frames before it "
                             f"are {size[0]}x{size[1]}: a --temporal sequence has one size")
        here = _window(rf)
        window = self.windows.setdefault(layer.name, here)
        if here != window:
            raise ValueError(f"its data window {here} is not the frames' before it, {window}: a --temporal sequence "
                             "has one crop of the canvas (the history would be misregistered)")
        history = self.temporal.get(layer.name)
        if history is None:
            history = self.temporal[layer.name] = new_history(self.args, self.net, self.phase)
        if self.phase is not None:  # the static-camera FLR filter
            return functools.partial(history.accumulate if skip else history, phase=self.phase)
        if "motion" not in t:
            self.static.append(frame)
        kw = {"motion": t.get("motion"), "index": t.get("index"), "spp": spp}
        if skip and target is not None:  # its output holds what this frame gave
            kw["denoised"] = written_rgb(target, layer.beauty)
        return functools.partial(history, **kw)  # warm-up frames are denoised


def _summary(report, state: _RunState, plan) -> None:
    """The run's last line (or ``done`` event): frames denoised and skipped, repairs, the shard, static frames."""
    warned = report.finish()
    summary = (f"denoised {state.done} frame(s), skipped {state.skipped} already done"
               + (f", repaired NaN/Inf in {state.repaired} buffer(s)" if state.repaired else "")
               + (f" (shard {plan.index}/{plan.count}: {len(plan.mine)} of {len(plan.frames)} frames"
                  + (f", {len(plan.warm)} read first into the history" if plan.warm else "") + ")"
                  if plan.count > 1 else "")
               + (f"; {len(state.static)} frame(s) had no motion vectors (static camera assumed)"
                  if state.static else "")
               + warned + f"; output in {plan.out}")
    if report.json:
        report.emit("done", denoised=state.done, skipped=state.skipped, warnings=report.count, out=str(plan.out),
                    summary=summary)
    else:
        print(summary)


def _frame_event(report, position: int, total: int, frame: Path, target, status: str, began: float) -> None:
    """``--progress json``: one line per frame (denoised, skipped as done, or read for the history only)."""
    if report.json:
        report.emit("frame", index=position, total=total, input=str(frame), output=None if target is None else
                    str(target), status=status, seconds=round(time.perf_counter() - began, 3))
