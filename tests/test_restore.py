"""restore_structure on a real photo with a known answer; its optimisation against an autograd loop on the
public losses; ranges, dtypes, masks and bad input; the ``vision restore-structure`` command; the demo section."""
import numpy as np
import pytest
import torch

from vision import restore_structure
from vision.bundled import asset_path
from vision.io import read_image, to_image, to_tensor, write_image
from vision.kernels import box_filter, structure_loss
from vision.losses import color_preservation_loss
from vision.pipelines.cli import main


def psnr(a, b):
    return float(10 * np.log10(1.0 / np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2)))


@pytest.fixture(scope="module")
def photo():
    import cv2

    img = read_image(asset_path("photos", "coffee.png"))[:, :, :3]
    w = 160
    return cv2.resize(img, (w, round(img.shape[0] * w / img.shape[1])), interpolation=cv2.INTER_AREA)


def tone_edit(img):
    """Exactly locally affine: a 3x3 colour matrix, then a global tone curve (per channel)."""
    m = np.array([[0.9, 0.15, 0.0], [0.05, 0.85, 0.05], [0.0, 0.1, 0.7]], np.float32)
    return (0.08 + 0.85 * np.clip(img @ m.T, 0, 1) ** 0.7).astype(np.float32)


def decoder_damage(img):
    """What latent decoding does to an image: blur (sigma 1.5), JPEG at quality 30, a sub-pixel shift."""
    import cv2

    y = cv2.GaussianBlur(img, (0, 0), 1.5)
    ok, buf = cv2.imencode(".jpg", np.rint(np.clip(y[:, :, ::-1], 0, 1) * 255).astype(np.uint8),
                           [cv2.IMWRITE_JPEG_QUALITY, 30])
    assert ok
    y = cv2.imdecode(buf, cv2.IMREAD_COLOR)[:, :, ::-1].astype(np.float32) / 255
    shift = np.float32([[1, 0, 0.4], [0, 1, 0.3]])
    return cv2.warpAffine(np.ascontiguousarray(y), shift, (y.shape[1], y.shape[0]), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_REFLECT)


def test_real_photo_known_answer(photo):
    edit = tone_edit(photo)
    damaged = decoder_damage(edit)
    out = to_image(restore_structure(to_tensor(photo), to_tensor(damaged)))
    gain = psnr(out, edit) - psnr(damaged, edit)
    print(f"PSNR vs the undamaged edit: damaged {psnr(damaged, edit):.2f} dB, restored {psnr(out, edit):.2f} dB, "
          f"gain {gain:.2f} dB")
    assert gain >= 3.0
    mean_out, mean_edit, mean_src = (x.reshape(-1, 3).mean(0) * 255 for x in (out, edit, photo))
    print(f"mean colour /255: restored {mean_out.round(2)}, edit {mean_edit.round(2)}, photo {mean_src.round(2)}")
    assert np.abs(mean_out - mean_edit).max() <= 2.0  # the edit's colours ...
    assert np.abs(mean_out - mean_src).max() > 10.0  # ... not the source's
    assert float(structure_loss(to_tensor(photo), to_tensor(out))) < 0.2 * float(
        structure_loss(to_tensor(photo), to_tensor(damaged)))


def test_objective_and_its_gradient_are_those_of_the_public_losses(rng):
    # restore_structure forms its gradient in closed form; the same objective through autograd on the
    # public losses (structure_loss with stop-gradient, color_preservation_loss with kornia's YCbCr)
    from vision.restore import RestoreObjective

    src = torch.tensor(rng.random((2, 3, 30, 34)), dtype=torch.float32)
    e0 = (0.7 * src + 0.1 + 0.1 * torch.tensor(rng.random((2, 3, 30, 34)), dtype=torch.float32)).clamp(0, 1)
    x0 = torch.tensor(rng.random((2, 3, 30, 34)), dtype=torch.float32)
    mask = torch.tensor(rng.random((1, 1, 30, 34)), dtype=torch.float32)
    cmask = torch.tensor(rng.random((2, 1, 30, 34)), dtype=torch.float32)
    for m, cm in ((None, None), (mask, cmask)):
        f = RestoreObjective(src, e0, m, cm, spl_weight=1e4, color_weight=3e3, radius=4, eps=1e-3)
        value, grad = f.value_and_grad(x0)
        x = x0.clone().requires_grad_(True)
        omega_total = 2 * 30 * 34 if m is None else 2 * float(box_filter(m, 4).sum())
        color_total = 2 * 30 * 34 if cm is None else float(cm.sum())
        obj = (1e4 * structure_loss(src, x, 4, 1e-3, m) * omega_total
               + 3e3 * color_preservation_loss(e0, x, cm) * color_total) / 512 ** 2
        obj.backward()
        assert float(value) == pytest.approx(float(obj.detach()), rel=1e-5)
        assert float((grad - x.grad).abs().max()) < 1e-5 * float(x.grad.abs().max())


