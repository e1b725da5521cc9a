"""NumPy adapter around the compiled CPU kernels (``arrpos._backends._cpu``).

Same function names and signatures as ``_xp``; this module allocates outputs, caches the exact
per-frequency rotation tables, chooses threads and streaming stores, and tells the kernels the
storage type of each array (float32, float64, float16, ``ml_dtypes.bfloat16``). Shapes, strides
and overlaps are checked by the kernels themselves; what they cannot serve raises
``Unsupported`` and ``_dispatch`` runs ``_xp``. It imports only when the extension was built.
"""
from __future__ import annotations

import threading

import numpy as np

from . import Unsupported, _cpu, _memory, _xp, one_thread_wanted

__all__ = ["apply_rope", "apply_rope_cached", "apply_rope_qk", "have_threads", "max_threads",
           "rope_cos_sin", "sinusoid_table", "supports", "thread_count"]

_BLOCK_TABLE_ELEMENTS = 1 << 14  # rows x frequencies of a rotation table (256 KiB: L2-resident)
_BLOCK_ROWS = (64, 512)  # its rows: fewer re-anchor too often, more cost more to build
_PARALLEL_MIN_BYTES = 1 << 18  # output bytes below which one thread runs (a wake-up is ~µs)
_STREAM_MIN_BYTES = 8 << 20  # outputs above this bypass the cache (no read-for-ownership)
_BLOCK_MIN_BYTES = 8 << 20  # allocating calls from here get reusable huge-page blocks
_LAYOUT_CODE = {"interleaved": 0, "split": 1, "split_cos": 2}
_F32, _F64, _F16, _BF16 = _cpu.F32, _cpu.F64, _cpu.F16, _cpu.BF16
_APPLY_TYPES = _cpu.APPLY_TYPES
_TABLE_DTYPE = {_F32: np.dtype(np.float32), _F64: np.dtype(np.float64),
                _F16: np.dtype(np.float32), _BF16: np.dtype(np.float32)}
_OPS = frozenset({"sinusoid_table", "rope_cos_sin", "apply_rope", "apply_rope_cached",
                  "apply_rope_qk"})
_NP_XP = None
# ops whose kernels reject bad values themselves (ids outside the cache: ValueError), so the
# public function skips its own pass over them (``_dispatch.call_checked``)
VALIDATES = frozenset({"apply_rope_cached"})
# ``supports`` reads types, dtypes and options only (shapes and strides are the kernels' late
# ``Unsupported``): its answer may be memoised per signature (``_dispatch.route``)
SIGNATURE_SUPPORTS = True
# ops that refuse (``Unsupported``, nothing written) outputs meeting an input other than their
# own x in place, or each other: the kernels' guard, and apply_rope_qk's across q and k
GUARDS = frozenset({"apply_rope", "apply_rope_cached", "apply_rope_qk"})
_memory.use_bounds(_cpu.bounds_meeting)


def _dtype_codes() -> dict:
    codes = {np.dtype(np.float32): _F32, np.dtype(np.float64): _F64,
             np.dtype(np.float16): _F16}
    try:  # NumPy's bfloat16 comes from ml_dtypes (a dependency of JAX and others)
        import ml_dtypes

        codes[np.dtype(ml_dtypes.bfloat16)] = _BF16
    except ImportError:
        pass
    return codes


_CODES = _dtype_codes()
_CODE_BY_ID = {id(dt): code for dt, code in _CODES.items()}  # the keys of _CODES keep them alive
_I64 = np.dtype(np.int64)
_MAX_THREADS = _cpu.max_threads()  # read once by the extension too


def max_threads() -> int:
    """Threads a parallel kernel call may use (ARRPOS_NUM_THREADS / OMP_NUM_THREADS respected)."""
    return _cpu.max_threads()


def have_threads() -> bool:
    """Whether the extension was built with its thread pool (else every call runs on one)."""
    return bool(_cpu.have_threads())


def thread_count(nbytes: int) -> int:
    """Threads for a call writing ``nbytes``: one below the size where a wake-up pays off."""
    return 1 if nbytes < _PARALLEL_MIN_BYTES or one_thread_wanted() else _MAX_THREADS


