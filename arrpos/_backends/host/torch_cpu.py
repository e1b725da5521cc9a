"""Torch CPU front-end of the host driver: CPU tensors on the compiled kernels, zero-copy
through DLPack.

Used by ``_dispatch`` for CPU tensors whose memory is really there
(``memory.tensor_memory_known``: not under ``torch.compile``, ``vmap`` or ``grad``, not fake,
meta or a subclass) that do not require grad; a rotation without ``out`` whose tensors require
grad, or that torch traces or transforms, goes through the custom ops of ``torch_ops`` (their
bodies run these kernels on the real tensors; autograd, fake tensors and vmap are theirs);
the generic path serves the rest, as ordinary torch code. Same function names and signatures
as ``_xp``;
every function views the tensors as NumPy arrays (no copy) and runs the host driver on them
with the tensors' storage types: float32, float64, float16, and bfloat16 (NumPy has no
bfloat16 of its own, so it travels as int16 bits and the kernel is told). Outputs are torch
tensors (large ones in the driver's reusable blocks).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .. import Unsupported, ops
from ..memory import tensor_has_storage, torch_tracing
from . import driver

try:
    from .. import torch_ops
except (ImportError, AttributeError):  # a torch without torch.library.custom_op and its kin
    torch_ops = None  # type: ignore[assignment]

__all__ = ["DRIVER", "PER_SIGNATURE", "alibi_bias", "alibi_bias_from_mask",
           "alibi_bias_from_positions", "apply_rope", "apply_rope_cached", "apply_rope_qk",
           "bind", "cache_clear", "clip_shift", "conv_positional", "relative_bias",
           "resample_grid", "rope_cos_sin", "sinusoid_table", "supports", "toeplitz_bias"]

DRIVER = "host"
# ``supports`` reads each call's autograd state and trace: nothing holds for a signature
PER_SIGNATURE = False
_OPS = {name: ops.OPS[name] for name in ops.served_by(DRIVER)}
_CODES = {torch.float32: driver.F32, torch.float64: driver.F64, torch.float16: driver.F16,
          torch.bfloat16: driver.BF16}
_DTYPES = {code: dt for dt, code in _CODES.items()}
_APPLY_TYPES = driver.APPLY_TYPES
_host_rotate = driver.rotate
# ids of every integer dtype: the kernel reads int64 (others converted, torch's unsigned
# types included, for which torch itself has few operations)
_INT_IDS = frozenset({torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                      torch.uint16, torch.uint32, torch.uint64})


def _servable(t) -> bool:
    """A tensor the kernels may read or write through a NumPy view (outside a trace): a CPU
    tensor with storage (``tensor_has_storage``) and no neg/conj bit (its memory holds the
    other sign: the generic path resolves it)."""
    return (t.device.type == "cpu" and tensor_has_storage(t) and not t.is_neg()
            and not t.is_conj())


def _through_op(*tensors) -> bool:
    """Whether a rotation of these tensors (without ``out``) takes the custom op: autograd
    records it, or torch traces or transforms it."""
    return torch_tracing() or any(t.requires_grad for t in tensors)


def supports(op, arrays, **options) -> bool:
    """CPU tensors of the op table's dtypes for the host kernels (shapes and strides: checked
    late): without autograd, or, for a rotation without ``out``, through its custom op."""
    row = _OPS.get(op)
    if row is None or not arrays:
        return False
    tensors = [a for a in arrays if a is not None]
    if not all(isinstance(a, torch.Tensor) for a in tensors):
        return False
    if _through_op(*tensors):
        if (torch_ops is None or op not in torch_ops.ROTATIONS
                or options.get("out") is not None):
            return False
        if not all(t.device.type == "cpu" for t in tensors):
            return False
        if not torch_tracing() and not all(tensor_has_storage(t) for t in tensors):
            return False  # subclasses, meta: the generic path
    elif not all(_servable(a) for a in tensors):
        return False
    if row.dtype_option and (options.get("axes") is not None or options.get("width", 0) % 2):
        return False  # multimodal sections; an odd sinusoid width (keras-hub) needs a scratch
    return row.fits(arrays, options, _CODES.get, _INT_IDS.__contains__, True)


def bind(op, arrays, **options):
    """None: every call is decided afresh (autograd state, traces)."""
    return None


def cache_clear() -> None:
    """Free what the driver keeps between calls."""
    driver.cache_clear()


def _np(t):
    """A NumPy view of a tensor (bfloat16 as its int16 bits), by ``Tensor.numpy``: a third of
    DLPack's cost, which small calls (a decode step's rotation) pay several times."""
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy()


def _ids(t):
    """Position ids as a NumPy int64 array: a view where they already are, else converted
    (an unsigned id beyond int64 wraps negative, and the kernel rejects it as out of range)."""
    if t.dtype != torch.int64:
        t = t.to(torch.int64)
    return t.numpy()


def _tables(tx, cos, sin):
    """NumPy views of tables in a type the kernel pairs with x's (converted once if not)."""
    tc = _CODES[cos.dtype]
    if (tx, tc) not in _APPLY_TYPES:  # tables are small next to x
        tc = driver.table_code(tx, tc)
        cos, sin = cos.to(_DTYPES[tc]), sin.to(_DTYPES[tc])
    return _np(cos), _np(sin), tc


