"""NumPy adapter around the compiled CPU kernels (``arrpos._backends._cpu``).

Same function names and signatures as ``_xp``; this module allocates outputs, makes the small
inputs contiguous, caches per-frequency tables, chooses threads and streaming stores, and hands
anything the kernels cannot serve (unusual strides, mixed dtypes, multimodal axes) back to
``_dispatch``, which then runs ``_xp``. It imports only when the extension was built.
"""
from __future__ import annotations

import threading

import numpy as np

from . import Unsupported, _cpu, _xp

__all__ = ["apply_rope", "have_openmp", "max_threads", "rope_cos_sin", "sinusoid_table", "supports",
           "thread_count"]

_BLOCK = 64  # rows per block of the table kernels: the 64-row rotation table stays in L2
_PARALLEL_MIN = 1 << 16  # output elements below which one thread runs (thread start-up ~ µs)
_STREAM_MIN_BYTES = 8 << 20  # outputs above this bypass the cache (no read-for-ownership)
_LAYOUT_CODE = {"interleaved": 0, "split": 1, "split_cos": 2}
_KERNEL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_OPS = ("sinusoid_table", "rope_cos_sin", "apply_rope")
_NP_XP = None


def max_threads() -> int:
    """Threads OpenMP would use (OMP_NUM_THREADS respected); 1 when built without OpenMP."""
    return _cpu.max_threads()


def have_openmp() -> bool:
    """Whether the extension was built with OpenMP."""
    return bool(_cpu.have_openmp())


def thread_count(work: int) -> int:
    return 1 if work < _PARALLEL_MIN else max(1, _cpu.max_threads())


def _np_xp():
    global _NP_XP
    if _NP_XP is None:
        from .._lib import namespace_for

        _NP_XP = namespace_for(np)
    return _NP_XP


_TABLE_CACHE_BYTES = 64 << 20  # the rotation tables kept between calls, in bytes (~1.8 KB/freq)


class _RotationTables:
    """The rotation tables per frequency set, in a cache bounded in bytes (least recently used
    entries go first); ``cache_clear()`` empties it, ``nbytes()`` is its size."""

    def __init__(self, limit: int):
        self.limit = limit
        self._tables: dict = {}  # (hi_bytes, lo_bytes) -> tables, least recently used first
        self._lock = threading.Lock()

    def __call__(self, hi_bytes: bytes, lo_bytes: bytes):
        key = (hi_bytes, lo_bytes)
        with self._lock:
            tables = self._tables.pop(key, None)
            if tables is not None:
                self._tables[key] = tables  # now the most recently used
                return tables
        tables = _build_rotation_tables(hi_bytes, lo_bytes)
        with self._lock:
            self._tables[key] = tables
            while len(self._tables) > 1 and self._nbytes() > self.limit:
                del self._tables[next(iter(self._tables))]
        return tables

    def _nbytes(self) -> int:
        return sum(sum(a.nbytes for a in t) + len(k[0]) + len(k[1])
                   for k, t in self._tables.items())

    def nbytes(self) -> int:
        with self._lock:
            return self._nbytes()

    def cache_clear(self) -> None:
        with self._lock:
            self._tables.clear()


_rotation_tables = _RotationTables(_TABLE_CACHE_BYTES)


def table_cache_bytes() -> int:
    """Bytes held by the rotation-table cache (tables and keys)."""
    return _rotation_tables.nbytes()


def _build_rotation_tables(hi_bytes: bytes, lo_bytes: bytes):
    """Exact rot(r w) for r < B and rot(2**k B w) for 2**k B < 2**53, from the generic exact path."""
    hi = np.frombuffer(hi_bytes, dtype=np.float64)
    lo = np.frombuffer(lo_bytes, dtype=np.float64)
    xp = _np_xp()
    rs, rc = _xp.sincos(np.arange(_BLOCK, dtype=np.float64), hi, lo, xp=xp)
    npow = 53 - (_BLOCK.bit_length() - 1)
    powers = np.ldexp(float(_BLOCK), np.arange(npow))  # exact powers of two
    ps, pc = _xp.sincos(powers, hi, lo, xp=xp)
    tables = tuple(np.ascontiguousarray(a) for a in (rc, rs, pc, ps))
    for a in tables:
        a.flags.writeable = False
    return tables


