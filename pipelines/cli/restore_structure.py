"""``vision restore-structure``: give an edited image back its source's structure, keeping the edit's colours.

Reads the source and the edit (PNG, JPEG, TIFF at 8 or 16 bits, or EXR), optionally a mask (1 = restore
here), runs :func:`vision.restore_structure` with a progress bar, and writes the result. The output
never replaces one of the inputs.
"""
from __future__ import annotations

from pathlib import Path

from vision.kernels.spl.config import SPL_DEFAULTS, SPLConfig
from vision.pipelines.plugins import setting

EPILOG = """examples:
  vision restore-structure --source photo.png --edited edit.png -o restored.png
  vision restore-structure --source photo.png --edited edit.jpg --mask person.png -o restored.tif --bits 16
  vision restore-structure --source in.exr --edited out.exr -o fixed.exr --optimizer adam --steps 200

The edit should be an image of the same size as the source: a tone, colour, relighting or style edit,
typically a latent-diffusion output whose VAE decoding blurred, shifted or invented detail. The mask
(gray; RGB is averaged) weights where structure is restored: 0 leaves a pixel as it is. PNG/JPEG/TIFF
values are taken in [0, 1] and clamped there; EXR values are used as they are (no clamping).
"""


HELP = "restore the source's structure in an edited image, keeping the edit's colours (SPL)"
DESCRIPTION = ("Optimise an edited image's pixels so that it becomes a locally affine function of the "
               "source again (Structure Preservation Loss, Gong et al. WACV 2026) while its chroma stays "
               "the edit's: the paper's post-processing for latent-diffusion decoding distortions.")


def add_arguments(p) -> None:
    p.add_argument("--source", type=Path, required=True, help="the original image (its structure is wanted)")
    p.add_argument("--edited", type=Path, required=True, help="the edited image to repair (same size)")
    p.add_argument("--mask", type=Path, default=None, help="optional mask image: where to restore (1), where not (0)")
    p.add_argument("-o", "--output", type=Path, required=True,
                   help="output image (.png, .jpg, .tif, .exr); must not be one of the inputs")
    p.add_argument("--steps", type=int, default=100, help="optimisation steps (default 100)")
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd", help="default sgd (momentum 0.9)")
    p.add_argument("--lr", type=float, default=None, help="step size (default 1.0 for sgd, 5e-3 for adam)")
    # the loss options are checked by the config they build (SPLConfig.check), while parsing
    p.add_argument("--spl-weight", type=setting(SPLConfig.check, "spl_weight"), default=SPL_DEFAULTS.spl_weight,
                   help=f"structure loss weight (default {SPL_DEFAULTS.spl_weight:g})")
    p.add_argument("--color-weight", type=setting(SPLConfig.check, "color_weight"),
                   default=SPL_DEFAULTS.color_weight, help=f"chroma loss weight (default {SPL_DEFAULTS.color_weight:g})")
    p.add_argument("--radius", type=setting(SPLConfig.check, "radius", int), default=SPL_DEFAULTS.radius,
                   help=f"SPL window radius (default {SPL_DEFAULTS.radius})")
    p.add_argument("--eps", type=setting(SPLConfig.check, "eps"), default=SPL_DEFAULTS.eps,
                   help=f"SPL eps (default {SPL_DEFAULTS.eps:g})")
    p.add_argument("--bits", type=int, choices=(8, 16), default=8,
                   help="bits per channel of a PNG/TIFF output (default 8)")
    p.add_argument("--quality", type=int, default=95, help="JPEG quality of a .jpg output (default 95)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def run(args) -> int:
    # lazy: `vision restore-structure --help` builds this parser without torch
    from vision.pipelines.cli import restore_structure_run

    return restore_structure_run.run(args)
