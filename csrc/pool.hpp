// A small thread pool of the kernels' own, instead of OpenMP:
//
// * fork-safe: pthread_atfork handlers hold the pool's lock across fork(), and the child forgets
//   the parent's workers (they do not exist there) and starts new ones on its first parallel
//   call. libgomp's pool, by contrast, hangs the child.
// * never slower than one thread: the caller works too and takes chunks from a shared counter;
//   it waits only for chunks a worker has started, so a worker that the scheduler does not run
//   (another process on its core) costs nothing but the wake-up call.
// * workers spin briefly after a job, then sleep, so an idle pool takes no CPU time.
//
// ARRPOS_NO_THREADS builds it single-threaded (every call runs on the caller). The pool is
// std::thread, std::mutex and std::condition_variable: pthreads are used only for the fork
// handlers where fork exists, so Windows (MSVC, MinGW-w64 with its posix thread model) builds
// it as it is.
#ifndef ARRPOS_POOL_HPP
#define ARRPOS_POOL_HPP
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#if !defined(ARRPOS_NO_THREADS)
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>
#if defined(_MSC_VER)
#include <intrin.h>  // (_mm_pause, __yield)
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#define ARRPOS_HAVE_ATFORK 1
#endif
#endif

namespace arrpos {

using ChunkFn = void (*)(void *ctx, ptrdiff_t chunk);

// Threads a parallel call may use: ARRPOS_NUM_THREADS, else OMP_NUM_THREADS, else the CPUs
// this process may run on.
inline int env_threads()
{
    static int n = 0;
    if (n == 0) {
        int v = 0;
        static const char *const names[2] = {"ARRPOS_NUM_THREADS", "OMP_NUM_THREADS"};
        for (const char *name : names) {
            const char *s = std::getenv(name);
            if (s && std::atoi(s) > 0) {
                v = std::atoi(s);
                break;
            }
        }
#if !defined(ARRPOS_NO_THREADS)
        if (v == 0) {
#if defined(__linux__)
            cpu_set_t set;
            v = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
#else
            v = (int)std::thread::hardware_concurrency();
#endif
        }
        n = v < 1 ? 1 : v > 64 ? 64 : v;
#else
        (void)v;
        n = 1;
#endif
    }
    return n;
}

#if defined(ARRPOS_NO_THREADS)
inline bool have_threads() { return false; }
inline int max_threads() { return 1; }
inline void parallel_for(ptrdiff_t n, int, ChunkFn fn, void *ctx)
{
    for (ptrdiff_t i = 0; i < n; i++)
        fn(ctx, i);
}
inline int wait_set(const std::atomic<int> &flag) { return flag.load(std::memory_order_acquire); }
#else
inline bool have_threads() { return true; }
inline int max_threads() { return env_threads(); }

class Pool {
  public:
    // Runs fn(ctx, i) for i < n on the caller and up to nthreads - 1 workers.
    void run(ptrdiff_t n, int nthreads, ChunkFn fn, void *ctx)
    {
        // one job at a time, and none across fork; a second caller runs its job alone
        std::unique_lock<std::mutex> job(job_mutex, std::try_to_lock);
        if (!job.owns_lock()) {
            for (ptrdiff_t i = 0; i < n; i++)
                fn(ctx, i);
            return;
        }
        using clock = std::chrono::steady_clock;
        const clock::time_point t0 = clock::now();
        if (t0 < serial_until_ || !idle_cpu(t0)) {  // the caller does it alone
            for (ptrdiff_t i = 0; i < n; i++)
                fn(ctx, i);
            return;
        }
        start_workers(nthreads - 1);
        {
            std::lock_guard<std::mutex> g(mutex_);
            fn_ = fn;
            ctx_ = ctx;
            total_ = n;
            next_.store(0, std::memory_order_relaxed);
            open_ = true;
            generation_.fetch_add(1, std::memory_order_release);
        }
        cv_work_.notify_all();
        take_chunks();
        {
            std::lock_guard<std::mutex> g(mutex_);
            open_ = false;  // every chunk is taken: late workers stay out
        }
        // Wait only for workers that joined (their chunks are in flight). Sleep soon: a
        // worker preempted by another process may then migrate to this core, which would
        // stay busy if the caller spun.
        const clock::time_point t1 = clock::now();
        for (int spin = 0; inside_.load(std::memory_order_acquire) != 0; spin++) {
            if (spin < 200) {
                cpu_relax();
                continue;
            }
            std::unique_lock<std::mutex> g(mutex_);
            cv_done_.wait(g, [&] { return inside_.load(std::memory_order_acquire) == 0; });
        }
        adapt(t0, t1, clock::now());
    }