def empty_bytes(nbytes: int):
    """A writable uint8 array of ``nbytes`` for a kernel output: from ``_BLOCK_MIN_BYTES`` on,
    in a 2 MiB aligned block that returns to a small free list when the array goes away, so a
    repeated allocating call finds its pages already mapped (a fresh 128 MiB output otherwise
    pays as many page faults as the kernel's own work). At most two blocks are kept."""
    if nbytes < _BLOCK_MIN_BYTES:
        return np.empty(nbytes, dtype=np.uint8)
    return np.frombuffer(memoryview(_cpu.OutputBlock(nbytes)), dtype=np.uint8)


def _empty(shape, dtype):
    """``np.empty(shape, dtype)``, large ones in reusable blocks (see ``empty_bytes``)."""
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n
    if nbytes < _BLOCK_MIN_BYTES:
        return np.empty(shape, dtype=dtype)
    return empty_bytes(nbytes).view(dtype).reshape(shape)


def _np_xp():
    global _NP_XP
    if _NP_XP is None:
        from .._lib import namespace_for

        _NP_XP = namespace_for(np)
    return _NP_XP


_TABLE_CACHE_BYTES = 64 << 20  # the rotation tables kept between calls, in bytes (2-9 KB/freq)


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


def cache_clear() -> None:
    """Free what this adapter keeps between calls (``arrpos.clear_caches`` calls it)."""
    _rotation_tables.cache_clear()


def table_cache_bytes() -> int:
    """Bytes held by the rotation-table cache (tables and keys)."""
    return _rotation_tables.nbytes()


def block_rows(nf: int) -> int:
    """Rows B of the table kernels' blocks for nf frequencies: a power of two, the B x nf
    rotation table within 256 KiB (each block re-anchors: small frequency sets take long blocks;
    a 64-frequency RoPE table 0.8-1.0x the time of 64-row blocks)."""
    b = _BLOCK_ROWS[0]
    while 2 * b <= _BLOCK_ROWS[1] and 2 * b * nf <= _BLOCK_TABLE_ELEMENTS:
        b *= 2
    return b


def _build_rotation_tables(hi_bytes: bytes, lo_bytes: bytes):
    """Exact rot(r w) for r < B and rot(2**k B w) for 2**k B < 2**53, from the generic exact path."""
    hi = np.frombuffer(hi_bytes, dtype=np.float64)
    lo = np.frombuffer(lo_bytes, dtype=np.float64)
    xp = _np_xp()
    block = block_rows(hi.shape[0])
    rs, rc = _xp.sincos(np.arange(block, dtype=np.float64), hi, lo, xp=xp)
    npow = 53 - (block.bit_length() - 1)
    powers = np.ldexp(float(block), np.arange(npow))  # exact powers of two
    ps, pc = _xp.sincos(powers, hi, lo, xp=xp)
    tables = tuple(np.ascontiguousarray(a) for a in (rc, rs, pc, ps))
    for a in tables:
        a.flags.writeable = False
    return tables


def _code(dtype):
    """The storage code of a dtype (KeyError if the kernels have none); builtin dtypes are
    singletons, so the identity lookup serves nearly every call without hashing a dtype."""
    code = _CODE_BY_ID.get(id(dtype))
    return _CODES[dtype] if code is None else code


def _arrays_ok(arrays) -> bool:
    for a in arrays:
        if a is not None and type(a) is not np.ndarray:
            return False
    return True


def _has_code(dtype) -> bool:
    return id(dtype) in _CODE_BY_ID or dtype in _CODES


def _tables_ok(arrays, kwargs) -> bool:
    return kwargs.get("axes") is None and np.dtype(kwargs["dtype"]) in _CODES


def _apply_ok(arrays, kwargs) -> bool:
    x, cos, sin, out = arrays
    return _has_code(x.dtype) and _has_code(cos.dtype) and sin.dtype == cos.dtype and (
        out is None or out.dtype == x.dtype)


