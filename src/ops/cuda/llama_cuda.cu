// CUDA kernels of the Llama family (see llama_cuda.h).
//
// RMSNorm runs one warp per row (as layer_norm_cuda.cu). RoPE takes HF's
// float32 inv_freq from the host (ops/rope.h) as a kernel argument and forms
// the same float32 angles as the CPU, their cos and sin in double rounded to
// float32, so both devices turn by the same values. The rest is elementwise,
// one thread per output element.
#include "ops/cuda/llama_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/column_sum.cuh"

namespace loom {
namespace {

constexpr int k_rows_per_block = 8;  // RMSNorm: warps per block, one row each
constexpr int k_block = 256;

#define LOOM_GRID_STRIDE(i, n)                                                \
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); \
         i += int64_t(gridDim.x) * blockDim.x)

template <typename T>
__global__ void rms_forward_kernel(T* out, float* rstd, const T* inp, const T* weight, int64_t N,
                                   int C, float eps) {
    const int lane = threadIdx.x % gpu::k_warp;
    const int64_t row = int64_t(blockIdx.x) * k_rows_per_block + threadIdx.x / gpu::k_warp;
    if (row >= N) return;
    const T* x = inp + row * C;
    float sq = 0.0f;
    for (int i = lane; i < C; i += gpu::k_warp) {
        const float v = gpu::to_f32(x[i]);
        sq += v * v;
    }
    const float r = 1.0f / sqrtf(gpu::warp_sum(sq) / float(C) + eps);
    T* o = out + row * C;
    for (int i = lane; i < C; i += gpu::k_warp)
        o[i] = gpu::from_f32<T>(gpu::to_f32(weight[i]) * (gpu::to_f32(x[i]) * r));
    if (lane == 0) rstd[row] = r;
}

// dx_j = r w_j dy_j - (r^3 / C) x_j sum_i(w_i dy_i x_i)
template <typename T>
__global__ void rms_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                const float* rstd, int64_t N, int C, bool accumulate) {
    const int lane = threadIdx.x % gpu::k_warp;
    const int64_t row = int64_t(blockIdx.x) * k_rows_per_block + threadIdx.x / gpu::k_warp;
    if (row >= N) return;
    const T* x = inp + row * C;
    const T* dy = dout + row * C;
    const float r = rstd[row];
    float dot = 0.0f;
    for (int i = lane; i < C; i += gpu::k_warp)
        dot += gpu::to_f32(weight[i]) * gpu::to_f32(dy[i]) * gpu::to_f32(x[i]);
    const float k = r * r * r * gpu::warp_sum(dot) / float(C);
    T* dx = dinp + row * C;
    for (int i = lane; i < C; i += gpu::k_warp) {
        float g = r * gpu::to_f32(weight[i]) * gpu::to_f32(dy[i]) - k * gpu::to_f32(x[i]);
        if (accumulate) g += gpu::to_f32(dx[i]);
        dx[i] = gpu::from_f32<T>(g);
    }
}

// dweight[c] += sum_r dout[r, c] * x[r, c] * rstd[r]
template <typename T>
__global__ void rms_dweight_kernel(T* dweight, const T* dout, const T* inp, const float* rstd,
                                   int64_t N, int64_t C) {
    __shared__ float part[gpu::k_colsum_rows][gpu::k_warp + 1];
    const int64_t c = int64_t(blockIdx.x) * gpu::k_warp + threadIdx.x;
    float acc = 0.0f;
    if (c < C)
        for (int64_t r = threadIdx.y; r < N; r += gpu::k_colsum_rows)
            acc += gpu::to_f32(dout[r * C + c]) * gpu::to_f32(inp[r * C + c]) * rstd[r];
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0.0f;
        for (int i = 0; i < gpu::k_colsum_rows; ++i) t += part[i][threadIdx.x];
        dweight[c] = gpu::from_f32<T>(gpu::to_f32(dweight[c]) + t);
    }
}

constexpr int k_max_half = 256;  // head sizes up to 512
struct InvFreq {
    float v[k_max_half];
};

