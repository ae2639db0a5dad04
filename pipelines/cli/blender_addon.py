"""``vision blender-addon``: build the Blender add-on's zip (a legacy add-on for Blender 3.4 and later, an extension
for 4.2 and later), from the add-on source shipped with this package (``pipelines/blender_addon/vision_denoise``)."""
from __future__ import annotations

import io
import zipfile
from pathlib import Path

from vision.outputs import atomic_path, prepare_file

HELP = "build the Blender add-on (zip) that sets up, renders and denoises animations with vision denoise"
DESCRIPTION = ("Build the Blender add-on Vision Denoise as a zip: install it in Blender 3.4+ with Edit > Preferences > "
               "Add-ons > Install (4.2+: Get Extensions > Install from Disk). Its panel (Properties > Output) sets "
               "the scene up for denoising and runs vision denoise on the rendered frames in the background.")
EPILOG = """\
examples:
  vision blender-addon -o vision_denoise.zip
  blender --command extension validate vision_denoise.zip    # Blender 4.2 and later
  blender -b --python-expr "import bpy; bpy.ops.preferences.addon_install(filepath='vision_denoise.zip'); \\
      bpy.ops.preferences.addon_enable(module='vision_denoise'); bpy.ops.wm.save_userpref()"

The zip holds one folder, vision_denoise/, with __init__.py (bl_info for Blender 3.4 to 4.1) and
blender_manifest.toml (Blender 4.2 and later). The add-on runs this installation's vision command (set its path
in the add-on's preferences when vision is not on Blender's PATH; the Test button checks it).
"""

NAME = "vision_denoise"


def source() -> Path:
    """The add-on's source folder inside the installed package."""
    return Path(__file__).resolve().parents[1] / "blender_addon" / NAME


def build_zip(out: Path) -> list[str]:
    """Write the add-on zip to ``out`` (atomically); returns the archive's names (``vision_denoise/...``)."""
    folder = source()
    files = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                   and p.suffix not in (".pyc", ".zip"))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for p in files:
            info = zipfile.ZipInfo(f"{NAME}/{p.relative_to(folder).as_posix()}", date_time=(2024, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, p.read_bytes())
        names = z.namelist()
    prepare_file(out, "-o")
    with atomic_path(out) as tmp:
        Path(tmp).write_bytes(buf.getvalue())
    return names


def add_arguments(p) -> None:
    p.add_argument("-o", "--out", type=Path, default=Path(f"{NAME}.zip"), metavar="ZIP",
                   help=f"the zip to write (default {NAME}.zip)")


def run(args) -> int:
    out = Path(args.out)
    if out.suffix.lower() != ".zip":
        raise ValueError(f"-o {out}: the add-on file must end in .zip (Blender installs zips)")
    names = build_zip(out)
    print(f"wrote {out} ({len(names)} files): install it in Blender with Edit > Preferences > Add-ons > Install "
          "(4.2 and later: Get Extensions > Install from Disk)")
    return 0
