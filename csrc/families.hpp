// Kernels of the families beside RoPE and the sinusoids: the ALiBi bias forms, the
// relative-bias gather, the depthwise (convolutional) position encodings and the separable
// resampling of learned tables.
//
// They are write-bound (a bias is a fill of a few distinct values per row, or a gather from a
// small table), so the row loops are plain C++ that the compiler vectorises, and each piece of
// output goes through one store path: a small L1-resident buffer, or a source row that is
// already in cache, handed to stream_copy (kernels.hpp) for outputs large enough to stream.
// Values: the generic path's arithmetic, element for element (see each kernel).
#ifndef ARRPOS_FAMILIES_HPP
#define ARRPOS_FAMILIES_HPP
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>
#include "kernels.hpp"
#include "pool.hpp"
#include "types.hpp"

namespace arrpos {
namespace fam {

constexpr ptrdiff_t kPiece = 16384;  // bytes of a staged piece (L1-resident)
constexpr ptrdiff_t kChunk = 1 << 18;  // bytes of output per chunk of the pool
// a line of ids is copied run by run where its runs average this many ids (gathered else)
constexpr ptrdiff_t kRunLength = 8;

// n bytes from src (in cache) to dst: streamed past the cache (the instruction set's copy of
// stream_copy, without its fence: a fence per row costs a third of the time; ``fence`` once
// per chunk), or plain stores.
inline void put(char *dst, const char *src, ptrdiff_t n, bool stream, int level)
{
    if (!stream || n < 64) {
        std::memcpy(dst, src, (size_t)n);
        return;
    }
#if ARRPOS_X86  // (SSE2 streaming stores on every x86-64 level)
    if (level >= 2)
        isa_avx512::copy_bytes(dst, src, n, true);
    else if (level == 1)
        isa_avx2::copy_bytes(dst, src, n, true);
    else
#else
    (void)level;
#endif
        isa_portable::copy_bytes(dst, src, n, true);
}

inline void put(char *dst, const char *src, ptrdiff_t n, bool stream)
{
    put(dst, src, n, stream, stream ? simd_level() : 0);
}

// Consecutive pieces of one run of output, streamed in whole cache lines wherever they fall:
// a line that a piece leaves partly written waits in a 64-byte carry for the next piece to
// complete it, and goes out as one aligned line; the run's partial first and last lines
// (whose other bytes are not this run's) are written with ordinary stores. A line streamed in
// parts (16-byte pieces the write-combining buffer sees apart) or a run staged through a
// buffer costs several times its share; pieces go out from where they are.
class Streamer {
  public:
    Streamer(char *dst, bool stream, int level)
        : dst_(dst), lo_((ptrdiff_t)((uintptr_t)dst & 63)), stream_(stream), level_(level) {}
    Streamer(char *dst, bool stream) : Streamer(dst, stream, stream ? simd_level() : 0) {}
    ~Streamer() { finish(); }
    // The last line's bytes stored now (before a fence and the chunk's end); nothing later.
    void finish()
    {
        flush();
        lo_ = (ptrdiff_t)((uintptr_t)dst_ & 63);
    }
    void add(const char *src, ptrdiff_t n)
    {
        if (!stream_) {
            std::memcpy(dst_, src, (size_t)n);
            dst_ += n;
            return;
        }
        ptrdiff_t off = (ptrdiff_t)((uintptr_t)dst_ & 63);
        if (off) {  // the carried line first
            const ptrdiff_t m = 64 - off < n ? 64 - off : n;
            std::memcpy(carry_ + off, src, (size_t)m);
            dst_ += m;
            src += m;
            n -= m;
            if (off + m < 64)
                return;
            line_out(dst_ - 64);
        }
        const ptrdiff_t whole = n & ~(ptrdiff_t)63;
        if (whole) {
            put(dst_, src, whole, true, level_);
            dst_ += whole;
        }
        if (n > whole)
            std::memcpy(carry_, src + whole, (size_t)(n - whole));
        dst_ += n - whole;
    }

