"""CuPy front-end of the CUDA driver: CuPy arrays on the kernels of ``kernels.cu``.

The ops of the op table that the CUDA driver has, with ``_xp``'s names and signatures: this
module says which calls it serves (``supports``: CuPy arrays on one device whose kernels did
not fail to build, of the op table's dtypes for the CUDA kernels) and hands them to the
driver, which allocates outputs with CuPy, guards memory and launches on CuPy's current
stream. The public layer has validated every argument.
"""
from __future__ import annotations

import numpy as np

from .. import ops
from . import driver

__all__ = ["DRIVER", "PER_SIGNATURE", "alibi_bias", "alibi_bias_from_mask",
           "alibi_bias_from_positions", "apply_rope", "apply_rope_cached", "apply_rope_qk",
           "bind", "cache_clear", "conv_positional", "relative_bias", "resample_grid",
           "rope_cos_sin", "sinusoid_table", "supports", "toeplitz_bias"]

DRIVER = "cuda"
# ``supports`` reads each call's devices and their build state
PER_SIGNATURE = False
_OPS = {name: ops.OPS[name] for name in ops.served_by(DRIVER)}


def _kernel_dtypes(row):
    names = frozenset(row.dtypes[DRIVER])

    def code(dtype):
        try:
            name = np.dtype(dtype).name
        except TypeError:
            return None
        return name if name in names else None
    return code


_CODES = {name: _kernel_dtypes(row) for name, row in _OPS.items()}


def _integer(dtype) -> bool:
    return np.dtype(dtype).kind in "iu"


def supports(op: str, arrays=(), **options) -> bool:
    """Whether the CUDA kernel of ``op`` serves these inputs (else ``_dispatch`` tries the next)."""
    row = _OPS.get(op)
    arrs = [a for a in arrays if a is not None]
    if row is None or not arrs or options.get("axes") is not None:
        return False
    ndarray = driver.cp().ndarray
    if not all(isinstance(a, ndarray) for a in arrs):
        return False
    if len({a.device.id for a in arrs}) > 1 or driver.module_failure(arrs[0].device.id):
        return False
    return row.fits(arrays, options, _CODES[op], _integer, False)


def bind(op, arrays, **options):
    """None: every call is decided afresh (devices, build state)."""
    return None


def cache_clear() -> None:
    """Nothing to free: compiled kernels stay for the process."""


def sinusoid_table(positions, hi, lo, *, layout, dtype, width, xp, out=None):
    """Twin of ``_xp.sinusoid_table`` for CuPy positions, float32/float64 output.

    ``out``: an optional preallocated C-contiguous ``P + (width,)`` array of ``dtype`` on the
    device of ``positions``.
    """
    return driver.sinusoid_table(positions, hi, lo, out, layout, width, np.dtype(dtype).name)


def rope_cos_sin(positions, inv_freq, *, layout, attention_factor, axes, dtype, xp, out=None):
    """Twin of ``_xp.rope_cos_sin`` for CuPy positions and frequencies: ``(cos, sin)``, each
    ``P + (2F,)``. ``out``: an optional ``(cos, sin)`` pair of C-contiguous arrays to fill.
    Multimodal ``axes`` are declined by :func:`supports` (the generic code serves them)."""
    cos, sin = (None, None) if out is None else out
    return driver.rope_cos_sin(positions, inv_freq, cos, sin, layout, float(attention_factor),
                               np.dtype(dtype).name)


def apply_rope(x, cos, sin, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope`` for CuPy arrays of one dtype (float16/32/64).

    ``out`` may be ``x`` (in place) or any array of the result's shape that meets no input's
    memory (``_dispatch`` sends other outputs through a temporary, ``memory``'s rule; the
    driver refuses them)."""
    return driver.apply_rope(x, cos, sin, out, layout, inverse)


def apply_rope_cached(x, cos_cache, sin_cache, position_ids, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope_cached`` (ONNX RotaryEmbedding) for CuPy arrays: half-width
    caches of ``x``'s dtype gathered at integer ``position_ids`` inside the kernel."""
    return driver.apply_rope_cached(x, cos_cache, sin_cache, position_ids, out, layout,
                                    inverse)


def apply_rope_qk(q, k, cos, sin, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope_qk``: ``(apply_rope(q, cos, sin), apply_rope(k, cos, sin))``,
    two launches on the current stream, both planned before either runs; ``k`` may have fewer
    heads; ``out`` None or a ``(q_out, k_out)`` pair (each may be None)."""
    q_out, k_out = (None, None) if out is None else out
    return driver.apply_pair(q, k, cos, sin, cos, sin, q_out, k_out, layout, inverse)


def alibi_bias(slopes, query_len, key_len, *, mode, query_offset, dtype, xp):
    """Twin of ``_xp.alibi_bias`` for CuPy slopes: ``(heads, query_len, key_len)``, computed in
    float64 from the slopes and rounded once to ``dtype`` (float16/32/64)."""
    return driver.alibi_bias(slopes, query_len, key_len, None, mode, query_offset,
                             np.dtype(dtype).name)


def alibi_bias_from_positions(slopes, query_positions, key_positions, *, mode, lead, dtype,
                              xp):
    """Twin of ``_xp.alibi_bias_from_positions`` for CuPy arrays: ``lead + (heads, q, k)``,
    the distance exact (int64, or float64 for real positions), the product rounded once."""
    return driver.alibi_bias_from_positions(slopes, query_positions, key_positions, None, mode,
                                            lead, np.dtype(dtype).name)


def alibi_bias_from_mask(slopes, attention_mask, *, dtype, xp):
    """Twin of ``_xp.alibi_bias_from_mask`` for CuPy arrays: ``(batch, heads, 1, key_len)``
    from the mask's cumulative sum (a CuPy scan on the device; the mask's 0/1 values were
    checked before)."""
    counts = driver.cp().cumsum(attention_mask, axis=-1, dtype=np.int64)
    return driver.alibi_bias_from_mask(slopes, counts, None, np.dtype(dtype).name)


def relative_bias(table, index, *, dtype, xp):
    """Twin of ``_xp.relative_bias`` for CuPy arrays: ``(heads,) + index.shape``,
    C-contiguous, the table's bits gathered (ids checked in range before)."""
    return driver.relative_bias(table, index, None, np.dtype(dtype).name)


def toeplitz_bias(lines, *, q, k, dtype, xp):
    """Twin of ``_xp.toeplitz_bias`` for CuPy arrays: the gather of its ids (made on the
    device, in range by construction)."""
    c = driver.cp()
    ids = c.arange(k, dtype=np.int64)[None, :] - (c.arange(q, dtype=np.int64) - (q - 1))[:, None]
    return driver.relative_bias(lines, ids, None, np.dtype(dtype).name)


def conv_positional(x, weight, bias, *, activation, residual, dtype, xp):
    """Twin of ``_xp.conv_positional`` for CuPy arrays: ``x``'s shape and dtype, C-contiguous;
    the host kernel's sums and activations (the GELU's and float32 tanh's exp within a few
    ulps of the generic code's)."""
    return driver.conv_positional(x, weight, bias, None, activation, residual,
                                  np.dtype(dtype).name)


def resample_grid(grid, prefix, *, taps, dtype, xp):
    """Twin of ``_xp.resample_grid`` for CuPy arrays: C-contiguous, ``grid``'s dtype; the host
    taps in the kernel parameters (nothing uploaded), the prefix rows copied on the device."""
    return driver.resample_grid(grid, prefix, taps, None, np.dtype(dtype).name)
