// oneDNN matmul primitive cache for fp32 and bf16 GEMMs.
//
// Invariant: a cached primitive is only reused for the exact problem it was
// created for, including the OpenMP thread count it will run with (oneDNN
// partitions work at creation, so a primitive made inside a parallel region,
// single-threaded, must not serve a call from outside one).
// Not done here: runtime (DNNL_RUNTIME_DIM_VAL) shapes; they are slower and
// training repeats the same few shapes.
#include "ops/gemm_dnnl.h"

#include <omp.h>

#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/check.h"

namespace loom::detail {
namespace {

using dnnl::memory;

struct MatmulKey {
    int type;
    bool trans_a, trans_b, has_bias;
    int64_t M, N, K, lda, ldb, ldc;
    float alpha, beta;
    int threads;
    auto tie() const {
        return std::tie(type, trans_a, trans_b, has_bias, M, N, K, lda, ldb, ldc, alpha, beta,
                        threads);
    }
    bool operator<(const MatmulKey& o) const { return tie() < o.tie(); }
};

struct MatmulEntry {
    dnnl::matmul prim;
    memory::desc a_md, b_md, c_md, bias_md, scratch_md;
    size_t scratch_bytes = 0;
};

dnnl::engine& cpu_engine() {
    static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    return eng;
}

// op(A) is (M, K) whichever way A is stored: strides describe the transpose.
memory::desc operand_md(memory::data_type dt, int64_t rows, int64_t cols, int64_t ld, bool trans) {
    return memory::desc({rows, cols}, dt, trans ? memory::dims{1, ld} : memory::dims{ld, 1});
}

MatmulEntry make_entry(const MatmulKey& k) {
    const auto dt =
        k.type == int(MatmulType::bf16) ? memory::data_type::bf16 : memory::data_type::f32;
    MatmulEntry e;
    e.a_md = operand_md(dt, k.M, k.K, k.lda, k.trans_a);
    e.b_md = operand_md(dt, k.K, k.N, k.ldb, k.trans_b);
    e.c_md = memory::desc({k.M, k.N}, memory::data_type::f32, memory::dims{k.ldc, 1});
    if (k.has_bias)
        e.bias_md = memory::desc({1, k.N}, memory::data_type::f32, memory::dims{k.N, 1});

    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (k.alpha != 1.0f) attr.set_output_scales(0, {k.alpha});
    if (k.beta != 0.0f) {
        dnnl::post_ops po;
        po.append_sum(k.beta);
        attr.set_post_ops(po);
    }
    auto desc = k.has_bias ? dnnl::matmul::desc(e.a_md, e.b_md, e.bias_md, e.c_md)
                           : dnnl::matmul::desc(e.a_md, e.b_md, e.c_md);
    dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
    e.scratch_md = pd.scratchpad_desc();
    e.scratch_bytes = e.scratch_md.get_size();
    e.prim = dnnl::matmul(pd);
    return e;
}

std::shared_ptr<const MatmulEntry> cached_entry(const MatmulKey& key) {
    static std::mutex mu;
    static std::map<MatmulKey, std::shared_ptr<const MatmulEntry>> cache;
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it == cache.end()) {
        // NOTE: bounded so a run with ever-changing shapes (eval with dynamic
        // padding) cannot grow memory without limit; entries are shared_ptrs so
        // a clear never pulls a primitive from under a thread running it.
        if (cache.size() >= 512) cache.clear();
        it = cache.emplace(key, std::make_shared<const MatmulEntry>(make_entry(key))).first;
    }
    return it->second;
}

// A primitive's argument memories, made once per thread and re-pointed per
// call: making four dnnl::memory objects and an argument map on every call cost
// ~2 us, which attention's thousands of 128x128x64 GEMMs per step noticed.
struct Bound {
    std::shared_ptr<const MatmulEntry> entry;  // keeps the descs alive
    memory a, b, c, bias, scratch;
    std::unordered_map<int, memory> args;
};

Bound& bound_args(const std::shared_ptr<const MatmulEntry>& e, bool with_bias) {
    thread_local std::unordered_map<const MatmulEntry*, Bound> bound;
    auto it = bound.find(e.get());
    if (it != bound.end()) return it->second;
    // Bounded like the primitive cache; cleared entries drop their primitive.
    if (bound.size() >= 512) bound.clear();
    Bound nb;
    nb.entry = e;
    nb.a = memory(e->a_md, cpu_engine(), DNNL_MEMORY_NONE);
    nb.b = memory(e->b_md, cpu_engine(), DNNL_MEMORY_NONE);
    nb.c = memory(e->c_md, cpu_engine(), DNNL_MEMORY_NONE);
    nb.scratch = memory(e->scratch_md, cpu_engine(), DNNL_MEMORY_NONE);
    nb.args = {{DNNL_ARG_SRC, nb.a},
               {DNNL_ARG_WEIGHTS, nb.b},
               {DNNL_ARG_DST, nb.c},
               {DNNL_ARG_SCRATCHPAD, nb.scratch}};
    if (with_bias) {
        nb.bias = memory(e->bias_md, cpu_engine(), DNNL_MEMORY_NONE);
        nb.args.emplace(DNNL_ARG_BIAS, nb.bias);
    }
    return bound.emplace(e.get(), std::move(nb)).first->second;
}

}  // namespace

