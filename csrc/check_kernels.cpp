// Kernel equivalence driver: every kernel at every SIMD level this CPU runs, against the
// portable level's results computed in the same process, bit for bit (NaN at the same places;
// a NaN's payload and sign follow the operand order the compiler picked, which IEEE leaves
// open, as tests/test_adversarial_kernels.py compares). No Python: it includes the kernel
// headers directly, so it runs under qemu-user (aarch64) and Wine, and natively here.
//
//   g++ -std=c++17 -O2 -ffp-contract=off -fno-math-errno -fno-trapping-math -pthread -Icsrc
//       csrc/check_kernels.cpp -o check_kernels
//   ./check_kernels [--expect LEVEL_NAME] [--exhaustive] [--quick]
//
// --expect NAME: fail unless NAME (neon, avx512-bf16, ...) is the level this CPU selects.
// --exhaustive: the scalar 16-bit conversions of types.hpp on every float32 (and float16)
// input against the branching forms they replaced (native runs: seconds; emulated: too slow).
// --quick: fewer sizes (emulated runs).
//
// What runs: apply_rope (tables given) and apply_rope_cached (gathered from half-width
// caches), every storage pair the extension serves (f32, f64, f16, f16 x f32 tables, bf16,
// bf16 x f32 tables), both layouts, inverse, partial rotary, in place, tables broadcast over
// heads, ids broadcast, odd sizes, inputs and outputs at every misalignment, one and two
// threads, streaming stores asked for (x86); every 16-bit pattern and a sweep of float32 bit
// patterns through each level's widening and narrowing; sinusoid and RoPE cos/sin tables in
// every layout and storage type (integer, huge and fractional positions, subnormal results,
// scales to the ends of the range, rows wider than the table, misaligned outputs, streamed);
// the streaming copy and fill. The family kernels (families.hpp, conv.inc), each also against
// a scalar reference written here from the generic path's definition: alibi_bias in its three
// modes with query offsets, alibi_bias_from_positions (int64 and float64 positions),
// alibi_bias_from_mask (8- to 64-bit masks; values other than 0 and 1 refused) equal to the
// exact product rounded once; the relative-bias gather (1-D and 2-D int32/int64 indices,
// shifted rows on the window path and others on the tile path, indices out of range refused)
// and the windows of a bias of j - i alone (toeplitz) equal to the table's bits; the
// depthwise convolution (1-D and 2-D, bias, residual, channels past a tile) with its sums bit
// for bit and its exact GELU and tanh within 8 ulps of the working type
// (tests/test_conv_kernels.py's bound); resample (taps along either axis or
// both, one to nine a side, strided input) equal to its float64 sums rounded once; every
// storage type, ragged shapes, misaligned outputs, one and two threads, streamed. clip_shift
// (clip.hpp: every integer input into its own signed type or int64, strided and reversed
// inputs, bounds up to half of int64 and past the input's range) equal to the exact integers.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "clip.hpp"
#include "families.hpp"
#include "kernels.hpp"
#include "memory.hpp"

using namespace arrpos;

namespace {

// ---- deterministic random numbers ------------------------------------------------------------
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ULL + 1) {}
    uint64_t next()  // splitmix64
    {
        uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return z ^ (z >> 31);
    }
    double uniform(double lo, double hi) { return lo + (hi - lo) * (next() >> 11) * 0x1p-53; }
    int64_t below(int64_t n) { return (int64_t)(next() % (uint64_t)n); }
};

int g_failures = 0;
long g_checked = 0;

// ---- storage types ---------------------------------------------------------------------------
template <class T> struct Info;
template <> struct Info<float> {
    static const char *name() { return "f32"; }
    static bool isnan(const void *p) { float v; std::memcpy(&v, p, 4); return v != v; }
    static double value(const void *p) { float v; std::memcpy(&v, p, 4); return v; }
};
template <> struct Info<double> {
    static const char *name() { return "f64"; }
    static bool isnan(const void *p) { double v; std::memcpy(&v, p, 8); return v != v; }
    static double value(const void *p) { double v; std::memcpy(&v, p, 8); return v; }
};
template <> struct Info<f16> {
    static const char *name() { return "f16"; }
    static bool isnan(const void *p)
    {
        uint16_t b;
        std::memcpy(&b, p, 2);
        return (b & 0x7fff) > 0x7c00;
    }
    static double value(const void *p) { f16 h; std::memcpy(&h, p, 2); return widen(h); }
};
template <> struct Info<bf16> {
    static const char *name() { return "bf16"; }
    static bool isnan(const void *p)
    {
        uint16_t b;
        std::memcpy(&b, p, 2);
        return (b & 0x7fff) > 0x7f80;
    }
    static double value(const void *p) { bf16 h; std::memcpy(&h, p, 2); return widen(h); }
};

template <class T> T from_double(double v);
template <> float from_double<float>(double v) { return (float)v; }
template <> double from_double<double>(double v) { return v; }
template <> f16 from_double<f16>(double v) { return narrow_f16((float)v); }
template <> bf16 from_double<bf16>(double v) { return narrow_bf16((float)v); }

// "wild" values: magnitudes over the type's whole range (products subnormal to overflowing),
// zeros, infinities and NaNs; float32 (tables) also NaNs of every payload
template <class T> void wild(Rng &rng, T *p, ptrdiff_t n)
{
    double lo = -46, hi = 38;
    if (std::is_same<T, double>::value) { lo = -330; hi = 308; }
    if (std::is_same<T, f16>::value) { lo = -9; hi = 4.8; }
    for (ptrdiff_t i = 0; i < n; i++) {
        const int64_t kind = rng.below(20);
        double v = (rng.next() & 1 ? -1.0 : 1.0) * std::pow(10.0, rng.uniform(lo, hi));
        if (kind == 0) v = 0.0;
        if (kind == 1) v = INFINITY;
        if (kind == 2) v = -INFINITY;
        if (kind == 3) v = NAN;
        p[i] = from_double<T>(v);
        if (std::is_same<T, float>::value && kind == 4) {  // any NaN payload, either sign
            uint32_t u = (0x7f800001u + (uint32_t)rng.below(0x7fffff))
                         | (uint32_t)(rng.next() & 1) << 31;
            std::memcpy((char *)(p + i), &u, 4);
        }
    }
}

// ---- aligned buffers -------------------------------------------------------------------------
struct Buf {
    std::vector<char> mem;
    char *p;
    Buf(size_t bytes, size_t offset)  // p: offset bytes past a 64-byte boundary
        : mem(bytes + 128), p((char *)(((uintptr_t)mem.data() + 63) & ~(uintptr_t)63) + offset)
    {
    }
};

// Compare an output with the reference: the same bits, or NaN in both.
template <class T>
bool same(const char *ref, const char *got, ptrdiff_t n, const std::string &what)
{
    g_checked++;
    for (ptrdiff_t i = 0; i < n; i++) {
        const char *a = ref + i * sizeof(T), *b = got + i * sizeof(T);
        if (std::memcmp(a, b, sizeof(T)) == 0 || (Info<T>::isnan(a) && Info<T>::isnan(b)))
            continue;
        if (g_failures < 30)
            std::printf("DIFF %s: element %td: %.17g vs %.17g\n", what.c_str(), i,
                        Info<T>::value(a), Info<T>::value(b));
        g_failures++;
        return false;
    }
    return true;
}

std::vector<int> levels()
{
    std::vector<int> v;
    for (int l = 0; l <= cpu_level(); l++)
        v.push_back(l);
    return v;
}

// ---- apply ------------------------------------------------------------------------------------
struct Arr {  // a strided array over a buffer (byte strides)
    char *data;
    std::vector<ptrdiff_t> shape, strides;
    Strided s() const { return Strided{data, (int)shape.size(), shape.data(), strides.data()}; }
};

Arr contiguous(char *data, std::vector<ptrdiff_t> shape, ptrdiff_t item)
{
    Arr a{data, shape, std::vector<ptrdiff_t>(shape.size())};
    ptrdiff_t st = item;
    for (int k = (int)shape.size() - 1; k >= 0; k--) {
        a.strides[k] = shape[k] == 1 ? 0 : st;  // (size-1 axes broadcast)
        st *= shape[k];
    }
    return a;
}

ptrdiff_t count(const std::vector<ptrdiff_t> &shape)
{
    ptrdiff_t n = 1;
    for (ptrdiff_t v : shape)
        n *= v;
    return n;
}

struct ApplyCase {
    std::vector<ptrdiff_t> xshape;  // (..., D)
    std::vector<ptrdiff_t> tshape;  // tables (..., R) (broadcasting), or caches (P, R/2)
    std::vector<ptrdiff_t> pshape;  // ids (gather), aligned right of x's leading axes
    bool gather, interleaved, inverse;
};