def _qk_outs(arrays):
    """The outputs of an apply_rope_qk call's arrays: (q, k, cos, sin, out) with out a pair or
    None, or the pair flattened (q, k, cos, sin, q_out, k_out)."""
    if len(arrays) == 6:
        return arrays[4:]
    return (None, None) if arrays[4] is None else tuple(arrays[4])


def _qk_ok(arrays, kwargs) -> bool:
    q, k, cos, sin = arrays[:4]
    qo, ko = _qk_outs(arrays)
    return (_apply_ok((q, cos, sin, qo), kwargs) and _has_code(k.dtype)
            and (ko is None or ko.dtype == k.dtype))


def _cached_ok(arrays, kwargs) -> bool:
    x, cos, sin, pos, out = arrays  # a decode step's call: types and dtypes by identity first
    nd = np.ndarray
    if type(x) is not nd or type(cos) is not nd or type(sin) is not nd or type(pos) is not nd:
        return False
    dx, dc = x.dtype, cos.dtype
    if out is not None and (type(out) is not nd or (out.dtype is not dx and out.dtype != dx)):
        return False
    return (_has_code(dx) and _has_code(dc) and (sin.dtype is dc or sin.dtype == dc)
            and pos.dtype.kind in "iu")


_SUPPORTS = {"sinusoid_table": _tables_ok, "rope_cos_sin": _tables_ok, "apply_rope": _apply_ok,
             "apply_rope_qk": _qk_ok, "apply_rope_cached": _cached_ok}


def supports(op, arrays, **kwargs) -> bool:
    """Whether the kernels may serve ``op`` on these NumPy arrays: element types only (cheap);
    the kernels check shapes, strides and overlap and raise ``Unsupported`` late."""
    if op == "apply_rope_cached" and len(arrays) == 5:  # the decode step: checks its types
        return _cached_ok(arrays, kwargs)
    check = _SUPPORTS.get(op)
    if check is None or not arrays:
        return False
    if op == "apply_rope_qk":  # out is a pair
        if not _arrays_ok(arrays[:4]) or not _arrays_ok(_qk_outs(arrays)):
            return False
    elif not _arrays_ok(arrays):
        return False
    return check(arrays, kwargs)


# ---- tables ----------------------------------------------------------------------------------

def _table_out(out, shape, dtype, name="out"):
    if out is None:
        return _empty(shape, dtype)
    if out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
        raise ValueError(
            f"{name} must be a C-contiguous {np.dtype(dtype).name} array of shape {shape}, "
            f"got {out.dtype} {out.shape}"
        )
    return out


def _table_into(positions, hi, lo, out, code, width, layout=None, scale=1.0, sin_out=None):
    """The table kernel on ``(n, width)`` views of the outputs (shared by the twins and by the
    torch adapter, which passes 16-bit views and their codes)."""
    pos = np.ascontiguousarray(positions, dtype=np.float64).reshape(-1)
    rc, rs, pc, ps = _rotation_tables(hi.tobytes(), lo.tobytes())
    n = pos.shape[0]
    nbytes = out.nbytes * (2 if sin_out is not None else 1)
    nthreads = thread_count(nbytes)
    stream = nbytes >= _STREAM_MIN_BYTES
    a = out.reshape(n, width)
    if sin_out is None:
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, a, code, _LAYOUT_CODE[layout],
                            nthreads, stream)
        if width > 2 * hi.shape[0]:
            a[:, 2 * hi.shape[0]:] = 0
    else:
        _cpu.rope_table(pos, rc, rs, pc, ps, hi, lo, a, sin_out.reshape(n, width), code,
                        layout == "interleaved", float(scale), nthreads, stream)


def sinusoid_table(positions, hi, lo, *, layout, dtype, width, xp, out=None):
    """Twin of ``_xp.sinusoid_table`` for NumPy float32/float64/float16/bfloat16 output.

    ``out``: an optional preallocated C-contiguous ``P + (width,)`` array of ``dtype``.
    """
    dtype = np.dtype(dtype)
    shape = tuple(np.shape(positions)) + (width,)
    res = _table_out(out, shape, dtype)
    hi = np.ascontiguousarray(hi, dtype=np.float64)
    lo = np.ascontiguousarray(lo, dtype=np.float64)
    if width < 2 * hi.shape[0]:  # odd interleaved width (keras-hub): whole pairs, last cos dropped
        full = _empty(shape[:-1] + (2 * hi.shape[0],), dtype)
        _table_into(positions, hi, lo, full, _CODES[dtype], full.shape[-1], layout)
        res[...] = full[..., :width]
        return res
    _table_into(positions, hi, lo, res, _CODES[dtype], width, layout)
    return res


