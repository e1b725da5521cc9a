# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False
"""Compiled CPU kernels of arrpos (private; called only by ``arrpos._backends._numpy``).

Flat functions over typed memoryviews: the caller allocates outputs and passes plain arrays.
Every function checks shapes before releasing the GIL, so a wrong call raises ValueError
instead of touching memory it does not own.
"""
from cython.parallel cimport prange

ctypedef fused floating:
    float
    double

cdef extern from "arrpos_omp.h":
    int arrpos_have_openmp() noexcept nogil
    int arrpos_max_threads() noexcept nogil

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

cdef extern from "math.h" nogil:
    double floor(double)

# Consecutive blocks advance the block rotation by one multiply; re-anchor exactly after this many
# so rounding cannot accumulate past ~1e-14.
cdef int MAX_STEPS = 64


def have_openmp():
    """Whether the extension was built with OpenMP."""
    return bool(arrpos_have_openmp())


def max_threads():
    """OpenMP's thread count for a parallel region (respects OMP_NUM_THREADS); 1 without OpenMP."""
    return arrpos_max_threads()


cdef void _sin_rows(Py_ssize_t j0, Py_ssize_t j1, const double *pos, const double *rc,
                    const double *rs, Py_ssize_t block, const double *pc, const double *ps,
                    Py_ssize_t npow, const double *w_hi, const double *w_lo, double *work,
                    floating *out, Py_ssize_t ncols, Py_ssize_t nf, int layout) noexcept nogil:
    cdef double *qc = work
    cdef double *qs = work + nf
    cdef double *fc = work + 2 * nf
    cdef double *fs = work + 3 * nf
    cdef long long cur_q = 0, q
    cdef bint have_q = False
    cdef int steps = 0
    cdef Py_ssize_t j, r
    cdef double p, fl, frac
    cdef const double *rrc
    cdef const double *rrs
    for j in range(j0, j1):
        p = pos[j]
        fl = floor(p)
        frac = p - fl
        q = <long long>floor(fl / block)
        r = <Py_ssize_t>(fl - <double>q * block)
        if not have_q or q != cur_q:
            if have_q and q == cur_q + 1 and steps < MAX_STEPS:
                arrpos_cmul_inplace(qc, qs, pc, ps, nf)  # pc[0] is rot(B * w)
                steps += 1
            else:
                arrpos_block_anchor(qc, qs, q, pc, ps, npow, nf)
                steps = 0
            cur_q = q
            have_q = True
        rrc = rc + r * nf
        rrs = rs + r * nf
        if frac != 0.0:
            arrpos_frac_rot(fc, fs, frac, w_hi, w_lo, nf)
            arrpos_cmul_inplace(fc, fs, rrc, rrs, nf)
            rrc = fc
            rrs = fs
        if floating is float:
            arrpos_sin_row_f32(out + j * ncols, qc, qs, rrc, rrs, nf, layout)
        else:
            arrpos_sin_row_f64(out + j * ncols, qc, qs, rrc, rrs, nf, layout)


def sinusoid_table(const double[::1] pos, const double[:, ::1] rc, const double[:, ::1] rs,
                   const double[:, ::1] pc, const double[:, ::1] ps, const double[::1] w_hi,
                   const double[::1] w_lo, double[:, ::1] work, floating[:, ::1] out,
                   int layout, int nthreads):
    """Write the sinusoid rows of ``pos`` into ``out[:, :2 * nf]``.

    ``rc, rs``: ``(B, nf)`` exact rot(r w), r < B (B a power of two); ``pc, ps``: ``(npow, nf)``
    exact rot(2**k B w); ``work``: ``(nthreads, 4 * nf)`` scratch; ``|pos| < 2**53``.
    """
    cdef Py_ssize_t n = pos.shape[0], block = rc.shape[0], nf = rc.shape[1]
    cdef Py_ssize_t npow = pc.shape[0], ncols = out.shape[1]
    cdef int t
    if rs.shape[0] != block or rs.shape[1] != nf or block < 1 or (block & (block - 1)):
        raise ValueError("rc and rs must both be (B, nf) with B a power of two")
    if pc.shape[1] != nf or ps.shape[0] != npow or ps.shape[1] != nf or npow < 1:
        raise ValueError("pc and ps must both be (npow, nf) with npow >= 1")
    if w_hi.shape[0] != nf or w_lo.shape[0] != nf:
        raise ValueError("w_hi and w_lo must have nf elements")
    if out.shape[0] != n or ncols < 2 * nf:
        raise ValueError(f"out must be ({n}, >= {2 * nf}), got ({out.shape[0]}, {ncols})")
    if layout < 0 or layout > 2:
        raise ValueError(f"layout code must be 0, 1 or 2, got {layout}")
    if nthreads < 1 or work.shape[0] < nthreads or work.shape[1] < 4 * nf:
        raise ValueError("work must be (>= nthreads, >= 4 * nf) with nthreads >= 1")
    if n == 0 or nf == 0:
        return
    if nthreads == 1:
        with nogil:
            _sin_rows(0, n, &pos[0], &rc[0, 0], &rs[0, 0], block, &pc[0, 0], &ps[0, 0], npow,
                      &w_hi[0], &w_lo[0], &work[0, 0], &out[0, 0], ncols, nf, layout)
        return
    for t in prange(nthreads, nogil=True, num_threads=nthreads, schedule="static"):
        _sin_rows(t * n // nthreads, (t + 1) * n // nthreads, &pos[0], &rc[0, 0], &rs[0, 0],
                  block, &pc[0, 0], &ps[0, 0], npow, &w_hi[0], &w_lo[0], &work[t, 0],
                  &out[0, 0], ncols, nf, layout)
