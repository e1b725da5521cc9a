# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False
"""Compiled CPU kernels of arrpos (private; called only by ``arrpos._backends._numpy``).

Flat functions over typed memoryviews: the caller allocates outputs and passes plain arrays.
Every function checks shapes before releasing the GIL, so a wrong call raises ValueError
instead of touching memory it does not own.
"""
from cython.parallel cimport prange, threadid

ctypedef fused floating:
    float
    double

cdef extern from "arrpos_omp.h":
    int arrpos_have_openmp() noexcept nogil
    int arrpos_max_threads() noexcept nogil

cdef extern from "stream.h":
    void arrpos_stream_f32(float *dst, const float *src, Py_ssize_t n) noexcept nogil
    void arrpos_stream_f64(double *dst, const double *src, Py_ssize_t n) noexcept nogil
    void arrpos_stream_fence() noexcept nogil

cdef extern from "sinusoid.h":
    void arrpos_sin_row_f32(float *out, const double *qc, const double *qs, const double *rc,
                            const double *rs, Py_ssize_t nf, int layout) noexcept nogil
    void arrpos_sin_row_f64(double *out, const double *qc, const double *qs, const double *rc,
                            const double *rs, Py_ssize_t nf, int layout) noexcept nogil
    void arrpos_cmul_inplace(double *c, double *s, const double *mc, const double *ms,
                             Py_ssize_t nf) noexcept nogil
    void arrpos_block_anchor(double *c, double *s, long long q, const double *pc,
                             const double *ps, Py_ssize_t npow, Py_ssize_t nf) noexcept nogil
    void arrpos_frac_rot(double *c, double *s, double f, const double *w_hi,
                         const double *w_lo, Py_ssize_t nf) noexcept nogil

cdef extern from "rope.h":
    void arrpos_rope_rows_f32(float *out, Py_ssize_t ost, const float *x, Py_ssize_t xst,
                              const float *c, Py_ssize_t cst, const float *s, Py_ssize_t sst,
                              Py_ssize_t nrows, Py_ssize_t R, Py_ssize_t D, int interleaved,
                              float sgn, float *tmp) noexcept nogil
    void arrpos_rope_rows_f64(double *out, Py_ssize_t ost, const double *x, Py_ssize_t xst,
                              const double *c, Py_ssize_t cst, const double *s, Py_ssize_t sst,
                              Py_ssize_t nrows, Py_ssize_t R, Py_ssize_t D, int interleaved,
                              double sgn, double *tmp) noexcept nogil
    void arrpos_rope_rows_inplace_f32(float *x, Py_ssize_t xst, const float *c, Py_ssize_t cst,
                                      const float *s, Py_ssize_t sst, Py_ssize_t nrows,
                                      Py_ssize_t R, int interleaved, float sgn) noexcept nogil
    void arrpos_rope_rows_inplace_f64(double *x, Py_ssize_t xst, const double *c, Py_ssize_t cst,
                                      const double *s, Py_ssize_t sst, Py_ssize_t nrows,
                                      Py_ssize_t R, int interleaved, double sgn) noexcept nogil
    void arrpos_rope_table_row_f32(float *cos_out, float *sin_out, const double *qc,
                                   const double *qs, const double *rc, const double *rs,
                                   Py_ssize_t nf, int interleaved, double scale) noexcept nogil
    void arrpos_rope_table_row_f64(double *cos_out, double *sin_out, const double *qc,
                                   const double *qs, const double *rc, const double *rs,
                                   Py_ssize_t nf, int interleaved, double scale) noexcept nogil

cdef extern from "rope_simd.h":
    void arrpos_rope_rows_stream_f32(float *out, Py_ssize_t ost, const float *x, Py_ssize_t xst,
                                     const float *c, Py_ssize_t cst, const float *s,
                                     Py_ssize_t sst, Py_ssize_t nrows, Py_ssize_t R,
                                     Py_ssize_t D, int interleaved, float sgn,
                                     float *tmp) noexcept nogil
    void arrpos_rope_rows_stream_f64(double *out, Py_ssize_t ost, const double *x,
                                     Py_ssize_t xst, const double *c, Py_ssize_t cst,
                                     const double *s, Py_ssize_t sst, Py_ssize_t nrows,
                                     Py_ssize_t R, Py_ssize_t D, int interleaved, double sgn,
                                     double *tmp) noexcept nogil

cdef extern from "math.h" nogil:
    double floor(double)



def have_openmp():
    """Whether the extension was built with OpenMP."""
    return bool(arrpos_have_openmp())


