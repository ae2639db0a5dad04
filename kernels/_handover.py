"""Hand the top-level name ``kernels`` over to the installed Hugging Face ``kernels`` distribution.

Python started in the repository root puts the root first on ``sys.path``, so ``import kernels`` (done by
transformers and diffusers) would find this folder, which is ``vision.kernels``. ``hand_over`` then imports the
installed package with the root left out of the search path and puts it in ``sys.modules['kernels']``: the
import statement returns whatever that entry holds once the package's ``__init__`` has run.

Why a plain mechanism (a folder of another name, an ImportError under the name ``kernels``) cannot work:
ARCHITECTURE.md, "Mechanisms that look like tricks".
"""
from __future__ import annotations

import importlib
import os
import sys


def hand_over(init_file: str) -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(init_file)))
    ours = sys.modules.pop("kernels")
    for name in [n for n in sys.modules if n.startswith("kernels.")]:
        del sys.modules[name]  # our kernels._handover, imported under the borrowed name
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != root]
    try:
        installed = importlib.import_module("kernels")
    except ImportError:
        sys.modules.pop("kernels", None)
        raise ModuleNotFoundError(
            f"No module named 'kernels' (the folder {os.path.dirname(ours.__file__)} is vision.kernels, "
            "not Hugging Face's kernels package)", name="kernels") from None
    finally:
        sys.path[:] = saved
    sys.modules["kernels"] = installed
