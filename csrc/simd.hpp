// The instruction sets of the kernels, chosen at run time (no -march=native: wheels stay
// portable): AVX2 and AVX-512 on x86-64 (GCC, Clang, MSVC), NEON on aarch64 (its baseline: no
// check), and a portable level in plain C++ that the compiler vectorises for its target
// (SSE2, NEON, VSX, z/Architecture, RVV...).
//
// Isa tags select a family of traits: Vec<Isa, T> loads storage type T into a register of its
// compute type (widening 16-bit types exactly) and stores back (rounding once, to nearest even),
// plain or streaming; Ops<Isa, C> is the arithmetic. x86 functions carry the target attribute
// of their Isa, so this header compiles with the baseline flags. ARRPOS_SIMD_LEVEL caps the
// level, to test every path on one machine: x86 0 portable, 1 AVX2, 2 AVX-512, 3 AVX-512 with
// its bfloat16 conversion; aarch64 0 portable, 1 NEON. Every level gives the same bits.
#ifndef ARRPOS_SIMD_HPP
#define ARRPOS_SIMD_HPP
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include "types.hpp"

// ---- compilers ------------------------------------------------------------------------------
#if defined(__GNUC__) || defined(__clang__)  // (clang-cl too)
#define ARRPOS_GNU 1
#define ARRPOS_ALWAYS inline __attribute__((always_inline))
#define ARRPOS_NOINLINE __attribute__((noinline))
#define ARRPOS_TARGET(s) __attribute__((target(s)))
#define ARRPOS_UNLIKELY(c) __builtin_expect(!!(c), 0)
#define ARRPOS_ALIGNED(p, n) __builtin_assume_aligned(p, n)
#elif defined(_MSC_VER)
#define ARRPOS_GNU 0
#define ARRPOS_ALWAYS __forceinline
#define ARRPOS_NOINLINE __declspec(noinline)
#define ARRPOS_TARGET(s)  // MSVC compiles every intrinsic without flags
#define ARRPOS_UNLIKELY(c) (c)
#define ARRPOS_ALIGNED(p, n) (p)
#else
#define ARRPOS_GNU 0
#define ARRPOS_ALWAYS inline
#define ARRPOS_NOINLINE
#define ARRPOS_TARGET(s)
#define ARRPOS_UNLIKELY(c) (c)
#define ARRPOS_ALIGNED(p, n) (p)
#endif
// For the table row pieces: GCC otherwise keeps some layouts' as calls, their vector registers
// passed through memory (a third of the one-thread time of RoPE interleaved tables)
#define ARRPOS_INLINE ARRPOS_ALWAYS

#if !defined(ARRPOS_NO_SIMD) && (defined(__x86_64__) || defined(_M_X64)) \
    && (ARRPOS_GNU || defined(_MSC_VER))
#define ARRPOS_X86 1
#else
#define ARRPOS_X86 0
#endif
// AVX-512-BF16 (level 3) with GCC and Clang only: its intrinsics came late to MSVC
#define ARRPOS_X86_BF16 (ARRPOS_X86 && ARRPOS_GNU)
#if !defined(ARRPOS_NO_SIMD) && defined(__aarch64__) && ARRPOS_GNU && !defined(__ARM_BIG_ENDIAN)
#define ARRPOS_NEON 1
#else
#define ARRPOS_NEON 0
#endif

#if ARRPOS_X86
#include <immintrin.h>
#if ARRPOS_GNU
#include <cpuid.h>
#else
#include <intrin.h>
#endif
#define ARRPOS_T512 ARRPOS_TARGET("avx512f,avx2,fma,f16c")
#define ARRPOS_T256 ARRPOS_TARGET("avx2,fma,f16c")
#define ARRPOS_I512 ARRPOS_T512 ARRPOS_ALWAYS static
#define ARRPOS_I256 ARRPOS_T256 ARRPOS_ALWAYS static
#endif
#if ARRPOS_NEON
#include <arm_neon.h>
#define ARRPOS_IN ARRPOS_ALWAYS static
#endif