def max_threads():
    """OpenMP's thread count for a parallel region (respects OMP_NUM_THREADS); 1 without OpenMP."""
    return arrpos_max_threads()


# ---- exact rotations of a position: rot(p w) = rot(q B w) * rot(r w) [* rot(f w)] -----------

cdef struct Rotations:
    const double *rc      # (B, nf) rot(r w), r < B
    const double *rs
    const double *pc      # (npow, nf) rot(2**k B w)
    const double *ps
    const double *w_hi
    const double *w_lo
    Py_ssize_t block
    Py_ssize_t npow
    Py_ssize_t nf

cdef struct RowState:      # per thread: the current block rotation and a scratch row
    double *qc
    double *qs
    double *fc
    double *fs
    long long cur_q
    int have_q


cdef inline void _rotation(RowState *st, const Rotations *t, double p, const double **rrc,
                           const double **rrs) noexcept nogil:
    """Point (rrc, rrs) at rot(p w) / rot(q B w): the caller multiplies by (st.qc, st.qs)."""
    cdef double fl = floor(p)
    cdef double frac = p - fl
    cdef long long q = <long long>floor(fl / t.block)
    cdef Py_ssize_t r = <Py_ssize_t>(fl - <double>q * t.block)
    if not st.have_q or q != st.cur_q:
        # exactly from q's bits, never stepped from the previous block: a row then depends on
        # its position alone, not on where a thread's (or a Dask chunk's) rows begin
        arrpos_block_anchor(st.qc, st.qs, q, t.pc, t.ps, t.npow, t.nf)
        st.cur_q = q
        st.have_q = 1
    rrc[0] = t.rc + r * t.nf
    rrs[0] = t.rs + r * t.nf
    if frac != 0.0:
        arrpos_frac_rot(st.fc, st.fs, frac, t.w_hi, t.w_lo, t.nf)
        arrpos_cmul_inplace(st.fc, st.fs, rrc[0], rrs[0], t.nf)
        rrc[0] = st.fc
        rrs[0] = st.fs


cdef inline void _init_state(RowState *st, double *work, Py_ssize_t nf) noexcept nogil:
    st.qc = work
    st.qs = work + nf
    st.fc = work + 2 * nf
    st.fs = work + 3 * nf
    st.have_q = 0
    st.cur_q = 0


cdef void _check_rotations(rc, rs, pc, ps, w_hi, w_lo) except *:
    cdef Py_ssize_t block = rc.shape[0], nf = rc.shape[1]
    if tuple(rs.shape[:2]) != (block, nf) or block < 1 or (block & (block - 1)):
        raise ValueError("rc and rs must both be (B, nf) with B a power of two")
    if pc.shape[1] != nf or tuple(ps.shape[:2]) != tuple(pc.shape[:2]) or pc.shape[0] < 1:
        raise ValueError("pc and ps must both be (npow, nf) with npow >= 1")
    if w_hi.shape[0] != nf or w_lo.shape[0] != nf:
        raise ValueError("w_hi and w_lo must have nf elements")


cdef inline Rotations _rotations(const double[:, ::1] rc, const double[:, ::1] rs,
                                 const double[:, ::1] pc, const double[:, ::1] ps,
                                 const double[::1] w_hi, const double[::1] w_lo) noexcept:
    cdef Rotations t
    t.rc = &rc[0, 0]
    t.rs = &rs[0, 0]
    t.pc = &pc[0, 0]
    t.ps = &ps[0, 0]
    t.w_hi = &w_hi[0]
    t.w_lo = &w_lo[0]
    t.block = rc.shape[0]
    t.npow = pc.shape[0]
    t.nf = rc.shape[1]
    return t


# ---- sinusoid tables ------------------------------------------------------------------------

cdef void _sin_rows(Py_ssize_t j0, Py_ssize_t j1, const double *pos, const Rotations *t,
                    double *work, floating *out, Py_ssize_t ncols, int layout,
                    bint stream) noexcept nogil:
    cdef RowState st
    cdef const double *rrc
    cdef const double *rrs
    cdef Py_ssize_t j, nf = t.nf
    cdef floating *tmp = <floating *>(work + 4 * nf)
    cdef floating *dst
    _init_state(&st, work, nf)
    for j in range(j0, j1):
        _rotation(&st, t, pos[j], &rrc, &rrs)
        dst = tmp if stream else out + j * ncols
        if floating is float:
            arrpos_sin_row_f32(dst, st.qc, st.qs, rrc, rrs, nf, layout)
            if stream:
                arrpos_stream_f32(out + j * ncols, tmp, 2 * nf)
        else:
            arrpos_sin_row_f64(dst, st.qc, st.qs, rrc, rrs, nf, layout)
            if stream:
                arrpos_stream_f64(out + j * ncols, tmp, 2 * nf)
    if stream:
        arrpos_stream_fence()


