# distutils: language = c++
# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False
"""Compiled CPU kernels of arrpos (private; called only by the host driver,
``arrpos._backends.host.driver``).

Thin entry points over the C++ templates of ``csrc/kernels.hpp``: each takes NumPy arrays and
the storage type codes of their elements (``F32``, ``F64``, ``F16``, ``BF16``: a torch bfloat16
tensor arrives as uint16 bits), reads shapes and strides straight from the array structs (no
buffer protocol, whose setup per call would outweigh a decode-sized call's work) and runs the
instantiation for those types. The C++ side checks every shape, stride and overlap before it
writes; what it cannot serve raises ``Unsupported`` (the dispatcher then runs the generic path).
"""
cimport numpy as cnp
from libc.stdint cimport (int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                          uint64_t)

from . import Unsupported

cnp.import_array()

cdef extern from "numpy/arrayobject.h":
    cnp.PyArray_Descr *descr_of "PyArray_DESCR"(cnp.ndarray) noexcept nogil
    bint equiv_types "PyArray_EquivTypes"(cnp.PyArray_Descr *, cnp.PyArray_Descr *) noexcept


cdef inline bint _same_type(cnp.ndarray a, cnp.ndarray b) noexcept:
    cdef cnp.PyArray_Descr *da = descr_of(a)
    cdef cnp.PyArray_Descr *db = descr_of(b)
    return da == db or equiv_types(da, db)

cdef extern from "types.hpp" namespace "arrpos":
    cdef cppclass f16:
        pass
    cdef cppclass bf16:
        pass

cdef extern from "pool.hpp" namespace "arrpos":
    bint cpp_have_threads "arrpos::have_threads"() noexcept nogil
    int cpp_max_threads "arrpos::max_threads"() noexcept nogil

cdef extern from "kernels.hpp" namespace "arrpos":
    cdef struct Strided:
        char *data
        int ndim
        const Py_ssize_t *shape
        const Py_ssize_t *strides
    cdef struct ApplyArgs:
        Strided x, out, cos, sin, pos
        bint interleaved, inverse, stream, dry
        int nthreads
        Py_ssize_t chunk_bytes
    cdef struct Rotations:
        const double *rc
        const double *rs
        const double *pc
        const double *ps
        const double *w_hi
        const double *w_lo
        Py_ssize_t block, npow, nf
    cdef struct TableJob:
        Rotations rot
        const double *pos
        Py_ssize_t n, lda, chunk_rows
        char *a
        char *b
        int layout
        double scale
        bint stream
    int rope_apply[T, Tc](const ApplyArgs &a) noexcept nogil
    void table[T](TableJob job, int nthreads, Py_ssize_t chunk_bytes) noexcept nogil
    # what rope_apply returns (kernels.hpp's Status)
    cdef enum Status:
        OK
        UNSUPPORTED
        BAD_POSITION
    void cpp_stream_copy "arrpos::stream_copy"(char *dst, const char *src, Py_ssize_t n,
                                               int nthreads, Py_ssize_t period) noexcept nogil
    int simd_level() noexcept nogil
    const char *simd_level_name(int level) noexcept nogil
    int set_simd_level(int level) noexcept nogil

cdef extern from "memory.hpp" namespace "arrpos":
    cdef struct Block:
        void *ptr
        size_t size
    Block block_alloc(size_t n) noexcept
    void block_release(Block b) noexcept
    void blocks_trim() noexcept

# storage type codes (types.hpp)
F32 = 0
F64 = 1
F16 = 2
BF16 = 3
cdef Py_ssize_t[4] _ITEMSIZE = [4, 8, 2, 2]
# (x, table) storage pairs with a kernel; the front-ends convert other tables first
APPLY_TYPES = frozenset({(0, 0), (1, 1), (2, 2), (2, 0), (3, 3), (3, 0)})


def have_threads():
    """Whether the extension was built with its thread pool (ARRPOS_NO_THREADS: one thread)."""
    return bool(cpp_have_threads())


def max_threads():
    """Threads a parallel call may use: ARRPOS_NUM_THREADS, else OMP_NUM_THREADS, else the
    CPUs this process may run on (read once); 1 when built without threads."""
    return cpp_max_threads()


def instruction_set():
    """The vector code the kernels run: 3 AVX-512 with its bfloat16 conversion (and DQ),
    2 AVX-512, 1 AVX2, 0 portable (ARRPOS_SIMD_LEVEL caps it). Every level gives the same
    bits."""
    return simd_level()


def instruction_set_name():
    """The name of the level the kernels run, as ``arrpos info`` prints it: "avx512-bf16",
    "avx512", "avx2" (x86-64), "neon" (aarch64) or "portable"."""
    return simd_level_name(simd_level()).decode()


def set_instruction_set(int level):
    """Run the kernels at ``level`` from now on (at most this CPU's; returns the level set):
    benchmarks/bench_simd.py times the levels in one process. Not while kernels run on other
    threads."""
    return set_simd_level(level)


cdef inline bint _bounds(object obj, char **lo, char **hi) noexcept:
    """The byte range [lo, hi) that the elements of NumPy array ``obj`` may touch; False for
    anything else."""
    if not isinstance(obj, cnp.ndarray):
        return False
    cdef cnp.ndarray a = <cnp.ndarray>obj
    cdef char *l = <char *>cnp.PyArray_DATA(a)
    cdef char *h = l
    cdef int k
    cdef Py_ssize_t n, span
    for k in range(cnp.PyArray_NDIM(a)):
        n = cnp.PyArray_DIMS(a)[k]
        if n == 0:
            lo[0] = hi[0] = l
            return True
        span = (n - 1) * cnp.PyArray_STRIDES(a)[k]
        if span < 0:
            l += span
        else:
            h += span
    lo[0] = l
    hi[0] = h + cnp.PyArray_ITEMSIZE(a)
    return True


