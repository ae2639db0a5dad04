"""Locate the bundled files under ``assets/`` (installed as the data package ``vision.assets``)."""
from __future__ import annotations

from pathlib import Path

import vision.assets as pkg


def asset_path(*parts: str) -> Path:
    """Return the path of a bundled asset, e.g. ``asset_path("photos", "coffee.png")``.

    Raises ``FileNotFoundError`` naming the file when it is missing (a broken install or checkout).
    """
    root = Path(pkg.__file__).parent
    path = root.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"bundled asset {'/'.join(parts)!r} not found under {root}")
    return path
