"""``vision bench compile``: what each Triton kernel costs to compile for a GPU, on a machine without one.

Compiles the launch configurations the launchers reach (``vision.kernels.launch_configs``: one per kernel with
``--representative``, the default, or every one) for each ``--arch`` with Triton's real compiler and the
``ptxas`` inside the triton wheel (``vision.kernels.static_compile.compile_many``, cold cache, in worker
processes), and prints registers, spill bytes, shared memory and compile CPU seconds per configuration. CPU
seconds (the worker and its ptxas children) do not grow when other work shares the cores, so the figure holds on
a busy machine. The target: every kernel compiles in at most 10 CPU seconds (a first launch on a user's GPU pays
it once), with no spills. The unit tests check spills and registers; the time lives here.
"""
from __future__ import annotations

import json

from vision.kernels.launch_configs import jobs, launch_configs, problems, representative, table
from vision.kernels.static_compile import compile_many

TARGET_CPU_S = 10.0


def run(args) -> int:
    if args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")
    try:
        import triton  # noqa: F401  # lazy: Triton loads only for the GPU kernels (Linux x86_64 only)
    except ImportError:
        print("vision bench compile: unavailable here: triton does not import")
        return 2

    work = []
    for arch in args.arch or [90]:
        configs = launch_configs(arch)
        if args.kernel:
            configs = [c for c in configs if args.kernel in c.kernel]
        work += jobs(configs if args.all else representative(configs), arch)
    if not work:
        raise ValueError(f"--kernel {args.kernel!r} matches no kernel (their names: vision.kernels.launch_configs)")
    print(f"compiling {len(work)} configurations in {args.workers} processes (cold cache) ...", flush=True)
    try:
        results = compile_many(work, workers=args.workers)
    except RuntimeError as e:  # a triton install without ptxas / cuobjdump
        print(f"vision bench compile: unavailable here: {str(e)[-300:]}")
        return 2
    print(table(results))
    bad = {r["label"]: why for r in results if (why := problems(r))}
    cpu = [r.get("cpu_seconds", r["seconds"]) for r in results if "error" not in r]
    slowest = max(cpu, default=0.0)
    print(f"\n{len(results)} compiles, {sum(cpu):.0f} CPU seconds in all; slowest {slowest:.1f} CPU s "
          f"(target <= {TARGET_CPU_S:.0f} s per kernel: {'met' if slowest <= TARGET_CPU_S else 'missed'})")
    for label, why in bad.items():
        print(f"  {label}: {'; '.join(why)}")
    print(f"limits of each architecture: {'met' if not bad else f'missed by {len(bad)} configurations'}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0 if not bad else 1
