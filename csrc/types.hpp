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
#include <cstring>

namespace arrpos {

struct f16 { uint16_t bits; };   // IEEE binary16 (numpy float16, torch.float16)
struct bf16 { uint16_t bits; };  // bfloat16 (ml_dtypes.bfloat16, torch.bfloat16)

// Codes shared with the Cython layer (the storage type of an array is told, not inferred: torch
// bfloat16 reaches the kernels as uint16 bits).
enum TypeCode { F32 = 0, F64 = 1, F16 = 2, BF16 = 3 };

inline uint32_t bits_of(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float float_of(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float widen(f16 h)
{
    uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16;
    uint32_t e = (h.bits >> 10) & 0x1fu, m = h.bits & 0x3ffu;
    if (e == 0) {  // zero or subnormal: m * 2**-24, exact in float
        float v = (float)m * 5.9604644775390625e-8f;
        return float_of(bits_of(v) | sign);
    }
    if (e == 31)
        return float_of(sign | 0x7f800000u | (m << 13));
    return float_of(sign | ((e + 112) << 23) | (m << 13));
}

inline float widen(bf16 b) { return float_of((uint32_t)b.bits << 16); }

// float -> binary16, round to nearest even (overflow to inf, subnormals exact-rounded).
inline f16 narrow_f16(float f)
{
    uint32_t x = bits_of(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u)  // NaN: quiet, its high payload bits kept (as VCVTPS2PH does)
        return f16{(uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu))};
    if (x >= 0x477ff000u)  // inf, and >= 65520 rounds to inf
        return f16{(uint16_t)(sign | 0x7c00u)};
    if (x < 0x38800000u) {  // below 2**-14: adding 0.5 (ulp 2**-24) rounds to the subnormal grid
        float v = float_of(x) + 0.5f;
        return f16{(uint16_t)(sign | (bits_of(v) - 0x3f000000u))};
    }
    uint32_t odd = (x >> 13) & 1u;
    x += 0xc8000fffu + odd;  // rebias the exponent (-112 << 23) and round half to even
    return f16{(uint16_t)(sign | (x >> 13))};
}

inline bf16 narrow_bf16(float f)
{
    uint32_t u = bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return bf16{(uint16_t)((u >> 16) | 0x40u)};  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return bf16{(uint16_t)(u >> 16)};
}

// double -> float rounded to odd: a following rounding to a type of <= 22 significant bits is
// then the correctly rounded result of the double (no double rounding).
inline float round_to_odd(double d)
{
    float f = (float)d;
    double back = f;
    if (back == d || d != d)
        return f;
    uint32_t u = bits_of(f);
    if ((back > d) == (d > 0))  // rounded away from zero: step back toward zero
        u -= 1;
    return float_of(u | 1u);
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
