"""``vision render-scenes``: render procedural scenes with Mitsuba 3 into denoising and dense-prediction data.

Each scene gets noisy 1-spp frames (one EXR per seed, guide buffers and reference included), a PNG
contact sheet and a manifest; see ``vision.data.render`` for what every pass is and
``vision.data.exr.LAYERS`` for the channel names. Runs are deterministic for a seed and resumable:
finished scenes (those with a manifest) are skipped, so rerunning after an interruption, or with a
larger ``--count``, renders only what is missing. Nothing the run did not create is deleted: a scene
folder without a manifest stops the command, named, before anything is rendered.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

from vision.data.scenes import KINDS, make_scene, scene_seed

EPILOG = """examples:
  vision render-scenes --out data/scenes --count 100 --size 128 --spp-ref 1024
  vision render-scenes --out data/scenes --count 200 --size 128 --spp-ref 1024   # resumes: renders scenes 100..199 only
  vision render-scenes --out tiny --count 3 --size 64 --spp-ref 256 --kinds rooms,lamps --variant scalar_rgb

needs Mitsuba 3:  pip install 'locallinear-vision[render]'
fast variant:     llvm_ad_rgb needs libLLVM >= 16 (Debian/Ubuntu: apt-get install libllvm19); else scalar_rgb is used
"""

# settings that must match for a folder to be resumed (count may grow)
_SETTINGS = ("size", "spp_ref", "noisy_seeds", "seed", "kinds", "ao_rays", "max_depth")


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


def command_line(args, kinds) -> str:
    """The full command line with every option spelled out (recorded in each manifest)."""
    return (f"vision render-scenes --out {args.out} --count {args.count} --size {args.size} --spp-ref {args.spp_ref} "
            f"--noisy-seeds {args.noisy_seeds} --seed {args.seed} --kinds {','.join(kinds)} --ao-rays {args.ao_rays} "
            f"--max-depth {args.max_depth} --variant {args.variant}")


def _read_index(path: Path) -> dict:
    try:
        index = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not the JSON index render-scenes writes ({err}); use another --out") from None
    if not isinstance(index, dict):
        raise ValueError(f"{path} is not the index render-scenes writes; use another --out")
    return index


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
    from tqdm import tqdm  # lazy: `vision render-scenes --help` starts without tqdm

    # lazy: `vision render-scenes --help` starts without vision.data.render
    from vision.data.render import choose_variant, render_scene, write_scene
    from vision.outputs import write_text_atomic  # lazy: `vision render-scenes --help` starts without vision.outputs

    settings = {"size": args.size, "spp_ref": args.spp_ref, "noisy_seeds": args.noisy_seeds, "seed": args.seed,
                "kinds": kinds, "ao_rays": args.ao_rays, "max_depth": args.max_depth}
    index_path = out / "dataset.json"
    if index_path.exists():
        old = _read_index(index_path).get("settings", {})
        diff = [k for k in _SETTINGS if k in old and old[k] != settings[k]]
        if diff:
            k = diff[0]
            raise ValueError(f"{out} holds scenes rendered with --{k.replace('_', '-')} {old[k]}, not {settings[k]}; "
                             f"use another --out, or the same settings to resume")

    variant = choose_variant(args.variant, note=lambda msg: print(msg, file=sys.stderr))
    skipped = args.count - len(todo)
    cmd = command_line(args, kinds)

    times = []
    bar = tqdm(total=args.count, initial=skipped, unit="scene", desc="render-scenes", dynamic_ncols=True)
    for i in todo:
        kind = kinds[i % len(kinds)]
        spec = make_scene(kind, scene_seed(args.seed, i))
        t0 = time.perf_counter()
        render = render_scene(spec, args.size, spp_ref=args.spp_ref, noisy_seeds=args.noisy_seeds,
                              ao_rays=args.ao_rays, max_depth=args.max_depth, variant=variant)
        # write into a fresh temporary folder of this run, then rename: a folder with a manifest is always
        # complete, and only what this run created is ever removed
        tmp = out / f".{names[i]}.partial-{uuid.uuid4().hex[:12]}"
        tmp.mkdir()  # not mkdtemp: the scene keeps the user's umask, not 0700
        try:
            write_scene(render, tmp, names[i], extra={"index": i, "command": cmd})
            final = out / names[i]
            if os.path.lexists(final):
                raise ValueError(f"{final} appeared while rendering; left as it is, this scene is not written")
            tmp.rename(final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
        times.append(time.perf_counter() - t0)
        bar.set_postfix_str(f"{kind}, {times[-1]:.1f} s")
        bar.update(1)
    bar.close()

    index = {"command": cmd, "settings": settings, "variant": variant,
             "scenes": [n for n in names if (out / n / "manifest.json").exists()]}
    if index_path.exists():  # keep scenes of earlier, larger runs
        old = _read_index(index_path)
        index["scenes"] = sorted(set(index["scenes"]) | {n for n in old.get("scenes", []) if (out / n / "manifest.json").exists()})
    write_text_atomic(index_path, json.dumps(index, indent=1))

    if times:
        total = sum(times)
        print(f"rendered {len(times)} scenes in {total:.1f} s: {total / len(times):.2f} s per scene "
              f"({variant}, {args.size}x{args.size}, {args.spp_ref}-spp reference, {args.noisy_seeds} noisy frames); "
              f"{skipped} already done; output in {out}")
    else:
        print(f"all {args.count} scenes already rendered in {out}; nothing to do")
    return 0