def bounds_meeting(object out, tuple arrays):
    """Bit ``k`` set where ``arrays[k]`` (None: never) may share memory with ``out`` by their
    byte bounds (a NumPy array's whole range; anything else always may): the first, cheap
    question of arrpos._backends._memory, asked in C for a decode step's few arrays."""
    cdef char *ol
    cdef char *oh
    cdef char *l
    cdef char *h
    cdef unsigned long long bits = 0
    cdef Py_ssize_t k, n = len(arrays)
    cdef bint known = _bounds(out, &ol, &oh)
    if n > 64:
        raise ValueError(f"at most 64 arrays, got {n}")
    for k in range(n):
        a = arrays[k]
        if a is None:
            continue
        if not known or not _bounds(a, &l, &h) or (l < oh and ol < h):
            bits |= 1ULL << k
    return bits


cdef inline Strided _strided(cnp.ndarray a) noexcept:
    cdef Strided s
    s.data = <char *>cnp.PyArray_DATA(a)
    s.ndim = cnp.PyArray_NDIM(a)
    s.shape = <const Py_ssize_t *>cnp.PyArray_DIMS(a)
    s.strides = <const Py_ssize_t *>cnp.PyArray_STRIDES(a)
    return s


cdef inline bint _is(cnp.ndarray a, int code) noexcept:
    return code >= 0 and code < 4 and cnp.PyArray_ITEMSIZE(a) == _ITEMSIZE[code]


cdef int _run_apply(int tx, int tc, const ApplyArgs *a) noexcept nogil:
    if tx == 0 and tc == 0:
        return rope_apply[float, float](a[0])
    if tx == 1 and tc == 1:
        return rope_apply[double, double](a[0])
    if tx == 2 and tc == 2:
        return rope_apply[f16, f16](a[0])
    if tx == 2 and tc == 0:
        return rope_apply[f16, float](a[0])
    if tx == 3 and tc == 3:
        return rope_apply[bf16, bf16](a[0])
    if tx == 3 and tc == 0:
        return rope_apply[bf16, float](a[0])
    return UNSUPPORTED


cdef int _apply(cnp.ndarray x, cnp.ndarray cos, cnp.ndarray sin, cnp.ndarray out, object pos,
                int tx, int tc, bint interleaved, bint inverse, int nthreads, bint stream,
                Py_ssize_t chunk_bytes, bint dry=False) except -1:
    cdef ApplyArgs a
    if not (_is(x, tx) and _is(cos, tc) and _is(sin, tc)) or cnp.PyArray_NDIM(x) < 1 \
            or not _same_type(x, out) \
            or not _same_type(cos, sin) \
            or not cnp.PyArray_ISWRITEABLE(out) or not cnp.PyArray_ISNOTSWAPPED(x) \
            or not cnp.PyArray_ISNOTSWAPPED(cos) or cnp.PyArray_NDIM(cos) < 1:
        raise Unsupported("dtypes, byte order or writability the kernels do not serve")
    a.x = _strided(x)
    a.out = _strided(out)
    a.cos = _strided(cos)
    a.sin = _strided(sin)
    a.pos.data = NULL
    a.pos.ndim = 0
    if pos is not None:
        a.pos = _strided(<cnp.ndarray>pos)
    a.interleaved = interleaved
    a.inverse = inverse
    a.stream = stream
    a.dry = dry
    a.nthreads = nthreads
    a.chunk_bytes = chunk_bytes
    with nogil:
        st = _run_apply(tx, tc, &a)
    if st == BAD_POSITION:
        raise ValueError(f"position_ids must lie in [0, {(<object>cos).shape[0]}) (the cache rows), "
                         f"got values outside")
    if st != OK:
        raise Unsupported("a memory layout the kernels do not serve")
    return 0


def apply_rope(cnp.ndarray x, cnp.ndarray cos, cnp.ndarray sin, cnp.ndarray out, int tx, int tc,
               bint interleaved, bint inverse, int nthreads=1, bint stream=False,
               Py_ssize_t chunk_bytes=1 << 18, bint check_only=False):
    """Rotate the first ``R = cos.shape[-1]`` features of ``x`` into ``out`` (``out`` may be
    ``x``: in place). ``cos``/``sin`` broadcast against ``x[..., :R]`` (stride 0 on size-1
    axes); any strides but unit-stride rows; ``tx``/``tc`` the storage codes of x and tables.
    ``check_only``: raise ``Unsupported`` as the call would, and write nothing."""
    _apply(x, cos, sin, out, None, tx, tc, interleaved, inverse, nthreads, stream, chunk_bytes,
           check_only)


def apply_rope_cached(cnp.ndarray x, cnp.ndarray cos_cache, cnp.ndarray sin_cache,
                      cnp.ndarray position_ids, cnp.ndarray out, int tx, int tc,
                      bint interleaved, bint inverse, int nthreads=1, bint stream=False,
                      Py_ssize_t chunk_bytes=1 << 18):
    """Rotate ``x`` by the rows ``position_ids`` (int64, broadcasting against
    ``x.shape[:-1]``) of the half-width caches ``(max_positions, R/2)``; ids are checked."""
    if cnp.PyArray_TYPE(position_ids) != cnp.NPY_INT64 or cnp.PyArray_NDIM(cos_cache) != 2 \
            or not cnp.PyArray_ISNOTSWAPPED(position_ids):
        raise Unsupported("position_ids must be native int64 and the caches 2-d")
    _apply(x, cos_cache, sin_cache, out, position_ids, tx, tc, interleaved, inverse, nthreads,
           stream, chunk_bytes)


