"""``vision bench denoise-sequences``: animation denoising against per-frame OIDN on rendered sequences.

Reads a folder made by ``benchmarks/denoise/blender_seq.py`` (``manifest.json``: per sequence and frame a noisy
multilayer EXR with Denoising Data, Vector and IndexOB passes, and a reference) and scores, per sequence, over
frames ``--from`` and later:

* **PSNR**: the mean per-frame PSNR (:func:`vision.denoise.metrics.psnr`: tonemap clamp + gamma 1/2.2);
* **stability**: the PSNR of each frame-to-frame difference of the tonemapped output against the reference's
  own difference, averaged in MSE over the frame pairs (flicker shows as error in the differences);
* **disoccluded**: the PSNR over the pixels disoccluded in the last two frames: pixels whose previous
  position (the Vector pass, nearest pixel) lies outside the frame or on another object (IndexOB), at this
  frame or the one before. The mask comes from the files alone, not from the denoiser's own test;
* **flat**: the PSNR over the pixels away from edges (:func:`flat_mask`: more than 2 pixels, in a 5 x 5
  neighbourhood, from any change of the rendered normal, log depth, albedo or object index), averaged over the
  frames like PSNR; the share of such pixels over the scored frames is printed once per sequence. Where the
  denoisers differ at edges, this says how well they smooth the rest;
* **JOD**: ColorVideoVDP (``pip install cvvdp``, :func:`jod`): the just-objectionable-difference score of the
  method's output video against the reference video, frames ``--from`` and later in order at 24 frames per
  second, both tonemapped as for PSNR (clamp, gamma 1/2.2) and shown as SDR sRGB display-encoded frames on
  cvvdp's ``standard_fhd`` display (a 24-inch 1920 x 1080 monitor, 200 cd/m^2 peak, office light, seen from
  0.6 m: 37.8 pixels per degree), one frame pixel per display pixel (the frames at their own small size, not
  scaled up). 10 = indistinguishable from the reference; lower is worse; it weighs flicker and noise as seen.
  "-" when cvvdp is not installed. It runs on the CPU and reads only the data files in its wheel (no download).

Methods: ``oidn high`` / ``oidn fast`` (per frame, albedo and normal as rendered, HDR; needs pyoidn),
``flnr`` / ``flr`` (``vision denoise`` per frame, told each frame's samples per pixel from its header as the
command is), ``temporal`` (:class:`vision.denoise.TemporalDenoiser`, FLNR,
what ``vision denoise --temporal`` runs) and ``temporal flr``.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
import logging
import sys

import numpy as np
import torch
from tqdm import tqdm

from vision.data.fields import GUIDES, NAMES
from vision.data.render_layers import read_channels, read_render_file, samples_per_pixel
from vision.denoise import TemporalDenoiser, denoise
from vision.denoise.flnr import load_flnr
from vision.denoise.metrics import tonemap
from vision.figures import side_by_side

from .commands import SEQUENCE_METHODS
from .timing import print_table



def read_sequences(folder: Path, names=None) -> dict[str, list[dict]]:
    """sequence -> frames in order, each {"frame", "noisy": Path, "reference": Path}; one-line errors."""
    path = folder / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder}: no manifest.json (make one with benchmarks/denoise/blender_seq.py)")
    seqs: dict[str, list[dict]] = {}
    try:
        for e in json.loads(path.read_text())["frames"]:
            if "noisy" in e and "reference" in e:
                seqs.setdefault(str(e["sequence"]), []).append(
                    {"frame": int(e["frame"]), "noisy": folder / e["noisy"], "reference": folder / e["reference"]})
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a sequence manifest ({type(err).__name__}: {err}); "
                         "make one with benchmarks/denoise/blender_seq.py") from None
    if not seqs:
        raise ValueError(f"{path}: no frame has both a noisy file and a reference yet")
    if names:
        missing = [n for n in names if n not in seqs]
        if missing:
            raise ValueError(f"--sequences: {', '.join(missing)} not in {path} (has {', '.join(seqs)})")
        seqs = {n: seqs[n] for n in names}
    return {k: sorted(v, key=lambda f: f["frame"]) for k, v in seqs.items()}


def load_frame(noisy: Path, reference: Path) -> dict:
    """The noisy frame's buffers, ``motion`` and ``index`` where the file has them, ``spp`` (its samples per pixel
    from the header, as ``vision denoise`` reads it, or None) and ``reference``."""
    rf = read_render_file(noisy, {})
    layer = rf.layers[0]
    d = dict(layer.buffers)
    d["spp"] = samples_per_pixel(rf.header, layer.name)[0]
    prefix = f"{layer.name}." if layer.name else ""
    if "motion" not in d:
        comps = [f"{prefix}Vector.{c}" for c in "XYZW"]
        if all(c in rf.channels for c in comps):
            d["motion"] = np.stack([rf.channels[c] for c in comps], -1).astype(np.float32)
    if f"{prefix}IndexOB.X" in rf.channels:
        d["index"] = rf.channels[f"{prefix}IndexOB.X"].astype(np.float32)[..., None]
    ref, _ = read_channels(reference)
    names = [n for n in ("R", "G", "B") if n in ref] or sorted(k for k in ref if k.endswith((".R", ".G", ".B")))[:3]
    d["reference"] = np.stack([ref[n] for n in names], -1).astype(np.float32)
    return d


def disoccluded(prev: dict | None, cur: dict) -> np.ndarray:
    """(H, W) bool: the pixel's previous position (Cycles Vector X, -Y; nearest pixel) is outside the frame or on
    another object than the pixel's own (IndexOB); everything for the first frame."""
    h, w = cur["color"].shape[:2]
    if prev is None or "motion" not in cur:
        return np.ones((h, w), bool)
    mv = cur["motion"]
    yy, xx = np.mgrid[0:h, 0:w]
    py, px = np.rint(yy - mv[..., 1]).astype(int), np.rint(xx + mv[..., 0]).astype(int)
    out = (py < 0) | (py >= h) | (px < 0) | (px >= w)
    if "index" in cur and "index" in prev:
        other = prev["index"][..., 0][py.clip(0, h - 1), px.clip(0, w - 1)] != cur["index"][..., 0]
        out |= other
    return out


