"""Torch CPU tensors to the compiled kernels, zero-copy through DLPack.

Used by ``_dispatch`` only for CPU tensors that do not require grad (autograd needs the generic
path's ordinary expressions) and whose memory is really there (``_memory.tensor_memory_known``:
not under ``torch.compile``, ``vmap`` or ``grad``, not fake, meta or a subclass; the generic
path serves those, as ordinary torch code). Same function names and signatures as ``_xp``;
every function views the tensors as NumPy arrays (no copy) and runs the ``_numpy`` kernels on
them with the tensors' storage types: float32, float64, float16, and bfloat16 (NumPy has no
bfloat16 of its own, so it travels as int16 bits and the kernel is told).
"""
from __future__ import annotations

import numpy as np
import torch

from . import Unsupported, _numpy
from ._memory import tensor_has_storage, torch_tracing

__all__ = ["apply_rope", "apply_rope_cached", "apply_rope_qk", "rope_cos_sin", "sinusoid_table",
           "supports"]

_CODES = {torch.float32: _numpy._F32, torch.float64: _numpy._F64, torch.float16: _numpy._F16,
          torch.bfloat16: _numpy._BF16}
_TABLE_DTYPE = {_numpy._F32: torch.float32, _numpy._F64: torch.float64,
                _numpy._F16: torch.float32, _numpy._BF16: torch.float32}
# ids of every integer dtype: the kernel reads int64 (others converted, torch's unsigned
# types included, for which torch itself has few operations)
_INT_IDS = frozenset({torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                      torch.uint16, torch.uint32, torch.uint64})
# the kernels check the ids they gather (ValueError naming position_ids): _dispatch.call_checked
VALIDATES = frozenset({"apply_rope_cached"})
# as _numpy's: the kernels refuse outputs that meet the inputs (on the tensors' NumPy views)
GUARDS = _numpy.GUARDS


def _servable(t) -> bool:
    """A tensor the kernels may read or write through a NumPy view (outside a trace): a CPU
    tensor with storage (``tensor_has_storage``), without autograd, and no neg/conj bit (its
    memory holds the other sign: the generic path resolves it)."""
    return (t.device.type == "cpu" and not t.requires_grad and tensor_has_storage(t)
            and not t.is_neg() and not t.is_conj())


def supports(op, arrays, **kwargs) -> bool:
    """CPU tensors without autograd, of a kernel dtype (shapes and strides: checked late)."""
    if op not in _numpy._OPS or not arrays or torch_tracing():
        return False
    qk = op == "apply_rope_qk"
    for a in (arrays[:4] + _numpy._qk_outs(arrays)) if qk else arrays:
        if a is not None and (not isinstance(a, torch.Tensor) or not _servable(a)):
            return False
    if op in ("sinusoid_table", "rope_cos_sin"):
        # an odd sinusoid width (keras-hub) needs a scratch table: the generic path
        return (kwargs.get("axes") is None and kwargs["dtype"] in _CODES
                and kwargs.get("width", 0) % 2 == 0)
    if op == "apply_rope_cached":
        x, cos, sin, pos, out = arrays
        return (x.dtype in _CODES and cos.dtype in _CODES and sin.dtype == cos.dtype
                and pos.dtype in _INT_IDS and (out is None or out.dtype == x.dtype))
    xs, tables = (arrays[:2], arrays[2:4]) if qk else (arrays[:1], arrays[1:3])
    outs = _numpy._qk_outs(arrays) if qk else (arrays[3],)
    return (all(x.dtype in _CODES for x in xs) and tables[0].dtype in _CODES
            and tables[1].dtype == tables[0].dtype
            and all(o is None or o.dtype == x.dtype for o, x in zip(outs, xs)))


def _np(t):
    """A NumPy view of a tensor (bfloat16 as its int16 bits)."""
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return np.from_dlpack(t)


def _ids(t):
    """Position ids as a NumPy int64 array: a view where they already are, else converted
    (an unsigned id beyond int64 wraps negative, and the kernel rejects it as out of range)."""
    if t.dtype != torch.int64:
        t = t.to(torch.int64)
    return np.from_dlpack(t)


def _tables(tx, cos, sin):
    tc = _CODES[cos.dtype]
    if (tx, tc) not in _numpy._APPLY_TYPES:  # convert once (tables are small next to x)
        dt = _TABLE_DTYPE[tx]
        cos, sin, tc = cos.to(dt), sin.to(dt), _CODES[dt]
    return _np(cos), _np(sin), tc


