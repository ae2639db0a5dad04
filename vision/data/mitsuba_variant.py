"""Which Mitsuba 3 variant renders here: ``llvm_ad_rgb`` (vectorised, JIT-compiled; needs libLLVM >= 16, e.g.
Debian's ``libllvm19``) when a probe render in a subprocess works, else ``scalar_rgb`` (always available, slower).
This module imports Mitsuba (the [render] extra), as :mod:`.render`, its one user, does.
"""
from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import mitsuba as mi

FAST, SLOW = "llvm_ad_rgb", "scalar_rgb"

_variant_cache: dict[str, str] = {}

_PROBE = """
import mitsuba as mi
mi.set_variant("llvm_ad_rgb")
s = mi.load_dict({"type": "scene", "sphere": {"type": "sphere"}, "light": {"type": "constant"},
    "integrator": {"type": "path", "max_depth": 4},
    "sensor": {"type": "perspective", "to_world": mi.ScalarTransform4f().look_at(origin=[0, 0, 4], target=[0, 0, 0], up=[0, 1, 0]),
               "film": {"type": "hdrfilm", "width": 8, "height": 8}}})
img = mi.render(s, spp=2)
assert float(mi.TensorXf(img).numpy().mean()) > 0
"""


def find_libllvm(min_version: int = 16) -> str | None:
    """Path of the newest libLLVM >= ``min_version`` in the usual places (Debian's LLVM 15 crashes Dr.Jit)."""
    found = []
    for pattern in ("/usr/lib/x86_64-linux-gnu/libLLVM*.so*", "/usr/lib/aarch64-linux-gnu/libLLVM*.so*",
                    "/usr/lib64/libLLVM*.so*", "/usr/lib/libLLVM*.so*", "/usr/local/lib/libLLVM*.so*",
                    "/usr/lib/llvm-*/lib/libLLVM*.so*", "/opt/homebrew/opt/llvm/lib/libLLVM*.dylib"):
        for path in glob.glob(pattern):
            m = (re.search(r"libLLVM-(\d+)", path) or re.search(r"libLLVM\.so\.(\d+)", path)
                 or re.search(r"llvm-(\d+)/", path))
            if m and int(m.group(1)) >= min_version:
                found.append((int(m.group(1)), path))
    return max(found)[1] if found else None


def choose_variant(variant: str = "auto", note=print) -> str:
    """Set and return the Mitsuba variant.

    ``auto`` takes ``llvm_ad_rgb`` when a usable libLLVM is found and a tiny render in a child process
    succeeds (a bad libLLVM aborts the process, so it is tried out of process), else ``scalar_rgb``
    with a one-line ``note``. ``DRJIT_LIBLLVM_PATH``, when set, is used as given.
    """
    if variant not in ("auto", FAST, SLOW):
        raise ValueError(f"unknown variant {variant!r}; choose auto, {FAST} or {SLOW}")
    if variant == "auto":
        if "auto" not in _variant_cache:
            _variant_cache["auto"] = _probe_llvm(note)
        variant = _variant_cache["auto"]
    elif variant == FAST and not os.environ.get("DRJIT_LIBLLVM_PATH"):
        lib = find_libllvm()
        if lib:
            os.environ["DRJIT_LIBLLVM_PATH"] = lib
    if mi.variant() != variant:
        try:
            mi.set_variant(variant)
        except Exception as err:  # e.g. llvm_ad_rgb without a usable libLLVM
            raise ValueError(f"Mitsuba variant {variant} is unavailable here ({err}); try --variant auto") from None
    return variant


def _probe_llvm(note) -> str:
    env = dict(os.environ)
    if not env.get("DRJIT_LIBLLVM_PATH"):
        lib = find_libllvm()
        if lib is None:
            note(f"note: no libLLVM >= 16 found (Debian/Ubuntu: apt-get install libllvm19); using {SLOW}, which is much slower")
            return SLOW
        env["DRJIT_LIBLLVM_PATH"] = lib
    try:
        r = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, timeout=600)
        ok = r.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        note(f"note: Mitsuba's {FAST} does not run with {env['DRJIT_LIBLLVM_PATH']}; using {SLOW}, which is much slower")
        return SLOW
    os.environ["DRJIT_LIBLLVM_PATH"] = env["DRJIT_LIBLLVM_PATH"]
    return FAST