def rope_cos_sin(positions, inv_freq, *, layout, attention_factor, axes, dtype, xp, out=None):
    """Twin of ``_xp.rope_cos_sin``: cos/sin tables ``P + (2F,)`` from exact rotations."""
    dtype = np.dtype(dtype)
    w = np.ascontiguousarray(inv_freq, dtype=np.float64).reshape(-1)
    full = tuple(np.shape(positions)) + (2 * w.shape[0],)
    cos = _table_out(None if out is None else out[0], full, dtype, "out[0]")
    sin = _table_out(None if out is None else out[1], full, dtype, "out[1]")
    _table_into(positions, w, np.zeros_like(w), cos, _CODES[dtype], full[-1], layout,
                attention_factor, sin)
    return cos, sin


# ---- RoPE application ---------------------------------------------------------------------------

def _tables_for(tx, cos, sin, tc):
    """Tables in a type the kernel pairs with x's (``tc`` or, converted once, float32/64)."""
    if (tx, tc) in _APPLY_TYPES:
        return cos, sin, tc
    dt = _TABLE_DTYPE[tx]
    return cos.astype(dt), sin.astype(dt), _CODES[dt]


def _threads_and_stores(nbytes):
    """Threads and streaming stores for an output of ``nbytes``."""
    if nbytes < _PARALLEL_MIN_BYTES:  # decode-sized: one thread, cached stores
        return 1, False
    return thread_count(nbytes), nbytes >= _STREAM_MIN_BYTES


def _rotate(x, cos, sin, out, tx, tc, interleaved, inverse, pos=None, check_only=False):
    """The kernel into ``out`` (allocated when None); returns the result. ``check_only``
    (given tables, no ``pos``): raise ``Unsupported`` as the call would, writing nothing."""
    nbytes = x.nbytes
    if out is None:
        out = np.empty(x.shape, x.dtype) if nbytes < _BLOCK_MIN_BYTES else _empty(x.shape,
                                                                                   x.dtype)
    nthreads, stream = _threads_and_stores(nbytes)
    if pos is None:
        _cpu.apply_rope(x, cos, sin, out, tx, tc, interleaved, inverse, nthreads, stream,
                        check_only=check_only)
    else:
        _cpu.apply_rope_cached(x, cos, sin, pos, out, tx, tc, interleaved, inverse, nthreads,
                               stream)
    return out