def sinusoid_table(const double[::1] pos, const double[:, ::1] rc, const double[:, ::1] rs,
                   const double[:, ::1] pc, const double[:, ::1] ps, const double[::1] w_hi,
                   const double[::1] w_lo, double[:, ::1] work, floating[:, ::1] out,
                   int layout, int nthreads, bint stream=False):
    """Write the sinusoid rows of ``pos`` into ``out[:, :2 * nf]``.

    ``rc, rs``: ``(B, nf)`` exact rot(r w), r < B (B a power of two); ``pc, ps``: ``(npow, nf)``
    exact rot(2**k B w); ``work``: ``(nthreads, >= 4 nf + ncols)`` scratch; ``|pos| < 2**53``.
    """
    cdef Py_ssize_t n = pos.shape[0], nf = rc.shape[1], ncols = out.shape[1]
    cdef int t
    cdef Rotations rot
    _check_rotations(rc, rs, pc, ps, w_hi, w_lo)
    if out.shape[0] != n or ncols < 2 * nf:
        raise ValueError(f"out must be ({n}, >= {2 * nf}), got ({out.shape[0]}, {ncols})")
    if layout < 0 or layout > 2:
        raise ValueError(f"layout code must be 0, 1 or 2, got {layout}")
    if nthreads < 1 or work.shape[0] < nthreads or work.shape[1] < 4 * nf + ncols:
        raise ValueError("work must be (>= nthreads, >= 4 nf + ncols) with nthreads >= 1")
    if n == 0 or nf == 0:
        return
    rot = _rotations(rc, rs, pc, ps, w_hi, w_lo)
    if nthreads == 1:
        with nogil:
            _sin_rows(0, n, &pos[0], &rot, &work[0, 0], &out[0, 0], ncols, layout, stream)
        return
    for t in prange(nthreads, nogil=True, num_threads=nthreads, schedule="static"):
        _sin_rows(t * n // nthreads, (t + 1) * n // nthreads, &pos[0], &rot, &work[t, 0],
                  &out[0, 0], ncols, layout, stream)


# ---- RoPE cos/sin tables --------------------------------------------------------------------

cdef void _rope_table_rows(Py_ssize_t j0, Py_ssize_t j1, const double *pos, const Rotations *t,
                           double *work, floating *cos_out, floating *sin_out, int interleaved,
                           double scale, bint stream) noexcept nogil:
    cdef RowState st
    cdef const double *rrc
    cdef const double *rrs
    cdef Py_ssize_t j, nf = t.nf, w = 2 * t.nf
    cdef floating *tc = <floating *>(work + 4 * nf)
    cdef floating *ts = tc + w
    _init_state(&st, work, nf)
    for j in range(j0, j1):
        _rotation(&st, t, pos[j], &rrc, &rrs)
        if floating is float:
            if stream:
                arrpos_rope_table_row_f32(tc, ts, st.qc, st.qs, rrc, rrs, nf, interleaved, scale)
                arrpos_stream_f32(cos_out + j * w, tc, w)
                arrpos_stream_f32(sin_out + j * w, ts, w)
            else:
                arrpos_rope_table_row_f32(cos_out + j * w, sin_out + j * w, st.qc, st.qs, rrc,
                                          rrs, nf, interleaved, scale)
        else:
            if stream:
                arrpos_rope_table_row_f64(tc, ts, st.qc, st.qs, rrc, rrs, nf, interleaved, scale)
                arrpos_stream_f64(cos_out + j * w, tc, w)
                arrpos_stream_f64(sin_out + j * w, ts, w)
            else:
                arrpos_rope_table_row_f64(cos_out + j * w, sin_out + j * w, st.qc, st.qs, rrc,
                                          rrs, nf, interleaved, scale)
    if stream:
        arrpos_stream_fence()


