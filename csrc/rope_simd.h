/* Out-of-place RoPE rows with explicit AVX-512 / AVX2 code whose results leave the registers
 * through streaming stores: no scratch row, no read-for-ownership of the output. Selected at
 * run time (__builtin_cpu_supports), so the default build stays portable. Used only when the
 * vector width divides the row geometry and the output rows are 16-byte aligned; anything else
 * takes the portable rows in rope.h.
 */
#ifndef ARRPOS_ROPE_SIMD_H
#define ARRPOS_ROPE_SIMD_H
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include "rope.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(ARRPOS_NO_CLONES)
#include <immintrin.h>
#define ARRPOS_HAVE_SIMD 1

/* Streaming stores of a whole register as 16-byte pieces: NumPy buffers are only 16-byte
 * aligned, and the write-combining buffers merge the pieces into full lines anyway. */
__attribute__((target("avx512f"))) static inline void arrpos_nt_m512(float *p, __m512 v)
{
    _mm_stream_ps(p, _mm512_castps512_ps128(v));
    _mm_stream_ps(p + 4, _mm512_extractf32x4_ps(v, 1));
    _mm_stream_ps(p + 8, _mm512_extractf32x4_ps(v, 2));
    _mm_stream_ps(p + 12, _mm512_extractf32x4_ps(v, 3));
}
__attribute__((target("avx512f"))) static inline void arrpos_nt_m512d(double *p, __m512d v)
{
    __m256d lo = _mm512_castpd512_pd256(v), hi = _mm512_extractf64x4_pd(v, 1);
    _mm_stream_pd(p, _mm256_castpd256_pd128(lo));
    _mm_stream_pd(p + 2, _mm256_extractf128_pd(lo, 1));
    _mm_stream_pd(p + 4, _mm256_castpd256_pd128(hi));
    _mm_stream_pd(p + 6, _mm256_extractf128_pd(hi, 1));
}
__attribute__((target("avx2"))) static inline void arrpos_nt_m256(float *p, __m256 v)
{
    _mm_stream_ps(p, _mm256_castps256_ps128(v));
    _mm_stream_ps(p + 4, _mm256_extractf128_ps(v, 1));
}
__attribute__((target("avx2"))) static inline void arrpos_nt_m256d(double *p, __m256d v)
{
    _mm_stream_pd(p, _mm256_castpd256_pd128(v));
    _mm_stream_pd(p + 2, _mm256_extractf128_pd(v, 1));
}

__attribute__((target("avx512f"))) static inline void arrpos_nta_m512(float *p, __m512 v)
{
    _mm512_stream_ps(p, v);
}
__attribute__((target("avx512f"))) static inline void arrpos_nta_m512d(double *p, __m512d v)
{
    _mm512_stream_pd(p, v);
}
__attribute__((target("avx2"))) static inline void arrpos_nta_m256(float *p, __m256 v)
{
    _mm256_stream_ps(p, v);
}
__attribute__((target("avx2"))) static inline void arrpos_nta_m256d(double *p, __m256d v)
{
    _mm256_stream_pd(p, v);
}

/* NAME: function; TGT: target string; T: scalar; V: vector type; W: lanes; P: intrinsic
 * prefix; S: ps/pd suffix; SWAPIMM: in-lane pair swap immediate. */
