"""Frames for ``vision bench denoise --frames MANIFEST``: renderer files exactly as the renderer wrote them.

A manifest is a JSON file listing noisy frames and their references; paths are relative to the manifest's
folder::

    {"frames": [
        {"scene": "interior", "family": "sky-lit interior", "view": 0, "spp": 1,
         "noisy": "interior/view0_spp1.exr", "reference": "interior/view0_ref.exr",
         "emission": "interior/view0_emission.exr"},          # optional: buffers kept in separate files
        ...]}

Each noisy file is read by the reader ``vision denoise`` uses (:func:`vision.data.render_layers.read_render_file`:
Blender Cycles layers and Denoising passes, Mitsuba AOVs, PFM), and its first view layer is denoised; the
reference is the colour of the reference file's first layer. Rows are grouped by ``scene`` and ``spp``
("interior 1spp"), so the acceptance of "never below FLR on a scene" reads straight off the table.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from vision.data.dataset import file_inside
from vision.data.fields import GUIDES
from vision.data.render_layers import read_render_file
from .timing import print_table


def _inside(root: Path, name, manifest: Path, key: str) -> Path:
    """``root / name``, refused unless it stays inside the manifest's folder (a manifest is user input)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{manifest}: frame {key!r} must be a file name relative to the manifest, got {name!r}")
    if not file_inside(root, name):
        raise ValueError(f"{manifest}: frame {key} {name!r} is not inside {root}; refusing to read it")
    path = (root / name).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{manifest}: frame {key} {name!r}: no such file {path}")
    return path


def read_manifest(path) -> list[dict]:
    """The manifest's frame entries, each with absolute ``noisy``/``reference`` (and extra buffer) paths."""
    path = Path(path)
    try:
        entries = json.loads(path.read_text())["frames"]
        if not isinstance(entries, list) or not entries:
            raise TypeError("empty")
    except FileNotFoundError:
        raise FileNotFoundError(f"--frames: no such manifest {path}") from None
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"--frames {path}: not a manifest with a non-empty 'frames' list ({err})") from None
    root = path.parent
    out = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or "noisy" not in e or "reference" not in e:
            raise ValueError(f"--frames {path}: entry {i} needs 'noisy' and 'reference' files")
        f = dict(e)
        for key in ("noisy", "reference", *GUIDES):
            if key in e:
                f[key] = _inside(root, e[key], path, key)
        f.setdefault("scene", Path(str(e["noisy"])).parent.name or f"frame{i}")
        out.append(f)
    return out


def load_manifest_frames(path, spp=None) -> list[tuple[str, int, dict]]:
    """``(group, index, buffers)`` per manifest frame, the buffers as ``vision denoise`` reads them plus
    ``reference`` and ``spp`` (the entry's samples per pixel, or None); the group is ``"SCENE Nspp"`` when the
    entry says its spp. ``spp``: a list of sample counts to keep (ValueError when none of the frames has one)."""
    frames = []
    counts: dict[str, int] = {}
    entries = read_manifest(path)
    if spp:
        entries = [e for e in entries if e.get("spp") in spp]
        if not entries:
            raise ValueError(f"--spp {' '.join(map(str, spp))}: no frame of {path} has that many samples per pixel")
    for e in entries:
        extra = {k: e[k] for k in GUIDES if k in e}
        layer = read_render_file(e["noisy"], extra).layers[0]
        ref = read_render_file(e["reference"]).layers[0].buffers["color"]
        d = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in layer.buffers.items()}
        if ref.shape[:2] != d["color"].shape[:2]:
            raise ValueError(f"{e['reference']}: reference is {ref.shape[1]}x{ref.shape[0]}, the noisy frame "
                             f"{e['noisy']} is {d['color'].shape[1]}x{d['color'].shape[0]}")
        d["reference"] = np.ascontiguousarray(ref, dtype=np.float32)
        d["spp"] = e.get("spp")
        group = f"{e['scene']} {e['spp']}spp" if "spp" in e else str(e["scene"])
        frames.append((group, counts.get(group, 0), d))
        counts[group] = counts.get(group, 0) + 1
    return frames


