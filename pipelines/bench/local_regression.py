"""``vision bench local-regression``: our local linear regression against a plain PyTorch implementation.

The peer is what one writes in plain PyTorch from the formulas: all moment images stacked, window
means by separable ``avg_pool2d`` (``count_include_pad=False``: the mean over in-image pixels, our
"valid" border), the (B, H, W, K, K) systems solved by ``torch.linalg.solve``, gradients by autograd.
At ``scale > 1`` it averages the moments over s x s cells with ``avg_pool2d(ceil_mode=True)`` and
upsamples with ``F.interpolate(scale_factor=s)``, the same definition as ours. Both run in one process
on the same inputs; the table shows times, ratios (ours / peer) and the max abs difference of the
outputs (forward+backward: of the gradients w.r.t. features and target), the correctness column.
"""
from __future__ import annotations

import datetime
import gc
import json
import platform
import time

import torch
import torch.nn.functional as F

from vision.kernels import local_linear_apply, local_linear_fit
from vision.kernels.guided.reference import low_res_radius
from vision.kernels.runtime import backend_for

from .huge_radius import run_from_args
from .timing import DTYPES, format_time, print_table, resolve_device, set_threads, time_interleaved

PASSES = ("forward", "forward+backward")


def parse_size(text: str) -> tuple[int, int]:
    """``"1280x720"`` (width x height) -> (720, 1280) as (H, W); ``"512"`` -> (512, 512)."""
    try:
        w, h = (int(v) for v in text.lower().split("x")) if "x" in text.lower() else (int(text),) * 2
    except ValueError:
        raise ValueError(f"--size: {text!r} is not N or WIDTHxHEIGHT") from None
    if w < 1 or h < 1:
        raise ValueError(f"--size: {text!r} must be positive")
    return h, w


