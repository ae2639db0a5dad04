"""The Structure Preservation Loss settings as one frozen, validated object: :class:`SPLConfig`.

Everything that weighs or shapes the loss travels as one ``SPLConfig``, from ``vision edit --spl-weight`` or a
keyword argument down to the loss that calls the kernels: the window ``radius``, the ridge term ``eps``, the
weights of the structure and colour terms and whether the fit runs both ways. Each setting is checked here and
nowhere else, when the object is built, with one line naming it; callers that take the settings as keyword
arguments build one with :meth:`SPLConfig.build`. Images, masks and step counts are data, not settings: they
travel beside the config. No torch import, so ``vision.kernels.spl.defaults`` stays light.

    >>> cfg = SPLConfig(spl_weight=5e3)
    >>> cfg.radius, cfg.replace(radius=3).radius
    (5, 3)
    >>> SPLConfig(spl_weight=-1)
    Traceback (most recent call last):
    ...
    ValueError: spl_weight must be a finite number >= 0, got -1
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass


def _is_flag(value) -> bool:
    """A bool, Python's or NumPy's (whose type is ``numpy.bool`` or ``numpy.bool_``)."""
    return isinstance(value, bool) or (type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"))


def _shown(value) -> str:
    """``value`` for a message: a string quoted, a number as it prints."""
    return repr(value) if isinstance(value, (str, bytes)) else str(value)


def _number(name: str, value, low_open: bool) -> float:
    """``value`` as a float that is finite and > 0 (``low_open``) or >= 0; else one ValueError naming ``name``."""
    want = f"a finite number {'>' if low_open else '>='} 0"
    if _is_flag(value) or isinstance(value, (str, bytes)):  # float() would read True as 1 and parse "0.1"
        raise ValueError(f"{name} must be {want}, got {type(value).__name__} {_shown(value)}")
    try:
        number = float(value)
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of several values
        raise ValueError(f"{name} must be {want}, got {type(value).__name__} {_shown(value)}") from None
    if not math.isfinite(number) or number < 0 or (low_open and number == 0):
        raise ValueError(f"{name} must be {want}, got {_shown(value)}")
    return number


def _radius(name: str, value) -> int:
    integral = isinstance(value, numbers.Integral) or (isinstance(value, float) and value.is_integer())
    if _is_flag(value) or not integral:
        raise ValueError(f"{name} must be an integer >= 0, got {type(value).__name__} {_shown(value)}")
    if value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {_shown(value)}")
    return int(value)


def _flag(name: str, value) -> bool:
    if not _is_flag(value):  # "no" would be truthy
        raise ValueError(f"{name} must be True or False, got {type(value).__name__} {_shown(value)}")
    return bool(value)


_CHECKS = {"radius": _radius, "eps": lambda n, v: _number(n, v, low_open=True),
           "spl_weight": lambda n, v: _number(n, v, low_open=False),
           "color_weight": lambda n, v: _number(n, v, low_open=False), "bidirectional": _flag}


@dataclass(frozen=True)
class SPLConfig:
    """Settings of the Structure Preservation Loss and its colour term (defaults: the published code's).

    Attributes:
        radius: window radius r, windows of (2r + 1)^2 pixels (5); an integer >= 0.
        eps: ridge term of the local fits, in the units of images in [0, 1] (1e-4); finite and > 0.
        spl_weight: weight of the structure term (1e4); finite and >= 0.
        color_weight: weight of the colour (chroma) term (1e3); finite and >= 0.
        bidirectional: also fit the source from the edit (True).

    Frozen and hashable; built values are normalised (``radius`` an int, the numbers floats, the flag a bool).

        >>> SPLConfig(radius=3, eps=1e-3).replace(spl_weight=0).spl_weight
        0.0
    """

    radius: int = 5
    eps: float = 1e-4
    spl_weight: float = 1e4
    color_weight: float = 1e3
    bidirectional: bool = True

    def __post_init__(self):
        for name, check in _CHECKS.items():
            object.__setattr__(self, name, check(name, getattr(self, name)))

    @staticmethod
    def check(name: str, value):
        """``value`` checked and normalised as setting ``name`` (what building a config does for each one).

            >>> SPLConfig.check("eps", 1e-3)
            0.001
        """
        if name not in _CHECKS:
            raise TypeError(f"SPLConfig has no setting {name!r}; settings: {', '.join(SETTINGS)}")
        return _CHECKS[name](name, value)

    def replace(self, **changes) -> "SPLConfig":
        """A copy with ``changes`` (checked); an unknown name is a TypeError naming it."""
        unknown = sorted(set(changes) - set(SETTINGS))
        if unknown:
            raise TypeError(f"SPLConfig has no setting {unknown[0]!r}; settings: {', '.join(SETTINGS)}")
        return dataclasses.replace(self, **changes) if changes else self

    @classmethod
    def build(cls, config: "SPLConfig | None" = None, **options) -> "SPLConfig":
        """``config`` (default: the published settings) with the ``options`` that are not None: how a signature
        that takes the settings as keyword arguments makes its one config. With no option set, ``config`` itself
        comes back (the same object).

            >>> cfg = SPLConfig(radius=3)
            >>> SPLConfig.build(cfg, radius=None) is cfg, SPLConfig.build(cfg, eps=1e-3).eps
            (True, 0.001)
        """
        base = SPL_DEFAULTS if config is None else config
        if not isinstance(base, cls):
            raise TypeError(f"config must be an SPLConfig, got {type(base).__name__}")
        return base.replace(**{k: v for k, v in options.items() if v is not None})


SETTINGS = tuple(f.name for f in dataclasses.fields(SPLConfig))
SPL_DEFAULTS = SPLConfig()
"""The published settings (radius 5, eps 1e-4, weights 1e4 and 1e3, two-way fit), tuned on 512 x 512 images."""

__all__ = ["SPLConfig", "SPL_DEFAULTS", "SETTINGS"]
