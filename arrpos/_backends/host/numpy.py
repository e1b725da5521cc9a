"""NumPy front-end of the host driver: NumPy arrays (float32, float64, float16,
``ml_dtypes.bfloat16``) on the compiled CPU kernels.

The ops of the op table that the host driver has, with ``_xp``'s names and signatures: this
module says which calls it serves (``supports``: the op table's dtype rule, types and options
only, so its answer holds for a whole signature), allocates outputs and converts tables whose
type the kernels do not pair with ``x``. The driver and its kernels do the rest, guards
included; the public layer has validated every argument.
"""
from __future__ import annotations

import math

import numpy as np

from .. import Unsupported, ops
from . import driver

__all__ = ["DRIVER", "PER_SIGNATURE", "alibi_bias", "alibi_bias_from_mask",
           "alibi_bias_from_positions", "apply_rope", "apply_rope_cached", "apply_rope_qk",
           "bind", "cache_clear", "clip_shift", "conv_positional", "relative_bias",
           "resample_grid", "rope_cos_sin", "sinusoid_table", "supports", "toeplitz_bias"]

DRIVER = "host"
# ``supports`` reads types, dtypes and options only (shapes and strides are the kernels' late
# ``Unsupported``): its answer may be memoised per signature (``_dispatch.plan``)
PER_SIGNATURE = True
_OPS = {name: ops.OPS[name] for name in ops.served_by(DRIVER)}
_I64 = np.dtype(np.int64)
_code = driver.code_of
_APPLY_TYPES = driver.APPLY_TYPES
_rotate = driver.rotate
_RESAMPLE_BLOCK_BYTES = 1 << 20


def _integer(dtype) -> bool:
    kind = getattr(dtype, "kind", None)
    if kind is None:  # a scalar type (the namespace's ``int64``), not a dtype
        try:
            kind = np.dtype(dtype).kind
        except TypeError:
            return False
    return kind in "iu"


def _arrays_ok(arrays) -> bool:
    nd = np.ndarray
    for a in arrays:
        if a is not None and type(a) is not nd:
            return False
    return True


def supports(op, arrays, **options) -> bool:
    """Whether the kernels may serve ``op`` on these NumPy arrays: the op table's dtype rule
    (tables of another kernel type are converted once); the kernels check shapes, strides and
    overlap and raise ``Unsupported`` late."""
    row = _OPS.get(op)
    if row is None or not arrays or not _arrays_ok(arrays):
        return False
    if row.dtype_option and options.get("axes") is not None:
        return False  # multimodal sections: the generic code's
    return row.fits(arrays, options, _code, _integer, True)


def bind(op, arrays, **options):
    """``op`` for this signature (``supports`` said yes): a function of the op's arrays and
    ``out``, positionally, with what depends on the types, shapes and dtypes alone decided
    here once (type codes, threads, store kind), or None where the general function serves.
    Bound functions check the op's values themselves (``validated_by``): for a decode step's
    few microseconds, deciding again on every call is a large part of the cost."""
    if op != "apply_rope_cached":
        return None
    x, cos_cache, _, pos, out = arrays
    tx, tc = _code(x.dtype), _code(cos_cache.dtype)
    if (tx, tc) not in _APPLY_TYPES or pos.dtype != _I64:
        return None
    alloc = out is None and (np.empty if x.nbytes < driver.BLOCK_MIN_BYTES else driver.empty)
    return driver.bind_cached(x.shape, x.dtype, tx, tc, options["layout"] == "interleaved",
                              options["inverse"], alloc)


def cache_clear() -> None:
    """Free what the driver keeps between calls (``arrpos.clear_caches`` calls it)."""
    driver.cache_clear()


# ---- tables -----------------------------------------------------------------------------------

def _table_out(out, shape, dtype):
    if out is None:
        return driver.empty(shape, dtype)
    if out.shape != shape or out.dtype != dtype:
        raise Unsupported("out is not an array of the table's shape and dtype")
    return out