namespace arrpos {

struct Portable {};
struct Avx2 {};
struct Avx512 {};
struct Avx512Bf16 {};  // AVX-512 plus its bfloat16 conversion (Cooper Lake, Zen 4, Sapphire Rapids)
struct Neon {};

#if ARRPOS_X86
// What the CPU and the OS offer, from CPUID and XGETBV (the OS saves the AVX / AVX-512
// registers), with no compiler built-in: the same code under GCC, Clang and MSVC.
struct X86Features {
    bool avx2 = false, fma = false, f16c = false, avx512f = false, avx512dq = false,
         avx512bf16 = false;
};

inline void x86_cpuid(unsigned leaf, unsigned sub, unsigned r[4])
{
#if ARRPOS_GNU
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
#else
    int v[4];
    __cpuidex(v, (int)leaf, (int)sub);
    for (int k = 0; k < 4; k++)
        r[k] = (unsigned)v[k];
#endif
}

inline unsigned long long x86_xcr0()
{
#if ARRPOS_GNU
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
#else
    return _xgetbv(0);
#endif
}

inline X86Features x86_features()
{
    X86Features f;
    unsigned r[4];
    x86_cpuid(0, 0, r);
    const unsigned max_leaf = r[0];
    if (max_leaf < 7)
        return f;
    x86_cpuid(1, 0, r);
    const bool osxsave = r[2] >> 27 & 1, avx = r[2] >> 28 & 1;
    if (!osxsave || !avx)
        return f;
    const unsigned long long xcr0 = x86_xcr0();
    if ((xcr0 & 0x6) != 0x6)  // XMM and YMM state
        return f;
    f.fma = r[2] >> 12 & 1;
    f.f16c = r[2] >> 29 & 1;
    x86_cpuid(7, 0, r);
    const unsigned max_sub = r[0];
    f.avx2 = r[1] >> 5 & 1;
    if ((xcr0 & 0xe6) == 0xe6) {  // and opmask, ZMM_Hi256, Hi16_ZMM state
        f.avx512f = r[1] >> 16 & 1;
        f.avx512dq = r[1] >> 17 & 1;
        if (max_sub >= 1) {
            x86_cpuid(7, 1, r);
            f.avx512bf16 = r[0] >> 5 & 1;
        }
    }
    return f;
}
#endif

// The best level this CPU runs: x86 3 AVX-512F with AVX512_BF16 (and DQ), 2 AVX-512F, 1 AVX2
// with FMA and F16C; aarch64 1 NEON; 0 portable C++.
inline int cpu_level()
{
#if ARRPOS_X86
    const X86Features f = x86_features();
    if (!(f.avx2 && f.fma && f.f16c))
        return 0;
    if (!f.avx512f)
        return 1;
    return ARRPOS_X86_BF16 && f.avx512bf16 && f.avx512dq ? 3 : 2;
#elif ARRPOS_NEON
    return 1;
#else
    return 0;
#endif
}

inline int &simd_level_slot()
{
    static int level = -1;
    return level;
}

// The level the kernels run: the CPU's, capped by ARRPOS_SIMD_LEVEL (read once).
inline int simd_level()
{
    int &level = simd_level_slot();
    if (level < 0) {
        int lvl = cpu_level();
        const char *cap = std::getenv("ARRPOS_SIMD_LEVEL");
        if (cap && cap[0] >= '0' && cap[0] <= '9' && cap[0] - '0' < lvl)
            lvl = cap[0] - '0';
        level = lvl;
    }
    return level;
}

// Run at another level from now on (at most the CPU's; the test driver's way to compare every
// level in one process). Not for use while kernels run on other threads.
inline int set_simd_level(int lvl)
{
    const int top = cpu_level();
    simd_level_slot() = lvl < 0 ? 0 : lvl > top ? top : lvl;
    return simd_level_slot();
}

// The name of a level of this build's architecture, as `arrpos info` prints it.
inline const char *simd_level_name(int lvl)
{
#if ARRPOS_X86
    static const char *const names[4] = {"portable", "avx2", "avx512", "avx512-bf16"};
    return lvl >= 0 && lvl < 4 ? names[lvl] : "unknown";
#elif ARRPOS_NEON
    return lvl == 1 ? "neon" : lvl == 0 ? "portable" : "unknown";
#else
    return lvl == 0 ? "portable" : "unknown";
#endif
}

template <class Isa, class C> struct Ops;
template <class Isa, class T> struct Vec;
template <class Isa, class T> struct Exact;  // below: float64 vectors rounded once to T
// The apply kernels' stores: Vec<Isa, T>'s, except where results of tables of type Tc need
// other (bfloat16 of float32 tables: see the x86 and NEON specialisations)
template <class Isa, class T, class Tc> struct Out : Vec<Isa, T> {};

#if ARRPOS_X86
// ---- AVX-512 -------------------------------------------------------------------------------
// GCC 12's unmasked AVX-512 intrinsics pass an `_mm512_undefined_*()` (a variable initialised
// from itself) as the merge source they never use, and -Wmaybe-uninitialized then fires at
// every inlined use. The zero-masking forms under a full mask are the same instructions and
// name no undefined value: the kernels call these.
namespace z512 {
constexpr __mmask16 k16 = 0xffff;
constexpr __mmask8 k8 = 0xff;
template <int I> ARRPOS_I512 __m512 permute_ps(__m512 a)
{
    return _mm512_maskz_permute_ps(k16, a, I);
}
template <int I> ARRPOS_I512 __m512d permute_pd(__m512d a)
{
    return _mm512_maskz_permute_pd(k8, a, I);
}
ARRPOS_I512 __m512 permutexvar_ps(__m512i i, __m512 a)
{
    return _mm512_maskz_permutexvar_ps(k16, i, a);
}
ARRPOS_I512 __m512d permutexvar_pd(__m512i i, __m512d a)
{
    return _mm512_maskz_permutexvar_pd(k8, i, a);
}
template <int I> ARRPOS_I512 __m512i srli_epi32(__m512i a)
{
    return _mm512_maskz_srli_epi32(k16, a, I);
}
template <int I> ARRPOS_I512 __m512i slli_epi32(__m512i a)
{
    return _mm512_maskz_slli_epi32(k16, a, I);
}
ARRPOS_I512 __m512i cvtepu16_epi32(__m256i a) { return _mm512_maskz_cvtepu16_epi32(k16, a); }
ARRPOS_I512 __m256i cvtepi32_epi16(__m512i a) { return _mm512_maskz_cvtepi32_epi16(k16, a); }
ARRPOS_I512 __m256i cvtepi64_epi32(__m512i a) { return _mm512_maskz_cvtepi64_epi32(k8, a); }
ARRPOS_I512 __m512 cvtph_ps(__m256i a) { return _mm512_maskz_cvtph_ps(k16, a); }
ARRPOS_I512 __m256i cvtps_ph(__m512 a)  // round to nearest even
{
    return _mm512_maskz_cvtps_ph(k16, a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
ARRPOS_I512 __m256 cvtpd_ps(__m512d a) { return _mm512_maskz_cvtpd_ps(k8, a); }
ARRPOS_I512 __m512d cvtps_pd(__m256 a) { return _mm512_maskz_cvtps_pd(k8, a); }
ARRPOS_I512 __m512d insert_hi_pd(__m512d a, __m256d b)
{
    return _mm512_maskz_insertf64x4(k8, a, b, 1);
}
template <int I> ARRPOS_I512 __m128i extract128(__m512i a)
{
    return _mm512_maskz_extracti32x4_epi32(0xf, a, I);
}
}  // namespace z512

template <> struct Ops<Avx512, float> {
    using R = __m512;
    static constexpr int W = 16;
    ARRPOS_I512 R set1(float v) { return _mm512_set1_ps(v); }
    ARRPOS_I512 R mul(R a, R b) { return _mm512_mul_ps(a, b); }
    ARRPOS_I512 R add(R a, R b) { return _mm512_add_ps(a, b); }
    ARRPOS_I512 R sub(R a, R b) { return _mm512_sub_ps(a, b); }
    ARRPOS_I512 R swap_pairs(R a) { return z512::permute_ps<0xB1>(a); }
    ARRPOS_I512 R alt() { return _mm512_castsi512_ps(_mm512_set1_epi64(0x3f800000bf800000LL)); }
    ARRPOS_I512 R dup_low(R a)  // lanes 0..7 -> 0 0 1 1 ... 7 7
    {
        return z512::permutexvar_ps(
            _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0), a);
    }
    ARRPOS_I512 R zip_lo(R a, R b)  // a0 b0 a1 b1 ... a7 b7
    {
        return _mm512_permutex2var_ps(
            a, _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0), b);
    }
    ARRPOS_I512 R zip_hi(R a, R b)  // a8 b8 ... a15 b15
    {
        return _mm512_permutex2var_ps(
            a, _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8), b);
    }
};
template <> struct Ops<Avx512, double> {
    using R = __m512d;
    static constexpr int W = 8;
    ARRPOS_I512 R set1(double v) { return _mm512_set1_pd(v); }
    ARRPOS_I512 R mul(R a, R b) { return _mm512_mul_pd(a, b); }
    ARRPOS_I512 R add(R a, R b) { return _mm512_add_pd(a, b); }
    ARRPOS_I512 R sub(R a, R b) { return _mm512_sub_pd(a, b); }
    ARRPOS_I512 R swap_pairs(R a) { return z512::permute_pd<0x55>(a); }
    ARRPOS_I512 R alt() { return _mm512_set_pd(1, -1, 1, -1, 1, -1, 1, -1); }
    ARRPOS_I512 R dup_low(R a)
    {
        return z512::permutexvar_pd(_mm512_set_epi64(3, 3, 2, 2, 1, 1, 0, 0), a);
    }
    ARRPOS_I512 R zip_lo(R a, R b)
    {
        return _mm512_permutex2var_pd(a, _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0), b);
    }
    ARRPOS_I512 R zip_hi(R a, R b)
    {
        return _mm512_permutex2var_pd(a, _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4), b);
    }
};