def test_optimisation_equals_an_sgd_loop_on_the_public_losses(rng):
    src = torch.tensor(rng.random((1, 3, 30, 34)), dtype=torch.float32)
    e0 = (0.7 * src + 0.1 + 0.1 * torch.tensor(rng.random((1, 3, 30, 34)), dtype=torch.float32)).clamp(0, 1)
    mask = torch.tensor(rng.random((1, 1, 30, 34)), dtype=torch.float32)
    got = restore_structure(src, e0, mask=mask, steps=4, lr=5.0)
    x = e0.clone().requires_grad_(True)
    opt = torch.optim.SGD([x], lr=5.0, momentum=0.9)
    omega_total = float(box_filter(mask, 5).sum())
    for _ in range(4):
        opt.zero_grad()
        obj = (1e4 * structure_loss(src, x, mask=mask) * omega_total
               + 1e3 * color_preservation_loss(e0, x) * 30 * 34) / 512 ** 2
        obj.backward()
        opt.step()
        with torch.no_grad():
            x.clamp_(0, 1)
    assert float((got - e0).abs().max()) > 1e-2  # it did move
    assert float((got - x.detach()).abs().max()) < 1e-5


def test_restore_runs_the_same_on_the_triton_kernels(rng):
    from vision.kernels.runtime import triton_available, use_backend

    if not triton_available():
        pytest.skip("triton does not import here")
    src = torch.tensor(rng.random((1, 3, 40, 36)), dtype=torch.float32)
    e0 = (0.6 * src + 0.2 + 0.05 * torch.tensor(rng.random((1, 3, 40, 36)), dtype=torch.float32)).clamp(0, 1)
    mask = torch.tensor(rng.random((40, 36)), dtype=torch.float32)
    with use_backend("torch"):
        a = restore_structure(src, e0, mask=mask, steps=3, lr=5.0)
    with use_backend("triton"):
        b = restore_structure(src, e0, mask=mask, steps=3, lr=5.0)
    assert float((a - e0).abs().max()) > 1e-2
    assert float((a - b).abs().max()) < 1e-5


def test_chroma_jacobian_is_kornias_conversion(rng):
    from kornia.color import rgb_to_ycbcr

    from vision.restore import chroma_jacobian

    J = chroma_jacobian()
    a, b = torch.rand(1, 3, 4, 5), torch.rand(1, 3, 4, 5)
    want = rgb_to_ycbcr(a)[:, 1:] - rgb_to_ycbcr(b)[:, 1:]
    assert torch.allclose(torch.einsum("kc,bchw->bkhw", J, a - b), want, atol=1e-6)


