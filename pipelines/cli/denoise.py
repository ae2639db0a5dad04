"""``vision denoise``: denoise path-traced EXR frames (or sequences of them) from a script or a render farm.

Each input frame is one EXR (or PFM); its view layers' buffers are found by channel name (``vision
render-scenes`` names, Blender Cycles passes, Mitsuba AOV names; see :mod:`vision.data.render_layers`) or
come from separate files given as patterns. The output is ``OUTDIR/<stem><suffix>.exr``: the input with
the denoised radiance in place of each layer's beauty (float32, or float16 with --half), alpha and the
other channels passed through (not with --only-rgb), and the run's settings in the header, which a rerun
compares to decide what to skip.
"""
from __future__ import annotations

import functools
import sys
import time
import warnings
from pathlib import Path

from vision.data.fields import GUIDES
from vision.pipelines.plugins import number  # each number's range is checked while the command line is parsed

from .denoise_io import (SETTINGS_KEY, _load_weights, buffer_path, check_before_loading,  # noqa: F401
                         expand_frames, exit_on_sigterm, format_settings, natural_key, output_path, parse_phase,
                         parse_shard, read_frame_file, remove_stale_temps, run_settings, shard, why_redo,
                         write_output, written_rgb)

EPILOG = """\
examples:
  vision denoise renders/frame_*.exr -o denoised/
  vision denoise shot/beauty.*.exr -o out/ --albedo 'shot/albedo.{frame}.exr' --normal 'shot/normal.{frame}.exr'
  vision denoise 'seq/*.exr' -o out/ --scale 2 --tile 1024 --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT
  vision denoise 'shot/frame_*.exr' -o out/ --temporal          # animation: history reprojected with the Vector pass
  vision denoise 'shot/*.exr' -o out/ --temporal --shard 2/8 --warmup 8   # a farm job that starts warm
  vision denoise 'frames/*.exr' -o out/ --model flnr             # neural guides (bundled weights)
  vision denoise 'frames/*.exr' -o out/ --model flnr --weights my_flnr.safetensors   # from vision train-denoiser
  vision denoise 'half/*.exr' -o out/ --model flnr --albedo 'full/{stem}.exr' --normal 'full/{stem}.exr' --phase 0,0
  vision denoise 'blender/*.exr' -o out/ --only-rgb --half         # each view layer's beauty + alpha, float16
  vision denoise color.0001.pfm -o out/ --albedo 'albedo.{frame}.pfm' --normal 'normal.{frame}.pfm'   # OIDN-style PFM
  vision denoise 'stills/*.exr' -o out/ --spp 256             # a sample count the files do not say (Cycles' do)
  vision denoise 'stills/*.exr' -o out/ --no-input-blend      # the regression's result alone, a little faster
  vision denoise 'shot/*.exr' -o out/ --temporal --progress json   # one JSON object per line (the Blender add-on)

What a frame must hold: albedo and normal (Blender: View Layer Properties > Passes > Data > Denoising Data), and
for --temporal motion vectors (Passes > Data > Vector, motion blur off), saved as OpenEXR MultiLayer. A frame
without them stops the run with one line saying so (exit 2); --allow-no-guides denoises without albedo and
normal (the regression then only blurs), --static-camera takes --temporal frames without motion vectors as a
still shot. Warnings are said once per run (the last lines count the frames that gave them again); -q hides them.

Any sample count: the regression has a bias that does not fall with the noise, so by default its result is
moved back towards the noisy input, per 7 x 7 window (5 x 5 from 16 spp up), as far as the input's own noise
allows (a James-Stein factor; the noise is estimated from the frame itself, on the residual of a sharp fit in small
windows). At 1 spp the result is the regression's; at 64-256 spp it keeps the detail the input has and converges to
the input as the noise falls. The samples per pixel are read from each file's header (Cycles writes cycles.<ViewLayer>.samples)
and told to FLNR; one line per run says where they came from. With --temporal the denoised history is blended
towards each frame's own colour: where the history lags or was rejected, the frame wins (1-spp frames skip it,
as single frames do).

Buffers are read from each frame by channel name: the layers vision render-scenes writes (R G B,
albedo.*, normal.*, depth.Z, ao.Y, emission.*, position.*), Blender Cycles passes (Noisy Image or
Combined, Denoising Albedo / Normal / Depth before Normal / Depth, Emit, AO; every view layer is denoised
on its own) and Mitsuba AOV names (albedo, sh_normal/nn, depth/dd, position/pp). One line per run says
which channels were used for what. A --BUFFER PATTERN reads that buffer from a separate EXR or PFM
instead; the pattern may contain {stem} (the frame's file name without .exr or .pfm), {frame} (the last
run of digits in the stem, as written) and {dir} (the frame's folder). Albedo above 1 (Cycles: emitters,
glossy tint) is clamped for demodulation after taking out the emission where a pixel sees one; sky depth
(1e10, inf) means no surface.

The output is the input with the denoised RGB in each layer's beauty (R G B, or Combined also when the
noisy colour was Noisy Image), alpha and every other channel passed through, the input's header kept;
--only-rgb keeps just the beauty and alpha, --half writes those as float16.

Colour smaller than the guides by an integer factor (rendered at 1/2 or 1/4 resolution) is denoised
and upsampled to the guides' size; --phase DY,DX says that colour pixel (i, j) was shaded at
full-resolution pixel (u i + DY, u j + DX) (e.g. 0,0 for the top-left pixel of every block), so the
guides are read there instead of averaged over the block (better edges and textures). With --model
flnr and no --weights, such colour takes the bundled weights trained for its factor (flnr_up2,
flnr_up4).

Frames whose output exists and was made with the same settings (recorded in its header) are skipped;
others are redone with a line saying why (--overwrite redoes all); outputs are written to a temporary
file and renamed, so an interrupted run leaves no partial file and can simply be restarted. --shard
I/N (I from 0) takes the I-th of N contiguous blocks of the sorted frame list, so array jobs split a
sequence without coordinating. NaN/Inf samples are repaired (mean of finite neighbours) with a warning
that counts them; negative albedo, normals outside [-1, 1], missing or mis-sized buffers, and empty,
non-EXR or truncated files stop with one line naming the file (no output folder is left behind).

--temporal denoises an animation: the frames run in name order (natural sort: f2 before f10), each
pixel's history of the demodulated signal is reprojected with the renderer's motion vectors (Blender
Cycles' Vector pass; enable it in View Layer > Passes > Data, with motion blur off), dropped where the
surface is not the same (object index when an IndexOB pass is there, depth, normal, albedo: disocclusions)
or where the light itself changed (a lamp switched on), and FLNR (or --model flr) denoises the accumulated
signal; where the history is long the result moves towards it as far as the regression's residual says.
A frame without motion vectors stops the run (--static-camera takes it as a still shot). Frames skipped as done are
still read into the history, so a restarted run gives the frames an uninterrupted one would. With --shard,
each shard first reads the --warmup frames before its range into the history (default 8). Every frame of
a sequence must have one size; a frame given twice is refused. With --phase (colour at 1/u resolution,
one phase for the whole sequence) --temporal is the older static-camera FLR filter.

On CPU the command sets OMP_WAIT_POLICY=PASSIVE (unless set) and lets glibc keep freed memory for the next
frame: FLNR's numba stages then get the cores PyTorch's idle OpenMP workers would spin on, and frames reuse
memory instead of page-faulting it in (1280x720 on 2 threads: 67 ms -> 46 ms per frame).
"""