  private:
    // The carried line, complete at ``line``: streamed, or (the run's first, begun at lo_)
    // its own bytes stored.
    void line_out(char *line)
    {
        if (lo_) {
            std::memcpy(line + lo_, carry_ + lo_, (size_t)(64 - lo_));
            lo_ = 0;
        } else {
            put(line, carry_, 64, true, level_);
        }
    }
    // The last line, partly written: its bytes stored (after the run's first byte).
    void flush()
    {
        const ptrdiff_t off = (ptrdiff_t)((uintptr_t)dst_ & 63);
        if (!stream_ || off <= lo_)
            return;
        char *line = dst_ - off;
        std::memcpy(line + lo_, carry_ + lo_, (size_t)(off - lo_));
    }
    alignas(64) char carry_[64];
    char *dst_;
    ptrdiff_t lo_;  // where the run's bytes begin in the carried line (its first line only)
    bool stream_;
    int level_;
};

// Streaming stores ordered before a chunk is reported done.
inline void fence(bool stream)
{
#if ARRPOS_X86  // (SSE2 streaming stores on every x86-64 level)
    if (stream)
        _mm_sfence();
#else
    (void)stream;
#endif
}

// dst[i] = s * x[i] at the instruction set ``level`` (scale.inc; defined with the other rows
// compiled per instruction set, below).
template <class T>
inline void scale_row(int level, T *dst, const T *x, T s, ptrdiff_t n);

// slope * d in the generic path's arithmetic: float32/float64 slopes multiply the distance
// converted to their own type; 16-bit ones form the exact float64 product, rounded once.
template <class T>
inline T scaled(typename Elem<T>::C s, int64_t d)
{
    T v;
    if constexpr (sizeof(T) == 2)
        Elem<T>::store_exact(&v, (double)s * (double)d);
    else
        Elem<T>::store(&v, s * (typename Elem<T>::C)d);
    return v;
}

// Rows per chunk of a kernel whose chunk computes a line of (rows + k - 1) values and streams
// its rows as windows of it: chunks of several kChunk, so that the line is a small part of
// their work, yet at least eight a thread over all ``planes`` (heads).
inline ptrdiff_t window_rows(ptrdiff_t planes, ptrdiff_t rows, ptrdiff_t rowb, int nthreads)
{
    const ptrdiff_t least = kChunk / rowb > 0 ? kChunk / rowb : 1;
    const ptrdiff_t even = planes * rows / (8 * (ptrdiff_t)nthreads);
    ptrdiff_t per = 4 * least;
    if (per > even)
        per = even > least ? even : least;
    return per;
}

// ---- alibi_bias: (heads, q, k) -------------------------------------------------------------
//
// Element (h, i, j) depends on h and back = j - i - qoff only (key mode: on j only), so the
// rows of one head are windows of one line of values: each chunk computes the line of its
// rows once, then copies windows of it.
struct AlibiJob {
    const char *slopes;  // (heads,) of T
    char *out;
    ptrdiff_t heads, q, k, chunk_rows, chunks_per_head;
    int64_t qoff;
    int mode;  // 0 causal, 1 symmetric, 2 key
    bool stream;
};

template <class T>
void alibi_chunk(void *ctx, ptrdiff_t c)
{
    const AlibiJob &j = *(const AlibiJob *)ctx;
    const ptrdiff_t h = c / j.chunks_per_head, r0 = (c % j.chunks_per_head) * j.chunk_rows;
    const ptrdiff_t r1 = r0 + j.chunk_rows < j.q ? r0 + j.chunk_rows : j.q;
    const typename Elem<T>::C s = Elem<T>::load((const T *)j.slopes + h);
    const bool key = j.mode == 2;
    const ptrdiff_t len = key ? j.k : (r1 - r0) + j.k - 1;
    const int64_t base = key ? 0 : -(int64_t)(r1 - 1) - j.qoff;  // back of line[0]
    std::vector<T> line((size_t)(len > 0 ? len : 1));
    T *L = line.data();
    if (j.mode == 0) {
        for (ptrdiff_t u = 0; u < len; u++) {
            const int64_t b = base + u;
            L[u] = scaled<T>(s, b < 0 ? b : 0);
        }
    } else if (j.mode == 1) {
        for (ptrdiff_t u = 0; u < len; u++) {
            const int64_t b = base + u;
            L[u] = scaled<T>(s, b < 0 ? b : -b);
        }
    } else {
        for (ptrdiff_t u = 0; u < len; u++)
            L[u] = scaled<T>(s, (int64_t)u);
    }
    const ptrdiff_t rowb = j.k * (ptrdiff_t)sizeof(T);
    {  // the chunk's rows: one run of output
        Streamer out(j.out + ((ptrdiff_t)h * j.q + r0) * rowb, j.stream);
        if (rowb >= 2048 || !j.stream) {
            for (ptrdiff_t i = r0; i < r1; i++)
                out.add((const char *)(L + (key ? 0 : r1 - 1 - i)), rowb);
        } else {  // short rows: staged into pieces of whole rows (fewer, longer adds)
            const ptrdiff_t per = kPiece / rowb;
            std::vector<char> stage((size_t)(per * rowb));
            for (ptrdiff_t i = r0; i < r1;) {
                const ptrdiff_t n = r1 - i < per ? r1 - i : per;
                for (ptrdiff_t m = 0; m < n; m++)
                    std::memcpy(stage.data() + m * rowb, L + (key ? 0 : r1 - 1 - (i + m)),
                                (size_t)rowb);
                out.add(stage.data(), n * rowb);
                i += n;
            }
        }
    }
    fence(j.stream);
}

template <class T>
void alibi_bias(AlibiJob job, int nthreads)
{
    if (job.heads == 0 || job.q == 0 || job.k == 0)
        return;
    job.chunk_rows = window_rows(job.heads, job.q, job.k * (ptrdiff_t)sizeof(T), nthreads);
    job.chunks_per_head = (job.q + job.chunk_rows - 1) / job.chunk_rows;
    parallel_for(job.heads * job.chunks_per_head, nthreads, alibi_chunk<T>, &job);
}

// ---- alibi_bias_from_positions: (lead, heads, q, k) -----------------------------------------
//
// Positions come as int64 (both integer: the distance is an exact int64) or float64 (the
// distance a float64 difference); the product is formed in float64 and rounded once.
struct PositionsJob {
    const double *slopes;  // (heads,) float64 (exact widening of the slopes)
    const char *qp;  // (lead, q) of P
    const char *kp;  // (lead, k) of P
    char *out;
    ptrdiff_t lead, heads, q, k, chunk_rows, chunks_per_plane;
    int mode;
    bool stream;
};

template <class T, class P>
void positions_chunk(void *ctx, ptrdiff_t c)
{
    const PositionsJob &j = *(const PositionsJob *)ctx;
    const ptrdiff_t plane = c / j.chunks_per_plane;  // l * heads + h
    const ptrdiff_t l = plane / j.heads, h = plane % j.heads;
    const ptrdiff_t r0 = (c % j.chunks_per_plane) * j.chunk_rows;
    const ptrdiff_t r1 = r0 + j.chunk_rows < j.q ? r0 + j.chunk_rows : j.q;
    const double s = j.slopes[h];
    const P *qp = (const P *)j.qp + l * j.q;
    const P *kp = (const P *)j.kp + l * j.k;
    const ptrdiff_t per = kPiece / (ptrdiff_t)sizeof(T);
    std::vector<T> stage(j.stream ? (size_t)per : 1);
    char *dst = j.out + ((ptrdiff_t)plane * j.q + r0) * j.k * (ptrdiff_t)sizeof(T);
    Streamer out(dst, j.stream);  // (the chunk's rows: one run of output)
    for (ptrdiff_t i = r0; i < r1; i++) {
        const P qi = qp[i];
        for (ptrdiff_t j0 = 0; j0 < j.k; j0 += per) {
            const ptrdiff_t n = j.k - j0 < per ? j.k - j0 : per;
            const P *kr = kp + j0;
            T *st = j.stream ? stage.data() : (T *)dst;  // cached stores: into the output
            if (j.mode == 2) {
                for (ptrdiff_t m = 0; m < n; m++)
                    Elem<T>::store_exact(st + m, s * (double)kr[m]);
            } else if (j.mode == 0) {
                for (ptrdiff_t m = 0; m < n; m++) {
                    const P b = kr[m] - qi;
                    Elem<T>::store_exact(st + m, s * (double)(b < 0 ? b : (P)0));
                }
            } else {
                for (ptrdiff_t m = 0; m < n; m++) {
                    const P b = kr[m] - qi;
                    Elem<T>::store_exact(st + m, s * (double)((P)0 - (b < 0 ? -b : b)));
                }
            }
            if (j.stream)
                out.add((const char *)st, n * (ptrdiff_t)sizeof(T));
            dst += n * (ptrdiff_t)sizeof(T);
        }
    }
    out.finish();
    fence(j.stream);
}

template <class T, class P>
void alibi_positions(PositionsJob job, int nthreads)
{
    if (job.lead == 0 || job.heads == 0 || job.q == 0 || job.k == 0)
        return;
    const ptrdiff_t rowb = job.k * (ptrdiff_t)sizeof(T);
    job.chunk_rows = kChunk / rowb > 0 ? kChunk / rowb : 1;
    job.chunks_per_plane = (job.q + job.chunk_rows - 1) / job.chunk_rows;
    parallel_for(job.lead * job.heads * job.chunks_per_plane, nthreads, positions_chunk<T, P>,
                 &job);
}

// ---- alibi_bias_from_mask: (batch, heads, 1, k) ---------------------------------------------
//
// BLOOM's positions (cumsum(mask) - 1) * mask per batch row, times each slope (the
// ``scaled`` arithmetic of alibi_bias's key mode).
struct MaskJob {
    const char *slopes;  // (heads,) of T
    const char *mask;  // (batch, k) of M: bool or integers, read as unsigned (0/1 checked)
    char *out;
    ptrdiff_t batch, heads, k, heads_per_chunk, chunks_per_row;
    bool stream;
    std::atomic<int> *bad;  // set for a mask value other than 0 and 1
};

template <class T, class M>
void mask_chunk(void *ctx, ptrdiff_t c)
{
    const MaskJob &j = *(const MaskJob *)ctx;
    const ptrdiff_t b = c / j.chunks_per_row, h0 = (c % j.chunks_per_row) * j.heads_per_chunk;
    const ptrdiff_t h1 = h0 + j.heads_per_chunk < j.heads ? h0 + j.heads_per_chunk : j.heads;
    // positions as int32 (16-bit T: ``scaled`` takes them) or converted once to T (the
    // conversion the generic code's astype makes); k < 2**31. Not zero-filled: every element
    // is written below.
    using P = typename std::conditional<sizeof(T) == 2, int32_t, T>::type;
    std::unique_ptr<P[]> posbuf(new P[(size_t)j.k]);
    P *pos = posbuf.get();
    const M *m = (const M *)j.mask + b * j.k;
    // one pass over the mask, in blocks of 8: the values' OR (a value other than 0 and 1,
    // read as unsigned, shows as more than 1) and the running count; a block of real tokens
    // or of padding (a padded batch's every block but one) is written in vectors, a mixed
    // one element by element
    M any = 0;
    int32_t run = 0;  // real tokens before t
    ptrdiff_t t = 0;
    for (; t + 8 <= j.k; t += 8) {
        M o = 0, a = ~(M)0;
        for (int u = 0; u < 8; u++) {
            o |= m[t + u];
            a &= m[t + u];
        }
        any |= o;
        if (o == 1 && a == 1) {  // all 1
            for (int u = 0; u < 8; u++)
                pos[t + u] = (P)(run + u);
            run += 8;
        } else if (o == 0) {
            for (int u = 0; u < 8; u++)
                pos[t + u] = (P)0;
        } else {
            for (int u = 0; u < 8; u++) {
                const bool on = m[t + u] != 0;
                pos[t + u] = on ? (P)run : (P)0;
                run += on;
            }
        }
    }
    for (; t < j.k; t++) {
        any |= m[t];
        const bool on = m[t] != 0;
        pos[t] = on ? (P)run : (P)0;
        run += on;
    }
    if (any > 1) {  // nothing of this row's output written
        j.bad->store(1, std::memory_order_relaxed);
        return;
    }
    const ptrdiff_t rowb = j.k * (ptrdiff_t)sizeof(T);
    const int level = simd_level();
    std::unique_ptr<T[]> row(new T[j.stream ? (size_t)j.k : 1]);
    Streamer out(j.out + (b * j.heads + h0) * rowb, j.stream, level);  // (one run of rows)
    for (ptrdiff_t h = h0; h < h1; h++) {
        const typename Elem<T>::C s = Elem<T>::load((const T *)j.slopes + h);
        char *dst = j.out + (b * j.heads + h) * rowb;
        T *r = j.stream ? row.get() : (T *)dst;  // cached stores: straight into the output
        if constexpr (sizeof(T) == 2) {
            for (ptrdiff_t i = 0; i < j.k; i++)
                r[i] = scaled<T>(s, pos[i]);
        } else {
            scale_row<T>(level, r, pos, s, j.k);
        }
        if (j.stream)
            out.add((const char *)r, rowb);
    }
    out.finish();
    fence(j.stream);
}

// Returns false (output partly written) for a mask value other than 0 and 1.
template <class T, class M>
bool alibi_mask(MaskJob job, int nthreads)
{
    if (job.batch == 0 || job.heads == 0 || job.k == 0)
        return true;
    std::atomic<int> bad{0};
    job.bad = &bad;
    const ptrdiff_t rowb = job.k * (ptrdiff_t)sizeof(T);
    // chunks of 4 x the usual bytes: each computes its batch row's positions once
    job.heads_per_chunk = 4 * kChunk / rowb > 0 ? 4 * kChunk / rowb : 1;
    job.chunks_per_row = (job.heads + job.heads_per_chunk - 1) / job.heads_per_chunk;
    parallel_for(job.batch * job.chunks_per_row, nthreads, mask_chunk<T, M>, &job);
    return bad.load() == 0;
}

// ---- relative_bias: out[h, p] = table[index[p], h] ------------------------------------------
//
// A bit copy, so by element size (U: uint16/32/64). The table comes transposed, (heads,
// buckets), each head's row in cache. A 2-D index whose rows are shifts of each other
// (index[i, j] = index[i-1, j-1]: T5's and every bucket of key - query) is one line of q + k - 1
// ids, so each output row is a window of that line's values, copied like alibi_bias's rows;
// so is each residue's rows of an index of a period p (index[i, j] = index[i-p, j-p]: Swin's
// of a w x w window, p = w). Rows that are shifts but for a few columns (BEiT's) move on from
// the row before; any other index is gathered in tiles, each read once (as int32) for every
// head, with the instruction set's gathers. A line's ids that come in runs of consecutive ids
// (Swin's: each window row's ids count down along a row of its 2-D table) are copied run by run
// from their head's row of the table, or of the table reversed, instead of gathered.
struct GatherJob {
    const char *table;  // (heads, buckets) of U
    const uint32_t *wide;  // 16-bit tables: the same (heads, buckets) widened (vector gathers)
    const char *reversed;  // (heads, buckets) of U, each head's row reversed (lines by runs)
    const char *index;  // (n,) of I; (rows, n / rows) when rows > 0
    char *out;  // (heads, n) of U
    ptrdiff_t heads, buckets, n, rows, tile, cols, chunk_rows;
    ptrdiff_t period, blocks_per_line;  // window_chunk's rows (see there)
    const ptrdiff_t *line_at;  // where each block's line ids start in ids (and in runs)
    int32_t *ids;
    int32_t *runs;  // per block, at 2 * line_at: its line's runs, (length, first id) each
    ptrdiff_t *run_count;  // per block: its line's runs (0: gathered instead)
    std::atomic<int> *line_ready;  // per block: 1 its ids and runs are in place, 2 out of range
    int level;  // the instruction set of the gathers
    bool stream;
    std::atomic<int> *bad;  // bit 1: an index outside [0, buckets); bit 2: rows not shifts
};

}  // namespace fam
}  // namespace arrpos

