// The CPU kernels: RoPE apply (tables given, or gathered from half-width caches by position
// id), sinusoid and RoPE cos/sin tables, and a streaming copy (the benchmarks' limit row).
//
// Entry points take strided arrays as the Cython layer sees them (byte strides), plan the rows
// (leading axes merged where every operand allows), pick the instruction set once per call
// (simd.hpp) and split the rows into chunks for the thread pool (pool.hpp). The row kernels
// themselves are in kernels.inc, compiled once per instruction set.
#ifndef ARRPOS_KERNELS_HPP
#define ARRPOS_KERNELS_HPP
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>
#include "pool.hpp"
#include "simd.hpp"
#include "types.hpp"

namespace arrpos {

enum Status { OK = 0, UNSUPPORTED = 1, BAD_POSITION = 2 };

// What one apply call needs inside the row loops (element strides of the innermost axis).
struct RopeCall {
    ptrdiff_t R, D, ldc;                 // rotary width, row length, cache row length (R/2)
    ptrdiff_t xs, os, cs, ss, ps;        // innermost leading axis strides
    bool interleaved, inverse;
};

// Exact rotations of a position p = q*B + r (+ f): rot(p w) = rot(q B w) rot(r w) [rot(f w)].
struct Rotations {
    const double *rc, *rs;  // (B, nf) rot(r w), r < B, B a power of two
    const double *pc, *ps;  // (npow, nf) rot(2**k B w)
    const double *w_hi, *w_lo;  // the frequencies as an exact two-term sum
    ptrdiff_t block, npow, nf;
};

// One table call: rows of pos into a (and b: RoPE sin), lda elements apart.
struct TableJob {
    Rotations rot;
    const double *pos;
    ptrdiff_t n, lda, chunk_rows;
    char *a, *b;
    int layout;  // see table_row in kernels.inc
    double scale;
    bool stream;
};

}  // namespace arrpos

// Each x86 instruction set's copy of the row kernels is compiled for its target: GCC by a
// pragma, Clang by an attribute on every function of the copy; MSVC needs neither.
#if ARRPOS_X86 && defined(__clang__)
#define ARRPOS_PRAGMA(...) _Pragma(#__VA_ARGS__)
#define ARRPOS_CLANG_PUSH(t) \
    ARRPOS_PRAGMA(clang attribute push(__attribute__((target(t))), apply_to = function))
#define ARRPOS_PUSH_AVX512 ARRPOS_CLANG_PUSH("avx512f,avx2,fma,f16c")
#define ARRPOS_PUSH_AVX512BF16 ARRPOS_CLANG_PUSH("avx512f,avx512dq,avx512bf16,avx2,fma,f16c")
#define ARRPOS_PUSH_AVX2 ARRPOS_CLANG_PUSH("avx2,fma,f16c")
#define ARRPOS_POP _Pragma("clang attribute pop")
#elif ARRPOS_X86 && defined(__GNUC__)
#define ARRPOS_PUSH_AVX512 \
    _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx2,fma,f16c\")")
#define ARRPOS_PUSH_AVX512BF16 \
    _Pragma("GCC push_options") \
    _Pragma("GCC target(\"avx512f,avx512dq,avx512bf16,avx2,fma,f16c\")")
#define ARRPOS_PUSH_AVX2 _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c\")")
#define ARRPOS_POP _Pragma("GCC pop_options")
#else
#define ARRPOS_PUSH_AVX512
#define ARRPOS_PUSH_AVX512BF16
#define ARRPOS_PUSH_AVX2
#define ARRPOS_POP
#endif

#if ARRPOS_X86
ARRPOS_PUSH_AVX512
namespace arrpos { namespace isa_avx512 {
using Isa = Avx512;
#include "kernels.inc"
}}
ARRPOS_POP
#if ARRPOS_X86_BF16
ARRPOS_PUSH_AVX512BF16
namespace arrpos { namespace isa_avx512bf16 {
using Isa = Avx512Bf16;
#include "kernels.inc"
}}
ARRPOS_POP
#endif
ARRPOS_PUSH_AVX2
namespace arrpos { namespace isa_avx2 {
using Isa = Avx2;
#include "kernels.inc"
}}
ARRPOS_POP
#endif
#if ARRPOS_NEON
namespace arrpos { namespace isa_neon {
using Isa = Neon;
#include "kernels.inc"
}}
#endif
namespace arrpos { namespace isa_portable {
using Isa = Portable;
#include "kernels.inc"
}}

