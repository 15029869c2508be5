// CUDA softmax cross-entropy with ignore_index -100 (semantics of
// ops/softmax_xent.h).
//
// Forward returns the sum of per-row losses and the count of labelled rows; the
// caller normalises. It synchronises the stream to return the sum (and to
// report bad targets). A target outside [0, V) other than -100 is an error:
// the row is treated as ignored and the forward throws after its sync.
// Backward: dlogits = scale * (softmax(logits) - onehot(target)), 0 on ignored
// rows; it overwrites, and dlogits may alias logits (llm.c's fused classifier
// writes the gradient in place).
//
// One block per row: max, then sum of exp(x - max), both fp32 block reductions
// with a fixed tree. loss = log(sum) + max - x[target]. Per-row losses go to an
// fp32 scratch row, then a single block sums them in fp64 in a fixed order.
//
// The vocab-parallel cross-entropy (ops/vocab_parallel.h) runs the same row
// reductions on this rank's slice of the logits, one step per entry, with
// the collectives between them posted by the caller on its tp group.
// Vocabulary slices as comm/tp_vocab.h: rank r owns ids [first, first + Vl); its
// columns at ids >= V are padding (only the first `valid` are real), excluded
// from the softmax:
//   vocab_xent_max       row maxima over this rank's valid columns -> all_reduce(max)
//   vocab_xent_stats     [sums of exp(x - max) (N) | the target's logit (N), its
//                        owner only, 0 elsewhere]                 -> all_reduce(sum)
//   vocab_xent_loss      sum of max + log(sum) - target logit over labelled
//                        rows (fp64, fixed order: every rank gets the same XentSum)
//   vocab_xent_backward  dlogits = scale * (exp(x - max) / sum - onehot), 0 on
//                        padding columns and ignored rows; from the forward's
//                        reduced maxima and sums (the logits are unchanged in
//                        between), so backward posts no collective, unlike the
//                        CPU which recomputes them.
// Targets outside [0, V) other than -100 are reported through the context's
// error record (checked where vocab_xent_loss synchronises) and count as ignored.
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/entries_cuda.h"
#include "ops/cuda/xent_sum.cuh"

namespace loom::cuda {
namespace {

constexpr int k_block = 512;

template <typename T>
__device__ void row_max_and_sum(const T* x, int64_t V, float* shared, float& mx, float& sum) {
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, gpu::to_f32(x[j]));
    mx = gpu::block_max(m, shared);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += expf(gpu::to_f32(x[j]) - mx);
    sum = gpu::block_sum(s, shared);
}

__device__ bool target_is_bad(int64_t t, int64_t V) {
    return t != k_ignore_index && (t < 0 || t >= V);
}

__device__ void report_bad_target(DeviceErrorRecord* err, int64_t row, int64_t t, int64_t V) {
    if (atomicCAS(&err->code, k_device_ok, k_device_xent_target_out_of_range) == k_device_ok) {
        err->a = row;
        err->b = t;
        err->c = V;
    }
}

template <typename T>
__global__ void xent_forward_kernel(float* row_loss, T* losses, const T* logits,
                                    const int64_t* targets, int64_t V, DeviceErrorRecord* err) {
    __shared__ float shared[gpu::k_warp];
    const int64_t row = blockIdx.x;
    const int64_t t = targets[row];
    const bool bad = target_is_bad(t, V);
    if (t == k_ignore_index || bad) {
        if (threadIdx.x == 0) {
            if (bad) report_bad_target(err, row, t, V);
            row_loss[row] = -1.0f;  // "not counted": a real loss is >= 0 (or NaN, which counts)
            if (losses) losses[row] = gpu::from_f32<T>(0.0f);
        }
        return;
    }
    const T* x = logits + row * V;
    float mx, sum;
    row_max_and_sum(x, V, shared, mx, sum);
    if (threadIdx.x == 0) {
        float loss = logf(sum) + mx - gpu::to_f32(x[t]);
        row_loss[row] = loss;
        if (losses) losses[row] = gpu::from_f32<T>(loss);
    }
}

// result = (sum of counted rows in fp64, number of counted rows). One block.
__global__ void xent_sum_kernel(XentSum* result, const float* row_loss, int64_t N) {
    double acc = 0.0;
    long long cnt = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
        float l = row_loss[i];
        if (!(l < 0.0f)) {
            acc += double(l);
            ++cnt;
        }
    }
    xent_block_sum(result, acc, cnt);
}