// Streaming stores of n16 16-byte pieces (NumPy promises 16-byte alignment only).
ARRPOS_I512 void stream_bytes64(void *p, __m512i v)
{
    if (((uintptr_t)p & 63) == 0) {
        _mm512_stream_si512((__m512i *)p, v);
        return;
    }
    __m128i *q = (__m128i *)p;
    _mm_stream_si128(q, z512::extract128<0>(v));
    _mm_stream_si128(q + 1, z512::extract128<1>(v));
    _mm_stream_si128(q + 2, z512::extract128<2>(v));
    _mm_stream_si128(q + 3, z512::extract128<3>(v));
}
// AVX2's target: inlined into the AVX2 and AVX-512 traits alike (a subset of both)
ARRPOS_I256 void stream_bytes32(void *p, __m256i v)
{
    if (((uintptr_t)p & 31) == 0) {
        _mm256_stream_si256((__m256i *)p, v);
        return;
    }
    __m128i *q = (__m128i *)p;
    _mm_stream_si128(q, _mm256_castsi256_si128(v));
    _mm_stream_si128(q + 1, _mm256_extracti128_si256(v, 1));
}

template <> struct Vec<Avx512, float> : Ops<Avx512, float> {
    ARRPOS_I512 R load(const float *p) { return _mm512_loadu_ps(p); }
    ARRPOS_I512 R load_half(const float *p) { return _mm512_castps256_ps512(_mm256_loadu_ps(p)); }
    ARRPOS_I512 void store(float *p, R v) { _mm512_storeu_ps(p, v); }
    ARRPOS_I512 void stream(float *p, R v) { stream_bytes64(p, _mm512_castps_si512(v)); }
    using U = __m512i;  // the bytes a store writes
    ARRPOS_I512 U bits(R v) { return _mm512_castps_si512(v); }
};
template <> struct Vec<Avx512, double> : Ops<Avx512, double> {
    ARRPOS_I512 R load(const double *p) { return _mm512_loadu_pd(p); }
    ARRPOS_I512 R load_half(const double *p)
    {
        return _mm512_castpd256_pd512(_mm256_loadu_pd(p));
    }
    ARRPOS_I512 void store(double *p, R v) { _mm512_storeu_pd(p, v); }
    ARRPOS_I512 void stream(double *p, R v) { stream_bytes64(p, _mm512_castpd_si512(v)); }
    using U = __m512i;  // the bytes a store writes
    ARRPOS_I512 U bits(R v) { return _mm512_castpd_si512(v); }
};
template <> struct Vec<Avx512, f16> : Ops<Avx512, float> {
    ARRPOS_I512 R load(const f16 *p)
    {
        return z512::cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    }
    ARRPOS_I512 R load_half(const f16 *p)
    {
        return _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)));
    }
    ARRPOS_I512 __m256i narrow(R v) { return z512::cvtps_ph(v); }
    ARRPOS_I512 void store(f16 *p, R v) { _mm256_storeu_si256((__m256i *)p, narrow(v)); }
    ARRPOS_I512 void stream(f16 *p, R v) { stream_bytes32(p, narrow(v)); }
    using U = __m256i;  // the bytes a store writes
    ARRPOS_I512 U bits(R v) { return narrow(v); }
};
template <> struct Vec<Avx512, bf16> : Ops<Avx512, float> {
    ARRPOS_I512 R widen16(__m256i h)
    {
        return _mm512_castsi512_ps(z512::slli_epi32<16>(z512::cvtepu16_epi32(h)));
    }
    ARRPOS_I512 R load(const bf16 *p) { return widen16(_mm256_loadu_si256((const __m256i *)p)); }
    ARRPOS_I512 R load_half(const bf16 *p)
    {
        return widen16(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p)));
    }
    // round to nearest even on the bits: right for every value whose NaNs have no bits below
    // bfloat16's (all that bfloat16 operands give; else narrow_nan, see Out)
    ARRPOS_I512 __m256i narrow(R v)
    {
        __m512i u = _mm512_castps_si512(v);
        __m512i odd = _mm512_and_si512(z512::srli_epi32<16>(u), _mm512_set1_epi32(1));
        u = _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
        return z512::cvtepi32_epi16(z512::srli_epi32<16>(u));
    }
    // narrow, a NaN kept a NaN (quiet, its high bits) as narrow_bf16 keeps it: the rounding add
    // would carry low payload bits into its exponent (0x7fffffff would become -0)
    ARRPOS_I512 __m256i narrow_nan(R v)
    {
        __m512i u = _mm512_castps_si512(v);
        __m512i odd = _mm512_and_si512(z512::srli_epi32<16>(u), _mm512_set1_epi32(1));
        __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
        r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), u,
                                 _mm512_set1_epi32(0x400000));
        return z512::cvtepi32_epi16(z512::srli_epi32<16>(r));
    }
    ARRPOS_I512 void store(bf16 *p, R v) { _mm256_storeu_si256((__m256i *)p, narrow(v)); }
    ARRPOS_I512 void stream(bf16 *p, R v) { stream_bytes32(p, narrow(v)); }
    using U = __m256i;  // the bytes a store writes
    ARRPOS_I512 U bits(R v) { return narrow(v); }
};