def sinusoid_table(positions, hi, lo, *, layout, dtype, width, xp, out=None):
    """Twin of ``_xp.sinusoid_table`` for NumPy float32/float64/float16/bfloat16 output.

    ``out``: an optional preallocated C-contiguous ``P + (width,)`` array of ``dtype``.
    """
    dtype = np.dtype(dtype)
    res = _table_out(out, tuple(np.shape(positions)) + (width,), dtype)
    driver.sinusoid_into(positions, hi, lo, res, _code(dtype), layout)
    return res


def rope_cos_sin(positions, inv_freq, *, layout, attention_factor, axes, dtype, xp, out=None):
    """Twin of ``_xp.rope_cos_sin``: cos/sin tables ``P + (2F,)`` from exact rotations."""
    dtype = np.dtype(dtype)
    full = tuple(np.shape(positions)) + (2 * np.shape(inv_freq)[-1],)
    cos = _table_out(None if out is None else out[0], full, dtype)
    sin = _table_out(None if out is None else out[1], full, dtype)
    driver.rope_table_into(positions, inv_freq, cos, sin, _code(dtype), layout,
                           attention_factor)
    return cos, sin


# ---- RoPE application ---------------------------------------------------------------------------

def _tables_for(tx, tc, cos, sin):
    """Tables of a type the kernels do not pair with x's, converted once (float32/64)."""
    want = driver.table_code(tx, tc)
    dt = driver.numpy_dtype(want)
    return cos.astype(dt), sin.astype(dt), want


