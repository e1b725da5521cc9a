// clip_shift: out = min(max(x, lo), hi) + shift over an integer array (Shaw et al.'s relative
// index, the bucket tables' index), into a C-contiguous output of a signed integer type.
//
// One streaming pass: the input is read once, each chunk of the pool writes its run of the
// output, staged in L1-resident pieces and streamed past the cache for large outputs
// (families.hpp's Streamer), or written in place. The input is viewed as (rows, cols) with
// element strides (any array whose leading axes collapse into one). Values: exact integer
// arithmetic, the generic path's (which widens unsigned and narrow inputs first; here the
// clamp runs in the input's own type with the bounds clipped to its range, and the shift is
// added in the output's width).
#ifndef ARRPOS_CLIP_HPP
#define ARRPOS_CLIP_HPP

#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include "families.hpp"

namespace arrpos {
namespace fam {

struct ClipJob {
    const char *x;  // (rows, cols) of I at element strides rs, cs
    char *out;  // rows * cols of O, C-contiguous
    ptrdiff_t rows, cols, rs, cs;
    int64_t lo, hi, shift;  // lo <= hi; lo + shift and hi + shift fit O
    bool stream;
    ptrdiff_t chunk;  // output elements per chunk of the pool (set by clip_shift)
};

}  // namespace fam
}  // namespace arrpos

#if ARRPOS_X86
ARRPOS_PUSH_AVX512
namespace arrpos { namespace fam { namespace isa_avx512 {
#include "clip.inc"
}}}
ARRPOS_POP
ARRPOS_PUSH_AVX2
namespace arrpos { namespace fam { namespace isa_avx2 {
#include "clip.inc"
}}}
ARRPOS_POP
#endif
namespace arrpos { namespace fam { namespace isa_portable {
#include "clip.inc"
}}}

namespace arrpos {
namespace fam {

// Whether an int64 bound lies below / above the range of I.
template <class I>
inline bool below_range(int64_t v)
{
    if constexpr (std::is_signed<I>::value)
        return v < (int64_t)std::numeric_limits<I>::min();
    else
        return v < 0;
}

template <class I>
inline bool above_range(int64_t v)
{
    if constexpr (!std::is_signed<I>::value && sizeof(I) == 8)
        return false;
    else
        return v > (int64_t)std::numeric_limits<I>::max();
}

template <class I, class O>
inline void clip_dispatch(int level, O *dst, const I *src, ptrdiff_t cs, ptrdiff_t n, I lo,
                          I hi, O shift)
{
#if ARRPOS_X86
    if (level >= 2)
        return isa_avx512::clip_run<I, O>(dst, src, cs, n, lo, hi, shift);
    if (level == 1)
        return isa_avx2::clip_run<I, O>(dst, src, cs, n, lo, hi, shift);
#else
    (void)level;
#endif
    isa_portable::clip_run<I, O>(dst, src, cs, n, lo, hi, shift);
}

// Output elements [e0, e1) into dst (the output at e0, or a staging piece): the input's runs
// along its rows. A bound past I's range clamps every value to that bound: lo above it, all
// lo; hi below it, all hi (lo <= hi).
template <class I, class O>
inline void clip_span(const ClipJob &j, int level, O *dst, ptrdiff_t e0, ptrdiff_t e1)
{
    using U = typename std::make_unsigned<O>::type;
    if (above_range<I>(j.lo) || below_range<I>(j.hi)) {
        const O v = (O)(U)((U)(above_range<I>(j.lo) ? j.lo : j.hi) + (U)j.shift);
        for (ptrdiff_t e = e0; e < e1; e++)
            dst[e - e0] = v;
        return;
    }
    const I lo = below_range<I>(j.lo) ? std::numeric_limits<I>::min() : (I)j.lo;
    const I hi = above_range<I>(j.hi) ? std::numeric_limits<I>::max() : (I)j.hi;
    const I *x = (const I *)j.x;
    ptrdiff_t e = e0;
    while (e < e1) {
        const ptrdiff_t r = e / j.cols, c = e - r * j.cols;
        const ptrdiff_t m = j.cols - c < e1 - e ? j.cols - c : e1 - e;
        clip_dispatch<I, O>(level, dst + (e - e0), x + r * j.rs + c * j.cs, j.cs, m, lo, hi,
                            (O)(U)(uint64_t)j.shift);
        e += m;
    }
}

template <class I, class O>
void clip_chunk(void *ctx, ptrdiff_t c)
{
    const ClipJob &j = *(const ClipJob *)ctx;
    const ptrdiff_t n = j.rows * j.cols;
    const ptrdiff_t e0 = c * j.chunk, e1 = e0 + j.chunk < n ? e0 + j.chunk : n;
    const int level = simd_level();
    O *out = (O *)j.out;
    if (!j.stream) {
        clip_span<I, O>(j, level, out + e0, e0, e1);
        return;
    }
    {
        constexpr ptrdiff_t piece = kPiece / (ptrdiff_t)sizeof(O);
        alignas(64) O buf[piece];
        Streamer st((char *)(out + e0), true);
        for (ptrdiff_t e = e0; e < e1; e += piece) {
            const ptrdiff_t m = e1 - e < piece ? e1 - e : piece;
            clip_span<I, O>(j, level, buf, e, e + m);
            st.add((const char *)buf, m * (ptrdiff_t)sizeof(O));
        }
    }
    fence(true);
}

template <class I, class O>
void clip_shift(ClipJob job, int nthreads)
{
    const ptrdiff_t n = job.rows * job.cols;
    if (n == 0)
        return;
    job.chunk = kChunk / (ptrdiff_t)sizeof(O);
    parallel_for((n + job.chunk - 1) / job.chunk, nthreads, clip_chunk<I, O>, &job);
}

}  // namespace fam
}  // namespace arrpos
#endif
