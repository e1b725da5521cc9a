"""The host driver: the compiled CPU kernels (``arrpos._backends._cpu``, from ``csrc/``) for the
front-ends that hand them NumPy arrays (``numpy``, and ``torch_cpu`` through DLPack views).

Package-public names only, each one of four jobs:

* type codes: the storage type of each element type (float32, float64, float16, bfloat16),
  the (x, table) pairs that have a kernel and the table type other tables convert to;
* thread policy: threads and streaming stores by output size (one thread below the size where
  waking the pool pays, one per call inside ``one_thread_per_call``), reusable output blocks;
* launches: the table kernels (with the exact rotation tables they read, cached by frequency
  set) and the rotations, on arrays whose types the front-end matched to the op table;
* memory-safety guards: the kernels check shapes, strides, types and overlap before they write
  and raise ``Unsupported`` (nothing written) for what they cannot serve; the functions here
  add the guards the kernels cannot see (two outputs of one call; output views).

User-facing validation is the public layer's: nothing here names an argument to a user except
ids outside the cache (``ValueError`` naming ``position_ids``: the kernel reads them, so the
public function need not, ``validated_by`` in ``ops``). Imports only when the extension was
built.
"""
from __future__ import annotations

import threading

import numpy as np

from .. import Unsupported, _cpu, _xp, memory, one_thread_wanted, whole_output_bytes

__all__ = ["ALIBI_MODES", "APPLY_TYPES", "BF16", "BLOCK_MIN_BYTES", "F16", "F32", "F64",
           "PARALLEL_MIN_BYTES", "alibi_bias_into", "alibi_mask_into", "alibi_positions_into",
           "block_bytes", "clip_shift_into", "conv_into", "relative_gather_into", "toeplitz_into",
           "resample_into", "resample_shape",
           "STREAM_MIN_BYTES", "TABLE_CACHE_BYTES", "bind_cached", "block_rows", "cache_clear",
           "check_ids", "code_of", "empty", "empty_bytes", "have_threads", "instruction_set",
           "max_threads", "numpy_dtype", "qk_outputs_apart", "rope_table_into", "rotate",
           "rotation_tables", "sinusoid_into", "stream_copy", "stream_fill", "streams",
           "table_cache_bytes", "table_code", "thread_count", "threads_and_stores"]

# ---- type codes ------------------------------------------------------------------------------

F32, F64, F16, BF16 = _cpu.F32, _cpu.F64, _cpu.F16, _cpu.BF16
APPLY_TYPES = _cpu.APPLY_TYPES  # (x, table) codes with a rotation kernel
_TABLE_CODE = {F32: F32, F64: F64, F16: F32, BF16: F32}


def _numpy_codes() -> dict:
    codes = {np.dtype(np.float32): F32, np.dtype(np.float64): F64, np.dtype(np.float16): F16}
    try:  # NumPy's bfloat16 comes from ml_dtypes (a dependency of JAX and others)
        import ml_dtypes

        codes[np.dtype(ml_dtypes.bfloat16)] = BF16
    except ImportError:
        pass
    return codes


_CODES = _numpy_codes()
_CODE_BY_ID = {id(dt): code for dt, code in _CODES.items()}  # the keys of _CODES keep them alive
_DTYPES = {code: dt for dt, code in _CODES.items()}
_LAYOUT_CODE = {"interleaved": 0, "split": 1, "split_cos": 2}


def code_of(dtype) -> int | None:
    """The storage code of a NumPy dtype (or anything ``np.dtype`` takes), None where the
    kernels have none; builtin dtypes are singletons, so the identity lookup serves nearly
    every call without hashing a dtype."""
    code = _CODE_BY_ID.get(id(dtype))
    if code is None:
        try:
            code = _CODES.get(np.dtype(dtype))
        except TypeError:
            return None
    return code


def numpy_dtype(code: int):
    """The NumPy dtype of a storage code (bfloat16: ml_dtypes', where installed)."""
    return _DTYPES[code]


def table_code(tx: int, tc: int) -> int:
    """The code of the tables a rotation of ``x`` (code ``tx``) reads: ``tc`` where the pair
    has a kernel, else the type other tables are converted to once (float32 or float64)."""
    return tc if (tx, tc) in APPLY_TYPES else _TABLE_CODE[tx]


# ---- thread policy and memory ----------------------------------------------------------------