def apply_rope(x, cos, sin, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope``; strided and broadcast cos/sin are read in place, not copied.
    Tables of another float type than the kernels pair with ``x`` are converted once (they
    are small next to ``x``), then rounded once like the generic path's promoted product."""
    tx, tc = _code(x.dtype), _code(cos.dtype)
    if (tx, tc) not in _APPLY_TYPES:
        cos, sin, tc = _tables_for(tx, tc, cos, sin)
    return _rotate(x, cos, sin, out, tx, tc, layout == "interleaved", inverse)


def apply_rope_qk(q, k, cos, sin, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope_qk``: both rotations in one call (``k`` may have fewer heads)."""
    tq, tk, tc = _code(q.dtype), _code(k.dtype), _code(cos.dtype)
    inter = layout == "interleaved"
    cq, sq, tcq = (cos, sin, tc) if (tq, tc) in _APPLY_TYPES else _tables_for(tq, tc, cos, sin)
    ck, sk, tck = ((cq, sq, tcq) if tk == tq else (cos, sin, tc) if (tk, tc) in _APPLY_TYPES
                   else _tables_for(tk, tc, cos, sin))
    qo, ko = (None, None) if out is None else out
    driver.qk_outputs_apart(q, k, qo, ko)
    if qo is not None and np.may_share_memory(qo, q):
        # q rotates in place: k's kernel must accept its arrays first, or the generic path
        # that serves the call then would rotate q a second time
        ko = np.empty(k.shape, k.dtype) if ko is None else ko
        _rotate(k, ck, sk, ko, tk, tck, inter, inverse, check_only=True)
    return (_rotate(q, cq, sq, qo, tq, tcq, inter, inverse),
            _rotate(k, ck, sk, ko, tk, tck, inter, inverse))


def apply_rope_cached(x, cos_cache, sin_cache, position_ids, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope_cached``: one fused gather-and-rotate over the half-width
    caches; ids are checked by the kernel (ValueError naming position_ids)."""
    tx, tc = _code(x.dtype), _code(cos_cache.dtype)
    pos = position_ids
    if pos.dtype is not _I64 and pos.dtype != _I64:
        pos = pos.astype(np.int64)
    if (tx, tc) not in _APPLY_TYPES:  # only the rows used, converted
        driver.check_ids(pos, cos_cache.shape[0])
        flat = pos.reshape(-1)
        cos_cache, sin_cache, tc = _tables_for(tx, tc, cos_cache[flat], sin_cache[flat])
        pos = np.arange(flat.shape[0], dtype=np.int64).reshape(pos.shape)
    return _rotate(x, cos_cache, sin_cache, out, tx, tc, layout == "interleaved", inverse, pos)


# ---- ALiBi and the relative-bias gather --------------------------------------------------------

def alibi_bias(slopes, query_len, key_len, *, mode, query_offset, dtype, xp):
    """Twin of ``_xp.alibi_bias``: ``(heads, query_len, key_len)``, C-contiguous."""
    dtype = np.dtype(dtype)
    out = driver.empty((slopes.shape[0], query_len, key_len), dtype)
    driver.alibi_bias_into(slopes, out, _code(dtype), query_len, key_len, query_offset, mode)
    return out


def _positions(p, lead, ints):
    n = p.shape[-1]
    p = np.broadcast_to(p, lead + (n,)).reshape(-1, n)
    return np.ascontiguousarray(p, dtype=np.int64 if ints else np.float64)


def alibi_bias_from_positions(slopes, query_positions, key_positions, *, mode, lead, dtype,
                              xp):
    """Twin of ``_xp.alibi_bias_from_positions``: ``lead + (heads, q, k)``."""
    dtype = np.dtype(dtype)
    qp, kp = query_positions, key_positions
    ints = _integer(qp.dtype) and _integer(kp.dtype)
    out = driver.empty(lead + (slopes.shape[0], qp.shape[-1], kp.shape[-1]), dtype)
    driver.alibi_positions_into(np.ascontiguousarray(slopes, dtype=np.float64),
                                _positions(qp, lead, ints), _positions(kp, lead, ints), out,
                                _code(dtype), mode)
    return out


def alibi_bias_from_mask(slopes, attention_mask, *, dtype, xp):
    """Twin of ``_xp.alibi_bias_from_mask``: ``(batch, heads, 1, key_len)``; the mask's values
    (0 and 1 only) are checked by the kernel."""
    dtype = np.dtype(dtype)
    b, k = attention_mask.shape
    out = driver.empty((b, slopes.shape[0], 1, k), dtype)
    driver.alibi_mask_into(slopes, attention_mask, out, _code(dtype))
    return out


def relative_bias(table, index, *, dtype, xp):
    """Twin of ``_xp.relative_bias``: ``(heads,) + index.shape``, C-contiguous."""
    out = driver.empty((table.shape[1],) + index.shape, table.dtype)
    driver.relative_gather_into(table, index, out)
    return out


def toeplitz_bias(lines, *, q, k, dtype, xp):
    """Twin of ``_xp.toeplitz_bias``: ``(heads, q, k)``, C-contiguous."""
    out = driver.empty((lines.shape[1], q, k), lines.dtype)
    driver.toeplitz_into(lines, out)
    return out


def clip_shift(x, *, lo, hi, shift, dtype, xp):
    """Twin of ``_xp.clip_shift``: x's shape, C-contiguous, one pass over x."""
    out = driver.empty(x.shape, np.dtype(dtype))
    driver.clip_shift_into(x, out, lo, hi, shift)
    return out


def conv_positional(x, weight, bias, *, activation, residual, dtype, xp):
    """Twin of ``_xp.conv_positional``: ``x``'s shape and dtype, C-contiguous."""
    out = driver.empty(x.shape, x.dtype)
    driver.conv_into(x, weight, bias, out, _code(x.dtype), activation, residual)
    return out


def resample_grid(grid, prefix, *, taps, dtype, xp):
    """Twin of ``_xp.resample_grid``: C-contiguous, ``grid``'s dtype."""
    p = 0 if prefix is None else prefix.shape[-2]
    shape = driver.resample_shape(grid.shape, taps, p)
    nbytes = grid.dtype.itemsize * math.prod(shape)
    # from 1 MiB in a reusable block: a fresh output's page faults cost as much as the kernel
    # (a ViT asks for its table at every new resolution)
    out = (np.empty(shape, grid.dtype) if nbytes < _RESAMPLE_BLOCK_BYTES
           else driver.block_bytes(nbytes).view(grid.dtype).reshape(shape))
    driver.resample_into(grid, prefix, taps, out, _code(grid.dtype))
    return out
