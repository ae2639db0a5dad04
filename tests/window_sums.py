"""Record the window sums a call runs, to check what bounds its cost without timing it.

Every CPU path sums windows through OpenCV's ``boxFilter`` or ``avg_pool2d`` (a padded plane pooled by a
(2r + 1)-wide window), and the Triton path of the local regression through its tap tables
(``local_linear.triton_path.taps_table``: an (n, 2R + 1) table per axis). :func:`window_sums` patches them
for one test and returns the list they append ``(plane or axis side, window side)`` to. The times themselves are
measured by ``vision bench guided-filter --huge-radius`` and ``vision bench local-regression --huge-radius``.

    seen = window_sums(monkeypatch)
    box_filter(x, 10**6, "reflect")
    assert max(k for _, k in seen) <= 4 * 128 + 1
"""
from __future__ import annotations


def window_sums(monkeypatch) -> list:
    import cv2
    import torch.nn.functional as F

    from vision.kernels.local_linear import triton_path

    seen, table, box, pool = [], triton_path.taps_table, cv2.boxFilter, F.avg_pool2d

    def taps_table(n, r, border, device, adjoint=False):
        t, R = table(n, r, border, device, adjoint)
        seen.append((n, t.shape[1]))
        return t, R

    def box_filter(src, ddepth, ksize, *args, **kwargs):
        seen.append((max(src.shape[:2]), max(ksize)))
        return box(src, ddepth, ksize, *args, **kwargs)

    def avg_pool2d(x, kernel_size, *args, **kwargs):
        seen.append((max(x.shape[-2:]), kernel_size if isinstance(kernel_size, int) else max(kernel_size)))
        return pool(x, kernel_size, *args, **kwargs)

    monkeypatch.setattr(triton_path, "taps_table", taps_table)
    monkeypatch.setattr(cv2, "boxFilter", box_filter)
    monkeypatch.setattr(F, "avg_pool2d", avg_pool2d)
    return seen
