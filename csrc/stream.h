/* Streaming (non-temporal) stores for outputs well above the cache: they skip the
 * read-for-ownership of every written line, which otherwise doubles the memory traffic of a
 * write-only kernel. SSE2 (x86-64 baseline) has them; elsewhere a plain copy is used. */
#ifndef ARRPOS_STREAM_H
#define ARRPOS_STREAM_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#define ARRPOS_HAVE_STREAM 1
#else
#define ARRPOS_HAVE_STREAM 0
#endif

/* dst[0:n] = src[0:n] with streaming stores where dst is 16-byte aligned. */
static void arrpos_stream_f32(float *dst, const float *src, ptrdiff_t n)
{
#if ARRPOS_HAVE_STREAM
    ptrdiff_t i = 0;
    while (i < n && ((uintptr_t)(dst + i) & 15))
        dst[i] = src[i], i++;
    for (; i + 4 <= n; i += 4)
        _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
    for (; i < n; i++)
        dst[i] = src[i];
#else
    memcpy(dst, src, (size_t)n * sizeof(float));
#endif
}

static void arrpos_stream_f64(double *dst, const double *src, ptrdiff_t n)
{
#if ARRPOS_HAVE_STREAM
    ptrdiff_t i = 0;
    while (i < n && ((uintptr_t)(dst + i) & 15))
        dst[i] = src[i], i++;
    for (; i + 2 <= n; i += 2)
        _mm_stream_pd(dst + i, _mm_loadu_pd(src + i));
    for (; i < n; i++)
        dst[i] = src[i];
#else
    memcpy(dst, src, (size_t)n * sizeof(double));
#endif
}

/* Orders streaming stores before whatever the thread does next (end of a parallel region). */
static void arrpos_stream_fence(void)
{
#if ARRPOS_HAVE_STREAM
    _mm_sfence();
#endif
}
#endif