def _empty(shape, dtype):
    """``torch.empty``; large outputs in the driver's reusable blocks (``empty_bytes``)."""
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n
    if nbytes < driver.BLOCK_MIN_BYTES:
        return torch.empty(shape, dtype=dtype)
    return torch.from_numpy(driver.empty_bytes(nbytes)).view(dtype).view(shape)


def _rotate(x, cn, sn, tc, out, layout, inverse, pos=None, check_only=False):
    res = out if out is not None else _empty(tuple(x.shape), x.dtype)
    xn = _np(x)
    on = xn if res is x else _np(res)
    _host_rotate(xn, cn, sn, on, _CODES[x.dtype], tc, layout == "interleaved", inverse, pos,
                 check_only)
    return res


def apply_rope(x, cos, sin, *, layout, inverse, xp, out=None):
    if out is None and _through_op(x, cos, sin):
        return torch_ops.apply_rope(x, cos, sin, layout, inverse)
    return _apply_rope(x, cos, sin, layout, inverse, out)


def _apply_rope(x, cos, sin, layout, inverse, out=None):
    cn, sn, tc = _tables(_CODES[x.dtype], cos, sin)
    return _rotate(x, cn, sn, tc, out, layout, inverse)


def apply_rope_qk(q, k, cos, sin, *, layout, inverse, xp, out=None):
    if out is None and _through_op(q, k, cos, sin):
        return torch_ops.apply_rope_qk(q, k, cos, sin, layout, inverse)
    return _apply_rope_qk(q, k, cos, sin, layout, inverse, out)


def _apply_rope_qk(q, k, cos, sin, layout, inverse, out=None):
    qo, ko = (None, None) if out is None else out
    if qo is not None or ko is not None:  # (the NumPy views: their bounds in C)
        nq, nk = _np(q), _np(k)
        driver.qk_outputs_apart(nq, nk, qo if qo is None else (nq if qo is q else _np(qo)),
                                ko if ko is None else (nk if ko is k else _np(ko)))
    cq, sq, tq = _tables(_CODES[q.dtype], cos, sin)
    ck, sk, tk = (cq, sq, tq) if k.dtype == q.dtype else _tables(_CODES[k.dtype], cos, sin)
    if qo is not None and qo.untyped_storage().data_ptr() == q.untyped_storage().data_ptr():
        # q rotates in place (as the NumPy front-end's): k's kernel must accept its arrays first
        ko = _rotate(k, ck, sk, tk, ko, layout, inverse, check_only=True)
    return (_rotate(q, cq, sq, tq, qo, layout, inverse),
            _rotate(k, ck, sk, tk, ko, layout, inverse))


