"""The numba loop of the denoiser's demodulation (op ``denoise.demodulate``, :func:`.signal.demodulate`, and FLNR's
``denoise.flnr.prepare``) on CPU float32, colour at the guides' resolution: one pass over the buffers as they lie (HWC
arrays are strided planes) writing the planes the later stages read (see :mod:`vision.kernels.runtime.jit`).
Imported only where numba is available (the paths' ``run`` load it).
"""
from __future__ import annotations

import numpy as np
import torch
from numba import prange

from vision.kernels.runtime.jit import kernel

NONE = np.zeros((1, 1, 1, 1), np.float32)  # stands in for a missing buffer (its flag is 0)


@kernel("void(float32[:, :, :, :], float32[:, :, :, :], float32[:, :, :, :], boolean, boolean, boolean, float64, "
        "float32[:, :, :, ::1], float32[:, :, :, ::1], float32[:, :, :, ::1], float32[:, :, :, ::1], "
        "float32[:, :, :, ::1], int64[::1])")
def demodulate(color, albedo, emission, has_albedo, has_emission, planes, floor, target, factor, mask, albedo_out,
               emission_out, hits):
    """:func:`vision.denoise.buffers.demodulate` before its emitter fill, in one pass over the buffers as they lie
    (HWC arrays are strided planes): target = (colour - emission) / factor with factor = max(albedo, ``floor``);
    mask = 1 where any emission channel > 0; ``hits[b H + y]`` counts row y's emitter pixels. With ``planes``, also
    writes the albedo and the emission as planes (``albedo_out``, ``emission_out``; FLNR's later stages read them so)
    when there are such. color (B, 3, H, W); albedo, emission (B or 1, 3, H, W)."""
    B, C, H, W = color.shape
    one, zero, fl = np.float32(1.0), np.float32(0.0), np.float32(floor)
    for n in prange(B * H):
        b = n // H
        y = n - b * H
        m = mask[b, 0, y]
        for x in range(W):
            m[x] = zero
        for c in range(C):
            src, t, f = color[b, c, y], target[b, c, y], factor[b, c, y]
            for x in range(W):
                t[x] = src[x]
            if has_emission:
                e = emission[min(b, emission.shape[0] - 1), c, y]
                if planes:
                    eo = emission_out[b, c, y]
                    for x in range(W):
                        eo[x] = e[x]
                for x in range(W):
                    v = e[x]
                    t[x] -= v
                    if v > zero:
                        m[x] = one
            if has_albedo:
                a = albedo[min(b, albedo.shape[0] - 1), c, y]
                if planes:
                    ao = albedo_out[b, c, y]
                    for x in range(W):
                        ao[x] = a[x]
                for x in range(W):
                    v = a[x]
                    g = v if v >= fl else fl
                    f[x] = g
                    t[x] /= g
            else:
                for x in range(W):
                    f[x] = one
        count = 0
        for x in range(W):
            count += m[x] > zero
        hits[n] = count


def one_pass(color: torch.Tensor, albedo, emission, floor: float, planes: bool = True):
    """:func:`demodulate` on (B, 3, H, W) CPU float32 ``color`` and its albedo and emission ((B or 1, 3, H, W) or
    None): ``(target, factor, mask, albedo, emission, hits)``, the albedo and the emission as planes (None without
    such a buffer, or without ``planes``) and ``hits`` (B, H) the emitter pixels per row; the emitter fill is the
    caller's (:func:`.signal.fill_rows`)."""
    b, c, h, w = color.shape
    target, factor = color.new_empty(b, c, h, w), color.new_empty(b, c, h, w)
    mask = color.new_empty(b, 1, h, w)
    albedo_p = None if albedo is None or not planes else color.new_empty(b, c, h, w)
    emission_p = None if emission is None or not planes else color.new_empty(b, c, h, w)
    hits = np.empty(b * h, np.int64)
    demodulate(color, NONE if albedo is None else albedo, NONE if emission is None else emission,
               albedo is not None, emission is not None, planes, floor, target, factor, mask,
               NONE if albedo_p is None else albedo_p, NONE if emission_p is None else emission_p, hits)
    return target, factor, mask, albedo_p, emission_p, hits.reshape(b, h)