PARALLEL_MIN_BYTES = 1 << 18  # output bytes below which one thread runs (a wake-up is ~µs)
STREAM_MIN_BYTES = 8 << 20  # outputs above this bypass the cache (no read-for-ownership)
BLOCK_MIN_BYTES = 8 << 20  # allocating calls from here get reusable huge-page blocks
_MAX_THREADS = _cpu.max_threads()  # read once by the extension too


def max_threads() -> int:
    """Threads a parallel kernel call may use (ARRPOS_NUM_THREADS / OMP_NUM_THREADS respected)."""
    return _cpu.max_threads()


def have_threads() -> bool:
    """Whether the extension was built with its thread pool (else every call runs on one)."""
    return bool(_cpu.have_threads())


def instruction_set() -> int:
    """The vector code the kernels run (see ``_cpu.instruction_set``)."""
    return _cpu.instruction_set()


def thread_count(nbytes: int) -> int:
    """Threads for a call writing ``nbytes``: one below the size where a wake-up pays off."""
    return 1 if nbytes < PARALLEL_MIN_BYTES or one_thread_wanted() else _MAX_THREADS


def streams(nbytes: int) -> bool:
    """Streaming stores for an output of ``nbytes``, or for the part of a larger one
    (``writing_part_of``: a Dask chunk of its canvas) that it is."""
    return max(nbytes, whole_output_bytes()) >= STREAM_MIN_BYTES


def threads_and_stores(nbytes: int) -> tuple[int, bool]:
    """Threads and streaming stores for an output of ``nbytes``."""
    if nbytes < PARALLEL_MIN_BYTES:  # decode-sized: one thread, cached stores
        return 1, streams(0)
    return thread_count(nbytes), streams(nbytes)


def empty_bytes(nbytes: int):
    """A writable uint8 array of ``nbytes`` for a kernel output: from ``BLOCK_MIN_BYTES`` on,
    in a 2 MiB aligned block that returns to a small free list when the array goes away, so a
    repeated allocating call finds its pages already mapped (a fresh 128 MiB output otherwise
    pays as many page faults as the kernel's own work). At most four blocks (1 GiB) are kept:
    a training step's rotation holds four outputs (q and k, forward and backward)."""
    if nbytes < BLOCK_MIN_BYTES:
        return np.empty(nbytes, dtype=np.uint8)
    return np.frombuffer(memoryview(_cpu.OutputBlock(nbytes)), dtype=np.uint8)


def block_bytes(nbytes: int):
    """``empty_bytes``' reusable block whatever the size (an output a model asks for at every
    step, whose fresh pages would cost as much as the kernel)."""
    return np.frombuffer(memoryview(_cpu.OutputBlock(nbytes)), dtype=np.uint8)


def empty(shape, dtype):
    """``np.empty(shape, dtype)``, large ones in reusable blocks (see ``empty_bytes``)."""
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n
    if nbytes < BLOCK_MIN_BYTES:
        return np.empty(shape, dtype=dtype)
    return empty_bytes(nbytes).view(dtype).reshape(shape)


def stream_copy(src, dst) -> None:
    """``dst[...] = src`` with streaming stores (C-contiguous, equal sizes): the copy limit."""
    _cpu.stream_copy(src, dst, thread_count(dst.nbytes))


def stream_fill(dst) -> None:
    """Every byte of ``dst`` (C-contiguous) set to 0x3f with streaming stores: the write limit
    (not zeros: some machines stream zero lines much faster than any data)."""
    _cpu.stream_fill(dst, 0x3F, thread_count(dst.nbytes))


# ---- the table kernels -----------------------------------------------------------------------

_BLOCK_TABLE_ELEMENTS = 1 << 14  # rows x frequencies of a rotation table (256 KiB: L2-resident)
_BLOCK_ROWS = (64, 512)  # its rows: fewer re-anchor too often, more cost more to build
TABLE_CACHE_BYTES = 64 << 20  # the rotation tables kept between calls (2-9 KB/frequency)


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


rotation_tables = _RotationTables(TABLE_CACHE_BYTES)


def cache_clear() -> None:
    """Free what the driver keeps between calls (``arrpos.clear_caches`` calls it)."""
    rotation_tables.cache_clear()


def table_cache_bytes() -> int:
    """Bytes held by the rotation-table cache (tables and keys)."""
    return rotation_tables.nbytes()


def block_rows(nf: int) -> int:
    """Rows B of the table kernels' blocks for nf frequencies: a power of two, the B x nf
    rotation table within 256 KiB (each block re-anchors, so small frequency sets take long
    blocks; ``benchmarks/bench_sinusoid.py`` times the choice)."""
    b = _BLOCK_ROWS[0]
    while 2 * b <= _BLOCK_ROWS[1] and 2 * b * nf <= _BLOCK_TABLE_ELEMENTS:
        b *= 2
    return b