cdef Rotations _rotations(const double[:, ::1] rc, const double[:, ::1] rs,
                          const double[:, ::1] pc, const double[:, ::1] ps,
                          const double[::1] w_hi, const double[::1] w_lo) except *:
    cdef Rotations t
    cdef Py_ssize_t block = rc.shape[0], nf = rc.shape[1]
    if rs.shape[0] != block or rs.shape[1] != nf or block < 1 or (block & (block - 1)):
        raise ValueError("rc and rs must both be (B, nf) with B a power of two")
    if pc.shape[1] != nf or ps.shape[0] != pc.shape[0] or ps.shape[1] != nf or pc.shape[0] < 1:
        raise ValueError("pc and ps must both be (npow, nf) with npow >= 1")
    if w_hi.shape[0] != nf or w_lo.shape[0] != nf:
        raise ValueError("w_hi and w_lo must have nf elements")
    t.rc = &rc[0, 0]
    t.rs = &rs[0, 0]
    t.pc = &pc[0, 0]
    t.ps = &ps[0, 0]
    t.w_hi = &w_hi[0] if nf else NULL
    t.w_lo = &w_lo[0] if nf else NULL
    t.block = block
    t.npow = pc.shape[0]
    t.nf = nf
    return t


cdef void _check_table_out(str name, cnp.ndarray out, Py_ssize_t n, Py_ssize_t width,
                           int code) except *:
    if not _is(out, code) or cnp.PyArray_NDIM(out) != 2 or not cnp.PyArray_IS_C_CONTIGUOUS(out) \
            or not cnp.PyArray_ISWRITEABLE(out) or out.shape[0] != n or out.shape[1] < width:
        raise ValueError(f"{name} must be a writable C-contiguous ({n}, >= {width}) array of "
                         f"type code {code}, got {(<object>out).dtype} {(<object>out).shape}")


cdef void _run_table(int code, TableJob job, int nthreads, Py_ssize_t chunk_bytes) noexcept nogil:
    if code == 0:
        table[float](job, nthreads, chunk_bytes)
    elif code == 1:
        table[double](job, nthreads, chunk_bytes)
    elif code == 2:
        table[f16](job, nthreads, chunk_bytes)
    else:
        table[bf16](job, nthreads, chunk_bytes)


def sinusoid_table(const double[::1] pos, const double[:, ::1] rc, const double[:, ::1] rs,
                   const double[:, ::1] pc, const double[:, ::1] ps, const double[::1] w_hi,
                   const double[::1] w_lo, cnp.ndarray out, int code, int layout,
                   int nthreads=1, bint stream=False, Py_ssize_t chunk_bytes=1 << 20):
    """Write the sinusoid rows of ``pos`` into ``out[:, :2 nf]`` (layout 0 interleaved,
    1 [sin | cos], 2 [cos | sin]). ``rc, rs``: ``(B, nf)`` exact rot(r w), r < B (B a power of
    two); ``pc, ps``: ``(npow, nf)`` exact rot(2**k B w); ``|pos| < 2**53``."""
    cdef TableJob job
    job.rot = _rotations(rc, rs, pc, ps, w_hi, w_lo)
    if layout < 0 or layout > 2:
        raise ValueError(f"layout code must be 0, 1 or 2, got {layout}")
    _check_table_out("out", out, pos.shape[0], 2 * job.rot.nf, code)
    if nthreads < 1:
        raise ValueError(f"nthreads must be >= 1, got {nthreads}")
    job.pos = &pos[0] if pos.shape[0] else NULL
    job.n = pos.shape[0]
    job.lda = out.shape[1]
    job.a = <char *>cnp.PyArray_DATA(out)
    job.b = NULL
    job.layout = layout
    job.scale = 1.0
    job.stream = stream
    with nogil:
        _run_table(code, job, nthreads, chunk_bytes)


def rope_table(const double[::1] pos, const double[:, ::1] rc, const double[:, ::1] rs,
               const double[:, ::1] pc, const double[:, ::1] ps, const double[::1] w_hi,
               const double[::1] w_lo, cnp.ndarray cos_out, cnp.ndarray sin_out, int code,
               bint interleaved, double scale, int nthreads=1, bint stream=False,
               Py_ssize_t chunk_bytes=1 << 20):
    """Write RoPE cos/sin rows ``(n, 2 nf)`` of ``pos``, times ``scale``; tables as above."""
    cdef TableJob job
    job.rot = _rotations(rc, rs, pc, ps, w_hi, w_lo)
    cdef Py_ssize_t n = pos.shape[0], w = 2 * job.rot.nf
    _check_table_out("cos_out", cos_out, n, w, code)
    _check_table_out("sin_out", sin_out, n, w, code)
    if cos_out.shape[1] != w or sin_out.shape[1] != w:
        raise ValueError(f"cos_out and sin_out must have {w} columns")
    if nthreads < 1:
        raise ValueError(f"nthreads must be >= 1, got {nthreads}")
    job.pos = &pos[0] if n else NULL
    job.n = n
    job.lda = w
    job.a = <char *>cnp.PyArray_DATA(cos_out)
    job.b = <char *>cnp.PyArray_DATA(sin_out)
    job.layout = 4 if interleaved else 3
    job.scale = scale
    job.stream = stream
    with nogil:
        _run_table(code, job, nthreads, chunk_bytes)


def stream_copy(cnp.ndarray src, cnp.ndarray dst, int nthreads=1):
    """``dst[...] = src`` for C-contiguous arrays of equal byte size, with streaming stores
    (AVX-512 where available): the memory limit the benchmarks compare against."""
    if not cnp.PyArray_IS_C_CONTIGUOUS(src) or not cnp.PyArray_IS_C_CONTIGUOUS(dst) \
            or cnp.PyArray_NBYTES(src) != cnp.PyArray_NBYTES(dst) \
            or not cnp.PyArray_ISWRITEABLE(dst):
        raise ValueError("src and dst must be C-contiguous, of equal size, dst writable")
    cdef char *d = <char *>cnp.PyArray_DATA(dst)
    cdef const char *s = <const char *>cnp.PyArray_DATA(src)
    cdef Py_ssize_t n = cnp.PyArray_NBYTES(src)
    with nogil:
        cpp_stream_copy(d, s, n, nthreads, 0)


