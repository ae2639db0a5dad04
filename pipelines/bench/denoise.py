"""``vision bench denoise``: quality and time of the denoisers on rendered scenes against their references.

One run, the same inputs for every method: each frame of each scene under ``--data`` (default: the
bundled scenes; or any ``vision render-scenes`` output) is denoised by

* ``noisy``: the 1-spp input itself;
* ``box``: a (2r+1)^2 box filter of the albedo-demodulated, emission-free radiance (remodulated; the
  same signal model as FLR, no guides: what the regression adds is the guides);
* ``flr`` (and ``flr s=2``: fit on 2x2 cells): :func:`vision.denoise.denoise`;
* ``flnr``: :func:`vision.denoise.denoise` with ``model="flnr"`` and the bundled weights (or ``--weights``);
* ``oidn fast|high``, colour only and with albedo + normal (``cleanAux``, the buffers are noise-free),
  HDR mode, through ``pyoidn`` on the CPU (rows are skipped when it is not installed);
* ``flr 1/2 mean``, ``flr 1/2 pick`` (and the same for FLNR): joint denoising and upsampling, the colour
  at 1/2 resolution and the guides at full resolution; ``mean`` = the 2 x 2 means of the 1-spp frame
  (the same samples, 4 per low-resolution pixel), ``pick`` = its top-left pixel of every 2 x 2 block (a
  quarter of the samples; the denoiser averages the guides over each block), ``pick+phase`` = the same
  samples with ``phase=(0, 0)`` (the denoiser knows which pixel of its block each sample was taken at and
  reads the guides, albedo and emission there). FLNR's 1/2 rows use the bundled weights trained for
  1/2-resolution colour (``flnr_up2.safetensors``) unless ``--weights`` is given. Only when every frame has
  an even width and height;
* ``flr 1/4 pick+phase``, ``flnr 1/4 pick+phase``: the same from one sample of every 4 x 4 block (its
  top-left pixel, ``phase=(0, 0)``; FLNR with ``flnr_up4.safetensors``); only when 4 divides every size.

Metrics (see :mod:`vision.denoise.metrics`): PSNR and SSIM on tonemapped images (clamp to [0, 1], then
gamma 1/2.2), relMSE (eps 0.01, no 0.5 factor) on linear HDR values, HDR-FLIP (``flip-evaluator``,
default parameters; column omitted when it is not installed), and the median wall time per frame.

``--time-size 1280x720`` adds a timing table at that size: the first frame's buffers are enlarged
(nearest neighbour) to it, and FLR, FLNR and OIDN fast (albedo + normal) are timed on it in this process
(median of ``--repeat`` rounds that call each method once in turn), reported as ratios to OIDN fast.
"""
from __future__ import annotations

import functools
import json
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from vision.bundled import asset_path
from vision.data import RenderedScenes
from vision.data.fields import GUIDES, SCORED, SIGNAL
from vision.denoise import TemporalDenoiser, buffers as B, denoise, load_flnr, metrics as M

from . import denoise_device as DD
from .denoise_files import load_manifest_frames, scene_checks, spp_tables
from .denoise_targets import quality_targets, timing_targets, upsampling_targets
from .timing import print_table


def box_denoise(d: dict, radius: int) -> np.ndarray:
    t = {k: B.to_bchw(d[k], k) for k in ("color", *SIGNAL) if k in d}  # the colour and what splits it
    target, factor, add = B.demodulate(t["color"], t.get("albedo"), t.get("emission"), radius)
    k = 2 * radius + 1
    with torch.no_grad():
        smooth = F.avg_pool2d(target, k, 1, radius, count_include_pad=False)
    return B.like(smooth * factor + add, d["color"])