FLAT_RADIUS = 2  # pixels: a pixel is flat when no guide changes within this distance (a 5 x 5 neighbourhood)
FLAT_THRESHOLDS = {"normal": 0.1, "log depth": 0.05, "albedo": 0.1}  # index: any change


def _changes(x: np.ndarray, threshold: float) -> np.ndarray:
    """(H, W) bool: the pixel differs from a 4-neighbour by more than ``threshold`` in some channel (both pixels
    of such a pair are marked); NaN counts as a change."""
    x = x.reshape(*x.shape[:2], -1)
    out = np.zeros(x.shape[:2], bool)
    dx = ~(np.abs(x[:, 1:] - x[:, :-1]) <= threshold).all(-1)
    dy = ~(np.abs(x[1:] - x[:-1]) <= threshold).all(-1)
    out[:, 1:] |= dx
    out[:, :-1] |= dx
    out[1:] |= dy
    out[:-1] |= dy
    return out


def flat_mask(frame_buffers: dict, radius: int = FLAT_RADIUS) -> np.ndarray:
    """(H, W) bool: True where no guide buffer changes within ``radius`` pixels (a ``2 radius + 1`` square).

    An edge lies between two 4-neighbour pixels whose ``normal`` differs by more than 0.1 in some channel, whose
    ``depth`` differs by more than 0.05 in log (depth <= 0, >= 1e9 or not finite is no surface: surface next to
    no surface is an edge, no surface next to no surface is not), whose ``albedo`` differs by more than 0.1 in
    some channel, or whose ``index`` (IndexOB) differs at all; both pixels of such a pair are edge pixels, and
    every pixel within ``radius`` of an edge pixel (Chebyshev distance) is not flat. Absent buffers are skipped.
    From the rendered files alone (:func:`load_frame`'s dict), never from a denoiser."""
    some = next((frame_buffers[k] for k in NAMES if k in frame_buffers), None)
    if some is None:
        raise ValueError("flat_mask: no buffer to take the frame size from")
    h, w = some.shape[:2]
    edge = np.zeros((h, w), bool)
    for key, threshold in (("normal", FLAT_THRESHOLDS["normal"]), ("albedo", FLAT_THRESHOLDS["albedo"]),
                           ("index", 0.0)):
        if key in frame_buffers:
            edge |= _changes(np.asarray(frame_buffers[key], np.float64), threshold)
    if "depth" in frame_buffers:
        z = np.asarray(frame_buffers["depth"], np.float64).reshape(h, w, -1)[..., 0]
        surface = np.isfinite(z) & (z > 0) & (z < 1e9)
        edge |= _changes(surface.astype(np.float64), 0.0)  # surface next to no surface
        # no surface reads 0 here: two such pixels do not differ, and a pair of one of each is an edge above
        edge |= _changes(np.log(np.where(surface, z, 1.0)), FLAT_THRESHOLDS["log depth"])
    if radius > 0 and edge.any():  # dilate by a square of side 2 radius + 1, one axis at a time
        for axis in (0, 1):
            n = edge.shape[axis]
            e = np.pad(edge, [(radius, radius) if a == axis else (0, 0) for a in (0, 1)])
            edge = np.logical_or.reduce([np.take(e, np.arange(i, i + n), axis=axis) for i in range(2 * radius + 1)])
    return ~edge