def stream_fill(cnp.ndarray dst, int byte, int nthreads=1):
    """Every byte of the C-contiguous ``dst`` set to ``byte``, with streaming stores: the write
    limit the table benchmarks compare against. (Use a byte other than 0: on some machines
    streamed zero lines cost far less than any data.)"""
    if not cnp.PyArray_IS_C_CONTIGUOUS(dst) or not cnp.PyArray_ISWRITEABLE(dst):
        raise ValueError("dst must be C-contiguous and writable")
    if not 0 <= byte <= 255:
        raise ValueError(f"byte must lie in [0, 255], got {byte}")
    cdef Py_ssize_t period = 4096  # (divides the copy's 1 MiB chunks)
    cdef bytes stage = bytes([byte]) * period
    cdef const char *s = stage
    cdef char *d = <char *>cnp.PyArray_DATA(dst)
    cdef Py_ssize_t n = cnp.PyArray_NBYTES(dst)
    with nogil:
        cpp_stream_copy(d, s, n, nthreads, period)


cdef class OutputBlock:
    """Memory of one large kernel output (see csrc/memory.hpp): 2 MiB aligned with huge pages
    requested, handed back to a small free list when the last array using it goes away."""
    cdef Block block
    cdef Py_ssize_t nbytes
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]
    cdef int exports

    def __cinit__(self, Py_ssize_t nbytes):
        self.block = block_alloc(<size_t>nbytes)
        if self.block.ptr == NULL:
            raise MemoryError(f"cannot allocate {nbytes} bytes")
        self.nbytes = nbytes

    def __getbuffer__(self, Py_buffer *buf, int flags):
        self.shape[0] = self.nbytes
        self.strides[0] = 1
        buf.buf = self.block.ptr
        buf.obj = self
        buf.len = self.nbytes
        buf.readonly = 0
        buf.itemsize = 1
        buf.format = "B"
        buf.ndim = 1
        buf.shape = self.shape
        buf.strides = self.strides
        buf.suboffsets = NULL
        buf.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *buf):
        self.exports -= 1

    def __dealloc__(self):
        if self.block.ptr != NULL:
            block_release(self.block)
            self.block.ptr = NULL


def trim_output_blocks():
    """Unmap the output blocks kept for reuse."""
    blocks_trim()


# ---- the other families (csrc/families.hpp) ---------------------------------------------------

cdef extern from "families.hpp" namespace "arrpos::fam":
    cdef struct AlibiJob:
        const char *slopes
        char *out
        Py_ssize_t heads, q, k
        int64_t qoff
        int mode
        bint stream
    cdef struct PositionsJob:
        const double *slopes
        const char *qp
        const char *kp
        char *out
        Py_ssize_t lead, heads, q, k
        int mode
        bint stream
    cdef struct MaskJob:
        const char *slopes
        const char *mask
        char *out
        Py_ssize_t batch, heads, k
        bint stream
    cdef struct GatherJob:
        const char *table
        const char *index
        char *out
        Py_ssize_t heads, buckets, n, rows
        bint stream
    void alibi_bias[T](AlibiJob job, int nthreads) noexcept nogil
    void alibi_positions[T, P](PositionsJob job, int nthreads) noexcept nogil
    bint alibi_mask[T, M](MaskJob job, int nthreads) noexcept nogil
    bint gather[U, I](GatherJob job, int nthreads) noexcept nogil
    cdef struct ToeplitzJob:
        const char *lines
        char *out
        Py_ssize_t heads, q, k
        bint stream
    void toeplitz[U](ToeplitzJob job, int nthreads) noexcept nogil
    cdef struct ConvJob:
        const char *x
        const char *w
        const char *bias
        char *out
        Py_ssize_t outer, H, W, C, kh, kw, top, left
        int act
        bint residual
    void conv_grid[T](ConvJob job, int nthreads) noexcept nogil
    cdef struct ResampleJob:
        const char *x
        char *out
        const int64_t *hidx
        const double *hw
        const int64_t *widx
        const double *ww
        Py_ssize_t outer, H, W, C, Ho, Wo, th, tw, xs_outer, xs_h, xs_w, os_outer
    void resample[T](ResampleJob job, int nthreads) noexcept nogil


cdef inline bint _out_ok(cnp.ndarray out, int code, Py_ssize_t size) noexcept:
    return _is(out, code) and cnp.PyArray_IS_C_CONTIGUOUS(out) and cnp.PyArray_ISWRITEABLE(out) \
        and cnp.PyArray_SIZE(out) == size


cdef inline bint _vector_ok(cnp.ndarray a, int code, Py_ssize_t n) noexcept:
    return _is(a, code) and cnp.PyArray_NDIM(a) == 1 and cnp.PyArray_IS_C_CONTIGUOUS(a) \
        and cnp.PyArray_ISNOTSWAPPED(a) and a.shape[0] == n


def alibi_bias_into(cnp.ndarray slopes, cnp.ndarray out, int code, Py_ssize_t q, Py_ssize_t k,
                    int64_t qoff, int mode, int nthreads=1, bint stream=False):
    """ALiBi ``(heads, q, k)`` into the C-contiguous ``out`` (storage ``code``, like the 1-D
    contiguous ``slopes``); mode 0 causal, 1 symmetric, 2 key; queries at ``i + qoff``."""
    cdef Py_ssize_t h = cnp.PyArray_SIZE(slopes)
    if not _vector_ok(slopes, code, h) or not _out_ok(out, code, h * q * k) \
            or not 0 <= mode <= 2 or q < 0 or k < 0 or nthreads < 1:
        raise Unsupported("alibi_bias: arrays or arguments the kernel does not serve")
    cdef AlibiJob job
    job.slopes = <const char *>cnp.PyArray_DATA(slopes)
    job.out = <char *>cnp.PyArray_DATA(out)
    job.heads, job.q, job.k, job.qoff, job.mode, job.stream = h, q, k, qoff, mode, stream
    with nogil:
        if code == 0:
            alibi_bias[float](job, nthreads)
        elif code == 1:
            alibi_bias[double](job, nthreads)
        elif code == 2:
            alibi_bias[f16](job, nthreads)
        else:
            alibi_bias[bf16](job, nthreads)


