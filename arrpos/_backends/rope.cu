// arrpos CUDA kernels: sinusoid and RoPE tables, fused RoPE application, ALiBi bias.
//
// Compiled at run time by cupy.RawModule (NVRTC) with the name expressions listed by
// arrpos._backends._cupy.kernel_names(), and at build time by .ci/check_nvcc.sh with nvcc from
// the same list. Plain C++ templates, no extern "C".
//
// No #include at all: NVRTC has no host headers, and cuda_fp16.h / cuda_bf16.h do not compile
// under NVRTC on every toolkit/CuPy combination. 16-bit floats are therefore storage types with
// the bit layout of __half / __nv_bfloat16 and explicit, correctly rounded conversions.
//
// Launch shape (set by the adapter): blockDim.x threads walk the pairs of one row (the fastest
// axis, so a warp reads and writes consecutive addresses), blockDim.y rows per block, and the
// grid strides over rows. No integer division per element.

namespace arrpos {

struct half {  // IEEE binary16, layout of __half
    unsigned short bits;
};
struct bfloat16 {  // layout of __nv_bfloat16
    unsigned short bits;
};

// ---------------------------------------------------------------------------------------------
// Conversions. 16-bit types compute in float and round once on store; from double they round
// to float with round-to-odd first (24 bits >= 11 + 2 and 8 + 2), so the result is the correctly
// rounded 16-bit value with no double-rounding error.

__device__ __forceinline__ float round_to_odd_float(double v)
{
    float f = __double2float_rz(v);
    if ((double)f != v)  // inexact (or NaN): set the sticky last bit
        f = __uint_as_float(__float_as_uint(f) | 1u);
    return f;
}

// ARRPOS_HOST_EMULATION: tests/cuda_emulation.py compiles this file as plain C++ and runs the
// kernels on the CPU (no GPU needed); it supplies these two conversions in place of the PTX.
__device__ __forceinline__ unsigned short float_to_half_bits(float f)
{
#if defined(ARRPOS_HOST_EMULATION) && !defined(__CUDA_ARCH__)
    return arrpos_emu_float_to_half(f);
#else
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#endif
}

__device__ __forceinline__ float half_bits_to_float(unsigned short h)
{
#if defined(ARRPOS_HOST_EMULATION) && !defined(__CUDA_ARCH__)
    return arrpos_emu_half_to_float(h);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#endif
}

__device__ __forceinline__ unsigned short float_to_bf16_bits(float f)
{
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)  // NaN stays a (quiet) NaN
        return (unsigned short)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even; overflow gives inf
    return (unsigned short)(u >> 16);
}

template <typename T> struct num;

template <> struct num<float> {
    typedef float acc;
    static __device__ __forceinline__ float load(float v) { return v; }
    static __device__ __forceinline__ float store(float v) { return v; }
    static __device__ __forceinline__ float from_double(double v) { return (float)v; }
};

template <> struct num<double> {
    typedef double acc;
    static __device__ __forceinline__ double load(double v) { return v; }
    static __device__ __forceinline__ double store(double v) { return v; }
    static __device__ __forceinline__ double from_double(double v) { return v; }
};

template <> struct num<half> {
    typedef float acc;
    static __device__ __forceinline__ float load(half v) { return half_bits_to_float(v.bits); }
    static __device__ __forceinline__ half store(float v)
    {
        half h;
        h.bits = float_to_half_bits(v);
        return h;
    }
    static __device__ __forceinline__ half from_double(double v)
    {
        return store(round_to_odd_float(v));
    }
};

template <> struct num<bfloat16> {
    typedef float acc;
    static __device__ __forceinline__ float load(bfloat16 v)
    {
        return __uint_as_float((unsigned int)v.bits << 16);
    }
    static __device__ __forceinline__ bfloat16 store(float v)
    {
        bfloat16 b;
        b.bits = float_to_bf16_bits(v);
        return b;
    }
    static __device__ __forceinline__ bfloat16 from_double(double v)
    {
        return store(round_to_odd_float(v));
    }
};

// ---------------------------------------------------------------------------------------------
// Exact angles: sin and cos of p * (w_hi + w_lo), right to a few 1e-16 for |p w| < 5e10.
// p * w_hi is split exactly into big + err with one FMA; big is reduced modulo 2 pi with the
// Cody-Waite pieces of arrpos._backends._xp (_C1.._C4: 20 significant bits each, so k * C is
// exact and each subtraction exact for k < 2**33); then sincos in double of |r| <= pi.
// The constants are checked against _xp by tests/test_cupy.py.

