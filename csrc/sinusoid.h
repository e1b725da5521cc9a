/* Sinusoid rows as one complex multiply per element.
 *
 * A row at integer position p = q*B + r is rot(q*B*w) * rot(r*w): the first factor is one row
 * per block (kept in a small buffer), the second a cached table of B exact rows. Both are
 * float64; the product is rounded once to the output type.
 *
 * Layouts: 0 interleaved (s0 c0 s1 c1 ...), 1 split ([sin | cos]), 2 split with cos first.
 */
#ifndef ARRPOS_SINUSOID_H
#define ARRPOS_SINUSOID_H
#include <stddef.h>
#include <math.h>

/* Runtime dispatch to wider vector units without -march=native (which would break portable
 * wheels): GCC/clang emit one clone per target and pick at load time through an ifunc. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__) && !defined(ARRPOS_NO_CLONES)
#define ARRPOS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ARRPOS_CLONES
#endif

#define ARRPOS_DEFINE_ROW(NAME, T)                                                             \
ARRPOS_CLONES static void NAME(T *restrict out, const double *restrict qc, const double *restrict qs,        \
                 const double *restrict rc, const double *restrict rs, ptrdiff_t nf,           \
                 int layout)                                                                   \
{                                                                                              \
    ptrdiff_t i;                                                                               \
    if (layout == 0) {                                                                         \
        for (i = 0; i < nf; i++) {                                                             \
            double c = qc[i] * rc[i] - qs[i] * rs[i];                                          \
            double s = qs[i] * rc[i] + qc[i] * rs[i];                                          \
            out[2 * i] = (T)s;                                                                 \
            out[2 * i + 1] = (T)c;                                                             \
        }                                                                                      \
    } else {                                                                                   \
        T *restrict first = out, *restrict second = out + nf;                                  \
        if (layout == 1) {                                                                     \
            for (i = 0; i < nf; i++) {                                                         \
                first[i] = (T)(qs[i] * rc[i] + qc[i] * rs[i]);                                 \
                second[i] = (T)(qc[i] * rc[i] - qs[i] * rs[i]);                                \
            }                                                                                  \
        } else {                                                                               \
            for (i = 0; i < nf; i++) {                                                         \
                first[i] = (T)(qc[i] * rc[i] - qs[i] * rs[i]);                                 \
                second[i] = (T)(qs[i] * rc[i] + qc[i] * rs[i]);                                \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
}

ARRPOS_DEFINE_ROW(arrpos_sin_row_f32, float)
ARRPOS_DEFINE_ROW(arrpos_sin_row_f64, double)

/* (c, s) <- (c, s) * (mc, ms), element-wise complex multiply in place. */
ARRPOS_CLONES static void arrpos_cmul_inplace(double *restrict c, double *restrict s, const double *restrict mc,
                                const double *restrict ms, ptrdiff_t nf)
{
    for (ptrdiff_t i = 0; i < nf; i++) {
        double nc = c[i] * mc[i] - s[i] * ms[i];
        double ns = s[i] * mc[i] + c[i] * ms[i];
        c[i] = nc;
        s[i] = ns;
    }
}

/* rot(q*B*w) from the table of rot(2**k * B * w): a product over the set bits of |q|. */
static void arrpos_block_anchor(double *restrict c, double *restrict s, long long q,
                                const double *pc, const double *ps, ptrdiff_t npow,
                                ptrdiff_t nf)
{
    unsigned long long m = (unsigned long long)(q < 0 ? -q : q);
    for (ptrdiff_t i = 0; i < nf; i++) {
        c[i] = 1.0;
        s[i] = 0.0;
    }
    for (ptrdiff_t k = 0; k < npow && m; k++, m >>= 1) {
        if (m & 1ULL)
            arrpos_cmul_inplace(c, s, pc + k * nf, ps + k * nf, nf);
    }
    if (q < 0)
        for (ptrdiff_t i = 0; i < nf; i++)
            s[i] = -s[i];
}

/* rot(f*w) for a fractional part |f| < 1, written into (c, s): libm on a small argument. */
static void arrpos_frac_rot(double *restrict c, double *restrict s, double f,
                            const double *restrict w_hi, const double *restrict w_lo, ptrdiff_t nf)
{
    for (ptrdiff_t i = 0; i < nf; i++) {
        double a = f * w_hi[i] + f * w_lo[i];
        c[i] = cos(a);
        s[i] = sin(a);
    }
}
#endif
