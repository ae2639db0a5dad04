"""FLNR's one-pass CPU cell statistics and log-depth (vision.denoise.flnr.cells_numba.cells, log_cpu.log_depth) against
float64 NumPy written from their definitions: 4 x 4 cell means (partial cells over their real pixels), log1p of the
clamped signal, the log-luminance spread, and log-depth with no-surface pixels at the batch's largest depth."""
import numpy as np
import pytest
import torch

pytest.importorskip("numba")
from vision.denoise import log_cpu  # noqa: E402
from vision.denoise.flnr import cells_numba  # noqa: E402


def _cell_means(x: np.ndarray, s: int) -> np.ndarray:
    """(B, C, H, W) float64 -> (B, C, ceil(H/s), ceil(W/s)) means over each cell's real pixels."""
    b, c, h, w = x.shape
    gh, gw = -(-h // s), -(-w // s)
    out = np.zeros((b, c, gh, gw))
    for i in range(gh):
        for j in range(gw):
            out[:, :, i, j] = x[:, :, i * s:(i + 1) * s, j * s:(j + 1) * s].mean((2, 3))
    return out


@pytest.mark.parametrize("hw", [(37, 50), (16, 20), (1, 3)])
def test_cell_stats_match_float64(hw):
    h, w = hw
    rng = np.random.default_rng(3)
    target = (rng.random((2, 3, h, w)) * 4 - 1) ** 3
    target[0, 0, 0, :2] = [1e30, -1e30]  # a firefly and a hostile negative
    mask = (rng.random((2, 1, h, w)) > 0.8).astype(np.float64)
    normal = rng.standard_normal((1, h, w, 3))  # HWC, broadcast over the batch
    depth = rng.random((2, 1, h, w)) * 3
    albedo = rng.random((2, 3, h, w))
    t = torch.from_numpy(target).float()
    bufs = [torch.from_numpy(normal).float().permute(0, 3, 1, 2), torch.from_numpy(depth).float(), None,
            torch.from_numpy(albedo).float()]
    cells, rest = cells_numba.cells(bufs, t, torch.from_numpy(mask).float(), 4)
    # float64 oracle from the definitions
    t32 = t.double().numpy()
    guides = np.concatenate([np.broadcast_to(normal.transpose(0, 3, 1, 2), (2, 3, h, w)), depth,
                             np.zeros((2, 1, h, w)), albedo], 1)
    lt = np.log1p(np.maximum(t32, 0))
    lum = lt.mean(1, keepdims=True)
    want_cells = _cell_means(guides, 4)
    pooled = _cell_means(np.concatenate([lt, mask, lum ** 2], 1), 4)
    spread = np.sqrt(np.maximum(pooled[:, 4:5] - pooled[:, :3].mean(1, keepdims=True) ** 2, 0))
    np.testing.assert_allclose(cells.numpy(), want_cells, rtol=0, atol=3e-6)
    np.testing.assert_allclose(rest[:, :4].numpy(), pooled[:, :4], rtol=2e-6, atol=2e-6)  # log1p(1e30) = 69.08
    np.testing.assert_allclose(rest[:, 4:].numpy(), spread, rtol=0, atol=5e-5)
    assert torch.isfinite(rest).all()


def _log_depth64(d: np.ndarray) -> np.ndarray:
    far = np.nanmax(np.where(d > 0, d, -np.inf))
    return np.log(np.maximum(np.where(d > 0, d, far if far > 0 else 1.0), 1e-6))


def test_log_depth_matches_float64_with_no_surface_pixels():
    rng = np.random.default_rng(5)
    d = rng.random((2, 1, 9, 13)) * 50
    d[0, 0, :2] = 0  # sky
    d[0, 0, 3, 3] = -1
    d[0, 0, 4, 4] = np.nan
    d[1, 0, 5, 6] = 1e-9  # a surface nearer than the clamp
    d[1, 0, 0, 0] = 1e10  # a sky Blender wrote as 1e10: the batch's largest depth
    np.testing.assert_allclose(log_cpu.log_depth(torch.from_numpy(d).float()).numpy(), _log_depth64(d),
                               rtol=2e-7, atol=2e-7)
    np.testing.assert_array_equal(log_cpu.log_depth(torch.zeros(1, 1, 3, 3)).numpy(), 0)  # no surface: log 1
    strided = torch.from_numpy(d[:1]).float()[..., ::2]  # any strides
    np.testing.assert_allclose(log_cpu.log_depth(strided).numpy(), _log_depth64(d[:1, ..., ::2]), rtol=2e-7, atol=2e-7)


@pytest.mark.parametrize("numba", ["1", "0"])
def test_buffers_log_depth_takes_either_path(numba, monkeypatch):
    """vision.denoise.buffers.log_depth (FLR's and FLNR's guide) gives the float64 values with the numba pass
    (VISION_NUMBA=1) and with the tensor ops (0), sky pixels (depth 0) at the largest depth."""
    from vision.denoise import buffers as B

    monkeypatch.setenv("VISION_NUMBA", numba)
    d = np.random.default_rng(7).random((2, 1, 6, 9)) * 20
    d[1, 0, :2] = 0
    np.testing.assert_allclose(B.log_depth(torch.from_numpy(d).float()).numpy(), _log_depth64(d), rtol=2e-7,
                               atol=2e-7)