// dst[m] = row[ix[m]], m < n: the ids in range (checked), 32-bit.
#if ARRPOS_X86
ARRPOS_PUSH_AVX512
namespace arrpos { namespace fam { namespace isa_avx512 {
template <class U>
inline void gather_row(U *dst, const U *row, const uint32_t *wide, const int32_t *ix,
                       ptrdiff_t n)
{
    ptrdiff_t m = 0;
    if constexpr (sizeof(U) == 8) {
        for (; m + 8 <= n; m += 8) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(ix + m));
            _mm512_storeu_si512((void *)(dst + m), _mm512_i32gather_epi64(v, row, 8));
        }
    } else if constexpr (sizeof(U) == 4) {
        for (; m + 16 <= n; m += 16) {
            const __m512i v = _mm512_loadu_si512((const void *)(ix + m));
            _mm512_storeu_si512((void *)(dst + m), _mm512_i32gather_epi32(v, row, 4));
        }
    } else {
        for (; m + 16 <= n; m += 16) {
            const __m512i v = _mm512_loadu_si512((const void *)(ix + m));
            const __m512i g = _mm512_i32gather_epi32(v, wide, 4);
            _mm256_storeu_si256((__m256i *)(dst + m), _mm512_cvtepi32_epi16(g));
        }
    }
    for (; m < n; m++)
        dst[m] = row[ix[m]];
}

}}}
ARRPOS_POP
ARRPOS_PUSH_AVX2
namespace arrpos { namespace fam { namespace isa_avx2 {
template <class U>
inline void gather_row(U *dst, const U *row, const uint32_t *wide, const int32_t *ix,
                       ptrdiff_t n)
{
    ptrdiff_t m = 0;
    if constexpr (sizeof(U) == 8) {
        for (; m + 4 <= n; m += 4) {
            const __m128i v = _mm_loadu_si128((const __m128i *)(ix + m));
            _mm256_storeu_si256((__m256i *)(dst + m),
                                _mm256_i32gather_epi64((const long long *)row, v, 8));
        }
    } else if constexpr (sizeof(U) == 4) {
        for (; m + 8 <= n; m += 8) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(ix + m));
            _mm256_storeu_si256((__m256i *)(dst + m),
                                _mm256_i32gather_epi32((const int *)row, v, 4));
        }
    } else {  // two gathers of widened values, packed (no saturation: all below 2**16)
        for (; m + 16 <= n; m += 16) {
            const __m256i a = _mm256_i32gather_epi32(
                (const int *)wide, _mm256_loadu_si256((const __m256i *)(ix + m)), 4);
            const __m256i b = _mm256_i32gather_epi32(
                (const int *)wide, _mm256_loadu_si256((const __m256i *)(ix + m + 8)), 4);
            _mm256_storeu_si256((__m256i *)(dst + m),
                                _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8));
        }
    }
    for (; m < n; m++)
        dst[m] = row[ix[m]];
}
}}}
ARRPOS_POP
#endif