def apply_rope_cached(x, cos_cache, sin_cache, position_ids, *, layout, inverse, xp, out=None):
    if out is None and _through_op(x, cos_cache, sin_cache, position_ids):
        return torch_ops.apply_rope_cached(x, cos_cache, sin_cache, position_ids, layout,
                                           inverse)
    return _apply_rope_cached(x, cos_cache, sin_cache, position_ids, layout, inverse, out)


def _apply_rope_cached(x, cos_cache, sin_cache, position_ids, layout, inverse, out=None):
    tx, tc = _CODES[x.dtype], _CODES[cos_cache.dtype]
    pos = _ids(position_ids)
    if (tx, tc) not in _APPLY_TYPES:  # only the rows used, converted
        driver.check_ids(pos, cos_cache.shape[0])
        flat = torch.from_numpy(np.ascontiguousarray(pos.reshape(-1)))
        tc = driver.table_code(tx, tc)
        cos_cache, sin_cache = cos_cache[flat].to(_DTYPES[tc]), sin_cache[flat].to(_DTYPES[tc])
        pos = np.arange(flat.shape[0], dtype=np.int64).reshape(pos.shape)
    return _rotate(x, _np(cos_cache), _np(sin_cache), tc, out, layout, inverse, pos)


_KERNELS = {"apply_rope": _apply_rope, "apply_rope_qk": _apply_rope_qk,
            "apply_rope_cached": _apply_rope_cached}


def _op_kernel(op, args, layout, inverse):
    """The body of ``torch_ops``' op ``op`` for real CPU tensors (detached): the kernel, or
    ``Unsupported`` for tensors it does not take."""
    if not all(_servable(a) for a in args) or not ops.OPS[op].fits(
            args + (None,) * (len(ops.OPS[op].arrays) - len(args)), {}, _CODES.get,
            _INT_IDS.__contains__, True):
        raise Unsupported("tensors the host kernels do not take")
    return _KERNELS[op](*args, layout, inverse)


if torch_ops is not None:
    torch_ops.serve("cpu", _op_kernel)


def _table_out(out, shape, dtype):
    if out is None:
        return _empty(shape, dtype)
    if tuple(out.shape) != shape or out.dtype != dtype or not out.is_contiguous():
        raise Unsupported("out is not a contiguous tensor of the table's shape and dtype")
    return out


def sinusoid_table(positions, hi, lo, *, layout, dtype, width, xp, out=None):
    res = _table_out(out, tuple(positions.shape) + (width,), dtype)
    driver.sinusoid_into(_np(positions), hi, lo, _np(res), _CODES[dtype], layout)
    return res


def rope_cos_sin(positions, inv_freq, *, layout, attention_factor, axes, dtype, xp, out=None):
    full = tuple(positions.shape) + (2 * inv_freq.shape[-1],)
    cos = _table_out(None if out is None else out[0], full, dtype)
    sin = _table_out(None if out is None else out[1], full, dtype)
    driver.rope_table_into(_np(positions), _np(inv_freq), _np(cos), _np(sin), _CODES[dtype],
                           layout, attention_factor)
    return cos, sin


# ---- ALiBi and the relative-bias gather --------------------------------------------------------

def alibi_bias(slopes, query_len, key_len, *, mode, query_offset, dtype, xp):
    out = _empty((slopes.shape[0], query_len, key_len), dtype)
    driver.alibi_bias_into(_np(slopes), _np(out), _CODES[dtype], query_len, key_len,
                           query_offset, mode)
    return out


_MASK_BLOCK_BYTES = 1 << 20
_BITS = {2: np.uint16, 4: np.uint32, 8: np.uint64}  # a block's view by element size


