"""Locate the bundled files under ``assets/`` (installed as the data package ``vision.assets``)."""
from __future__ import annotations

from pathlib import Path


def asset_path(*parts: str) -> Path:
    """Return the path of a bundled asset, e.g. ``asset_path("photos", "coffee.png")``.

    Raises ``FileNotFoundError`` naming the file when it is missing (a broken install or checkout).
    """
    import vision.assets as pkg  # lazy: the data package; `import vision.denoise` and FLR frames go without it

    root = Path(pkg.__file__).parent
    path = root.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"bundled asset {'/'.join(parts)!r} not found under {root}")
    return path
