"""``vision bench guided-filter``: our guided filter against OpenCV, kornia and a cumsum implementation.

Every implementation runs in one process on the same inputs, so the ratios (ours / peer) hold on a
noisy machine. Each peer is compared with ours in the border mode it implements (OpenCV ximgproc:
BORDER_REFLECT = our "symmetric"; kornia: "reflect"; the Deep-Guided-Filter-style cumsum filter of
``peers.py``: our default "valid"), both for speed and for the max abs difference of the outputs
(and, for forward+backward, of the gradients w.r.t. guide and src), which is the correctness column.
"""
from __future__ import annotations

import datetime
import gc
import json
import platform
import time
from dataclasses import dataclass
from typing import Callable

import cv2
from kornia.filters import guided_blur
import numpy as np
import torch

from vision.io import check_pixels
from vision.kernels import guided_filter
from vision.kernels.runtime import backend_for

from .huge_radius import run_from_args
from .peers import cumsum_guided_filter, cumsum_guided_filter_color
from .timing import (
    DTYPES, format_time, library_versions, print_table, resolve_device, set_threads, time_call,
    time_interleaved,
)

DEFAULT_SIZES = ["1024", "3840x2160"]
KINDS = {"gray": (1, 1), "colour": (3, 3)}  # guide channels, src channels
PASSES = ("forward", "forward+backward")


# ---------------------------------------------------------------------------------------------- inputs

def parse_size(text: str) -> tuple[int, int]:
    """``"1024"`` -> (1024, 1024); ``"3840x2160"`` (width x height) -> (2160, 3840) as (H, W)."""
    t = text.lower().strip()
    if t == "4k":
        t = "3840x2160"
    try:
        if "x" in t:
            w, h = (int(v) for v in t.split("x"))
        else:
            w = h = int(t)
    except ValueError:
        raise ValueError(f"--sizes: {text!r} is not N or WIDTHxHEIGHT") from None
    if w < 1 or h < 1:
        raise ValueError(f"--sizes: {text!r} must be positive")

    check_pixels("--sizes", (h, w))  # before anything is allocated
    return h, w


def make_inputs(h: int, w: int, cg: int, cs: int, device, dtype, seed: int = 0):
    """Guide, src and an output gradient: uniform noise (the filter's cost does not depend on content)."""
    gen = torch.Generator().manual_seed(seed)
    guide = torch.rand(1, cg, h, w, generator=gen)
    src = torch.rand(1, cs, h, w, generator=gen)
    grad = torch.randn(1, cs, h, w, generator=gen)
    return tuple(t.to(device=device, dtype=dtype) for t in (guide, src, grad))


# ---------------------------------------------------------------------------------------------- entries

@dataclass
class Entry:
    name: str
    border: str  # the border rule the implementation follows = our mode to compare it with
    fn: Callable | None  # (guide, src) -> out, torch tensors in and out
    ours: bool = False
    backward: bool = True
    numpy: bool = False  # OpenCV: takes HxWxC float32 arrays, converted outside the timed region
    comparable: bool = True  # same filter as ours (the channel-wise cumsum filter is not, for a colour guide)
    missing: str | None = None  # why it cannot run here


def _ours_entries(radius, eps):
    def make(border):
        return lambda g, s: guided_filter(g, s, radius, eps, border=border)

    return [Entry("ours", b, make(b), ours=True) for b in ("valid", "symmetric", "reflect")]


def _opencv_entry(radius, eps, device):
    try:
        gf = cv2.ximgproc.guidedFilter
    except AttributeError:
        return Entry("opencv ximgproc", "symmetric", None, backward=False, numpy=True,
                     missing="cv2.ximgproc not available (needs opencv-contrib-python-headless)")
    if torch.device(device).type != "cpu":
        return Entry("opencv ximgproc", "symmetric", None, backward=False, numpy=True, missing="CPU only")
    return Entry("opencv ximgproc", "symmetric", lambda g, s: gf(g, s, radius, eps), backward=False, numpy=True)


def _kornia_entry(radius, eps):
    def fn(g, s):
        return guided_blur(g, s, 2 * radius + 1, eps, border_type="reflect", separable=True)

    return Entry("kornia separable", "reflect", fn)