// ---- AVX-512 with AVX512_BF16: one instruction rounds float32 to bfloat16 (RNE) -------------
#define ARRPOS_IBF16 ARRPOS_TARGET("avx512f,avx512dq,avx512bf16,avx2,fma,f16c") ARRPOS_ALWAYS static
template <class C> struct Ops<Avx512Bf16, C> : Ops<Avx512, C> {};
template <class T> struct Vec<Avx512Bf16, T> : Vec<Avx512, T> {};
#if ARRPOS_X86_BF16
template <> struct Vec<Avx512Bf16, bf16> : Vec<Avx512, bf16> {
    // VCVTNEPS2BF16 treats float32 subnormals as zero (in and out), where rounding gives a
    // bfloat16 subnormal: a vector with such a lane (rare) is rounded on the bits instead.
    // (VFPCLASSPS finds them in one instruction; an integer test of the lanes cost more.)
    ARRPOS_IBF16 __m256i narrow(R v)
    {
        if (ARRPOS_UNLIKELY(_mm512_fpclass_ps_mask(v, 0x20) != 0))  // 0x20: subnormal
            return Vec<Avx512, bf16>::narrow_nan(v);
        const __m256bh h = _mm512_cvtneps_pbh(v);
        __m256i r;  // (the bits as they are: a C cast between vector types is GNU's)
        std::memcpy(&r, &h, sizeof r);
        return r;
    }
    ARRPOS_IBF16 void store(bf16 *p, R v) { _mm256_storeu_si256((__m256i *)p, narrow(v)); }
    ARRPOS_IBF16 void stream(bf16 *p, R v) { stream_bytes32(p, narrow(v)); }
    ARRPOS_IBF16 U bits(R v) { return narrow(v); }
};
#endif

// ---- AVX2 ----------------------------------------------------------------------------------
template <> struct Ops<Avx2, float> {
    using R = __m256;
    static constexpr int W = 8;
    ARRPOS_I256 R set1(float v) { return _mm256_set1_ps(v); }
    ARRPOS_I256 R mul(R a, R b) { return _mm256_mul_ps(a, b); }
    ARRPOS_I256 R add(R a, R b) { return _mm256_add_ps(a, b); }
    ARRPOS_I256 R sub(R a, R b) { return _mm256_sub_ps(a, b); }
    ARRPOS_I256 R swap_pairs(R a) { return _mm256_permute_ps(a, 0xB1); }
    ARRPOS_I256 R alt() { return _mm256_set_ps(1, -1, 1, -1, 1, -1, 1, -1); }
    ARRPOS_I256 R dup_low(R a)
    {
        return _mm256_permutevar8x32_ps(a, _mm256_set_epi32(3, 3, 2, 2, 1, 1, 0, 0));
    }
    ARRPOS_I256 R zip_lo(R a, R b)
    {
        return _mm256_permute2f128_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b), 0x20);
    }
    ARRPOS_I256 R zip_hi(R a, R b)
    {
        return _mm256_permute2f128_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b), 0x31);
    }
};
template <> struct Ops<Avx2, double> {
    using R = __m256d;
    static constexpr int W = 4;
    ARRPOS_I256 R set1(double v) { return _mm256_set1_pd(v); }
    ARRPOS_I256 R mul(R a, R b) { return _mm256_mul_pd(a, b); }
    ARRPOS_I256 R add(R a, R b) { return _mm256_add_pd(a, b); }
    ARRPOS_I256 R sub(R a, R b) { return _mm256_sub_pd(a, b); }
    ARRPOS_I256 R swap_pairs(R a) { return _mm256_permute_pd(a, 0x5); }
    ARRPOS_I256 R alt() { return _mm256_set_pd(1, -1, 1, -1); }
    ARRPOS_I256 R dup_low(R a) { return _mm256_permute4x64_pd(a, 0x50); }
    ARRPOS_I256 R zip_lo(R a, R b)
    {
        return _mm256_permute2f128_pd(_mm256_unpacklo_pd(a, b), _mm256_unpackhi_pd(a, b), 0x20);
    }
    ARRPOS_I256 R zip_hi(R a, R b)
    {
        return _mm256_permute2f128_pd(_mm256_unpacklo_pd(a, b), _mm256_unpackhi_pd(a, b), 0x31);
    }
};