namespace arrpos {
namespace fam {

template <class U>
inline void gather_row(int level, U *dst, const U *row, const uint32_t *wide,
                       const int32_t *ix, ptrdiff_t n)
{
#if ARRPOS_X86
    if (level >= 2 && (sizeof(U) != 2 || wide))
        return isa_avx512::gather_row<U>(dst, row, wide, ix, n);
    if (level == 1 && (sizeof(U) != 2 || wide))
        return isa_avx2::gather_row<U>(dst, row, wide, ix, n);
#else
    (void)level;
    (void)wide;
#endif
    for (ptrdiff_t m = 0; m < n; m++)
        dst[m] = row[ix[m]];
}

template <class U, class I>
void gather_chunk(void *ctx, ptrdiff_t c)
{
    GatherJob &j = *(GatherJob *)ctx;
    const ptrdiff_t p0 = c * j.tile, n = j.n - p0 < j.tile ? j.n - p0 : j.tile;
    const I *idx = (const I *)j.index + p0;
    bool ok = true;
    for (ptrdiff_t m = 0; m < n; m++)
        ok &= (uint64_t)(int64_t)idx[m] < (uint64_t)j.buckets;
    if (!ok) {
        j.bad->fetch_or(1, std::memory_order_relaxed);
        return;
    }
    std::vector<int32_t> ix((size_t)n);  // (buckets < 2**31: the caller's condition)
    for (ptrdiff_t m = 0; m < n; m++)
        ix[(size_t)m] = (int32_t)idx[m];
    std::vector<U> stage(j.stream ? (size_t)n : 1);
    for (ptrdiff_t h = 0; h < j.heads; h++) {
        const U *row = (const U *)j.table + h * j.buckets;
        const uint32_t *wide = j.wide ? j.wide + h * j.buckets : nullptr;
        char *dst = j.out + (h * j.n + p0) * (ptrdiff_t)sizeof(U);
        U *st = j.stream ? stage.data() : (U *)dst;  // cached stores: into the output
        gather_row<U>(j.level, st, row, wide, ix.data(), n);
        if (j.stream)  // (each head's piece a run of its own)
            Streamer(dst, true, j.level).add((const char *)st, n * (ptrdiff_t)sizeof(U));
    }
    fence(j.stream);
}

// The periodic rows' chunks: block b (of blocks_per_line) of line res holds the rows
// res + t * p, t0 <= t < t1 (none where t0 >= t1).
inline void line_block(const GatherJob &j, ptrdiff_t block, ptrdiff_t &t0, ptrdiff_t &t1)
{
    const ptrdiff_t p = j.period, res = block / j.blocks_per_line;
    const ptrdiff_t count = (j.rows - res + p - 1) / p;  // rows of this line
    t0 = (block % j.blocks_per_line) * j.chunk_rows;
    t1 = t0 + j.chunk_rows < count ? t0 + j.chunk_rows : count;
}

// (a hint: no effect on what is computed)
inline void prefetch(const void *p)
{
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p);
#elif ARRPOS_X86
    _mm_prefetch((const char *)p, _MM_HINT_T0);
#else
    (void)p;
#endif
}

// Rows of one head that are windows of one line: rows c, c + p, c + 2p, ... of a period p,
// each the one p rows before moved p places right, with new ids in its first p columns. Row
// c + t * p is the line's window at (count - 1 - t) * p, so a block of rows t0 <= t < t1 needs
// the first p ids of rows t1 - 1 down to t0 + 1, then row t0 whole: line_ids reads them once
// for every head and returns whether they are in range (window_chunk checks the rest), then
// finds the line's runs of ids that go up or down by one (length negative: down; a run of
// one: up), kept where they are long enough to copy rather than gather (and the table's
// reversal is there for the runs down).
template <class I>
bool line_ids(const GatherJob &j, ptrdiff_t block)
{
    ptrdiff_t t0, t1;
    line_block(j, block, t0, t1);
    const ptrdiff_t p = j.period, k = j.cols;
    const I *idx = (const I *)j.index + (block / j.blocks_per_line) * k;
    int32_t *const line = j.ids + j.line_at[block];
    int32_t *ids = line;
    bool ok = true;
    constexpr ptrdiff_t kAhead = 8;  // rows p apart: a stride the prefetchers do not follow
    for (ptrdiff_t t = t1 - 1; t >= t0; t--) {
        const I *row = idx + t * p * k;
        if (t - kAhead >= t0)
            for (ptrdiff_t m = 0; m < p; m += 64 / (ptrdiff_t)sizeof(I))
                prefetch(row - kAhead * p * k + m);
        const ptrdiff_t n = t > t0 ? p : k;
        for (ptrdiff_t m = 0; m < n; m++) {
            ok &= (uint64_t)(int64_t)row[m] < (uint64_t)j.buckets;
            ids[m] = (int32_t)row[m];
        }
        ids += n;
    }
    if (!ok)
        return false;
    const ptrdiff_t len = ids - line;
    int32_t *runs = j.runs + 2 * j.line_at[block];
    ptrdiff_t count = 0;
    bool down = false;
    for (ptrdiff_t m = 0; m < len; count++) {
        ptrdiff_t e = m + 1;
        const int32_t step = e < len ? line[e] - line[m] : 1;  // (ids in range: no overflow)
        if (step == 1 || step == -1)
            while (e < len && line[e] - line[e - 1] == step)
                e++;
        down |= step == -1;
        runs[2 * count] = (int32_t)(step == -1 ? m - e : e - m);
        runs[2 * count + 1] = line[m];
        m = e;
    }
    j.run_count[block] = count * kRunLength <= len && (j.reversed || !down) ? count : 0;
    return true;
}

// dst = a line of ids in runs (line_ids') at the instruction set ``level`` (runs.inc;
// defined with the other rows compiled per instruction set, below).
template <class U>
inline void copy_runs(int level, U *dst, const U *row, const U *rev, ptrdiff_t buckets,
                      const int32_t *runs, ptrdiff_t count);

// Rows [r, r1) of a 2-D index (k columns) compared with the rows p before them moved p places
// right, a few elements at a time (advance), so that the reads of the index go along with a
// chunk's streamed writes: a core reading from memory while it streams loses less than the
// two apart.
template <class I>
struct ShiftCheck {
    const I *idx;
    ptrdiff_t k, p, r, r1, m;  // the next element: row r, column m (p <= m < k)
    bool ok;