def _cumsum_entries(radius, eps, kind):
    entries = [Entry("cumsum DGF-style" + (" (channel-wise)" if kind == "colour" else ""), "valid",
                     lambda g, s: cumsum_guided_filter(g, s, radius, eps), comparable=kind == "gray")]
    if kind == "colour":
        entries.append(Entry("cumsum 3x3 colour", "valid", lambda g, s: cumsum_guided_filter_color(g, s, radius, eps)))
    return entries


def _to_numpy_hwc(t: torch.Tensor):
    a = t[0].detach().float().cpu().numpy().transpose(1, 2, 0)
    return a[:, :, 0].copy() if a.shape[2] == 1 else a.copy()


def _from_numpy_hwc(a, like: torch.Tensor) -> torch.Tensor:
    t = torch.from_numpy(a if a.ndim == 3 else a[:, :, None]).permute(2, 0, 1)[None]
    return t.to(like.device)


# ---------------------------------------------------------------------------------------------- timing

def _describe(err) -> str:
    if err is None:
        return "not measured"
    return f"{type(err).__name__}: {err}".splitlines()[0][:160]


def _make_call(e: Entry, guide, src, grad, backward: bool):
    """The timed callable of one entry. OpenCV gets HxWxC float32 arrays made here, outside the timing."""
    if e.numpy:
        g_np, s_np = _to_numpy_hwc(guide), _to_numpy_hwc(src)
        return lambda: e.fn(g_np, s_np)
    if not backward:
        def call():
            with torch.no_grad():
                return e.fn(guide, src)
        return call
    g = guide.detach().clone().requires_grad_(True)
    s = src.detach().clone().requires_grad_(True)

    def call():
        out = e.fn(g, s)
        return torch.autograd.grad(out, (g, s), grad_outputs=grad.to(out.dtype))
    return call


