"""``vision predict``: run a fine-tuned dense head (a ``vision finetune`` run folder) on images."""
from __future__ import annotations

from pathlib import Path

EPILOG = """\
examples:
  vision predict runs/depth photos/*.png -o predictions/
  vision predict runs/normals frame.png -o out/ --format exr --no-tta
  vision predict runs/depth photos/*.png -o predictions/ -q      # quiet: no progress, no "wrote" lines

For each IMAGE it writes OUT/NAME.<format> (the decoded prediction: depth in the training data's
units, unit normals, alpha / albedo in [0, 1], label ids for segmentation) and OUT/NAME_preview.png
(colourised). Formats: exr (float32), npy (float32, (H, W, C)), png (16-bit codes c in 0..65535):
  depth    scaled per image: d = c / 65535 * S, S the image's largest depth, stored in the PNG's
           text chunk "vision.depth_scale" (with "vision.decode", the formula); relative depth only
           unless S is read back
  normals  n = 2 c / 65535 - 1;  alpha, binary, albedo  v = c / 65535;  semantic  label id = c
Use exr or npy for depth that keeps its units without reading the metadata.
Images of any size are padded to the backbone's 16-pixel patch and cropped back.
An output that exists already is refused before any work unless --overwrite is
given (then it is replaced atomically); an output that is, or links to, an input image or a RUN file
is always refused, as are two IMAGES with the same name (minus extension).
RUN needs only its own files: RUN/base.safetensors holds the backbone's base weights, so neither the
--pretrained file it was trained from nor the hub cache is read (the folder may be moved or copied).
"""


HELP = "predict depth / normals / ... with a `vision finetune` run"
DESCRIPTION = "Run a fine-tuned dense-prediction model on images; write predictions and previews."


def add_arguments(p) -> None:
    p.add_argument("run", type=Path, metavar="RUN", help="run folder written by vision finetune")
    p.add_argument("images", nargs="+", metavar="IMAGES", help="image files or glob patterns")
    p.add_argument("-o", "--out", type=Path, required=True, help="output folder (created)")
    p.add_argument("--format", choices=("png", "exr", "npy"), default="png",
                   help="prediction file format (default png, 16-bit; depth PNGs are scaled per image, the scale in "
                        "their metadata: see below)")
    p.add_argument("--no-tta", action="store_true", help="no horizontal-flip test-time augmentation")
    p.add_argument("--device", default=None, help="torch device (default cuda if available, else cpu)")
    p.add_argument("--overwrite", action="store_true", help="replace outputs that exist already (default: refuse)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no \"wrote\" lines (errors only)")


def run(args) -> int:
    # lazy: `vision predict --help` builds this parser without torch and the [dense] extra's modules
    from vision.pipelines.cli import predict_run

    return predict_run.run(args)
