"""``vision bench spl``: our Structure Preservation Loss against an unfused cumsum implementation of the same math.

The peer is written here from the published code's description (Gong et al., WACV 2026, reference
code ``guided_filter_pytorch/spl.py``): every window mean is a cumsum box filter divided by the valid
count N, the coefficients a, b (and a', b') are detached, the residual is the expansion
``a^2 <S^2> + b^2 + <E^2> + 2ab<S> - 2a<SE> - 2b<E>`` (and its reverse), and autograd differentiates
through the cumsums. It computes the same loss as ours (default "valid" border, stop-gradient,
bidirectional, mean), so the max |diff| columns compare values and gradients.

Rows: loss + gradient w.r.t. the edit at each size; and a whole ``restore_structure`` run (SGD,
momentum 0.9, SPL + chroma loss) against the same loop built on the peer loss.
"""
from __future__ import annotations

import datetime
import json
import platform
import time

import torch

from vision.kernels import structure_loss
from vision.kernels.runtime import backend_for
from vision.kernels.spl.defaults import SPL_DEFAULTS
from vision.losses import color_preservation_loss
from vision.restore import restore_structure

from .peers import cumsum_box_mean, window_count
from .timing import (
    format_time, library_versions, print_table, resolve_device, set_threads, synchronize,
    time_interleaved,
)

DEFAULT_SIZES = ["512", "1024"]


# ---------------------------------------------------------------------------------------------- the peer

def unfused_structure_loss(source: torch.Tensor, edited: torch.Tensor, radius: int = SPL_DEFAULTS.radius,
                           eps: float = SPL_DEFAULTS.eps) -> torch.Tensor:
    """Bidirectional SPL with detached coefficients, every mean a cumsum box filter, autograd backward."""
    S = source.mean(1, keepdim=True)
    E = edited.mean(1, keepdim=True)
    n = window_count(S, radius)

    def box(t):
        return cumsum_box_mean(t, radius, n)

    mS, mE, mSS, mEE, mSE = box(S), box(E), box(S * S), box(E * E), box(S * E)
    cov = mSE - mS * mE
    a = (cov / (mSS - mS * mS + eps)).detach()
    b = (mE - a * mS).detach()
    a2 = (cov / (mEE - mE * mE + eps)).detach()
    b2 = (mS - a2 * mE).detach()
    d = a * a * mSS + b * b + mEE + 2 * a * b * mS - 2 * a * mSE - 2 * b * mE
    d2 = a2 * a2 * mEE + b2 * b2 + mSS + 2 * a2 * b2 * mE - 2 * a2 * mSE - 2 * b2 * mS
    return (d + d2).mean()


def unfused_restore(source, edited, steps: int, radius: int, eps: float):
    """The published optimisation loop on the peer loss: SGD(lr 1, momentum 0.9), SPL 1e4 + CPL 1e3."""
    x = edited.clone().requires_grad_(True)
    opt = torch.optim.SGD([x], lr=1.0, momentum=0.9)
    scale = source.shape[0] * source.shape[-2] * source.shape[-1] / (512 * 512)  # same objective as ours
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = scale * (1e4 * unfused_structure_loss(source, x, radius, eps)
                        + 1e3 * color_preservation_loss(edited, x))
        loss.backward()
        opt.step()
        with torch.no_grad():
            x.clamp_(0.0, 1.0)
    return x.detach()


# ---------------------------------------------------------------------------------------------- inputs

def parse_size(text: str) -> tuple[int, int]:
    t = text.lower().strip()
    try:
        w, h = (int(v) for v in t.split("x")) if "x" in t else (int(t), int(t))
    except ValueError:
        raise ValueError(f"size {text!r} is not N or WIDTHxHEIGHT") from None
    if w < 1 or h < 1:
        raise ValueError(f"size {text!r} must be positive")
    return h, w