_NP_XP = None


def _np_xp():
    global _NP_XP
    if _NP_XP is None:
        from ..._lib import namespace_for

        _NP_XP = namespace_for(np)
    return _NP_XP


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


def _rows(out, n: int, width: int):
    """``out`` as ``(n, width)`` rows for a table kernel: a view, never a copy (a reshape that
    copied would leave ``out`` unwritten)."""
    if not out.flags.c_contiguous or out.size != n * width:
        raise Unsupported("a table output must be C-contiguous with a row per position")
    return out.reshape(n, width)


def _table(positions, hi, lo, out, code, width, layout, scale=1.0, sin_out=None):
    """A table kernel writing ``(n, width)`` rows of ``out`` (and ``sin_out``)."""
    pos = np.ascontiguousarray(positions, dtype=np.float64).reshape(-1)
    rc, rs, pc, ps = rotation_tables(hi.tobytes(), lo.tobytes())
    n = pos.shape[0]
    nbytes = out.nbytes * (2 if sin_out is not None else 1)
    nthreads = thread_count(nbytes)
    stream = streams(nbytes)
    a = _rows(out, n, width)
    if sin_out is None:
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, a, code, _LAYOUT_CODE[layout],
                            nthreads, stream)
        if width > 2 * hi.shape[0]:
            a[:, 2 * hi.shape[0]:] = 0
    else:
        _cpu.rope_table(pos, rc, rs, pc, ps, hi, lo, a, _rows(sin_out, n, width), code,
                        layout == "interleaved", float(scale), nthreads, stream)


def sinusoid_into(positions, hi, lo, out, code: int, layout: str) -> None:
    """The sinusoid rows of ``positions`` (any real NumPy array) into ``out``: ``P + (width,)``
    of storage ``code``, C-contiguous (a 16-bit front-end passes its bits' view). An odd
    interleaved width ``2 F - 1`` (keras-hub) is written whole pairs first, into a scratch
    table whose last cosine is dropped."""
    hi = np.ascontiguousarray(hi, dtype=np.float64)
    lo = np.ascontiguousarray(lo, dtype=np.float64)
    width = out.shape[-1]
    if width < 2 * hi.shape[0]:
        full = empty(out.shape[:-1] + (2 * hi.shape[0],), out.dtype)
        _table(positions, hi, lo, full, code, full.shape[-1], layout)
        out[...] = full[..., :width]
        return
    _table(positions, hi, lo, out, code, width, layout)


def rope_table_into(positions, inv_freq, cos, sin, code: int, layout: str,
                    scale: float) -> None:
    """RoPE's cos/sin rows ``P + (2F,)`` of ``positions`` from exact rotations, times
    ``scale``, into ``cos`` and ``sin`` (C-contiguous, storage ``code``)."""
    w = np.ascontiguousarray(inv_freq, dtype=np.float64).reshape(-1)
    _table(positions, w, np.zeros_like(w), cos, code, 2 * w.shape[0], layout, scale, sin)


# ---- the rotation kernels ---------------------------------------------------------------------


def rotate(x, cos, sin, out, tx: int, tc: int, interleaved: bool, inverse: bool, pos=None,
           check_only: bool = False):
    """The rotation kernel into ``out`` (allocated when None), the cached kernel when ``pos``
    (int64 ids) is given; returns the result. ``check_only`` (tables, no ``pos``): raise
    ``Unsupported`` as the call would, writing nothing."""
    nbytes = x.nbytes
    if out is None:
        out = np.empty(x.shape, x.dtype) if nbytes < BLOCK_MIN_BYTES else empty(x.shape, x.dtype)
    nthreads, stream = threads_and_stores(nbytes)
    if pos is None:
        _cpu.apply_rope(x, cos, sin, out, tx, tc, interleaved, inverse, nthreads, stream,
                        check_only=check_only)
    else:
        _cpu.apply_rope_cached(x, cos, sin, pos, out, tx, tc, interleaved, inverse, nthreads,
                               stream)
    return out


