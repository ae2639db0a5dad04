"""Meshes and images generated in code for the procedural scenes (NumPy only, no Mitsuba): the torus,
cone and blob shapes of :class:`vision.data.scenes.SceneObject`, value-noise textures and the sky.

Every mesh is ``(V, F, N, UV)``: vertices (n, 3), counter-clockwise triangles (m, 3) whose geometric normal
agrees with the vertex normals N (n, 3), and texture coordinates (n, 2).
"""
from __future__ import annotations

import math

import numpy as np


def torus_mesh(major: float, minor: float, n_major: int = 48, n_minor: int = 24):
    """Torus about the +y axis centred at the origin."""
    a = np.linspace(0, 2 * np.pi, n_major + 1)
    b = np.linspace(0, 2 * np.pi, n_minor + 1)
    A, B = np.meshgrid(a, b, indexing="ij")
    ring = np.stack([np.cos(A), np.zeros_like(A), np.sin(A)], -1)
    normal = np.cos(B)[..., None] * ring + np.sin(B)[..., None] * np.array([0.0, 1.0, 0.0])
    pos = major * ring + minor * normal
    uv = np.stack([A / (2 * np.pi), B / (2 * np.pi)], -1)
    return _grid_mesh(pos, normal, uv)


def cone_mesh(radius: float, height: float, n: int = 48):
    """Cone with apex up at (0, height, 0), base disk at y = 0, smooth side normals."""
    a = np.linspace(0, 2 * np.pi, n + 1)
    t = np.linspace(0, 1, 9)  # rows from base to apex, so shading stays smooth
    A, Tt = np.meshgrid(a, t, indexing="ij")
    ring = np.stack([np.cos(A), np.zeros_like(A), np.sin(A)], -1)
    pos = (1 - Tt)[..., None] * radius * ring + Tt[..., None] * np.array([0.0, height, 0.0])
    slope = radius / math.hypot(radius, height)
    normal = ring * (height / math.hypot(radius, height)) + np.array([0.0, slope, 0.0])
    uv = np.stack([A / (2 * np.pi), Tt], -1)
    V, F, N, UV = _grid_mesh(pos, normal, uv)
    # base disk: a fan around the centre, facing -y
    c = len(V)
    rim = np.stack([radius * np.cos(a[:-1]), np.zeros(n), radius * np.sin(a[:-1])], -1)
    V = np.concatenate([V, [[0.0, 0.0, 0.0]], rim])
    N = np.concatenate([N, np.tile([0.0, -1.0, 0.0], (n + 1, 1))])
    UV = np.concatenate([UV, [[0.5, 0.5]], 0.5 + 0.5 * rim[:, [0, 2]] / radius])
    i = np.arange(n)
    F = np.concatenate([F, np.stack([np.full(n, c), c + 1 + i, c + 1 + (i + 1) % n], -1)])
    return V, F, N, UV


def blob_mesh(radius: float, amplitude: float, seed: int, n_lat: int = 32, n_lon: int = 64):
    """A lumpy sphere: the radius is modulated by a few random spherical waves (a 'rock')."""
    rng = np.random.default_rng(seed)
    th = np.linspace(0, np.pi, n_lat + 1)
    ph = np.linspace(0, 2 * np.pi, n_lon + 1)
    TH, PH = np.meshgrid(th, ph, indexing="ij")
    d = np.stack([np.sin(TH) * np.cos(PH), np.cos(TH), np.sin(TH) * np.sin(PH)], -1)
    waves = rng.normal(size=(5, 3))
    waves /= np.linalg.norm(waves, axis=1, keepdims=True)
    freq, phase = rng.uniform(1.5, 4.0, 5), rng.uniform(0, 2 * np.pi, 5)
    bump = sum(np.sin(f * (d @ w) + p) for w, f, p in zip(waves, freq, phase)) / 5
    pos = d * (radius * (1 + amplitude * bump))[..., None]
    uv = np.stack([PH / (2 * np.pi), TH / np.pi], -1)
    V, F, _, UV = _grid_mesh(pos, d, uv)
    return V, F, _vertex_normals(V, F), UV