def test_mask_zero_pixels_stay_and_ranges_and_dtypes_round_trip(rng):
    src = torch.tensor(rng.random((1, 3, 24, 28)), dtype=torch.float32)
    blurred = torch.nn.functional.avg_pool2d(0.8 * src + 0.1, 3, 1, 1, count_include_pad=False)
    mask = torch.ones(24, 28)
    mask[:, :10] = 0
    out = restore_structure(src, blurred, mask=mask, steps=10)
    assert torch.equal(out[..., :10], blurred[..., :10])
    assert float((out[..., 12:] - blurred[..., 12:]).abs().max()) > 1e-3
    assert float(structure_loss(src, out, mask=mask)) < float(structure_loss(src, blurred, mask=mask))
    # [-1, 1] inputs (diffusers): same result as on [0, 1], mapped back
    ref = restore_structure(src, blurred, steps=5)
    pm = restore_structure(src * 2 - 1, blurred * 2 - 1, steps=5)
    assert float(pm.min()) >= -1 and float((pm - (ref * 2 - 1)).abs().max()) < 1e-5
    # uint8 in, uint8 out
    u8 = restore_structure((src * 255).round().to(torch.uint8), (blurred * 255).round().to(torch.uint8), steps=5)
    assert u8.dtype == torch.uint8 and u8.shape == src.shape
    # (C, H, W) in, (C, H, W) out; half precision and float64 keep their dtype
    assert restore_structure(src[0], blurred[0], steps=2).shape == (3, 24, 28)
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        o = restore_structure(src.to(dtype), blurred.to(dtype), steps=2)
        assert o.dtype == dtype and bool(torch.isfinite(o.float()).all())
    # steps=0 is the identity; gray images and images smaller than the window work
    assert torch.equal(restore_structure(src, blurred, steps=0), blurred)
    g = restore_structure(src[:, :1], blurred[:, :1], steps=3)
    assert g.shape == (1, 1, 24, 28)
    tiny = restore_structure(src[..., :6, :5], blurred[..., :6, :5], steps=3)
    assert tiny.shape == (1, 3, 6, 5) and bool(torch.isfinite(tiny).all())
    # HDR: values above 1 are not clamped when value_range=None
    hdr = restore_structure(src * 4, blurred * 4, steps=3, value_range=None)
    assert float(hdr.max()) > 1.5


def test_adam_also_restores(photo):
    edit = tone_edit(photo)
    damaged = decoder_damage(edit)
    out = to_image(restore_structure(to_tensor(photo), to_tensor(damaged), optimizer="adam", steps=60))
    assert psnr(out, edit) > psnr(damaged, edit) + 1.0


def test_restore_bad_input_raises_value_error():
    x = torch.rand(1, 3, 16, 16)
    with pytest.raises(ValueError, match="same shape"):
        restore_structure(x, torch.rand(1, 3, 16, 18))
    with pytest.raises(ValueError, match="1 \\(gray\\) or 3 \\(RGB\\) channels, got 2"):
        restore_structure(torch.rand(1, 2, 16, 16), torch.rand(1, 2, 16, 16))
    with pytest.raises(ValueError, match="drop the alpha"):
        restore_structure(torch.rand(1, 4, 16, 16), torch.rand(1, 4, 16, 16))
    nan = x.clone()
    nan[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="edited contains 1 NaN"):
        restore_structure(x, nan)
    with pytest.raises(ValueError, match="mask must have shape"):
        restore_structure(x, x, mask=torch.ones(15, 16))
    with pytest.raises(ValueError, match="optimizer"):
        restore_structure(x, x, optimizer="lbfgs")
    with pytest.raises(ValueError, match="steps"):
        restore_structure(x, x, steps=-1)
    with pytest.raises(ValueError, match="radius"):
        restore_structure(x, x, radius=-2)
    with pytest.raises(ValueError, match="eps"):
        restore_structure(x, x, eps=0)
    with pytest.raises(ValueError, match="value range"):
        restore_structure(x * 1000, x)


# ------------------------------------------------------------------------------------------- command line


@pytest.fixture
def pair(tmp_path, photo):
    small = photo[:48, :64]
    edit = decoder_damage(tone_edit(small))
    write_image(tmp_path / "src.png", small)
    write_image(tmp_path / "edit.jpg", edit, quality=95)
    return tmp_path