template <typename T>
__global__ void xent_backward_kernel(T* dlogits, const T* logits, const int64_t* targets, int64_t V,
                                     float scale) {
    __shared__ float shared[gpu::k_warp];
    const int64_t row = blockIdx.x;
    const int64_t t = targets[row];
    T* dx = dlogits + row * V;
    if (t == k_ignore_index || target_is_bad(t, V)) {
        for (int64_t j = threadIdx.x; j < V; j += blockDim.x) dx[j] = gpu::from_f32<T>(0.0f);
        return;
    }
    const T* x = logits + row * V;
    float mx, sum;
    row_max_and_sum(x, V, shared, mx, sum);
    const float inv = 1.0f / sum;
    // NOTE: when dlogits aliases logits each element is read before it is
    // written by the same thread, and the reductions above are complete.
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
        float p = expf(gpu::to_f32(x[j]) - mx) * inv;
        dx[j] = gpu::from_f32<T>(scale * (p - (j == t ? 1.0f : 0.0f)));
    }
}

template <typename T>
__global__ void local_max_kernel(float* row_max, const T* logits, int64_t Vl, int64_t valid) {
    __shared__ float shared[gpu::k_warp];
    const T* x = logits + int64_t(blockIdx.x) * Vl;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) m = fmaxf(m, gpu::to_f32(x[j]));
    m = gpu::block_max(m, shared);
    if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

template <typename T>
__global__ void local_stats_kernel(float* stats, const T* logits, const int64_t* targets,
                                   const float* row_max, int64_t N, int64_t Vl, int64_t valid,
                                   int64_t first, int64_t V, DeviceErrorRecord* err) {
    __shared__ float shared[gpu::k_warp];
    const int64_t row = blockIdx.x;
    const T* x = logits + row * Vl;
    const float m = row_max[row];
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) s += expf(gpu::to_f32(x[j]) - m);
    s = gpu::block_sum(s, shared);
    if (threadIdx.x != 0) return;
    stats[row] = s;
    const int64_t t = targets[row];
    if (target_is_bad(t, V)) report_bad_target(err, row, t, V);
    const int64_t local = t - first;
    const bool owner = t != k_ignore_index && !target_is_bad(t, V) && local >= 0 && local < valid;
    stats[N + row] = owner ? gpu::to_f32(x[local]) : 0.0f;
}

// One block: rows in a fixed order per thread, then warps, then thread 0.
__global__ void loss_sum_kernel(XentSum* result, const float* row_max, const float* stats,
                                const int64_t* targets, int64_t N, int64_t V) {
    double acc = 0.0;
    long long cnt = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
        const int64_t t = targets[i];
        if (t == k_ignore_index || target_is_bad(t, V)) continue;
        // The CPU's order: (max + log(sum)) - target logit, in fp32.
        const float loss = (row_max[i] + logf(stats[i])) - stats[N + i];
        acc += double(loss);
        ++cnt;
    }
    xent_block_sum(result, acc, cnt);
}

template <typename T>
__global__ void vocab_xent_backward_kernel(T* dlogits, const T* logits, const int64_t* targets,
                                           const float* row_max, const float* stats, int64_t Vl,
                                           int64_t valid, int64_t first, int64_t V, float scale) {
    const int64_t row = blockIdx.x;
    const int64_t t = targets[row];
    T* d = dlogits + row * Vl;
    if (t == k_ignore_index || target_is_bad(t, V)) {
        for (int64_t j = threadIdx.x; j < Vl; j += blockDim.x) d[j] = gpu::from_f32<T>(0.0f);
        return;
    }
    const T* x = logits + row * Vl;
    const float m = row_max[row], inv = 1.0f / stats[row];
    const int64_t local = t - first;
    // NOTE: in place, each element is read before the same thread writes it.
    for (int64_t j = threadIdx.x; j < Vl; j += blockDim.x) {
        float g = 0.0f;
        if (j < valid) g = scale * (expf(gpu::to_f32(x[j]) - m) * inv - (j == local ? 1.0f : 0.0f));
        d[j] = gpu::from_f32<T>(g);
    }
}

void require_vocab(int64_t V, const char* op) {
    LOOM_CUDA_REQUIRE(V > 0, std::string(op) + ": V must be positive, got " + std::to_string(V));
}

void require_rows(int64_t N, const char* op) {
    LOOM_CUDA_REQUIRE(N < (int64_t(1) << 31),
                      std::string(op) + ": N = " + std::to_string(N) + " rows exceeds 2^31 - 1");
}

}  // namespace

