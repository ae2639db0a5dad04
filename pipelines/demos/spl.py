"""``vision demo`` section "spl": restore the structure of a distorted tone edit (Gong et al., WACV 2026).

The bundled photo gets a tone edit that is exactly locally affine in colour (a 3x3 colour matrix,
then a global tone curve); the edit is then damaged the way latent decoding damages images (Gaussian
blur, JPEG at quality 30, a sub-pixel shift). ``restore_structure`` optimises the damaged edit
towards the photo's structure while keeping the edit's chroma. The residual maps are the per-window
Structure Preservation Loss against the photo before and after: the damage shows up along every edge.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import cv2
import torch
from kornia.metrics import psnr as kornia_psnr

from vision.bundled import asset_path
from vision.figures import side_by_side
from vision.io import read_image, to_image, to_tensor, write_image
from vision.kernels import structure_loss
from vision.restore import restore_structure

TITLE = "structure preservation loss: restoring a distorted tone edit (Gong et al. 2026)"

PHOTO = ("photos", "coffee.png")
# a warm colour cast then a lifted gamma curve: locally affine in colour, globally far from the photo
COLOR_MATRIX = np.array([[0.95, 0.12, 0.0], [0.04, 0.86, 0.04], [0.0, 0.08, 0.72]], dtype=np.float32)
STEPS = 100


def tone_edit(img: np.ndarray) -> np.ndarray:
    """The undamaged edit: colour matrix, then the tone curve ``0.08 + 0.85 x^0.7``."""
    lin = np.clip(img[:, :, :3] @ COLOR_MATRIX.T, 0.0, 1.0)
    return (0.08 + 0.85 * lin ** 0.7).astype(np.float32)


def damage(img: np.ndarray, sigma: float = 1.5, quality: int = 30, shift=(0.4, 0.3)) -> np.ndarray:
    """Gaussian blur, JPEG round trip at ``quality``, then a sub-pixel shift (dx, dy) (bilinear)."""
    y = cv2.GaussianBlur(img, (0, 0), sigma)
    codes = np.rint(np.clip(y[:, :, ::-1], 0, 1) * 255).astype(np.uint8)
    ok, buf = cv2.imencode(".jpg", codes, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise RuntimeError("OpenCV could not encode the JPEG")
    y = cv2.imdecode(buf, cv2.IMREAD_COLOR)[:, :, ::-1].astype(np.float32) / 255.0
    shift_m = np.float32([[1, 0, shift[0]], [0, 1, shift[1]]])
    return cv2.warpAffine(np.ascontiguousarray(y), shift_m, (y.shape[1], y.shape[0]), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_REFLECT)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB of images in [0, 1] (kornia's ``metrics.psnr``, float64)."""
    return float(kornia_psnr(torch.from_numpy(a.astype(np.float64)), torch.from_numpy(b.astype(np.float64)), 1.0))


def heat(d: np.ndarray, top: float) -> np.ndarray:
    """A residual map as an RGB heat image: sqrt(D) / sqrt(top), inferno colour map."""
    v = np.clip(np.sqrt(np.maximum(d, 0.0) / top), 0.0, 1.0)
    bgr = cv2.applyColorMap(np.rint(v * 255).astype(np.uint8), cv2.COLORMAP_INFERNO)
    return bgr[:, :, ::-1].astype(np.float32) / 255.0


def _rgb(img: np.ndarray) -> str:
    return ", ".join(f"{v:.2f}" for v in img.reshape(-1, 3).astype(np.float64).mean(0) * 255)


def run(out_dir: Path, device: str) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    photo = read_image(asset_path(*PHOTO))[:, :, :3]
    edit = tone_edit(photo)
    distorted = damage(edit)
    s, d = to_tensor(photo, device=device), to_tensor(distorted, device=device)
    restored_t = restore_structure(s, d, steps=STEPS)
    restored = to_image(restored_t)
    with torch.no_grad():
        r_before = structure_loss(s, d, reduction="none")[0, 0].cpu().numpy()
        r_after = structure_loss(s, restored_t, reduction="none")[0, 0].cpu().numpy()
    top = float(np.quantile(r_before, 0.99)) or 1e-6
    written = [
        write_image(out_dir / "edit.png", edit),
        write_image(out_dir / "distorted.png", distorted),
        write_image(out_dir / "restored.png", restored),
        write_image(out_dir / "residual_before.png", heat(r_before, top)),
        write_image(out_dir / "residual_after.png", heat(r_after, top)),
    ]
    p0, p1 = psnr(distorted, edit), psnr(restored, edit)
    written.append(side_by_side(
        [photo, edit, distorted, restored, heat(r_before, top), heat(r_after, top)],
        ["photo (source)", "tone edit (the answer)", f"distorted edit: {p0:.1f} dB",
         f"restored ({STEPS} steps): {p1:.1f} dB",
         f"residual before (SPL {r_before.mean():.2e})", f"residual after (SPL {r_after.mean():.2e})"],
        out_dir / "comparison.png"))
    (out_dir / "summary.txt").write_text(
        f"PSNR against the undamaged edit: distorted {p0:.2f} dB, restored {p1:.2f} dB (gain {p1 - p0:+.2f} dB)\n"
        f"mean SPL against the photo: distorted {r_before.mean():.4g}, restored {r_after.mean():.4g}\n"
        f"mean colour (RGB, /255): edit {_rgb(edit)}, restored {_rgb(restored)}, photo {_rgb(photo)}\n")
    written.append(out_dir / "summary.txt")
    return written