template <> struct Vec<Avx2, float> : Ops<Avx2, float> {
    ARRPOS_I256 R load(const float *p) { return _mm256_loadu_ps(p); }
    ARRPOS_I256 R load_half(const float *p) { return _mm256_castps128_ps256(_mm_loadu_ps(p)); }
    ARRPOS_I256 void store(float *p, R v) { _mm256_storeu_ps(p, v); }
    ARRPOS_I256 void stream(float *p, R v) { stream_bytes32(p, _mm256_castps_si256(v)); }
    using U = __m256i;  // the bytes a store writes
    ARRPOS_I256 U bits(R v) { return _mm256_castps_si256(v); }
};
template <> struct Vec<Avx2, double> : Ops<Avx2, double> {
    ARRPOS_I256 R load(const double *p) { return _mm256_loadu_pd(p); }
    ARRPOS_I256 R load_half(const double *p) { return _mm256_castpd128_pd256(_mm_loadu_pd(p)); }
    ARRPOS_I256 void store(double *p, R v) { _mm256_storeu_pd(p, v); }
    ARRPOS_I256 void stream(double *p, R v) { stream_bytes32(p, _mm256_castpd_si256(v)); }
    using U = __m256i;  // the bytes a store writes
    ARRPOS_I256 U bits(R v) { return _mm256_castpd_si256(v); }
};
template <> struct Vec<Avx2, f16> : Ops<Avx2, float> {
    ARRPOS_I256 R load(const f16 *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
    ARRPOS_I256 R load_half(const f16 *p)
    {
        return _mm256_castps128_ps256(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)p)));
    }
    ARRPOS_I256 __m128i narrow(R v)
    {
        return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    ARRPOS_I256 void store(f16 *p, R v) { _mm_storeu_si128((__m128i *)p, narrow(v)); }
    ARRPOS_I256 void stream(f16 *p, R v) { _mm_stream_si128((__m128i *)p, narrow(v)); }
    using U = __m128i;  // the bytes a store writes
    ARRPOS_I256 U bits(R v) { return narrow(v); }
};
template <> struct Vec<Avx2, bf16> : Ops<Avx2, float> {
    ARRPOS_I256 R load(const bf16 *p)
    {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
        return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    }
    ARRPOS_I256 R load_half(const bf16 *p)
    {
        __m128i w = _mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i *)p));
        return _mm256_castps128_ps256(_mm_castsi128_ps(_mm_slli_epi32(w, 16)));
    }
    ARRPOS_I256 __m128i narrow(R v) { return pack(round(_mm256_castps_si256(v))); }
    // as Vec<Avx512, bf16>'s: a NaN's bits below bfloat16's cleared first, so that nothing
    // carries out of them (a computed NaN is quiet already)
    ARRPOS_I256 __m128i narrow_nan(R v)
    {
        __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        return pack(round(_mm256_andnot_si256(_mm256_srli_epi32(nan, 16),
                                              _mm256_castps_si256(v))));
    }
    ARRPOS_I256 __m256i round(__m256i u)  // the bits rounded to nearest even at bit 16
    {
        __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        return _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
    }
    ARRPOS_I256 __m128i pack(__m256i r)  // the high halves of the 32-bit lanes
    {
        r = _mm256_srli_epi32(r, 16);
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        return _mm256_castsi256_si128(packed);
    }
    ARRPOS_I256 void store(bf16 *p, R v) { _mm_storeu_si128((__m128i *)p, narrow(v)); }
    ARRPOS_I256 void stream(bf16 *p, R v) { _mm_stream_si128((__m128i *)p, narrow(v)); }
    using U = __m128i;  // the bytes a store writes
    ARRPOS_I256 U bits(R v) { return narrow(v); }
};

// ---- the apply kernels' stores ---------------------------------------------------------------
// Out<Isa, T, Tc>: Vec<Isa, T>'s stores of results computed against tables of type Tc. A
// bfloat16 result of float32 tables may be a NaN with payload bits below bfloat16's (from a
// table's NaN): those stores round with narrow_nan. Results of bfloat16 operands never carry
// such bits (their NaNs are widened bfloat16 NaNs or the default NaN): the shorter narrow.
template <> struct Out<Avx512, bf16, float> : Vec<Avx512, bf16> {
    ARRPOS_I512 void store(bf16 *p, R v) { _mm256_storeu_si256((__m256i *)p, narrow_nan(v)); }
    ARRPOS_I512 void stream(bf16 *p, R v) { stream_bytes32(p, narrow_nan(v)); }
};
template <> struct Out<Avx2, bf16, float> : Vec<Avx2, bf16> {
    ARRPOS_I256 void store(bf16 *p, R v) { _mm_storeu_si128((__m128i *)p, narrow_nan(v)); }
    ARRPOS_I256 void stream(bf16 *p, R v) { _mm_stream_si128((__m128i *)p, narrow_nan(v)); }
};