def test_cli_restores_png_jpeg_tiff_and_exr(pair, capsys):
    from vision.data.exr import read_exr, write_exr

    src, edit = pair / "src.png", pair / "edit.jpg"
    assert main(["restore-structure", "--source", str(src), "--edited", str(edit), "-o", str(pair / "out.png"),
                 "--steps", "20"]) == 0
    assert "structure loss" in capsys.readouterr().out
    s, e, o = (to_tensor(read_image(p)) for p in (src, edit, pair / "out.png"))
    assert o.shape == e.shape
    assert float(structure_loss(s, o)) < 0.5 * float(structure_loss(s, e))
    assert main(["restore-structure", "--source", str(src), "--edited", str(edit), "-o", str(pair / "out.tif"),
                 "--steps", "3", "--bits", "16", "-q"]) == 0
    import cv2

    assert cv2.imread(str(pair / "out.tif"), cv2.IMREAD_UNCHANGED).dtype == np.uint16
    # EXR in and out, values kept as stored (no clamping)
    img = read_image(edit)
    write_exr(pair / "edit.exr", {c: np.ascontiguousarray(img[:, :, i]) for i, c in enumerate("RGB")})
    assert main(["restore-structure", "--source", str(src), "--edited", str(pair / "edit.exr"),
                 "-o", str(pair / "out.exr"), "--steps", "3", "-q"]) == 0
    ch = read_exr(pair / "out.exr")
    assert sorted(ch) == ["B", "G", "R"] and ch["R"].shape == (48, 64)
    # with a mask: masked-out pixels keep the (8-bit) values of the edit
    mask = np.ones((48, 64), np.float32)
    mask[:, :20] = 0
    write_image(pair / "mask.png", mask)
    assert main(["restore-structure", "--source", str(src), "--edited", str(pair / "edit.exr"), "--mask",
                 str(pair / "mask.png"), "-o", str(pair / "masked.exr"), "--steps", "5", "-q"]) == 0
    assert np.array_equal(read_exr(pair / "masked.exr")["G"][:, :18], img[:, :18, 1])


def test_cli_refuses_to_overwrite_inputs_and_reports_bad_input(pair, capsys, photo):
    src, edit = pair / "src.png", pair / "edit.jpg"
    before = edit.read_bytes()
    for target in (edit, pair / "." / "edit.jpg", src):
        assert main(["restore-structure", "--source", str(src), "--edited", str(edit), "-o", str(target)]) == 2
        assert "refusing to overwrite" in capsys.readouterr().err
    assert edit.read_bytes() == before
    write_image(pair / "big.png", photo[:50, :64])
    assert main(["restore-structure", "--source", str(pair / "big.png"), "--edited", str(edit), "-o",
                 str(pair / "x.png")]) == 2
    assert "must be the same size" in capsys.readouterr().err
    write_image(pair / "m.png", np.ones((10, 10), np.float32))
    assert main(["restore-structure", "--source", str(src), "--edited", str(edit), "--mask", str(pair / "m.png"),
                 "-o", str(pair / "x.png")]) == 2
    assert "--mask is 10x10" in capsys.readouterr().err
    assert main(["restore-structure", "--source", str(src), "--edited", str(pair / "missing.png"), "-o",
                 str(pair / "x.png")]) == 2
    assert "no such image" in capsys.readouterr().err
    assert main(["restore-structure", "--source", str(src), "--edited", str(edit), "-o", str(pair / "x.bmp")]) == 2
    assert not (pair / "x.png").exists()


def test_cli_help_has_an_example(capsys):
    with pytest.raises(SystemExit):
        main(["restore-structure", "--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and "vision restore-structure --source" in out


# ------------------------------------------------------------------------------------------- demo section


def test_demo_section(tmp_path, monkeypatch):
    from vision.pipelines.demos import spl as demo_spl

    monkeypatch.setattr(demo_spl, "STEPS", 20)  # +3.6 dB at 20 steps, +4.2 dB at the default 100
    written = demo_spl.run(tmp_path, "cpu")
    names = {p.name for p in written}
    assert {"edit.png", "distorted.png", "restored.png", "residual_before.png", "residual_after.png",
            "comparison.png", "summary.txt"} <= names
    photo = read_image(asset_path(*demo_spl.PHOTO))[:, :, :3]
    edit, distorted, restored = (read_image(tmp_path / n) for n in ("edit.png", "distorted.png", "restored.png"))
    assert restored.shape == photo.shape
    assert psnr(restored, edit) > psnr(distorted, edit) + 2.0
    s = to_tensor(photo)
    assert float(structure_loss(s, to_tensor(restored))) < 0.2 * float(structure_loss(s, to_tensor(distorted)))
