// LD_PRELOAD shim that counts the OpenMP parallel regions a program runs and
// how long they last, as seen from the thread that opens them: spinning at
// barriers costs most where a step is many short regions, so this tells how
// exposed a workload is. It wraps libgomp's GOMP_parallel (what GCC emits for
// `#pragma omp parallel`, and what oneDNN's OpenMP build calls) and
// GOMP_barrier (explicit and end-of-worksharing barriers, counted per thread),
// and prints a summary to stderr at exit. Top-level regions only are timed.
//
//   cc -O2 -shared -fPIC -o /tmp/omp_region_stats.so bench/omp_region_stats.c -ldl
//   LD_PRELOAD=/tmp/omp_region_stats.so build/cpu-release/bench/bench_model_step ...
//
// OMP_REGION_STATS_SKIP=N ignores the first N top-level regions (warm-up).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void (*parallel_fn)(void (*)(void*), void*, unsigned, unsigned);
typedef void (*barrier_fn)(void);

static parallel_fn real_parallel;
static barrier_fn real_barrier;
static _Thread_local int depth;
static long long skip, seen;
static long long regions, nested;
static double total_us;
static atomic_llong barriers;
// Region lengths in power-of-two microsecond buckets: [0,1), [1,2), [2,4), ...
enum { NB = 24 };
static long long hist[NB];
static double hist_us[NB];

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

__attribute__((constructor)) static void init(void) {
    real_parallel = (parallel_fn)dlsym(RTLD_NEXT, "GOMP_parallel");
    real_barrier = (barrier_fn)dlsym(RTLD_NEXT, "GOMP_barrier");
    const char* s = getenv("OMP_REGION_STATS_SKIP");
    skip = s ? atoll(s) : 0;
}

void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) {
    if (depth > 0) {
        ++nested;  // racy across threads; nested regions are rare here
        real_parallel(fn, data, num_threads, flags);
        return;
    }
    ++depth;
    const double t0 = now_us();
    real_parallel(fn, data, num_threads, flags);
    const double dt = now_us() - t0;
    --depth;
    if (seen++ < skip) return;
    ++regions;
    total_us += dt;
    int b = 0;
    while (b + 1 < NB && (double)(1LL << b) <= dt) ++b;
    ++hist[b];
    hist_us[b] += dt;
}

void GOMP_barrier(void) {
    if (seen >= skip) atomic_fetch_add_explicit(&barriers, 1, memory_order_relaxed);
    real_barrier();
}

__attribute__((destructor)) static void report(void) {
    fprintf(stderr, "omp_region_stats: %lld top-level regions (after skipping %lld), %.1f ms inside them, "
                    "mean %.1f us; %lld nested; %lld GOMP_barrier calls (all threads)\n",
            regions, skip < seen ? skip : seen, total_us / 1e3, regions ? total_us / (double)regions : 0.0,
            nested, (long long)barriers);
    for (int b = 0; b < NB; ++b)
        if (hist[b])
            fprintf(stderr, "  %8lld-%-8lld us: %8lld regions, %9.1f ms\n", b ? 1LL << (b - 1) : 0, 1LL << b,
                    hist[b], hist_us[b] / 1e3);
}