void dnnl_matmul_run(MatmulType type, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                     float alpha, const void* A, int64_t lda, const void* B, int64_t ldb,
                     float beta, float* C, int64_t ldc, const float* bias) {
    if (M <= 0 || N <= 0) return;
    // oneDNN's scaling of a fused bias by the output scale is easy to get wrong:
    // only fuse the bias when there is no alpha to apply.
    const bool fuse_bias = bias != nullptr && alpha == 1.0f;
    const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    MatmulKey key{int(type), trans_a, trans_b, fuse_bias, M,    N,      K,
                  lda,       ldb,     ldc,     alpha,     beta, threads};
    if (K == 0) {
        // oneDNN rejects K = 0; the product is empty, so C = beta * C (+ bias).
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j)
                C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        if (bias != nullptr) add_bias_rows(C, ldc, bias, M, N);
        return;
    }
    try {
        std::shared_ptr<const MatmulEntry> e = cached_entry(key);
        thread_local std::vector<char> scratch;
        thread_local dnnl::stream strm(cpu_engine());
        if (scratch.size() < e->scratch_bytes) scratch.resize(e->scratch_bytes);
        Bound& b = bound_args(e, fuse_bias);
        b.a.set_data_handle(const_cast<void*>(A));
        b.b.set_data_handle(const_cast<void*>(B));
        b.c.set_data_handle(C);
        b.scratch.set_data_handle(scratch.data());
        if (fuse_bias) b.bias.set_data_handle(const_cast<float*>(bias));
        e->prim.execute(strm, b.args);
        strm.wait();
    } catch (const dnnl::error& err) {
        LOOM_FAIL("gemm: oneDNN matmul ({}{} M={} N={} K={} lda={} ldb={} ldc={}) failed: {}",
                  trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, lda, ldb, ldc, err.what());
    }
    if (bias != nullptr && !fuse_bias) add_bias_rows(C, ldc, bias, M, N);
}

bool dnnl_bf16_matmul_available() {
    static const bool available = [] {
        try {
            const memory::desc ab({16, 16}, memory::data_type::bf16, memory::format_tag::ab);
            const memory::desc c({16, 16}, memory::data_type::f32, memory::format_tag::ab);
            const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ab, ab, c), cpu_engine());
            return true;
        } catch (const dnnl::error&) {
            return false;
        }
    }();
    return available;
}

void add_bias_rows(float* C, int64_t ldc, const float* bias, int64_t M, int64_t N) {
#pragma omp parallel for if (M * N > (1 << 15) && !omp_in_parallel())
    for (int64_t i = 0; i < M; ++i) {
        float* c = C + i * ldc;
#pragma omp simd
        for (int64_t j = 0; j < N; ++j) c[j] += bias[j];
    }
}

}  // namespace loom::detail