    void advance(ptrdiff_t n)
    {
        while (ok && n > 0 && r < r1) {
            const ptrdiff_t take = n < k - m ? n : k - m;
            ok &= !std::memcmp(idx + r * k + m, idx + (r - p) * k + m - p,
                               (size_t)take * sizeof(I));
            n -= take;
            m += take;
            if (m == k) {
                r++;
                m = p;
            }
        }
    }
};

// A block's rows for one head: the line's values gathered (or copied by runs) once, then each
// row streamed from them. The first head's chunk of a block puts its line's ids (bit 1 where
// one is out of range), which the other heads' chunks, handed out after it, wait for. Between
// them, the chunks check that each row of the index from p on is the row p before it moved
// (each chunk a share of the rows, along with its writes; bit 2 where one is not: the caller
// then takes another path for the whole output, so what the chunks wrote is replaced); the
// other ids are then the lines', all in range.
template <class U, class I>
void window_chunk(void *ctx, ptrdiff_t c)
{
    const GatherJob &j = *(const GatherJob *)ctx;
    const ptrdiff_t p = j.period, blocks = p * j.blocks_per_line;
    const ptrdiff_t h = c / blocks, block = c % blocks, res = block / j.blocks_per_line;
    if (h == 0) {  // (the line's state put even where the job is given up: others wait for it)
        int state = 2;
        if (!j.bad->load(std::memory_order_relaxed)) {
            if (line_ids<I>(j, block))
                state = 1;
            else
                j.bad->fetch_or(1, std::memory_order_relaxed);
        }
        j.line_ready[block].store(state, std::memory_order_release);
        if (state != 1)
            return;
    } else if (wait_set(j.line_ready[block]) != 1 || j.bad->load(std::memory_order_relaxed)) {
        return;
    }
    const ptrdiff_t k = j.cols, chunks = j.heads * blocks, later = j.rows - p;
    ShiftCheck<I> check{(const I *)j.index, k, p, p + c * later / chunks,
                        p + (c + 1) * later / chunks, p, true};
    const ptrdiff_t share = (check.r1 - check.r) * (k - p);
    ptrdiff_t t0, t1;
    line_block(j, block, t0, t1);
    if (t0 < t1) {
        const ptrdiff_t len = (t1 - 1 - t0) * p + k;
        // the values: in a buffer each thread keeps (up to a bound: an allocation per chunk
        // costs a few per cent of it)
        constexpr ptrdiff_t kKept = (ptrdiff_t)(256 << 10) / (ptrdiff_t)sizeof(U);
        thread_local std::vector<U> kept;
        std::unique_ptr<U[]> big;
        if (len > kKept)
            big.reset(new U[(size_t)len]);
        else if ((ptrdiff_t)kept.size() < len)
            kept.resize((size_t)kKept);
        U *L = len > kKept ? big.get() : kept.data();
        const ptrdiff_t at = j.line_at[block];
        if (j.run_count[block])
            copy_runs<U>(j.level, L, (const U *)j.table + h * j.buckets,
                         j.reversed ? (const U *)j.reversed + h * j.buckets : nullptr,
                         j.buckets, j.runs + 2 * at, j.run_count[block]);
        else
            gather_row<U>(j.level, L, (const U *)j.table + h * j.buckets,
                          j.wide ? j.wide + h * j.buckets : nullptr, j.ids + at, len);
        const ptrdiff_t rowb = k * (ptrdiff_t)sizeof(U), piece = (share + t1 - t0 - 1) / (t1 - t0);
        char *base = j.out + h * j.n * (ptrdiff_t)sizeof(U);
        const int level = j.stream ? j.level : 0;
        if (p == 1) {  // consecutive rows: one run of output
            Streamer out(base + t0 * rowb, j.stream, level);
            for (ptrdiff_t t = t0; t < t1; t++) {
                out.add((const char *)(L + (t1 - 1 - t)), rowb);
                check.advance(piece);
            }
        } else {
            for (ptrdiff_t t = t0; t < t1; t++) {
                Streamer out(base + (res + t * p) * rowb, j.stream, level);
                out.add((const char *)(L + (t1 - 1 - t) * p), rowb);
                check.advance(piece);
            }
        }
        fence(j.stream);
    }
    check.advance(share);  // (the rest, where the chunk writes no rows)
    if (!check.ok)
        j.bad->fetch_or(2, std::memory_order_relaxed);
}

// The period of a 2-D index's rows: the least p (up to rows / 4 and 256) whose row p is row 0
// moved p places right; 0 where none is (only row p is compared: window_chunk checks the rest).
template <class I>
ptrdiff_t row_period(const I *idx, ptrdiff_t rows, ptrdiff_t k)
{
    const ptrdiff_t most = rows / 4 < 256 ? rows / 4 : 256;
    if (rows >= 2 && !std::memcmp(idx + k + 1, idx, (size_t)(k - 1) * sizeof(I)))
        return 1;
    for (ptrdiff_t p = 2; p <= most && p < k; p++)
        if (!std::memcmp(idx + p * k + p, idx, (size_t)(k - p) * sizeof(I)))
            return p;
    return 0;
}

// Rows [r0, r1) of a 2-D index that is not all shifts (Swin's and BEiT's: shifts but for
// a column in every window row), for every head. A row that is the row before moved one place
// right except in at most a quarter of its columns is a window of a line buffer, as in
// window_chunk, with the changed columns looked up; any other row (the chunk's first too) is
// gathered. The ids of the row before were checked, so only the looked-up ones are.
template <class U, class I>
void shift_chunk(void *ctx, ptrdiff_t c)
{
    GatherJob &j = *(GatherJob *)ctx;
    const ptrdiff_t k = j.cols, r0 = c * j.chunk_rows;
    const ptrdiff_t r1 = r0 + j.chunk_rows < j.rows ? r0 + j.chunk_rows : j.rows, nr = r1 - r0;
    const I *idx = (const I *)j.index;
    std::vector<int32_t> ids;  // per row: all its ids (gathered) or (column, id) pairs
    std::vector<ptrdiff_t> at((size_t)nr + 1);
    std::vector<char> whole((size_t)nr);
    bool ok = true;
    for (ptrdiff_t r = 0; r < nr; r++) {
        const I *a = idx + (r0 + r) * k, *b = a - k;
        at[(size_t)r] = (ptrdiff_t)ids.size();
        bool shift = r > 0;
        if (shift) {
            ids.push_back(0);
            ids.push_back((int32_t)a[0]);
            ok &= (uint64_t)(int64_t)a[0] < (uint64_t)j.buckets;
            const ptrdiff_t most = k / 4;
            ptrdiff_t changed = 1;
            for (ptrdiff_t m0 = 1; m0 < k && shift; m0 += 8) {
                const ptrdiff_t e = m0 + 8 < k ? m0 + 8 : k;
                if (e - m0 == 8) {  // (a reduction the compiler vectorises)
                    uint64_t d = 0;
                    for (int t = 0; t < 8; t++)
                        d |= (uint64_t)(a[m0 + t] ^ b[m0 + t - 1]);
                    if (d == 0)
                        continue;
                }
                for (ptrdiff_t m = m0; m < e; m++)
                    if (a[m] != b[m - 1]) {
                        ids.push_back((int32_t)m);
                        ids.push_back((int32_t)a[m]);
                        ok &= (uint64_t)(int64_t)a[m] < (uint64_t)j.buckets;
                        shift = ++changed <= most;
                    }
            }
            if (!shift)
                ids.resize((size_t)at[(size_t)r]);
        }
        whole[(size_t)r] = !shift;
        if (!shift)
            for (ptrdiff_t m = 0; m < k; m++) {
                ok &= (uint64_t)(int64_t)a[m] < (uint64_t)j.buckets;
                ids.push_back((int32_t)a[m]);
            }
        if (!ok) {
            j.bad->fetch_or(1, std::memory_order_relaxed);
            return;
        }
    }
    at[(size_t)nr] = (ptrdiff_t)ids.size();
    const ptrdiff_t rowb = k * (ptrdiff_t)sizeof(U);
    std::vector<U> line((size_t)(nr + k - 1));
    for (ptrdiff_t h = 0; h < j.heads; h++) {
        const U *row = (const U *)j.table + h * j.buckets;
        const uint32_t *wide = j.wide ? j.wide + h * j.buckets : nullptr;
        Streamer out(j.out + (h * j.rows + r0) * rowb, j.stream);
        for (ptrdiff_t r = 0; r < nr; r++) {
            U *L = line.data() + (nr - 1 - r);  // row r - 1 one place right
            const int32_t *p = ids.data() + at[(size_t)r], *e = ids.data() + at[(size_t)r + 1];
            if (whole[(size_t)r])
                gather_row<U>(j.level, L, row, wide, p, k);
            else
                for (; p < e; p += 2)
                    L[p[0]] = row[p[1]];
            out.add((const char *)L, rowb);
        }
    }
    fence(j.stream);
}

// n elements of scratch: the calling thread's kept vector up to 2**20 (a fresh allocation a
// call costs page faults), else big.
template <class T>
T *scratch(std::vector<T> &kept, std::vector<T> &big, size_t n)
{
    std::vector<T> &v = n <= ((size_t)1 << 20) ? kept : big;
    if (v.size() < n)
        v.resize(n);
    return v.data();
}

// Returns false (output partly written) when an index lies outside [0, buckets). ``rows``:
// the index is (rows, n / rows), whose shifted rows may take the window path; 0: any.
template <class U, class I>
bool gather(GatherJob job, int nthreads)
{
    if (job.heads == 0 || job.n == 0)
        return true;
    std::atomic<int> bad{0};
    job.bad = &bad;
    job.cols = job.rows > 0 ? job.n / job.rows : 0;
    job.level = simd_level();
    std::vector<uint32_t> wide;
    job.wide = nullptr;
    if (sizeof(U) == 2 && job.level >= 1) {  // 32-bit lanes for the vector gathers
        wide.resize((size_t)(job.heads * job.buckets));
        const uint16_t *t = (const uint16_t *)job.table;
        for (size_t u = 0; u < wide.size(); u++)
            wide[u] = t[u];
        job.wide = wide.data();
    }
    // windows pay when a row is long enough to stream from the line (a shorter row is staged
    // by the tile gather anyway)
    const ptrdiff_t p = job.rows >= 2 && job.cols * (ptrdiff_t)sizeof(U) >= 256
                            ? row_period((const I *)job.index, job.rows, job.cols) : 0;
    if (p > 0) {
        const ptrdiff_t k = job.cols;
        job.period = p;
        const ptrdiff_t most = (job.rows + p - 1) / p;
        const ptrdiff_t per = window_rows(job.heads, job.rows, k * (ptrdiff_t)sizeof(U),
                                          nthreads);
        job.chunk_rows = per < most ? per : most;
        job.blocks_per_line = (most + job.chunk_rows - 1) / job.chunk_rows;
        const ptrdiff_t blocks = p * job.blocks_per_line;
        std::vector<ptrdiff_t> at((size_t)blocks + 1);
        for (ptrdiff_t b = 0; b < blocks; b++) {
            ptrdiff_t t0, t1;
            line_block(job, b, t0, t1);
            at[(size_t)b + 1] = at[(size_t)b] + (t1 > t0 ? (t1 - 1 - t0) * p + k : 0);
        }
        // ids, then runs
        thread_local std::vector<int32_t> kept;
        std::vector<int32_t> big;
        const ptrdiff_t nids = at[(size_t)blocks];
        std::vector<ptrdiff_t> run_count((size_t)blocks);
        std::unique_ptr<std::atomic<int>[]> ready(new std::atomic<int>[(size_t)blocks]);
        for (ptrdiff_t b = 0; b < blocks; b++)
            ready[b].store(0, std::memory_order_relaxed);
        job.line_at = at.data();
        job.ids = scratch(kept, big, 3 * (size_t)nids);
        job.runs = job.ids + nids;
        job.run_count = run_count.data();
        job.line_ready = ready.get();
        // the table reversed, for lines in runs that count down, unless it is large beside
        // the output
        thread_local std::vector<U> kept_reversed;
        std::vector<U> big_reversed;
        job.reversed = nullptr;
        if (job.buckets <= job.n / 8) {
            U *rev = scratch(kept_reversed, big_reversed, (size_t)(job.heads * job.buckets));
            const U *t = (const U *)job.table;
            for (ptrdiff_t h = 0; h < job.heads; h++)
                std::reverse_copy(t + h * job.buckets, t + (h + 1) * job.buckets,
                                  rev + h * job.buckets);
            job.reversed = (const char *)rev;
        }
        parallel_for(job.heads * blocks, nthreads, window_chunk<U, I>, &job);
        if (bad.load() == 0)
            return true;
        if (bad.load() & 1)  // (an id out of range is refused whatever the rows)
            return false;
        bad.store(0);  // rows that are not windows: another path
    }
    if (job.rows >= 2 && job.cols * (ptrdiff_t)sizeof(U) >= 256) {
        // rows of a few dozen: the gathered first row of each is a small part
        const ptrdiff_t rowb = job.cols * (ptrdiff_t)sizeof(U);
        const ptrdiff_t want = 4 * kChunk / (rowb * job.heads);
        job.chunk_rows = want > 32 ? want : 32;
        parallel_for((job.rows + job.chunk_rows - 1) / job.chunk_rows, nthreads,
                     shift_chunk<U, I>, &job);
        return bad.load() == 0;
    }
    // ids (int32) and the staged rows of every head within L2
    job.tile = 2048;
    parallel_for((job.n + job.tile - 1) / job.tile, nthreads, gather_chunk<U, I>, &job);
    return bad.load() == 0;
}

// ---- toeplitz: (heads, q, k), element (h, i, j) = lines[h, j - i + q - 1] ------------------
//
// A bias that depends on j - i only (T5's, from the q + k - 1 distances' rows of its table):
// row i of head h is the window of its line at q - 1 - i, copied like alibi_bias's rows; no
// ids to read or check. U: the element's bits (2, 4 or 8 bytes).
struct ToeplitzJob {
    const char *lines;  // (heads, q + k - 1) of U
    char *out;          // (heads, q, k) of U
    ptrdiff_t heads, q, k, chunk_rows, chunks_per_head;
    int level;
    bool stream;
};

template <class U>
void toeplitz_chunk(void *ctx, ptrdiff_t c)
{
    const ToeplitzJob &j = *(const ToeplitzJob *)ctx;
    const ptrdiff_t h = c / j.chunks_per_head, r0 = (c % j.chunks_per_head) * j.chunk_rows;
    const ptrdiff_t r1 = r0 + j.chunk_rows < j.q ? r0 + j.chunk_rows : j.q;
    const U *line = (const U *)j.lines + h * (j.q + j.k - 1);
    const ptrdiff_t rowb = j.k * (ptrdiff_t)sizeof(U);
    {
        Streamer out(j.out + (h * j.q + r0) * rowb, j.stream, j.stream ? j.level : 0);
        for (ptrdiff_t i = r0; i < r1; i++)
            out.add((const char *)(line + (j.q - 1 - i)), rowb);
    }  // (the last piece flushed before the fence)
    fence(j.stream);
}

template <class U>
void toeplitz(ToeplitzJob job, int nthreads)
{
    if (job.heads == 0 || job.q == 0 || job.k == 0)
        return;
    job.level = simd_level();
    const ptrdiff_t per = window_rows(job.heads, job.q, job.k * (ptrdiff_t)sizeof(U), nthreads);
    job.chunk_rows = per < job.q ? per : job.q;
    job.chunks_per_head = (job.q + job.chunk_rows - 1) / job.chunk_rows;
    parallel_for(job.heads * job.chunks_per_head, nthreads, toeplitz_chunk<U>, &job);
}

// ---- conv_positional / conv_positional_2d: depthwise convolution, channels last ------------
//
// x and out (outer, H, W, C) of T; w (kh, kw, C) and bias (C,) of T's compute type (the
// generic path's working type: float32 for 16-bit x); a 1-D convolution is kw = 1. Compute
// bound (kh * kw taps and the GELU per element), so the rows are compiled per instruction
// set (conv.inc) and the chunks are runs of output rows.
struct ConvJob {
    const char *x;
    const char *w;
    const char *bias;  // null: none
    char *out;
    ptrdiff_t outer, H, W, C, kh, kw, top, left, chunk_rows, chunks_per_plane;
    int act;  // 0 none, 1 exact GELU, 2 tanh
    bool residual;
};

// The GELU's erfc series (arrpos/_backends/_xp.py's _ERFC_CHEB, the same 30 numbers; float
// sums the first _ERFC_TERMS_FLOAT32 of them).
constexpr int kErfcTerms = 30;
constexpr int kErfcTermsFloat = 14;
constexpr double kErfcCheb[kErfcTerms] = {
    -0.6513268598908547,
    0.6419697923564902,
    0.019476473204185836,
    -0.009561514786808632,
    -0.0009465953444820369,
    0.00036683949785276145,
    4.252332480690777e-05,
    -2.0278578112534242e-05,
    -1.6242900046470256e-06,
    1.3036558355805232e-06,
    1.5626441722066142e-08,
    -8.523809591492654e-08,
    6.5290544390988515e-09,
    5.059343495551469e-09,
    -9.91364156493033e-10,
    -2.273651222931836e-10,
    9.646791102015527e-11,
    2.3940380830391146e-12,
    -6.886027526497553e-12,
    8.944879273090725e-13,
    3.130921399342958e-13,
    -1.1270822361367252e-13,
    3.810905255189232e-16,
    7.106097613609237e-15,
    -1.5230282014571043e-15,
    -9.457494571291233e-17,
    1.210237189224279e-16,
    -2.816663087747177e-17,
    5.003005559445902e-20,
    2.3281042579529253e-18};

// ---- resample: separable taps along two grid axes, channels last ---------------------------
//
// x (outer, H, W, C) of T, element strides xs_* (C contiguous); out (outer, Ho, Wo, C) of T,
// each plane contiguous at element stride os_outer. Taps (index, weight) of (Ho, th) along H
// then (Wo, tw) along W, built on the host (null: that axis keeps its length), applied in
// double as the generic path does (float64, the first axis first) and rounded once. Compute
// bound (th + tw products per output element and W * C per output row), so the rows are
// compiled per instruction set (resample.inc); chunks are runs of output rows, each with a
// scratch row of W * C doubles.
struct ResampleJob {
    const char *x;
    char *out;
    const int64_t *hidx;
    const double *hw;
    const int64_t *widx;
    const double *ww;
    ptrdiff_t outer, H, W, C, Ho, Wo, th, tw, xs_outer, xs_h, xs_w, os_outer;
    ptrdiff_t chunk_rows, chunks_per_plane;
};

}  // namespace fam
}  // namespace arrpos