#define ARRPOS_C1 6.283180236816406
#define ARRPOS_C2 5.070360202807933e-06
#define ARRPOS_C3 2.9774169241214565e-12
#define ARRPOS_C4 2.068073192717642e-18
#define ARRPOS_INV_2PI 0.15915494309189535

__device__ __forceinline__ void exact_sincos(double p, double w_hi, double w_lo, double *s,
                                             double *c)
{
    double big = p * w_hi;
    double err = __fma_rn(p, w_hi, -big);  // p * w_hi == big + err exactly
    double small = err + p * w_lo;
    double k = rint(big * ARRPOS_INV_2PI);
    double r = (((big - k * ARRPOS_C1) - k * ARRPOS_C2) - k * ARRPOS_C3) + (small - k * ARRPOS_C4);
    sincos(r, s, c);
}

// ---------------------------------------------------------------------------------------------
// Sinusoid table: out[row, :] for positions pos[row] and frequencies w_hi + w_lo (nf of them),
// rows of `width` elements (C-contiguous); columns past 2 * nf are zero.
// layout 0: interleaved (s0 c0 s1 c1 ...), 1: [sin | cos], 2: [cos | sin].

template <typename T>
__global__ void __launch_bounds__(256)
sinusoid_table(T *__restrict__ out, const double *__restrict__ pos,
               const double *__restrict__ w_hi, const double *__restrict__ w_lo,
               long long rows, int nf, long long width, int layout)
{
    const long long step = (long long)gridDim.x * blockDim.y;
    for (long long r = (long long)blockIdx.x * blockDim.y + threadIdx.y; r < rows; r += step) {
        const double p = pos[r];
        T *row = out + r * width;
        for (int i = threadIdx.x; i < nf; i += blockDim.x) {
            double s, c;
            exact_sincos(p, w_hi[i], w_lo[i], &s, &c);
            if (layout == 0) {
                row[2 * i] = num<T>::from_double(s);
                row[2 * i + 1] = num<T>::from_double(c);
            } else if (layout == 1) {
                row[i] = num<T>::from_double(s);
                row[nf + i] = num<T>::from_double(c);
            } else {
                row[i] = num<T>::from_double(c);
                row[nf + i] = num<T>::from_double(s);
            }
        }
        for (long long j = 2 * (long long)nf + threadIdx.x; j < width; j += blockDim.x)
            row[j] = num<T>::from_double(0.0);
    }
}

// ---------------------------------------------------------------------------------------------
// RoPE tables: cos_out, sin_out, each (rows, 2 * nf) C-contiguous, scaled by `scale` (the
// attention factor) in double before the one rounding.
// layout 0: half (cat(f, f)), 1: interleaved (each frequency twice).