template <class T, class Tc>
void check_apply(Rng &rng, const ApplyCase &c, const std::string &name)
{
    const ptrdiff_t it = sizeof(T), itc = sizeof(Tc), nx = count(c.xshape);
    const ptrdiff_t nt = count(c.tshape);
    std::vector<T> x(nx);
    std::vector<Tc> cs(nt), sn(nt);
    wild(rng, x.data(), nx);
    wild(rng, cs.data(), nt);
    wild(rng, sn.data(), nt);
    std::vector<int64_t> ids(c.gather ? count(c.pshape) : 0);
    for (auto &v : ids)
        v = rng.below(c.tshape[0]);
    Buf tc(nt * itc, 0), ts(nt * itc, 0);
    std::memcpy(tc.p, cs.data(), nt * itc);
    std::memcpy(ts.p, sn.data(), nt * itc);
    Arr ac = contiguous(tc.p, c.tshape, itc), as = contiguous(ts.p, c.tshape, itc);
    if (c.gather) {  // caches: 2-d, row stride kept even for one row
        ac.strides[0] = as.strides[0] = c.tshape[1] * itc;
    }
    Arr ap = contiguous((char *)ids.data(), c.pshape, sizeof(int64_t));
    std::vector<char> ref;
    struct Variant {
        int threads;
        ptrdiff_t chunk;
        bool stream, inplace;
        size_t xoff, ooff;
    };
    const size_t e = sizeof(T);
    const Variant variants[] = {
        {1, 1 << 18, false, false, 0, 0},  // (the reference, at level 0)
        {2, 64, true, false, 0, 0},
        {2, 64, true, false, 16, 48},
        {1, 1 << 18, true, false, e, 32},
        {1, 1 << 18, false, false, 0, e},
        {1, 1 << 18, false, true, 0, 0},
        {2, 64, true, true, e, e},
    };
    for (int level : levels()) {
        set_simd_level(level);
        for (const Variant &v : variants) {
            Buf xb(nx * it, v.xoff), ob(nx * it, v.ooff);
            std::memcpy(xb.p, x.data(), nx * it);
            if (v.inplace)
                std::memcpy(ob.p, x.data(), nx * it);
            else
                std::memset(ob.p, 0x5a, nx * it);
            Arr ax = contiguous(v.inplace ? ob.p : xb.p, c.xshape, it);
            Arr ao = contiguous(ob.p, c.xshape, it);
            ApplyArgs a;
            a.x = ax.s();
            a.out = ao.s();
            a.cos = ac.s();
            a.sin = as.s();
            a.pos = c.gather ? ap.s() : Strided{nullptr, 0, nullptr, nullptr};
            a.interleaved = c.interleaved;
            a.inverse = c.inverse;
            a.stream = v.stream;
            a.dry = false;
            a.nthreads = v.threads;
            a.chunk_bytes = v.chunk;
            const int st = rope_apply<T, Tc>(a);
            char what[512];
            std::snprintf(what, sizeof what, "%s %s x %s level %s threads %d stream %d inplace %d"
                          " offsets %zu %zu", name.c_str(), Info<T>::name(), Info<Tc>::name(),
                          simd_level_name(level), v.threads, v.stream, v.inplace, v.xoff,
                          v.ooff);
            if (st != OK) {
                std::printf("FAIL %s: status %d\n", what, st);
                g_failures++;
                continue;
            }
            if (ref.empty()) {
                ref.assign(ob.p, ob.p + nx * it);
                continue;
            }
            same<T>(ref.data(), ob.p, nx, what);
        }
    }
}

template <class T, class Tc>
void apply_suite(Rng &rng, bool quick)
{
    // every tail length of every vector width; 600: rows of several portable pieces
    const ptrdiff_t Rs_full[] = {2, 6, 10, 34, 40, 44, 64, 70, 130, 600};
    const ptrdiff_t Rs_quick[] = {2, 10, 40, 44, 70, 600};
    const ptrdiff_t *Rs = quick ? Rs_quick : Rs_full;
    const int nR = quick ? 6 : 10;
    for (int k = 0; k < nR; k++) {
        const ptrdiff_t R = Rs[k];
        for (ptrdiff_t extra : {(ptrdiff_t)0, (ptrdiff_t)6, (ptrdiff_t)3}) {
            const ptrdiff_t D = R + extra;
            for (int mode = 0; mode < 4; mode++) {
                const bool inter = mode & 1, inv = mode & 2;
                const std::string tail = " R=" + std::to_string(R) + " D=" + std::to_string(D)
                                         + (inter ? " interleaved" : " half")
                                         + (inv ? " inverse" : "");
                // rows with their own tables, odd count
                check_apply<T, Tc>(rng, {{37, D}, {37, R}, {}, false, inter, inv},
                                   "apply rows" + tail);
                // (batch, seq, heads, D) against tables (seq, 1, R): broadcast over heads
                check_apply<T, Tc>(rng, {{2, 5, 3, D}, {5, 1, R}, {}, false, inter, inv},
                                   "apply broadcast" + tail);
                // gathered from caches (11, R/2), ids per (batch, seq), broadcast over heads
                check_apply<T, Tc>(rng, {{2, 5, 3, D}, {11, R / 2}, {2, 5, 1}, true, inter, inv},
                                   "apply_cached" + tail);
                if (quick && extra)
                    break;
            }
        }
    }
}

// Every 16-bit pattern, and float32 bit patterns, through each level's loads and stores: x's
// first half (cos 1, sin 0.5 against x2 = 0) comes back as itself, widened and narrowed; with
// x1 = 1 against float32 tables, the table value narrowed (rounding of any float32).
template <class T>
void conversion_suite(Rng &rng, ptrdiff_t nfloat)
{
    const ptrdiff_t h = 65536 + 13;  // every pattern, then a tail
    std::vector<T> x(2 * h);
    for (ptrdiff_t i = 0; i < h; i++) {
        uint16_t b = (uint16_t)i;
        std::memcpy(&x[i], &b, 2);
        std::memcpy(&x[h + i], "\0\0", 2);
    }
    std::vector<float> c(2 * h, 1.0f), s(2 * h, 0.5f);
    auto run = [&](const std::vector<T> &xv, const std::vector<float> &cv,
                   const std::vector<float> &sv, ptrdiff_t half, const char *what) {
        std::vector<char> ref;
        for (int level : levels()) {
            set_simd_level(level);
            for (int inter = 0; inter < 2; inter++) {
                std::vector<T> out(2 * half);
                ptrdiff_t xs[1] = {2 * half}, xst[1] = {(ptrdiff_t)sizeof(T)};
                ptrdiff_t tst[1] = {4};
                ApplyArgs a;
                a.x = Strided{(char *)xv.data(), 1, xs, xst};
                a.out = Strided{(char *)out.data(), 1, xs, xst};
                a.cos = Strided{(char *)cv.data(), 1, xs, tst};
                a.sin = Strided{(char *)sv.data(), 1, xs, tst};
                a.pos = Strided{nullptr, 0, nullptr, nullptr};
                a.interleaved = inter;
                a.inverse = false;
                a.stream = false;
                a.dry = false;
                a.nthreads = 1;
                a.chunk_bytes = 1 << 20;
                if (rope_apply<T, float>(a) != OK) {
                    std::printf("FAIL conversions %s\n", what);
                    g_failures++;
                    return;
                }
                std::string key = std::string("conversions ") + what + " " + Info<T>::name()
                                  + " level " + simd_level_name(level) + (inter ? " pairs" : "");
                if (level == 0 && !inter) {
                    ref.assign((char *)out.data(), (char *)(out.data() + 2 * half));
                    // the half layout's first half is x1 itself (or the table value)
                    for (ptrdiff_t i = 0; i < half; i++) {
                        double want = Info<float>::value(&cv[i]) * Info<T>::value(&xv[i]);
                        T w = from_double<T>(want);
                        if (std::strcmp(what, "patterns") == 0)
                            w = xv[i];
                        if (!same<T>((char *)&w, (char *)&out[i], 1, key + " scalar"))
                            break;
                    }
                } else if (!inter) {
                    same<T>(ref.data(), (char *)out.data(), 2 * half, key);
                }
            }
        }
    };
    run(x, c, s, h, "patterns");
    // float32 patterns: a sweep of the bit patterns (every exponent, low mantissa bits, and
    // the rounding boundaries of both 16-bit types), x1 = 1
    std::vector<float> cf;
    for (ptrdiff_t i = 0; i < nfloat; i++) {
        uint32_t u = (uint32_t)(rng.next() >> 32);
        if (i % 4 == 1)
            u = (u & 0xffff0000u) | (0x8000u + (uint32_t)rng.below(3) - 1);  // bf16 ties
        if (i % 4 == 2)
            u = (u & 0xffffe000u) | (0x1000u + (uint32_t)rng.below(3) - 1);  // f16 ties
        if (i % 4 == 3)
            u = (u & 0x80000000u) | (0x33000000u + (uint32_t)rng.below(0x14800000));  // f16 range
        float f;
        std::memcpy(&f, &u, 4);
        cf.push_back(f);
    }
    const ptrdiff_t hf = (ptrdiff_t)cf.size();
    std::vector<T> xf(2 * hf);
    for (ptrdiff_t i = 0; i < hf; i++) {
        xf[i] = from_double<T>(1.0);
        xf[hf + i] = from_double<T>(0.0);
    }
    cf.resize(2 * hf, 1.0f);
    std::vector<float> sf(2 * hf, 0.5f);
    run(xf, cf, sf, hf, "float32 values");
}

// ---- tables -----------------------------------------------------------------------------------
struct RotTables {
    std::vector<double> rc, rs, pc, ps, w_hi, w_lo;
    Rotations rot;
};

RotTables rotations(const std::vector<double> &w, ptrdiff_t block)
{
    RotTables t;
    const ptrdiff_t nf = (ptrdiff_t)w.size();
    int shift = 0;
    while (((ptrdiff_t)1 << shift) < block)
        shift++;
    const ptrdiff_t npow = 53 - shift;
    t.w_hi = w;
    t.w_lo.assign(nf, 0.0);
    for (ptrdiff_t r = 0; r < block; r++)
        for (ptrdiff_t i = 0; i < nf; i++) {
            t.rc.push_back(std::cos((double)r * w[i]));
            t.rs.push_back(std::sin((double)r * w[i]));
        }
    for (ptrdiff_t k = 0; k < npow; k++)
        for (ptrdiff_t i = 0; i < nf; i++) {
            const double a = std::ldexp((double)block, (int)k) * w[i];
            t.pc.push_back(std::cos(a));
            t.ps.push_back(std::sin(a));
        }
    t.rot = Rotations{t.rc.data(), t.rs.data(), t.pc.data(), t.ps.data(), t.w_hi.data(),
                      t.w_lo.data(), block, npow, nf};
    return t;
}

