"""``vision bench dense-head``: the token-local head and its local-linear readout against a DPT-style decoder.

All heads read features of one backbone (ViG-T by default, random weights), computed once per size
with no gradient; the heads are timed round-robin on those same features (``time_interleaved``), so
the ratios hold on a noisy machine. The "local-linear +5 guides" row is the readout with five learned
guide channels beside RGB (``learned_guides=5``), the setting with the lowest errors near edges in
BENCHMARKS.md. "forward" runs in inference mode; "fwd+bwd" is a training step of the head alone (a
mean-square loss backpropagated to the head's parameters; the frozen backbone's features need no
gradient). The token heads read the stride-16 map (the last of the four feature maps), the DPT head
all four. Images/s = batch / seconds per call.
"""
from __future__ import annotations

import datetime
import gc
import json
import platform
import time

import timm  # the [dense] extra: `vision bench dense-head` says so without it
import torch

from vision.heads import DPTHead, LocalLinearReadout, TokenLocalHead, head_parameter_count

from .timing import (DTYPES, format_time, library_versions, print_table, resolve_device, set_threads,
                     time_interleaved)

HEAD_NAMES = ("token-local", "local-linear", "local-linear +5 guides", "dpt")
LEARNED_GUIDES = 5  # the "+5 guides" row: LocalLinearReadout(..., learned_guides=5), RGB + 5 learned channels
BASELINE = "dpt"


def build_heads(dims: list[int], strides: list[int], out_channels: int, dpt_features: int) -> dict:
    dim, stride = dims[-1], strides[-1]
    return {"token-local": TokenLocalHead(dim, stride, out_channels),
            "local-linear": LocalLinearReadout(dim, stride, out_channels),
            "local-linear +5 guides": LocalLinearReadout(dim, stride, out_channels, learned_guides=LEARNED_GUIDES),
            "dpt": DPTHead(dims, out_channels, features=dpt_features, patch_size=stride, in_strides=strides)}


def bench_size(size: int, backbone, heads: dict, args, device, dtype, clock) -> list[dict]:
    gen = torch.Generator().manual_seed(size)
    image = torch.rand(args.batch, 3, size, size, generator=gen).to(device=device, dtype=dtype)
    with torch.no_grad():
        feats = [f.detach() for f in backbone(image)]
    last = feats[-1]
    forward = {"token-local": lambda: heads["token-local"](last),
               "local-linear": lambda: heads["local-linear"](last, image),
               "local-linear +5 guides": lambda: heads["local-linear +5 guides"](last, image),
               "dpt": lambda: heads["dpt"](feats, (size, size))}

    def train_step(name):
        def step():
            heads[name].zero_grad(set_to_none=True)
            out = forward[name]()
            out.float().square().mean().backward()
        return step

    calls = {(name, "forward"): forward[name] for name in HEAD_NAMES}
    with torch.inference_mode():
        times = time_interleaved(calls, device=device, repeat=args.repeat, budget=10.0, clock=clock)
    times.update(time_interleaved({(n, "fwd+bwd"): train_step(n) for n in HEAD_NAMES}, device=device,
                                  repeat=args.repeat, budget=10.0, clock=clock))
    rows = []
    for name in HEAD_NAMES:
        row = dict(size=size, head=name, batch=args.batch, params=head_parameter_count(heads[name]))
        for mode in ("forward", "fwd+bwd"):
            t = times.get((name, mode))
            if isinstance(t, Exception):
                row[f"{mode}_error"] = f"{type(t).__name__}: {t}"
            elif t is not None:
                row[f"{mode}_seconds"] = t
                row[f"{mode}_images_per_s"] = args.batch / t
        rows.append(row)
    base = next(r for r in rows if r["head"] == BASELINE)
    for r in rows:
        r["params_x_dpt"] = r["params"] / base["params"]
        for mode in ("forward", "fwd+bwd"):
            key = f"{mode}_images_per_s"
            if key in r and key in base:
                r[f"{mode}_throughput_x_dpt"] = r[key] / base[key]
    del feats, last, image
    gc.collect()
    return rows


