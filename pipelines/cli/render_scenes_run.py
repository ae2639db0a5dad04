"""The rendering of ``vision render-scenes``, once its arguments are checked and Mitsuba 3 imports: each missing
scene rendered into a temporary folder and renamed into place, then the folder's index (``dataset.json``)."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

from tqdm import tqdm

from vision.data.render import choose_variant, render_scene, write_scene
from vision.data.scenes import make_scene, scene_seed
from vision.outputs import write_text_atomic

# settings that must match for a folder to be resumed (count may grow)
SETTINGS = ("size", "spp_ref", "noisy_seeds", "seed", "kinds", "ao_rays", "max_depth")


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


def render_missing(args, kinds: list[str], names: list[str], todo: list[int]) -> int:
    """Render scenes ``todo`` (indices into ``names``, the scene folders) of ``args.out`` (checked: :func:`~vision.pipelines.cli.render_scenes.check_args`)
    and rewrite the index; the folder's earlier settings must match. Returns the exit code.

        >>> render_missing(args, ["rooms"], ["scene_00000", "scene_00001"], [0, 1])   # doctest: +SKIP
    """
    out = Path(args.out)
    settings = {"size": args.size, "spp_ref": args.spp_ref, "noisy_seeds": args.noisy_seeds, "seed": args.seed,
                "kinds": kinds, "ao_rays": args.ao_rays, "max_depth": args.max_depth}
    index_path = out / "dataset.json"
    if index_path.exists():
        old = _read_index(index_path).get("settings", {})
        diff = [k for k in SETTINGS if k in old and old[k] != settings[k]]
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