def half_color(d: dict, how: str, u: int = 2) -> np.ndarray:
    """The frame's colour at 1/u resolution: u x u means (``"mean"``) or the top-left sample of each block."""
    c = d["color"]
    if how == "mean":
        h, w = c.shape[:2]
        return c.reshape(h // u, u, w // u, u, c.shape[2]).mean((1, 3))
    return np.ascontiguousarray(c[::u, ::u])


def methods(args, upsample: bool = False, quarter: bool = False) -> dict:
    def full(d):
        return d["color"]

    def run_on(color, **kw):
        """A method: ``denoise`` of ``color(frame)`` with the frame's guides, its samples per pixel and ``kw``."""
        return lambda d: denoise(color(d), **{k: d[k] for k in GUIDES if k in d}, spp=d.get("spp"), **kw)

    def flr(scale=1, color=full, **kw):
        return run_on(color, model="flr", radius=args.radius, eps=args.eps, scale=scale, **kw)

    m = {"noisy": full, "box": lambda d: box_denoise(d, args.radius), "flr": flr(1),
         "flr s=2": flr(2)}
    net = None
    if not getattr(args, "no_flnr", False):
        net = load_flnr(getattr(args, "weights", None))
        m["flnr"] = run_on(full, model="flnr", weights=net)
    if getattr(args, "frames", None) is not None:  # renderer files at any sample count: what the input blend adds
        m["flr (no input blend)"] = flr(1, input_blend=False)
        if net is not None:
            m["flnr (no input blend)"] = run_on(full, model="flnr", weights=net, input_blend=False)
    if upsample:
        for how in ("mean", "pick", "pick+phase"):
            half = functools.partial(half_color, how=how.split("+")[0])
            kw = {"phase": (0, 0)} if how.endswith("+phase") else {}
            m[f"flr 1/2 {how}"] = flr(color=half, **kw)
            if net is not None:
                # bundled weights: those trained for 1/2-resolution colour where there are such
                m[f"flnr 1/2 {how}"] = run_on(half, model="flnr", weights=getattr(args, "weights", None), **kw)
    if quarter:  # one sample of every 4 x 4 block, its top-left pixel, phase known
        fourth = functools.partial(half_color, how="pick", u=4)
        m["flr 1/4 pick+phase"] = flr(color=fourth, phase=(0, 0))
        if net is not None:
            m["flnr 1/4 pick+phase"] = run_on(fourth, model="flnr", weights=getattr(args, "weights", None),
                                              phase=(0, 0))
    if not args.no_oidn:
        try:
            import pyoidn  # lazy: OIDN is an optional [bench] peer
        except ImportError:
            print("(pyoidn not installed: no OIDN rows; pip install pyoidn)")
        else:
            for q in ("fast", "high"):
                m[f"oidn {q} color"] = lambda d, q=q: pyoidn.denoise(np.ascontiguousarray(d["color"]), hdr=True,
                                                                    quality=q)
                # our generator's buffers are noise-free (cleanAux); a renderer's 1-spp albedo and normal
                # are not, and OIDN then prefilters them, as Blender's denoise node does by default
                clean = getattr(args, "frames", None) is None
                m[f"oidn {q} aux"] = lambda d, q=q, clean=clean: pyoidn.denoise(
                    np.ascontiguousarray(d["color"]), np.ascontiguousarray(np.clip(d["albedo"], 0, 1)),
                    np.ascontiguousarray(d["normal"]), hdr=True, clean_aux=clean, quality=q)
    return m


def load_frames(args) -> list[tuple[str, int, dict]]:
    if getattr(args, "spp", None) and getattr(args, "frames", None) is None:
        raise ValueError("--spp picks frames of a --frames manifest by their samples per pixel; add --frames")
    if getattr(args, "frames", None) is not None:
        return load_manifest_frames(args.frames, getattr(args, "spp", None))

    root = args.data or asset_path("scenes")
    ds = RenderedScenes(root, split=args.split, fields=list(SCORED))
    if len(ds) == 0:
        raise ValueError(f"no frames in {root} (split {args.split})")
    out = []
    for i in range(len(ds)):
        s = ds[i]
        d = {k: np.ascontiguousarray(s[k].permute(1, 2, 0).numpy()) for k in SCORED}
        out.append((s["scene"], s["frame"], d))
    return out


def enlarge(d: dict, size: tuple[int, int]) -> dict:
    """Every buffer of a frame enlarged to (H, W) by nearest neighbour (a stand-in 1-spp frame of that size)."""
    out = {}
    for k, v in d.items():
        if not isinstance(v, np.ndarray) or v.ndim != 3:  # the frame's spp and other scalars
            continue
        t = torch.from_numpy(np.ascontiguousarray(v)).permute(2, 0, 1)[None]
        out[k] = np.ascontiguousarray(F.interpolate(t, size=size, mode="nearest")[0].permute(1, 2, 0).numpy())
    return out


def time_large(args, frames, ms) -> dict:
    """Median time per frame of FLR, FLNR and OIDN fast (aux) on the first frame enlarged to --time-size.

    One warm-up call each (weights, thread pools), then ``--repeat`` rounds that call every method once in
    turn: on a shared machine a change of load then falls on all methods alike instead of on whichever
    was being timed, so the ratios stay comparable."""
    w, h = frame_size(args.time_size, "--time-size")
    d = enlarge(frames[0][2], (h, w))
    spp = getattr(args, "time_spp", None)
    if spp is not None:
        d["spp"] = float(spp)
    ms = dict(ms)
    if "flnr" in ms:
        ms["temporal flnr"] = temporal_step(d)
    names = [n for n in ("flr", "flr s=2", "flnr", "temporal flnr", "oidn fast aux") if n in ms]
    times = {name: [] for name in names}
    with torch.no_grad():
        for name in names:
            ms[name](d)
        for _ in range(max(1, args.repeat)):
            for name in names:
                t0 = time.perf_counter()
                ms[name](d)
                times[name].append(time.perf_counter() - t0)
    res = {name: statistics.median(t) for name, t in times.items()}
    ref = res.get("oidn fast aux")
    rows = [{"method": n, "time/frame": f"{t * 1e3:.0f} ms",
             "ratio (ours / oidn fast aux)": "-" if ref is None else f"{t / ref:.2f}"} for n, t in res.items()]
    print_table(rows, ["method", "time/frame", "ratio (ours / oidn fast aux)"],
                title=f"CPU time per {w}x{h} frame (bundled frame enlarged by nearest neighbour"
                      f"{'' if spp is None else f', said to be {spp} spp'}; torch threads {torch.get_num_threads()})")
    return res


def temporal_step(d: dict):
    """One ``vision denoise --temporal`` frame: :class:`vision.denoise.TemporalDenoiser` (FLNR) with a Cycles Vector
    pass of a sub-pixel camera pan (0.37, -0.21 px per frame), so every call reprojects, tests and accumulates a
    full history before the regression."""
    den = TemporalDenoiser()
    spp = d.get("spp")
    h, w = d["color"].shape[:2]
    motion = np.broadcast_to(np.array([0.37, 0.21, -0.37, -0.21], np.float32), (h, w, 4)).copy()
    guides = {k: torch.from_numpy(d[k]) for k in GUIDES if k in d}
    color, motion = torch.from_numpy(d["color"]), torch.from_numpy(motion)
    return lambda _: den(color, motion=motion, spp=spp, **guides)


def frame_size(text: str, flag: str) -> tuple[int, int]:
    """(W, H) from "WxH"."""
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"{flag} must look like 1280x720, got {text!r}") from None
    if w < 1 or h < 1:
        raise ValueError(f"{flag} must be positive, got {text!r}")
    return w, h


