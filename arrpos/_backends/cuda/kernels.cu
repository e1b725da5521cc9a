// arrpos CUDA kernels: sinusoid and RoPE tables, fused RoPE application (tables given in full
// or gathered from half-width caches at position ids), the ALiBi bias forms, the relative-bias
// gather, the depthwise convolution of the convolutional position encodings, the separable
// resampling of a learned table's grid.
//
// Compiled at run time by cupy.RawModule (NVRTC) with the options and name expressions of
// arrpos._backends.cuda.driver.module_spec(); at CI time by .ci/check_nvrtc.sh through the same
// function and cupy.cuda.compiler, and by .ci/check_nvcc.sh with nvcc. Plain C++ templates,
// no extern "C".
//
// No #include at all: NVRTC has no host headers, and cuda_fp16.h / cuda_bf16.h do not compile
// under NVRTC on every toolkit/CuPy combination. 16-bit floats are therefore storage types with
// the bit layout of __half / __nv_bfloat16 and explicit, correctly rounded conversions.
//
// Float arithmetic and conversions go through explicit round-to-nearest PTX (mul.rn, fma.rn,
// cvt.rn) without .ftz: CuPy compiles every module with -ftz=true, which would flush float32
// subnormals (bfloat16's subnormals are float32 subnormals) to zero unlike the CPU path, and
// explicit instructions also fix where products are fused, so the host emulation
// (tests/cuda_emulation.py) computes the same bits. .ci/check_nvrtc.sh checks that the PTX
// holds no .ftz instruction.
//
// Launch shape (set by the driver): blockDim.x threads walk the items of one row (the fastest
// axis, so a warp reads and writes consecutive addresses), blockDim.y rows per block, the grid's
// x axis strides over rows and its y axis splits each row into chunks of `chunk` items (wide,
// short work such as an ALiBi decode row of 32k keys). No integer division per element.

namespace arrpos {

struct half {  // IEEE binary16, layout of __half
    unsigned short bits;
};
struct bfloat16 {  // layout of __nv_bfloat16
    unsigned short bits;
};

// Frequencies of the sinusoid table, passed by value in the kernel parameters: no host-to-device
// copy, so a launch is legal inside CUDA graph capture. The driver launches once per block of
// ARRPOS_FREQ_BLOCK frequencies (3 KiB of the 4 KiB parameter space). Indexed in place in the
// parameter space (ld.param with a register address; .ci/check_nvrtc.sh fails on a copy to
// local memory), without __grid_constant__, which would need sm_70.
#define ARRPOS_FREQ_BLOCK 192
struct freq_block {
    double hi[ARRPOS_FREQ_BLOCK];
    double lo[ARRPOS_FREQ_BLOCK];
};

// Resampling taps of both grid axes for the output rows and columns of one launch, passed by
// value like the frequencies (3 KiB): w[k] and idx[k], the first axis's rows first, then the
// second's. The driver launches once per block of output rows and columns whose taps fit.
#define ARRPOS_TAPS_BLOCK 256
struct taps_block {
    double w[ARRPOS_TAPS_BLOCK];
    int idx[ARRPOS_TAPS_BLOCK];
};

// 8- and 16-byte words for vector loads (uint2/uint4 need a header NVRTC may lack)
struct alignas(8) uint2_ {
    unsigned int x, y;
};
struct alignas(16) uint4_ {
    unsigned int x, y, z, w;
};

#if defined(ARRPOS_HOST_EMULATION) && !defined(__CUDA_ARCH__)
#define ARRPOS_EMULATED 1  // tests/cuda_emulation.py: plain C++, -ffp-contract=off
#endif

// ---------------------------------------------------------------------------------------------
// Arithmetic: each product rounded as written, never fused unless asked, never flushed.

__device__ __forceinline__ float mul_rn(float a, float b)
{
#ifdef ARRPOS_EMULATED
    return a * b;
#else
    float r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#endif
}

__device__ __forceinline__ float fma_rn(float a, float b, float c)
{
#ifdef ARRPOS_EMULATED
    return arrpos_emu_fmaf(a, b, c);
#else
    float r;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
    return r;
#endif
}

__device__ __forceinline__ float neg(float a)  // a sign flip: neg.f32 would be .ftz here
{
    return __uint_as_float(__float_as_uint(a) ^ 0x80000000u);
}

__device__ __forceinline__ double neg(double a) { return -a; }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double fma_rn(double a, double b, double c) { return __fma_rn(a, b, c); }

__device__ __forceinline__ float add_rn(float a, float b)
{
#ifdef ARRPOS_EMULATED
    return a + b;
#else
    float r;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#endif
}

__device__ __forceinline__ float div_rn(float a, float b)
{
#ifdef ARRPOS_EMULATED
    return a / b;
#else
    float r;
    asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#endif
}

__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b)
{
#ifdef ARRPOS_EMULATED
    return a / b;
#else
    return __ddiv_rn(a, b);
#endif
}
template <typename C> __device__ __forceinline__ C sub_rn(C a, C b) { return add_rn(a, neg(b)); }