XentSum softmax_xent_forward(const OpCtx& c, void* losses, const void* logits,
                             const int64_t* targets, int64_t N, int64_t V) {
    require_vocab(V, "softmax_xent_forward");
    CudaContext& ctx = context(c);
    // row_loss: (N) fp32 scratch; result: one device XentSum.
    ScratchCarver plan(nullptr);
    plan.take<float>(N > 0 ? N : 1);
    plan.take<XentSum>(1);
    ScratchCarver carve(ctx.scratch(plan.used()));
    float* row_loss = carve.take<float>(N > 0 ? N : 1);
    XentSum* result = carve.take<XentSum>(1);
    if (N <= 0) {
        LOOM_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(XentSum), ctx.stream()));
    } else {
        with_act(c, "softmax_xent_forward", [&](auto t) {
            using T = decltype(t);
            xent_forward_kernel<<<unsigned(N), k_block, 0, ctx.stream()>>>(
                row_loss, P<T>(losses), P<T>(logits), targets, V, ctx.device_errors());
        });
        LOOM_CUDA_CHECK_LAUNCH();
        xent_sum_kernel<<<1, k_xent_sum_block, 0, ctx.stream()>>>(result, row_loss, N);
        LOOM_CUDA_CHECK_LAUNCH();
    }
    XentSum out{};
    LOOM_CUDA_CHECK(
        cudaMemcpyAsync(&out, result, sizeof out, cudaMemcpyDeviceToHost, ctx.stream()));
    ctx.check_device_errors();  // synchronises
    return out;
}

void softmax_xent_backward(const OpCtx& c, void* dlogits, const void* logits,
                           const int64_t* targets, int64_t N, int64_t V, double scale) {
    require_vocab(V, "softmax_xent_backward");
    if (N <= 0) return;
    with_act(c, "softmax_xent_backward", [&](auto t) {
        using T = decltype(t);
        xent_backward_kernel<<<unsigned(N), k_block, 0, context(c).stream()>>>(
            P<T>(dlogits), P<T>(logits), targets, V, float(scale));
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

void vocab_xent_max(const OpCtx& c, float* row_max, const void* logits, int64_t N, int64_t Vl,
                    int64_t valid) {
    if (N <= 0) return;
    require_rows(N, "vocab_xent_max");
    with_act(c, "vocab_xent_max", [&](auto t) {
        using T = decltype(t);
        local_max_kernel<<<unsigned(N), k_block, 0, context(c).stream()>>>(row_max, P<T>(logits),
                                                                           Vl, valid);
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

void vocab_xent_stats(const OpCtx& c, float* stats, const void* logits, const int64_t* targets,
                      const float* row_max, int64_t N, int64_t Vl, int64_t valid, int64_t first,
                      int64_t V) {
    if (N <= 0) return;
    require_rows(N, "vocab_xent_stats");
    CudaContext& ctx = context(c);
    with_act(c, "vocab_xent_stats", [&](auto t) {
        using T = decltype(t);
        local_stats_kernel<<<unsigned(N), k_block, 0, ctx.stream()>>>(
            stats, P<T>(logits), targets, row_max, N, Vl, valid, first, V, ctx.device_errors());
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

XentSum vocab_xent_loss(const OpCtx& c, const float* row_max, const float* stats,
                        const int64_t* targets, int64_t N, int64_t V) {
    CudaContext& ctx = context(c);
    auto* result = static_cast<XentSum*>(ctx.scratch(sizeof(XentSum)));
    if (N <= 0) {
        LOOM_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(XentSum), ctx.stream()));
    } else {
        loss_sum_kernel<<<1, k_xent_sum_block, 0, ctx.stream()>>>(result, row_max, stats, targets,
                                                                  N, V);
        LOOM_CUDA_CHECK_LAUNCH();
    }
    XentSum out{};
    LOOM_CUDA_CHECK(
        cudaMemcpyAsync(&out, result, sizeof out, cudaMemcpyDeviceToHost, ctx.stream()));
    ctx.check_device_errors();  // synchronises
    return out;
}

// dlogits (N, Vl), overwritten; may alias logits.
void vocab_xent_backward(const OpCtx& c, void* dlogits, const void* logits, const int64_t* targets,
                         const float* row_max, const float* stats, int64_t N, int64_t Vl,
                         int64_t valid, int64_t first, int64_t V, double scale) {
    if (N <= 0) return;
    require_rows(N, "vocab_xent_backward");
    with_act(c, "vocab_xent_backward", [&](auto t) {
        using T = decltype(t);
        vocab_xent_backward_kernel<<<unsigned(N), k_block, 0, context(c).stream()>>>(
            P<T>(dlogits), P<T>(logits), targets, row_max, stats, Vl, valid, first, V,
            float(scale));
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace loom::cuda