// ---- whole store units of a streamed run ----------------------------------------------------
// Units<S>: aligned S-byte stores of a register (Vec's U, S = sizeof(U)). A run that starts k
// 16-byte pieces into a unit goes out as whole units: join(prev, cur) is prev's last k pieces,
// then cur's first S/16 - k (index(k) prepares it once per run).
template <int S> struct Units;
template <> struct Units<64> {
    ARRPOS_I512 __m512i index(int k)  // qword i: prev's 8 - 2k + i below 2k, else cur's i - 2k
    {
        alignas(64) long long ix[8];
        for (int i = 0; i < 8; i++)
            ix[i] = i < 2 * k ? 8 - 2 * k + i : 8 + i - 2 * k;
        return _mm512_load_si512(ix);
    }
    ARRPOS_I512 __m512i join(__m512i prev, __m512i cur, __m512i ix)
    {
        return _mm512_permutex2var_epi64(prev, ix, cur);
    }
    ARRPOS_I512 void stream(void *p, __m512i u) { _mm512_stream_si512((__m512i *)p, u); }
};
template <> struct Units<32> {  // (k is 0 or 1)
    ARRPOS_I256 __m256i index(int) { return _mm256_setzero_si256(); }
    ARRPOS_I256 __m256i join(__m256i prev, __m256i cur, __m256i)
    {
        return _mm256_permute2x128_si256(prev, cur, 0x21);
    }
    ARRPOS_I256 void stream(void *p, __m256i u) { _mm256_stream_si256((__m256i *)p, u); }
};
template <> struct Units<16> {  // (k is always 0)
    ARRPOS_I256 __m128i index(int) { return _mm_setzero_si128(); }
    ARRPOS_I256 __m128i join(__m128i, __m128i cur, __m128i) { return cur; }
    ARRPOS_I256 void stream(void *p, __m128i u) { _mm_stream_si128((__m128i *)p, u); }
};

// ---- float64 vectors rounded once to a storage type ------------------------------------------
// Exact<Isa, T>::pack turns N float64 registers (N * Ops<Isa, double>::W lanes = Vec<Isa, T>::W)
// into Vec<Isa, T>'s register: float64 as is, float32 rounded to nearest even, and for the
// 16-bit types float32 rounded to odd (as round_to_odd in types.hpp) so that Vec's narrowing
// store rounds once in effect. Exact<Isa, T>::zip(a, b, lo, hi) is Ops' zip_lo and zip_hi of
// (pack(a), pack(b)), for the interleaved table layouts: AVX-512 interleaves the 8-lane halves
// as the conversions give them, one shuffle per vector instead of the packing's and the zip's
// (one-thread sinusoid tables 0.85-0.98x the time, RoPE interleaved 0.88-1.0x); AVX2 packs,
// then zips.

// round to odd, 8 lanes: inexact lanes step toward zero where the nearest float was away from
// zero, then set their last bit; NaN lanes (compare false) pass as they are
ARRPOS_I512 __m256 odd_ps_avx512(__m512d d)
{
    __m256 f = z512::cvtpd_ps(d);
    __m512d back = z512::cvtps_pd(f);
    __mmask8 inexact = _mm512_cmp_pd_mask(back, d, _CMP_NEQ_OQ);
    __mmask8 away = _mm512_cmp_pd_mask(_mm512_abs_pd(back), _mm512_abs_pd(d), _CMP_GT_OQ);
    __m256i one_away = z512::cvtepi64_epi32(_mm512_maskz_set1_epi64(away, 1));
    __m256i one_odd = z512::cvtepi64_epi32(_mm512_maskz_set1_epi64(inexact, 1));
    __m256i u = _mm256_sub_epi32(_mm256_castps_si256(f), one_away);
    return _mm256_castsi256_ps(_mm256_or_si256(u, one_odd));
}
ARRPOS_I512 __m512 join_ps_avx512(__m256 lo, __m256 hi)
{
    return _mm512_castpd_ps(z512::insert_hi_pd(_mm512_castps_pd(_mm512_castps256_ps512(lo)),
                                               _mm256_castps_pd(hi)));
}
ARRPOS_I512 __m512 zip_halves_avx512(__m256 a, __m256 b)  // a0 b0 a1 b1 ... a7 b7
{
    return _mm512_permutex2var_ps(
        _mm512_castps256_ps512(a),
        _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0),
        _mm512_castps256_ps512(b));
}
template <> struct Exact<Avx512, double> {
    static constexpr int N = 1;
    ARRPOS_I512 __m512d pack(const __m512d *v) { return v[0]; }
    ARRPOS_I512 void zip(const __m512d *a, const __m512d *b, __m512d &lo, __m512d &hi)
    {
        lo = Ops<Avx512, double>::zip_lo(a[0], b[0]);
        hi = Ops<Avx512, double>::zip_hi(a[0], b[0]);
    }
};
template <> struct Exact<Avx512, float> {
    static constexpr int N = 2;
    ARRPOS_I512 __m512 pack(const __m512d *v)
    {
        return join_ps_avx512(z512::cvtpd_ps(v[0]), z512::cvtpd_ps(v[1]));
    }
    ARRPOS_I512 void zip(const __m512d *a, const __m512d *b, __m512 &lo, __m512 &hi)
    {
        lo = zip_halves_avx512(z512::cvtpd_ps(a[0]), z512::cvtpd_ps(b[0]));
        hi = zip_halves_avx512(z512::cvtpd_ps(a[1]), z512::cvtpd_ps(b[1]));
    }
};
template <> struct Exact<Avx512, f16> {
    static constexpr int N = 2;
    ARRPOS_I512 __m512 pack(const __m512d *v)
    {
        return join_ps_avx512(odd_ps_avx512(v[0]), odd_ps_avx512(v[1]));
    }
    ARRPOS_I512 void zip(const __m512d *a, const __m512d *b, __m512 &lo, __m512 &hi)
    {
        lo = zip_halves_avx512(odd_ps_avx512(a[0]), odd_ps_avx512(b[0]));
        hi = zip_halves_avx512(odd_ps_avx512(a[1]), odd_ps_avx512(b[1]));
    }
};
template <> struct Exact<Avx512, bf16> : Exact<Avx512, f16> {};
template <class T> struct Exact<Avx512Bf16, T> : Exact<Avx512, T> {};