def alibi_positions_into(cnp.ndarray slopes, cnp.ndarray qp, cnp.ndarray kp, cnp.ndarray out,
                         int code, int mode, int nthreads=1, bint stream=False):
    """ALiBi ``(lead, heads, q, k)`` of positions ``qp (lead, q)`` and ``kp (lead, k)``, both
    C-contiguous int64 or both float64; ``slopes`` float64 ``(heads,)``."""
    cdef Py_ssize_t h = cnp.PyArray_SIZE(slopes)
    cdef int pt = cnp.PyArray_TYPE(qp)
    if not _vector_ok(slopes, 1, h) or cnp.PyArray_NDIM(qp) != 2 or cnp.PyArray_NDIM(kp) != 2 \
            or cnp.PyArray_TYPE(kp) != pt or (pt != cnp.NPY_INT64 and pt != cnp.NPY_FLOAT64) \
            or not cnp.PyArray_IS_C_CONTIGUOUS(qp) or not cnp.PyArray_IS_C_CONTIGUOUS(kp) \
            or not cnp.PyArray_ISNOTSWAPPED(qp) or not cnp.PyArray_ISNOTSWAPPED(kp) \
            or qp.shape[0] != kp.shape[0] or not 0 <= mode <= 2 or nthreads < 1 \
            or not _out_ok(out, code, qp.shape[0] * h * qp.shape[1] * kp.shape[1]):
        raise Unsupported("alibi_bias_from_positions: arrays the kernel does not serve")
    cdef PositionsJob job
    job.slopes = <const double *>cnp.PyArray_DATA(slopes)
    job.qp = <const char *>cnp.PyArray_DATA(qp)
    job.kp = <const char *>cnp.PyArray_DATA(kp)
    job.out = <char *>cnp.PyArray_DATA(out)
    job.lead, job.heads, job.q, job.k = qp.shape[0], h, qp.shape[1], kp.shape[1]
    job.mode, job.stream = mode, stream
    cdef bint ints = pt == cnp.NPY_INT64
    with nogil:
        if ints:
            if code == 0:
                alibi_positions[float, int64_t](job, nthreads)
            elif code == 1:
                alibi_positions[double, int64_t](job, nthreads)
            elif code == 2:
                alibi_positions[f16, int64_t](job, nthreads)
            else:
                alibi_positions[bf16, int64_t](job, nthreads)
        else:
            if code == 0:
                alibi_positions[float, double](job, nthreads)
            elif code == 1:
                alibi_positions[double, double](job, nthreads)
            elif code == 2:
                alibi_positions[f16, double](job, nthreads)
            else:
                alibi_positions[bf16, double](job, nthreads)


cdef bint _run_mask(int code, Py_ssize_t item, MaskJob job, int nthreads) noexcept nogil:
    if item == 1:
        if code == 0:
            return alibi_mask[float, uint8_t](job, nthreads)
        if code == 1:
            return alibi_mask[double, uint8_t](job, nthreads)
        if code == 2:
            return alibi_mask[f16, uint8_t](job, nthreads)
        return alibi_mask[bf16, uint8_t](job, nthreads)
    if item == 2:
        if code == 0:
            return alibi_mask[float, uint16_t](job, nthreads)
        if code == 1:
            return alibi_mask[double, uint16_t](job, nthreads)
        if code == 2:
            return alibi_mask[f16, uint16_t](job, nthreads)
        return alibi_mask[bf16, uint16_t](job, nthreads)
    if item == 4:
        if code == 0:
            return alibi_mask[float, uint32_t](job, nthreads)
        if code == 1:
            return alibi_mask[double, uint32_t](job, nthreads)
        if code == 2:
            return alibi_mask[f16, uint32_t](job, nthreads)
        return alibi_mask[bf16, uint32_t](job, nthreads)
    if code == 0:
        return alibi_mask[float, uint64_t](job, nthreads)
    if code == 1:
        return alibi_mask[double, uint64_t](job, nthreads)
    if code == 2:
        return alibi_mask[f16, uint64_t](job, nthreads)
    return alibi_mask[bf16, uint64_t](job, nthreads)


def alibi_mask_into(cnp.ndarray slopes, cnp.ndarray mask, cnp.ndarray out, int code,
                    int nthreads=1, bint stream=False):
    """BLOOM's ALiBi ``(batch, heads, 1, k)`` of a C-contiguous bool or integer ``mask (batch,
    k)``; ValueError (naming attention_mask) for a value other than 0 and 1."""
    cdef Py_ssize_t h = cnp.PyArray_SIZE(slopes)
    cdef Py_ssize_t item = cnp.PyArray_ITEMSIZE(mask)
    if not _vector_ok(slopes, code, h) or cnp.PyArray_NDIM(mask) != 2 \
            or (item != 1 and item != 2 and item != 4 and item != 8) \
            or not cnp.PyArray_IS_C_CONTIGUOUS(mask) or not cnp.PyArray_ISNOTSWAPPED(mask) \
            or nthreads < 1 or not _out_ok(out, code, mask.shape[0] * h * mask.shape[1]):
        raise Unsupported("alibi_bias_from_mask: arrays the kernel does not serve")
    cdef MaskJob job
    job.slopes = <const char *>cnp.PyArray_DATA(slopes)
    job.mask = <const char *>cnp.PyArray_DATA(mask)
    job.out = <char *>cnp.PyArray_DATA(out)
    job.batch, job.heads, job.k, job.stream = mask.shape[0], h, mask.shape[1], stream
    cdef bint ok
    with nogil:
        ok = _run_mask(code, item, job, nthreads)
    if not ok:
        raise ValueError("attention_mask must hold only 0 and 1")