HELP = "denoise path-traced EXR frames with local regression on guide buffers"
DESCRIPTION = ("Denoise path-traced EXR frames (single- or multi-layer) at any sample count by local regression on "
               "albedo / normal / depth / AO / emission buffers: FLNR (guides written by a small trained network, the "
               "default) or FLR, moved back towards the noisy input wherever its own noise is below the fit's bias.")


def add_arguments(p) -> None:
    p.add_argument("frames", nargs="+", metavar="FRAMES", help="EXR (or PFM) files or glob patterns (quote them "
                                                              "for globs the shell should not expand)")
    p.add_argument("-o", "--out", type=Path, required=True, metavar="OUTDIR", help="output folder (created)")
    for name in GUIDES:
        p.add_argument(f"--{name}", metavar="PATTERN", default=None,
                       help=f"read {name} from a separate EXR or PFM per frame (placeholders {{stem}} {{frame}} {{dir}})")
    p.add_argument("--model", choices=("flr", "flnr"), default=None,
                   help="denoiser: flnr (a trained network writes the regression's guides; ahead of flr on every "
                        "evaluation set, BENCHMARKS.md; the default) or flr (local regression on the buffers "
                        "themselves, no weights)")
    p.add_argument("--weights", type=Path, default=None, metavar="FILE",
                   help="--model flnr: weights from vision train-denoiser, or a folder written by FLNR.save_pretrained "
                        "(default: the bundled ones)")
    p.add_argument("--radius", type=number(int, low=1), default=None, help="regression window radius in pixels (default 8; "
                                                            "flnr: the trained per-cell blend of its radii)")
    p.add_argument("--eps", type=number(float, low=0, low_open=True), default=None, help="ridge weight on standardised guides (default 0.01; "
                                                           "flnr: the learned ones)")
    p.add_argument("--scale", type=number(int, low=1), default=None, help="fit on scale x scale cells, apply at full resolution "
                                                           "(default 1; flnr: the trained one)")
    p.add_argument("--spp", type=number(float, low=1), default=None, metavar="N",
                   help="samples per pixel of the colour (default: read from each file's header, Cycles' "
                        "cycles.<ViewLayer>.samples or render-scenes' vision.spp; unknown: the noise is "
                        "estimated from the frame); tells FLNR the noise level, and lets the input blend "
                        "cap its noise estimate where reflected texture or highlights inflate it")
    p.add_argument("--no-input-blend", action="store_true",
                   help="keep the regression's result everywhere; by default it is moved back towards the noisy "
                        "input wherever the input's own noise (estimated from the frame) is below the fit's "
                        "bias, so high sample counts keep their detail and the result converges to the input")
    p.add_argument("--phase", default=None, metavar="DY,DX",
                   help="colour at 1/u resolution: the pixel of its u x u block each colour sample was shaded at "
                        "(default: anywhere, the guides are averaged over the block)")
    p.add_argument("--tile", type=number(int, low=0), default=1024, help="process tiles of about this many pixels a side "
                                                          "(exact overlap; bounds memory; default 1024, 0 = off)")
    p.add_argument("--temporal", action="store_true",
                   help="animation: reproject each pixel's history with the motion vectors (Cycles' Vector pass) "
                        "and denoise the accumulated signal, frames in name order, so frames do not flicker")
    p.add_argument("--max-history", type=number(int, low=1), default=32, metavar="N",
                   help="--temporal: the most frames a pixel's history counts (default 32)")
    p.add_argument("--warmup", type=number(int, low=0), default=8, metavar="K",
                   help="--temporal with --shard: frames before the shard's range read into the history first "
                        "(default 8)")
    p.add_argument("--shard", default=None, metavar="I/N", help="process only the I-th (0-based) of N blocks")
    p.add_argument("--suffix", default="", help="appended to each output file's stem (default none)")
    p.add_argument("--overwrite", action="store_true",
                   help="redo frames whose output exists (outputs made with other settings are always redone)")
    p.add_argument("--only-rgb", action="store_true",
                   help="write only the denoised RGB and its alpha (default: every other channel of the input "
                        "passes through)")
    p.add_argument("--half", action="store_true",
                   help="write the denoised RGB and alpha as half float (passed-through channels keep their type)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--allow-no-guides", action="store_true",
                   help="denoise frames without albedo and normal buffers (the regression then only blurs); by "
                        "default such a frame stops the run with one line saying how to render them")
    p.add_argument("--static-camera", action="store_true",
                   help="--temporal: frames without motion vectors (Cycles' Vector pass) are a still shot; by "
                        "default such a frame stops the run")
    p.add_argument("--progress", choices=("bar", "json"), default="bar",
                   help="bar: a progress bar on stderr (the default); json: one JSON object per line on stdout "
                        "(events start, info, warning, frame, done) for programs such as the Blender add-on")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress bar and no warnings (the summary line counts them); the run's own lines (the "
                        "channels used, the samples per pixel, the summary) still go to stdout, errors to stderr")


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
        from vision.kernels.runtime import get_logger

        get_logger(__name__).warning(f"vision denoise: --temporal takes the frames in name order ({frames[0].name} ... "
                                  f"{frames[-1].name}), not in the order given")


