// Element types of the CPU kernels and their scalar conversions.
//
// Every kernel is a template on its storage type T (float, double, f16, bf16) and computes in
// Compute<T> (float for the 16-bit types): loads widen exactly, stores round once,
// round-to-nearest-even. Table values computed in float64 are rounded to a 16-bit type through
// round-to-odd float, so that result is also rounded once.
#ifndef ARRPOS_TYPES_HPP
#define ARRPOS_TYPES_HPP
#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstring>

namespace arrpos {

struct f16 { uint16_t bits; };   // IEEE binary16 (numpy float16, torch.float16)
struct bf16 { uint16_t bits; };  // bfloat16 (ml_dtypes.bfloat16, torch.bfloat16)

// Codes shared with the Cython layer (the storage type of an array is told, not inferred: torch
// bfloat16 reaches the kernels as uint16 bits).
enum TypeCode { F32 = 0, F64 = 1, F16 = 2, BF16 = 3 };

inline uint32_t bits_of(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float float_of(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// The conversions below are branch-free (every case computed, one selected by masks): the
// portable level's loops call them per element, and the compiler vectorises those loops (SSE2,
// NEON, VSX...) only without branches; a select written as `c ? a : b` of float results comes
// back as a branch (the float operations may trap, so they are not speculated). Checked against
// the branching forms on every input (csrc/check_kernels.cpp --exhaustive).

// all ones where c, else zero
inline uint32_t mask_of(bool c) { return 0u - (uint32_t)c; }
inline uint32_t pick(uint32_t m, uint32_t a, uint32_t b) { return (a & m) | (b & ~m); }

// binary16 -> float, exact: normal numbers by rebiasing the exponent (by 127 - 15, twice for
// infinities and NaNs, whose payload is kept), subnormals m * 2**-24 as
// (2**-14 + m 2**-24) - 2**-14 (exact, and no float subnormal operand).
inline float widen(f16 h)
{
    const uint32_t em = h.bits & 0x7fffu, sign = (uint32_t)(h.bits & 0x8000u) << 16;
    const int32_t e = (int32_t)em;  // (signed compares: SSE2 has no others)
    const uint32_t norm = (em << 13) + 0x38000000u + (mask_of(e >= 0x7c00) & 0x38000000u);
    const uint32_t sub = bits_of(float_of(0x38800000u | (em << 13)) - 6.103515625e-05f);
    return float_of(pick(mask_of(e < 0x400), sub, norm) | sign);
}

inline float widen(bf16 b) { return float_of((uint32_t)b.bits << 16); }

// float -> binary16, round to nearest even (overflow to inf, subnormals exact-rounded); the
// bits in a 32-bit integer (narrow_run: vectorised narrowings that GCC would otherwise do in
// 16-bit lanes, each mask packed on its own).
inline uint32_t narrow_f16_bits(float f)
{
    const uint32_t w = bits_of(f), sign = (w >> 16) & 0x8000u, ux = w & 0x7fffffffu;
    const int32_t x = (int32_t)ux;
    // NaN: quiet, its high payload bits kept (as VCVTPS2PH and FCVTN do)
    const uint32_t nan = 0x7e00u | ((ux >> 13) & 0x3ffu);
    // below 2**-14: adding 0.5 (ulp 2**-24) rounds to the subnormal grid
    const uint32_t sub = bits_of(float_of(ux) + 0.5f) - 0x3f000000u;
    // rebias the exponent (-112 << 23) and round half to even
    const uint32_t norm = (ux + 0xc8000fffu + ((ux >> 13) & 1u)) >> 13;
    const uint32_t r = pick(mask_of(x > 0x7f800000), nan,
                            pick(mask_of(x >= 0x477ff000), 0x7c00u,  // >= 65520: inf
                                 pick(mask_of(x < 0x38800000), sub, norm)));
    return sign | r;
}
inline f16 narrow_f16(float f) { return f16{(uint16_t)narrow_f16_bits(f)}; }

inline uint32_t narrow_bf16_bits(float f)
{
    const uint32_t u = bits_of(f);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = mask_of((int32_t)(u & 0x7fffffffu) > 0x7f800000);
    return pick(nan, (u >> 16) | 0x40u, rounded);  // a NaN made quiet
}
inline bf16 narrow_bf16(float f) { return bf16{(uint16_t)narrow_bf16_bits(f)}; }

// double -> float rounded to odd: a following rounding to a type of <= 22 significant bits is
// then the correctly rounded result of the double (no double rounding). An inexact result
// that the float conversion rounded away from zero steps back toward zero; every inexact one
// then gets its last bit set. r = d - (float)d is exact: nonzero where inexact, of the other
// sign than d where rounded away (an overflow's infinity too); NaN (d NaN or infinite) where
// the conversion is exact or d is no number. The flags come from r's bits alone: a compare of
// doubles gives 64-bit masks that SSE2's vectoriser cannot narrow to the float's 32 bits.
inline uint64_t bits_of(double d) { uint64_t u; std::memcpy(&u, &d, 8); return u; }
inline float round_to_odd(double d)
{
    const float f = (float)d;
    const double r = d - (double)f;
    const uint64_t rb = bits_of(r), mag = rb & 0x7fffffffffffffffULL;
    const uint64_t number = (mag - 0x7ff0000000000001ULL) >> 63;  // 1 unless r is NaN
    const uint64_t inexact = ((mag | (0 - mag)) >> 63) & number;   // r != 0, not NaN
    const uint64_t away = inexact & ((rb ^ bits_of(d)) >> 63);
    return float_of((bits_of(f) - (uint32_t)away) | (uint32_t)inexact);
}

// Storage traits: the compute type, widening loads and rounding stores.
template <class T> struct Elem;
template <> struct Elem<float> {
    using C = float;
    static constexpr int code = F32;
    static C load(const float *p) { return *p; }
    static void store(float *p, C v) { *p = v; }
    static void store_exact(float *p, double v) { *p = (float)v; }
};
template <> struct Elem<double> {
    using C = double;
    static constexpr int code = F64;
    static C load(const double *p) { return *p; }
    static void store(double *p, C v) { *p = v; }
    static void store_exact(double *p, double v) { *p = v; }
};
template <> struct Elem<f16> {
    using C = float;
    static constexpr int code = F16;
    static C load(const f16 *p) { return widen(*p); }
    static void store(f16 *p, C v) { *p = narrow_f16(v); }
    static void store_exact(f16 *p, double v) { *p = narrow_f16(round_to_odd(v)); }
};
template <> struct Elem<bf16> {
    using C = float;
    static constexpr int code = BF16;
    static C load(const bf16 *p) { return widen(*p); }
    static void store(bf16 *p, C v) { *p = narrow_bf16(v); }
    static void store_exact(bf16 *p, double v) { *p = narrow_bf16(round_to_odd(v)); }
};

}  // namespace arrpos
#endif