def _print(rows: list[dict], size: int, batch: int, feature_shape) -> None:
    table = []
    for r in rows:
        cell = {"head": r["head"], "params": f"{r['params']:,}", "params x DPT": f"{r['params_x_dpt']:.3f}"}
        for mode, label in (("forward", "fwd"), ("fwd+bwd", "fwd+bwd")):
            if f"{mode}_error" in r:
                cell[f"{label} time"] = r[f"{mode}_error"][:40]
                continue
            cell[f"{label} time"] = format_time(r.get(f"{mode}_seconds"))
            cell[f"{label} img/s"] = f"{r[f'{mode}_images_per_s']:.1f}" if f"{mode}_images_per_s" in r else "-"
            x = r.get(f"{mode}_throughput_x_dpt")
            cell[f"{label} x DPT"] = f"{x:.2f}" if x is not None else "-"
        table.append(cell)
    cols = ["head", "params", "params x DPT", "fwd time", "fwd img/s", "fwd x DPT", "fwd+bwd time", "fwd+bwd img/s",
            "fwd+bwd x DPT"]
    print_table(table, cols, title=f"{size}x{size}, batch {batch}, features {feature_shape}")
    print()


def acceptance(rows: list[dict]) -> list[tuple[str, bool | None]]:
    lines = []
    for size in sorted({r["size"] for r in rows}):
        tl = next((r for r in rows if r["size"] == size and r["head"] == "token-local"), None)
        if tl is None:
            continue
        lines.append((f"{size}x{size}: token-local params = {tl['params_x_dpt']:.3f} x DPT (need <= 0.1)",
                      tl["params_x_dpt"] <= 0.1))
        for mode in ("forward", "fwd+bwd"):
            x = tl.get(f"{mode}_throughput_x_dpt")
            if x is None:
                lines.append((f"{size}x{size}: token-local {mode} throughput not measured", None))
            else:
                lines.append((f"{size}x{size}: token-local {mode} throughput = {x:.2f} x DPT (need >= 3)", x >= 3.0))
    return lines


def run(args) -> int:
    device, dev = resolve_device(args.device)
    if args.clock == "cpu" and dev.type != "cpu":
        raise ValueError("--clock cpu measures CPU time; it cannot time a CUDA device")
    for name, value in (("--batch", args.batch), ("--repeat", args.repeat), ("--threads", args.threads),
                        ("--out-channels", args.out_channels), ("--dpt-features", args.dpt_features)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1")
    if any(s < 16 or s % 16 for s in args.sizes):
        raise ValueError(f"--sizes must be multiples of 16 (the patch size), got {args.sizes}")
    set_threads(args.threads)
    dtype = DTYPES[args.dtype]
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or platform.machine()
    versions = library_versions("timm")
    print(f"dense-head bench: backbone={args.backbone}, device={device} ({name}), dtype={args.dtype}, "
          f"batch={args.batch}, K={args.out_channels}, threads={torch.get_num_threads()}, "
          f"clock={'process CPU time' if args.clock == 'cpu' else 'wall'}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v))
    print()
    torch.manual_seed(0)
    all_rows = []
    for size in args.sizes:
        kwargs = {"img_size": size} if args.backbone.startswith("vig") else {}
        backbone = timm.create_model(args.backbone, pretrained=False, features_only=True, **kwargs)
        backbone = backbone.eval().to(device=dev, dtype=dtype)
        dims, strides = backbone.feature_info.channels(), backbone.feature_info.reduction()
        heads = {k: h.to(device=dev, dtype=dtype) for k, h in
                 build_heads(dims, strides, args.out_channels, args.dpt_features).items()}
        rows = bench_size(size, backbone, heads, args, dev, dtype, clock)
        _print(rows, size, args.batch, (args.batch, dims[-1], size // strides[-1], size // strides[-1]))
        all_rows += rows
        del backbone, heads
        gc.collect()
    checks = acceptance(all_rows)
    failed = False
    for text, ok in checks:
        failed |= ok is False
        print(("info  " if ok is None else "PASS  " if ok else "FAIL  ") + text)
    if args.json:
        payload = {"bench": "dense-head", "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                   "device": device, "device_name": name, "dtype": args.dtype, "batch": args.batch,
                   "backbone": args.backbone, "out_channels": args.out_channels, "threads": torch.get_num_threads(),
                   "clock": args.clock, "versions": versions, "rows": all_rows,
                   "acceptance": [{"check": c, "pass": ok} for c, ok in checks]}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=1))
        print(f"rows saved to {args.json}")
    return 1 if (args.strict and failed) else 0
