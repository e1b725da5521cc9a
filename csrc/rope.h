/* RoPE rows.
 *
 * apply: one row of x (D features, the first R rotated) against one row of cos/sin (R values).
 *   half:        out[i]   = x[i]   c[i]   - x[i+h] s[i]     (h = R/2; rotate_half)
 *                out[i+h] = x[i+h] c[i+h] + x[i]   s[i+h]
 *   interleaved: out[2i]   = x[2i]   c[2i]   - x[2i+1] s[2i]
 *                out[2i+1] = x[2i+1] c[2i+1] + x[2i]   s[2i+1]
 *   sgn = -1 rotates back (the transpose). Both halves of cos/sin are read, so any table works,
 *   not only cat(f, f).
 * table: one row of cos and sin from the block rotation q and the row rotation r, in float64,
 *   scaled by the attention factor and laid out for the layout (half: [f | f], interleaved:
 *   f0 f0 f1 f1 ...).
 */
#ifndef ARRPOS_ROPE_H
#define ARRPOS_ROPE_H
#include <stddef.h>
#include "sinusoid.h"
#include "stream.h"

/* One row, out of place; restrict parameters let the compiler vectorise without alias checks.
 * Inlined into the per-target clones of the row loops below. */
#define ARRPOS_DEFINE_APPLY(SUFFIX, T)                                                         \
static inline void arrpos_half_##SUFFIX(T *restrict o, const T *restrict x,                    \
                                        const T *restrict c, const T *restrict s,              \
                                        ptrdiff_t h, T sgn)                                    \
{                                                                                              \
    for (ptrdiff_t i = 0; i < h; i++) {                                                        \
        T x1 = x[i], x2 = x[i + h];                                                            \
        o[i] = x1 * c[i] - x2 * (sgn * s[i]);                                                  \
        o[i + h] = x2 * c[i + h] + x1 * (sgn * s[i + h]);                                      \
    }                                                                                          \
}                                                                                              \
static inline void arrpos_pairs_##SUFFIX(T *restrict o, const T *restrict x,                   \
                                         const T *restrict c, const T *restrict s,             \
                                         ptrdiff_t R, T sgn)                                   \
{                                                                                              \
    for (ptrdiff_t i = 0; i < R; i += 2) {                                                     \
        T x1 = x[i], x2 = x[i + 1];                                                            \
        o[i] = x1 * c[i] - x2 * (sgn * s[i]);                                                  \
        o[i + 1] = x2 * c[i + 1] + x1 * (sgn * s[i + 1]);                                      \
    }                                                                                          \
}                                                                                              \
static inline void arrpos_copy_##SUFFIX(T *restrict o, const T *restrict x, ptrdiff_t n)       \
{                                                                                              \
    for (ptrdiff_t i = 0; i < n; i++)                                                          \
        o[i] = x[i];                                                                           \
}                                                                                              \
/* In place: lo = x[:h], hi = x[h:R] do not overlap, so restrict still holds. */               \
static inline void arrpos_half_inplace_##SUFFIX(T *restrict lo, T *restrict hi,                \
                                                const T *restrict c, const T *restrict s,      \
                                                ptrdiff_t h, T sgn)                            \
{                                                                                              \
    for (ptrdiff_t i = 0; i < h; i++) {                                                        \
        T x1 = lo[i], x2 = hi[i];                                                              \
        lo[i] = x1 * c[i] - x2 * (sgn * s[i]);                                                 \
        hi[i] = x2 * c[i + h] + x1 * (sgn * s[i + h]);                                         \
    }                                                                                          \
}                                                                                              \
static inline void arrpos_pairs_inplace_##SUFFIX(T *restrict x, const T *restrict c,           \
                                                 const T *restrict s, ptrdiff_t R, T sgn)      \
{                                                                                              \
    for (ptrdiff_t i = 0; i < R; i += 2) {                                                     \
        T x1 = x[i], x2 = x[i + 1];                                                            \
        x[i] = x1 * c[i] - x2 * (sgn * s[i]);                                                  \
        x[i + 1] = x2 * c[i + 1] + x1 * (sgn * s[i + 1]);                                      \
    }                                                                                          \
}                                                                                              \
/* nrows rows: row k of out / x / cos / sin starts k * (ost / xst / cst / sst) elements in     \
 * (cst = sst = 0 when one cos row serves every head). tmp != NULL: rows are computed there   \
 * and leave through streaming stores. */                                                    \