def rope_table(const double[::1] pos, const double[:, ::1] rc, const double[:, ::1] rs,
               const double[:, ::1] pc, const double[:, ::1] ps, const double[::1] w_hi,
               const double[::1] w_lo, double[:, ::1] work, floating[:, ::1] cos_out,
               floating[:, ::1] sin_out, bint interleaved, double scale, int nthreads,
               bint stream=False):
    """Write RoPE cos/sin rows ``(n, 2 nf)`` of ``pos``, times ``scale``; tables as above."""
    cdef Py_ssize_t n = pos.shape[0], nf = rc.shape[1]
    cdef int t
    cdef Rotations rot
    _check_rotations(rc, rs, pc, ps, w_hi, w_lo)
    if cos_out.shape[0] != n or cos_out.shape[1] != 2 * nf:
        raise ValueError(f"cos_out must be ({n}, {2 * nf}), got ({cos_out.shape[0]}, "
                         f"{cos_out.shape[1]})")
    if sin_out.shape[0] != n or sin_out.shape[1] != 2 * nf:
        raise ValueError(f"sin_out must be ({n}, {2 * nf}), got ({sin_out.shape[0]}, "
                         f"{sin_out.shape[1]})")
    if nthreads < 1 or work.shape[0] < nthreads or work.shape[1] < 8 * nf:
        raise ValueError("work must be (>= nthreads, >= 8 nf) with nthreads >= 1")
    if n == 0 or nf == 0:
        return
    rot = _rotations(rc, rs, pc, ps, w_hi, w_lo)
    if nthreads == 1:
        with nogil:
            _rope_table_rows(0, n, &pos[0], &rot, &work[0, 0], &cos_out[0, 0], &sin_out[0, 0],
                             interleaved, scale, stream)
        return
    for t in prange(nthreads, nogil=True, num_threads=nthreads, schedule="static"):
        _rope_table_rows(t * n // nthreads, (t + 1) * n // nthreads, &pos[0], &rot, &work[t, 0],
                         &cos_out[0, 0], &sin_out[0, 0], interleaved, scale, stream)


# ---- RoPE application -------------------------------------------------------------------------

cdef void _apply_rows(Py_ssize_t i0, Py_ssize_t i1, Py_ssize_t B, Py_ssize_t C,
                      const floating *x, const Py_ssize_t *xs, const floating *c,
                      const floating *s, const Py_ssize_t *cs, const Py_ssize_t *ss,
                      floating *out, const Py_ssize_t *os, floating *tmp, Py_ssize_t R,
                      Py_ssize_t D, int interleaved, floating sgn, bint inplace,
                      bint stream) noexcept nogil:
    """Rows (a, b, 0..C-1) for a*B + b in [i0, i1): the C rows go to the C kernel in one call."""
    cdef Py_ssize_t ab, a, b
    cdef const floating *cr
    cdef const floating *sr
    cdef floating *orow
    for ab in range(i0, i1):
        a = ab // B
        b = ab - a * B
        cr = c + a * cs[0] + b * cs[1]
        sr = s + a * ss[0] + b * ss[1]
        orow = out + a * os[0] + b * os[1]
        if inplace:
            if floating is float:
                arrpos_rope_rows_inplace_f32(orow, os[2], cr, cs[2], sr, ss[2], C, R,
                                             interleaved, sgn)
            else:
                arrpos_rope_rows_inplace_f64(orow, os[2], cr, cs[2], sr, ss[2], C, R,
                                             interleaved, sgn)
        elif stream:  # results leave through streaming stores (SIMD registers or scratch row)
            if floating is float:
                arrpos_rope_rows_stream_f32(orow, os[2], x + a * xs[0] + b * xs[1], xs[2], cr,
                                            cs[2], sr, ss[2], C, R, D, interleaved, sgn, tmp)
            else:
                arrpos_rope_rows_stream_f64(orow, os[2], x + a * xs[0] + b * xs[1], xs[2], cr,
                                            cs[2], sr, ss[2], C, R, D, interleaved, sgn, tmp)
        elif floating is float:
            arrpos_rope_rows_f32(orow, os[2], x + a * xs[0] + b * xs[1], xs[2], cr, cs[2], sr,
                                 ss[2], C, R, D, interleaved, sgn, NULL)
        else:
            arrpos_rope_rows_f64(orow, os[2], x + a * xs[0] + b * xs[1], xs[2], cr, cs[2], sr,
                                 ss[2], C, R, D, interleaved, sgn, NULL)
    if stream:
        arrpos_stream_fence()


cdef void _check_shape4(str name, Py_ssize_t *shape, Py_ssize_t a, Py_ssize_t b, Py_ssize_t c,
                        Py_ssize_t d) except *:
    if shape[0] != a or shape[1] != b or shape[2] != c or shape[3] != d:
        raise ValueError(f"{name} must have shape {(a, b, c, d)}, got "
                         f"{(shape[0], shape[1], shape[2], shape[3])}")