JOD_FPS = 24
JOD_DISPLAY = "standard_fhd"
_jod_metric = None


def _cvvdp():
    """The ColorVideoVDP metric (cached; on the CPU; ``standard_fhd`` display). ImportError without cvvdp."""
    global _jod_metric
    if _jod_metric is None:
        log = logging.getLogger("torch.utils.cpp_extension")  # pycvvdp imports torch.utils.benchmark, which
        level = log.level  # warns once about CUDA_HOME on machines without CUDA: not ours to show
        log.setLevel(logging.ERROR)
        try:
            import pycvvdp  # lazy: ColorVideoVDP is an optional [bench] peer
        finally:
            log.setLevel(level)
        _jod_metric = pycvvdp.cvvdp(display_name=JOD_DISPLAY, device=torch.device("cpu"), quiet=True)
    return _jod_metric


def jod_available() -> bool:
    """Whether ``pycvvdp`` (``pip install cvvdp``) imports."""
    try:
        _cvvdp()
    except ImportError:
        return False
    return True


def jod(test_frames, reference_frames, fps: float = JOD_FPS) -> float:
    """ColorVideoVDP JOD of the video ``test_frames`` against ``reference_frames`` (linear radiance, (H, W, 3)
    each, in order): both tonemapped as for PSNR (clamp to [0, 1], gamma 1/2.2) and taken as SDR sRGB
    display-encoded frames on cvvdp's ``standard_fhd`` display (24-inch 1920 x 1080, 200 cd/m^2, 0.6 m, 250 lux:
    37.8 pixels per degree), one frame pixel per display pixel, at ``fps`` frames per second (one frame: an
    image). 10 = no visible difference. Needs ``pycvvdp`` (ImportError otherwise); nothing is downloaded."""
    t = np.stack([tonemap(x) for x in test_frames]).astype(np.float32)
    r = np.stack([tonemap(x) for x in reference_frames]).astype(np.float32)
    if t.shape != r.shape or t.ndim != 4 or t.shape[-1] != 3:
        raise ValueError(f"jod: test {t.shape} and reference {r.shape} must both be frames of (H, W, 3)")
    q, _ = _cvvdp().predict(t, r, dim_order="FHWC", frames_per_second=fps if len(t) > 1 else 0)
    return float(q)


def _mse(a, b, mask=None):
    d = (tonemap(a) - tonemap(b)) ** 2
    if mask is not None:
        d = d[mask]
    return float(d.mean()) if d.size else float("nan")


def _db(mse):
    return float("inf") if mse == 0 else (float("nan") if not math.isfinite(mse) else 10 * math.log10(1 / mse))


