"""What the Blender and Mitsuba evaluation scripts of this folder share (plain Python: imported inside Blender's
interpreter as well as Mitsuba's): the frames' fixed seeds, the manifest they merge into, and the log of
reference render times."""
import json
import os

# last digit of a frame's seed per sample count; 1, 4 and the reference's 9 are those the eval sets were rendered with
SEED_OF_SPP = {1: 1, 4: 4, 16: 2, 64: 3, 256: 5, 1024: 7, 2: 6, 8: 8}
REFERENCE_SEED = 9
# added to the scene index per Blender set, so that no two sets share a seed (``blender_eval.py --set``)
SET_OFFSET = {"eval": 0, "spp": 20}


def seed(scene_index, view, spp):
    """Fixed seed of a frame: different per scene, view and sample count (0 = the reference), never shared with a
    reference (README: ``1000 (scene + 1) + 10 view + {1: 1, 4: 4, 16: 2, 64: 3, 256: 5, 1024: 7, 2: 6, 8: 8,
    reference: 9}``). A sample count outside that table is refused: any digit it took would be another's."""
    if spp and spp not in SEED_OF_SPP:
        raise ValueError(f"no seed digit for {spp} spp; known: {sorted(SEED_OF_SPP)} (evalset.SEED_OF_SPP)")
    return 1000 * (scene_index + 1) + 10 * view + (SEED_OF_SPP[spp] if spp else REFERENCE_SEED)


def update_manifest(out, entries, renderer):
    """Merge ``entries`` into OUTDIR/manifest.json (keyed by scene, view, spp), so partial runs accumulate; a new
    manifest names ``renderer``. Written atomically."""
    path = os.path.join(out, "manifest.json")
    data = {"renderer": renderer, "frames": []}
    if os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
    frames = {(e["scene"], e["view"], e["spp"]): e for e in data["frames"]}
    frames.update({(e["scene"], e["view"], e["spp"]): e for e in entries})
    data["frames"] = [frames[k] for k in sorted(frames)]
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=1)
    os.replace(path + ".tmp", path)


def log_reference(out, ref, spp, size, seconds):
    """Append a reference's render time to OUTDIR/reference_times.txt."""
    with open(os.path.join(out, "reference_times.txt"), "a") as f:
        f.write(f"{ref} {spp} spp {size[0]}x{size[1]} {seconds:.1f} s\n")