template <class T, class X>  // X: the Exact below
struct PackThenZipAvx2 {
    template <class D, class R>
    ARRPOS_I256 void zip(const D *a, const D *b, R &lo, R &hi)
    {
        R pa = X::pack(a), pb = X::pack(b);
        lo = Vec<Avx2, T>::zip_lo(pa, pb);
        hi = Vec<Avx2, T>::zip_hi(pa, pb);
    }
};
ARRPOS_I256 __m128 odd_ps_avx2(__m256d d)
{
    __m128 f = _mm256_cvtpd_ps(d);
    __m256d back = _mm256_cvtps_pd(f);
    const __m256d nosign = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
    __m256d inexact = _mm256_cmp_pd(back, d, _CMP_NEQ_OQ);
    __m256d away = _mm256_cmp_pd(_mm256_and_pd(back, nosign), _mm256_and_pd(d, nosign),
                                 _CMP_GT_OQ);
    const __m256i low32 = _mm256_set_epi32(7, 7, 7, 7, 6, 4, 2, 0);  // 64-bit masks -> 32-bit
    __m128i m_away = _mm256_castsi256_si128(
        _mm256_permutevar8x32_epi32(_mm256_castpd_si256(away), low32));
    __m128i m_odd = _mm256_castsi256_si128(
        _mm256_permutevar8x32_epi32(_mm256_castpd_si256(inexact), low32));
    __m128i u = _mm_add_epi32(_mm_castps_si128(f), m_away);  // all-ones lanes: minus one
    return _mm_castsi128_ps(_mm_or_si128(u, _mm_and_si128(m_odd, _mm_set1_epi32(1))));
}
template <> struct Exact<Avx2, double> : PackThenZipAvx2<double, Exact<Avx2, double>> {
    static constexpr int N = 1;
    ARRPOS_I256 __m256d pack(const __m256d *v) { return v[0]; }
};
template <> struct Exact<Avx2, float> : PackThenZipAvx2<float, Exact<Avx2, float>> {
    static constexpr int N = 2;
    ARRPOS_I256 __m256 pack(const __m256d *v)
    {
        return _mm256_set_m128(_mm256_cvtpd_ps(v[1]), _mm256_cvtpd_ps(v[0]));
    }
};
template <> struct Exact<Avx2, f16> : PackThenZipAvx2<f16, Exact<Avx2, f16>> {
    static constexpr int N = 2;
    ARRPOS_I256 __m256 pack(const __m256d *v)
    {
        return _mm256_set_m128(odd_ps_avx2(v[1]), odd_ps_avx2(v[0]));
    }
};
template <> struct Exact<Avx2, bf16> : Exact<Avx2, f16> {};
#endif

#if ARRPOS_NEON
// ---- NEON (aarch64) --------------------------------------------------------------------------
// Plain IEEE arithmetic (the FPCR's round to nearest even; subnormals kept, as Linux, macOS and
// Windows set it), float16 by FCVTL / FCVTN, bfloat16 by integer shifts rounding to nearest
// even as the x86 levels do, float64 -> float32 rounded to odd by FCVTXN. Ordinary stores only:
// ARM has no non-temporal stores in the x86 sense (STNP is a hint some cores ignore), so the
// kernels never pick a streaming variant here.
template <> struct Ops<Neon, float> {
    using R = float32x4_t;
    static constexpr int W = 4;
    ARRPOS_IN R set1(float v) { return vdupq_n_f32(v); }
    ARRPOS_IN R mul(R a, R b) { return vmulq_f32(a, b); }
    ARRPOS_IN R add(R a, R b) { return vaddq_f32(a, b); }
    ARRPOS_IN R sub(R a, R b) { return vsubq_f32(a, b); }
    ARRPOS_IN R swap_pairs(R a) { return vrev64q_f32(a); }
    ARRPOS_IN R alt()  // -1, +1, -1, +1
    {
        return vreinterpretq_f32_u64(vdupq_n_u64(0x3f800000bf800000ULL));
    }
    ARRPOS_IN R dup_low(R a) { return vzip1q_f32(a, a); }  // a0 a0 a1 a1
    ARRPOS_IN R zip_lo(R a, R b) { return vzip1q_f32(a, b); }
    ARRPOS_IN R zip_hi(R a, R b) { return vzip2q_f32(a, b); }
};
template <> struct Ops<Neon, double> {
    using R = float64x2_t;
    static constexpr int W = 2;
    ARRPOS_IN R set1(double v) { return vdupq_n_f64(v); }
    ARRPOS_IN R mul(R a, R b) { return vmulq_f64(a, b); }
    ARRPOS_IN R add(R a, R b) { return vaddq_f64(a, b); }
    ARRPOS_IN R sub(R a, R b) { return vsubq_f64(a, b); }
    ARRPOS_IN R swap_pairs(R a) { return vextq_f64(a, a, 1); }
    ARRPOS_IN R alt() { return vcombine_f64(vdup_n_f64(-1.0), vdup_n_f64(1.0)); }
    ARRPOS_IN R dup_low(R a) { return vdupq_laneq_f64(a, 0); }
    ARRPOS_IN R zip_lo(R a, R b) { return vzip1q_f64(a, b); }
    ARRPOS_IN R zip_hi(R a, R b) { return vzip2q_f64(a, b); }
};