def _grid_mesh(pos, normal, uv):
    """Triangulate an (m+1) x (n+1) vertex grid; triangles wind counter-clockwise seen from ``normal``."""
    m, n = pos.shape[0] - 1, pos.shape[1] - 1
    idx = np.arange((m + 1) * (n + 1)).reshape(m + 1, n + 1)
    a, b, c, d = idx[:-1, :-1], idx[1:, :-1], idx[1:, 1:], idx[:-1, 1:]
    F = np.concatenate([np.stack([a, d, b], -1).reshape(-1, 3), np.stack([b, d, c], -1).reshape(-1, 3)])
    V, N = pos.reshape(-1, 3), normal.reshape(-1, 3)
    N = N / np.maximum(np.linalg.norm(N, axis=1, keepdims=True), 1e-12)
    # orient every triangle so its geometric normal agrees with the analytic vertex normals
    g = np.cross(V[F[:, 1]] - V[F[:, 0]], V[F[:, 2]] - V[F[:, 0]])
    flip = np.einsum("ij,ij->i", g, N[F].sum(1)) < 0
    F[flip] = F[flip][:, [0, 2, 1]]
    # drop degenerate triangles at poles and apexes
    area = np.linalg.norm(np.cross(V[F[:, 1]] - V[F[:, 0]], V[F[:, 2]] - V[F[:, 0]]), axis=1)
    return V, F[area > 1e-12], N, uv.reshape(-1, 2)


def _vertex_normals(V, F):
    g = np.cross(V[F[:, 1]] - V[F[:, 0]], V[F[:, 2]] - V[F[:, 0]])
    N = np.zeros_like(V)
    for k in range(3):
        np.add.at(N, F[:, k], g)
    # grid seams duplicate vertices: average normals of coincident positions so the seam is smooth
    key = np.round(V / max(np.abs(V).max(), 1e-9) * 1e6).astype(np.int64)
    _, inv = np.unique(key, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    S = np.zeros((inv.max() + 1, 3))
    np.add.at(S, inv, N)
    N = S[inv]
    return N / np.maximum(np.linalg.norm(N, axis=1, keepdims=True), 1e-12)


def object_mesh(obj):
    """World-space (V, F, N, UV) of a torus, cone or blob object."""
    p = obj.params
    if obj.shape == "torus":
        V, F, N, UV = torus_mesh(p["major"], p["minor"])
        R = _rot_y(p["yaw"]) @ _rot_x(p["tilt"])
        c = np.asarray(p["center"])
    elif obj.shape == "cone":
        V, F, N, UV = cone_mesh(p["radius"], p["height"])
        R, c = np.eye(3), np.asarray(p["base"])
    elif obj.shape == "blob":
        V, F, N, UV = blob_mesh(p["radius"], p["amplitude"], p["seed"])
        R, c = np.eye(3), np.asarray(p["center"])
    else:
        raise ValueError(f"{obj.shape!r} is not a mesh shape")
    return V @ R.T + c, F, N @ R.T, UV


def noise_texture(seed: int, color0, color1, scale: float = 4.0, res: int = 128) -> np.ndarray:
    """Tileable fractal value noise blended between two colours: (res, res, 3) float32 in [0, 1]."""
    rng = np.random.default_rng(seed)
    t = np.zeros((res, res))
    amp, total = 1.0, 0.0
    for octave in range(4):
        g = max(2, int(round(scale * 2 ** octave)))
        lattice = rng.random((g, g))
        x = np.arange(res) * g / res
        i0 = np.floor(x).astype(int)
        w = x - i0
        w = w * w * (3 - 2 * w)
        i1 = (i0 + 1) % g
        rows = lattice[i0] * (1 - w)[:, None] + lattice[i1] * w[:, None]
        t += amp * (rows[:, i0] * (1 - w)[None] + rows[:, i1] * w[None])
        total += amp
        amp *= 0.5
    t = (t / total - 0.5) * 2.2 + 0.5  # stretch the contrast; values pile up near 0.5 otherwise
    t = np.clip(t, 0, 1)[..., None]
    c0, c1 = np.asarray(color0), np.asarray(color1)
    return (c0 * (1 - t) + c1 * t).astype(np.float32)


def sky_image(sky: dict, height: int = 64) -> np.ndarray:
    """Latitude-longitude sky (height, 2 * height, 3): zenith -> horizon gradient above, ground below."""
    v = (np.arange(height) + 0.5) / height  # 0 = up (+y), 1 = down
    elev = (0.5 - v) * np.pi
    z, h, g = (np.asarray(sky[k], dtype=np.float64) for k in ("zenith", "horizon", "ground"))
    s = np.clip(np.sin(elev), 0, 1)[:, None] ** 0.5
    up = h * (1 - s) + z * s
    row = np.where((elev > 0)[:, None], up, g)
    img = np.repeat(row[:, None, :], 2 * height, axis=1) * sky.get("scale", 1.0)
    return img.astype(np.float32)


def _rot_y(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])


def _rot_x(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])