def time_device(args, frames, device) -> dict:
    """Time per frame of FLR (scales 1, 2, 4) and FLNR on ``device``, the first frame enlarged to ``--cuda-size``
    and its buffers resident there as (1, C, H, W) tensors, one row printed per method as it is measured
    (warm-up, host syncs per frame, per-call latency, GPU kernel and throughput time, CUDA graph or not: see
    :mod:`.denoise_device`). Returns the per-call seconds per method (an exception where a method failed)."""
    device = torch.device(device)
    w, h = frame_size(args.cuda_size, "--cuda-size")
    d = enlarge(frames[0][2], (h, w))
    t = {k: torch.from_numpy(v).permute(2, 0, 1)[None].contiguous().to(device) for k, v in d.items()
         if k != "reference" and isinstance(v, np.ndarray)}
    guides = {k: t[k] for k in GUIDES if k in t}
    calls = {("flr" if s == 1 else f"flr s={s}"): functools.partial(denoise, t["color"], **guides, model="flr",
                                                                     radius=args.radius, eps=args.eps, scale=s)
             for s in (1, 2, 4)}
    if not args.no_flnr:
        calls["flnr"] = functools.partial(denoise, t["color"], **guides, model="flnr",
                                          weights=load_flnr(getattr(args, "weights", None)))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)
    print(f"{name} time per {w}x{h} frame (buffers on the device; torch {torch.__version__}; {DD.WARMUP} warm-up "
          f"calls, then medians of {max(1, args.repeat)})", flush=True)
    res, rows = {}, []
    with torch.no_grad():
        for i, (key, fn) in enumerate(calls.items()):
            row = DD.measure(key, fn, device, max(1, args.repeat))
            DD.print_row(row, first=i == 0)
            rows.append(DD.format_row(row))
            res[key] = row.get("error", row.get("per call"))
    args.device_rows = rows
    return res