template <> struct Vec<Neon, float> : Ops<Neon, float> {
    ARRPOS_IN R load(const float *p) { return vld1q_f32(p); }
    ARRPOS_IN R load_half(const float *p) { return vcombine_f32(vld1_f32(p), vdup_n_f32(0.f)); }
    ARRPOS_IN void store(float *p, R v) { vst1q_f32(p, v); }
    ARRPOS_IN void stream(float *p, R v) { store(p, v); }
};
template <> struct Vec<Neon, double> : Ops<Neon, double> {
    ARRPOS_IN R load(const double *p) { return vld1q_f64(p); }
    ARRPOS_IN R load_half(const double *p) { return vcombine_f64(vld1_f64(p), vdup_n_f64(0.)); }
    ARRPOS_IN void store(double *p, R v) { vst1q_f64(p, v); }
    ARRPOS_IN void stream(double *p, R v) { store(p, v); }
};
template <> struct Vec<Neon, f16> : Ops<Neon, float> {
    ARRPOS_IN R widen(uint16x4_t h) { return vcvt_f32_f16(vreinterpret_f16_u16(h)); }
    ARRPOS_IN R load(const f16 *p) { return widen(vld1_u16((const uint16_t *)p)); }
    ARRPOS_IN R load_half(const f16 *p)
    {
        uint32_t two;
        std::memcpy(&two, p, 4);
        return widen(vreinterpret_u16_u32(vdup_n_u32(two)));
    }
    ARRPOS_IN uint16x4_t narrow(R v) { return vreinterpret_u16_f16(vcvt_f16_f32(v)); }
    ARRPOS_IN void store(f16 *p, R v) { vst1_u16((uint16_t *)p, narrow(v)); }
    ARRPOS_IN void stream(f16 *p, R v) { store(p, v); }
};
template <> struct Vec<Neon, bf16> : Ops<Neon, float> {
    ARRPOS_IN R widen(uint16x4_t h) { return vreinterpretq_f32_u32(vshll_n_u16(h, 16)); }
    ARRPOS_IN R load(const bf16 *p) { return widen(vld1_u16((const uint16_t *)p)); }
    ARRPOS_IN R load_half(const bf16 *p)
    {
        uint32_t two;
        std::memcpy(&two, p, 4);
        return widen(vreinterpret_u16_u32(vdup_n_u32(two)));
    }
    ARRPOS_IN uint32x4_t round(uint32x4_t u)  // the bits rounded to nearest even at bit 16
    {
        uint32x4_t odd = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
        return vaddq_u32(u, vaddq_u32(odd, vdupq_n_u32(0x7fff)));
    }
    // round to nearest even on the bits: right for every value whose NaNs have no bits below
    // bfloat16's (all that bfloat16 operands give; else narrow_nan, see Out)
    ARRPOS_IN uint16x4_t narrow(R v) { return vshrn_n_u32(round(vreinterpretq_u32_f32(v)), 16); }
    // as Vec<Avx2, bf16>'s: a NaN's bits below bfloat16's cleared first, so that nothing
    // carries out of them (a computed NaN is quiet already)
    ARRPOS_IN uint16x4_t narrow_nan(R v)
    {
        uint32x4_t nan = vmvnq_u32(vceqq_f32(v, v));
        uint32x4_t u = vbicq_u32(vreinterpretq_u32_f32(v), vshrq_n_u32(nan, 16));
        return vshrn_n_u32(round(u), 16);
    }
    ARRPOS_IN void store(bf16 *p, R v) { vst1_u16((uint16_t *)p, narrow(v)); }
    ARRPOS_IN void stream(bf16 *p, R v) { store(p, v); }
};
template <> struct Out<Neon, bf16, float> : Vec<Neon, bf16> {
    ARRPOS_IN void store(bf16 *p, R v) { vst1_u16((uint16_t *)p, narrow_nan(v)); }
    ARRPOS_IN void stream(bf16 *p, R v) { store(p, v); }
};

template <class T, class X>  // X: the Exact below
struct PackThenZipNeon {
    template <class D, class R>
    ARRPOS_IN void zip(const D *a, const D *b, R &lo, R &hi)
    {
        R pa = X::pack(a), pb = X::pack(b);
        lo = Vec<Neon, T>::zip_lo(pa, pb);
        hi = Vec<Neon, T>::zip_hi(pa, pb);
    }
};
template <> struct Exact<Neon, double> : PackThenZipNeon<double, Exact<Neon, double>> {
    static constexpr int N = 1;
    ARRPOS_IN float64x2_t pack(const float64x2_t *v) { return v[0]; }
};
template <> struct Exact<Neon, float> : PackThenZipNeon<float, Exact<Neon, float>> {
    static constexpr int N = 2;
    ARRPOS_IN float32x4_t pack(const float64x2_t *v)  // FCVTN, FCVTN2: nearest even
    {
        return vcvt_high_f32_f64(vcvt_f32_f64(v[0]), v[1]);
    }
};
template <> struct Exact<Neon, f16> : PackThenZipNeon<f16, Exact<Neon, f16>> {
    static constexpr int N = 2;
    ARRPOS_IN float32x4_t pack(const float64x2_t *v)  // FCVTXN, FCVTXN2: round to odd
    {
        return vcvtx_high_f32_f64(vcvtx_f32_f64(v[0]), v[1]);
    }
};
template <> struct Exact<Neon, bf16> : PackThenZipNeon<bf16, Exact<Neon, bf16>> {
    static constexpr int N = 2;
    ARRPOS_IN float32x4_t pack(const float64x2_t *v) { return Exact<Neon, f16>::pack(v); }
};
#endif

}  // namespace arrpos
#endif