template <class T>
void check_table(const RotTables &t, const std::vector<double> &pos, int layout, double scale,
                 ptrdiff_t extra_cols, const std::string &name)
{
    const ptrdiff_t n = (ptrdiff_t)pos.size(), nf = t.rot.nf, it = sizeof(T);
    const bool rope = layout >= 3;
    const ptrdiff_t lda = 2 * nf + (rope ? 0 : extra_cols), nel = n * lda;
    struct Variant {
        int threads;
        ptrdiff_t chunk;
        bool stream;
        size_t off;
    };
    const Variant variants[] = {{1, 1 << 20, false, 0}, {2, 256, true, 0}, {2, 256, true, 16},
                                {1, 1 << 20, true, 48}, {1, 1 << 20, true, 32},
                                {1, 1 << 20, false, sizeof(T)}};
    std::vector<char> ref;
    for (int level : levels()) {
        set_simd_level(level);
        for (const Variant &v : variants) {
            Buf a(nel * it, v.off), b(nel * it, v.off);
            std::memset(a.p, 0x5a, nel * it);
            std::memset(b.p, 0x5a, nel * it);
            TableJob job;
            job.rot = t.rot;
            job.pos = pos.data();
            job.n = n;
            job.lda = lda;
            job.chunk_rows = 0;
            job.a = a.p;
            job.b = rope ? b.p : nullptr;
            job.layout = layout;
            job.scale = scale;
            job.stream = v.stream;
            table<T>(job, v.threads, v.chunk);
            std::vector<char> got(a.p, a.p + nel * it);
            if (rope)
                got.insert(got.end(), b.p, b.p + nel * it);
            char what[512];
            std::snprintf(what, sizeof what, "%s %s layout %d scale %g level %s threads %d "
                          "stream %d offset %zu", name.c_str(), Info<T>::name(), layout, scale,
                          simd_level_name(level), v.threads, v.stream, v.off);
            if (ref.empty()) {
                ref = got;
                continue;
            }
            same<T>(ref.data(), got.data(), (ptrdiff_t)got.size() / it, what);
        }
    }
}

void table_suite(Rng &rng, bool quick)
{
    std::vector<double> pos;
    for (int p = -70; p < (quick ? 200 : 530); p++)
        pos.push_back(p);
    for (double p : {8589934595.0, 0.5, -1234.25, 1e15 + 1, -4503599627370495.0})
        pos.push_back(p);
    for (int k = 0; k < 20; k++)
        pos.push_back(std::floor(rng.uniform(-1e6, 1e6)) + (k % 2 ? 0.0 : 0.375));
    // every tail length; 300: rows longer than a stage (f64)
    const ptrdiff_t nfs_full[] = {1, 3, 8, 16, 20, 64, 72, 300};
    const ptrdiff_t nfs_quick[] = {3, 8, 20, 72};
    const int nnf = quick ? 4 : 8;
    for (int fi = 0; fi < nnf; fi++) {
        const ptrdiff_t nf = quick ? nfs_quick[fi] : nfs_full[fi];
        for (int freqs = 0; freqs < 3; freqs++) {  // RoPE powers, random, tiny (subnormal sin)
            std::vector<double> w(nf);
            for (ptrdiff_t i = 0; i < nf; i++)
                w[i] = freqs == 0 ? std::pow(10000.0, -2.0 * i / (2.0 * nf))
                       : freqs == 1 ? std::pow(10.0, rng.uniform(-4, 0))
                                    : std::pow(10.0, rng.uniform(-46, -30));
            const RotTables t = rotations(w, nf <= 8 ? 256 : 64);
            const std::string name = "table nf=" + std::to_string(nf) + " freqs "
                                     + (freqs == 0 ? "rope" : freqs == 1 ? "random" : "tiny");
            for (int layout = 0; layout < 5; layout++) {
                std::vector<double> scales = {1.0};
                if (layout >= 3 && !quick)
                    scales = {1.0, 1e-40, 3e-39, 1e-310, 1e5, 1e38, 1e300};
                else if (layout >= 3)
                    scales = {1.0, 3e-39, 1e38};
                for (double sc : scales) {
                    const ptrdiff_t extra = layout < 3 && nf % 2 ? 5 : 0;
                    check_table<float>(t, pos, layout, sc, extra, name);
                    check_table<double>(t, pos, layout, sc, extra, name);
                    check_table<f16>(t, pos, layout, sc, extra, name);
                    check_table<bf16>(t, pos, layout, sc, extra, name);
                }
            }
        }
    }
}

void copy_suite(Rng &rng)
{
    for (ptrdiff_t n : {(ptrdiff_t)0, (ptrdiff_t)15, (ptrdiff_t)100, (ptrdiff_t)5000,
                        (ptrdiff_t)(3 << 20) + 77}) {
        std::vector<char> src(n + 1);
        for (auto &ch : src)
            ch = (char)rng.next();
        for (int level : levels()) {
            set_simd_level(level);
            for (size_t off : {(size_t)0, (size_t)5, (size_t)16}) {
                Buf d(n, off);
                stream_copy(d.p, src.data(), n, 2);
                g_checked++;
                if (std::memcmp(d.p, src.data(), n)) {
                    std::printf("DIFF stream_copy n=%td level %s offset %zu\n", n,
                                simd_level_name(level), off);
                    g_failures++;
                }
                if (n >= 4096) {  // fill: a 4096-byte period
                    stream_copy(d.p, src.data(), n, 2, 4096);
                    for (ptrdiff_t i = 0; i < n; i++)
                        if (d.p[i] != src[i % 4096]) {
                            std::printf("DIFF stream fill n=%td level %s\n", n,
                                        simd_level_name(level));
                            g_failures++;
                            break;
                        }
                }
            }
        }
    }
}

// ---- the scalar conversions against the branching forms they replaced ------------------------
namespace before {
inline float widen16(uint16_t bits)
{
    uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
    uint32_t e = (bits >> 10) & 0x1fu, m = bits & 0x3ffu;
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-8f;
        return float_of(bits_of(v) | sign);
    }
    if (e == 31)
        return float_of(sign | 0x7f800000u | (m << 13));
    return float_of(sign | ((e + 112) << 23) | (m << 13));
}
inline uint16_t narrow_f16(float f)
{
    uint32_t x = bits_of(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    if (x >= 0x477ff000u)
        return (uint16_t)(sign | 0x7c00u);
    if (x < 0x38800000u) {
        float v = float_of(x) + 0.5f;
        return (uint16_t)(sign | (bits_of(v) - 0x3f000000u));
    }
    uint32_t odd = (x >> 13) & 1u;
    x += 0xc8000fffu + odd;
    return (uint16_t)(sign | (x >> 13));
}
inline uint16_t narrow_bf16(float f)
{
    uint32_t u = bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
inline float round_to_odd(double d)
{
    float f = (float)d;
    double back = f;
    if (back == d || d != d)
        return f;
    uint32_t u = bits_of(f);
    if ((back > d) == (d > 0))
        u -= 1;
    return float_of(u | 1u);
}
}  // namespace before

void exhaustive(Rng &rng, uint64_t step)
{
    long bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        float a = widen(f16{(uint16_t)b}), w = before::widen16((uint16_t)b);
        bad += bits_of(a) != bits_of(w);
    }
    for (uint64_t u = 0; u <= 0xffffffffULL; u += step) {
        const float f = float_of((uint32_t)u);
        bad += narrow_f16(f).bits != before::narrow_f16(f);
        bad += narrow_bf16(f).bits != before::narrow_bf16(f);
    }
    const double edges[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, -NAN, 1e308, -1e308,
                            3.4028234663852886e38, 3.4028235677973366e38, 3.4028235677973362e38,
                            -3.4028235677973366e38, 1e39, 1e-320, -1e-320, 1.4e-45, 7e-46, 1e-46,
                            -7.006492321624085e-46, 1.1754943508222875e-38, 1.0, 1.0 + 0x1p-30};
    for (double d : edges) {
        const float a = round_to_odd(d), w = before::round_to_odd(d);
        bad += bits_of(a) != bits_of(w) && !(a != a && w != w);
    }
    for (long k = 0; k < (1L << 24); k++) {
        uint64_t u = rng.next();
        if (k % 3 == 1)  // near float32 ties and the float32 range's ends
            u = (u & 0xfff0000000000000ULL) | (u & 0x1fffffffULL) | (0x380ULL << 52);
        if (k % 3 == 2)
            u = (u & 0x800fffffffffffffULL) | ((uint64_t)(0x340 + rng.below(0x140)) << 52);
        double d;
        std::memcpy(&d, &u, 8);
        const float a = round_to_odd(d), w = before::round_to_odd(d);
        bad += bits_of(a) != bits_of(w) && !(a != a && w != w);
    }
    g_checked++;
    if (bad) {
        std::printf("DIFF the scalar conversions: %ld inputs differ from the branching forms\n",
                    bad);
        g_failures++;
    }
}

// ---- the family kernels (families.hpp, conv.inc) ---------------------------------------------
//
// ALiBi (three modes with query offsets, from positions, from a mask), the relative-bias
// gather and the depthwise convolution, against references written here in scalar double
// arithmetic from the generic path's definitions (arrpos/_backends/_xp.py), not from the
// kernels: ALiBi equals its exact product rounded once to the storage type (distances kept
// where that product is exact in double: float32 distances below 2**24, 16-bit ones below
// 2**40), the gather the table's bits; the convolution's sums equal the generic order's in
// the working type (float32 for 16-bit x) bit for bit, and its GELU / tanh are within
// tests/test_conv_kernels.py's bound, 8 ulps of the working type of |reference| + |x| (plus
// one step of a 16-bit output). Every level's bits also equal the portable level's.

// v rounded once to T, to nearest even, as a double (exactly a value of T): float by the
// hardware's conversion, the 16-bit types by rounding the significand scaled to an integer.
template <class T> double round_once(double v);
template <> double round_once<double>(double v) { return v; }
template <> double round_once<float>(double v) { return (double)(float)v; }
double round_significand(double v, int bits, int emin, int emax)
{
    if (v != v || v == 0 || std::isinf(v))
        return v;
    int e = std::ilogb(v);
    e = e < emin ? emin : e;  // subnormal: the spacing of the smallest exponent
    const double r = std::ldexp(std::nearbyint(std::ldexp(v, bits - 1 - e)), e - (bits - 1));
    return std::fabs(r) < std::ldexp(1.0, emax + 1) ? r : std::copysign(INFINITY, v);
}
template <> double round_once<f16>(double v) { return round_significand(v, 11, -14, 15); }
template <> double round_once<bf16>(double v) { return round_significand(v, 8, -126, 127); }

