"""``vision render-scenes``: render procedural scenes with Mitsuba 3 into denoising and dense-prediction data.

Each scene gets noisy 1-spp frames (one EXR per seed, guide buffers and reference included), a PNG
contact sheet and a manifest; see ``vision.data.render`` for what every pass is and
``vision.data.exr.LAYERS`` for the channel names. Runs are deterministic for a seed and resumable:
finished scenes (those with a manifest) are skipped, so rerunning after an interruption, or with a
larger ``--count``, renders only what is missing. Nothing the run did not create is deleted: a scene
folder without a manifest stops the command, named, before anything is rendered.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from vision.data.scenes import KINDS

EPILOG = """examples:
  vision render-scenes --out data/scenes --count 100 --size 128 --spp-ref 1024
  vision render-scenes --out data/scenes --count 200 --size 128 --spp-ref 1024   # resumes: renders scenes 100..199 only
  vision render-scenes --out tiny --count 3 --size 64 --spp-ref 256 --kinds rooms,lamps --variant scalar_rgb

needs Mitsuba 3:  pip install 'locallinear-vision[render]'
fast variant:     llvm_ad_rgb needs libLLVM >= 16 (Debian/Ubuntu: apt-get install libllvm19); else scalar_rgb is used
"""


HELP = "render procedural scenes (Mitsuba 3): noisy frames, guide buffers, references, labels"
DESCRIPTION = ("Render procedural scenes with Mitsuba 3 into multi-layer EXR frames: noisy 1-spp radiance "
               "(box pixel filter), albedo, normal, depth, position, ambient occlusion, visible emission, a "
               "high-spp reference, camera-space normals, instance and semantic segmentation.")


def add_arguments(p) -> None:
    p.add_argument("--out", type=Path, required=True, help="output folder (created; finished scenes in it are skipped)")
    p.add_argument("--count", type=int, required=True, help="number of scenes")
    p.add_argument("--size", type=int, default=256, help="image width and height in pixels (default 256)")
    p.add_argument("--spp-ref", type=int, default=2048, help="samples per pixel of the reference (default 2048)")
    p.add_argument("--noisy-seeds", type=int, default=4, help="noisy 1-spp frames per scene, one seed each (default 4)")
    p.add_argument("--seed", type=int, default=0, help="seed of the run: scene i is drawn from (seed, i) (default 0)")
    p.add_argument("--kinds", default=",".join(KINDS),
                   help=f"comma-separated scene kinds, used in turn (default {','.join(KINDS)})")
    p.add_argument("--ao-rays", type=int, default=64, help="ambient-occlusion rays per pixel (default 64)")
    p.add_argument("--max-depth", type=int, default=12, help="path length limit of the path tracer (default 12)")
    p.add_argument("--variant", default="auto", choices=["auto", "llvm_ad_rgb", "scalar_rgb"],
                   help="Mitsuba variant (default auto: llvm_ad_rgb when it works, else scalar_rgb)")


def check_args(args) -> list[str]:
    """Validate the arguments before anything is rendered; returns the kinds. Raises ValueError."""
    for name in ("count", "size", "spp_ref", "noisy_seeds", "ao_rays", "max_depth"):
        value = getattr(args, name)
        if value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    if args.size > 8192:
        raise ValueError(f"--size must be at most 8192, got {args.size}")
    if args.seed < 0:
        raise ValueError(f"--seed must be non-negative, got {args.seed}")
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if not kinds:
        raise ValueError(f"--kinds names no kind; choose from {', '.join(KINDS)}")
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise ValueError(f"unknown kind {bad[0]!r} in --kinds; choose from {', '.join(KINDS)}")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ValueError(f"cannot write to --out {out}: {err.strerror or err}") from None
    return kinds


def run(args) -> int:
    kinds = check_args(args)
    out = Path(args.out)
    names = [f"scene_{i:05d}" for i in range(args.count)]
    todo = [i for i, name in enumerate(names) if not (out / name / "manifest.json").exists()]
    # a scene folder without a manifest was not made by this run: never delete or overwrite it
    foreign = [out / names[i] for i in todo if os.path.lexists(out / names[i])]
    if foreign:
        raise ValueError(f"{foreign[0]} exists but holds no manifest.json, so it is not a finished scene; "
                         f"render-scenes deletes nothing it did not create: move it out of --out {out} and rerun"
                         + (f" ({len(foreign) - 1} more such)" if len(foreign) > 1 else ""))
    try:
        import mitsuba  # noqa: F401  # lazy: mitsuba comes with the [render] extra
    except ImportError:
        print("vision render-scenes: error: needs Mitsuba 3: pip install 'locallinear-vision[render]'", file=sys.stderr)
        return 2
    # lazy: `vision render-scenes --help` starts without the renderer's modules (vision.data.render, tqdm)
    from vision.pipelines.cli import render_scenes_run

    return render_scenes_run.render_missing(args, kinds, names, todo)