def make_pair(h: int, w: int, device, seed: int = 0):
    """A smooth random source and a tone-edited, noisy copy of it (SPL's cost does not depend on content)."""
    gen = torch.Generator().manual_seed(seed)
    base = torch.rand(1, 3, (h + 7) // 8, (w + 7) // 8, generator=gen)
    src = torch.nn.functional.interpolate(base, size=(h, w), mode="bilinear", align_corners=False)
    src = (src + 0.05 * torch.rand(1, 3, h, w, generator=gen)).clamp(0, 1)
    edit = (0.7 * src ** 1.3 + 0.1 + 0.03 * torch.randn(1, 3, h, w, generator=gen)).clamp(0, 1)
    return src.to(device), edit.to(device)


# ---------------------------------------------------------------------------------------------- run

def _loss_and_grad(fn, src, edit):
    def call():
        x = edit.detach().clone().requires_grad_(True)
        loss = fn(src, x)
        (g,) = torch.autograd.grad(loss, x)
        return loss.detach(), g
    return call


def run(args) -> int:
    """``vision bench spl``: time our SPL loss and restore against the unfused reference, print the checks."""
    device, dev = resolve_device(args.device)
    _check_args(args, dev)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    set_threads(args.threads)
    cuda = dev.type == "cuda"
    sizes = [parse_size(s) for s in (args.sizes or DEFAULT_SIZES)]
    r, eps = args.radius, args.eps
    name = torch.cuda.get_device_name(dev) if cuda else (platform.processor() or platform.machine())
    versions = library_versions("triton", "kornia", "cv2", "numpy")
    _print_header(args, device, dev, name, versions)
    budget, repeat = (2.0 if cuda else 6.0), args.repeat
    rows, checks = _loss_rows(sizes, dev, device, r, eps, repeat, budget, clock)
    row, check = _restore_row(args, dev, device, r, eps, repeat, budget, clock)
    rows.append(row)
    checks.append(check)
    _print_rows(rows)
    failed = False
    for text, ok in checks:
        failed |= ok is False
        print(("info  " if ok is None else ("PASS  " if ok else "FAIL  ")) + text)
    if args.json:
        date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        payload = {"bench": "spl", "clock": args.clock, "date": date,
                   "device": device, "device_name": name, "radius": r, "eps": eps, "steps": args.steps,
                   "threads": torch.get_num_threads(), "versions": versions, "rows": rows,
                   "acceptance": [{"check": c, "pass": ok} for c, ok in checks]}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=1))
        print(f"rows saved to {args.json}")
    synchronize(device)
    return 1 if (args.strict and failed) else 0


def _check_args(args, dev) -> None:
    """Refuse out-of-range ``--steps``, ``--radius``, ``--eps``, ``--repeat`` and a CPU clock on a GPU."""
    if args.steps < 1 or args.radius < 0 or args.eps <= 0:
        raise ValueError("--steps must be >= 1, --radius >= 0 and --eps > 0")
    if args.repeat is not None and args.repeat < 1:
        raise ValueError("--repeat must be >= 1")
    if args.clock == "cpu" and dev.type != "cpu":
        raise ValueError("--clock cpu measures CPU time; it cannot time a CUDA device")


