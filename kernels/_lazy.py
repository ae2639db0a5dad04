"""PEP 562 lazy exports: a package's public names resolve to their modules on first access, so importing the
package (or a light submodule of it) does not load what its ops need (torch, diffusers).

    __getattr__, __dir__ = lazy_exports(__name__, {"box_filter": "box", "StructurePreservationLoss": "vision.losses"})

A module path starting with ``vision.`` is absolute; any other is relative to the package.
"""
from __future__ import annotations

import importlib
import sys


def lazy_exports(package: str, names: dict[str, str]):
    def __getattr__(name):
        if name in names:
            where = names[name]
            return getattr(importlib.import_module(where if where.startswith("vision.") else f"{package}.{where}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