def bind_cached(shape, dtype, tx: int, tc: int, interleaved: bool, inverse: bool,
                allocate):
    """The cached rotation for one signature: ``f(x, cos_cache, sin_cache, ids, out)`` with
    the codes, threads and store kind decided here once (``allocate(shape, dtype)`` makes
    ``out`` when it is None, or ``allocate`` is None: ``out`` is always given); ``ids``
    native int64. Threads above the parallel size follow the caller (a Dask task)."""
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n
    small = nbytes < PARALLEL_MIN_BYTES
    kernel = _cpu.apply_rope_cached

    def cached(x, cos_cache, sin_cache, position_ids, out):
        if allocate:
            out = allocate(shape, dtype)
        nthreads, stream = (1, streams(0)) if small else threads_and_stores(nbytes)
        kernel(x, cos_cache, sin_cache, position_ids, out, tx, tc, interleaved, inverse,
               nthreads, stream)
        return out
    return cached


def check_ids(ids, rows: int) -> None:
    """ValueError naming ``position_ids`` for ids (a NumPy integer array) outside the cache's
    ``[0, rows)``: what the kernels check while they gather, for ids gathered beforehand."""
    if ids.size and (ids.min() < 0 or ids.max() >= rows):
        raise ValueError(f"position_ids must lie in [0, {rows}) (the cache rows), got values "
                         f"from {ids.min()} to {ids.max()}")


def qk_outputs_apart(q, k, q_out, k_out) -> None:
    """Refuse (``Unsupported``) an apply_rope_qk whose outputs meet the other tensor or each
    other (NumPy arrays or views): each rotation's kernel sees its own arrays only."""
    if (q_out is not None and memory.meets(q_out, (k, k_out))) or (
            k_out is not None and memory.meets(k_out, (q,))):
        raise Unsupported("an output of apply_rope_qk meets the other tensor or output")


# ---- the other families (csrc/families.hpp) ------------------------------------------------

ALIBI_MODES = {"causal": 0, "symmetric": 1, "key": 2}


def alibi_bias_into(slopes, out, code: int, query_len: int, key_len: int, query_offset: int,
                    mode: str) -> None:
    """ALiBi ``(heads, query_len, key_len)`` into ``out`` (C-contiguous, storage ``code``, like
    the 1-D ``slopes``)."""
    nthreads, stream = threads_and_stores(out.nbytes)
    _cpu.alibi_bias_into(np.ascontiguousarray(slopes), out, code, query_len, key_len,
                         query_offset, ALIBI_MODES[mode], nthreads, stream)


def alibi_positions_into(slopes64, qp, kp, out, code: int, mode: str) -> None:
    """ALiBi ``(lead, heads, q, k)`` of positions ``qp (lead, q)``, ``kp (lead, k)`` (both
    int64 or both float64) and float64 ``slopes64`` into ``out`` (storage ``code``)."""
    nthreads, stream = threads_and_stores(out.nbytes)
    _cpu.alibi_positions_into(slopes64, qp, kp, out, code, ALIBI_MODES[mode], nthreads, stream)


def alibi_mask_into(slopes, mask, out, code: int) -> None:
    """BLOOM's ALiBi ``(batch, heads, 1, k)`` of a bool or integer ``mask (batch, k)``
    (ValueError naming attention_mask for a value other than 0 and 1)."""
    nthreads, stream = threads_and_stores(out.nbytes)
    _cpu.alibi_mask_into(np.ascontiguousarray(slopes), np.ascontiguousarray(mask), out, code,
                         nthreads, stream)


def relative_gather_into(table, index, out) -> None:
    """``out[h, p] = table[index[p], h]``: ``table (buckets, heads)``, ``index`` any integer
    array of ids in range, ``out (heads,) + index.shape`` C-contiguous of table's dtype (its
    bits copied)."""
    idx = index.reshape(-1)
    if idx.dtype != np.int64 and idx.dtype != np.int32:  # the kernel's two
        # (narrower ids exactly in int32: half int64's bytes to write and read back)
        idx = idx.astype(np.int32 if idx.dtype.itemsize < 4 else np.int64)
    nthreads, stream = threads_and_stores(out.nbytes)
    _cpu.relative_gather(np.ascontiguousarray(table.T), np.ascontiguousarray(idx),
                         out.reshape(out.shape[0], -1), nthreads, stream,
                         index.shape[0] if index.ndim == 2 else 0)


def toeplitz_into(lines, out) -> None:
    """``out[h, i, j] = lines[j - i + q - 1, h]``: ``lines (q + k - 1, heads)``, ``out (heads,
    q, k)`` C-contiguous of lines' dtype (its bits copied)."""
    heads, q, k = out.shape
    if out.size == 0:
        return
    nthreads, stream = threads_and_stores(out.nbytes)
    _cpu.toeplitz_rows(np.ascontiguousarray(lines.T), out.reshape(heads, q * k), q, k,
                       nthreads, stream)