    static Pool *&instance()
    {
        static Pool *p = nullptr;
        return p;
    }

    std::mutex job_mutex;

    static void cpu_relax()
    {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
        __builtin_ia32_pause();
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
        _mm_pause();
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
        __asm__ __volatile__("yield");
#elif defined(_MSC_VER) && defined(_M_ARM64)
        __yield();
#endif
    }

  private:
    // The wait policy: a worker that the scheduler preempted while holding a chunk (another
    // process on its core) makes the caller wait a time slice. When the caller's wait after
    // its own share exceeds a quarter of that share (and 50 us), parallel calls run on the
    // caller alone for a while, doubling from 20 ms to 1 s while it keeps happening; one
    // prompt parallel call resets the backoff. No call is then much slower than one thread.
    void adapt(std::chrono::steady_clock::time_point t0, std::chrono::steady_clock::time_point t1,
               std::chrono::steady_clock::time_point t2)
    {
        using us = std::chrono::microseconds;
        auto own = std::chrono::duration_cast<us>(t1 - t0).count();
        auto wait = std::chrono::duration_cast<us>(t2 - t1).count();
        if (wait > 50 && 4 * wait > own) {
            serial_until_ = t2 + us(backoff_us_);
            backoff_us_ = backoff_us_ * 2 > 1000000 ? 1000000 : backoff_us_ * 2;
        } else {
            backoff_us_ = 20000;
        }
    }

    // Whether another CPU is free for a worker: the kernels are memory-bound, so a worker
    // competing with another process for its core gains little and risks a time slice. Linux
    // reports the runnable threads right now in /proc/loadavg; read at most every 5 ms.
    bool idle_cpu(std::chrono::steady_clock::time_point now)
    {
#if defined(__linux__)
        if (now - load_checked_ < std::chrono::milliseconds(5))
            return load_idle_;
        load_checked_ = now;
        char buf[128];
        int fd = open("/proc/loadavg", O_RDONLY);
        if (fd < 0)
            return load_idle_ = true;
        ssize_t len = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (len <= 0)
            return load_idle_ = true;
        buf[len] = 0;
        // "0.50 0.40 0.30 R/T pid": R runnable threads, the caller among them
        const char *p = buf;
        for (int field = 0; field < 3 && *p; field++) {
            while (*p && *p != ' ')
                p++;
            while (*p == ' ')
                p++;
        }
        // the pool's own workers still spinning after the last job are not another load
        long running = std::strtol(p, nullptr, 10) - awake_.load(std::memory_order_relaxed);
        return load_idle_ = running <= 0 || running < env_threads_cpus();
#else
        (void)now;
        return true;
#endif
    }

    static int env_threads_cpus()
    {
        static int n = 0;
        if (n == 0) {
#if defined(__linux__)
            cpu_set_t set;
            n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
#else
            n = (int)std::thread::hardware_concurrency();
#endif
            n = n < 1 ? 1 : n;
        }
        return n;
    }

    void take_chunks()
    {
        for (;;) {
            ptrdiff_t i = next_.fetch_add(1, std::memory_order_acq_rel);
            if (i >= total_)
                return;
            fn_(ctx_, i);
        }
    }