def relative_gather(cnp.ndarray table_t, cnp.ndarray index, cnp.ndarray out, int nthreads=1,
                    bint stream=False, Py_ssize_t rows=0):
    """``out[h, p] = table_t[h, index[p]]``: ``table_t (heads, buckets)``, ``index (n,)`` int32
    or int64 and ``out (heads, n)`` C-contiguous, of one element size (2, 4 or 8 bytes: the
    bits are copied); ``rows``: the index is ``(rows, n / rows)`` (0: unknown). ValueError for
    an index outside ``[0, buckets)``."""
    cdef Py_ssize_t item = cnp.PyArray_ITEMSIZE(table_t)
    cdef int it = cnp.PyArray_TYPE(index)
    if cnp.PyArray_NDIM(table_t) != 2 or cnp.PyArray_NDIM(index) != 1 \
            or not cnp.PyArray_IS_C_CONTIGUOUS(table_t) or not cnp.PyArray_IS_C_CONTIGUOUS(index) \
            or not cnp.PyArray_IS_C_CONTIGUOUS(out) or not cnp.PyArray_ISWRITEABLE(out) \
            or cnp.PyArray_ITEMSIZE(out) != item or (item != 2 and item != 4 and item != 8) \
            or (it != cnp.NPY_INT64 and it != cnp.NPY_INT32) \
            or not cnp.PyArray_ISNOTSWAPPED(index) \
            or cnp.PyArray_SIZE(out) != table_t.shape[0] * index.shape[0] or nthreads < 1 \
            or rows < 0 or (rows > 0 and index.shape[0] % rows) \
            or table_t.shape[1] > 2147483647:  # (the gathers' ids are 32-bit)
        raise Unsupported("relative_bias: arrays the kernel does not serve")
    cdef GatherJob job
    job.table = <const char *>cnp.PyArray_DATA(table_t)
    job.index = <const char *>cnp.PyArray_DATA(index)
    job.out = <char *>cnp.PyArray_DATA(out)
    job.heads, job.buckets, job.n, job.stream = table_t.shape[0], table_t.shape[1], \
        index.shape[0], stream
    job.rows = rows
    cdef bint ok
    cdef bint wide = it == cnp.NPY_INT64
    with nogil:
        if item == 2:
            ok = gather[uint16_t, int64_t](job, nthreads) if wide else \
                gather[uint16_t, int32_t](job, nthreads)
        elif item == 4:
            ok = gather[uint32_t, int64_t](job, nthreads) if wide else \
                gather[uint32_t, int32_t](job, nthreads)
        else:
            ok = gather[uint64_t, int64_t](job, nthreads) if wide else \
                gather[uint64_t, int32_t](job, nthreads)
    if not ok:
        raise ValueError(f"index must lie in [0, {table_t.shape[1]}) (the rows of table), got "
                         f"values outside")


def toeplitz_rows(cnp.ndarray lines, cnp.ndarray out, Py_ssize_t q, Py_ssize_t k,
                  int nthreads=1, bint stream=False):
    """``out[h, i, j] = lines[h, j - i + q - 1]``: ``lines (heads, q + k - 1)`` and ``out
    (heads, q * k)`` C-contiguous, of one element size (2, 4 or 8 bytes: the bits are
    copied)."""
    cdef Py_ssize_t item = cnp.PyArray_ITEMSIZE(lines)
    if cnp.PyArray_NDIM(lines) != 2 or cnp.PyArray_NDIM(out) != 2 \
            or not cnp.PyArray_IS_C_CONTIGUOUS(lines) or not cnp.PyArray_IS_C_CONTIGUOUS(out) \
            or not cnp.PyArray_ISWRITEABLE(out) or cnp.PyArray_ITEMSIZE(out) != item \
            or (item != 2 and item != 4 and item != 8) or q < 1 or k < 1 or nthreads < 1 \
            or lines.shape[1] != q + k - 1 or out.shape[0] != lines.shape[0] \
            or out.shape[1] != q * k:
        raise Unsupported("toeplitz_bias: arrays the kernel does not serve")
    cdef ToeplitzJob job
    job.lines = <const char *>cnp.PyArray_DATA(lines)
    job.out = <char *>cnp.PyArray_DATA(out)
    job.heads, job.q, job.k, job.stream = lines.shape[0], q, k, stream
    with nogil:
        if item == 2:
            toeplitz[uint16_t](job, nthreads)
        elif item == 4:
            toeplitz[uint32_t](job, nthreads)
        else:
            toeplitz[uint64_t](job, nthreads)


