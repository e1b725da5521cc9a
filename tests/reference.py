"""Independent references for the tests: mpmath at 40 digits and plain float64 loops.

Nothing here imports arrpos; every value is computed from the published formulas.
"""
from __future__ import annotations

import math

import mpmath as mp
import numpy as np

mp.mp.dps = 40


def exact_sincos(positions, freqs_mp):
    """(sin, cos) of p * w for each position and each mpmath frequency, as float64 arrays."""
    pos = np.asarray(positions).reshape(-1)
    s = np.empty((pos.size, len(freqs_mp)))
    c = np.empty_like(s)
    for j, p in enumerate(pos.tolist()):
        pm = mp.mpf(p)
        for i, w in enumerate(freqs_mp):
            a = pm * w
            s[j, i] = float(mp.sin(a))
            c[j, i] = float(mp.cos(a))
    shape = np.shape(positions) + (len(freqs_mp),)
    return s.reshape(shape), c.reshape(shape)


def vaswani_freqs(dim, base):
    return [mp.power(mp.mpf(base), -mp.mpf(2 * i) / dim) for i in range(dim // 2)]


def sinusoid_exact(positions, dim, base=10000.0, layout="interleaved"):
    s, c = exact_sincos(positions, vaswani_freqs(dim, base))
    if layout == "interleaved":
        out = np.stack([s, c], axis=-1).reshape(s.shape[:-1] + (dim,))
    else:
        out = np.concatenate([s, c], axis=-1)
    return out


def sinusoid_loop(n, dim, base=10000.0):
    """The paper's definition as a float64 double loop."""
    pe = np.zeros((n, dim))
    for p in range(n):
        for i in range(dim // 2):
            angle = p / base ** (2 * i / dim)
            pe[p, 2 * i] = math.sin(angle)
            pe[p, 2 * i + 1] = math.cos(angle)
    return pe


def diffusers_timestep(timesteps, dim, flip=False, shift=1.0, scale=1.0, max_period=10000):
    """diffusers.models.embeddings.get_timestep_embedding, transcribed in float64 NumPy."""
    half = dim // 2
    exponent = -math.log(max_period) * np.arange(half, dtype=np.float64) / (half - shift)
    emb = np.asarray(timesteps, dtype=np.float64)[:, None] * np.exp(exponent)[None, :]
    emb = scale * emb
    emb = np.concatenate([np.sin(emb), np.cos(emb)], axis=-1)
    if flip:
        emb = np.concatenate([emb[:, half:], emb[:, :half]], axis=-1)
    if dim % 2 == 1:
        emb = np.pad(emb, ((0, 0), (0, 1)))
    return emb


def mae_2d_sincos(embed_dim, grid_h, grid_w):
    """MAE's get_2d_sincos_pos_embed (no cls token), transcribed in float64 NumPy."""
    gh = np.arange(grid_h, dtype=np.float64)
    gw = np.arange(grid_w, dtype=np.float64)
    grid = np.meshgrid(gw, gh)  # w goes first
    grid = np.stack(grid, axis=0).reshape(2, 1, grid_h, grid_w)

    def one(d, pos):
        omega = np.arange(d // 2, dtype=np.float64) / (d / 2.0)
        omega = 1.0 / 10000**omega
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)

    emb_h = one(embed_dim // 2, grid[0])
    emb_w = one(embed_dim // 2, grid[1])
    return np.concatenate([emb_h, emb_w], axis=1)