def _device_acceptance(args, res: dict) -> bool:
    """The GPU targets (per-call time at --cuda-size on the GPU: FLR <= 1 ms, FLNR <= 5 ms; FLNR's goal 2 ms)."""
    ok = True
    if args.device != "cuda":
        return ok
    for key, limit, target in (("flr", 1e-3, 1e-3), ("flnr", 5e-3, 2e-3)):
        if isinstance(res.get(key), float):
            print(f"target: {key.upper()} at {args.cuda_size} on the GPU = {res[key] * 1e3:.2f} ms per call "
                  f"(<= {limit * 1e3:.0f} ms): {'PASS' if res[key] <= limit else 'FAIL'}; goal <= "
                  f"{target * 1e3:.0f} ms: {'met' if res[key] <= target else 'not met'}")
            ok &= res[key] <= limit
    return ok


def run(args) -> int:
    """``vision bench denoise``: measure every method on every frame, print the tables and targets; exit code."""
    if args.threads:
        torch.set_num_threads(args.threads)
    spp = getattr(args, "time_spp", None)  # >= 1: the option's parser refuses less
    if spp is not None and not args.time_size:  # before the quality rows: fail fast
        raise ValueError("--time-spp says how many samples per pixel the --time-size frame has: add --time-size")
    if args.cuda_size:  # before the quality rows: fail fast
        done = _check_device_first(args)
        if done is not None:
            return done
    has_flip = _has_flip()
    frames = load_frames(args)
    real = getattr(args, "frames", None) is not None  # renderer files: no generator-set acceptance, no 1/2 rows
    ms = methods(args, upsample=_divisible(frames, 2) and not real, quarter=_divisible(frames, 4) and not real)
    per = _measure(frames, ms, args.repeat, has_flip)
    records, means = _print_quality(frames, ms, per, has_flip)
    h, w = frames[0][2]["color"].shape[:2]
    ok = True
    ok &= quality_targets(means, real, has_flip, (w, h))
    spp_records = None
    if real:
        ok &= scene_checks(per, sorted({s for s, _, _ in frames}), means)
        spp_records = spp_tables(per, frames, list(ms))
    ok &= upsampling_targets(means)
    timing = time_large(args, frames, ms) if args.time_size else None
    ok &= timing_targets(timing, args.time_size)
    cuda = None
    if args.cuda_size:
        cuda = time_device(args, frames, torch.device(args.device))
        ok &= _device_acceptance(args, cuda)
        cuda = {k: v if isinstance(v, float) else repr(v) for k, v in cuda.items()}
    if args.json:
        args.json.write_text(json.dumps({"size": [h, w], "rows": records, "per_spp": spp_records,
                                         "timing_large": timing, "timing_spp": spp,
                                         "timing_cuda": cuda,
                                         "timing_cuda_rows": getattr(args, "device_rows", None)}, indent=1))
        print(f"wrote {args.json}")
    return 0 if ok or not args.strict else 1