#if ARRPOS_X86
ARRPOS_PUSH_AVX512
namespace arrpos { namespace fam { namespace isa_avx512 {
#include "conv.inc"
#include "resample.inc"
#include "runs.inc"
#include "scale.inc"
}}}
ARRPOS_POP
ARRPOS_PUSH_AVX2
namespace arrpos { namespace fam { namespace isa_avx2 {
#include "conv.inc"
#include "resample.inc"
#include "runs.inc"
#include "scale.inc"
}}}
ARRPOS_POP
#endif
namespace arrpos { namespace fam { namespace isa_portable {
#include "conv.inc"
#include "resample.inc"
#include "runs.inc"
#include "scale.inc"
}}}

namespace arrpos {
namespace fam {

// copy_runs at the instruction set ``level``.
template <class U>
inline void copy_runs(int level, U *dst, const U *row, const U *rev, ptrdiff_t buckets,
                      const int32_t *runs, ptrdiff_t count)
{
#if ARRPOS_X86
    if (level >= 2)
        return isa_avx512::copy_runs<U>(dst, row, rev, buckets, runs, count);
    if (level == 1)
        return isa_avx2::copy_runs<U>(dst, row, rev, buckets, runs, count);
#else
    (void)level;
#endif
    isa_portable::copy_runs<U>(dst, row, rev, buckets, runs, count);
}

// scale_row at the instruction set ``level``.
template <class T>
inline void scale_row(int level, T *dst, const T *x, T s, ptrdiff_t n)
{
#if ARRPOS_X86
    if (level >= 2)
        return isa_avx512::scale_row<T>(dst, x, s, n);
    if (level == 1)
        return isa_avx2::scale_row<T>(dst, x, s, n);
#else
    (void)level;
#endif
    isa_portable::scale_row<T>(dst, x, s, n);
}

template <class T>
void conv_chunk(void *ctx, ptrdiff_t c)
{
    const ConvJob &j = *(const ConvJob *)ctx;
    const ptrdiff_t o = c / j.chunks_per_plane, h0 = (c % j.chunks_per_plane) * j.chunk_rows;
    const ptrdiff_t h1 = h0 + j.chunk_rows < j.H ? h0 + j.chunk_rows : j.H;
#if ARRPOS_X86
    const int level = simd_level();
    if (level >= 2)
        return isa_avx512::conv_rows<T>(j, o, h0, h1);
    if (level == 1)
        return isa_avx2::conv_rows<T>(j, o, h0, h1);
#endif
    isa_portable::conv_rows<T>(j, o, h0, h1);
}

template <class T>
void conv_grid(ConvJob job, int nthreads)
{
    if (job.outer == 0 || job.H == 0 || job.W == 0 || job.C == 0)
        return;
    const ptrdiff_t rowb = job.W * job.C * (ptrdiff_t)sizeof(T);
    job.chunk_rows = (kChunk / 4) / rowb > 0 ? (kChunk / 4) / rowb : 1;
    job.chunks_per_plane = (job.H + job.chunk_rows - 1) / job.chunk_rows;
    parallel_for(job.outer * job.chunks_per_plane, nthreads, conv_chunk<T>, &job);
}

template <class T>
void resample_chunk(void *ctx, ptrdiff_t c)
{
    const ResampleJob &j = *(const ResampleJob *)ctx;
    const ptrdiff_t o = c / j.chunks_per_plane, r0 = (c % j.chunks_per_plane) * j.chunk_rows;
    const ptrdiff_t r1 = r0 + j.chunk_rows < j.Ho ? r0 + j.chunk_rows : j.Ho;
    // each thread keeps its scratch row between chunks and calls (no page faults per chunk)
    static thread_local std::vector<double> scratch;
    if ((ptrdiff_t)scratch.size() < j.W * j.C)
        scratch.resize((size_t)(j.W * j.C));
    double *tmp = scratch.data();
#if ARRPOS_X86
    const int level = simd_level();
    if (level >= 2)
        return isa_avx512::resample_rows<T>(j, o, r0, r1, tmp);
    if (level == 1)
        return isa_avx2::resample_rows<T>(j, o, r0, r1, tmp);
#endif
    isa_portable::resample_rows<T>(j, o, r0, r1, tmp);
}

template <class T>
void resample(ResampleJob job, int nthreads)
{
    if (job.outer == 0 || job.Ho == 0 || job.Wo == 0 || job.C == 0)
        return;
    // about 16 chunks per plane: work for every thread, each chunk a few output rows
    job.chunk_rows = job.Ho / 16 > 0 ? job.Ho / 16 : 1;
    job.chunks_per_plane = (job.Ho + job.chunk_rows - 1) / job.chunk_rows;
    parallel_for(job.outer * job.chunks_per_plane, nthreads, resample_chunk<T>, &job);
}

}  // namespace fam
}  // namespace arrpos
#endif