// The exact value of a stored element, decoded here (not by types.hpp's conversions).
template <class T> double exact_value(const void *p);
template <> double exact_value<float>(const void *p)
{
    float v;
    std::memcpy(&v, p, 4);
    return v;
}
template <> double exact_value<double>(const void *p)
{
    double v;
    std::memcpy(&v, p, 8);
    return v;
}
template <> double exact_value<f16>(const void *p)
{
    uint16_t b;
    std::memcpy(&b, p, 2);
    const int e = (b >> 10) & 31, m = b & 1023;
    const double v = e == 0 ? std::ldexp((double)m, -24)
                     : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1024.0 + m, e - 25);
    return b & 0x8000 ? -v : v;
}
template <> double exact_value<bf16>(const void *p)
{
    uint16_t b;
    std::memcpy(&b, p, 2);
    const uint32_t u = (uint32_t)b << 16;  // bfloat16: a float32's high half
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// got (n values of T) against exact values: equal, zeros of the same sign, NaN where NaN; or
// within tol[i] where tol is given.
template <class T>
bool near(const char *got, const double *want, const double *tol, ptrdiff_t n,
          const std::string &what)
{
    g_checked++;
    for (ptrdiff_t i = 0; i < n; i++) {
        const double g = exact_value<T>(got + i * sizeof(T)), w = want[i];
        if ((g != g && w != w) || (g == w && std::signbit(g) == std::signbit(w)))
            continue;
        if (tol && g == g && w == w && std::fabs(g - w) <= tol[i])
            continue;
        if (g_failures < 30)
            std::printf("DIFF %s: element %td: %.17g, reference %.17g\n", what.c_str(), i, g, w);
        g_failures++;
        return false;
    }
    return true;
}

// The output of the first run (level 0, the portable level): every later run's bits equal it.
struct FirstRun {
    std::vector<char> bits;
    bool have = false;
    template <class T> void check(const char *p, ptrdiff_t n, const std::string &what)
    {
        if (!have) {
            bits.assign(p, p + n * (ptrdiff_t)sizeof(T));
            have = true;
        } else {
            same<T>(bits.data(), p, n, what + " (against the portable level's bits)");
        }
    }
};

struct FamVariant {
    int threads;
    bool stream;
    size_t off;  // elements past a 64-byte boundary (output; the convolution's input too)
};
const FamVariant kFamVariants[] = {{1, false, 0}, {2, true, 0}, {2, false, 1}, {1, true, 3}};

std::string variant_name(int level, const FamVariant &v)
{
    return std::string(" level ") + simd_level_name(level) + " threads "
           + std::to_string(v.threads) + " stream " + std::to_string(v.stream) + " offset "
           + std::to_string(v.off);
}

// Slopes: ALiBi's powers of two, random of either sign, zero, subnormal (f16: products
// subnormal) and huge (products overflowing to inf).
template <class T> std::vector<T> slopes_of(Rng &rng, ptrdiff_t heads)
{
    const bool half = std::is_same<T, f16>::value, wide = std::is_same<T, double>::value;
    const double tiny = wide ? 5e-324 : half ? 6e-8 : std::is_same<T, bf16>::value ? 1e-40
                                                                                   : 1e-44;
    const double huge = wide ? 1e306 : half ? 30000.0 : 1e36;
    std::vector<T> s((size_t)heads);
    for (ptrdiff_t h = 0; h < heads; h++) {
        const double v[6] = {std::ldexp(1.0, -(int)(1 + h)), rng.uniform(0.01, 2),
                             -rng.uniform(0.01, 2), 0.0, tiny, huge};
        s[(size_t)h] = from_double<T>(v[h % 6]);
    }
    return s;
}

template <class T>
void check_alibi(Rng &rng, ptrdiff_t heads, ptrdiff_t q, ptrdiff_t k, int64_t qoff, int mode)
{
    const std::vector<T> sl = slopes_of<T>(rng, heads);
    const ptrdiff_t n = heads * q * k;
    std::vector<double> want((size_t)n);
    for (ptrdiff_t h = 0; h < heads; h++)
        for (ptrdiff_t i = 0; i < q; i++)
            for (ptrdiff_t j = 0; j < k; j++) {
                const int64_t back = (int64_t)j - (int64_t)i - qoff;  // key - query position
                const int64_t d = mode == 2 ? j : mode == 0 ? (back < 0 ? back : 0)
                                                            : (back < 0 ? back : -back);
                want[(size_t)((h * q + i) * k + j)] =
                    round_once<T>(Info<T>::value(&sl[(size_t)h]) * (double)d);
            }
    const char *modes[3] = {"causal", "symmetric", "key"};
    const std::string name = std::string("alibi_bias ") + Info<T>::name() + " " + modes[mode]
                             + " heads " + std::to_string(heads) + " q " + std::to_string(q)
                             + " k " + std::to_string(k) + " qoff " + std::to_string(qoff);
    FirstRun first;
    for (int level : levels()) {
        set_simd_level(level);
        for (const FamVariant &v : kFamVariants) {
            Buf out((size_t)n * sizeof(T), v.off * sizeof(T));
            std::memset(out.p, 0x5a, (size_t)n * sizeof(T));
            fam::AlibiJob job{};
            job.slopes = (const char *)sl.data();
            job.out = out.p;
            job.heads = heads;
            job.q = q;
            job.k = k;
            job.qoff = qoff;
            job.mode = mode;
            job.stream = v.stream;
            fam::alibi_bias<T>(job, v.threads);
            const std::string what = name + variant_name(level, v);
            near<T>(out.p, want.data(), nullptr, n, what);
            first.check<T>(out.p, n, what);
        }
    }
}

// Positions P (int64, or float64 multiples of 1/8): both differences exact in double.
template <class T, class P>
void check_positions(Rng &rng, ptrdiff_t lead, ptrdiff_t heads, ptrdiff_t q, ptrdiff_t k,
                     int mode)
{
    // float64 slopes: float32 values (the product with a distance exact in double), any
    // float64 for float64 output (the product rounded once, in double)
    std::vector<double> sl((size_t)heads);
    const std::vector<T> st = slopes_of<T>(rng, heads);
    for (ptrdiff_t h = 0; h < heads; h++)
        sl[(size_t)h] = std::is_same<T, double>::value && h % 6 == 1
                            ? rng.uniform(-3, 3)
                            : Info<T>::value(&st[(size_t)h]);
    auto position = [&](ptrdiff_t t) {
        double v = (double)(rng.below(2001) - 1000);
        if (t % 7 == 3)
            v += (rng.next() & 1 ? 1.0 : -1.0) * (double)(1 << 20);
        if (!std::is_integral<P>::value)
            v += (double)rng.below(8) / 8;
        return (P)v;
    };
    std::vector<P> qp((size_t)(lead * q)), kp((size_t)(lead * k));
    for (ptrdiff_t t = 0; t < lead * q; t++)
        qp[(size_t)t] = position(t);
    for (ptrdiff_t t = 0; t < lead * k; t++)
        kp[(size_t)t] = position(t);
    if (lead * k > 1)
        kp[1] = qp[0];  // a distance of 0 (+0.0)
    if (lead * k > 3) {  // distances whose products round wrong through float32 (alibi_suite)
        kp[2] = (P)((double)qp[0] + (double)((1 << 24) + (1 << 16) + 1));
        kp[3] = (P)((double)qp[0] - (double)((1 << 24) + (1 << 13) + 1));
    }
    const ptrdiff_t n = lead * heads * q * k;
    std::vector<double> want((size_t)n);
    for (ptrdiff_t l = 0; l < lead; l++)
        for (ptrdiff_t h = 0; h < heads; h++)
            for (ptrdiff_t i = 0; i < q; i++)
                for (ptrdiff_t j = 0; j < k; j++) {
                    const double kj = (double)kp[(size_t)(l * k + j)];
                    const double back = kj - (double)qp[(size_t)(l * q + i)];
                    // the generic path's clip and 0 - |d|: +0.0 at distance 0 (spelt out:
                    // GCC 12 folds 0.0 - std::fabs(b) into -std::fabs(b), -0.0 at b = 0)
                    const double d = mode == 2 ? kj : back < 0 ? back
                                                    : mode == 0 || back == 0 ? 0.0 : -back;
                    want[(size_t)(((l * heads + h) * q + i) * k + j)] =
                        round_once<T>(sl[(size_t)h] * d);
                }
    const char *modes[3] = {"causal", "symmetric", "key"};
    const std::string name = std::string("alibi_bias_from_positions ") + Info<T>::name()
                             + (std::is_integral<P>::value ? " int64 " : " float64 ")
                             + modes[mode] + " lead " + std::to_string(lead) + " heads "
                             + std::to_string(heads) + " q " + std::to_string(q) + " k "
                             + std::to_string(k);
    FirstRun first;
    for (int level : levels()) {
        set_simd_level(level);
        for (const FamVariant &v : kFamVariants) {
            Buf out((size_t)n * sizeof(T), v.off * sizeof(T));
            std::memset(out.p, 0x5a, (size_t)n * sizeof(T));
            fam::PositionsJob job{};
            job.slopes = sl.data();
            job.qp = (const char *)qp.data();
            job.kp = (const char *)kp.data();
            job.out = out.p;
            job.lead = lead;
            job.heads = heads;
            job.q = q;
            job.k = k;
            job.mode = mode;
            job.stream = v.stream;
            fam::alibi_positions<T, P>(job, v.threads);
            const std::string what = name + variant_name(level, v);
            near<T>(out.p, want.data(), nullptr, n, what);
            first.check<T>(out.p, n, what);
        }
    }
}

// BLOOM's mask form: positions (cumsum(mask) - 1) * mask per batch row; a value other than 0
// and 1 (2, or a negative one read as unsigned) refused.
template <class T, class M>
void check_mask(Rng &rng, ptrdiff_t batch, ptrdiff_t heads, ptrdiff_t k)
{
    const std::vector<T> sl = slopes_of<T>(rng, heads);
    std::vector<M> mask((size_t)(batch * k));
    for (ptrdiff_t b = 0; b < batch; b++) {
        // all ones; left padding; left padding and holes; all zeros
        const ptrdiff_t pad = b % 4 == 0 ? 0 : b % 4 == 3 ? k : rng.below(k + 1);
        for (ptrdiff_t t = 0; t < k; t++)
            mask[(size_t)(b * k + t)] = (M)(t >= pad && (b % 4 != 2 || rng.below(4) != 0));
    }
    const ptrdiff_t n = batch * heads * k;
    std::vector<double> want((size_t)n);
    for (ptrdiff_t b = 0; b < batch; b++) {
        int64_t run = 0;
        for (ptrdiff_t t = 0; t < k; t++) {
            const int64_t m = mask[(size_t)(b * k + t)] != 0;
            run += m;
            const double pos = (double)((run - 1) * m);
            for (ptrdiff_t h = 0; h < heads; h++)
                want[(size_t)((b * heads + h) * k + t)] =
                    round_once<T>(Info<T>::value(&sl[(size_t)h]) * pos);
        }
    }
    const std::string name = std::string("alibi_bias_from_mask ") + Info<T>::name() + " mask "
                             + std::to_string(8 * sizeof(M)) + "-bit batch "
                             + std::to_string(batch) + " heads " + std::to_string(heads)
                             + " k " + std::to_string(k);
    FirstRun first;
    for (int level : levels()) {
        set_simd_level(level);
        for (const FamVariant &v : kFamVariants) {
            Buf out((size_t)n * sizeof(T), v.off * sizeof(T));
            std::memset(out.p, 0x5a, (size_t)n * sizeof(T));
            fam::MaskJob job{};
            job.slopes = (const char *)sl.data();
            job.mask = (const char *)mask.data();
            job.out = out.p;
            job.batch = batch;
            job.heads = heads;
            job.k = k;
            job.stream = v.stream;
            const std::string what = name + variant_name(level, v);
            if (!fam::alibi_mask<T, M>(job, v.threads)) {
                std::printf("FAIL %s: a 0/1 mask refused\n", what.c_str());
                g_failures++;
                continue;
            }
            near<T>(out.p, want.data(), nullptr, n, what);
            first.check<T>(out.p, n, what);
            if (k == 0 || v.threads != 2)
                continue;
            for (const M bad : {(M)2, (M)-1}) {  // refused (all or part of the output written)
                std::vector<M> m2 = mask;
                m2[(size_t)rng.below(batch * k)] = bad;
                job.mask = (const char *)m2.data();
                g_checked++;
                if (fam::alibi_mask<T, M>(job, v.threads)) {
                    std::printf("FAIL %s: a mask value %llu not refused\n", what.c_str(),
                                (unsigned long long)bad);
                    g_failures++;
                }
            }
        }
    }
}

void alibi_suite(Rng &rng, bool quick)
{
    // (heads, q, k): one element; ragged rows; long rows (>= 2048 bytes: put straight from the
    // line) and short ones (staged); several chunks per head
    const ptrdiff_t shapes[][3] = {{1, 1, 1}, {6, 5, 7}, {6, 37, 3}, {3, 3, 600},
                                   {2, quick ? 70 : 130, 600}, {1, 300, 40}};
    const int64_t qoffs[] = {0, 5, -3, 1 << 20};
    for (int mode = 0; mode < 3; mode++)
        for (const auto &s : shapes)
            for (int64_t qoff : qoffs) {
                if (s[1] * s[2] > 10000 && qoff != 5)
                    continue;
                check_alibi<float>(rng, s[0], s[1], s[2], qoff, mode);
                check_alibi<double>(rng, s[0], s[1], s[2], qoff, mode);
                check_alibi<f16>(rng, s[0], s[1], s[2], qoff, mode);
                check_alibi<bf16>(rng, s[0], s[1], s[2], qoff, mode);
                if (qoff != 1 << 20 || s[1] * s[2] > 10000)
                    continue;
                // float64 and 16-bit: distances to 2**40, and ones whose product with a power
                // of two rounds wrong through float32 (2**24 + 2**16 + 1: a bfloat16 tie after
                // float32's rounding, above it exactly; 2**24 + 2**13 + 1: float16's)
                for (int64_t far : {((int64_t)1 << 40) - 9, -((int64_t)1 << 40) + 9,
                                    ((int64_t)1 << 24) + (1 << 16) + 1,
                                    ((int64_t)1 << 24) + (1 << 13) + 1}) {
                    check_alibi<double>(rng, s[0], s[1], s[2], far, mode);
                    check_alibi<f16>(rng, s[0], s[1], s[2], far, mode);
                    check_alibi<bf16>(rng, s[0], s[1], s[2], far, mode);
                }
            }
    const ptrdiff_t pshapes[][4] = {{1, 1, 1, 1}, {2, 6, 5, 9}, {1, 3, 4, 600},
                                    {3, 2, quick ? 30 : 90, 700}};
    for (int mode = 0; mode < 3; mode++)
        for (const auto &s : pshapes) {
            check_positions<float, int64_t>(rng, s[0], s[1], s[2], s[3], mode);
            check_positions<double, int64_t>(rng, s[0], s[1], s[2], s[3], mode);
            check_positions<f16, int64_t>(rng, s[0], s[1], s[2], s[3], mode);
            check_positions<bf16, int64_t>(rng, s[0], s[1], s[2], s[3], mode);
            check_positions<float, double>(rng, s[0], s[1], s[2], s[3], mode);
            check_positions<double, double>(rng, s[0], s[1], s[2], s[3], mode);
            check_positions<f16, double>(rng, s[0], s[1], s[2], s[3], mode);
            check_positions<bf16, double>(rng, s[0], s[1], s[2], s[3], mode);
        }
    // (batch, heads, k); the last: several chunks of heads per batch row (doubles)
    std::vector<std::vector<ptrdiff_t>> mshapes = {{1, 1, 1}, {3, 6, 7}, {4, 3, 300},
                                                   {2, 6, 1100}};
    if (!quick)
        mshapes.push_back({2, 20, 7000});
    for (const auto &s : mshapes) {
        check_mask<float, uint8_t>(rng, s[0], s[1], s[2]);
        check_mask<double, uint16_t>(rng, s[0], s[1], s[2]);
        check_mask<f16, uint32_t>(rng, s[0], s[1], s[2]);
        check_mask<bf16, uint64_t>(rng, s[0], s[1], s[2]);
        if (s[2] > 1000)
            continue;
        check_mask<float, uint64_t>(rng, s[0], s[1], s[2]);
        check_mask<double, uint8_t>(rng, s[0], s[1], s[2]);
        check_mask<f16, uint16_t>(rng, s[0], s[1], s[2]);
        check_mask<bf16, uint32_t>(rng, s[0], s[1], s[2]);
    }
}

// ---- the gather: out[h, p] = table[h, index[p]], the bits of each storage type ----------------
// kind 0: a 1-D index (tiles, the instruction set's gathers); 2-D ones, on the row paths where
// rows are long enough: 1, rows that are shifts (T5's buckets of key - query: windows of a
// line); 2, random rows (each gathered); 3, shifts but for one element of the last row; 4,
// Swin's relative_position_index of a window of rows = w * w tokens (shifts but for a column
// every window row; row i + w is row i moved w places: a period of w); 5, the same with one
// element changed (the periodic rows' check); 6, rows of a period of 4 (ids depending on
// i % 4 and j - i), any number of rows; 7, Swin's of key - query (its lines' runs of ids go
// up where 4's go down: copied from the table's rows, not their reversal); 8, rows of a period
// of 4 whose lines are runs up and down of 1 to 19 ids (some lines copied run by run, some
// gathered, every run boundary).
template <class T, class I>
void check_gather(Rng &rng, ptrdiff_t heads, ptrdiff_t buckets, ptrdiff_t rows, ptrdiff_t cols,
                  int kind)
{
    using U = typename std::conditional<sizeof(T) == 2, uint16_t,
              typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type>::type;
    std::vector<T> tv((size_t)(heads * buckets));
    wild(rng, tv.data(), heads * buckets);
    const ptrdiff_t n = rows * cols;
    std::vector<I> idx((size_t)n);
    std::vector<I> diagonal((size_t)(rows + cols));  // the bucket of each key - query
    for (auto &v : diagonal)
        v = (I)rng.below(buckets);
    for (ptrdiff_t i = 0; i < rows; i++)
        for (ptrdiff_t j = 0; j < cols; j++)
            idx[(size_t)(i * cols + j)] = kind == 0 || kind == 2
                                              ? (I)rng.below(buckets)
                                              : diagonal[(size_t)(j - i + rows - 1)];
    if (kind == 6 || kind == 8) {
        std::vector<I> g((size_t)(4 * (rows + cols)));
        for (auto &v : g)
            v = (I)rng.below(buckets);
        for (size_t u = 0; kind == 8 && u < g.size();) {  // runs from a start that fits
            const ptrdiff_t len = 1 + rng.below(19), up = rng.below(2);
            const ptrdiff_t lo = up ? 0 : len - 1, hi = up ? buckets - len : buckets - 1;
            const ptrdiff_t first = hi >= lo ? lo + rng.below(hi - lo + 1) : 0;
            for (ptrdiff_t m = 0; m < len && u < g.size(); m++, u++)
                g[u] = (I)(hi >= lo ? (up ? first + m : first - m) : 0);
        }
        for (ptrdiff_t i = 0; i < rows; i++)
            for (ptrdiff_t j = 0; j < cols; j++)
                idx[(size_t)(i * cols + j)] = g[(size_t)((i % 4) * (rows + cols) + j - i + rows)];
    }
    if (kind == 4 || kind == 5 || kind == 7) {  // (dy + w - 1) * (2w - 1) + dx + w - 1
        const ptrdiff_t w = (ptrdiff_t)std::lround(std::sqrt((double)rows));
        const ptrdiff_t s = kind == 7 ? -1 : 1;
        for (ptrdiff_t i = 0; i < rows; i++)
            for (ptrdiff_t j = 0; j < cols; j++)
                idx[(size_t)(i * cols + j)] =
                    (I)((s * (i / w - j / w) + w - 1) * (2 * w - 1) + s * (i % w - j % w) + w - 1);
    }
    if (kind == 3 && n > 0)
        idx[(size_t)(n - 1 - rng.below(cols))] = (I)((idx[(size_t)(n - 1)] + 1) % buckets);
    if (kind == 5 && n > 0) {
        const size_t at = (size_t)rng.below(n);
        idx[at] = (I)((idx[at] + 1) % buckets);
    }
    std::vector<U> want((size_t)(heads * n));
    for (ptrdiff_t h = 0; h < heads; h++)
        for (ptrdiff_t p = 0; p < n; p++)
            std::memcpy(&want[(size_t)(h * n + p)], &tv[(size_t)(h * buckets + idx[(size_t)p])],
                        sizeof(U));
    const char *kinds[9] = {"1-D",      "shifted rows",       "any 2-D",
                            "shifted but one", "Swin",        "Swin but one",
                            "period 4", "Swin key - query", "period 4 in runs"};
    const std::string name = std::string("relative_bias gather ") + Info<T>::name() + " index "
                             + std::to_string(8 * sizeof(I)) + "-bit " + kinds[kind] + " heads "
                             + std::to_string(heads) + " buckets " + std::to_string(buckets)
                             + " index " + std::to_string(rows) + " x " + std::to_string(cols);
    for (int level : levels()) {
        set_simd_level(level);
        for (const FamVariant &v : kFamVariants) {
            Buf out((size_t)(heads * n) * sizeof(U), v.off * sizeof(U));
            std::memset(out.p, 0x5a, (size_t)(heads * n) * sizeof(U));
            fam::GatherJob job{};
            job.table = (const char *)tv.data();
            job.index = (const char *)idx.data();
            job.out = out.p;
            job.heads = heads;
            job.buckets = buckets;
            job.n = n;
            job.rows = kind == 0 ? 0 : rows;
            job.stream = v.stream;
            const std::string what = name + variant_name(level, v);
            g_checked++;
            if (!fam::gather<U, I>(job, v.threads)) {
                std::printf("FAIL %s: an index in range refused\n", what.c_str());
                g_failures++;
            } else if (std::memcmp(out.p, want.data(), (size_t)(heads * n) * sizeof(U))) {
                if (g_failures < 30)
                    std::printf("DIFF %s: the table's bits\n", what.c_str());
                g_failures++;
            }
            if (n == 0 || v.threads != 2)
                continue;
            for (const I bad : {(I)-1, (I)buckets}) {  // refused, on either path
                std::vector<I> i2 = idx;
                if (kind == 1) {  // still shifted rows: the value along a diagonal
                    const ptrdiff_t d = rng.below(cols);
                    for (ptrdiff_t i = 0; i < rows && d + i < cols; i++)
                        i2[(size_t)(i * cols + d + i)] = bad;
                } else {
                    i2[(size_t)rng.below(n)] = bad;
                }
                job.index = (const char *)i2.data();
                g_checked++;
                if (fam::gather<U, I>(job, v.threads)) {
                    std::printf("FAIL %s: index %lld not refused\n", what.c_str(),
                                (long long)bad);
                    g_failures++;
                }
            }
        }
    }
}

template <class T>
void gather_types(Rng &rng, ptrdiff_t heads, ptrdiff_t buckets, ptrdiff_t rows,
                  ptrdiff_t cols, int kind)
{
    check_gather<T, int64_t>(rng, heads, buckets, rows, cols, kind);
    check_gather<T, int32_t>(rng, heads, buckets, rows, cols, kind);
}

void gather_suite(Rng &rng, bool quick)
{
    // (heads, buckets, rows, cols): one element; short rows (tiles); rows of >= 256 bytes
    // (windows) for every element size; 1-D indices over several tiles
    const ptrdiff_t shapes[][4] = {{1, 1, 1, 1}, {3, 32, 9, 13}, {4, 32, 40, 140},
                                   {2, 257, 5, quick ? 2500 : 9000}, {16, 49, 49, 49}};
    for (const auto &s : shapes)
        for (int kind = 0; kind < 4; kind++) {
            if (s[3] > 1000 && kind)
                continue;
            gather_types<float>(rng, s[0], s[1], s[2], s[3], kind);
            gather_types<double>(rng, s[0], s[1], s[2], s[3], kind);
            gather_types<f16>(rng, s[0], s[1], s[2], s[3], kind);
            gather_types<bf16>(rng, s[0], s[1], s[2], s[3], kind);
        }
    for (ptrdiff_t rows : {45, 48})  // a period of 4, the last line shorter or not
        for (int kind : {6, 8}) {
            gather_types<float>(rng, 3, 40, rows, 140, kind);
            gather_types<double>(rng, 3, 40, rows, 140, kind);
            gather_types<f16>(rng, 3, 40, rows, 140, kind);
            gather_types<bf16>(rng, 3, 40, rows, 140, kind);
        }
    for (ptrdiff_t w : {7, 12})  // Swin's windows, one id changed
        gather_types<float>(rng, 3, (2 * w - 1) * (2 * w - 1), w * w, w * w, 5);
    for (ptrdiff_t w : {7, 12})  // Swin's windows: 49 tokens (short rows), 144
        for (int kind : {4, 7}) {
            gather_types<float>(rng, 3, (2 * w - 1) * (2 * w - 1), w * w, w * w, kind);
            gather_types<double>(rng, 3, (2 * w - 1) * (2 * w - 1), w * w, w * w, kind);
            gather_types<f16>(rng, 3, (2 * w - 1) * (2 * w - 1), w * w, w * w, kind);
            gather_types<bf16>(rng, 3, (2 * w - 1) * (2 * w - 1), w * w, w * w, kind);
        }
}

// ---- toeplitz: out[h, i, j] = lines[h, j - i + q - 1], the bits of each storage type --------
template <class T>
void check_toeplitz(Rng &rng, ptrdiff_t heads, ptrdiff_t q, ptrdiff_t k)
{
    using U = typename std::conditional<sizeof(T) == 2, uint16_t,
              typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type>::type;
    const ptrdiff_t m = q + k - 1, n = heads * q * k;
    std::vector<T> lines((size_t)(heads * m));
    wild(rng, lines.data(), heads * m);
    std::vector<U> want((size_t)n);
    for (ptrdiff_t h = 0; h < heads; h++)
        for (ptrdiff_t i = 0; i < q; i++)
            for (ptrdiff_t j = 0; j < k; j++)
                std::memcpy(&want[(size_t)((h * q + i) * k + j)],
                            &lines[(size_t)(h * m + j - i + q - 1)], sizeof(U));
    const std::string name = std::string("toeplitz ") + Info<T>::name() + " heads "
                             + std::to_string(heads) + " q " + std::to_string(q) + " k "
                             + std::to_string(k);
    for (int level : levels()) {
        set_simd_level(level);
        for (const FamVariant &v : kFamVariants) {
            Buf out((size_t)n * sizeof(U), v.off * sizeof(U));
            std::memset(out.p, 0x5a, (size_t)n * sizeof(U));
            fam::ToeplitzJob job{};
            job.lines = (const char *)lines.data();
            job.out = out.p;
            job.heads = heads;
            job.q = q;
            job.k = k;
            job.stream = v.stream;
            g_checked++;
            fam::toeplitz<U>(job, v.threads);
            if (std::memcmp(out.p, want.data(), (size_t)n * sizeof(U))) {
                if (g_failures < 30)
                    std::printf("DIFF %s%s: the lines' bits\n", name.c_str(),
                                variant_name(level, v).c_str());
                g_failures++;
            }
        }
    }
}

void toeplitz_suite(Rng &rng, bool quick)
{
    // (heads, q, k): one element; short rows (staged pieces); long rows; many rows per chunk
    const ptrdiff_t shapes[][3] = {{1, 1, 1}, {3, 9, 13}, {2, 40, 700}, {4, quick ? 300 : 900, 77}};
    for (const auto &s : shapes) {
        check_toeplitz<float>(rng, s[0], s[1], s[2]);
        check_toeplitz<double>(rng, s[0], s[1], s[2]);
        check_toeplitz<f16>(rng, s[0], s[1], s[2]);
        check_toeplitz<bf16>(rng, s[0], s[1], s[2]);
    }
}

// ---- the depthwise convolution ------------------------------------------------------------
//
// The generic path's definition (_xp.conv_positional): taps summed a over kh, then b over kw,
// each x * weight in the working type C (zeros outside the grid: a tap there adds
// 0 * weight), then + bias, the activation, + x, rounded once to T. The reference's
// activation: erfc / tanh in double (long double for float64 x), rounded to C.
const long double kSqrtHalf = 0.707106781186547524400844362104849039L;
float act_ref(float v, int act)
{
    const double d = v;
    return (float)(act == 1 ? 0.5 * d * std::erfc(-d * (double)kSqrtHalf) : std::tanh(d));
}
double act_ref(double v, int act)
{
    const long double d = v;
    return (double)(act == 1 ? 0.5L * d * std::erfc(-d * kSqrtHalf) : std::tanh(d));
}

template <class T>
void check_conv(Rng &rng, const ptrdiff_t (&s)[6], int act, bool residual, bool with_bias)
{
    using C = typename Elem<T>::C;
    const ptrdiff_t outer = s[0], H = s[1], W = s[2], Cn = s[3], kh = s[4], kw = s[5];
    const ptrdiff_t top = (kh - 1) / 2, left = (kw - 1) / 2, n = outer * H * W * Cn;
    const bool half = sizeof(T) == 2;
    std::vector<T> x((size_t)n);
    for (ptrdiff_t i = 0; i < n; i++) {
        double v = rng.uniform(-6, 6) * (i % 11 == 5 ? 5 : 1);  // GELU's tails too
        if (act == 0 && i % 13 == 7) {  // specials where the sums are exact
            const double sp[5] = {NAN, INFINITY, -INFINITY, half ? 60000.0 : 1e38,
                                  std::is_same<T, f16>::value ? 1e-7 : 1e-40};
            v = sp[rng.below(5)];
        }
        x[(size_t)i] = from_double<T>(v);
    }
    std::vector<C> w((size_t)(kh * kw * Cn)), bias((size_t)Cn);
    for (auto &v : w)
        v = (C)(rng.uniform(-1.5, 1.5) / (double)(kh * kw));
    for (auto &v : bias)
        v = (C)rng.uniform(-0.5, 0.5);
    std::vector<double> want((size_t)n), tol((size_t)n);
    const double eps_c = sizeof(C) == 8 ? 0x1p-52 : 0x1p-23;
    const double eps_t = std::is_same<T, f16>::value ? 0x1p-10 : 0x1p-7;
    const double step_t = std::is_same<T, f16>::value ? 0x1p-24 : 0x1p-133;  // the subnormal one
    for (ptrdiff_t o = 0; o < outer; o++)
        for (ptrdiff_t h = 0; h < H; h++)
            for (ptrdiff_t c0 = 0; c0 < W; c0++)
                for (ptrdiff_t c = 0; c < Cn; c++) {
                    C acc = 0;
                    for (ptrdiff_t a = 0; a < kh; a++)
                        for (ptrdiff_t b = 0; b < kw; b++) {
                            const ptrdiff_t hh = h + a - top, ww = c0 + b - left;
                            const C xv = hh >= 0 && hh < H && ww >= 0 && ww < W
                                             ? (C)exact_value<T>(&x[(size_t)(
                                                   ((o * H + hh) * W + ww) * Cn + c)])
                                             : C(0);
                            const C term = xv * w[(size_t)((a * kw + b) * Cn + c)];
                            acc = a == 0 && b == 0 ? term : acc + term;
                        }
                    if (with_bias)
                        acc = acc + bias[(size_t)c];
                    if (act)
                        acc = act_ref(acc, act);
                    const ptrdiff_t at = ((o * H + h) * W + c0) * Cn + c;
                    const double xa = exact_value<T>(&x[(size_t)at]);
                    if (residual)
                        acc = acc + (C)xa;
                    const double r = round_once<T>((double)acc);
                    want[(size_t)at] = r;
                    tol[(size_t)at] = 8 * eps_c * (std::fabs(r) + std::fabs(xa)) + 1e-300
                                      + (half ? eps_t * std::fabs(r) + step_t : 0.0);
                }
    const char *acts[3] = {"none", "gelu", "tanh"};
    std::string name = std::string("conv ") + Info<T>::name() + " (" + std::to_string(outer);
    for (int k = 1; k < 4; k++)
        name += ", " + std::to_string(s[k]);
    name += ") kernel " + std::to_string(kh) + " x " + std::to_string(kw) + " activation "
            + acts[act] + (residual ? " residual" : "") + (with_bias ? " bias" : "");
    FirstRun first;
    for (int level : levels()) {
        set_simd_level(level);
        for (const FamVariant &v : kFamVariants) {
            Buf xb((size_t)n * sizeof(T), (3 - v.off) * sizeof(T));
            Buf out((size_t)n * sizeof(T), v.off * sizeof(T));
            std::memcpy(xb.p, x.data(), (size_t)n * sizeof(T));
            std::memset(out.p, 0x5a, (size_t)n * sizeof(T));
            fam::ConvJob job{};
            job.x = xb.p;
            job.w = (const char *)w.data();
            job.bias = with_bias ? (const char *)bias.data() : nullptr;
            job.out = out.p;
            job.outer = outer;
            job.H = H;
            job.W = W;
            job.C = Cn;
            job.kh = kh;
            job.kw = kw;
            job.top = top;
            job.left = left;
            job.act = act;
            job.residual = residual;
            fam::conv_grid<T>(job, v.threads);
            const std::string what = name + " level " + simd_level_name(level) + " threads "
                                     + std::to_string(v.threads) + " offsets "
                                     + std::to_string(3 - v.off) + " " + std::to_string(v.off);
            near<T>(out.p, want.data(), act ? tol.data() : nullptr, n, what);
            first.check<T>(out.p, n, what);
        }
    }
}

void conv_types(Rng &rng, const ptrdiff_t (&s)[6], int act, bool residual, bool with_bias)
{
    check_conv<float>(rng, s, act, residual, with_bias);
    check_conv<double>(rng, s, act, residual, with_bias);
    check_conv<f16>(rng, s, act, residual, with_bias);
    check_conv<bf16>(rng, s, act, residual, with_bias);
}

void conv_suite(Rng &rng, bool quick)
{
    // (outer, H, W, C, kh, kw): one element; 1-D (W = 1) odd and even kernels; channels past
    // a tile of 256; 2-D; kernels wider than the grid; several chunks of rows (two threads)
    const ptrdiff_t shapes[][6] = {{1, 1, 1, 1, 1, 1},  {2, 9, 1, 5, 3, 1},   {1, 13, 1, 300, 4, 1},
                                   {2, 5, 7, 33, 3, 3}, {1, 3, 4, 17, 5, 6},  {3, 20, 1, 3, 25, 1},
                                   {1, 6, 5, 260, 2, 2}};
    const ptrdiff_t big[6] = {quick ? 1 : 2, quick ? 30 : 60, 1, 600, 5, 1};
    // (activation, residual, bias)
    const int combos[][3] = {{0, 1, 1}, {0, 0, 0}, {1, 1, 1}, {1, 0, 0}, {2, 1, 0}, {2, 0, 1}};
    for (const auto &s : shapes)
        for (const auto &m : combos)
            conv_types(rng, s, m[0], m[1], m[2]);
    for (int act = 0; act < 3; act++)
        conv_types(rng, big, act, true, true);
}


// ---- resample: separable taps, the first axis then the second, in double -----------------
//
// The generic path's definition (arrpos/_taps.py): along H, sum over taps t of
// x[hidx[r, t]] * hw[r, t], products rounded and added in tap order in float64; then along W
// the same over that result; rounded once to T. An axis without taps keeps its length.
// Strided input (padded rows and pixels), planes of the output apart by a gap.
template <class T>
void check_resample(Rng &rng, const ptrdiff_t (&s)[6], ptrdiff_t th, ptrdiff_t tw)
{
    const ptrdiff_t outer = s[0], H = s[1], W = s[2], C = s[3];
    const ptrdiff_t Ho = th ? s[4] : H, Wo = tw ? s[5] : W;
    const ptrdiff_t xs_w = C + 2, xs_h = W * xs_w + 3, xs_outer = H * xs_h + 1;
    const ptrdiff_t plane = Ho * Wo * C, os_outer = plane + 5, nx = outer * xs_outer;
    std::vector<T> x((size_t)nx);
    for (ptrdiff_t i = 0; i < nx; i++)
        x[(size_t)i] = from_double<T>(rng.uniform(-4, 4));
    wild(rng, x.data(), nx / 10);  // a tenth of any magnitude, infinities and NaNs
    std::vector<int64_t> hidx((size_t)(Ho * th)), widx((size_t)(Wo * tw));
    std::vector<double> hw(hidx.size()), ww(widx.size());
    for (auto &v : hidx)
        v = rng.below(H);
    for (auto &v : widx)
        v = rng.below(W);
    for (auto &v : hw)
        v = rng.uniform(-0.5, 1.5);
    for (auto &v : ww)
        v = rng.uniform(-0.5, 1.5);
    std::vector<double> want((size_t)(outer * plane)), first((size_t)(W * C));
    for (ptrdiff_t o = 0; o < outer; o++)
        for (ptrdiff_t r = 0; r < Ho; r++) {
            for (ptrdiff_t w = 0; w < W; w++)
                for (ptrdiff_t c = 0; c < C; c++) {
                    auto at = [&](ptrdiff_t h) {
                        return exact_value<T>(&x[(size_t)(o * xs_outer + h * xs_h + w * xs_w
                                                          + c)]);
                    };
                    double acc = th ? at(hidx[(size_t)(r * th)]) * hw[(size_t)(r * th)] : at(r);
                    for (ptrdiff_t t = 1; t < th; t++)
                        acc = acc + at(hidx[(size_t)(r * th + t)]) * hw[(size_t)(r * th + t)];
                    first[(size_t)(w * C + c)] = acc;
                }
            for (ptrdiff_t wo = 0; wo < Wo; wo++)
                for (ptrdiff_t c = 0; c < C; c++) {
                    auto at = [&](ptrdiff_t w) { return first[(size_t)(w * C + c)]; };
                    double acc = tw ? at(widx[(size_t)(wo * tw)]) * ww[(size_t)(wo * tw)] : at(wo);
                    for (ptrdiff_t t = 1; t < tw; t++)
                        acc = acc + at(widx[(size_t)(wo * tw + t)]) * ww[(size_t)(wo * tw + t)];
                    want[(size_t)(o * plane + (r * Wo + wo) * C + c)] = round_once<T>(acc);
                }
        }
    std::string name = std::string("resample ") + Info<T>::name() + " (" + std::to_string(outer);
    for (int k = 1; k < 4; k++)
        name += ", " + std::to_string(s[k]);
    name += ") -> (" + std::to_string(Ho) + ", " + std::to_string(Wo) + ") taps "
            + std::to_string(th) + " x " + std::to_string(tw);
    FirstRun firstrun;
    for (int level : levels()) {
        set_simd_level(level);
        for (const FamVariant &v : kFamVariants) {
            Buf xb((size_t)nx * sizeof(T), (3 - v.off) * sizeof(T));
            Buf out((size_t)(outer * os_outer) * sizeof(T), v.off * sizeof(T));
            std::memcpy(xb.p, x.data(), (size_t)nx * sizeof(T));
            std::memset(out.p, 0x5a, (size_t)(outer * os_outer) * sizeof(T));
            fam::ResampleJob job{};
            job.x = xb.p;
            job.out = out.p;
            job.hidx = th ? hidx.data() : nullptr;
            job.hw = th ? hw.data() : nullptr;
            job.widx = tw ? widx.data() : nullptr;
            job.ww = tw ? ww.data() : nullptr;
            job.outer = outer;
            job.H = H;
            job.W = W;
            job.C = C;
            job.Ho = Ho;
            job.Wo = Wo;
            job.th = th;
            job.tw = tw;
            job.xs_outer = xs_outer;
            job.xs_h = xs_h;
            job.xs_w = xs_w;
            job.os_outer = os_outer;
            fam::resample<T>(job, v.threads);
            std::vector<char> got;  // the planes, without the gaps between them
            for (ptrdiff_t o = 0; o < outer; o++)
                got.insert(got.end(), out.p + o * os_outer * (ptrdiff_t)sizeof(T),
                           out.p + (o * os_outer + plane) * (ptrdiff_t)sizeof(T));
            const std::string what = name + " level " + simd_level_name(level) + " threads "
                                     + std::to_string(v.threads) + " offsets "
                                     + std::to_string(3 - v.off) + " " + std::to_string(v.off);
            near<T>(got.data(), want.data(), nullptr, outer * plane, what);
            firstrun.check<T>(got.data(), outer * plane, what);
        }
    }
}

void resample_suite(Rng &rng)
{
    // (outer, H, W, C, Ho, Wo): one element; channels past a tile of 512; up and down
    const ptrdiff_t shapes[][6] = {{1, 1, 1, 1, 1, 1}, {2, 5, 4, 7, 9, 3}, {1, 3, 6, 600, 4, 2},
                                   {1, 14, 14, 5, 32, 32}};
    // taps per axis: none (the axis kept), 1 to 4 (one pass), 5 and 9 (several passes)
    const ptrdiff_t taps[][2] = {{0, 3}, {2, 0}, {0, 0}, {1, 1}, {4, 3}, {5, 9}, {9, 2}};
    for (const auto &s : shapes)
        for (const auto &t : taps) {
            check_resample<float>(rng, s, t[0], t[1]);
            check_resample<double>(rng, s, t[0], t[1]);
            check_resample<f16>(rng, s, t[0], t[1]);
            check_resample<bf16>(rng, s, t[0], t[1]);
        }
}

// ---- clip_shift: clip(x, lo, hi) + shift, exact integers ---------------------------------
//
// The definition (arrpos/_backends/_xp.py clip_shift: the input widened exactly, clipped,
// shifted): here each value compared as an exact integer (unsigned 64-bit values past
// INT64_MAX above every bound), the sum in int64 (it fits the output by the caller's check).
template <class I>
int64_t clip_ref(I v, int64_t lo, int64_t hi, int64_t shift)
{
    int64_t c;
    if (!std::is_signed<I>::value && (uint64_t)v > (uint64_t)INT64_MAX)
        c = hi;
    else
        c = (int64_t)v < lo ? lo : ((int64_t)v > hi ? hi : (int64_t)v);
    return c + shift;
}

template <class I, class O>
void check_clip(Rng &rng, ptrdiff_t rows, ptrdiff_t cols, ptrdiff_t cs_pad, bool reversed,
                int64_t lo, int64_t hi, int64_t shift)
{
    // x: rows at stride rs, elements at stride cs (cs_pad + 1), reversed: both negative
    const ptrdiff_t cs = cs_pad + 1, rs = cols * cs + 3, nx = rows * rs + 8;
    std::vector<I> x((size_t)nx);
    const I edges[] = {std::numeric_limits<I>::min(), std::numeric_limits<I>::max(), (I)0,
                       (I)1, (I)(std::numeric_limits<I>::min() + 1),
                       (I)(std::numeric_limits<I>::max() - 1)};
    for (auto &v : x) {
        const uint64_t r = rng.next();
        v = r % 7 == 0 ? edges[(r >> 8) % 6] : (r % 3 == 0 ? (I)(int64_t)((r >> 8) % 81 - 40)
                                                            : (I)(r >> 3));
    }
    const ptrdiff_t n = rows * cols;
    const I *base = x.data() + (reversed ? (rows - 1) * rs + (cols - 1) * cs : 0);
    const ptrdiff_t rstep = reversed ? -rs : rs, cstep = reversed ? -cs : cs;
    std::vector<O> want((size_t)n);
    for (ptrdiff_t r = 0; r < rows; r++)
        for (ptrdiff_t c = 0; c < cols; c++)
            want[(size_t)(r * cols + c)] = (O)clip_ref<I>(base[r * rstep + c * cstep], lo, hi,
                                                          shift);
    const std::string name = std::string("clip_shift ") + std::to_string(sizeof(I) * 8)
                             + (std::is_signed<I>::value ? "-bit signed" : "-bit unsigned")
                             + " -> " + std::to_string(sizeof(O) * 8) + "-bit (" +
                             std::to_string(rows) + ", " + std::to_string(cols) + ") stride "
                             + std::to_string(cstep) + " [" + std::to_string(lo) + ", "
                             + std::to_string(hi) + "] + " + std::to_string(shift);
    for (int level : levels()) {
        set_simd_level(level);
        for (const FamVariant &v : kFamVariants) {
            Buf out((size_t)n * sizeof(O), v.off * sizeof(O));
            std::memset(out.p, 0x5a, (size_t)n * sizeof(O));
            fam::ClipJob job{};
            job.x = (const char *)base;
            job.out = out.p;
            job.rows = rows;
            job.cols = cols;
            job.rs = rstep;
            job.cs = cstep;
            job.lo = lo;
            job.hi = hi;
            job.shift = shift;
            job.stream = v.stream;
            fam::clip_shift<I, O>(job, v.threads);
            // (the reference's integers: every level and variant equal to them, hence to
            // each other)
            g_checked++;
            for (ptrdiff_t i = 0; i < n; i++) {
                O got;
                std::memcpy(&got, out.p + i * (ptrdiff_t)sizeof(O), sizeof(O));
                if (got != want[(size_t)i]) {
                    if (g_failures < 30)
                        std::printf("DIFF %s: element %td: %lld, reference %lld\n",
                                    (name + variant_name(level, v)).c_str(), i, (long long)got,
                                    (long long)want[(size_t)i]);
                    g_failures++;
                    break;
                }
            }
        }
    }
}

template <class I, class O>
void clip_cases(Rng &rng, bool quick)
{
    const int64_t omax = (int64_t)std::numeric_limits<O>::max();
    // (rows, cols, cs_pad, reversed): one element, a ragged row, strided, several chunks
    const ptrdiff_t shapes[][4] = {{1, 1, 0, 0}, {3, 37, 0, 0}, {5, 19, 2, 1}, {1, 1000, 1, 0},
                                   {300, 301, 0, 0}, {97, 211, 1, 1}};
    const int64_t ks[] = {0, 1, 3, 100, 40000, (int64_t)1 << 31, INT64_MAX / 2};
    for (const auto &s : shapes) {
        if (quick && s[0] * s[1] > 20000)
            continue;
        for (int64_t k : ks)
            if (2 * k <= omax)
                check_clip<I, O>(rng, s[0], s[1], s[2], s[3] != 0, -k, k, k);
        if (omax == INT64_MAX) {  // bounds past I's range: every value the same bound
            check_clip<I, O>(rng, s[0], s[1], s[2], s[3] != 0, (int64_t)1 << 40,
                             ((int64_t)1 << 40) + 5, -((int64_t)1 << 40));
            check_clip<I, O>(rng, s[0], s[1], s[2], s[3] != 0, -((int64_t)1 << 40) - 5,
                             -((int64_t)1 << 40), (int64_t)1 << 40);
            check_clip<I, O>(rng, s[0], s[1], s[2], s[3] != 0, -100, 300, 7);
        }
    }
}

void clip_suite(Rng &rng, bool quick)
{
    clip_cases<int8_t, int8_t>(rng, quick);
    clip_cases<int16_t, int16_t>(rng, quick);
    clip_cases<int32_t, int32_t>(rng, quick);
    clip_cases<int64_t, int64_t>(rng, quick);
    clip_cases<int8_t, int64_t>(rng, quick);
    clip_cases<int16_t, int64_t>(rng, quick);
    clip_cases<int32_t, int64_t>(rng, quick);
    clip_cases<uint8_t, int64_t>(rng, quick);
    clip_cases<uint16_t, int64_t>(rng, quick);
    clip_cases<uint32_t, int64_t>(rng, quick);
    clip_cases<uint64_t, int64_t>(rng, quick);
}

}  // namespace

