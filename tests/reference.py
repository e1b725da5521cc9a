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


# --- RoPE: the published formulas as plain float64 Python loops (docs/reference.md, transformers 5) ---


def rope_default_loop(dim, base):
    return [1.0 / base ** (2 * i / dim) for i in range(dim // 2)]


def rope_linear_loop(dim, base, factor):
    return [w / factor for w in rope_default_loop(dim, base)], 1.0


def rope_dynamic_loop(dim, base, factor, max_positions, seq_len=None):
    length = max_positions if seq_len is None else max(seq_len, max_positions)
    new_base = base * (factor * length / max_positions - (factor - 1)) ** (dim / (dim - 2))
    return rope_default_loop(dim, new_base), 1.0


def rope_yarn_loop(dim, base, factor, original, beta_fast=32.0, beta_slow=1.0, mscale=None,
                   mscale_all_dim=None, attention_factor=None, truncate=True):
    def get_mscale(s, m=1.0):
        return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0

    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
        else:
            attention_factor = get_mscale(factor)

    def corr(r):
        return dim * math.log(original / (r * 2 * math.pi)) / (2 * math.log(base))

    low, high = corr(beta_fast), corr(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    out = []
    for i, w in enumerate(rope_default_loop(dim, base)):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        extra = 1.0 - ramp
        out.append((w / factor) * (1 - extra) + w * extra)
    return out, attention_factor


def rope_longrope_loop(dim, base, short, long, original, factor=None, max_positions=None,
                       attention_factor=None, seq_len=None):
    if factor is None:
        factor = 1.0 if max_positions is None else max_positions / original
    if attention_factor is None:
        attention_factor = (1.0 if factor <= 1.0
                            else math.sqrt(1 + math.log(factor) / math.log(original)))
    ext = long if (seq_len is not None and seq_len > original) else short
    return [1.0 / (e * base ** (2 * i / dim)) for i, e in enumerate(ext)], attention_factor


def rope_llama3_loop(dim, base, factor, low_ff, high_ff, original):
    low_wl, high_wl = original / low_ff, original / high_ff
    out = []
    for w in rope_default_loop(dim, base):
        wl = 2 * math.pi / w
        if wl < high_wl:
            out.append(w)
        elif wl > low_wl:
            out.append(w / factor)
        else:
            s = (original / wl - low_ff) / (high_ff - low_ff)
            out.append((1 - s) * w / factor + s * w)
    return out, 1.0


def rope_proportional_loop(dim, base, prf, factor=1.0):
    k = int(prf * dim // 2)
    return [(1.0 / base ** (2 * j / dim) if j < k else 0.0) / factor
            for j in range(dim // 2)], 1.0


def rope_tables_exact(positions, inv_freq, layout="half", attention_factor=1.0):
    """(cos, sin) P + (2F,) of RoPE at 40 digits for the float64 frequencies given."""
    freqs = [mp.mpf(float(w)) for w in np.asarray(inv_freq, dtype=np.float64)]
    s, c = exact_sincos(positions, freqs)
    s, c = s * attention_factor, c * attention_factor
    if layout == "half":
        return np.concatenate([c, c], -1), np.concatenate([s, s], -1)
    return np.repeat(c, 2, axis=-1), np.repeat(s, 2, axis=-1)


def rotate_half_np(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def rotate_every_two_np(x):
    return np.stack([-x[..., 1::2], x[..., 0::2]], axis=-1).reshape(x.shape)


def rope_apply_loop(x, cos, sin, layout="half", inverse=False):
    """float64 ``apply_rope`` written out pair by pair: ``cos``/``sin`` full width ``(..., R)``
    broadcasting against ``x[..., :R]``; features ``R:`` pass through."""
    x = np.asarray(x, dtype=np.float64)
    r = cos.shape[-1]
    cos = np.broadcast_to(np.asarray(cos, np.float64), x.shape[:-1] + (r,))
    sin = np.broadcast_to(np.asarray(sin, np.float64), x.shape[:-1] + (r,))
    sin = -sin if inverse else sin
    out = x.copy()
    h = r // 2
    for j in range(h):
        a, b = (j, j + h) if layout == "half" else (2 * j, 2 * j + 1)
        out[..., a] = x[..., a] * cos[..., a] - x[..., b] * sin[..., a]
        out[..., b] = x[..., b] * cos[..., b] + x[..., a] * sin[..., b]
    return out


def numpy_float_dtypes():
    """The NumPy storage types the kernels have: float32, float64, float16 and, where
    ml_dtypes installs, bfloat16."""
    out = [np.float32, np.float64, np.float16]
    try:
        import ml_dtypes

        out.append(ml_dtypes.bfloat16)
    except ImportError:
        pass
    return out