// One thread per pair (row, head, i < d/2).
template <typename T>
__global__ void rope_kernel(T* x, int64_t ld, int64_t rows, int64_t T_, int64_t heads, int64_t half,
                            InvFreq f, float scale, float sign, const int64_t* positions) {
    LOOM_GRID_STRIDE(e, rows * heads * half) {
        const int64_t i = e % half, k = (e / half) % heads, row = e / (half * heads);
        const int64_t t = positions != nullptr ? positions[row] : row % T_;
        T* v = x + row * ld + k * 2 * half;
        const float pos = scale == 1.0f ? float(t) : __fdiv_rn(float(t), scale);
        const float a = __fmul_rn(pos, f.v[i]);
        const float c = float(cos(double(a))), s = sign * float(sin(double(a)));
        const float lo = gpu::to_f32(v[i]), hi = gpu::to_f32(v[i + half]);
        v[i] = gpu::from_f32<T>(lo * c + (-hi) * s);
        v[i + half] = gpu::from_f32<T>(hi * c + lo * s);
    }
}

template <typename T>
__global__ void repeat_kv_forward_kernel(T* e, const T* p, int64_t N, int64_t NH, int64_t NKV,
                                         int64_t d) {
    const int64_t C = NH * d, KV = NKV * d, group = NH / NKV;
    LOOM_GRID_STRIDE(o, N * 3 * C) {
        const int64_t n = o / (3 * C), col = o % (3 * C);
        const int64_t part = col / C, h = (col % C) / d, i = col % d;
        const T* row = p + n * (C + 2 * KV);
        e[o] = part == 0 ? row[col] : row[C + (part - 1) * KV + (h / group) * d + i];
    }
}

template <typename T>
__global__ void repeat_kv_backward_kernel(T* dp, const T* de, int64_t N, int64_t NH, int64_t NKV,
                                          int64_t d) {
    const int64_t C = NH * d, KV = NKV * d, group = NH / NKV, lp = C + 2 * KV;
    LOOM_GRID_STRIDE(o, N * lp) {
        const int64_t n = o / lp, col = o % lp;
        const T* row = de + n * 3 * C;
        if (col < C) {
            dp[o] = row[col];
            continue;
        }
        const int64_t part = (col - C) / KV, kv = ((col - C) % KV) / d, i = (col - C) % d;
        const T* src = row + (1 + part) * C + kv * group * d + i;
        float s = 0.0f;
        for (int64_t g = 0; g < group; ++g) s += gpu::to_f32(src[g * d]);
        dp[o] = gpu::from_f32<T>(s);
    }
}

template <typename T>
__global__ void swiglu_forward_kernel(T* y, const T* gu, int64_t N, int64_t I) {
    LOOM_GRID_STRIDE(o, N * I) {
        const int64_t n = o / I, i = o % I;
        const float g = gpu::to_f32(gu[n * 2 * I + i]), u = gpu::to_f32(gu[n * 2 * I + I + i]);
        y[o] = gpu::from_f32<T>(g / (1.0f + expf(-g)) * u);
    }
}

template <typename T>
__global__ void swiglu_backward_kernel(T* dgu, const T* gu, const T* dy, int64_t N, int64_t I) {
    LOOM_GRID_STRIDE(o, N * I) {
        const int64_t n = o / I, i = o % I;
        const float g = gpu::to_f32(gu[n * 2 * I + i]), u = gpu::to_f32(gu[n * 2 * I + I + i]);
        const float d = gpu::to_f32(dy[o]);
        const float s = 1.0f / (1.0f + expf(-g));
        dgu[n * 2 * I + i] = gpu::from_f32<T>(d * u * (s * (1.0f + g * (1.0f - s))));
        dgu[n * 2 * I + I + i] = gpu::from_f32<T>(d * (g * s));
    }
}

}  // namespace

