// Kernel equivalence driver: every kernel at every SIMD level this CPU runs, against the
// portable level's results computed in the same process, bit for bit (NaN at the same places;
// a NaN's payload and sign follow the operand order the compiler picked, which IEEE leaves
// open, as tests/test_adversarial_kernels.py compares). No Python: it includes the kernel
// headers directly, so it runs under qemu-user (aarch64) and Wine, and natively here.
//
//   g++ -std=c++17 -O2 -ffp-contract=off -fno-math-errno -pthread -Icsrc
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
// the streaming copy and fill.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

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