def _window(rf) -> tuple | None:
    """A frame's EXR data window as ((xmin, ymin), (xmax, ymax)) of ints, or None (a PFM, or no window)."""
    w = rf.windows.get("dataWindow")
    return None if w is None else tuple(tuple(int(v) for v in corner) for corner in w)


def new_history(args, net, phase):
    """The history of one view layer: :class:`TemporalDenoiser`, or for colour at 1/u resolution (--phase) the
    static-camera :class:`TemporalFLR`."""
    from vision.denoise import TemporalDenoiser, TemporalFLR

    tile = args.tile or None
    if phase is not None:
        return TemporalFLR(args.radius, args.eps, args.scale, alpha=1.0 / args.max_history, tile=tile)
    return TemporalDenoiser(model=args.model, weights=net, radius=args.radius, eps=args.eps, scale=args.scale,
                            tile=tile, max_history=args.max_history, input_blend=not args.no_input_blend)


# --------------------------------------------------------------------------- run

def run(args) -> int:
    if args.quiet:  # -q: errors only, for this command's own lines and the library's log alike
        from vision.kernels.runtime import verbosity

        with verbosity("error"):
            return _run(args)
    return _run(args)


def _run(args) -> int:
    check_before_loading(args)  # a refusal from the command line and the headers takes no torch to say
    from tqdm import tqdm

    from vision import __version__
    from vision.outputs import prepare_folder
    from vision.pipelines.cli import torch_device

    from .denoise_report import Report

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
    sigterm.__enter__()
    try:
        for position, (frame, target) in enumerate(bar, 1):
            state.frame(position, len(items), frame, target, settings, header)
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
        from vision.denoise import load_flnr

        if args.temporal and args.phase is not None:
            raise ValueError("--temporal with --phase (colour at 1/u resolution) is the static-camera FLR filter: "
                             "add --model flr")
        net = _load_weights(load_flnr, args.weights)
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
    from types import SimpleNamespace

    from vision.outputs import InputIndex, refuse_inputs

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
        from vision.data.render_layers import describe, missing_guides
        from vision.denoise import BufferWarning

        from .denoise_report import missing_setup

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
        import torch

        from vision.data.render_layers import samples_per_pixel
        from vision.denoise import denoise

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
