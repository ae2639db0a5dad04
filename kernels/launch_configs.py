"""Every Triton launch configuration the Triton paths can reach, derived from the launchers' own choosers.

A kernel launch is a kernel plus its constexprs plus ``num_warps`` / ``num_stages``; each distinct one is a
binary that must compile within the target GPU's limits (registers, shared memory per block, no spills). The
launchers choose these from a few helpers (``box.sliding.strip_width`` / ``chunk_rows``, the guided ``*_RB``
row counts, ``local_linear.triton_path._solve_launch`` / ``_tiles``, SPL's ``BY`` / ``BX`` / ``NUM_WARPS``);
this module calls the same helpers for realistic shapes, so the static compile test
(``tests/test_static_compile_archs.py``) follows any change to them. ``ARCH_LIMITS`` holds what each target
allows. Every function takes the target ``arch`` and hands it to the choosers that differ per architecture
(``guided.sliding.fit_rows``, ``local_linear.triton_path._solve_launch``), which on a GPU read it from
``runtime.arch.device_arch``.

Example::

    from vision.kernels.launch_configs import launch_configs
    for cfg in launch_configs(arch=86):
        print(cfg.kernel, cfg.constexprs, cfg.num_warps)

This module imports every kernel module of the Triton paths, so Triton loads with it and the kernels are decorated
as the process's ``TRITON_INTERPRET`` says at that moment (set it, or not, before importing this module).

The denoiser's fill kernel lives in ``vision/denoise/fill_triton.py`` (``kernels/`` never imports ``vision/``);
the test adds it from that module's constants.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import importlib

from .runtime.backends import choosing_as_on_a_gpu
from .box import sliding as B
from .box.sliding import strip_width, walk_grid
from .box.triton_path import MAX_RADIUS, MODES as BOX_MODES, MODES
from .guided import sliding as G, sliding_color as GC, triton_backward as T, triton_backward_color as TC
from .local_linear import triton_path as tp
from .spl import triton_kernels as SK
from .spl.restore_step import _restore_update

# Per-block limits of the targets consumer and datacentre users run (CUDA C Programming Guide, "Technical
# Specifications per Compute Capability"): dynamic shared memory a block may opt into, registers per thread
# and per block.
ARCH_LIMITS = {
    80: dict(name="A100 (sm_80)", shared=166912, regs_per_thread=255, regs_per_block=65536),
    86: dict(name="RTX 30 / A10 / A40 (sm_86)", shared=101376, regs_per_thread=255, regs_per_block=65536),
    89: dict(name="RTX 40 / L4 / L40 (sm_89)", shared=101376, regs_per_thread=255, regs_per_block=65536),
    90: dict(name="H100 / H200 (sm_90)", shared=232448, regs_per_thread=255, regs_per_block=65536),
}
ARCHS = tuple(ARCH_LIMITS)

# The shape the products run most: a 1080p RGB frame (denoiser, edits). Among the constexprs only the chunk length
# CH of the sliding kernels depends on the shape, and at 1080p chunk_rows picks each of 16, 32 and 64 somewhere.
SHAPES = ((3, 1080, 1920),)
# Radii: the widest of each strip width of the sliding kernels (64 columns up to r = 4, 128 up to
# box.triton_path.MAX_RADIUS = 16). R enters the code only as an immediate (offsets, counts, loop bounds), yet
# ptxas's allocation still moves with it (the sm_90 gray fit, symmetric border, 2 rows: 127-128 registers and no
# stack at r = 5, 8 and 12, 8 B of stack at r = 16), so these stand for the rest only as the widest windows; pass
# more radii to launch_configs to compile them too.
RADII = (4, 16)
# Local regression: FLNR's K = 4 learned guides, the K = 6 acceptance case, FLR's K = 8; C = 3 colours.
GUIDES = ((4, 3), (6, 3), (8, 3))


@dataclass(frozen=True)
class LaunchConfig:
    kernel: str                      # "module:function"
    constexprs: tuple                # sorted (name, value) pairs
    num_warps: int
    num_stages: int = 3              # Triton's default; no launcher sets it
    signature: tuple = ()            # sorted (name, type) overrides of static_compile.default_signature
    cases: tuple = field(default=(), compare=False)  # what reaches it (first few)

    @property
    def fn(self):
        mod, name = self.kernel.split(":")
        return getattr(importlib.import_module(mod), name)

    @property
    def short(self) -> str:
        return self.kernel.split(":")[1].lstrip("_")

    def describe(self) -> str:
        c = ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in self.constexprs)
        return f"{self.short}[{c}] w{self.num_warps}"


def _cfg(fn, constexprs: dict, num_warps: int, case: str, signature: dict | None = None) -> LaunchConfig:
    fn = getattr(fn, "fn", fn)
    return LaunchConfig(f"{fn.__module__}:{fn.__name__}", tuple(sorted(constexprs.items())), num_warps,
                        signature=tuple(sorted((signature or {}).items())), cases=(case,))


# ------------------------------------------------------------------------------------------------- per op

def box_configs(arch: int, radii=RADII, shapes=SHAPES) -> list[LaunchConfig]:
    """``box.sliding.launch`` as ``box.triton_path`` calls it: means in every border mode, the "valid" adjoint
    (KIND 1) and the padded adjoint (KIND 2, offset r)."""
    out = []
    for r in (r for r in radii if r <= MAX_RADIUS):
        bwi = B.strip_width(r)
        for planes, h, w in shapes:
            for mode, kind, off in [(m, 0, 0) for m in BOX_MODES.values()] + [(0, 1, 0), (0, 2, r)]:
                ho, wo = h + 2 * off, w + 2 * off
                _, ch = B.walk_grid(planes, ho, wo, r, bwi)
                out.append(_cfg(B._sliding_box_kernel, dict(R=r, MODE=mode, KIND=kind, BWI=bwi, CH=ch, RB=B.RB),
                                1, f"box r={r} mode={mode} kind={kind} {planes}x{h}x{w}"))
    return out


def guided_configs(arch: int, radii=RADII, shapes=SHAPES) -> list[LaunchConfig]:
    """``guided.triton_path.fused_forward`` -> ``sliding.forward_gray`` / ``sliding_color.forward_color`` in every
    border mode (fit, then apply with the three APPLY / STORE_MA pairs those functions pass: q, q and mean a,
    the means) and the fused "valid" backward (``triton_backward.walk``)."""
    out = []
    for r in (r for r in radii if r <= MAX_RADIUS):
        for planes, h, w in shapes:
            bwi = strip_width(r)
            _, ch = walk_grid(planes, h, w, r, bwi)
            case = f"r={r} {planes}x{h}x{w}"
            for mode in MODES.values():
                for mod, fit, apply in ((G, G._fit_gray_kernel, G._apply_gray_kernel),
                                        (GC, GC._fit_color_kernel, GC._apply_color_kernel)):
                    rb = G.fit_rows(mode, bwi, arch) if mod is G else mod.FIT_RB
                    out.append(_cfg(fit, dict(R=r, MODE=mode, BWI=bwi, CH=ch, RB=rb), 1, f"{case} m={mode}"))
                    for a, s in ((True, False), (True, True), (False, True)):
                        out.append(_cfg(apply, dict(R=r, MODE=mode, APPLY=a, STORE_MA=s, BWI=bwi, CH=ch,
                                                    RB=mod.APPLY_RB), 1, f"{case} m={mode}"))
            for mod, width, moments, inputs in ((T, strip_width, T._grad_moments_gray, T._grad_inputs_gray),
                                                (TC, TC.width, TC._grad_moments_color, TC._grad_inputs_color)):
                _, ch_b = walk_grid(planes, h, w, r, width(r))
                for fn, rb in ((moments, mod.MOMENTS_RB), (inputs, mod.INPUTS_RB)):
                    out.append(_cfg(fn, dict(R=r, BWI=width(r), CH=ch_b, RB=rb), 1, f"backward {case}"))
    return out


def local_linear_configs(arch: int, guides=GUIDES, shapes=SHAPES) -> list[LaunchConfig]:
    """``local_linear.triton_path``: taps passes, cell moments / adjoint, moment rows, solve, fit backward,
    coefficient columns and apply, each from ``_solve_launch`` / ``_tiles`` as the launchers call them."""
    floats = {"inv_sh": "fp32", "inv_sw": "fp32"}
    out = []
    for kind, fn in (("taps", tp._taps_rows_kernel), ("taps", tp._taps_cols_kernel)):
        BH, BW, nw = tp._tiles(kind)
        out.append(_cfg(fn, dict(BH=BH, BW=BW), nw, "window pass"))
    BH, BW, nw = tp._tiles("apply")
    out.append(_cfg(tp._apply_kernel, dict(BH=BH, BW=BW), nw, "apply", floats))
    for K, C in guides:
        for _, h, w in shapes:
            for fn in (tp._solve_kernel, tp._fit_bwd_kernel, tp._moment_rows_kernel, tp._cell_moments_kernel,
                       tp._cell_adjoint_kernel):
                _, const, nw = tp._solve_launch(h * w, K, C, arch, cells=fn is tp._cell_moments_kernel)
                out.append(_cfg(fn, const, nw, f"K={K} C={C}"))
        BH, BW, nw = tp._tiles("solve")
        out.append(_cfg(tp._coeff_cols_kernel, dict(K=K, C=C, BH=BH, BW=BW), nw, f"K={K} C={C}"))
    return out


SPL_FLOATS = ("eps", "empty", "inv_cs", "inv_ce", "inv_c", "lr", "momentum", "lo", "hi") + tuple(
    f"q{i}{j}" for i in range(3) for j in range(3))


def spl_configs(arch: int) -> list[LaunchConfig]:
    """``spl.triton_path`` (moments, fit, finish, adjoint, gradient; masked or not) and the fused restore step
    (``spl.restore_step``: mask, chroma term, colour mask)."""
    tile = dict(BY=SK.BY, BX=SK.BX)
    out = []
    for fn in (SK._hsum_moments, SK._vsum_fit, SK._vsum_grad):
        for m in (False, True):
            out.append(_cfg(fn, dict(MASKED=m, **tile), SK.NUM_WARPS, "masked" if m else "plain"))
    out.append(_cfg(SK._hsum_adjoint, tile, SK.NUM_WARPS, "adjoint"))
    out.append(_cfg(SK._finish, dict(BLOCK=1024), 4, "finish"))  # spl.triton_path.finish
    for m in (False, True):
        for c, cm in ((False, False), (True, False), (True, True)):
            out.append(_cfg(_restore_update, dict(MASKED=m, CHROMA=c, COLOR_MASKED=cm, **tile), SK.NUM_WARPS,
                            "restore step"))
    sig = lambda cfg: {n: "fp32" for n in SPL_FLOATS if n in cfg.fn.arg_names}  # noqa: E731
    return [LaunchConfig(c.kernel, c.constexprs, c.num_warps, c.num_stages, tuple(sorted(sig(c).items())), c.cases)
            for c in out]


def launch_configs(arch: int = 90, radii=RADII, shapes=SHAPES, guides=GUIDES) -> list[LaunchConfig]:
    """Every distinct reachable configuration of the ``vision.kernels`` Triton kernels on ``sm_<arch>``, in a
    stable order (identical launches merged, their cases kept)."""
    seen: dict = {}
    with choosing_as_on_a_gpu():  # the configurations a GPU gets, not the interpreter's
        configs = (box_configs(arch, radii, shapes) + guided_configs(arch, radii, shapes)
                   + local_linear_configs(arch, guides, shapes) + spl_configs(arch))
    for cfg in configs:
        key = (cfg.kernel, cfg.constexprs, cfg.num_warps, cfg.num_stages, cfg.signature)
        if key in seen:
            old = seen[key]
            if len(old.cases) < 4 and cfg.cases[0] not in old.cases:
                seen[key] = LaunchConfig(*key, cases=old.cases + cfg.cases)
        else:
            seen[key] = cfg
    return list(seen.values())


def representative(configs: list[LaunchConfig]) -> list[LaunchConfig]:
    """One configuration per kernel: the one with the widest radius / largest padded system and the most flags
    on (the last in ``launch_configs``' order of a kernel that sorts highest), the likeliest to hit a limit."""
    best: dict = {}
    for cfg in configs:
        d = dict(cfg.constexprs)
        score = (d.get("R", 0), d.get("BWI", 0), d.get("KP", d.get("K", 0)), d.get("CP", 0),
                 sum(bool(v) for k, v in d.items() if k.isupper() and isinstance(v, bool)), d.get("MODE", 0) == 1,
                 -d.get("CH", 0))
        if cfg.kernel not in best or score > best[cfg.kernel][0]:
            best[cfg.kernel] = (score, cfg)
    return [cfg for _, cfg in best.values()]


# ------------------------------------------------------------------------------------------ compile and check

def jobs(configs: list[LaunchConfig], arch: int, aligned: bool = True) -> list[dict]:
    """``static_compile.compile_many`` jobs of ``configs`` for ``sm_<arch>``. ``aligned``: the binary for tensors
    straight from PyTorch's allocator (16-byte aligned pointers, what most launches get); False: the one for
    offset views."""
    return [dict(kernel=c.kernel, constexprs=[list(p) for p in c.constexprs], signature=[list(p) for p in c.signature],
                 num_warps=c.num_warps, num_stages=c.num_stages, arch=arch, aligned=aligned,
                 label=c.describe() + ("" if aligned else " unaligned")) for c in configs]


def problems(result: dict) -> list[str]:
    """What breaks ``sm_<arch>``'s limits in one ``compile_many`` result: a failed compile, spills, more than 255
    registers per thread or 64 Ki per block, more shared memory than a block may opt into."""
    lim = ARCH_LIMITS[result["arch"]]
    if "error" in result:
        return [f"does not compile: {result['error']}"]
    out = []
    if result["stack_bytes"]:
        out.append(f"{result['stack_bytes']} B stack (spills)")
    if result["registers"] > lim["regs_per_thread"]:
        out.append(f"{result['registers']} registers per thread")
    if result["registers"] * 32 * result["num_warps"] > lim["regs_per_block"]:
        out.append(f"{result['registers'] * 32 * result['num_warps']} registers per block")
    if result["shared_bytes"] > lim["shared"]:
        out.append(f"{result['shared_bytes']} B shared > {lim['shared']}")
    return out


def table(results: list[dict]) -> str:
    """Markdown: kernel, arch, registers, spill bytes, shared bytes, compile CPU seconds, one row per result."""
    rows = ["| kernel config | arch | regs | spill B | smem B | compile s (CPU) |", "|---|---|---|---|---|---|"]
    for r in results:
        cpu = f"{r['cpu_seconds']:.1f}" if "cpu_seconds" in r else f"{r['seconds']:.1f} wall"
        if "error" in r:
            rows.append(f"| {r['label']} | sm_{r['arch']} | error | | | {cpu} |")
        else:
            rows.append(f"| {r['label']} | sm_{r['arch']} | {r['registers']} | {r['stack_bytes']} | "
                        f"{r['shared_bytes']} | {cpu} |")
    return "\n".join(rows)