def _positions(p, lead, ints):
    n = p.shape[-1]
    p = p.broadcast_to(lead + (n,)).reshape(-1, n)
    return _np(p.to(torch.int64 if ints else torch.float64).contiguous())


def alibi_bias_from_positions(slopes, query_positions, key_positions, *, mode, lead, dtype,
                              xp):
    qp, kp = query_positions, key_positions
    ints = not qp.dtype.is_floating_point and not kp.dtype.is_floating_point
    out = _empty(lead + (slopes.shape[0], qp.shape[-1], kp.shape[-1]), dtype)
    driver.alibi_positions_into(_np(slopes.to(torch.float64).contiguous()),
                                _positions(qp, lead, ints), _positions(kp, lead, ints),
                                _np(out), _CODES[dtype], mode)
    return out


def alibi_bias_from_mask(slopes, attention_mask, *, dtype, xp):
    # (a BLOOM forward asks for this bias at every step: the NumPy views are taken with
    # ``Tensor.numpy``, a third of DLPack's cost, and the output's straight from its block)
    b, k = attention_mask.shape
    shape = (b, slopes.shape[0], 1, k)
    nbytes = b * shape[1] * k * dtype.itemsize
    # from 1 MiB in a reusable block: a fresh allocation's page faults cost as much as the
    # kernel
    if nbytes >= _MASK_BLOCK_BYTES:
        block = driver.block_bytes(nbytes)
        out = torch.from_numpy(block).view(dtype).view(shape)
        out_np = block.view(_BITS[dtype.itemsize])
    else:
        out = _empty(shape, dtype)
        out_np = _np(out)
    mask = attention_mask.contiguous()
    if mask.dtype == torch.bool:
        mask = mask.view(torch.uint8)
    elif mask.dtype in (torch.uint16, torch.uint32, torch.uint64):  # (no NumPy view for them)
        mask = mask.to(torch.int64)
    s = slopes.view(torch.int16) if slopes.dtype == torch.bfloat16 else slopes
    driver.alibi_mask_into(s.numpy(), mask.numpy(), out_np, _CODES[dtype])
    return out


def relative_bias(table, index, *, dtype, xp):
    out = _empty((table.shape[1],) + tuple(index.shape), table.dtype)
    # (the driver widens ids of other integer types to the kernel's int32 or int64)
    driver.relative_gather_into(_np(table), _np(index), _np(out))
    return out


def toeplitz_bias(lines, *, q, k, dtype, xp):
    out = _empty((lines.shape[1], q, k), lines.dtype)
    driver.toeplitz_into(_np(lines), _np(out))
    return out


def clip_shift(x, *, lo, hi, shift, dtype, xp):
    out = _empty(tuple(x.shape), dtype)
    driver.clip_shift_into(_np(x), _np(out), lo, hi, shift)
    return out


def conv_positional(x, weight, bias, *, activation, residual, dtype, xp):
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    out = _empty(tuple(x.shape), x.dtype)
    b = None if bias is None else _np(bias.to(work).contiguous())
    driver.conv_into(_np(x.contiguous()), _np(weight.to(work).contiguous()), b,
                     _np(out), _CODES[x.dtype], activation, residual)
    return out


def resample_grid(grid, prefix, *, taps, dtype, xp):
    p = 0 if prefix is None else prefix.shape[-2]
    shape = driver.resample_shape(tuple(grid.shape), taps, p)
    nbytes = grid.dtype.itemsize * math.prod(shape)
    if nbytes >= _MASK_BLOCK_BYTES:  # a reusable block, as for the mask's bias
        out = torch.from_numpy(driver.block_bytes(nbytes)).view(grid.dtype).view(shape)
    else:
        out = _empty(shape, grid.dtype)
    driver.resample_into(_np(grid), None if prefix is None else _np(prefix), taps, _np(out),
                         _CODES[grid.dtype])
    return out