#define ARRPOS_DEFINE_SIMD_ROWS(NAME, TGT, T, V, W, P, S, SWAPIMM, NT)                         \
__attribute__((target(TGT))) static void NAME(                                                 \
    T *out, ptrdiff_t ost, const T *x, ptrdiff_t xst, const T *c, ptrdiff_t cst,              \
    const T *s, ptrdiff_t sst, ptrdiff_t nrows, ptrdiff_t R, ptrdiff_t D, int interleaved,    \
    T sgn)                                                                                     \
{                                                                                              \
    const V vs = P##_set1_##S(sgn);                                                            \
    V alt = P##_set1_##S((T)1);                                                                \
    {   /* (-1, +1, -1, +1, ...): the sign of the swapped partner in a pair */                 \
        T lanes[W];                                                                            \
        for (int l = 0; l < W; l++) lanes[l] = (l % 2) ? (T)1 : (T)-1;                        \
        alt = P##_loadu_##S(lanes);                                                            \
    }                                                                                          \
    ptrdiff_t h = R / 2;                                                                       \
    for (ptrdiff_t k = 0; k < nrows; k++) {                                                    \
        const T *xr = x + k * xst, *cr = c + k * cst, *sr = s + k * sst;                       \
        T *o = out + k * ost;                                                                  \
        ptrdiff_t i;                                                                           \
        if (!interleaved) {                                                                    \
            for (i = 0; i < h; i += W) {                                                       \
                V x1 = P##_loadu_##S(xr + i), x2 = P##_loadu_##S(xr + i + h);                  \
                V s1 = P##_mul_##S(P##_loadu_##S(sr + i), vs);                                 \
                V s2 = P##_mul_##S(P##_loadu_##S(sr + i + h), vs);                             \
                V o1 = P##_sub_##S(P##_mul_##S(x1, P##_loadu_##S(cr + i)), P##_mul_##S(x2, s1)); \
                V o2 = P##_add_##S(P##_mul_##S(x2, P##_loadu_##S(cr + i + h)),                 \
                                   P##_mul_##S(x1, s2));                                       \
                NT(o + i, o1);                                                     \
                NT(o + i + h, o2);                                                 \
            }                                                                                  \
        } else {                                                                               \
            for (i = 0; i < R; i += W) {                                                       \
                V xv = P##_loadu_##S(xr + i);                                                  \
                V rot = P##_mul_##S(P##_permute_##S(xv, SWAPIMM), alt);                        \
                V sv = P##_mul_##S(P##_loadu_##S(sr + i), vs);                                 \
                V ov = P##_add_##S(P##_mul_##S(xv, P##_loadu_##S(cr + i)), P##_mul_##S(rot, sv)); \
                NT(o + i, ov);                                                     \
            }                                                                                  \
        }                                                                                      \
        for (i = R; i < D; i += W)                                                             \
            NT(o + i, P##_loadu_##S(xr + i));                                      \
    }                                                                                          \
}

ARRPOS_DEFINE_SIMD_ROWS(arrpos_rope_rows_avx512_f32, "avx512f", float, __m512, 16, _mm512, ps,
                        0xB1, arrpos_nt_m512)
ARRPOS_DEFINE_SIMD_ROWS(arrpos_rope_rows_avx2_f32, "avx2", float, __m256, 8, _mm256, ps, 0xB1,
                        arrpos_nt_m256)
ARRPOS_DEFINE_SIMD_ROWS(arrpos_rope_rows_avx512_f64, "avx512f", double, __m512d, 8, _mm512, pd,
                        0x55, arrpos_nt_m512d)
ARRPOS_DEFINE_SIMD_ROWS(arrpos_rope_rows_avx2_f64, "avx2", double, __m256d, 4, _mm256, pd, 0x5,
                        arrpos_nt_m256d)
/* the same with full-width stores, for rows aligned to the vector width */
ARRPOS_DEFINE_SIMD_ROWS(arrpos_rope_rows_avx512a_f32, "avx512f", float, __m512, 16, _mm512, ps,
                        0xB1, arrpos_nta_m512)
ARRPOS_DEFINE_SIMD_ROWS(arrpos_rope_rows_avx2a_f32, "avx2", float, __m256, 8, _mm256, ps, 0xB1,
                        arrpos_nta_m256)
ARRPOS_DEFINE_SIMD_ROWS(arrpos_rope_rows_avx512a_f64, "avx512f", double, __m512d, 8, _mm512, pd,
                        0x55, arrpos_nta_m512d)
ARRPOS_DEFINE_SIMD_ROWS(arrpos_rope_rows_avx2a_f64, "avx2", double, __m256d, 4, _mm256, pd, 0x5,
                        arrpos_nta_m256d)

static int arrpos_simd_level(void)
{
    static int level = -1;  /* 2: AVX-512F, 1: AVX2, 0: neither */
    if (level < 0) {
        const char *cap = getenv("ARRPOS_SIMD_LEVEL");  /* lower it to test every code path */
        int lvl;
        __builtin_cpu_init();
        lvl = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
        if (cap && cap[0] >= '0' && cap[0] <= '2' && cap[0] - '0' < lvl)
            lvl = cap[0] - '0';
        level = lvl;
    }
    return level;
}
#else
#define ARRPOS_HAVE_SIMD 0
#endif

/* Streaming out-of-place rows: the SIMD code when the geometry allows (every vector of every
 * row a full one, rows 16-byte aligned; full-width stores when rows are vector-aligned), else
 * the portable rows of rope.h with a scratch row. Always writes every row. */
#if ARRPOS_HAVE_SIMD
#define ARRPOS_DEFINE_STREAM_ROWS(SUFFIX, T)                                                   \
static void arrpos_rope_rows_stream_##SUFFIX(                                                  \
    T *out, ptrdiff_t ost, const T *x, ptrdiff_t xst, const T *c, ptrdiff_t cst,              \
    const T *s, ptrdiff_t sst, ptrdiff_t n, ptrdiff_t R, ptrdiff_t D, int inter, T sgn,       \
    T *tmp)                                                                                    \
{                                                                                              \
    int lvl = arrpos_simd_level();                                                             \
    ptrdiff_t w = lvl == 2 ? 64 / (ptrdiff_t)sizeof(T) : lvl == 1 ? 32 / (ptrdiff_t)sizeof(T) : 0; \
    if (w && (inter ? R % w == 0 : (R / 2) % w == 0) && (D - R) % w == 0                       \
        && ((uintptr_t)out % 16) == 0 && (ost * sizeof(T)) % 16 == 0) {                        \
        size_t vb = (size_t)w * sizeof(T);                                                     \
        int aligned = ((uintptr_t)out % vb) == 0 && ((size_t)ost * sizeof(T)) % vb == 0;       \
        if (lvl == 2 && aligned)                                                               \
            arrpos_rope_rows_avx512a_##SUFFIX(out, ost, x, xst, c, cst, s, sst, n, R, D, inter, sgn); \
        else if (lvl == 2)                                                                     \
            arrpos_rope_rows_avx512_##SUFFIX(out, ost, x, xst, c, cst, s, sst, n, R, D, inter, sgn); \
        else if (aligned)                                                                      \
            arrpos_rope_rows_avx2a_##SUFFIX(out, ost, x, xst, c, cst, s, sst, n, R, D, inter, sgn); \
        else                                                                                   \
            arrpos_rope_rows_avx2_##SUFFIX(out, ost, x, xst, c, cst, s, sst, n, R, D, inter, sgn); \
        return;                                                                                \
    }                                                                                          \
    arrpos_rope_rows_##SUFFIX(out, ost, x, xst, c, cst, s, sst, n, R, D, inter, sgn, tmp);     \
}
#else
#define ARRPOS_DEFINE_STREAM_ROWS(SUFFIX, T)                                                   \
static void arrpos_rope_rows_stream_##SUFFIX(                                                  \
    T *out, ptrdiff_t ost, const T *x, ptrdiff_t xst, const T *c, ptrdiff_t cst,              \
    const T *s, ptrdiff_t sst, ptrdiff_t n, ptrdiff_t R, ptrdiff_t D, int inter, T sgn,       \
    T *tmp)                                                                                    \
{                                                                                              \
    arrpos_rope_rows_##SUFFIX(out, ost, x, xst, c, cst, s, sst, n, R, D, inter, sgn, tmp);     \
}
#endif

ARRPOS_DEFINE_STREAM_ROWS(f32, float)
ARRPOS_DEFINE_STREAM_ROWS(f64, double)
#endif