def conv_grid_into(cnp.ndarray x, cnp.ndarray w, object bias, cnp.ndarray out, int code,
                   int act, bint residual, int nthreads=1):
    """Depthwise convolution of ``x (outer, H, W, C)`` (storage ``code``, C-contiguous) with
    ``w (kh, kw, C)`` and ``bias (C,)`` or None in x's compute type (float64 for float64 x,
    else float32), zero padding ``(k - 1) // 2`` before; then activation ``act`` (0 none, 1
    exact GELU, 2 tanh) and ``+ x`` if ``residual``, into ``out`` (x's shape and code)."""
    cdef int wcode = 1 if code == 1 else 0  # float64, else float32
    cdef cnp.ndarray b
    if cnp.PyArray_NDIM(x) != 4 or cnp.PyArray_NDIM(w) != 3 or not _is(x, code) \
            or not cnp.PyArray_IS_C_CONTIGUOUS(x) or not cnp.PyArray_ISNOTSWAPPED(x) \
            or not _is(w, wcode) or not cnp.PyArray_IS_C_CONTIGUOUS(w) \
            or not cnp.PyArray_ISNOTSWAPPED(w) or w.shape[2] != x.shape[3] \
            or w.shape[0] < 1 or w.shape[1] < 1 or act < 0 or act > 2 or nthreads < 1 \
            or not _out_ok(out, code, cnp.PyArray_SIZE(x)) \
            or (bias is not None and not _vector_ok(bias, wcode, x.shape[3])):
        raise Unsupported("conv_positional: arrays the kernel does not serve")
    if bounds_meeting(out, (x, w, bias)):
        raise Unsupported("conv_positional: the output meets an input")
    cdef ConvJob job
    job.x = <const char *>cnp.PyArray_DATA(x)
    job.w = <const char *>cnp.PyArray_DATA(w)
    job.bias = NULL
    if bias is not None:
        b = bias
        job.bias = <const char *>cnp.PyArray_DATA(b)
    job.out = <char *>cnp.PyArray_DATA(out)
    job.outer, job.H, job.W, job.C = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    job.kh, job.kw = w.shape[0], w.shape[1]
    job.top, job.left = (w.shape[0] - 1) // 2, (w.shape[1] - 1) // 2
    job.act, job.residual = act, residual
    with nogil:
        if code == 0:
            conv_grid[float](job, nthreads)
        elif code == 1:
            conv_grid[double](job, nthreads)
        elif code == 2:
            conv_grid[f16](job, nthreads)
        else:
            conv_grid[bf16](job, nthreads)


cdef bint _taps_ok(object index, object weight, Py_ssize_t n_in, Py_ssize_t n_out):
    """Host taps ``(n_out, T)``: int64 indices within ``[0, n_in)`` and float64 weights, both
    C-contiguous; None for both: an axis that keeps its length."""
    cdef cnp.ndarray ix
    cdef cnp.ndarray wt
    cdef const int64_t *p
    cdef Py_ssize_t k
    if index is None or weight is None:
        return index is None and weight is None and n_in == n_out
    ix, wt = index, weight
    if cnp.PyArray_NDIM(ix) != 2 or cnp.PyArray_NDIM(wt) != 2 \
            or cnp.PyArray_TYPE(ix) != cnp.NPY_INT64 or cnp.PyArray_TYPE(wt) != cnp.NPY_FLOAT64 \
            or not cnp.PyArray_IS_C_CONTIGUOUS(ix) or not cnp.PyArray_IS_C_CONTIGUOUS(wt) \
            or not cnp.PyArray_ISNOTSWAPPED(ix) or not cnp.PyArray_ISNOTSWAPPED(wt) \
            or ix.shape[0] != n_out or wt.shape[0] != n_out or ix.shape[1] != wt.shape[1] \
            or ix.shape[1] < 1:
        return False
    p = <const int64_t *>cnp.PyArray_DATA(ix)
    for k in range(cnp.PyArray_SIZE(ix)):
        if p[k] < 0 or p[k] >= n_in:
            return False
    return True


def resample_into(cnp.ndarray x, object hidx, object hw, object widx, object ww,
                  cnp.ndarray out, int code, int nthreads=1):
    """Resample ``x (outer, H, W, C)`` (storage ``code``, any element strides but a
    contiguous last axis) into ``out (outer, Ho, Wo, C)`` (each plane C-contiguous): taps
    ``(hidx, hw)`` ``(Ho, th)`` along H, then ``(widx, ww)`` ``(Wo, tw)`` along W (None: the
    axis keeps its length), summed in float64 in tap order, rounded once."""
    cdef Py_ssize_t item
    cdef cnp.ndarray a
    if cnp.PyArray_NDIM(x) != 4 or cnp.PyArray_NDIM(out) != 4 or not _is(x, code) \
            or not _is(out, code) or not cnp.PyArray_ISNOTSWAPPED(x) \
            or not cnp.PyArray_ISWRITEABLE(out) or nthreads < 1:
        raise Unsupported("resample: arrays the kernel does not serve")
    item = cnp.PyArray_ITEMSIZE(x)
    cdef Py_ssize_t outer = x.shape[0], H = x.shape[1], W = x.shape[2], C = x.shape[3]
    cdef Py_ssize_t Ho = out.shape[1], Wo = out.shape[2]
    if out.shape[0] != outer or out.shape[3] != C \
            or x.strides[0] % item or x.strides[1] % item or x.strides[2] % item \
            or (C > 1 and x.strides[3] != item) \
            or out.strides[0] % item or (C > 1 and out.strides[3] != item) \
            or (Wo > 1 and out.strides[2] != C * item) \
            or (Ho > 1 and out.strides[1] != Wo * C * item) \
            or not _taps_ok(hidx, hw, H, Ho) or not _taps_ok(widx, ww, W, Wo):
        raise Unsupported("resample: arrays the kernel does not serve")
    if bounds_meeting(out, (x,)):
        raise Unsupported("resample: the output meets the input")
    cdef ResampleJob job
    job.x = <const char *>cnp.PyArray_DATA(x)
    job.out = <char *>cnp.PyArray_DATA(out)
    job.hidx = NULL
    job.hw = NULL
    job.widx = NULL
    job.ww = NULL
    job.th, job.tw = 0, 0
    if hidx is not None:
        a = hidx
        job.hidx = <const int64_t *>cnp.PyArray_DATA(a)
        job.th = a.shape[1]
        a = hw
        job.hw = <const double *>cnp.PyArray_DATA(a)
    if widx is not None:
        a = widx
        job.widx = <const int64_t *>cnp.PyArray_DATA(a)
        job.tw = a.shape[1]
        a = ww
        job.ww = <const double *>cnp.PyArray_DATA(a)
    job.outer, job.H, job.W, job.C, job.Ho, job.Wo = outer, H, W, C, Ho, Wo
    job.xs_outer, job.xs_h, job.xs_w = x.strides[0] // item, x.strides[1] // item, \
        x.strides[2] // item
    job.os_outer = out.strides[0] // item
    with nogil:
        if code == 0:
            resample[float](job, nthreads)
        elif code == 1:
            resample[double](job, nthreads)
        elif code == 2:
            resample[f16](job, nthreads)
        else:
            resample[bf16](job, nthreads)