def methods(names, weights=None):
    def per_frame(model):
        def run(d, state):
            t = {k: torch.from_numpy(d[k]) for k in GUIDES if k in d}
            return denoise(torch.from_numpy(d["color"]), **t, model=model, spp=d.get("spp"),
                           weights=weights if model == "flnr" else None).numpy()
        return run

    def temporal(model):
        def run(d, state):
            if "den" not in state:
                state["den"] = TemporalDenoiser(model=model, weights=weights if model == "flnr" else None)
            t = {k: torch.from_numpy(d[k]) for k in GUIDES if k in d}
            return state["den"](torch.from_numpy(d["color"]), motion=None if "motion" not in d else
                                torch.from_numpy(d["motion"]), index=None if "index" not in d else
                                torch.from_numpy(d["index"]), spp=d.get("spp"), **t).numpy()
        return run

    def oidn(quality):
        import pyoidn  # lazy: OIDN is an optional [bench] peer

        def run(d, state):
            return pyoidn.denoise(np.ascontiguousarray(d["color"]), np.ascontiguousarray(np.clip(d["albedo"], 0, 1)),
                                  np.ascontiguousarray(d["normal"]), hdr=True, clean_aux=False, quality=quality)
        return run

    table = {"oidn high": lambda: oidn("high"), "oidn fast": lambda: oidn("fast"), "flnr": lambda: per_frame("flnr"),
             "flr": lambda: per_frame("flr"), "temporal": lambda: temporal("flnr"),
             "temporal flr": lambda: temporal("flr")}
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"--methods: unknown {', '.join(unknown)}; choose from {', '.join(SEQUENCE_METHODS)}")
    return {n: table[n]() for n in names}


def score_sequence(frames: list[dict], runners: dict, first: int, progress=None, last: dict | None = None,
                   jod_score: bool = False) -> dict[str, dict]:
    """Per method: PSNR, stability, disoccluded PSNR and flat PSNR (with the share of flat pixels,
    ``flat_share``, 0-1) over frames >= ``first`` (see the module docstring); with ``jod_score`` also the
    ColorVideoVDP JOD of those frames (:func:`jod`; needs pycvvdp), else ``jod`` is None.
    ``last``: a dict that receives the last two frames' noisy colour, references and outputs (for figures)."""
    states = {n: {} for n in runners}
    prev_out = {n: None for n in runners}
    acc = {n: {"psnr": [], "diff": [], "dis": [], "dis_n": 0, "flat": [], "seconds": 0.0} for n in runners}
    videos = {n: [] for n in runners}  # the scored outputs, for the JOD (128 x 96 x 16 frames: small)
    ref_video = []
    flat_n = flat_total = 0
    prev = None
    prev_mask = None
    for f in frames:
        d = load_frame(f["noisy"], f["reference"])
        mask = disoccluded(prev, d)
        recent = mask if prev_mask is None else (mask | prev_mask)
        flat = flat_mask(d)
        if f["frame"] >= first:
            flat_n += int(flat.sum())
            flat_total += flat.size
            if jod_score:
                ref_video.append(d["reference"])
        for name, run in runners.items():
            t0 = time.perf_counter()
            out = run(d, states[name])
            acc[name]["seconds"] += time.perf_counter() - t0
            if f["frame"] >= first:
                a = acc[name]
                a["psnr"].append(_db(_mse(out, d["reference"])))
                if prev_out[name] is not None:
                    e = (tonemap(out) - tonemap(prev_out[name][0])) - (tonemap(d["reference"]) -
                                                                      tonemap(prev_out[name][1]))
                    a["diff"].append(float((e ** 2).mean()))
                if recent.any():
                    a["dis"].append(_mse(out, d["reference"], recent) * recent.sum())
                    a["dis_n"] += int(recent.sum())
                if flat.any():  # a frame with no flat pixel adds nothing
                    a["flat"].append(_db(_mse(out, d["reference"], flat)))
                if jod_score:
                    videos[name].append(out)
            prev_out[name] = (out, d["reference"])
        if progress:
            progress()
        if last is not None:
            last["previous"] = last.get("current")
            last["current"] = {"noisy": d["color"], "reference": d["reference"],
                               **{n: prev_out[n][0] for n in runners}}
        prev, prev_mask = d, mask
    return {n: {"psnr": float(np.mean(a["psnr"])), "stability": _db(float(np.mean(a["diff"]))),
                "disoccluded": _db(sum(a["dis"]) / max(a["dis_n"], 1)), "disoccluded_pixels": a["dis_n"],
                "flat": float(np.mean(a["flat"])) if a["flat"] else float("nan"),
                "flat_share": flat_n / max(flat_total, 1),
                "jod": jod(videos[n], ref_video) if jod_score and ref_video else None,
                "seconds_per_frame": a["seconds"] / len(frames)} for n, a in acc.items()}