int main(int argc, char **argv)
{
    const char *expect = nullptr;
    bool full_exhaustive = false, quick = false;
    for (int i = 1; i < argc; i++) {
        if (!std::strcmp(argv[i], "--expect") && i + 1 < argc)
            expect = argv[++i];
        else if (!std::strcmp(argv[i], "--exhaustive"))
            full_exhaustive = true;
        else if (!std::strcmp(argv[i], "--quick"))
            quick = true;
        else {
            std::fprintf(stderr, "usage: %s [--expect LEVEL_NAME] [--exhaustive] [--quick]\n",
                         argv[0]);
            return 2;
        }
    }
    const int top = cpu_level();
    std::printf("levels: ");
    for (int l : levels())
        std::printf("%d %s%s", l, simd_level_name(l), l == top ? " (selected)\n" : ", ");
    if (simd_level() != top)
        std::printf("(ARRPOS_SIMD_LEVEL caps the default level at %d; every level runs)\n",
                    simd_level());
#if ARRPOS_X86 && defined(__GNUC__) && !defined(__clang__)
    {  // the CPUID reading (also MSVC's) against GCC's own
        __builtin_cpu_init();
        const X86Features f = x86_features();
        const bool gcc[6] = {(bool)__builtin_cpu_supports("avx2"),
                             (bool)__builtin_cpu_supports("fma"),
                             (bool)__builtin_cpu_supports("f16c"),
                             (bool)__builtin_cpu_supports("avx512f"),
                             (bool)__builtin_cpu_supports("avx512dq"),
                             (bool)__builtin_cpu_supports("avx512bf16")};
        const bool ours[6] = {f.avx2, f.fma, f.f16c, f.avx512f, f.avx512dq, f.avx512bf16};
        for (int k = 0; k < 6; k++)
            if (gcc[k] != ours[k]) {
                std::printf("FAIL: CPUID feature %d reads %d, GCC's __builtin_cpu_supports %d\n",
                            k, ours[k], gcc[k]);
                g_failures++;
            }
    }
#endif
    if (expect && std::strcmp(expect, simd_level_name(top)) != 0) {
        std::printf("FAIL: this CPU selects %s, expected %s\n", simd_level_name(top), expect);
        return 1;
    }
    Rng rng(2028);
    exhaustive(rng, full_exhaustive ? 1 : 4093);
    apply_suite<float, float>(rng, quick);
    apply_suite<double, double>(rng, quick);
    apply_suite<f16, f16>(rng, quick);
    apply_suite<f16, float>(rng, quick);
    apply_suite<bf16, bf16>(rng, quick);
    apply_suite<bf16, float>(rng, quick);
    conversion_suite<f16>(rng, quick ? 1 << 16 : 1 << 20);
    conversion_suite<bf16>(rng, quick ? 1 << 16 : 1 << 20);
    table_suite(rng, quick);
    copy_suite(rng);
    alibi_suite(rng, quick);
    gather_suite(rng, quick);
    toeplitz_suite(rng, quick);
    conv_suite(rng, quick);
    resample_suite(rng);
    clip_suite(rng, quick);
    blocks_trim();
    Block blk = block_alloc(3 << 20);  // (memory.hpp builds and runs on this platform)
    if (!blk.ptr || blk.size < (3u << 20)) {
        std::printf("FAIL block_alloc\n");
        g_failures++;
    } else {
        std::memset(blk.ptr, 1, blk.size);
        block_release(blk);
        blocks_trim();
    }
    std::printf("%ld comparisons, %d failures; threads: %s, %d\n", g_checked, g_failures,
                have_threads() ? "pool" : "none", max_threads());
    return g_failures ? 1 : 0;
}