ARRPOS_CLONES static void arrpos_rope_rows_##SUFFIX(                                           \
    T *out, ptrdiff_t ost, const T *x, ptrdiff_t xst, const T *c, ptrdiff_t cst,              \
    const T *s, ptrdiff_t sst, ptrdiff_t nrows, ptrdiff_t R, ptrdiff_t D, int interleaved,    \
    T sgn, T *tmp)                                                                             \
{                                                                                              \
    for (ptrdiff_t k = 0; k < nrows; k++) {                                                    \
        const T *xr = x + k * xst;                                                             \
        T *o = tmp ? tmp : out + k * ost;                                                      \
        if (interleaved)                                                                       \
            arrpos_pairs_##SUFFIX(o, xr, c + k * cst, s + k * sst, R, sgn);                    \
        else                                                                                   \
            arrpos_half_##SUFFIX(o, xr, c + k * cst, s + k * sst, R / 2, sgn);                 \
        if (D > R)                                                                             \
            arrpos_copy_##SUFFIX(o + R, xr + R, D - R);                                        \
        if (tmp)                                                                               \
            arrpos_stream_##SUFFIX(out + k * ost, tmp, D);                                     \
    }                                                                                          \
}                                                                                              \
ARRPOS_CLONES static void arrpos_rope_rows_inplace_##SUFFIX(                                   \
    T *x, ptrdiff_t xst, const T *c, ptrdiff_t cst, const T *s, ptrdiff_t sst,                 \
    ptrdiff_t nrows, ptrdiff_t R, int interleaved, T sgn)                                      \
{                                                                                              \
    for (ptrdiff_t k = 0; k < nrows; k++) {                                                    \
        T *xr = x + k * xst;                                                                   \
        if (interleaved)                                                                       \
            arrpos_pairs_inplace_##SUFFIX(xr, c + k * cst, s + k * sst, R, sgn);               \
        else                                                                                   \
            arrpos_half_inplace_##SUFFIX(xr, xr + R / 2, c + k * cst, s + k * sst, R / 2,      \
                                         sgn);                                                 \
    }                                                                                          \
}

ARRPOS_DEFINE_APPLY(f32, float)
ARRPOS_DEFINE_APPLY(f64, double)

#define ARRPOS_DEFINE_TABLE(SUFFIX, T)                                                         \
ARRPOS_CLONES static void arrpos_rope_table_row_##SUFFIX(                                      \
    T *restrict cos_out, T *restrict sin_out, const double *restrict qc,                       \
    const double *restrict qs, const double *restrict rc, const double *restrict rs,           \
    ptrdiff_t nf, int interleaved, double scale)                                               \
{                                                                                              \
    ptrdiff_t i;                                                                               \
    if (!interleaved) {                                                                        \
        for (i = 0; i < nf; i++) {                                                             \
            T c = (T)(scale * (qc[i] * rc[i] - qs[i] * rs[i]));                                \
            T s = (T)(scale * (qs[i] * rc[i] + qc[i] * rs[i]));                                \
            cos_out[i] = c;                                                                    \
            cos_out[nf + i] = c;                                                               \
            sin_out[i] = s;                                                                    \
            sin_out[nf + i] = s;                                                               \
        }                                                                                      \
    } else {                                                                                   \
        for (i = 0; i < nf; i++) {                                                             \
            T c = (T)(scale * (qc[i] * rc[i] - qs[i] * rs[i]));                                \
            T s = (T)(scale * (qs[i] * rc[i] + qc[i] * rs[i]));                                \
            cos_out[2 * i] = c;                                                                \
            cos_out[2 * i + 1] = c;                                                            \
            sin_out[2 * i] = s;                                                                \
            sin_out[2 * i + 1] = s;                                                            \
        }                                                                                      \
    }                                                                                          \
}

ARRPOS_DEFINE_TABLE(f32, float)
ARRPOS_DEFINE_TABLE(f64, double)
#endif