def write_figures(folder: Path, seq: str, last: dict, names: list[str]) -> list[Path]:
    """``SEQ_frame.png``: the last frame, noisy, each method and the reference, tonemapped; ``SEQ_flicker.png``:
    per method, ``|d out - d ref|`` (mean over channels, x4) of the last frame-to-frame difference, where flicker
    shows (black = the output changes as the reference does). Pixels doubled (nearest) for small renders."""
    cur, prev = last.get("current"), last.get("previous")
    if cur is None:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    up = max(1, 256 // max(1, cur["reference"].shape[0]))
    big = lambda x: np.repeat(np.repeat(x, up, 0), up, 1)  # noqa: E731
    out = [side_by_side([big(tonemap(cur[k])) for k in ("noisy", *names, "reference")],
                        ["noisy", *names, "reference"], folder / f"{seq}_frame.png")]
    if prev is not None:
        dref = tonemap(cur["reference"]) - tonemap(prev["reference"])
        maps = [big(np.clip(4 * np.abs(tonemap(cur[n]) - tonemap(prev[n]) - dref).mean(-1), 0, 1)) for n in names]
        out.append(side_by_side(maps, [f"{n}: flicker x4" for n in names], folder / f"{seq}_flicker.png"))
    return out


def run(args) -> int:
    seqs = read_sequences(args.folder, None if args.sequences is None else args.sequences.split(","))
    names = [m.strip() for m in args.methods.split(",") if m.strip()]
    if args.weights is not None:
        try:  # a missing or bad file: one line, now
            load_flnr(args.weights)
        except (OSError, ValueError, RuntimeError) as err:
            raise ValueError(f"--weights: {(str(err).strip().splitlines() or [type(err).__name__])[0]}") from None
    runners = methods(names, args.weights)
    has_jod = jod_available()
    if not has_jod:
        print("(cvvdp not installed: no JOD column; pip install cvvdp)")
    rows, results = [], {}
    if args.figures is not None:  # before anything runs
        if args.figures.exists() and not args.figures.is_dir():
            raise ValueError(f"--figures {args.figures}: not a folder")
        args.figures.mkdir(parents=True, exist_ok=True)
    bar = tqdm(total=sum(len(v) for v in seqs.values()), desc="sequences", unit="frame", file=sys.stderr)
    for seq, frames in seqs.items():
        last: dict = {}
        res = score_sequence(frames, runners, args.first, progress=lambda: bar.update(1), last=last,
                             jod_score=has_jod)
        results[seq] = res
        if args.figures is not None:
            for path in write_figures(args.figures, seq, last, names):
                print(f"wrote {path}", file=sys.stderr)
        for n, r in res.items():
            rows.append({"sequence": seq, "method": n, "PSNR": f"{r['psnr']:.2f}", "stability": f"{r['stability']:.2f}",
                         "disoccluded": f"{r['disoccluded']:.2f}", "flat": f"{r['flat']:.2f}",
                         "JOD": "-" if r["jod"] is None else f"{r['jod']:.3f}",
                         "s/frame": f"{r['seconds_per_frame']:.3f}"})
    bar.close()
    print_table(rows, ["sequence", "method", "PSNR", "stability", "disoccluded", "flat", "JOD", "s/frame"])
    for seq, res in results.items():
        share = next(iter(res.values()))["flat_share"]
        print(f"{seq}: {100 * share:.1f}% of the scored pixels flat (no normal, depth, albedo or object-index edge "
              f"within {FLAT_RADIUS} pixels)")
    if "temporal" in names:
        for seq, res in results.items():
            t = res["temporal"]
            checks = []
            if "oidn high" in res:
                o = res["oidn high"]
                checks.append(f"PSNR {t['psnr'] - o['psnr']:+.2f} dB vs OIDN high (>= 0)")
                checks.append(f"stability {t['stability'] - o['stability']:+.2f} dB (>= +4.8)")
            if "flnr" in res:
                checks.append(f"disoccluded {t['disoccluded'] - res['flnr']['disoccluded']:+.2f} dB vs FLNR (>= -0.3)")
            print(f"{seq}: " + "; ".join(checks))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0