_ACTIVATION_CODE = {None: 0, "gelu": 1, "tanh": 2}


def conv_into(x, weight, bias, out, code: int, activation, residual: bool) -> None:
    """The depthwise convolution of ``x (..., H, W, C)`` (storage ``code``) with ``weight
    (kh, kw, C)`` and ``bias (C,)`` or None (any floating dtype: converted to x's working
    type, float64 for float64 x, else float32, as the generic path does), the activation and
    the residual, into ``out`` (C-contiguous, x's shape and storage)."""
    if x.size == 0:
        return
    work = np.float64 if code == F64 else np.float32
    h, w, c = x.shape[-3:]
    x4 = np.ascontiguousarray(x).reshape(-1, h, w, c)
    w3 = np.ascontiguousarray(weight, dtype=work)
    b = None if bias is None else np.ascontiguousarray(bias, dtype=work)
    # compute-bound: threads pay from a smaller output than for the write-bound kernels
    nthreads = 1 if out.nbytes < (PARALLEL_MIN_BYTES >> 3) or one_thread_wanted() \
        else _MAX_THREADS
    _cpu.conv_grid_into(x4, w3, b, out.reshape(x4.shape), code, _ACTIVATION_CODE[activation],
                        residual, nthreads)


def resample_shape(shape, taps, prefix_rows: int) -> tuple:
    """The shape ``resample_grid`` gives a grid of ``shape`` with ``taps`` (one per grid axis,
    just before the last) after ``prefix_rows`` rows: ``(..., P + prod(new), C)``."""
    k = len(taps)
    lead, grid = tuple(shape[:-k - 1]), tuple(shape[-k - 1:-1])
    rows = 1
    for n, t in zip(grid, taps):
        rows *= n if t is None else t[0].shape[0]
    return lead + (prefix_rows + rows, shape[-1])


def resample_into(grid, prefix, taps, out, code: int) -> None:
    """``grid (..., *old, C)`` (storage ``code``, one or two grid axes; any strides whose last
    axis is contiguous) resampled with host ``taps`` (``(index, weight)`` or None per axis)
    into the C-contiguous ``out`` of ``resample_shape``, after a copy of the ``prefix`` rows
    (None: none); ``Unsupported`` for more axes or strides the kernel does not take."""
    k = len(taps)
    if not 1 <= k <= 2 or grid.ndim < k + 1 or not out.flags.c_contiguous:
        raise Unsupported("resample: one or two grid axes only")
    if out.size == 0:
        return
    c = grid.shape[-1]
    if c > 1 and grid.strides[-1] != grid.itemsize:
        grid = np.ascontiguousarray(grid)  # (the kernel reads whole channel rows)
    h, w = (grid.shape[-2], 1) if k == 1 else grid.shape[-3:-1]
    sizes = [n if t is None else t[0].shape[0] for n, t in zip((h, w), taps + (None,))]
    ho, wo = sizes
    p = 0 if prefix is None else prefix.shape[-2]
    if p and (prefix.shape[:-2] != grid.shape[:-k - 1] or prefix.shape[-1] != c
              or prefix.dtype != grid.dtype):
        raise Unsupported("resample: prefix rows of another shape or dtype than the grid's")
    planes = out.reshape(-1, out.shape[-2], c)
    hidx, hw = taps[0] if taps[0] is not None else (None, None)
    widx, ww = taps[1] if k == 2 and taps[1] is not None else (None, None)
    # compute-bound: threads pay from a smaller output than for the write-bound kernels
    nthreads = 1 if out.nbytes < (PARALLEL_MIN_BYTES >> 3) or one_thread_wanted() \
        else _MAX_THREADS
    _cpu.resample_into(grid.reshape(-1, h, w, c), hidx, hw, widx, ww,
                       planes[:, p:, :].reshape(-1, ho, wo, c), code, nthreads)
    if p:
        np.copyto(planes[:, :p, :], prefix.reshape(-1, p, c))


def clip_shift_into(x, out, lo: int, hi: int, shift: int) -> None:
    """``out = clip(x, lo, hi) + shift``: ``x`` any integer NumPy array (``Unsupported`` for
    leading axes whose strides do not collapse into one), ``out`` C-contiguous of x's shape,
    signed (x's own type or int64), holding ``lo + shift`` and ``hi + shift``."""
    nthreads, stream = threads_and_stores(out.nbytes)
    _cpu.clip_shift_into(x, out, lo, hi, shift, nthreads, stream)


memory.use_bounds(_cpu.bounds_meeting)