def _empty(shape, dtype):
    """``torch.empty``; large outputs in the kernels' reusable blocks (``_numpy.empty_bytes``)."""
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n
    if nbytes < _numpy._BLOCK_MIN_BYTES:
        return torch.empty(shape, dtype=dtype)
    return torch.from_numpy(_numpy.empty_bytes(nbytes)).view(dtype).view(shape)


def _rotate(x, cn, sn, tc, out, layout, inverse, pos=None, check_only=False):
    res = out if out is not None else _empty(tuple(x.shape), x.dtype)
    xn = _np(x)
    on = xn if res is x else _np(res)
    _numpy._rotate(xn, cn, sn, on, _CODES[x.dtype], tc, layout == "interleaved", inverse, pos,
                   check_only)
    return res


def apply_rope(x, cos, sin, *, layout, inverse, xp, out=None):
    cn, sn, tc = _tables(_CODES[x.dtype], cos, sin)
    return _rotate(x, cn, sn, tc, out, layout, inverse)


def apply_rope_qk(q, k, cos, sin, *, layout, inverse, xp, out=None):
    qo, ko = (None, None) if out is None else out
    if qo is not None or ko is not None:  # (the NumPy views: their bounds in C)
        nq, nk = _np(q), _np(k)
        _numpy._qk_outputs_apart(nq, nk, qo if qo is None else (nq if qo is q else _np(qo)),
                                 ko if ko is None else (nk if ko is k else _np(ko)))
    cq, sq, tq = _tables(_CODES[q.dtype], cos, sin)
    ck, sk, tk = (cq, sq, tq) if k.dtype == q.dtype else _tables(_CODES[k.dtype], cos, sin)
    if qo is not None and qo.untyped_storage().data_ptr() == q.untyped_storage().data_ptr():
        # q rotates in place (as _numpy.apply_rope_qk): k's kernel must accept its arrays first
        ko = _rotate(k, ck, sk, tk, ko, layout, inverse, check_only=True)
    return (_rotate(q, cq, sq, tq, qo, layout, inverse),
            _rotate(k, ck, sk, tk, ko, layout, inverse))


def apply_rope_cached(x, cos_cache, sin_cache, position_ids, *, layout, inverse, xp, out=None):
    tx, tc = _CODES[x.dtype], _CODES[cos_cache.dtype]
    pos = _ids(position_ids)
    if (tx, tc) not in _numpy._APPLY_TYPES:  # only the rows used, converted
        n = cos_cache.shape[0]
        if pos.size and (pos.min() < 0 or pos.max() >= n):
            raise ValueError(f"position_ids must lie in [0, {n}) (the cache rows), got values "
                             f"from {pos.min()} to {pos.max()}")
        flat = torch.from_numpy(np.ascontiguousarray(pos.reshape(-1)))
        dt = _TABLE_DTYPE[tx]
        cos_cache, sin_cache = cos_cache[flat].to(dt), sin_cache[flat].to(dt)
        pos, tc = np.arange(flat.shape[0], dtype=np.int64).reshape(pos.shape), _CODES[dt]
    return _rotate(x, _np(cos_cache), _np(sin_cache), tc, out, layout, inverse, pos)


def _table_out(out, shape, dtype):
    if out is None:
        return _empty(shape, dtype)
    if tuple(out.shape) != shape or out.dtype != dtype or not out.is_contiguous():
        raise Unsupported("out is not a contiguous tensor of the table's shape and dtype")
    return out


def sinusoid_table(positions, hi, lo, *, layout, dtype, width, xp, out=None):
    res = _table_out(out, tuple(positions.shape) + (width,), dtype)
    hi = np.ascontiguousarray(hi, dtype=np.float64)
    lo = np.ascontiguousarray(lo, dtype=np.float64)
    _numpy._table_into(_np(positions), hi, lo, _np(res), _CODES[dtype], width, layout)
    return res


def rope_cos_sin(positions, inv_freq, *, layout, attention_factor, axes, dtype, xp, out=None):
    w = np.ascontiguousarray(_np(inv_freq), dtype=np.float64).reshape(-1)
    full = tuple(positions.shape) + (2 * w.shape[0],)
    cos = _table_out(None if out is None else out[0], full, dtype)
    sin = _table_out(None if out is None else out[1], full, dtype)
    _numpy._table_into(_np(positions), w, np.zeros_like(w), _np(cos), _CODES[dtype], full[-1],
                       layout, attention_factor, _np(sin))
    return cos, sin