namespace arrpos {

constexpr int kMaxAxes = 8;
enum Operand { OX, OOUT, OCOS, OSIN, OPOS, NOPS };

// A strided array as Cython passes it: data, shape and byte strides (NumPy's npy_intp).
struct Strided {
    char *data;
    int ndim;
    const ptrdiff_t *shape;
    const ptrdiff_t *strides;
};

// The leading axes of x (all but the last), with size-1 axes dropped and neighbours merged
// where every operand's strides allow; strides in elements of each operand, 0 = broadcast.
struct RowPlan {
    int nax = 0;
    ptrdiff_t n[kMaxAxes];
    ptrdiff_t s[NOPS][kMaxAxes];
    ptrdiff_t rows = 1;
};

// ops[k] (null: absent) has lead[k] leading axes aligned to the right of x's leading axes.
inline int plan_rows(RowPlan &plan, const Strided *const ops[NOPS], const int lead[NOPS],
                     const ptrdiff_t item[NOPS])
{
    const Strided &x = *ops[OX];
    int L = x.ndim - 1;
    for (int k = 0; k < NOPS; k++)
        if (ops[k] && lead[k] > L)
            return UNSUPPORTED;  // would broadcast x itself: the generic path decides
    for (int a = 0; a < L; a++) {
        ptrdiff_t n = x.shape[a], st[NOPS] = {0, 0, 0, 0, 0};
        for (int k = 0; k < NOPS; k++) {
            if (!ops[k])
                continue;
            int j = a - (L - lead[k]);
            if (j < 0)
                continue;
            ptrdiff_t m = ops[k]->shape[j], b = ops[k]->strides[j];
            if (m != n && m != 1)
                return UNSUPPORTED;
            if (m == n && n != 1) {
                if (b % item[k])
                    return UNSUPPORTED;  // e.g. a packed record field
                st[k] = b / item[k];
            }
        }
        if (n == 0) {
            plan.rows = 0;
            return OK;
        }
        if (n == 1)
            continue;
        int last = plan.nax - 1;
        bool merge = last >= 0;
        for (int k = 0; k < NOPS && merge; k++)
            merge = plan.s[k][last] == st[k] * n;
        if (merge) {
            plan.n[last] *= n;
            for (int k = 0; k < NOPS; k++)
                plan.s[k][last] = st[k];
        } else {
            if (plan.nax == kMaxAxes)
                return UNSUPPORTED;
            plan.n[plan.nax] = n;
            for (int k = 0; k < NOPS; k++)
                plan.s[k][plan.nax] = st[k];
            plan.nax++;
        }
        plan.rows *= n;
    }
    if (plan.nax == 0) {  // one row
        plan.n[0] = 1;
        for (int k = 0; k < NOPS; k++)
            plan.s[k][0] = 0;
        plan.nax = 1;
    }
    return OK;
}

// Byte range [lo, hi) that a strided array touches.
inline void extent(const Strided &a, ptrdiff_t item, char *&lo, char *&hi)
{
    lo = hi = a.data;
    for (int k = 0; k < a.ndim; k++) {
        if (a.shape[k] == 0) {
            hi = lo;
            return;
        }
        ptrdiff_t span = (a.shape[k] - 1) * a.strides[k];
        (span < 0 ? lo : hi) += span;
    }
    hi += item;
}

inline bool same_view(const Strided &a, const Strided &b)
{
    if (a.data != b.data || a.ndim != b.ndim)
        return false;
    for (int k = 0; k < a.ndim; k++)
        if (a.shape[k] != b.shape[k] || (a.shape[k] > 1 && a.strides[k] != b.strides[k]))
            return false;
    return true;
}

using RowsFn = void (*)(const RopeCall &, char *, char *, const char *, const char *,
                        const int64_t *, ptrdiff_t);

// Streaming stores exist on x86 only (every level there: SSE2's are baseline).
constexpr bool kCanStream = ARRPOS_X86;

// The row kernel for this instruction set level, element types and mode.
template <class T, class Tc, bool Gather, bool Stream>
RowsFn pick_rows(int level)
{
#if ARRPOS_X86
#if ARRPOS_X86_BF16
    if constexpr (std::is_same<T, bf16>::value || std::is_same<Tc, bf16>::value) {
        if (level == 3)  // only bfloat16 gains from it
            return &isa_avx512bf16::rope_rows<T, Tc, Gather, Stream>;
    }
#endif
    if (level >= 2)
        return &isa_avx512::rope_rows<T, Tc, Gather, Stream>;
    if (level == 1)
        return &isa_avx2::rope_rows<T, Tc, Gather, Stream>;
#elif ARRPOS_NEON
    if (level >= 1)
        return &isa_neon::rope_rows<T, Tc, Gather, false>;
#endif
    (void)level;
    return &isa_portable::rope_rows<T, Tc, Gather, Stream && kCanStream>;
}

struct ApplyJob {
    RowsFn fn;
    RopeCall call;
    const RowPlan *plan;
    char *base[NOPS];
    ptrdiff_t elem[NOPS];  // item sizes
    const char *cache_cos, *cache_sin;  // gathered rows start at the caches (else null)
    ptrdiff_t chunk_rows;
    bool stream;
};

// Rows [r0, r1) of the plan, in runs along the innermost axis.
inline void apply_chunk(void *ctx, ptrdiff_t chunk)
{
    const ApplyJob &j = *(const ApplyJob *)ctx;
    const RowPlan &p = *j.plan;
    const int in = p.nax - 1;
    const ptrdiff_t C = p.n[in];
    ptrdiff_t r = chunk * j.chunk_rows, r1 = r + j.chunk_rows;
    if (r1 > p.rows)
        r1 = p.rows;
    while (r < r1) {
        ptrdiff_t outer = r / C, c0 = r - outer * C;
        ptrdiff_t cnt = C - c0 < r1 - r ? C - c0 : r1 - r;
        char *ptr[NOPS];
        for (int k = 0; k < NOPS; k++) {
            ptrdiff_t off = c0 * p.s[k][in], o = outer;
            for (int a = in - 1; a >= 0; a--) {
                ptrdiff_t q = o / p.n[a];
                off += (o - q * p.n[a]) * p.s[k][a];
                o = q;
            }
            ptr[k] = j.base[k] ? j.base[k] + off * j.elem[k] : nullptr;
        }
        const char *c = j.cache_cos ? j.cache_cos : ptr[OCOS];
        const char *s = j.cache_sin ? j.cache_sin : ptr[OSIN];
        j.fn(j.call, ptr[OOUT], ptr[OX], c, s, (const int64_t *)ptr[OPOS], cnt);
        r += cnt;
    }
#if ARRPOS_X86
    // streaming stores ordered before the chunk is reported done; once per chunk, not per
    // run of rows (a fence drains the write-combining buffers: ~8000 per 128 MiB cost 10%)
    if (j.stream)
        _mm_sfence();
#endif
}

struct ApplyArgs {
    Strided x, out, cos, sin, pos;  // pos.data null: tables given (cos/sin full width)
    bool interleaved, inverse, stream;
    bool dry;  // check only: whether the call would be served, nothing written
    int nthreads;
    ptrdiff_t chunk_bytes;
};

// Checks every operand, then rotates. Returns UNSUPPORTED (nothing written) for what the
// generic path should serve, BAD_POSITION for an id outside the cache.
template <class T, class Tc>
int rope_apply(const ApplyArgs &a)
{
    const bool gather = a.pos.data != nullptr;
    const ptrdiff_t it = sizeof(T), itc = sizeof(Tc);
    const ptrdiff_t D = a.x.shape[a.x.ndim - 1];
    const ptrdiff_t R = gather ? 2 * a.cos.shape[1] : a.cos.shape[a.cos.ndim - 1];
    if (a.x.ndim < 1 || a.out.ndim != a.x.ndim || R < 2 || R % 2 || R > D)
        return UNSUPPORTED;
    for (int k = 0; k < a.x.ndim; k++)
        if (a.out.shape[k] != a.x.shape[k])
            return UNSUPPORTED;
    auto unit = [](const Strided &s, ptrdiff_t item) {
        return s.shape[s.ndim - 1] <= 1 || s.strides[s.ndim - 1] == item;
    };
    if (!unit(a.x, it) || !unit(a.out, it) || !unit(a.cos, itc) || !unit(a.sin, itc))
        return UNSUPPORTED;
    if (a.sin.ndim != a.cos.ndim)
        return UNSUPPORTED;
    for (int k = 0; k < a.cos.ndim; k++)
        if (a.sin.shape[k] != a.cos.shape[k])
            return UNSUPPORTED;
    for (int k = 0; k < a.out.ndim; k++)  // a broadcast out would be rotated repeatedly
        if (a.out.shape[k] > 1 && a.out.strides[k] == 0)
            return UNSUPPORTED;
    // out may be x itself, and must not meet any other input's memory (rows would read what
    // others wrote); arrpos._backends._memory decides what such calls get instead
    const bool inplace = same_view(a.x, a.out);
    char *ol, *oh;
    extent(a.out, it, ol, oh);
    auto meets = [&](const Strided &s, ptrdiff_t item) {
        char *lo, *hi;
        extent(s, item, lo, hi);
        return lo < oh && ol < hi;
    };
    if ((!inplace && meets(a.x, it)) || meets(a.cos, itc) || meets(a.sin, itc)
        || (gather && meets(a.pos, (ptrdiff_t)sizeof(int64_t))))
        return UNSUPPORTED;
    RopeCall call{R, D, R / 2, 0, 0, 0, 0, 0, a.interleaved, a.inverse};
    if (gather) {
        // caches (P, R/2), rows contiguous; every id in [0, P)
        if (a.cos.ndim != 2 || a.cos.strides[0] % itc || a.sin.strides[0] != a.cos.strides[0])
            return UNSUPPORTED;
        call.ldc = a.cos.strides[0] / itc;
    }
    RowPlan plan;
    const Strided *ops[NOPS] = {&a.x, &a.out, gather ? nullptr : &a.cos,
                                gather ? nullptr : &a.sin, gather ? &a.pos : nullptr};
    const int lead[NOPS] = {a.x.ndim - 1, a.x.ndim - 1, a.cos.ndim - 1, a.sin.ndim - 1,
                            a.pos.ndim};
    const ptrdiff_t item[NOPS] = {it, it, itc, itc, (ptrdiff_t)sizeof(int64_t)};
    int st = plan_rows(plan, ops, lead, item);
    if (st != OK)
        return st;
    if (gather && plan.rows > 0) {
        // positions are few (one per row): check them all before writing anything
        const ptrdiff_t P = a.cos.shape[0];
        bool bad = false;
        ptrdiff_t total = 1;
        for (int k = 0; k < a.pos.ndim; k++)
            total *= a.pos.shape[k];
        for (ptrdiff_t t = 0; t < total; t++) {
            ptrdiff_t off = 0, rem = t;
            for (int k = a.pos.ndim - 1; k >= 0; k--) {
                ptrdiff_t q = rem / a.pos.shape[k];
                off += (rem - q * a.pos.shape[k]) * a.pos.strides[k];
                rem = q;
            }
            int64_t v = *(const int64_t *)(a.pos.data + off);
            bad |= v < 0 || v >= P;
        }
        if (bad)
            return BAD_POSITION;
    }
    if (a.dry)
        return OK;
    const int in = plan.nax - 1;
    call.xs = plan.s[OX][in];
    call.os = plan.s[OOUT][in];
    call.cs = plan.s[OCOS][in];
    call.ss = plan.s[OSIN][in];
    call.ps = plan.s[OPOS][in];
    if (plan.rows == 0 || D == 0)
        return OK;
    // streaming stores need 16-byte aligned rows and half rows
    bool stream = kCanStream && a.stream && !inplace && ((uintptr_t)a.out.data % 16) == 0
                  && ((a.interleaved ? R : R / 2) * it) % 16 == 0;
    for (int k = 0; k < plan.nax && stream; k++)
        stream = (plan.s[OOUT][k] * it) % 16 == 0;
    const int level = simd_level();
    ApplyJob job;
    if (gather)
        job.fn = stream ? pick_rows<T, Tc, true, true>(level) : pick_rows<T, Tc, true, false>(level);
    else
        job.fn = stream ? pick_rows<T, Tc, false, true>(level) : pick_rows<T, Tc, false, false>(level);
    job.call = call;
    job.plan = &plan;
    job.stream = stream;
    char *bases[NOPS] = {a.x.data, a.out.data, gather ? nullptr : a.cos.data,
                         gather ? nullptr : a.sin.data, gather ? a.pos.data : nullptr};
    for (int k = 0; k < NOPS; k++) {
        job.base[k] = bases[k];
        job.elem[k] = item[k];
    }
    job.cache_cos = gather ? a.cos.data : nullptr;
    job.cache_sin = gather ? a.sin.data : nullptr;
    ptrdiff_t row_bytes = D * it;
    job.chunk_rows = a.chunk_bytes / row_bytes > 1 ? a.chunk_bytes / row_bytes : 1;
    ptrdiff_t nchunks = (plan.rows + job.chunk_rows - 1) / job.chunk_rows;
    parallel_for(nchunks, a.nthreads, apply_chunk, &job);
    return OK;
}

using TableFn = void (*)(const TableJob &, ptrdiff_t, ptrdiff_t);

template <class T, int Layout, bool Stream>
TableFn pick_table_isa(int level)
{
#if ARRPOS_X86
    if (level >= 2)
        return &isa_avx512::table_rows<T, Layout, Stream>;
    if (level == 1)
        return &isa_avx2::table_rows<T, Layout, Stream>;
#elif ARRPOS_NEON
    if (level >= 1)
        return &isa_neon::table_rows<T, Layout, false>;
#endif
    (void)level;
    return &isa_portable::table_rows<T, Layout, Stream && kCanStream>;
}

template <class T, bool Stream>
TableFn pick_table_layout(int level, int layout)
{
    switch (layout) {
    case 0: return pick_table_isa<T, 0, Stream>(level);
    case 1: return pick_table_isa<T, 1, Stream>(level);
    case 2: return pick_table_isa<T, 2, Stream>(level);
    case 3: return pick_table_isa<T, 3, Stream>(level);
    default: return pick_table_isa<T, 4, Stream>(level);
    }
}

// The row kernel for this level, layout and store kind; streaming stores need every vector
// store 16-byte aligned: the outputs, their rows and (split layouts) their second halves.
template <class T>
TableFn pick_table(const TableJob &job, int level)
{
    const ptrdiff_t it = sizeof(T);
    bool stream = kCanStream && job.stream && (uintptr_t)job.a % 16 == 0
                  && (uintptr_t)job.b % 16 == 0
                  && (job.lda * it) % 16 == 0 && (job.rot.nf * it) % 16 == 0;
    return stream ? pick_table_layout<T, true>(level, job.layout)
                  : pick_table_layout<T, false>(level, job.layout);
}

struct TableCtx {
    TableFn fn;
    const TableJob *job;
};

inline void table_chunk(void *ctx, ptrdiff_t chunk)
{
    const TableCtx &t = *(const TableCtx *)ctx;
    ptrdiff_t r0 = chunk * t.job->chunk_rows, r1 = r0 + t.job->chunk_rows;
    t.fn(*t.job, r0, r1 < t.job->n ? r1 : t.job->n);
}

// Sinusoid (layouts 0-2) or RoPE cos/sin (3-4) rows of every position, |pos| < 2**53.
template <class T>
void table(TableJob job, int nthreads, ptrdiff_t chunk_bytes)
{
    if (job.n == 0 || job.rot.nf == 0)
        return;
    ptrdiff_t row_bytes = 2 * job.rot.nf * (ptrdiff_t)sizeof(T) * (job.layout >= 3 ? 2 : 1);
    // a chunk re-anchors its block rotation (up to npow multiplies): keep chunks long
    ptrdiff_t rows = chunk_bytes / row_bytes;
    job.chunk_rows = rows < 4 * job.rot.block ? 4 * job.rot.block : rows;
    TableCtx ctx{pick_table<T>(job, simd_level()), &job};
    parallel_for((job.n + job.chunk_rows - 1) / job.chunk_rows, nthreads, table_chunk, &ctx);
}

// dst = src (n bytes) with streaming stores: the memory limit rows of the benchmarks. With a
// period (dividing 1 MiB), src holds that many bytes, repeated over dst: a streaming fill, the
// write limit.
inline void stream_copy(char *dst, const char *src, ptrdiff_t n, int nthreads,
                        ptrdiff_t period = 0)
{
    struct Ctx {
        char *dst;
        const char *src;
        ptrdiff_t n, chunk, period;
        int level;
    } ctx{dst, src, n, 1 << 20, period, simd_level()};
    auto fn = [](void *p, ptrdiff_t i) {
        const Ctx &c = *(const Ctx *)p;
        ptrdiff_t lo = i * c.chunk, len = c.n - lo < c.chunk ? c.n - lo : c.chunk;
        const ptrdiff_t step = c.period ? c.period : len;
        for (ptrdiff_t k = lo; k < lo + len; k += step) {
            const char *s = c.period ? c.src : c.src + k;
            const ptrdiff_t m = lo + len - k < step ? lo + len - k : step;
#if ARRPOS_X86
            if (c.level >= 2)
                isa_avx512::copy_bytes(c.dst + k, s, m, true);
            else if (c.level == 1)
                isa_avx2::copy_bytes(c.dst + k, s, m, true);
            else
#endif
                isa_portable::copy_bytes(c.dst + k, s, m, true);
        }
#if ARRPOS_X86
        _mm_sfence();
#endif
    };
    parallel_for((n + ctx.chunk - 1) / ctx.chunk, nthreads, fn, &ctx);
}

}  // namespace arrpos
#endif
