"""Which optional extra each command needs, and the one line a command prints when it is missing.

The distribution installs what every product needs; each product adds its extra (pyproject.toml,
``[project.optional-dependencies]``): ``pip install "locallinear-vision[denoise]"``, ``[edit]``, ``[dense]``,
``[train-denoiser]``, ``[render]``, ``[bench]``, or ``[all]``. Commands import their product's packages only when
they run, so a missing extra surfaces as a ``ModuleNotFoundError`` naming a package; :func:`missing_extra` turns it
into one line naming the extra to install (the ``vision`` command prints it and exits with 2). A missing module that
no extra provides (one of ours, or a dependency's own dependency) is not an extra's to fix: it gets no such line.

Example::

    >>> err = ModuleNotFoundError("No module named 'diffusers'", name="diffusers")
    >>> missing_extra(("edit",), err)
    'vision edit needs the [edit] extra (diffusers is not installed): pip install "locallinear-vision[edit]"'
"""
from __future__ import annotations

import importlib.util

DISTRIBUTION = "locallinear-vision"

# extra -> the top-level modules it provides (import names; pyproject.toml lists their distributions)
EXTRAS = {
    "denoise": ("OpenEXR", "Imath"),
    "edit": ("diffusers", "transformers", "accelerate", "huggingface_hub"),
    "dense": ("timm", "peft", "accelerate", "transformers", "OpenEXR", "Imath", "huggingface_hub"),
    "train-denoiser": ("OpenEXR", "Imath", "huggingface_hub", "timm", "transformers", "accelerate"),
    "render": ("mitsuba", "drjit"),
    "bench": ("pyoidn", "flip_evaluator", "pycvvdp"),
    "cuda": ("fla",),
}

# import name -> distribution name, where they differ (tests/test_extras.py checks EXTRAS against pyproject.toml)
DISTRIBUTIONS = {"OpenEXR": "openexr", "Imath": "openexr", "huggingface_hub": "huggingface_hub",
                 "flip_evaluator": "flip-evaluator", "pycvvdp": "cvvdp", "fla": "fla-core"}

# the command's words -> its extra; the longest prefix of the command line wins (``bench edit`` before ``bench``)
COMMAND_EXTRAS = {
    ("denoise",): "denoise",
    ("edit",): "edit",
    ("finetune",): "dense",
    ("predict",): "dense",
    ("evaluate",): "dense",
    ("train-denoiser",): "train-denoiser",
    ("render-scenes",): "render",
    ("demo", "denoise"): "denoise",
    ("demo", "dense"): "dense",
    ("bench", "edit"): "edit",
    ("bench", "denoise"): "denoise",
    ("bench", "denoise-sequences"): "denoise",
    ("bench", "backbone"): "dense",
    ("bench", "dense-head"): "dense",
}
# when the command's own extra does not provide the missing module, the first of these that does is named
FALLBACK_ORDER = ("bench", "render", "denoise", "edit", "dense", "train-denoiser", "cuda")


def install_line(extra: str) -> str:
    """The pip command that installs ``extra``."""
    return f'pip install "{DISTRIBUTION}[{extra}]"'


def extra_providing(module: str, words: tuple[str, ...] = ()) -> str | None:
    """The extra that provides the top-level ``module`` for the command ``words`` (its own extra first), or None."""
    top = module.split(".")[0]
    own = next((COMMAND_EXTRAS[words[:n]] for n in range(len(words), 0, -1) if words[:n] in COMMAND_EXTRAS), None)
    for extra in ((own,) if own else ()) + FALLBACK_ORDER:
        if top in EXTRAS[extra]:
            return extra
    return None


def missing_extra(words: tuple[str, ...], err: BaseException) -> str | None:
    """One line saying which extra the command ``words`` (``("edit",)``, ``("bench", "denoise")``) needs, when
    ``err`` is a ``ModuleNotFoundError`` for a module an extra provides; else None."""
    name = getattr(err, "name", None)
    if not isinstance(err, ModuleNotFoundError) or not name:
        return None
    extra = extra_providing(name, tuple(words))
    if extra is None:
        return None
    command = " ".join(("vision", *words))
    return f"{command} needs the [{extra}] extra ({name.split('.')[0]} is not installed): {install_line(extra)}"


def require(*modules: str) -> None:
    """Raise ``ModuleNotFoundError`` (naming the module) for the first of ``modules`` that is not installed, without
    importing any: a command calls it before its other checks, so that a missing extra is the first thing said."""
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing, or a module without a spec
            found = False
        if not found:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
