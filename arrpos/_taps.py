"""Resampling taps: the separable weights of ``torch.nn.functional.interpolate`` (``linear`` /
``bilinear`` / ``bicubic``, with or without antialias), built on the host in torch's own
precision once per size pair, and their application per axis (the op ``resample_grid`` of
``resample``, ``resample_grids`` and ``resize_relative_table``: the compiled kernels where
they serve, else one gather and a weighted sum per axis, ``_backends._xp``).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from . import _dispatch
from ._backends._xp import apply_taps, work_dtype

__all__ = ["apply_taps", "host_taps", "resample_grid", "weights_1d", "weights_1d_aa",
           "work_dtype"]

_CUBIC_A = -0.75  # torch's (and OpenCV's) bicubic coefficient
_AA_CUBIC_A = -0.5  # torch's antialiased bicubic uses Keys' (and PIL's) coefficient instead


def _scale(n_in, n_out, align_corners, f):
    """The scale of torch's ``area_pixel_compute_scale`` in precision ``f``: ``n_in / n_out``, or
    ``(n_in - 1) / (n_out - 1)`` (0 for one output) with ``align_corners``."""
    if align_corners:
        return f(f(n_in - 1) / f(n_out - 1)) if n_out > 1 else f(0.0)
    return f(f(n_in) / f(n_out))


def weights_1d(n_in, n_out, method, single, align_corners=False):
    """Taps ``(index, weight)``, each ``(n_out, T)``, of torch's resampling: output ``i`` is
    ``sum_t weight[i, t] * input[index[i, t]]``.

    torch forms the source coordinates and the weights in the input's precision (float for a
    float32 input, double for float64); ``single`` repeats its float32 operations step by step
    so that the weights are torch's own, then they are applied in the working precision.
    Taps past the border are clamped onto it, as torch does (their weights add up there).
    The source of output ``i`` is ``scale * (i + 0.5) - 0.5`` (``align_corners=False``) or
    ``scale * i`` (``align_corners=True``: the corner samples meet).
    """
    f = np.float32 if single else np.float64
    scale = _scale(n_in, n_out, align_corners, f)
    if align_corners:
        src = scale * np.arange(n_out).astype(f)
    else:
        src = scale * (np.arange(n_out).astype(f) + f(0.5)) - f(0.5)
    if method == "linear":
        src = np.maximum(src, f(0.0))  # torch clamps negative sources for linear modes
        i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
        i1 = np.minimum(i0 + 1, n_in - 1)
        lam = np.clip(src - i0.astype(f), f(0.0), f(1.0))
        return np.stack([i0, i1], axis=1), np.stack([f(1.0) - lam, lam], axis=1).astype(np.float64)
    a = f(_CUBIC_A)
    i0 = np.floor(src).astype(np.int64)
    t = src - i0.astype(f)

    def near(x):  # |x| <= 1
        return ((a + f(2)) * x - (a + f(3))) * x * x + f(1)

    def far(x):  # 1 < |x| < 2
        return ((a * x - f(5) * a) * x + f(8) * a) * x - f(4) * a

    t2 = f(1.0) - t
    taps = ((-1, far(t + f(1.0))), (0, near(t)), (1, near(t2)), (2, far(t2 + f(1.0))))
    index = np.stack([np.clip(i0 + k, 0, n_in - 1) for k, _ in taps], axis=1)  # clamp
    return index, np.stack([w for _, w in taps], axis=1).astype(np.float64)


def _fma32(a, b, c):
    """float32 ``a * b + c`` rounded once, as a fused multiply-add (the product is exact in
    float64)."""
    return (a.astype(np.float64) * b + c).astype(np.float32)


def _aa_filter(x, method, f):
    """PyTorch's antialias filters of ``|x|``: the triangle, or Keys' cubic with ``a = -0.5``.

    torch's CPU kernels are built with FMA contraction: in float32 the cubic's Horner steps are
    fused multiply-adds, reproduced here so that the weights are torch's own bit for bit.
    """
    if method == "linear":
        return np.where(x < f(1.0), f(1.0) - x, f(0.0)).astype(f)
    a = f(_AA_CUBIC_A)
    if f is np.float32:
        near = _fma32(_fma32(a + f(2), x, -(a + f(3))) * x, x, f(1))
        far = _fma32(_fma32(_fma32(a, x, -(f(5) * a)), x, f(8) * a), x, -(f(4) * a))
    else:
        near = ((a + 2) * x - (a + 3)) * x * x + 1
        far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < f(1.0), near, np.where(x < f(2.0), far, f(0.0))).astype(f)


def weights_1d_aa(n_in, n_out, method, single, align_corners=False):
    """Taps ``(index, weight)`` ``(n_out, T)`` of torch's ``antialias=True`` resampling.

    As torch's ``_compute_indices_min_size_weights_aa``: when downsampling the filter's
    support widens by the factor ``n_in / n_out`` (a low-pass before sampling); taps outside
    the input are dropped and each row is renormalised (no border clamping). The mixed
    float/double steps of torch's float32 path are repeated when ``single``. With
    ``align_corners`` torch changes only the scale (``(n_in - 1) / (n_out - 1)``); the
    filter stays centred on ``scale * (i + 0.5)``.
    """
    f, d = (np.float32 if single else np.float64), np.float64
    scale = _scale(n_in, n_out, align_corners, f)
    down = scale >= 1.0
    half = 1.0 if method == "linear" else 2.0  # half the filter's support at scale 1
    support = f(half * d(scale)) if down else f(half)
    invscale = f(1.0 / d(scale)) if down else f(1.0)
    width = int(math.ceil(support)) * 2 + 1
    center = (d(scale) * (np.arange(n_out) + 0.5)).astype(f)
    # C++ casts to int64 truncate toward zero
    xmin = np.maximum(np.trunc((center - support).astype(d) + 0.5).astype(np.int64), 0)
    xmax = np.minimum(np.trunc((center + support).astype(d) + 0.5).astype(np.int64), n_in)
    xsize = np.clip(xmax - xmin, 0, width)
    taps = xmin[:, None] + np.arange(width)[None, :]
    valid = np.arange(width)[None, :] < xsize[:, None]
    x = ((taps.astype(f) - center[:, None]).astype(d) + 0.5) * d(invscale)
    w = np.where(valid, _aa_filter(np.abs(x.astype(f)), method, f), f(0.0)).astype(f)
    total = np.zeros(n_out, dtype=f)
    for k in range(width):  # torch sums the taps in order
        total = (total + w[:, k]).astype(f)
    w = np.where(total[:, None] != 0, w / np.where(total == 0, f(1), total)[:, None], w)
    # taps past xsize carry no weight; they point at row 0 (any row would do)
    return np.where(valid, taps, 0), np.where(valid, w, f(0.0)).astype(np.float64)


@functools.lru_cache(maxsize=128)
def host_taps(n_in, n_out, method, antialias, single, align_corners):
    """The taps ``(index, weight)`` of one axis (``weights_1d_aa`` or ``weights_1d``), made
    once per size pair and kept read-only: a ViT resamples its table at every new resolution,
    and building them costs more than applying them to a small table."""
    weights = weights_1d_aa if antialias else weights_1d
    index, weight = weights(n_in, n_out, method, single, align_corners)
    index, weight = np.ascontiguousarray(index, np.int64), np.ascontiguousarray(weight)
    index.flags.writeable = weight.flags.writeable = False
    return index, weight


def resample_grid(xp, grid, old, new, *, method, antialias, align_corners, single,
                  prefix=None):
    """Resample the grid axes ``old`` (just before the feature axis) of ``grid`` to ``new``
    with torch's taps, the first axis first, in float64 where the device has it, rounded once
    to ``grid``'s dtype: ``(..., P + prod(new), C)``, the rows of ``prefix`` ``(..., P, C)``
    first (written in place by the kernels: no concatenation afterwards)."""
    taps = tuple(None if n_in == n_out
                 else host_taps(n_in, n_out, method, antialias, single, align_corners)
                 for n_in, n_out in zip(old, new))
    return _dispatch.call("resample_grid", xp, grid, prefix, taps=taps, dtype=grid.dtype)