def apply_rope(x, cos, sin, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope``; strided and broadcast cos/sin are read in place, not copied.
    Tables of another float type than the kernels pair with ``x`` are converted once (they
    are small next to ``x``), then rounded once like the generic path's promoted product."""
    tx = _code(x.dtype)
    cos, sin, tc = _tables_for(tx, cos, sin, _code(cos.dtype))
    return _rotate(x, cos, sin, out, tx, tc, layout == "interleaved", inverse)


def apply_rope_qk(q, k, cos, sin, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope_qk``: both rotations in one call (``k`` may have fewer heads)."""
    tq, tk = _code(q.dtype), _code(k.dtype)
    inter = layout == "interleaved"
    cq, sq, tcq = _tables_for(tq, cos, sin, _code(cos.dtype))
    ck, sk, tck = (cq, sq, tcq) if tk == tq else _tables_for(tk, cos, sin, _code(cos.dtype))
    qo, ko = (None, None) if out is None else out
    _qk_outputs_apart(q, k, qo, ko)
    if qo is not None and np.may_share_memory(qo, q):
        # q rotates in place: k's kernel must accept its arrays first, or the generic path
        # that serves the call then would rotate q a second time
        ko = np.empty(k.shape, k.dtype) if ko is None else ko
        _rotate(k, ck, sk, ko, tk, tck, inter, inverse, check_only=True)
    return (_rotate(q, cq, sq, qo, tq, tcq, inter, inverse),
            _rotate(k, ck, sk, ko, tk, tck, inter, inverse))


def _qk_outputs_apart(q, k, q_out, k_out):
    """Refuse (``Unsupported``) an apply_rope_qk whose outputs meet the other tensor or each
    other: each rotation's kernel sees its own arrays only (GUARDS)."""
    if (q_out is not None and _memory.meets(q_out, (k, k_out))) or (
            k_out is not None and _memory.meets(k_out, (q,))):
        raise Unsupported("an output of apply_rope_qk meets the other tensor or output")


def apply_rope_cached(x, cos_cache, sin_cache, position_ids, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope_cached``: one fused gather-and-rotate over the half-width
    caches; ids are checked by the kernel (ValueError naming position_ids)."""
    tx, tc = _code(x.dtype), _code(cos_cache.dtype)
    pos = position_ids
    if pos.dtype is not _I64 and pos.dtype != _I64:
        pos = pos.astype(np.int64)
    if (tx, tc) not in _APPLY_TYPES:
        cos_cache, sin_cache, pos, tc = _gathered_rows(tx, cos_cache, sin_cache, pos)
    return _rotate(x, cos_cache, sin_cache, out, tx, tc, layout == "interleaved", inverse, pos)


def bind(op, arrays, **kwargs):
    """``op`` for this signature (``supports`` said yes): a function of the op's arrays and
    ``out``, positionally, with what depends on the types, shapes and dtypes alone decided
    here once (type codes, threads, store kind), or None where the general function serves.
    Bound functions check the op's values themselves (``VALIDATES``). A decode step is a few
    microseconds; deciding again costs a fifth of it."""
    if op != "apply_rope_cached":
        return None
    x, cos_cache, _, pos, out = arrays
    tx, tc = _code(x.dtype), _code(cos_cache.dtype)
    if (tx, tc) not in _APPLY_TYPES or pos.dtype != _I64:
        return None
    shape, dtype, nbytes = x.shape, x.dtype, x.nbytes
    alloc = out is None and (np.empty if nbytes < _BLOCK_MIN_BYTES else _empty)
    interleaved, inverse = kwargs["layout"] == "interleaved", kwargs["inverse"]
    # one thread below the parallel size; above it, threads follow the caller (a Dask task)
    small = nbytes < _PARALLEL_MIN_BYTES
    kernel = _cpu.apply_rope_cached

    def cached(x, cos_cache, sin_cache, position_ids, out):
        if alloc:
            out = alloc(shape, dtype)
        nthreads, stream = (1, False) if small else _threads_and_stores(nbytes)
        kernel(x, cos_cache, sin_cache, position_ids, out, tx, tc, interleaved, inverse,
               nthreads, stream)
        return out
    return cached


def _gathered_rows(tx, cos_cache, sin_cache, pos):
    """Caches of a type the kernel does not pair with x: convert only the rows used."""
    n = cos_cache.shape[0]
    if pos.size and (pos.min() < 0 or pos.max() >= n):
        raise ValueError(f"position_ids must lie in [0, {n}) (the cache rows), got values "
                         f"from {pos.min()} to {pos.max()}")
    dt = _TABLE_DTYPE[tx]
    flat = pos.reshape(-1)
    rows = np.arange(flat.shape[0], dtype=np.int64).reshape(pos.shape)
    return cos_cache[flat].astype(dt), sin_cache[flat].astype(dt), rows, _CODES[dt]


def stream_copy(src, dst):
    """``dst[...] = src`` with streaming stores (C-contiguous, equal sizes): the copy limit."""
    _cpu.stream_copy(src, dst, thread_count(dst.nbytes))


def stream_fill(dst):
    """Every byte of ``dst`` (C-contiguous) set to 0x3f with streaming stores: the write limit
    (not zeros: this machine kind streams zero lines three times as fast as any data)."""
    _cpu.stream_fill(dst, 0x3F, thread_count(dst.nbytes))