def copy_bandwidth(device, nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + bytes written per second)."""
    n = nbytes // 4
    x = torch.empty(n, dtype=torch.float32, device=device).fill_(1.0)
    y = torch.empty_like(x)
    t = time_call(lambda: y.copy_(x), device=device, warmup=3, repeat=20)
    del x, y
    return 2 * nbytes / t / 1e9


def _maxdiff(a, b) -> float:
    return max(float((x.float() - y.float()).abs().max()) for x, y in zip(a, b))


def _fmt_ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _fmt_diff(v) -> str:
    return v if isinstance(v, str) else ("-" if v is None else f"{v:.1e}")


# ---------------------------------------------------------------------------------------------- one case

def bench_case(h, w, kind, args, device, dtype, copy_gbs):
    """Time and compare every entry at one size and guide kind; returns {pass: [row dicts]}."""
    cg, cs = KINDS[kind]
    guide, src, grad = make_inputs(h, w, cg, cs, device, dtype)
    r, eps = args.radius, args.eps
    entries = (_ours_entries(r, eps) + [_opencv_entry(r, eps, device), _kornia_entry(r, eps)]
               + _cumsum_entries(r, eps, kind))
    budget = 2.0 if args.quick else 5.0
    cuda = torch.device(device).type == "cuda"
    if args.repeat is not None:
        repeat = args.repeat
    else:  # CPU default: as many as fit the budget (the first call includes no compilation there)
        repeat = (10 if args.quick else 20) if cuda else (3 if args.quick else None)
    esize = guide.element_size()
    results = {}
    for pas in PASSES:
        backward = pas == "forward+backward"
        calls, errors = {}, {}
        for e in entries:
            key = (e.name, e.border)
            if e.missing or e.fn is None:
                errors[key] = e.missing
            elif backward and not e.backward:
                errors[key] = "forward only"
            else:
                calls[key] = _make_call(e, guide, src, grad, backward)
        # Round-robin over the entries, so that load from elsewhere on a shared machine hits all alike.
        measured = time_interleaved(calls, device=device, repeat=repeat, budget=budget,
                                    max_repeat=20 if cuda else 5, min_time=0.05 if cuda else 0.0,
                                    sample_time=2e-3 if cuda else 0.0,
                                    clock=time.process_time if args.clock == "cpu" else time.perf_counter)
        times, outs = {}, {}
        for key, call in calls.items():
            got = measured.get(key)
            if isinstance(got, Exception) or got is None:
                errors[key] = _describe(got)
                continue
            times[key] = got
            try:
                res = call()
                outs[key] = (_from_numpy_hwc(res, src),) if isinstance(res, np.ndarray) else \
                    tuple(t.detach() for t in (res if isinstance(res, tuple) else (res,)))
            except Exception as err:  # noqa: BLE001
                errors[key] = _describe(err)
        gc.collect()
        rows = []
        for e in entries:
            key = (e.name, e.border)
            t = times.get(key)
            row = {"size": f"{w}x{h}", "guide": kind, "pass": pas, "impl": e.name, "border": e.border,
                   "seconds": t, "time": format_time(t), "note": errors.get(key) or ""}
            t_same, t_valid = times.get(("ours", e.border)), times.get(("ours", "valid"))
            if not e.ours:
                row["ratio_same_border"] = t_same / t if t and t_same else None
                row["ratio_valid"] = t_valid / t if t and t_valid else None
                ref = outs.get(("ours", e.border))
                if not e.comparable:
                    row["max_abs_diff"] = "n/a (other filter)"
                elif key in outs and ref is not None:
                    row["max_abs_diff"] = _maxdiff(outs[key], ref)
            if e.ours and t and cuda:
                moved = (guide.numel() + 2 * src.numel() if not backward
                         else 2 * guide.numel() + 4 * src.numel()) * esize  # see EPILOG for the traffic model
                row["min_bytes"] = moved
                row["gbs"] = moved / t / 1e9
                row["roofline_seconds"] = moved / (args.peak_gbs * 1e9)
                row["pct_peak"] = 100 * row["gbs"] / args.peak_gbs
                row["pct_copy"] = 100 * row["gbs"] / copy_gbs if copy_gbs else None
            rows.append(row)
        results[pas] = rows
        del outs
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    return results


def _print_case(rows, title, cuda):
    columns = ["impl", "border", "time", "ours/peer", "valid/peer", "max|diff|"]
    if cuda:
        columns += ["GB/s", "%peak", "%copy", "roofline"]
    columns.append("note")
    shown = []
    for r in rows:
        d = {"impl": r["impl"], "border": r["border"], "time": r["time"], "note": r["note"],
             "ours/peer": "" if r["impl"] == "ours" else _fmt_ratio(r.get("ratio_same_border")),
             "valid/peer": "" if r["impl"] == "ours" else _fmt_ratio(r.get("ratio_valid")),
             "max|diff|": "" if r["impl"] == "ours" else _fmt_diff(r.get("max_abs_diff"))}
        if "gbs" in r:
            d.update({"GB/s": f"{r['gbs']:.0f}", "%peak": f"{r['pct_peak']:.1f}",
                      "%copy": "-" if r.get("pct_copy") is None else f"{r['pct_copy']:.1f}",
                      "roofline": format_time(r["roofline_seconds"])})
        shown.append(d)
    print_table(shown, columns, title=title)
    print()


# ---------------------------------------------------------------------------------------------- acceptance

def acceptance(all_rows, args, device) -> list[tuple[str, bool | None]]:
    """The CPU checks of the foundation issue at 1024x1024, r = 8 (forward pass)."""
    lines: list[tuple[str, bool | None]] = []
    if torch.device(device).type != "cpu" or args.radius != 8 or not any(r["size"] == "1024x1024" for r in all_rows):
        return [("CPU acceptance not evaluated: it needs --device cpu, 1024 in --sizes and --radius 8", None)]

    def t(kind, pas, impl, border):
        for r in all_rows:
            if (r["size"], r["guide"], r["pass"], r["impl"], r["border"]) == ("1024x1024", kind, pas, impl, border):
                return r["seconds"]
        return None

    for kind in KINDS:
        ours_sym, ours_valid, cv = (t(kind, "forward", "ours", "symmetric"), t(kind, "forward", "ours", "valid"),
                                    t(kind, "forward", "opencv ximgproc", "symmetric"))
        if ours_sym and cv:
            ok = ours_sym <= 1.5 * cv
            extra = f"; default border 'valid': {ours_valid / cv:.2f}x" if ours_valid else ""
            lines.append((f"{kind:6s} forward: ours('symmetric') / OpenCV = {ours_sym / cv:.2f}x (need <= 1.50x){extra}", ok))
        else:
            lines.append((f"{kind:6s} forward: ours vs OpenCV not measured", False))
    for pas in PASSES:
        for kind in KINDS:
            ours_ref, ours_valid, ko = (t(kind, pas, "ours", "reflect"), t(kind, pas, "ours", "valid"),
                                        t(kind, pas, "kornia separable", "reflect"))
            if ours_ref and ko:
                ok = ko / ours_ref >= 5.0
                extra = f"; default border 'valid': {ko / ours_valid:.1f}x" if ours_valid else ""
                text = f"{kind:6s} {pas}: kornia / ours('reflect') = {ko / ours_ref:.1f}x faster (need >= 5x){extra}"
                # The acceptance is on the forward pass (OpenCV has no backward); fwd+bwd is reported alongside.
                lines.append((text, ok) if pas == "forward" else (f"{text}: {'met' if ok else 'NOT met'}", None))
            else:
                lines.append((f"{kind:6s} {pas}: ours vs kornia not measured", False if pas == "forward" else None))
    return lines


# ---------------------------------------------------------------------------------------------- run

def run(args) -> int:
    device, dev = resolve_device(args.device)
    if args.radius < 0 or args.eps <= 0:
        raise ValueError("--radius must be >= 0 and --eps > 0")
    if args.clock == "cpu" and dev.type != "cpu":
        raise ValueError("--clock cpu measures CPU time; it cannot time a CUDA device")
    if args.repeat is not None and args.repeat < 1:
        raise ValueError("--repeat must be >= 1")
    sizes = [parse_size(s) for s in (args.sizes or (["1024"] if args.quick else DEFAULT_SIZES))]
    dtype = DTYPES[args.dtype]
    set_threads(args.threads)
    if args.huge_radius:
        return run_from_args(args, "guided-filter", sizes[0], dev, dtype, ("box", "guided"))

    cuda = dev.type == "cuda"
    saved_tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    versions = library_versions("kornia", "cv2", "triton", "numpy")
    try:
        if cuda:
            # kornia's box filter is a conv2d: with TF32 on, cuDNN may round the inputs to 10 bits and
            # pick slow algorithms for large kernels (notes, section 4). Pin both off for every entry.
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        copy_gbs = copy_bandwidth(dev) if cuda else None
        probe = torch.empty(1, device=dev)
        cv_threads = cv2.getNumThreads()
        name = torch.cuda.get_device_name(dev) if cuda else platform.processor() or platform.machine()
        print(f"guided filter: r={args.radius} (window {2 * args.radius + 1}), eps={args.eps:g}, dtype={args.dtype}, "
              f"device={device} ({name}), our backend={backend_for(probe)}")
        print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v))
        if cuda:
            print(f"device-to-device copy: {copy_gbs:.0f} GB/s; nominal peak --peak-gbs {args.peak_gbs:.0f} GB/s; TF32 off")
        else:
            print(f"threads: torch {torch.get_num_threads()}, opencv {cv_threads}; clock: "
                  + ("process CPU time (all threads summed)" if args.clock == "cpu" else "wall"))
        print()
        all_rows = []
        for h, w in sizes:
            for kind in KINDS:
                res = bench_case(h, w, kind, args, dev, dtype, copy_gbs)
                for pas, rows in res.items():
                    _print_case(rows, f"{w}x{h}  {kind} guide ({KINDS[kind][0]} ch) + src ({KINDS[kind][1]} ch)  {pas}",
                                cuda)
                    all_rows += rows
        print("ours/peer: ours in the peer's border mode / peer; valid/peer: ours with the default border / peer;\n"
              "max|diff|: ours in the peer's border mode vs the peer (forward+backward: gradients w.r.t. guide, src).")
        if dtype != torch.float32:
            print(f"{args.dtype}: the cumsum peers compute in {args.dtype} as Deep Guided Filter would (their long "
                  "prefix sums lose precision, so their max|diff| is theirs); ours and kornia accumulate in float32; "
                  "OpenCV runs on float32 copies.")
        print()
        checks = acceptance(all_rows, args, device)
        failed = False
        for text, ok in checks:
            tag = "info  " if ok is None else ("PASS  " if ok else "FAIL  ")
            failed |= ok is False
            print(f"{tag}{text}")
    finally:
        if cuda:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved_tf32
    if args.json:
        payload = {"bench": "guided-filter", "clock": args.clock, "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                   "device": device, "device_name": name, "dtype": args.dtype, "radius": args.radius,
                   "eps": args.eps, "copy_gbs": copy_gbs, "peak_gbs": args.peak_gbs,
                   "threads": torch.get_num_threads(), "versions": versions, "rows": all_rows,
                   "acceptance": [{"check": c, "pass": ok} for c, ok in checks]}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=1))
        print(f"rows saved to {args.json}")
    return 1 if (args.strict and failed) else 0
