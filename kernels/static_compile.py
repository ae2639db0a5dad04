"""Compile a Triton kernel for a GPU architecture on a machine without a GPU, and read what it costs.

The interpreter (``TRITON_INTERPRET=1``) runs a kernel's Python, not Triton's compiler, so neither spills nor
compile time show on CPU. ``compile_static`` runs the real compiler for any ``sm_<arch>`` (80: A100, 86: RTX 30,
89: RTX 40 / L4, 90: H100/H200) with the ``ptxas`` that ships inside the triton wheel and reads the cubin's
resource usage with its ``cuobjdump``:
registers per thread, stack bytes (spills and local arrays), shared memory per block (static plus the dynamic
scratch Triton requests at launch), and the compile time.

Call it in a process **without** ``TRITON_INTERPRET`` (the kernels must be real ``JITFunction`` objects);
tests do this in a subprocess. ``compile_many`` does it for a list of jobs in a pool of worker processes
(``python -m vision.kernels.static_compile`` reads jobs as JSON lines and prints results). It imports Triton, so
import it only where Triton is installed (``vision bench compile`` checks first). Example::

    from vision.kernels.static_compile import compile_static
    from vision.kernels.box.sliding import _sliding_box_kernel
    r = compile_static(_sliding_box_kernel, dict(R=8, MODE=1, KIND=0, BWI=64, CH=64, RB=1), num_warps=1)
    print(r.registers, r.stack_bytes, f"{r.seconds:.1f} s")
"""
from __future__ import annotations

import importlib
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@dataclass(frozen=True)
class StaticCompile:
    name: str
    registers: int
    stack_bytes: int    # local memory per thread: register spills and local arrays; 0 is the goal
    shared_bytes: int   # per block: the cubin's static shared memory plus the dynamic shared memory Triton requests
    seconds: float      # Triton front end + LLVM + ptxas, one cold compile

    def __str__(self) -> str:
        return (f"{self.name}: {self.registers} regs, {self.stack_bytes} B stack, {self.shared_bytes} B shared, "
                f"{self.seconds:.1f} s")


def _tool(name: str) -> str:
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def default_signature(fn, constexprs: dict, overrides: dict | None = None) -> dict:
    """Pointers ``*_ptr`` -> ``*fp32``, names in ``constexprs`` -> ``constexpr``, everything else ``i32``."""
    sig = {}
    for n in fn.arg_names:
        sig[n] = "constexpr" if n in constexprs else "*fp32" if n.endswith("_ptr") else "i32"
    sig.update(overrides or {})
    return sig


def compile_static(fn, constexprs: dict, signature: dict | None = None, num_warps: int = 4,
                   num_stages: int = 3, arch: int = 90, aligned: bool = False) -> StaticCompile:
    """Compile ``fn`` for ``sm_<arch>`` without a GPU; ``signature`` overrides ``default_signature``'s guesses.

    ``aligned``: tell the compiler every pointer is 16-byte aligned, as Triton's launcher does for tensors from
    PyTorch's allocator (the binary a GPU runs for whole tensors; vectorised loads may need more registers)."""
    fn = getattr(fn, "fn", fn) if not hasattr(fn, "arg_names") else fn
    sig = default_signature(fn, constexprs, signature)
    t0 = time.perf_counter()
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names)
             if aligned and sig[n].startswith("*")}
    compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=dict(constexprs), attrs=attrs),
                              target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": num_warps, "num_stages": num_stages})
    seconds = time.perf_counter() - t0
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(compiled.asm["cubin"])
    try:
        usage = subprocess.run([_tool("cuobjdump"), "--dump-resource-usage", f.name],
                               capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)
    field = lambda key: int(re.search(rf"\b{key}:(\d+)", usage).group(1))  # noqa: E731
    # Triton's scratch (scans, reductions, layout conversions, pipelining buffers) is dynamic shared memory that
    # the launch requests (metadata.shared); the cubin's SHARED is only the static part (1 KB reserved on sm_90)
    shared = field("SHARED") + int(getattr(compiled.metadata, "shared", 0) or 0)
    return StaticCompile(fn.__name__, field("REG"), field("STACK") + field("LOCAL"), shared, seconds)


def _cpu_seconds() -> float:
    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def _job_result(job: dict) -> dict:
    mod, name = job["kernel"].split(":")
    fn = getattr(importlib.import_module(mod), name)
    t0, c0 = time.perf_counter(), _cpu_seconds()
    try:
        r = compile_static(fn, dict(job["constexprs"]), dict(job.get("signature") or {}), job["num_warps"],
                           job.get("num_stages", 3), job["arch"], job.get("aligned", False))
    except Exception as e:  # a config that does not compile is a result too
        return dict(job, error=f"{type(e).__name__}: {str(e)[-500:]}", seconds=time.perf_counter() - t0)
    # cpu_seconds (this process and its ptxas / cuobjdump children) does not grow when other work shares the cores
    return dict(job, registers=r.registers, stack_bytes=r.stack_bytes, shared_bytes=r.shared_bytes,
                seconds=r.seconds, cpu_seconds=_cpu_seconds() - c0)


def compile_many(jobs: list[dict], workers: int = 2, cache_dir: str | None = None, timeout: float = 3600) -> list:
    """Compile ``jobs`` (dicts: kernel "module:function", constexprs and signature as (name, value) pairs,
    num_warps, num_stages, arch, optionally aligned) in ``workers`` processes started without
    ``TRITON_INTERPRET``; returns one dict per job, in order, with registers, stack_bytes, shared_bytes, seconds
    (wall) and cpu_seconds added (or ``error``).

    ``cache_dir`` (TRITON_CACHE_DIR of the workers; a fresh folder gives cold compile times) defaults to a new
    temporary folder. Jobs are dealt round-robin, so workers get similar mixes."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "VISION_BACKEND")}
    with tempfile.TemporaryDirectory(prefix="vision-static-") as tmp:
        env["TRITON_CACHE_DIR"] = cache_dir or os.path.join(tmp, "cache")
        shares = [s for s in (list(range(i, len(jobs), workers)) for i in range(max(1, workers))) if s]
        procs = []
        for n, share in enumerate(shares):  # files, not pipes: no worker ever blocks on a full pipe
            with open(os.path.join(tmp, f"jobs{n}"), "w") as f:
                f.write("".join(json.dumps(jobs[i]) + "\n" for i in share))
            with open(os.path.join(tmp, f"jobs{n}")) as fin, open(os.path.join(tmp, f"out{n}"), "w") as fout:
                procs.append(subprocess.Popen([sys.executable, "-m", "vision.kernels.static_compile"], env=env,
                                              stdin=fin, stdout=fout, stderr=subprocess.STDOUT, text=True))
        results: list = [None] * len(jobs)
        for n, (proc, share) in enumerate(zip(procs, shares)):
            rc = proc.wait(timeout)
            with open(os.path.join(tmp, f"out{n}")) as f:
                lines = f.read().splitlines()
            got = [json.loads(x[len(_MARK):]) for x in lines if x.startswith(_MARK)]
            if rc != 0 or len(got) != len(share):
                raise RuntimeError("static compile worker failed: " + "\n".join(lines)[-3000:])
            for i, r in zip(share, got):
                results[i] = r
    return results


_MARK = "STATIC-COMPILE "

if __name__ == "__main__":
    for line in sys.stdin:
        if line.strip():
            print(_MARK + json.dumps(_job_result(json.loads(line))), flush=True)
