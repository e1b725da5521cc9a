// Output blocks for allocating calls: large, 2 MiB aligned, transparent huge pages requested,
// and reused. A fresh 128 MiB np.empty costs 32768 page faults, each zeroing a 4 KiB page:
// as much time as the kernel's work. Huge pages cut the faults 512-fold; a small free list
// (the last few blocks released, like ONNX Runtime's arena) removes them for repeated calls.
// Called with the GIL held (the Cython block object allocates and releases), so no lock.
#ifndef ARRPOS_MEMORY_HPP
#define ARRPOS_MEMORY_HPP
#include <cstddef>
#include <cstdlib>
#if defined(__linux__)
#include <sys/mman.h>
#define ARRPOS_HAVE_MMAP 1
#else
#define ARRPOS_HAVE_MMAP 0
#endif
#if defined(_WIN32)
#include <malloc.h>  // _aligned_malloc: neither MSVC's nor MinGW's C library has aligned_alloc
#endif

namespace arrpos {

constexpr size_t kHuge = size_t(2) << 20;
constexpr int kKeep = 4;                       // blocks kept: a training step holds 4
constexpr size_t kKeepBytes = size_t(1) << 30;  // and at most this much memory

struct Block {
    void *ptr;
    size_t size;  // usable bytes (a multiple of 2 MiB)
};

inline Block *free_blocks()
{
    static Block blocks[kKeep] = {};
    return blocks;
}

inline void block_unmap(Block b)
{
#if ARRPOS_HAVE_MMAP
    munmap(b.ptr, b.size);
#elif defined(_WIN32)
    _aligned_free(b.ptr);
#else
    std::free(b.ptr);
#endif
}

// A block of at least n bytes: a kept one no more than twice as large, else a new mapping.
inline Block block_alloc(size_t n)
{
    size_t size = (n + kHuge - 1) / kHuge * kHuge;
    Block *keep = free_blocks();
    for (int i = 0; i < kKeep; i++) {
        if (keep[i].ptr && keep[i].size >= size && keep[i].size <= 2 * size) {
            Block b = keep[i];
            keep[i] = Block{nullptr, 0};
            return b;
        }
    }
#if ARRPOS_HAVE_MMAP
    // map 2 MiB more and trim, so the block starts on a huge-page boundary
    size_t span = size + kHuge;
    void *raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return Block{nullptr, 0};
    char *p = (char *)raw, *start = (char *)(((size_t)p + kHuge - 1) / kHuge * kHuge);
    if (start > p)
        munmap(p, (size_t)(start - p));
    size_t tail = (size_t)(p + span - (start + size));
    if (tail)
        munmap(start + size, tail);
#ifdef MADV_HUGEPAGE
    madvise(start, size, MADV_HUGEPAGE);
#endif
    return Block{start, size};
#elif defined(_WIN32)
    void *p = _aligned_malloc(size, 64);
    return Block{p, p ? size : 0};
#else
    void *p = std::aligned_alloc(64, size);
    return Block{p, p ? size : 0};
#endif
}

// Keep the block for the next call (replacing the smallest kept one), or unmap it.
inline void block_release(Block b)
{
    Block *keep = free_blocks();
    size_t held = 0;
    int slot = -1;
    for (int i = 0; i < kKeep; i++) {
        held += keep[i].size;
        if (slot < 0 || keep[i].size < keep[slot].size)
            slot = i;
    }
    if (b.size > kKeepBytes || keep[slot].size >= b.size || held - keep[slot].size + b.size > kKeepBytes) {
        block_unmap(b);
        return;
    }
    if (keep[slot].ptr)
        block_unmap(keep[slot]);
    keep[slot] = b;
}

// Give every kept block back to the system.
inline void blocks_trim()
{
    Block *keep = free_blocks();
    for (int i = 0; i < kKeep; i++) {
        if (keep[i].ptr)
            block_unmap(keep[i]);
        keep[i] = Block{nullptr, 0};
    }
}

}  // namespace arrpos
#endif