// float comparisons through explicit setp: under -ftz=true a C++ comparison or a clamp the
// compiler turns into min/max would flush subnormal operands
__device__ __forceinline__ bool lt(float a, float b)
{
#ifdef ARRPOS_EMULATED
    return a < b;
#else
    unsigned int r;
    asm("{\n\t.reg .pred p;\n\tsetp.lt.f32 p, %1, %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(r) : "f"(a), "f"(b));
    return r != 0;
#endif
}

__device__ __forceinline__ bool le(float a, float b)
{
#ifdef ARRPOS_EMULATED
    return a <= b;
#else
    unsigned int r;
    asm("{\n\t.reg .pred p;\n\tsetp.le.f32 p, %1, %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(r) : "f"(a), "f"(b));
    return r != 0;
#endif
}

__device__ __forceinline__ bool lt(double a, double b) { return a < b; }
__device__ __forceinline__ bool le(double a, double b) { return a <= b; }

// ---------------------------------------------------------------------------------------------
// Conversions. 16-bit types compute in float and round once on store; from double they round
// to float with round-to-odd first (24 bits >= 11 + 2 and 8 + 2), so the result is the correctly
// rounded 16-bit value with no double-rounding error.

__device__ __forceinline__ float double_to_float_rn(double v)
{
#ifdef ARRPOS_EMULATED
    return (float)v;
#else
    float f;
    asm("cvt.rn.f32.f64 %0, %1;" : "=f"(f) : "d"(v));
    return f;
#endif
}

__device__ __forceinline__ float double_to_float_rz(double v)
{
#ifdef ARRPOS_EMULATED
    return arrpos_emu_double2float_rz(v);
#else
    float f;
    asm("cvt.rz.f32.f64 %0, %1;" : "=f"(f) : "d"(v));
    return f;
#endif
}

__device__ __forceinline__ double float_to_double(float f)
{
#ifdef ARRPOS_EMULATED
    return (double)f;
#else
    double d;
    asm("cvt.f64.f32 %0, %1;" : "=d"(d) : "f"(f));
    return d;
#endif
}

__device__ __forceinline__ float round_to_odd_float(double v)
{
    float f = double_to_float_rz(v);
    if (float_to_double(f) != v)  // inexact (or NaN): set the sticky last bit
        f = __uint_as_float(__float_as_uint(f) | 1u);
    return f;
}

__device__ __forceinline__ unsigned short float_to_half_bits(float f)
{
#ifdef ARRPOS_EMULATED
    return arrpos_emu_float_to_half(f);
#else
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#endif
}

__device__ __forceinline__ float half_bits_to_float(unsigned short h)
{
#ifdef ARRPOS_EMULATED
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
    static __device__ __forceinline__ float from_double(double v) { return double_to_float_rn(v); }
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
// Every operation is an explicit _rn intrinsic: no compiler may contract p * w_hi into the
// reduction (big would then differ from the value err was split from). The constants are
// checked against _xp by tests/test_cupy.py.

#define ARRPOS_C1 6.283180236816406
#define ARRPOS_C2 5.070360202807933e-06
#define ARRPOS_C3 2.9774169241214565e-12
#define ARRPOS_C4 2.068073192717642e-18
#define ARRPOS_INV_2PI 0.15915494309189535

__device__ __forceinline__ void exact_sincos(double p, double w_hi, double w_lo, double *s,
                                             double *c)
{
    const double big = __dmul_rn(p, w_hi);
    const double err = __fma_rn(p, w_hi, -big);  // p * w_hi == big + err exactly
    const double small = __dadd_rn(err, __dmul_rn(p, w_lo));
    const double k = rint(__dmul_rn(big, ARRPOS_INV_2PI));
    double r = __dadd_rn(big, -__dmul_rn(k, ARRPOS_C1));
    r = __dadd_rn(r, -__dmul_rn(k, ARRPOS_C2));
    r = __dadd_rn(r, -__dmul_rn(k, ARRPOS_C3));
    r = __dadd_rn(r, __dadd_rn(small, -__dmul_rn(k, ARRPOS_C4)));
    sincos(r, s, c);
}

// The items of a row that this thread walks: chunk blockIdx.y of `chunk` items, blockDim.x apart.
#define ARRPOS_FOR_ITEMS(j, items, chunk)                                                        \
    for (long long j = (long long)blockIdx.y * (chunk) + threadIdx.x,                           \
                   j##_end = ((long long)blockIdx.y + 1) * (chunk) < (long long)(items)          \
                                 ? ((long long)blockIdx.y + 1) * (chunk)                         \
                                 : (long long)(items);                                           \
         j < j##_end; j += blockDim.x)

#define ARRPOS_FOR_ROWS(r, rows)                                                                  \
    for (long long r = (long long)blockIdx.x * blockDim.y + threadIdx.y; r < (rows);             \
         r += (long long)gridDim.x * blockDim.y)

// ---------------------------------------------------------------------------------------------
// Sinusoid table: out[row, :] for positions pos[row]; this launch writes the `count`
// frequencies first .. first + count - 1 of nf (given by value in `f`) and, when `tail` is set,
// the zero padding columns 2 * nf .. width - 1. Rows of `width` elements, C-contiguous.
// layout 0: interleaved (s0 c0 s1 c1 ...; an odd width 2 * nf - 1 drops the last cosine),
// 1: [sin | cos], 2: [cos | sin].

template <typename T>
__global__ void __launch_bounds__(256)
sinusoid_table(T *__restrict__ out, const double *__restrict__ pos, const freq_block f,
               long long rows, int first, int count, int nf, long long width, int tail,
               int layout, int chunk)
{
    const long long pad = tail && width > 2 * (long long)nf ? width - 2 * (long long)nf : 0;
    ARRPOS_FOR_ROWS(r, rows) {
        const double p = pos[r];
        T *row = out + r * width;
        ARRPOS_FOR_ITEMS(j, count + pad, chunk) {
            if (j >= count) {
                row[2 * (long long)nf + (j - count)] = num<T>::from_double(0.0);
                continue;
            }
            double s, c;
            exact_sincos(p, f.hi[j], f.lo[j], &s, &c);
            const long long i = first + j;
            if (layout == 0) {
                row[2 * i] = num<T>::from_double(s);
                if (2 * i + 1 < width)
                    row[2 * i + 1] = num<T>::from_double(c);
            } else if (layout == 1) {
                row[i] = num<T>::from_double(s);
                row[nf + i] = num<T>::from_double(c);
            } else {
                row[i] = num<T>::from_double(c);
                row[nf + i] = num<T>::from_double(s);
            }
        }
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
             int layout, int chunk)
{
    const long long width = 2 * (long long)nf;
    ARRPOS_FOR_ROWS(r, rows) {
        const double p = pos[r];
        T *crow = cos_out + r * width;
        T *srow = sin_out + r * width;
        ARRPOS_FOR_ITEMS(i, nf, chunk) {
            double s, c;
            exact_sincos(p, inv_freq[i], 0.0, &s, &c);
            const T cv = num<T>::from_double(__dmul_rn(c, scale));
            const T sv = num<T>::from_double(__dmul_rn(s, scale));
            const long long a = layout == 0 ? i : 2 * i;
            const long long b = layout == 0 ? i + nf : a + 1;
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
// Rows are the (up to four, after the driver merged what it could) leading axes of out:
// row = ((i0 * n1 + i1) * n2 + i2) * n3 + i3. Every array has its own element strides for them
// (0 where it is broadcast: cos/sin over batch and heads, x over a broadcast batch) and for the
// feature axis. x and out may be the same memory (in place); each pair is read completely
// before it is written and no two threads touch the same pair, so that is safe. x and out are
// therefore not __restrict__.
// layout 0: half (pairs j, j + half_rot), 1: interleaved (pairs 2j, 2j + 1).
// inverse != 0 rotates back (sin -> -sin).
// I: the offset type, int when the driver found every offset below 2**31 (cheaper index
// arithmetic), else long long.

struct strides4 {  // element strides of the four row axes and the feature axis
    long long s0, s1, s2, s3, f;
};

template <typename I> struct row_index {
    I i0, i1, i2, i3;
    __device__ __forceinline__ I offset(const strides4 &s) const
    {
        return i0 * (I)s.s0 + i1 * (I)s.s1 + i2 * (I)s.s2 + i3 * (I)s.s3;
    }
};

template <typename U, typename I>
__device__ __forceinline__ row_index<I> split_row(long long row, long long n1, long long n2,
                                                  long long n3)
{
    U r = (U)row;
    const U a3 = (U)n3, a2 = (U)n2, a1 = (U)n1;
    row_index<I> ix;
    U q = r / a3;
    ix.i3 = (I)(r - q * a3);
    r = q;
    q = r / a2;
    ix.i2 = (I)(r - q * a2);
    r = q;
    q = r / a1;
    ix.i1 = (I)(r - q * a1);
    ix.i0 = (I)q;
    return ix;
}

template <typename I>
__device__ __forceinline__ row_index<I> row_of(long long r, long long rows, long long n1,
                                               long long n2, long long n3)
{
    if (rows <= 4294967295LL)  // uniform: 32-bit division is much cheaper
        return split_row<unsigned int, I>(r, n1, n2, n3);
    return split_row<unsigned long long, I>(r, n1, n2, n3);
}

// One pair: (xa, xb) -> (xa ca - xb sa, xb cb + xa sb), each an FMA of one rounded product,
// rounded once more to the storage type.
template <typename T, typename I>
__device__ __forceinline__ void rotate_pair(const T *xr, T *orow, I a, I b, I xsf, I osf,
                                            typename num<T>::acc ca, typename num<T>::acc cb,
                                            typename num<T>::acc sa, typename num<T>::acc sb)
{
    typedef typename num<T>::acc acc;
    const acc xa = num<T>::load(xr[a * xsf]);
    const acc xb = num<T>::load(xr[b * xsf]);
    orow[a * osf] = num<T>::store(fma_rn(xa, ca, mul_rn(neg(xb), sa)));
    orow[b * osf] = num<T>::store(fma_rn(xb, cb, mul_rn(xa, sb)));
}

// Two pairs per thread through aligned vector loads and stores, when every feature stride is 1
// and the driver found every row start aligned to the pack (vec != 0): half layout, pairs
// (j, j + h) and (j + 1, j + h + 1), two 2-element packs; interleaved, four consecutive
// elements. The arithmetic is rotate_pair's, element for element.
template <typename T, int N> struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) pack {
    T v[N];
};

template <typename T, int N>
__device__ __forceinline__ pack<T, N> load_pack(const T *p)
{
    pack<T, N> r;
#ifdef ARRPOS_EMULATED
    for (int i = 0; i < N; ++i)
        r.v[i] = p[i];
#else
    if (sizeof(r) == 4) {
        *reinterpret_cast<unsigned int *>(&r) = *reinterpret_cast<const unsigned int *>(p);
    } else if (sizeof(r) == 8) {
        *reinterpret_cast<uint2_ *>(&r) = *reinterpret_cast<const uint2_ *>(p);
    } else {  // 16 or 32 bytes: 16-byte loads
        for (int i = 0; i < (int)(sizeof(r) / 16); ++i)
            reinterpret_cast<uint4_ *>(&r)[i] = reinterpret_cast<const uint4_ *>(p)[i];
    }
#endif
    return r;
}

template <typename T, int N>
__device__ __forceinline__ void store_pack(T *p, const pack<T, N> &r)
{
#ifdef ARRPOS_EMULATED
    for (int i = 0; i < N; ++i)
        p[i] = r.v[i];
#else
    if (sizeof(r) == 4) {
        *reinterpret_cast<unsigned int *>(p) = *reinterpret_cast<const unsigned int *>(&r);
    } else if (sizeof(r) == 8) {
        *reinterpret_cast<uint2_ *>(p) = *reinterpret_cast<const uint2_ *>(&r);
    } else {
        for (int i = 0; i < (int)(sizeof(r) / 16); ++i)
            reinterpret_cast<uint4_ *>(p)[i] = reinterpret_cast<const uint4_ *>(&r)[i];
    }
#endif
}

template <typename T>
__device__ __forceinline__ typename num<T>::acc signed_sin(T s, int inverse)
{
    const typename num<T>::acc v = num<T>::load(s);
    return inverse ? neg(v) : v;
}

// one pair of packs: (x[ia], y[ib]) -> (x[ia] c[ia] - y[ib] s[ia], y[ib] d[ib] + x[ia] t[ib])
template <typename T, int N>
__device__ __forceinline__ void rotate_in_packs(const pack<T, N> &x, const pack<T, N> &y,
                                                const pack<T, N> &c, const pack<T, N> &d,
                                                const pack<T, N> &s, const pack<T, N> &t,
                                                pack<T, N> &ox, pack<T, N> &oy, int ia, int ib,
                                                int inverse)
{
    typedef typename num<T>::acc acc;
    const acc xa = num<T>::load(x.v[ia]), xb = num<T>::load(y.v[ib]);
    ox.v[ia] = num<T>::store(fma_rn(xa, num<T>::load(c.v[ia]),
                                    mul_rn(neg(xb), signed_sin(s.v[ia], inverse))));
    oy.v[ib] = num<T>::store(fma_rn(xb, num<T>::load(d.v[ib]),
                                    mul_rn(xa, signed_sin(t.v[ib], inverse))));
}

template <typename T>
__device__ __forceinline__ void rotate_packs(const T *xr, T *orow, const T *cr, const T *sr,
                                             long long t, int half_rot, int layout, int inverse)
{
    if (layout == 0) {
        const long long a = 2 * t, b = a + half_rot;
        const pack<T, 2> xa = load_pack<T, 2>(xr + a), xb = load_pack<T, 2>(xr + b);
        const pack<T, 2> ca = load_pack<T, 2>(cr + a), cb = load_pack<T, 2>(cr + b);
        const pack<T, 2> sa = load_pack<T, 2>(sr + a), sb = load_pack<T, 2>(sr + b);
        pack<T, 2> oa, ob;
        rotate_in_packs<T, 2>(xa, xb, ca, cb, sa, sb, oa, ob, 0, 0, inverse);
        rotate_in_packs<T, 2>(xa, xb, ca, cb, sa, sb, oa, ob, 1, 1, inverse);
        store_pack<T, 2>(orow + a, oa);
        store_pack<T, 2>(orow + b, ob);
    } else {
        const long long a = 4 * t;
        const pack<T, 4> xv = load_pack<T, 4>(xr + a);
        const pack<T, 4> cv = load_pack<T, 4>(cr + a), sv = load_pack<T, 4>(sr + a);
        pack<T, 4> ov;
        rotate_in_packs<T, 4>(xv, xv, cv, cv, sv, sv, ov, ov, 0, 1, inverse);
        rotate_in_packs<T, 4>(xv, xv, cv, cv, sv, sv, ov, ov, 2, 3, inverse);
        store_pack<T, 4>(orow + a, ov);
    }
}

template <typename T, typename I>
__global__ void __launch_bounds__(256)
apply_rope(const T *x, T *out, const T *__restrict__ cos_t, const T *__restrict__ sin_t,
           long long rows, long long n1, long long n2, long long n3, strides4 xs, strides4 os,
           strides4 cs, strides4 ss, int half_rot, int copy_cols, int layout, int inverse,
           int vec, int chunk)
{
    typedef typename num<T>::acc acc;
    const I xsf = (I)xs.f, osf = (I)os.f, csf = (I)cs.f, ssf = (I)ss.f;
    const int rotated = vec ? half_rot / 2 : half_rot;  // items that rotate: packs or pairs
    ARRPOS_FOR_ROWS(r, rows) {
        const row_index<I> ix = row_of<I>(r, rows, n1, n2, n3);
        const T *xr = x + ix.offset(xs);
        T *orow = out + ix.offset(os);
        const T *cr = cos_t + ix.offset(cs);
        const T *sr = sin_t + ix.offset(ss);
        ARRPOS_FOR_ITEMS(jj, rotated + copy_cols, chunk) {
            const I j = (I)jj;
            if (j < rotated && vec) {
                rotate_packs<T>(xr, orow, cr, sr, jj, half_rot, layout, inverse);
            } else if (j < rotated) {
                const I a = layout == 0 ? j : 2 * j;
                const I b = layout == 0 ? a + half_rot : a + 1;
                acc sa = num<T>::load(sr[a * ssf]);
                acc sb = num<T>::load(sr[b * ssf]);
                if (inverse) {
                    sa = neg(sa);
                    sb = neg(sb);
                }
                rotate_pair<T, I>(xr, orow, a, b, xsf, osf, num<T>::load(cr[a * csf]),
                                  num<T>::load(cr[b * csf]), sa, sb);
            } else {
                const I col = 2 * (I)half_rot + (j - rotated);
                orow[col * osf] = xr[col * xsf];  // pass-through features, bit for bit
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fused RoPE from half-width caches (ONNX RotaryEmbedding): pair j of a row turns by
// cos_c[id, j] and sin_c[id, j] with id = ids[row] (int64, broadcast through zero strides),
// i.e. apply_rope on the widened gathered tables without materialising them. Ids are clamped
// into [0, max_pos) so that no thread reads outside the caches; the driver's caller has
// checked them. Cache strides in elements: row (cr, sr) and column (cc, sc).

// Two pairs per thread (vec != 0: feature and cache column strides 1, rows aligned): one
// 2-element pack of each cache serves both halves (half layout) or is widened to the four
// interleaved elements; the arithmetic is the pair-by-pair path's.
template <typename T>
__device__ __forceinline__ void rotate_cached_packs(const T *xr, T *orow, const T *crow,
                                                    const T *srow, long long t, int half_rot,
                                                    int layout, int inverse)
{
    const pack<T, 2> c = load_pack<T, 2>(crow + 2 * t), s = load_pack<T, 2>(srow + 2 * t);
    if (layout == 0) {
        const long long a = 2 * t, b = a + half_rot;
        const pack<T, 2> xa = load_pack<T, 2>(xr + a), xb = load_pack<T, 2>(xr + b);
        pack<T, 2> oa, ob;
        rotate_in_packs<T, 2>(xa, xb, c, c, s, s, oa, ob, 0, 0, inverse);
        rotate_in_packs<T, 2>(xa, xb, c, c, s, s, oa, ob, 1, 1, inverse);
        store_pack<T, 2>(orow + a, oa);
        store_pack<T, 2>(orow + b, ob);
    } else {
        const pack<T, 4> cv = {{c.v[0], c.v[0], c.v[1], c.v[1]}};
        const pack<T, 4> sv = {{s.v[0], s.v[0], s.v[1], s.v[1]}};
        const pack<T, 4> xv = load_pack<T, 4>(xr + 4 * t);
        pack<T, 4> ov;
        rotate_in_packs<T, 4>(xv, xv, cv, cv, sv, sv, ov, ov, 0, 1, inverse);
        rotate_in_packs<T, 4>(xv, xv, cv, cv, sv, sv, ov, ov, 2, 3, inverse);
        store_pack<T, 4>(orow + 4 * t, ov);
    }
}

template <typename T, typename I>
__global__ void __launch_bounds__(256)
apply_rope_cached(const T *x, T *out, const T *__restrict__ cos_c, const T *__restrict__ sin_c,
                  const long long *__restrict__ ids, long long rows, long long n1, long long n2,
                  long long n3, strides4 xs, strides4 os, strides4 is, long long cr,
                  long long cc, long long sr, long long sc, long long max_pos, int half_rot,
                  int copy_cols, int layout, int inverse, int vec, int chunk)
{
    typedef typename num<T>::acc acc;
    const I xsf = (I)xs.f, osf = (I)os.f;
    const int rotated = vec ? half_rot / 2 : half_rot;
    ARRPOS_FOR_ROWS(r, rows) {
        const row_index<I> ix = row_of<I>(r, rows, n1, n2, n3);
        const T *xr = x + ix.offset(xs);
        T *orow = out + ix.offset(os);
        long long id = ids[ix.offset(is)];
        id = id < 0 ? 0 : (id >= max_pos ? max_pos - 1 : id);
        const T *crow = cos_c + id * cr;
        const T *srow = sin_c + id * sr;
        ARRPOS_FOR_ITEMS(jj, rotated + copy_cols, chunk) {
            const I j = (I)jj;
            if (j < rotated && vec) {
                rotate_cached_packs<T>(xr, orow, crow, srow, jj, half_rot, layout, inverse);
            } else if (j < rotated) {
                const I a = layout == 0 ? j : 2 * j;
                const I b = layout == 0 ? a + half_rot : a + 1;
                const acc c = num<T>::load(crow[j * cc]);
                const acc s0 = num<T>::load(srow[j * sc]);
                const acc s = inverse ? neg(s0) : s0;
                rotate_pair<T, I>(xr, orow, a, b, xsf, osf, c, c, s, s);
            } else {
                const I col = 2 * (I)half_rot + (j - rotated);
                orow[col * osf] = xr[col * xsf];
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
           long long q_len, long long k_len, long long query_offset, int mode, int chunk)
{
    const long long rows = heads * q_len;
    ARRPOS_FOR_ROWS(r, rows) {
        const long long h = r / q_len;  // once per row, not per element
        const long long q_pos = (r - h * q_len) + query_offset;
        const double slope = slopes[h];
        T *row = out + r * k_len;
        ARRPOS_FOR_ITEMS(j, k_len, chunk) {
            // slope * (k_pos - q_pos) rather than -slope * (q_pos - k_pos): +0.0 on the
            // diagonal, as the generic code gives
            const long long back = j - q_pos;
            double v;
            if (mode == 0)
                v = back <= 0 ? __dmul_rn(slope, (double)back) : 0.0;
            else if (mode == 1)
                v = __dmul_rn(slope, (double)(back > 0 ? -back : back));
            else
                v = __dmul_rn(slope, (double)j);
            row[j] = num<T>::from_double(v);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ALiBi of given positions: out (lead, heads, q_len, k_len), C-contiguous, from float64 slopes;
// positions qp (lead, q_len) and kp (lead, k_len), C-contiguous, both int64 (ints != 0: the
// distance is an exact int64 difference) or both float64 (a float64 difference). With
// back = k_pos - q_pos: mode 0 causal min(back, 0), 1 symmetric 0 - |back| (+0.0 at 0),
// 2 key k_pos, 3 BLOOM's mask: kp (int64) holds the inclusive cumulative sum c of a 0/1 mask
// row, the position is c[j] - 1 where the mask is 1 (c[j] != c[j - 1]) and 0 elsewhere; qp is
// not read. The product slope * distance is formed in double and rounded once (the host
// kernels' store_exact; for float32 positions below 2**24 the float32 product itself).

template <typename T>
__global__ void __launch_bounds__(256)
alibi_bias_from_positions(T *__restrict__ out, const double *__restrict__ slopes,
                          const void *__restrict__ qp, const void *__restrict__ kp,
                          long long lead, long long heads, long long q_len, long long k_len,
                          int ints, int mode, int chunk)
{
    const long long rows = lead * heads * q_len;
    ARRPOS_FOR_ROWS(r, rows) {
        const long long plane = r / q_len;  // once per row, not per element
        const long long i = r - plane * q_len;
        const long long l = plane / heads;
        const double slope = slopes[plane - l * heads];
        T *row = out + r * k_len;
        if (ints) {
            const long long *kr = (const long long *)kp + l * k_len;
            const long long qi = mode < 2 ? ((const long long *)qp)[l * q_len + i] : 0;
            ARRPOS_FOR_ITEMS(j, k_len, chunk) {
                const long long kj = kr[j];
                long long d;
                if (mode == 2) {
                    d = kj;
                } else if (mode == 3) {
                    d = kj != (j > 0 ? kr[j - 1] : 0) ? kj - 1 : 0;
                } else {
                    const long long back = kj - qi;
                    d = back < 0 ? back : (mode == 0 ? 0 : -back);
                }
                row[j] = num<T>::from_double(__dmul_rn(slope, (double)d));
            }
        } else {
            const double *kr = (const double *)kp + l * k_len;
            const double qi = mode < 2 ? ((const double *)qp)[l * q_len + i] : 0.0;
            ARRPOS_FOR_ITEMS(j, k_len, chunk) {
                const double kj = kr[j];
                double d;
                if (mode == 2) {
                    d = kj;
                } else {
                    const double back = __dadd_rn(kj, -qi);
                    if (mode == 0)
                        d = back < 0 ? back : 0.0;
                    else  // 0 - |back|: +0.0 where the distance is 0 (either zero's sign)
                        d = __dadd_rn(0.0, back < 0 ? back : -back);
                }
                row[j] = num<T>::from_double(__dmul_rn(slope, d));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Relative-bias gather: out[h, p] = table[index[p], h] for out (heads, n) C-contiguous, int64
// ids (n,) C-contiguous, and the table (buckets, heads) through its element strides (row tr,
// column tc). A bit copy, so any storage type. Ids are clamped into [0, buckets) so that no
// thread reads outside the table; the caller has checked them (a ValueError naming index).

template <typename T>
__global__ void __launch_bounds__(256)
relative_bias(T *__restrict__ out, const T *__restrict__ table,
              const long long *__restrict__ index, long long heads, long long n,
              long long buckets, long long tr, long long tc, int chunk)
{
    ARRPOS_FOR_ROWS(h, heads) {
        const T *col = table + h * tc;
        T *row = out + h * n;
        ARRPOS_FOR_ITEMS(p, n, chunk) {
            long long id = index[p];
            id = id < 0 ? 0 : (id >= buckets ? buckets - 1 : id);
            row[p] = col[id * tr];
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Depthwise convolution (conv_positional, conv_positional_2d): x and out (outer, H, W, C),
// C-contiguous, of T; weights (kh, kw, C) and bias (C,) of T's compute type C (float32 for
// 16-bit x). Each output is the host kernel's (csrc/conv.inc) operation for operation, every
// sum and product rounded as written: the taps summed in the order a over kh, b over kw (a tap
// outside the grid adds 0 * weight), + bias, the activation, + x, one rounding to T. The
// activations use the host kernel's exp (exp_c), erfc series and float32 tanh; float64 tanh is
// this file's own (a few ulps from the host's std::tanh).

// exp(hi + lo) (csrc/conv.inc's exp_sum): Cody-Waite reduction and cephes' float polynomial (a
// degree-13 Taylor series in double), scaled by 2**n in two halves (subnormal results and
// overflow to inf right); NaN stays NaN. hi + lo is never rounded: n comes from it, but
// r = (hi - n ln2_hi) + (lo - n ln2_lo).
__device__ __forceinline__ float exp_c(float hi, float lo)
{
    const float x = add_rn(hi, lo);
    const bool low = lt(x, -104.0f), high = lt(89.0f, x);  // NaN: neither
    const float xc = low ? -104.0f : (high ? 89.0f : x);
    hi = low ? -104.0f : (high ? 89.0f : hi);
    lo = (low || high) ? 0.0f : lo;
    const float magic = 12582912.0f;  // 1.5 * 2**23: adding it rounds to an integer
    const float kd = add_rn(mul_rn(xc, 1.44269504088896341f), magic);
    const float n = sub_rn(kd, magic);
    const int ni = (int)__float_as_uint(kd) - (int)__float_as_uint(magic);
    const int n1 = ni >> 1, n2 = ni - n1;
    const float r = add_rn(sub_rn(hi, mul_rn(n, 0.693359375f)),
                           sub_rn(lo, mul_rn(n, -2.12194440e-4f)));
    const float z = mul_rn(r, r);
    float p = add_rn(mul_rn(1.9875691500e-4f, r), 1.3981999507e-3f);
    p = add_rn(mul_rn(p, r), 8.3334519073e-3f);
    p = add_rn(mul_rn(p, r), 4.1665795894e-2f);
    p = add_rn(mul_rn(p, r), 1.6666665459e-1f);
    p = add_rn(mul_rn(p, r), 5.0000001201e-1f);
    const float y = add_rn(add_rn(mul_rn(p, z), r), 1.0f);
    const float s1 = __uint_as_float((unsigned int)(n1 + 127) << 23);
    const float s2 = __uint_as_float((unsigned int)(n2 + 127) << 23);
    return mul_rn(mul_rn(y, s1), s2);
}

__device__ __forceinline__ double exp_c(double hi, double lo)
{
    const double x = add_rn(hi, lo);
    const bool low = lt(x, -746.0), high = lt(710.0, x);  // NaN: neither
    const double xc = low ? -746.0 : (high ? 710.0 : x);
    hi = low ? -746.0 : (high ? 710.0 : hi);
    lo = (low || high) ? 0.0 : lo;
    const double magic = 6755399441055744.0;  // 1.5 * 2**52
    const double kd = add_rn(mul_rn(xc, 1.4426950408889634), magic);
    const double n = sub_rn(kd, magic);
    const long long ni = __double_as_longlong(kd) - __double_as_longlong(magic);
    const long long n1 = ni >> 1, n2 = ni - n1;
    const double r = add_rn(sub_rn(hi, mul_rn(n, 6.93145751953125e-1)),
                            sub_rn(lo, mul_rn(n, 1.42860682030941723212e-6)));
    double y = 1.0 / 6227020800.0;  // 1/13!
    y = add_rn(mul_rn(y, r), 1.0 / 479001600.0);
    y = add_rn(mul_rn(y, r), 1.0 / 39916800.0);
    y = add_rn(mul_rn(y, r), 1.0 / 3628800.0);
    y = add_rn(mul_rn(y, r), 1.0 / 362880.0);
    y = add_rn(mul_rn(y, r), 1.0 / 40320.0);
    y = add_rn(mul_rn(y, r), 1.0 / 5040.0);
    y = add_rn(mul_rn(y, r), 1.0 / 720.0);
    y = add_rn(mul_rn(y, r), 1.0 / 120.0);
    y = add_rn(mul_rn(y, r), 1.0 / 24.0);
    y = add_rn(mul_rn(y, r), 1.0 / 6.0);
    y = add_rn(mul_rn(y, r), 0.5);
    y = add_rn(add_rn(mul_rn(mul_rn(y, r), r), r), 1.0);
    const double s1 = __longlong_as_double((long long)((unsigned long long)(n1 + 1023) << 52));
    const double s2 = __longlong_as_double((long long)((unsigned long long)(n2 + 1023) << 52));
    return mul_rn(mul_rn(y, s1), s2);
}

// The exact GELU x Phi(x) = x erfc(-x / sqrt 2) / 2: erfc(z) = t exp(-z^2 + f(t)), t = 2 / (2
// + z), f a 30-term Chebyshev series (arrpos/_backends/_xp.py's _ERFC_CHEB, rounded to C)
// summed by Clenshaw; exp(-z^2) from an exact split of z.
template <typename C>
__device__ __forceinline__ C gelu_c(C v)
{
    C a = lt(v, C(0)) ? neg(v) : v;
    a = lt(C(64), a) ? C(64) : a;
    const C z = mul_rn(a, C(0.7071067811865475));
    const C t = div_rn(C(2), add_rn(C(2), z));
    const C y2 = mul_rn(C(2), sub_rn(mul_rn(C(2), t), C(1)));
    C d = C(0), dd = C(0);
#define ARRPOS_CLENSHAW(c)                                                                       \
    {                                                                                            \
        const C nd = add_rn(sub_rn(mul_rn(y2, d), dd), C(c));                                    \
        dd = d;                                                                                  \
        d = nd;                                                                                  \
    }
    if (sizeof(C) == 8) {  // float: the first 14 terms
        ARRPOS_CLENSHAW(2.3281042579529253e-18)
        ARRPOS_CLENSHAW(5.003005559445902e-20)
        ARRPOS_CLENSHAW(-2.816663087747177e-17)
        ARRPOS_CLENSHAW(1.210237189224279e-16)
        ARRPOS_CLENSHAW(-9.457494571291233e-17)
        ARRPOS_CLENSHAW(-1.5230282014571043e-15)
        ARRPOS_CLENSHAW(7.106097613609237e-15)
        ARRPOS_CLENSHAW(3.810905255189232e-16)
        ARRPOS_CLENSHAW(-1.1270822361367252e-13)
        ARRPOS_CLENSHAW(3.130921399342958e-13)
        ARRPOS_CLENSHAW(8.944879273090725e-13)
        ARRPOS_CLENSHAW(-6.886027526497553e-12)
        ARRPOS_CLENSHAW(2.3940380830391146e-12)
        ARRPOS_CLENSHAW(9.646791102015527e-11)
        ARRPOS_CLENSHAW(-2.273651222931836e-10)
        ARRPOS_CLENSHAW(-9.91364156493033e-10)
    }
    ARRPOS_CLENSHAW(5.059343495551469e-09)
    ARRPOS_CLENSHAW(6.5290544390988515e-09)
    ARRPOS_CLENSHAW(-8.523809591492654e-08)
    ARRPOS_CLENSHAW(1.5626441722066142e-08)
    ARRPOS_CLENSHAW(1.3036558355805232e-06)
    ARRPOS_CLENSHAW(-1.6242900046470256e-06)
    ARRPOS_CLENSHAW(-2.0278578112534242e-05)
    ARRPOS_CLENSHAW(4.252332480690777e-05)
    ARRPOS_CLENSHAW(0.00036683949785276145)
    ARRPOS_CLENSHAW(-0.0009465953444820369)
    ARRPOS_CLENSHAW(-0.009561514786808632)
    ARRPOS_CLENSHAW(0.019476473204185836)
    ARRPOS_CLENSHAW(0.6419697923564902)
#undef ARRPOS_CLENSHAW
    const C f = add_rn(sub_rn(mul_rn(mul_rn(C(0.5), y2), d), dd), C(-0.6513268598908547));
    const C split = sizeof(C) == 8 ? C(134217729.0) : C(4097.0);
    const C s = mul_rn(split, a);
    const C hi = sub_rn(s, sub_rn(s, a));
    const C lo = sub_rn(a, hi);
    const C big = mul_rn(mul_rn(hi, hi), C(0.5));
    const C small = mul_rn(mul_rn(lo, add_rn(a, hi)), C(0.5));
    const C e = mul_rn(t, exp_c(neg(big), sub_rn(f, small)));  // one exp, as the host's
    const C erfc = le(v, C(0)) ? e : sub_rn(C(2), e);
    const C vc = lt(v, C(-64)) ? C(-64) : v;
    return mul_rn(mul_rn(C(0.5), vc), erfc);
}

// float32 tanh (the host kernel's): an odd Taylor polynomial below |x| = 0.3,
// 1 - 2 / (exp(2|x|) + 1) above; NaN and -0 kept.
__device__ __forceinline__ float tanh_c(float x)
{
    const float a = lt(x, 0.0f) ? neg(x) : x;
    const float e = exp_c(mul_rn(2.0f, lt(20.0f, a) ? 20.0f : a), 0.0f);
    const float x2 = mul_rn(x, x);
    float p = -929569.0f / 638512875.0f;
    p = add_rn(mul_rn(p, x2), 21844.0f / 6081075.0f);
    p = add_rn(mul_rn(p, x2), neg(1382.0f / 155925.0f));
    p = add_rn(mul_rn(p, x2), 62.0f / 2835.0f);
    p = add_rn(mul_rn(p, x2), neg(17.0f / 315.0f));
    p = add_rn(mul_rn(p, x2), 2.0f / 15.0f);
    p = add_rn(mul_rn(p, x2), neg(1.0f / 3.0f));
    const float small = add_rn(x, mul_rn(x, mul_rn(x2, p)));
    const float big = sub_rn(1.0f, div_rn(2.0f, add_rn(e, 1.0f)));
    const float r = lt(a, 0.3f) ? small : (lt(x, 0.0f) ? neg(big) : big);
    const unsigned int mag = __float_as_uint(x) & 0x7fffffffu;
    return (mag > 0x7f800000u || mag == 0) ? x : r;  // NaN, +0 and -0 as they are
}

// float64: the odd Taylor series to x**25 below |x| = 0.3 (the first term dropped is under
// 1e-18 relative there), 1 - 2 / (exp(2|x|) + 1) above (a few ulps: the subtraction loses
// under two bits at 0.3). Not the device library's tanh, whose PTX holds .ftz instructions.
__device__ __forceinline__ double tanh_c(double x)
{
    const double a = x < 0.0 ? -x : x;
    const double x2 = mul_rn(x, x);
    double p = 58870668456604.0 / 3698160658676859375.0;
    p = add_rn(mul_rn(p, x2), -113927491862.0 / 2900518163668125.0);
    p = add_rn(mul_rn(p, x2), 18888466084.0 / 194896477400625.0);
    p = add_rn(mul_rn(p, x2), -443861162.0 / 1856156927625.0);
    p = add_rn(mul_rn(p, x2), 6404582.0 / 10854718875.0);
    p = add_rn(mul_rn(p, x2), -929569.0 / 638512875.0);
    p = add_rn(mul_rn(p, x2), 21844.0 / 6081075.0);
    p = add_rn(mul_rn(p, x2), -1382.0 / 155925.0);
    p = add_rn(mul_rn(p, x2), 62.0 / 2835.0);
    p = add_rn(mul_rn(p, x2), -17.0 / 315.0);
    p = add_rn(mul_rn(p, x2), 2.0 / 15.0);
    p = add_rn(mul_rn(p, x2), -1.0 / 3.0);
    if (a < 0.3)
        return x == 0.0 ? x : add_rn(x, mul_rn(x, mul_rn(x2, p)));  // -0 stays -0
    const double e = exp_c(mul_rn(2.0, a > 20.0 ? 20.0 : a), 0.0);  // tanh is 1 from 19.1 on
    const double big = sub_rn(1.0, div_rn(2.0, add_rn(e, 1.0)));
    return x != x ? x : (x < 0.0 ? -big : big);
}

template <typename T>
__global__ void __launch_bounds__(256)
conv_positional(T *__restrict__ out, const T *__restrict__ x,
                const typename num<T>::acc *__restrict__ w,
                const typename num<T>::acc *__restrict__ bias, long long outer, long long H,
                long long W, long long C, int kh, int kw, int top, int left, int has_bias,
                int act, int residual, int chunk)
{
    typedef typename num<T>::acc acc_t;
    const long long rows = outer * H * W;
    ARRPOS_FOR_ROWS(r, rows) {
        const long long ow = r / W;  // once per pixel: (o, h) and w
        const long long wc = r - ow * W;
        const long long o = ow / H;
        const long long hc = ow - o * H;
        const T *plane = x + o * H * W * C;
        ARRPOS_FOR_ITEMS(c, C, chunk) {
            acc_t s = acc_t(0);
            for (int a = 0; a < kh; ++a) {
                const long long hh = hc + a - top;
                for (int b = 0; b < kw; ++b) {
                    const long long ww = wc + b - left;
                    const acc_t wv = w[((long long)a * kw + b) * C + c];
                    const acc_t xv = hh >= 0 && hh < H && ww >= 0 && ww < W
                                         ? num<T>::load(plane[(hh * W + ww) * C + c])
                                         : acc_t(0);
                    const acc_t term = mul_rn(xv, wv);
                    s = a == 0 && b == 0 ? term : add_rn(s, term);
                }
            }
            if (has_bias)
                s = add_rn(s, bias[c]);
            if (act == 1)
                s = gelu_c(s);
            else if (act == 2)
                s = tanh_c(s);
            if (residual)
                s = add_rn(s, num<T>::load(x[r * C + c]));
            out[r * C + c] = num<T>::store(s);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Separable resampling (resample_grid): x (outer, H, W, C) of T through element strides; out
// (outer, plane) C-contiguous planes whose element plane_prefix + (ho * Wo + wo) * C + c is
// output (ho, wo, c). This launch writes rows ho in [h0, h0 + nh) and columns wo in [w0, w0 +
// nw): taps of row ho - h0 at t.w / t.idx [(ho - h0) * th, ...), of column wo - w0 at
// [nh * th + (wo - w0) * tw, ...); th = 0 (tw = 0): the axis keeps its length. As the host
// kernel (csrc/resample.inc) and the generic path: in double, the first axis first, each
// product rounded, then added in tap order (the first product not added to a zero), the
// second axis over the first's sums, one rounding to T.

__device__ __forceinline__ double widen(float v) { return float_to_double(v); }
__device__ __forceinline__ double widen(double v) { return v; }

template <typename T>
__device__ __forceinline__ double first_axis(const T *__restrict__ col, const taps_block &t,
                                             int base, int th, long long xs_h)
{
    if (th == 0)
        return widen(num<T>::load(*col));
    double s = mul_rn(t.w[base], widen(num<T>::load(col[t.idx[base] * xs_h])));
    for (int k = 1; k < th; ++k)
        s = add_rn(s, mul_rn(t.w[base + k], widen(num<T>::load(col[t.idx[base + k] * xs_h]))));
    return s;
}

template <typename T>
__global__ void __launch_bounds__(256)
resample_grid(T *__restrict__ out, const T *__restrict__ x, const taps_block t,
              long long outer, long long h0, long long nh, long long w0, long long nw,
              long long wo_len, long long C, long long plane, long long plane_prefix,
              long long xs_o, long long xs_h, long long xs_w, long long xs_c, int th, int tw,
              int chunk)
{
    const long long rows = outer * nh * nw;
    ARRPOS_FOR_ROWS(r, rows) {
        const long long ohl = r / nw;  // once per output pixel: (o, ho) and wo
        const long long wl = r - ohl * nw;
        const long long o = ohl / nh;
        const long long hl = ohl - o * nh;
        const int hbase = (int)(hl * th), wbase = (int)(nh * th + wl * tw);
        // a row kept (th = 0) is read at its own index
        const T *src = x + o * xs_o + (th == 0 ? (h0 + hl) * xs_h : 0);
        T *dst = out + o * plane + plane_prefix + ((h0 + hl) * wo_len + w0 + wl) * C;
        ARRPOS_FOR_ITEMS(c, C, chunk) {
            const T *col = src + c * xs_c;
            double s;
            if (tw == 0) {
                s = first_axis(col + (w0 + wl) * xs_w, t, hbase, th, xs_h);
            } else {
                s = mul_rn(t.w[wbase], first_axis(col + t.idx[wbase] * xs_w, t, hbase, th,
                                                  xs_h));
                for (int k = 1; k < tw; ++k)
                    s = add_rn(s, mul_rn(t.w[wbase + k],
                                         first_axis(col + t.idx[wbase + k] * xs_w, t, hbase,
                                                    th, xs_h)));
            }
            dst[c] = num<T>::from_double(s);
        }
    }
}

}  // namespace arrpos
