"""``vision denoise``: denoise path-traced EXR frames (or sequences of them) from a script or a render farm.

Each input frame is one EXR (or PFM); its view layers' buffers are found by channel name (``vision
render-scenes`` names, Blender Cycles passes, Mitsuba AOV names; see :mod:`vision.data.render_layers`) or
come from separate files given as patterns. The output is ``OUTDIR/<stem><suffix>.exr``: the input with
the denoised radiance in place of each layer's beauty (float32, or float16 with --half), alpha and the
other channels passed through (not with --only-rgb), and the run's settings in the header, which a rerun
compares to decide what to skip.
"""
from __future__ import annotations

from pathlib import Path

from vision.data.fields import GUIDES
from vision.pipelines.plugins import number  # each number's range is checked while the command line is parsed

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


def run(args) -> int:
    # lazy: `vision denoise --help` starts without the frame files' readers (OpenEXR, vision.data.render_layers)
    from vision.pipelines.cli import denoise_frames

    denoise_frames.check_before_loading(args)  # a refusal from the command line and the headers takes no torch to say
    # lazy: torch, numba and the denoiser load once the command line and the frames' headers have passed
    from vision.pipelines.cli import denoise_run

    return denoise_run.run(args)