template <typename T>
void rms_norm_forward_cuda(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                           double eps, CudaContext& ctx) {
    LOOM_CUDA_REQUIRE(C > 0 && C < (int64_t(1) << 31),
                      "rms_norm_forward_cuda: C must be in [1, 2^31), got " + std::to_string(C));
    if (N <= 0) return;
    rms_forward_kernel<<<unsigned(gpu::ceil_div(N, k_rows_per_block)),
                         k_rows_per_block * gpu::k_warp, 0, ctx.stream()>>>(out, rstd, inp, weight,
                                                                            N, int(C), float(eps));
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void rms_norm_backward_cuda(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                            const float* rstd, int64_t N, int64_t C, bool accumulate_dinp,
                            CudaContext& ctx) {
    LOOM_CUDA_REQUIRE(C > 0 && C < (int64_t(1) << 31),
                      "rms_norm_backward_cuda: C must be in [1, 2^31), got " + std::to_string(C));
    if (N <= 0) return;
    rms_dinp_kernel<<<unsigned(gpu::ceil_div(N, k_rows_per_block)), k_rows_per_block * gpu::k_warp,
                      0, ctx.stream()>>>(dinp, dout, inp, weight, rstd, N, int(C), accumulate_dinp);
    LOOM_CUDA_CHECK_LAUNCH();
    if (dweight) {
        dim3 block(gpu::k_warp, gpu::k_colsum_rows);
        rms_dweight_kernel<<<unsigned(gpu::ceil_div(C, gpu::k_warp)), block, 0, ctx.stream()>>>(
            dweight, dout, inp, rstd, N, C);
        LOOM_CUDA_CHECK_LAUNCH();
    }
}

template <typename T>
void rope_cuda(T* x, int64_t ld, int64_t B, int64_t T_, int64_t heads, int64_t d,
               const RopeSpec& spec, bool inverse, CudaContext& ctx, const int64_t* positions) {
    const int64_t half = d / 2, rows = B * T_;
    LOOM_CUDA_REQUIRE(
        d % 2 == 0 && half <= k_max_half,
        "rope_cuda: head size must be even and at most 512, got " + std::to_string(d));
    if (rows <= 0 || heads <= 0) return;
    InvFreq f{};
    rope_inv_freq(f.v, d, spec, T_);
    rope_kernel<<<gpu::grid_for(rows * heads * half, k_block), k_block, 0, ctx.stream()>>>(
        x, ld, rows, T_, heads, half, f, float(spec.scale), inverse ? -1.0f : 1.0f, positions);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void repeat_kv_forward_cuda(T* expanded, const T* packed, int64_t N, int64_t NH, int64_t NKV,
                            int64_t d, CudaContext& ctx) {
    if (N <= 0) return;
    repeat_kv_forward_kernel<<<gpu::grid_for(N * 3 * NH * d, k_block), k_block, 0, ctx.stream()>>>(
        expanded, packed, N, NH, NKV, d);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void repeat_kv_backward_cuda(T* dpacked, const T* dexpanded, int64_t N, int64_t NH, int64_t NKV,
                             int64_t d, CudaContext& ctx) {
    if (N <= 0) return;
    repeat_kv_backward_kernel<<<gpu::grid_for(N * (NH + 2 * NKV) * d, k_block), k_block, 0,
                                ctx.stream()>>>(dpacked, dexpanded, N, NH, NKV, d);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void swiglu_forward_cuda(T* y, const T* gu, int64_t N, int64_t I, CudaContext& ctx) {
    if (N * I <= 0) return;
    swiglu_forward_kernel<<<gpu::grid_for(N * I, k_block), k_block, 0, ctx.stream()>>>(y, gu, N, I);
    LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void swiglu_backward_cuda(T* dgu, const T* gu, const T* dy, int64_t N, int64_t I,
                          CudaContext& ctx) {
    if (N * I <= 0) return;
    swiglu_backward_kernel<<<gpu::grid_for(N * I, k_block), k_block, 0, ctx.stream()>>>(dgu, gu, dy,
                                                                                        N, I);
    LOOM_CUDA_CHECK_LAUNCH();
}

#define LOOM_INSTANTIATE(T)                                                                      \
    template void rms_norm_forward_cuda<T>(T*, float*, const T*, const T*, int64_t, int64_t,     \
                                           double, CudaContext&);                                \
    template void rms_norm_backward_cuda<T>(T*, T*, const T*, const T*, const T*, const float*,  \
                                            int64_t, int64_t, bool, CudaContext&);               \
    template void rope_cuda<T>(T*, int64_t, int64_t, int64_t, int64_t, int64_t, const RopeSpec&, \
                               bool, CudaContext&, const int64_t*);                              \
    template void repeat_kv_forward_cuda<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t,    \
                                            CudaContext&);                                       \
    template void repeat_kv_backward_cuda<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t,   \
                                             CudaContext&);                                      \
    template void swiglu_forward_cuda<T>(T*, const T*, int64_t, int64_t, CudaContext&);          \
    template void swiglu_backward_cuda<T>(T*, const T*, const T*, int64_t, int64_t, CudaContext&);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
