// Peak by independent multiply-add chains: 12 accumulators hide a latency of
// up to 6 cycles at two instructions a cycle. Each chain starts from its own
// value and the loop passes its operand through an empty asm statement, so the
// compiler can neither merge identical chains nor hoist the products.
#include "core/cpu_peak.h"

#include <omp.h>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>

namespace loom {
namespace {

constexpr int k_chains = 12;

struct Kind {
    std::string_view instruction;
    double flops = 0;  // per instruction
};

Kind kind_of(bool bf16) {
#if defined(__AVX512BF16__)
    if (bf16) return {"vdpbf16ps zmm", 64};
#endif
    if (bf16) return {};
#if defined(__AVX512F__)
    return {"vfmadd231ps zmm", 32};
#elif defined(__AVX2__) && defined(__FMA__)
    return {"vfmadd231ps ymm", 16};
#else
    return {};
#endif
}

// k_chains accumulators of `lanes` floats, acc = op(acc, one) iters times;
// returns the sum of every lane. V: the accumulator's vector, O: the operand's.
template <int lanes, typename V, typename O, typename Set, typename Op, typename Store>
double run_chains(int64_t iters, float start, O one, Set set1, Op op, Store store) {
    V acc[k_chains];
    for (int c = 0; c < k_chains; ++c) acc[c] = set1(start + float(c));
    for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
        for (int c = 0; c < k_chains; ++c) acc[c] = op(acc[c], one);
        __asm__ volatile("" : "+v"(one));
    }
    alignas(64) float out[lanes];
    double sum = 0;
    for (int c = 0; c < k_chains; ++c) {
        store(out, acc[c]);
        for (float l : out) sum += double(l);
    }
    return sum;
}

}  // namespace

double cpu_peak_chains(bool bf16, int64_t iters, float start) {
#if defined(__AVX512F__)
    const auto set = [](float x) { return _mm512_set1_ps(x); };
    const auto store = [](float* p, __m512 v) { _mm512_store_ps(p, v); };
    if (bf16) {
#if defined(__AVX512BF16__)
        const __m512bh one = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0 in every half
        return run_chains<16, __m512>(
            iters, start, one, set, [](__m512 a, __m512bh x) { return _mm512_dpbf16_ps(a, x, x); },
            store);
#else
        return 0.0;
#endif
    }
    return run_chains<16, __m512>(
        iters, start, _mm512_set1_ps(1.0f), set,
        [](__m512 a, __m512 x) { return _mm512_fmadd_ps(x, x, a); }, store);
#elif defined(__AVX2__) && defined(__FMA__)
    if (bf16) return 0.0;
    return run_chains<8, __m256>(
        iters, start, _mm256_set1_ps(1.0f), [](float x) { return _mm256_set1_ps(x); },
        [](__m256 a, __m256 x) { return _mm256_fmadd_ps(x, x, a); },
        [](float* p, __m256 v) { _mm256_store_ps(p, v); });
#else
    (void)bf16, (void)iters, (void)start;
    return 0.0;
#endif
}

CpuPeak measure_cpu_peak(bool bf16, double seconds) {
    const Kind k = kind_of(bf16);
    CpuPeak p;
    p.instruction = k.instruction;
    p.flops_per_instruction = k.flops;
    p.threads = omp_get_max_threads();
    if (k.flops == 0) return p;
    // Rates over the whole team: the slowest thread sets the wall time.
    double dt = 0;
    auto rate = [&](int64_t iters) {
        double sink = 0;
        const double t0 = omp_get_wtime();
#pragma omp parallel reduction(+ : sink)
        sink += cpu_peak_chains(bf16, iters, float(omp_get_thread_num()));
        dt = omp_get_wtime() - t0;
        // The sink is a large positive number; the check keeps it live.
        if (!(sink > 0)) return 0.0;
        return double(iters) * k_chains * k.flops * p.threads / dt;
    };
    // Calibration: the work doubles until a run lasts 2 ms, since the first
    // regions also pay for starting and waking the threads, which a run of a
    // few microseconds would count as compute (a rate 100x too low).
    int64_t iters = 1 << 12;
    double r = 0;
    for (int i = 0; i < 24; ++i, iters *= 2) {
        r = rate(iters);
        if (r <= 0) return p;
        if (dt >= 2e-3) break;
    }
    iters = std::max<int64_t>(iters, int64_t(seconds * r / (k_chains * k.flops * p.threads)));
    // A timed run must last at least half of `seconds`: under contention the
    // calibration can end on a run that timed a late thread wake-up, which
    // makes `iters` tiny and every run after it as wrong. The work doubles
    // until a run is long enough to count.
    for (int run = 0, grown = 0; run < 3;) {
        const double rr = rate(iters);
        if (rr <= 0) return p;
        if (dt < 0.5 * seconds && grown < 20) {
            iters *= 2;
            ++grown;
            continue;
        }
        r = std::max(r, rr);
        ++run;
    }
    p.gflops = r / 1e9;
    return p;
}

}  // namespace loom