def _check_device_first(args):
    """Refuse ``--cuda-size`` without its device; with ``--timing-only`` time it alone and return the exit code."""
    frame_size(args.cuda_size, "--cuda-size")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--cuda-size needs a CUDA device (torch.cuda.is_available() is False here; "
                         "--device cpu times the same calls on the CPU)")
    if args.timing_only:
        frames = load_frames(args)
        cuda = time_device(args, frames, torch.device(args.device))
        ok = _device_acceptance(args, cuda)
        if args.json:
            args.json.write_text(json.dumps({"timing_cuda": {k: v if isinstance(v, float) else repr(v)
                                                             for k, v in cuda.items()},
                                             "timing_cuda_rows": args.device_rows}, indent=1))
            print(f"wrote {args.json}")
        return 0 if ok or not args.strict else 1
    return None


def _has_flip() -> bool:
    """Whether ``flip-evaluator`` is installed (else say that the HDR-FLIP column is left out)."""
    try:
        import flip_evaluator  # noqa: F401  # lazy: FLIP is an optional [bench] peer
        return True
    except ImportError:
        print("(flip-evaluator not installed: no HDR-FLIP column; pip install flip-evaluator)")
        return False


def _divisible(frames: list, u: int) -> bool:
    """Whether ``u`` divides the height and width of every frame."""
    return all(d["color"].shape[0] % u == 0 and d["color"].shape[1] % u == 0 for _, _, d in frames)


def _measure(frames: list, ms: dict, repeat: int, has_flip: bool) -> dict:
    """``{(scene, method): [metrics of each frame]}``: PSNR, SSIM, relMSE (HDR-FLIP) and the median time."""
    per: dict[tuple[str, str], list[dict]] = {}
    for scene, k, d in frames:
        for name, fn in ms.items():
            times = []
            for _ in range(max(1, repeat) if name != "noisy" else 1):
                t0 = time.perf_counter()
                with torch.no_grad():
                    out = fn(d)
                times.append(time.perf_counter() - t0)
            out = np.asarray(out, dtype=np.float32)
            rec = {"psnr": M.psnr(out, d["reference"]), "ssim": M.ssim(out, d["reference"]),
                   "relmse": M.relmse(out, d["reference"]), "time": statistics.median(times)}
            if has_flip:
                rec["flip"] = M.hdr_flip(out, d["reference"])
            per.setdefault((scene, name), []).append(rec)
    return per


def _print_quality(frames: list, ms: dict, per: dict, has_flip: bool) -> tuple:
    """Print the quality table (per scene, then the means); ``(records for --json, {method: mean metrics})``."""
    keys = ["psnr", "ssim", "relmse", "time"] + (["flip"] if has_flip else [])
    scenes = sorted({s for s, _, _ in frames})
    rows, records = [], []

    def fmt(name, scene, recs):
        mean = {k: float(np.mean([r[k] for r in recs])) for k in keys}
        records.append({"scene": scene, "method": name, "frames": len(recs), **mean})
        row = {"scene": scene, "method": name, "PSNR": f"{mean['psnr']:.2f}", "SSIM": f"{mean['ssim']:.4f}",
               "relMSE": f"{mean['relmse']:.4f}",
               "time/frame": "-" if name == "noisy" else f"{mean['time'] * 1e3:.1f} ms"}
        if has_flip:
            row["FLIP"] = f"{mean['flip']:.4f}"
        return row, mean

    means = {}
    for scene in scenes:
        for name in ms:
            rows.append(fmt(name, scene, per[(scene, name)])[0])
    for name in ms:
        recs = [r for s in scenes for r in per[(s, name)]]
        row, mean = fmt(name, "mean", recs)
        means[name] = mean
        rows.append(row)
    h, w = frames[0][2]["color"].shape[:2]
    cols = ["scene", "method", "PSNR", "SSIM", "relMSE"] + (["FLIP"] if has_flip else []) + ["time/frame"]
    print_table(rows, cols, title=f"vision bench denoise: {len(scenes)} scene(s), {len(frames)} frame(s), {w}x{h}, "
                                  f"tonemap for PSNR/SSIM: clamp [0,1] + gamma 1/2.2; relMSE eps 0.01")
    return records, means