cdef void _check_table4(str name, Py_ssize_t *shape, Py_ssize_t a, Py_ssize_t b, Py_ssize_t c,
                        Py_ssize_t r) except *:
    if (shape[0] != a and shape[0] != 1) or (shape[1] != b and shape[1] != 1) \
            or (shape[2] != c and shape[2] != 1) or shape[3] != r:
        raise ValueError(f"{name} must have shape {(a, b, c, r)} or 1 on broadcast axes, got "
                         f"{(shape[0], shape[1], shape[2], shape[3])}")


def apply_rope(const floating[:, :, :, :] x, const floating[:, :, :, :] cos,
               const floating[:, :, :, :] sin, floating[:, :, :, :] out,
               work, bint interleaved, bint inverse, bint inplace,
               int nthreads, bint stream=False):
    """Rotate the first ``R = cos.shape[3]`` features of 4-d ``x`` into ``out``.

    ``cos``/``sin`` have x's leading shape or 1 on an axis (read with stride 0: broadcast); every
    last axis must be contiguous (checked), the other axes may have any strides. ``inplace``: ``out`` is ``x`` (only ``out`` is written). ``work``:
    ``(>= nthreads, >= D)`` scratch for streaming stores.
    """
    cdef Py_ssize_t A = x.shape[0], B = x.shape[1], C = x.shape[2], D = x.shape[3]
    cdef Py_ssize_t R = cos.shape[3]
    cdef Py_ssize_t xs[3]
    cdef Py_ssize_t cs[3]
    cdef Py_ssize_t ss[3]
    cdef Py_ssize_t os[3]
    cdef Py_ssize_t item = sizeof(floating), i, n
    cdef int t
    cdef floating sgn = -1 if inverse else 1
    if R < 2 or R % 2 or R > D:
        raise ValueError(f"the rotary width cos.shape[-1] must be even, >= 2 and <= {D}, got {R}")
    _check_table4("cos", cos.shape, A, B, C, R)
    _check_table4("sin", sin.shape, A, B, C, R)
    _check_shape4("out", out.shape, A, B, C, D)
    cdef floating[:, ::1] scratch
    cdef floating *tmp0 = NULL
    cdef Py_ssize_t tmp_stride = 0
    if nthreads < 1:
        raise ValueError(f"nthreads must be >= 1, got {nthreads}")
    if stream:  # only streaming uses the scratch rows: decode-sized calls skip the view
        scratch = work
        if scratch.shape[0] < nthreads or scratch.shape[1] < D:
            raise ValueError("work must be (>= nthreads, >= D) when streaming")
        tmp0 = &scratch[0, 0]
        tmp_stride = scratch.shape[1]
    if (x.strides[3] != item and D > 1) or (cos.strides[3] != item and R > 1) \
            or (sin.strides[3] != item and R > 1) or (out.strides[3] != item and D > 1):
        raise ValueError("the last axis of x, cos, sin and out must be contiguous")
    for i in range(3):
        if x.strides[i] % item or cos.strides[i] % item or sin.strides[i] % item \
                or out.strides[i] % item:
            raise ValueError("strides must be multiples of the item size")
        xs[i] = x.strides[i] // item
        cs[i] = 0 if cos.shape[i] == 1 else cos.strides[i] // item  # size 1: broadcast
        ss[i] = 0 if sin.shape[i] == 1 else sin.strides[i] // item
        os[i] = out.strides[i] // item
    n = A * B
    if n == 0 or C == 0 or D == 0:
        return
    if inplace and &out[0, 0, 0, 0] != &x[0, 0, 0, 0]:
        raise ValueError("inplace requires out to be x")
    if nthreads == 1 or n < nthreads:
        with nogil:
            _apply_rows(0, n, B, C, &x[0, 0, 0, 0], xs, &cos[0, 0, 0, 0], &sin[0, 0, 0, 0], cs,
                        ss, &out[0, 0, 0, 0], os, tmp0, R, D, interleaved, sgn, inplace,
                        stream)
        return
    for t in prange(nthreads, nogil=True, num_threads=nthreads, schedule="static"):
        _apply_rows(t * n // nthreads, (t + 1) * n // nthreads, B, C, &x[0, 0, 0, 0], xs,
                    &cos[0, 0, 0, 0], &sin[0, 0, 0, 0], cs, ss, &out[0, 0, 0, 0], os,
                    tmp0 + t * tmp_stride if stream else NULL, R, D, interleaved, sgn, inplace,
                    stream)
