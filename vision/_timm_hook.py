"""Register our backbones into timm when timm is imported, without importing timm (slow) for every user.

``import vision`` installs ``TimmHook`` on ``sys.meta_path``; the first ``import timm`` anywhere in the process
then runs timm's own ``__init__`` and, right after it, imports ``vision.backbones``, whose modules call timm's
``register_model``. So ``import vision; timm.create_model("vig_tiny_patch16_224")`` keeps working while
``import vision.kernels`` or ``import vision.denoise`` never load timm. If timm is already imported, the
backbones register at once. timm has no plug-in entry point, so nothing plainer can run our ``register_model``
calls when timm is imported: ARCHITECTURE.md, "Mechanisms that look like tricks".
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys


class TimmHook(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != "timm":
            return None
        # PathFinder directly: asking importlib.util.find_spec would come back here. A mere probe (libraries ask
        # find_spec("timm") to see whether it is installed) gets a spec too, and the hook stays until timm runs.
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_timm = spec.loader.exec_module

        def exec_module(module):
            run_timm(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            importlib.import_module("vision.backbones")

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    if sys.modules.get("timm") is not None:  # imported already (None: a blocked import, timm is not there)
        importlib.import_module("vision.backbones")
    elif not any(isinstance(f, TimmHook) for f in sys.meta_path):
        sys.meta_path.insert(0, TimmHook())