def spp_tables(per: dict, frames: list, methods: list[str]) -> list[dict]:
    """One table per sample count (mean PSNR over its scenes per method, the gap to OIDN high and to the noisy
    input), and the checks of a denoiser at every sample count: the default (FLNR) at or above the noisy input
    and at or above FLR on every scene. Returns one record per (spp, method)."""
    groups: dict = {}
    for group, _, d in frames:
        groups.setdefault(d.get("spp"), set()).add(group)
    records = []
    summary = []
    for spp in sorted(groups, key=lambda v: (v is None, v or 0)):
        scenes = sorted(groups[spp])
        mean = {m: float(np.mean([np.mean([r["psnr"] for r in per[(s, m)]]) for s in scenes])) for m in methods}
        peer = mean.get("oidn high aux")
        rows = [{"method": m, "PSNR": f"{mean[m]:.2f}", "- noisy": f"{mean[m] - mean['noisy']:+.2f}",
                 "- oidn high aux": "-" if peer is None else f"{mean[m] - peer:+.2f}"} for m in methods]
        print_table(rows, ["method", "PSNR", "- noisy", "- oidn high aux"],
                    title=f"{spp if spp is not None else '?'} spp: mean PSNR over {len(scenes)} scene(s), dB")
        records += [{"spp": spp, "method": m, "psnr": mean[m], "scenes": len(scenes)} for m in methods]
        if "flnr" in mean:
            worse = [s.rsplit(" ", 1)[0] for s in scenes
                     if np.mean([r["psnr"] for r in per[(s, "flnr")]]) < max(
                         np.mean([r["psnr"] for r in per[(s, m)]]) for m in ("noisy", "flr") if (s, m) in per)]
            summary.append((spp, mean, peer, worse))
    for spp, mean, peer, worse in summary:
        gap = "" if peer is None else f"; FLNR - OIDN high aux {mean['flnr'] - peer:+.2f} dB"
        print(f"{spp} spp: FLNR below the noisy input or FLR on {len(worse)} scene(s)"
              + (f" ({', '.join(worse)})" if worse else "") + gap)
    return records


def scene_checks(per: dict, scenes: list[str], means: dict) -> bool:
    """The real-renderer acceptance: FLNR >= OIDN high (albedo + normal) - 1.5 dB on average and FLNR never
    below FLR on a scene; prints one line each and the scenes where FLNR loses to FLR."""
    if "flnr" not in means or "flr" not in means:
        return True
    ok = True
    if "oidn high aux" in means:
        gap = means["flnr"]["psnr"] - means["oidn high aux"]["psnr"]
        print(f"real files: FLNR - OIDN high aux = {gap:+.2f} dB on average (>= -1.5): "
              f"{'PASS' if gap >= -1.5 else 'FAIL'}")
        ok &= gap >= -1.5
    losses = []
    for s in scenes:
        d = np.mean([r["psnr"] for r in per[(s, "flnr")]]) - np.mean([r["psnr"] for r in per[(s, "flr")]])
        if d < 0:
            losses.append(f"{s} {d:+.2f} dB")
    print(f"real files: FLNR below FLR on {len(losses)} of {len(scenes)} scene group(s)"
          + (f" ({', '.join(losses)})" if losses else "") + f": {'PASS' if not losses else 'FAIL'}")
    # per frame (for information: the acceptance is per scene): frames of a group are in the same order per method
    frames = [(s, i, a["psnr"] - b["psnr"]) for s in scenes
              for i, (a, b) in enumerate(zip(per[(s, "flnr")], per[(s, "flr")]))]
    below = sorted((d, s, i) for s, i, d in frames if d < 0)
    print(f"real files, per frame: FLNR below FLR on {len(below)} of {len(frames)} frame(s)"
          + (f" (worst: {', '.join(f'{s} #{i} {d:+.2f} dB' for d, s, i in below[:3])})" if below else ""))
    return ok and not losses