def aligned_empty(shape, dtype, align=64):
    """``np.empty`` whose data starts on an ``align``-byte boundary (NumPy promises 16): whole
    cache lines let the kernels use full-width streaming stores."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    buf = np.empty(nbytes + align, dtype=np.uint8)
    start = (-buf.ctypes.data) % align
    return buf[start:start + nbytes].view(dtype).reshape(shape)


def _kernel_ok(a, dtype):
    """A NumPy array of ``dtype`` whose last axis the kernels can walk (unit stride), aligned,
    with every stride a whole number of elements (not so for a packed record field)."""
    return (isinstance(a, np.ndarray) and a.dtype == dtype and a.flags.aligned
            and (a.strides[-1] == a.itemsize or a.shape[-1] <= 1)
            and all(st % a.itemsize == 0 for st in a.strides))


def _apply_ok(x, cos, sin, out) -> bool:
    """Inputs the fused apply kernel serves: one dtype, unit-stride rows, and an ``out`` that is
    either ``x`` itself (in place, writable) or does not overlap it."""
    dt = x.dtype
    tdt = _table_dtype(x, cos, sin)
    if not (_kernel_ok(x, dt) and _kernel_ok(cos, tdt) and _kernel_ok(sin, tdt)):
        return False
    if out is None:
        return True
    return _kernel_ok(out, dt) and out.flags.writeable and (
        _same_view(out, x) or not np.may_share_memory(out, x))


def _table_dtype(x, cos, sin):
    """The dtype of the tables the kernel reads: x's, or float64 tables for float32 ``x``
    (rounded to float32 before the kernel; the README's flow: float64 tables, float32 x)."""
    if x.dtype == np.float32 and cos.dtype == sin.dtype == np.float64:
        return np.dtype(np.float64)
    return x.dtype


def _same_view(a, b) -> bool:
    return a is b or (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
                      and a.strides == b.strides and a.shape == b.shape)


def supports(op, arrays, **kwargs) -> bool:
    """Whether the compiled kernel of ``op`` serves these NumPy inputs (float32/float64)."""
    if op not in _OPS or not arrays or not isinstance(arrays[0], np.ndarray):
        return False
    if op == "apply_rope":
        x, cos, sin, out = arrays
        return x.dtype in _KERNEL_DTYPES and _apply_ok(x, cos, sin, out)
    return kwargs.get("axes") is None and np.dtype(kwargs["dtype"]) in _KERNEL_DTYPES


def _check_out(out, shape, dtype, name="out"):
    if out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
        raise ValueError(
            f"{name} must be a C-contiguous {np.dtype(dtype).name} array of shape {shape}, "
            f"got {out.dtype} {out.shape}"
        )


def sinusoid_table(positions, hi, lo, *, layout, dtype, width, xp, out=None):
    """Twin of ``_xp.sinusoid_table`` for NumPy float32/float64 output.

    ``out``: an optional preallocated C-contiguous ``P + (width,)`` array of ``dtype``.
    """
    pos = np.ascontiguousarray(positions, dtype=np.float64).reshape(-1)
    shape = tuple(np.shape(positions))
    hi = np.ascontiguousarray(hi, dtype=np.float64)
    lo = np.ascontiguousarray(lo, dtype=np.float64)
    rc, rs, pc, ps = _rotation_tables(hi.tobytes(), lo.tobytes())
    nf = hi.shape[0]
    if out is None:
        out = np.empty((pos.shape[0], width), dtype=dtype)
    else:
        _check_out(out, shape + (width,), dtype)
    out2 = out.reshape(pos.shape[0], width)
    nthreads = thread_count(out.size)
    work = np.empty((nthreads, 4 * nf + width), dtype=np.float64)
    _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, work, out2, _LAYOUT_CODE[layout], nthreads,
                        out.nbytes >= _STREAM_MIN_BYTES)
    if width > 2 * nf:
        out2[:, 2 * nf :] = 0
    return out2.reshape(shape + (width,))