template <typename T>
__global__ void __launch_bounds__(256)
rope_cos_sin(T *__restrict__ cos_out, T *__restrict__ sin_out, const double *__restrict__ pos,
             const double *__restrict__ inv_freq, long long rows, int nf, double scale,
             int layout)
{
    const long long step = (long long)gridDim.x * blockDim.y;
    const long long width = 2 * (long long)nf;
    for (long long r = (long long)blockIdx.x * blockDim.y + threadIdx.y; r < rows; r += step) {
        const double p = pos[r];
        T *crow = cos_out + r * width;
        T *srow = sin_out + r * width;
        for (int i = threadIdx.x; i < nf; i += blockDim.x) {
            double s, c;
            exact_sincos(p, inv_freq[i], 0.0, &s, &c);
            const T cv = num<T>::from_double(c * scale);
            const T sv = num<T>::from_double(s * scale);
            const long long a = layout == 0 ? i : 2 * (long long)i;
            const long long b = layout == 0 ? i + (long long)nf : a + 1;
            crow[a] = cv;
            crow[b] = cv;
            srow[a] = sv;
            srow[b] = sv;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fused RoPE: out = x * cos + rotate(x) * sin over the first 2 * half_rot features of each row,
// with the remaining `copy_cols` features copied (0 when out is x: in place, nothing to copy).
//
// Rows are the (up to four, after the adapter merged what it could) leading axes of out:
// row = ((i0 * n1 + i1) * n2 + i2) * n3 + i3. Every array has its own element strides for them
// (0 where it is broadcast: cos/sin over batch and heads, x over a broadcast batch) and for the
// feature axis. x and out may be the same memory (in place); each pair is read completely
// before it is written and no two threads touch the same pair, so that is safe. x and out are
// therefore not __restrict__.
// layout 0: half (pairs j, j + half_rot), 1: interleaved (pairs 2j, 2j + 1).
// inverse != 0 rotates back (sin -> -sin).

template <typename I>
__device__ __forceinline__ void split_row(long long row, long long n1, long long n2,
                                          long long n3, long long *i0, long long *i1,
                                          long long *i2, long long *i3)
{
    I r = (I)row;
    const I a3 = (I)n3, a2 = (I)n2, a1 = (I)n1;
    I q = r / a3;
    *i3 = (long long)(r - q * a3);
    r = q;
    q = r / a2;
    *i2 = (long long)(r - q * a2);
    r = q;
    q = r / a1;
    *i1 = (long long)(r - q * a1);
    *i0 = (long long)q;
}

template <typename T>
__global__ void __launch_bounds__(256)
apply_rope(const T *x, T *out, const T *__restrict__ cos_t, const T *__restrict__ sin_t,
           long long rows, long long n1, long long n2, long long n3,
           long long xs0, long long xs1, long long xs2, long long xs3, long long xsf,
           long long os0, long long os1, long long os2, long long os3, long long osf,
           long long cs0, long long cs1, long long cs2, long long cs3, long long csf,
           long long ss0, long long ss1, long long ss2, long long ss3, long long ssf,
           int half_rot, int copy_cols, int layout, int inverse)
{
    typedef typename num<T>::acc acc;
    const long long step = (long long)gridDim.x * blockDim.y;
    const bool narrow = rows <= 4294967295LL;  // uniform: 32-bit division is much cheaper
    const int items = half_rot + copy_cols;
    for (long long r = (long long)blockIdx.x * blockDim.y + threadIdx.y; r < rows; r += step) {
        long long i0, i1, i2, i3;
        if (narrow)
            split_row<unsigned int>(r, n1, n2, n3, &i0, &i1, &i2, &i3);
        else
            split_row<unsigned long long>(r, n1, n2, n3, &i0, &i1, &i2, &i3);
        const T *xr = x + (i0 * xs0 + i1 * xs1 + i2 * xs2 + i3 * xs3);
        T *orow = out + (i0 * os0 + i1 * os1 + i2 * os2 + i3 * os3);
        const T *cr = cos_t + (i0 * cs0 + i1 * cs1 + i2 * cs2 + i3 * cs3);
        const T *sr = sin_t + (i0 * ss0 + i1 * ss1 + i2 * ss2 + i3 * ss3);
        for (int j = threadIdx.x; j < items; j += blockDim.x) {
            if (j < half_rot) {
                const long long a = layout == 0 ? j : 2 * (long long)j;
                const long long b = layout == 0 ? a + half_rot : a + 1;
                const acc xa = num<T>::load(xr[a * xsf]);
                const acc xb = num<T>::load(xr[b * xsf]);
                const acc ca = num<T>::load(cr[a * csf]);
                const acc cb = num<T>::load(cr[b * csf]);
                acc sa = num<T>::load(sr[a * ssf]);
                acc sb = num<T>::load(sr[b * ssf]);
                if (inverse) {
                    sa = -sa;
                    sb = -sb;
                }
                orow[a * osf] = num<T>::store(xa * ca - xb * sa);
                orow[b * osf] = num<T>::store(xb * cb + xa * sb);
            } else {
                const long long col = 2 * (long long)half_rot + (j - half_rot);
                orow[col * osf] = xr[col * xsf];  // pass-through features, bit for bit
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ALiBi bias (heads, q_len, k_len), C-contiguous, from float64 slopes; q_pos = i + query_offset,
// k_pos = j. mode 0 causal: -slope * (q_pos - k_pos) where k_pos <= q_pos, else 0;
// 1 symmetric: -slope * |q_pos - k_pos|; 2 key: slope * k_pos. Computed in double, rounded once.

template <typename T>
__global__ void __launch_bounds__(256)
alibi_bias(T *__restrict__ out, const double *__restrict__ slopes, long long heads,
           long long q_len, long long k_len, long long query_offset, int mode)
{
    const long long rows = heads * q_len;
    const long long step = (long long)gridDim.x * blockDim.y;
    for (long long r = (long long)blockIdx.x * blockDim.y + threadIdx.y; r < rows; r += step) {
        const long long h = r / q_len;  // once per row, not per element
        const long long q_pos = (r - h * q_len) + query_offset;
        const double slope = slopes[h];
        T *row = out + r * k_len;
        for (long long j = threadIdx.x; j < k_len; j += blockDim.x) {
            // slope * (k_pos - q_pos) rather than -slope * (q_pos - k_pos): +0.0 on the
            // diagonal, as the generic code gives
            const long long back = j - q_pos;
            double v;
            if (mode == 0)
                v = back <= 0 ? slope * (double)back : 0.0;
            else if (mode == 1)
                v = slope * (double)(back > 0 ? -back : back);
            else
                v = slope * (double)j;
            row[j] = num<T>::from_double(v);
        }
    }
}

}  // namespace arrpos