    unsigned long long wait_generation(unsigned long long seen)
    {
        for (int spin = 0; spin < 2000; spin++) {  // back-to-back calls find the worker awake
            unsigned long long g = generation_.load(std::memory_order_acquire);
            if (g != seen)
                return g;
            cpu_relax();
        }
        awake_.fetch_sub(1, std::memory_order_relaxed);
        struct Awake {  // counted again once woken
            std::atomic<int> &n;
            ~Awake() { n.fetch_add(1, std::memory_order_relaxed); }
        } again{awake_};
        std::unique_lock<std::mutex> lk(mutex_);
        cv_work_.wait(lk, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        return generation_.load(std::memory_order_acquire);
    }

    void worker_loop(unsigned long long seen)
    {
        for (;;) {
            unsigned long long g = wait_generation(seen);
            seen = g;
            {
                std::lock_guard<std::mutex> lk(mutex_);
                if (!open_ || g != generation_.load(std::memory_order_relaxed))
                    continue;  // that job is over (the caller did it all)
                inside_.fetch_add(1, std::memory_order_relaxed);
            }
            take_chunks();
            std::lock_guard<std::mutex> lk(mutex_);
            if (inside_.fetch_sub(1, std::memory_order_acq_rel) == 1)
                cv_done_.notify_all();
        }
    }

    void start_workers(int want)
    {
        while (nthreads_ < want) {
            unsigned long long g = generation_.load();
            awake_.fetch_add(1, std::memory_order_relaxed);
            std::thread([this, g] { worker_loop(g); }).detach();
            nthreads_++;
        }
    }

    std::mutex mutex_;
    std::condition_variable cv_work_, cv_done_;
    std::atomic<unsigned long long> generation_{0};
    std::atomic<ptrdiff_t> next_{0};
    std::atomic<int> inside_{0};
    std::atomic<int> awake_{0};  // workers running or spinning (not asleep)
    ChunkFn fn_ = nullptr;
    void *ctx_ = nullptr;
    ptrdiff_t total_ = 0;
    bool open_ = false;
    int nthreads_ = 0;
    std::chrono::steady_clock::time_point serial_until_{}, load_checked_{};
    bool load_idle_ = true;
    long long backoff_us_ = 20000;
};

#if ARRPOS_HAVE_ATFORK
inline void pool_prepare_fork()
{
    if (Pool *p = Pool::instance())
        p->job_mutex.lock();
}
inline void pool_parent_after_fork()
{
    if (Pool *p = Pool::instance())
        p->job_mutex.unlock();
}
// The child has none of the parent's workers: forget that pool (leaked: its state belongs to
// threads that do not exist here) and start a new one on the next parallel call.
inline void pool_child_after_fork() { Pool::instance() = nullptr; }
#endif

// A flag's value once another chunk of the same job has set it (nonzero). Chunks are handed
// out in order, so a chunk that waits on one of a lower number waits at most for the rest of
// that chunk's work: spin, then give the core to it (it may share this one).
inline int wait_set(const std::atomic<int> &flag)
{
    int v;
    for (int spin = 0; (v = flag.load(std::memory_order_acquire)) == 0; spin++) {
        if (spin < 1000)
            Pool::cpu_relax();
        else
            std::this_thread::yield();
    }
    return v;
}

inline void parallel_for(ptrdiff_t n, int nthreads, ChunkFn fn, void *ctx)
{
    if (nthreads <= 1 || n <= 1) {
        for (ptrdiff_t i = 0; i < n; i++)
            fn(ctx, i);
        return;
    }
    Pool *p;
    {
        static std::mutex create;
        std::lock_guard<std::mutex> g(create);
        p = Pool::instance();
        if (p == nullptr) {
#if ARRPOS_HAVE_ATFORK
            static bool registered = false;
            if (!registered) {
                pthread_atfork(pool_prepare_fork, pool_parent_after_fork, pool_child_after_fork);
                registered = true;
            }
#endif
            p = Pool::instance() = new Pool();
        }
    }
    p->run(n, nthreads, fn, ctx);
}
#endif
}  // namespace arrpos
#endif