def rope_cos_sin(positions, inv_freq, *, layout, attention_factor, axes, dtype, xp, out=None):
    """Twin of ``_xp.rope_cos_sin``: cos/sin tables ``P + (2F,)`` from exact rotations."""
    pos = np.ascontiguousarray(positions, dtype=np.float64).reshape(-1)
    shape = tuple(np.shape(positions))
    w = np.ascontiguousarray(inv_freq, dtype=np.float64).reshape(-1)
    lo = np.zeros_like(w)
    rc, rs, pc, ps = _rotation_tables(w.tobytes(), lo.tobytes())
    nf = w.shape[0]
    full = shape + (2 * nf,)
    if out is None:
        cos = np.empty(full, dtype=dtype)
        sin = np.empty(full, dtype=dtype)
    else:
        cos, sin = out
        _check_out(cos, full, dtype, "out[0]")
        _check_out(sin, full, dtype, "out[1]")
    n = pos.shape[0]
    nthreads = thread_count(2 * cos.size)
    work = np.empty((nthreads, 8 * nf), dtype=np.float64)
    _cpu.rope_table(pos, rc, rs, pc, ps, w, lo, work, cos.reshape(n, 2 * nf),
                    sin.reshape(n, 2 * nf), layout == "interleaved", float(attention_factor),
                    nthreads, 2 * cos.nbytes >= _STREAM_MIN_BYTES)
    return cos, sin


def _as4d(a, ndim):
    """A view of ``a`` with exactly 4 axes: leading axes of size 1 added up to ``ndim`` and then
    to 4, or leading axes merged; None if merging needs a copy."""
    if a.ndim < ndim:
        a = a[(None,) * (ndim - a.ndim)]
    if a.ndim == 4:
        return a
    if a.ndim < 4:
        return a[(None,) * (4 - a.ndim)]
    try:
        return np.reshape(a, (-1,) + a.shape[-3:], copy=False)
    except ValueError:
        return None


# fused Cython functions dispatch on their argument types at every call; a decode step cannot
# afford that, so the specialisations are looked up once
_APPLY = {np.dtype(np.float32): _cpu.apply_rope["float"],
          np.dtype(np.float64): _cpu.apply_rope["double"]}


def apply_rope(x, cos, sin, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope``; strided and broadcast cos/sin are read in place, not copied."""
    dt = x.dtype
    if cos.dtype != dt:  # float64 tables for float32 x (see _table_dtype): small, rounded once
        cos, sin = cos.astype(dt), sin.astype(dt)
    inplace = out is not None and _same_view(out, x)
    if out is not None:
        res = out
    elif x.nbytes >= _STREAM_MIN_BYTES:  # whole cache lines for full-width streaming stores
        res = aligned_empty(x.shape, dt)
    else:
        res = np.empty(x.shape, dtype=dt)
    nd = x.ndim
    if nd == 4:
        x4, o4 = x, res
    else:
        x4, o4 = _as4d(x, nd), _as4d(res, nd)
    if x4 is None or o4 is None:
        raise Unsupported("x's leading axes do not merge without a copy")
    c4 = cos if cos.ndim == 4 else _as4d(cos, nd)
    s4 = sin if sin.ndim == 4 else _as4d(sin, nd)
    if c4 is None or s4 is None or (nd > 4 and (c4.shape[:-1] != x4.shape[:-1]
                                                or s4.shape[:-1] != x4.shape[:-1])):
        # more than 4 axes with broadcast tables: materialise the (small) tables' broadcast
        lead = x.shape[:-1] + (cos.shape[-1],)
        c4 = _as4d(np.broadcast_to(cos, lead), nd)
        s4 = _as4d(np.broadcast_to(sin, lead), nd)
    if c4 is None or s4 is None:
        raise Unsupported("cos/sin's leading axes do not merge without a copy")
    stream = not inplace and res.nbytes >= _STREAM_MIN_BYTES
    nthreads = thread_count(x.size) if x.size >= _PARALLEL_MIN else 1
    work = _work_rows(nthreads, x.shape[-1], dt) if stream else None  # only streaming uses it
    _APPLY[dt](x4, c4, s4, o4, work, layout == "interleaved", inverse, inplace, nthreads, stream)
    return res


_SCRATCH = threading.local()


def _work_rows(nthreads, d, dtype):
    """Scratch rows for the OpenMP threads, reused between calls (a decode step should not
    allocate); one set per Python thread, since kernels run with the GIL released."""
    cache = getattr(_SCRATCH, "rows", None)
    if cache is None:
        cache = _SCRATCH.rows = {}
    key = (nthreads, d, dtype)
    w = cache.get(key)
    if w is None:
        w = cache[key] = np.empty((nthreads, d), dtype=dtype)
    return w