def _versions() -> dict:
    v = {"python": platform.python_version(), "torch": torch.__version__}
    for mod in ("triton", "cv2", "numpy"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - a missing optional module is just not listed
            v[mod] = None
    return v


# ---------------------------------------------------------------------------------------------- the peer

def _box_valid(x: torch.Tensor, r: int) -> torch.Tensor:
    """Mean over the in-image pixels of each (2r+1)^2 window: separable avg_pool2d without the padding."""
    if r == 0:
        return x
    k = 2 * r + 1
    lead = x.shape[:-2]
    t = x.reshape(-1, 1, *x.shape[-2:])
    t = F.avg_pool2d(t, (1, k), stride=1, padding=(0, r), count_include_pad=False)
    t = F.avg_pool2d(t, (k, 1), stride=1, padding=(r, 0), count_include_pad=False)
    return t.reshape(*lead, *t.shape[-2:])


def plain_local_linear_fit(f: torch.Tensor, p: torch.Tensor, radius: int, eps: float, scale: int = 1):
    """Plain PyTorch fit ("valid" border): every moment image, box means, ``torch.linalg.solve``."""
    B, K, H, W = f.shape
    C = p.shape[1]
    cf, cp = f.detach().mean((2, 3), keepdim=True), p.detach().mean((2, 3), keepdim=True)
    f, p = f - cf, p - cp  # centred, as any careful float32 implementation does
    z = torch.cat([f, p, (f[:, :, None] * f[:, None]).flatten(1, 2), (f[:, :, None] * p[:, None]).flatten(1, 2)], 1)
    r = radius
    if scale > 1:
        z = F.avg_pool2d(z, scale, ceil_mode=True)
        r = low_res_radius(radius, scale)
    m = _box_valid(z, r)
    h, w = m.shape[-2:]
    mf, mp = m[:, :K], m[:, K:K + C]
    mff = m[:, K + C:K + C + K * K].unflatten(1, (K, K))
    mfp = m[:, K + C + K * K:].unflatten(1, (K, C))
    sigma = mff - mf[:, :, None] * mf[:, None] + eps * torch.eye(K, dtype=f.dtype, device=f.device)[:, :, None, None]
    cov = mfp - mf[:, :, None] * mp[:, None]
    a = torch.linalg.solve(sigma.permute(0, 3, 4, 1, 2), cov.permute(0, 3, 4, 1, 2))  # (B, h, w, K, C)
    a = a.permute(0, 4, 3, 1, 2)  # (B, C, K, h, w)
    b = mp - (a * mf[:, None]).sum(2)
    ma = _box_valid(a.reshape(B, C * K, h, w), r).view(B, C, K, h, w)
    mb = _box_valid(b, r) + cp - (ma * cf[:, None]).sum(2)
    return torch.cat([ma, mb[:, :, None]], 2)


def plain_local_linear_apply(f: torch.Tensor, coeffs: torch.Tensor, scale: int = 1) -> torch.Tensor:
    H, W = f.shape[-2:]
    B, C, K1 = coeffs.shape[:3]
    up = coeffs.flatten(1, 2)
    if scale > 1:
        up = F.interpolate(up, scale_factor=scale, mode="bilinear", align_corners=False,
                           recompute_scale_factor=False)[..., :H, :W]
    up = up.unflatten(1, (C, K1))
    return (up[:, :, :-1] * f[:, None]).sum(2) + up[:, :, -1]


# ---------------------------------------------------------------------------------------------- run

def _entries(args):
    r, eps = args.radius, args.eps
    out = []
    for s in args.scales:
        out.append(("ours", "fit", s, lambda f, p, s=s: local_linear_fit(f, p, r, eps, scale=s)))
        out.append(("ours", "fit+apply", s,
                    lambda f, p, s=s: local_linear_apply(f, local_linear_fit(f, p, r, eps, scale=s), scale=s)))
        if not args.no_peer:
            out.append(("plain torch (linalg.solve)", "fit+apply", s,
                        lambda f, p, s=s: plain_local_linear_apply(f, plain_local_linear_fit(f, p, r, eps, s), s)))
    return out


def _maxdiff(a, b) -> float:
    return max(float((x.float() - y.float()).abs().max()) for x, y in zip(a, b))


def bench(args, device, dtype, h, w):
    K, C = args.features, args.targets
    gen = torch.Generator().manual_seed(0)
    feats = torch.rand(1, K, h, w, generator=gen).to(device=device, dtype=dtype)
    target = torch.rand(1, C, h, w, generator=gen).to(device=device, dtype=dtype)
    grad = torch.randn(1, C, h, w, generator=gen).to(device=device, dtype=dtype)
    cuda = torch.device(device).type == "cuda"
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    rows, outs = [], {}
    for pas in PASSES:
        backward = pas == "forward+backward"
        calls = {}
        for impl, what, s, fn in _entries(args):
            if backward and what == "fit":
                continue
            if not backward:
                def call(fn=fn):
                    with torch.no_grad():
                        return (fn(feats, target),)
            else:
                fg = feats.detach().clone().requires_grad_(True)
                pg = target.detach().clone().requires_grad_(True)

                def call(fn=fn, fg=fg, pg=pg):
                    return torch.autograd.grad(fn(fg, pg), (fg, pg), grad_outputs=grad)
            calls[(impl, what, s, pas)] = call
        # round-robin: a burst of load on a shared machine slows every entry alike
        measured = time_interleaved(calls, device=device, repeat=args.repeat, budget=5.0,
                                    max_repeat=20 if cuda else 5, min_time=0.05 if cuda else 0.0,
                                    sample_time=2e-3 if cuda else 0.0, clock=clock)
        for key, call in calls.items():
            impl, what, s, _ = key
            row = {"impl": impl, "what": what, "scale": s, "pass": pas, "seconds": None, "note": ""}
            got = measured.get(key)
            if isinstance(got, Exception) or got is None:  # one failing entry must not end the benchmark
                row["note"] = f"{type(got).__name__}: {got}".splitlines()[0][:160]
            else:
                row["seconds"] = got
                if what == "fit+apply":
                    outs[key] = tuple(t.detach() for t in call())
            rows.append(row)
        gc.collect()
    for row in rows:
        row["time"] = format_time(row["seconds"])
        if row["impl"] == "ours" or row["what"] != "fit+apply":
            continue
        ours = next((r for r in rows if (r["impl"], r["what"], r["scale"], r["pass"]) ==
                     ("ours", "fit+apply", row["scale"], row["pass"])), None)
        if ours and ours["seconds"] and row["seconds"]:
            row["ratio"] = ours["seconds"] / row["seconds"]
            ours["ratio"] = row["ratio"]
        a = outs.get(("ours", "fit+apply", row["scale"], row["pass"]))
        b = outs.get((row["impl"], row["what"], row["scale"], row["pass"]))
        if a is not None and b is not None:
            row["max_abs_diff"] = _maxdiff(a, b)
    return rows


def acceptance(rows, args, device, h, w):
    cuda = torch.device(device).type == "cuda"
    if (args.features, args.targets, args.radius) != (6, 3, 8):
        return [("acceptance not evaluated: it needs --features 6 --targets 3 --radius 8", None)]

    def t(impl, s, pas):
        for r in rows:
            if (r["impl"], r["what"], r["scale"], r["pass"]) == (impl, "fit+apply", s, pas):
                return r["seconds"]
        return None

    lines = []
    if cuda:
        ours4 = t("ours", 4, "forward")
        if (w, h) != (1920, 1080) or ours4 is None:
            return [("CUDA acceptance not evaluated: it needs --size 1920x1080 and 4 in --scales", None)]
        lines.append((f"CUDA 1920x1080 scale 4 fit+apply: {format_time(ours4)} (need <= 1 ms)", ours4 <= 1e-3))
        return lines
    if (w, h) != (1280, 720):
        return [("CPU acceptance not evaluated: it needs --size 1280x720", None)]
    peer = "plain torch (linalg.solve)"
    if 1 not in args.scales or args.no_peer:
        lines.append(("scale 1 ratio not evaluated: it needs 1 in --scales and the peer", None))
    for pas in PASSES if 1 in args.scales and not args.no_peer else ():
        o, pr = t("ours", 1, pas), t(peer, 1, pas)
        if o and pr:
            text = f"scale 1 {pas}: plain torch / ours = {pr / o:.1f}x faster (need >= 3x)"
            lines.append((text, pr / o >= 3.0))
        else:
            lines.append((f"scale 1 {pas}: ours vs plain torch not measured", False if pas == "forward" else None))
    o4 = t("ours", 4, "forward")
    if 4 not in args.scales:
        lines.append(("scale 4 time not evaluated: 4 is not in --scales", None))
    elif o4 is not None:
        lines.append((f"scale 4 forward fit+apply: {format_time(o4)} (need <= 150 ms)", o4 <= 0.150))
    else:
        lines.append(("scale 4 forward fit+apply: not measured", False))
    o4b = t("ours", 4, "forward+backward")
    if o4b is not None:
        lines.append((f"scale 4 forward+backward fit+apply: {format_time(o4b)}", None))
    return lines


def run(args) -> int:
    device, dev = resolve_device(args.device)
    if not 1 <= args.features <= 8 or not 1 <= args.targets <= 4:
        raise ValueError("--features must be 1..8 and --targets 1..4")
    if args.radius < 0 or args.eps <= 0 or any(s < 1 for s in args.scales):
        raise ValueError("--radius must be >= 0, --eps > 0 and --scales >= 1")
    if args.repeat is not None and args.repeat < 1:
        raise ValueError("--repeat must be >= 1")
    h, w = parse_size(args.size or ("1920x1080" if dev.type == "cuda" else "1280x720"))
    dtype = DTYPES[args.dtype]
    set_threads(args.threads)
    if args.huge_radius:
        return run_from_args(args, "local-regression", (h, w), dev, dtype, ("local_linear_fit", "flr"))

    cuda = dev.type == "cuda"
    name = torch.cuda.get_device_name(dev) if cuda else platform.processor() or platform.machine()
    versions = _versions()
    print(f"local regression: {w}x{h}, K={args.features}, C={args.targets}, r={args.radius}, eps={args.eps:g}, "
          f"dtype={args.dtype}, device={device} ({name}), our backend={backend_for(torch.empty(1, device=dev))}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v))
    if not cuda:
        print(f"threads: torch {torch.get_num_threads()}; clock: {args.clock}")
    print()
    rows = bench(args, dev, dtype, h, w)
    shown = [{"impl": r["impl"], "what": r["what"], "scale": r["scale"], "pass": r["pass"], "time": r["time"],
              "ours/peer": "" if "ratio" not in r else f"{r['ratio']:.2f}x",
              "max|diff|": "" if "max_abs_diff" not in r else f"{r['max_abs_diff']:.1e}", "note": r["note"]}
             for r in rows]
    print_table(shown, ["impl", "what", "scale", "pass", "time", "ours/peer", "max|diff|", "note"],
                title=f"{w}x{h}  K={args.features}  C={args.targets}  r={args.radius}")
    print("\nours/peer: ours' fit+apply time / the peer's (< 1: ours faster); max|diff|: ours vs the peer "
          "(forward: output; forward+backward: gradients w.r.t. features and target).\n")
    checks = acceptance(rows, args, device, h, w)
    failed = False
    for text, ok in checks:
        failed |= ok is False
        print(("info  " if ok is None else "PASS  " if ok else "FAIL  ") + text)
    if args.json:
        payload = {"bench": "local-regression", "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                   "device": device, "device_name": name, "size": [w, h], "features": args.features,
                   "targets": args.targets, "radius": args.radius, "eps": args.eps, "dtype": args.dtype,
                   "clock": args.clock,
                   "threads": torch.get_num_threads(), "versions": versions, "rows": rows,
                   "acceptance": [{"check": c, "pass": ok} for c, ok in checks]}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=1))
        print(f"rows saved to {args.json}")
    return 1 if (args.strict and failed) else 0