# ---- clip_shift (clip.hpp) -------------------------------------------------------------------

cdef extern from "clip.hpp" namespace "arrpos::fam":
    cdef struct ClipJob:
        const char *x
        char *out
        Py_ssize_t rows, cols, rs, cs
        int64_t lo, hi, shift
        bint stream
    void clip_shift[I, O](ClipJob job, int nthreads) noexcept nogil


cdef bint _run_clip(bint signed, Py_ssize_t item, bint wide, ClipJob job,
                    int nthreads) noexcept nogil:
    """The instantiation for the input (signed or not, ``item`` bytes) and the output (int64
    when ``wide``, else the input's own signed type); False where there is none."""
    if signed:
        if item == 8:
            clip_shift[int64_t, int64_t](job, nthreads)
        elif item == 4:
            if wide:
                clip_shift[int32_t, int64_t](job, nthreads)
            else:
                clip_shift[int32_t, int32_t](job, nthreads)
        elif item == 2:
            if wide:
                clip_shift[int16_t, int64_t](job, nthreads)
            else:
                clip_shift[int16_t, int16_t](job, nthreads)
        elif item == 1:
            if wide:
                clip_shift[int8_t, int64_t](job, nthreads)
            else:
                clip_shift[int8_t, int8_t](job, nthreads)
        else:
            return False
        return True
    if not wide:
        return False
    if item == 8:
        clip_shift[uint64_t, int64_t](job, nthreads)
    elif item == 4:
        clip_shift[uint32_t, int64_t](job, nthreads)
    elif item == 2:
        clip_shift[uint16_t, int64_t](job, nthreads)
    elif item == 1:
        clip_shift[uint8_t, int64_t](job, nthreads)
    else:
        return False
    return True


def clip_shift_into(cnp.ndarray x, cnp.ndarray out, int64_t lo, int64_t hi, int64_t shift,
                    int nthreads=1, bint stream=False):
    """``out = clip(x, lo, hi) + shift`` in exact integer arithmetic: ``x`` of any integer type
    and shape whose leading axes collapse into one (any element strides), ``out`` C-contiguous
    of x's size and a signed type, int64 or x's own; ``lo <= hi`` and ``lo + shift``,
    ``hi + shift`` within out's type. Anything else: ``Unsupported``, nothing written."""
    cdef Py_ssize_t item = cnp.PyArray_ITEMSIZE(x), oitem = cnp.PyArray_ITEMSIZE(out)
    cdef bint wide = oitem == 8
    if not cnp.PyArray_ISINTEGER(x) or not cnp.PyArray_ISSIGNED(out) \
            or not cnp.PyArray_ISNOTSWAPPED(x) or not cnp.PyArray_ISNOTSWAPPED(out) \
            or not cnp.PyArray_ISALIGNED(x) or not cnp.PyArray_IS_C_CONTIGUOUS(out) \
            or not cnp.PyArray_ISWRITEABLE(out) or nthreads < 1 or lo > hi \
            or cnp.PyArray_SIZE(out) != cnp.PyArray_SIZE(x) \
            or (not wide and (oitem != item or not cnp.PyArray_ISSIGNED(x))):
        raise Unsupported("clip_shift: arrays the kernel does not serve")
    top = (<object>1 << (8 * oitem - 1)) - 1  # (Python ints: the sums cannot overflow here)
    if <object>lo + <object>shift < -top - 1 or <object>hi + <object>shift > top:
        raise Unsupported("clip_shift: shifted bounds outside the output's type")
    if cnp.PyArray_SIZE(x) == 0:
        return
    if bounds_meeting(out, (x,)):
        raise Unsupported("clip_shift: the output meets the input")
    # (rows, cols) at element strides: the last axis longer than 1, and the ones before it
    # collapsed into one
    cdef int ndim = cnp.PyArray_NDIM(x), k
    cdef const Py_ssize_t *shape = <const Py_ssize_t *>cnp.PyArray_DIMS(x)
    cdef const Py_ssize_t *strides = <const Py_ssize_t *>cnp.PyArray_STRIDES(x)
    cdef Py_ssize_t rows = 1, cols = 1, rs = 0, cs = item
    if cnp.PyArray_IS_C_CONTIGUOUS(x):
        cols = cnp.PyArray_SIZE(x)
    else:
        for k in range(ndim - 1, -1, -1):
            if shape[k] == 1:
                continue
            if cols == 1:
                cols, cs = shape[k], strides[k]
            elif rows == 1:
                rows, rs = shape[k], strides[k]
            elif strides[k] == rs * rows:
                rows *= shape[k]
            else:
                raise Unsupported("clip_shift: leading axes that do not collapse into one")
    if rs % item or cs % item:
        raise Unsupported("clip_shift: strides not whole elements")
    cdef ClipJob job
    job.x = <const char *>cnp.PyArray_DATA(x)
    job.out = <char *>cnp.PyArray_DATA(out)
    job.rows, job.cols, job.rs, job.cs = rows, cols, rs // item, cs // item
    job.lo, job.hi, job.shift, job.stream = lo, hi, shift, stream
    cdef bint signed = cnp.PyArray_ISSIGNED(x)
    cdef bint ok
    with nogil:
        ok = _run_clip(signed, item, wide, job, nthreads)
    if not ok:
        raise Unsupported("clip_shift: an integer type the kernel does not have")