def _print_header(args, device: str, dev, name: str, versions: dict) -> None:
    """Print the settings, the device and our backend on it, the threads, the clock and the library versions."""
    probe = torch.empty(1, device=dev)
    print(f"structure preservation loss: r={args.radius} (window {2 * args.radius + 1}), eps={args.eps:g}, "
          f"bidirectional, stop-gradient, device={device} ({name}), our backend={backend_for(probe)}, "
          f"threads={torch.get_num_threads()}, "
          f"clock={'process CPU time (all threads summed)' if args.clock == 'cpu' else 'wall'}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v))
    print()


def _loss_rows(sizes: list, dev, device: str, r: int, eps: float, repeat, budget: float, clock) -> tuple:
    """``(rows, checks)``: loss + gradient, ours against the unfused loss, at each size (h, w)."""
    cuda = dev.type == "cuda"
    rows, checks = [], []
    need = 5.0 if cuda else 2.0
    for h, w in sizes:
        src, edit = make_pair(h, w, dev)
        ours = _loss_and_grad(lambda s, x: structure_loss(s, x, r, eps), src, edit)
        peer = _loss_and_grad(lambda s, x: unfused_structure_loss(s, x, r, eps), src, edit)
        t = time_interleaved({"ours": ours, "peer": peer}, device=device, repeat=repeat, budget=budget,
                             min_time=0.1 if cuda else 0.0, sample_time=0.05 if cuda else 0.0, clock=clock)
        (l1, g1), (l2, g2) = ours(), peer()
        dl = abs(float(l1) - float(l2)) / max(abs(float(l2)), 1e-30)
        dg = float((g1 - g2).abs().max() / g2.abs().max().clamp_min(1e-30))
        row = {"case": f"loss+grad {w}x{h}", "ours_s": _sec(t["ours"]), "peer_s": _sec(t["peer"]),
               "rel_diff_loss": dl, "rel_diff_grad": dg}
        row["speedup"] = row["peer_s"] / row["ours_s"] if row["ours_s"] and row["peer_s"] else None
        row["note"] = "; ".join(f"{k}: {v}" for k, v in t.items() if isinstance(v, Exception))
        rows.append(row)
        sp = row["speedup"]
        checks.append((f"loss+grad {w}x{h}: ours {sp:.2f}x faster than unfused (need >= {need:g}x)"
                       if sp else f"loss+grad {w}x{h}: not measured", bool(sp and sp >= need)))
        del src, edit
    return rows, checks


def _restore_row(args, dev, device: str, r: int, eps: float, repeat, budget: float, clock) -> tuple:
    """``(row, check)``: ``--steps`` of restore_structure against the unfused loop at ``--restore-size``."""
    cuda = dev.type == "cuda"
    h, w = parse_size(args.restore_size)
    src, edit = make_pair(h, w, dev, seed=1)
    calls = {"ours": lambda: restore_structure(src, edit, steps=args.steps, radius=r, eps=eps),
             "peer": lambda: unfused_restore(src, edit, args.steps, r, eps)}
    t = time_interleaved(calls, device=device, repeat=repeat if repeat else (5 if cuda else 1), budget=budget,
                         clock=clock)
    out1, out2 = calls["ours"](), calls["peer"]()
    row = {"case": f"restore {args.steps} steps {w}x{h}", "ours_s": _sec(t["ours"]), "peer_s": _sec(t["peer"]),
           "rel_diff_loss": None, "rel_diff_grad": None,
           "max_abs_diff_image": float((out1 - out2).abs().max())}
    row["speedup"] = row["peer_s"] / row["ours_s"] if row["ours_s"] and row["peer_s"] else None
    row["note"] = "; ".join(f"{k}: {v}" for k, v in t.items() if isinstance(v, Exception))
    if cuda and (h, w) == (512, 512) and args.steps == 100:
        ok = row["ours_s"] is not None and row["ours_s"] <= 0.050
        return row, (f"restore 100 steps 512x512: {format_time(row['ours_s'])} (need <= 50 ms)", ok)
    return row, (f"restore {args.steps} steps {w}x{h}: ours {row['speedup']:.2f}x faster than the unfused loop"
                 if row["speedup"] else "restore: not measured", None)


def _print_rows(rows: list) -> None:
    """Print the timing table and what its difference columns mean."""
    shown = [{"case": x["case"], "ours": format_time(x["ours_s"]), "unfused cumsum": format_time(x["peer_s"]),
              "peer/ours": "-" if x["speedup"] is None else f"{x['speedup']:.2f}x",
              "rel diff loss": "-" if x["rel_diff_loss"] is None else f"{x['rel_diff_loss']:.1e}",
              "rel diff grad": "-" if x["rel_diff_grad"] is None else f"{x['rel_diff_grad']:.1e}",
              "max|diff| image": f"{x['max_abs_diff_image']:.1e}" if "max_abs_diff_image" in x else "-",
              "note": x["note"]} for x in rows]
    print_table(shown, ["case", "ours", "unfused cumsum", "peer/ours", "rel diff loss", "rel diff grad",
                        "max|diff| image", "note"])
    print()
    print("rel diff: |ours - peer| / |peer| (loss) and max|g_ours - g_peer| / max|g_peer| (gradient w.r.t. the edit);\n"
          "max|diff| image: largest pixel difference of the two restored images (same objective, float32 rounding).")
    print()


def _sec(v):
    return None if isinstance(v, Exception) or v is None else float(v)
