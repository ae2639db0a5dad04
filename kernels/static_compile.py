"""Compile a Triton kernel for a GPU architecture on a machine without a GPU, and read what it costs.

The interpreter (``TRITON_INTERPRET=1``) runs a kernel's Python, not Triton's compiler, so neither spills nor
compile time show on CPU. ``compile_static`` runs the real compiler for ``sm_90`` (H100/H200) with the
``ptxas`` that ships inside the triton wheel and reads the cubin's resource usage with its ``cuobjdump``:
registers per thread, stack bytes (spills and local arrays), shared memory, and the compile time.

Call it in a process **without** ``TRITON_INTERPRET`` (the kernels must be real ``JITFunction`` objects);
tests do this in a subprocess. Example::

    from vision.kernels.static_compile import compile_static
    from vision.kernels.box.sliding import _sliding_box_kernel
    r = compile_static(_sliding_box_kernel, dict(R=8, MODE=1, KIND=0, BWI=64, CH=64, RB=1), num_warps=1)
    print(r.registers, r.stack_bytes, f"{r.seconds:.1f} s")
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class StaticCompile:
    name: str
    registers: int
    stack_bytes: int    # local memory per thread: register spills and local arrays; 0 is the goal
    shared_bytes: int
    seconds: float      # Triton front end + LLVM + ptxas, one cold compile

    def __str__(self) -> str:
        return (f"{self.name}: {self.registers} regs, {self.stack_bytes} B stack, {self.shared_bytes} B shared, "
                f"{self.seconds:.1f} s")


def _tool(name: str) -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def default_signature(fn, constexprs: dict, overrides: dict | None = None) -> dict:
    """Pointers ``*_ptr`` -> ``*fp32``, names in ``constexprs`` -> ``constexpr``, everything else ``i32``."""
    sig = {}
    for n in fn.arg_names:
        sig[n] = "constexpr" if n in constexprs else "*fp32" if n.endswith("_ptr") else "i32"
    sig.update(overrides or {})
    return sig


def compile_static(fn, constexprs: dict, signature: dict | None = None, num_warps: int = 4,
                   num_stages: int = 3, arch: int = 90) -> StaticCompile:
    """Compile ``fn`` for ``sm_<arch>`` without a GPU; ``signature`` overrides ``default_signature``'s guesses."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(fn, "fn", fn) if not hasattr(fn, "arg_names") else fn
    sig = default_signature(fn, constexprs, signature)
    t0 = time.perf_counter()
    compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=dict(constexprs)),
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
    return StaticCompile(fn.__name__, field("REG"), field("STACK") + field("LOCAL"), field("SHARED"), seconds)
