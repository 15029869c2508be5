// CUDA entries of the Llama family, the same math and argument order as the
// CPU ops (ops/rms_norm.h, rope.h, repeat_kv.h, swiglu.h). Activations in T
// (f32, bf16, f16), computed in f32; rstd is f32. RMSNorm's dweight (null for
// a frozen weight) accumulates through a deterministic column reduction
// (column_sum.cuh's layout); repeat_kv's group sums run in head order. Not
// here: the sliding window (attention's).
//
// RMSNorm runs one warp per row (as layer_norm_cuda.cu). RoPE takes HF's
// float32 inv_freq from the host (ops/rope.h) as a kernel argument and forms
// the same float32 angles as the CPU, their cos and sin in double rounded to
// float32, so both devices turn by the same values. The rest is elementwise,
// one thread per output element.
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/column_sum.cuh"
#include "ops/cuda/entries_cuda.h"

namespace loom::cuda {
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

void require_width(int64_t C, const char* op) {
    LOOM_CUDA_REQUIRE(C > 0 && C < (int64_t(1) << 31),
                      std::string(op) + ": C must be in [1, 2^31), got " + std::to_string(C));
}

}  // namespace

void rms_norm_forward(const OpCtx& c, void* y, float* rstd, const void* x, const void* w, int64_t N,
                      int64_t C, double eps) {
    require_width(C, "rms_norm_forward");
    if (N <= 0) return;
    with_act(c, "rms_norm_forward", [&](auto t) {
        using T = decltype(t);
        rms_forward_kernel<<<unsigned(gpu::ceil_div(N, k_rows_per_block)),
                             k_rows_per_block * gpu::k_warp, 0, context(c).stream()>>>(
            P<T>(y), rstd, P<T>(x), P<T>(w), N, int(C), float(eps));
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

void rms_norm_backward(const OpCtx& c, void* dx, void* dw, const void* dy, const void* x,
                       const void* w, const float* rstd, int64_t N, int64_t C, bool accumulate_dx) {
    require_width(C, "rms_norm_backward");
    if (N <= 0) return;
    CudaContext& ctx = context(c);
    with_act(c, "rms_norm_backward", [&](auto t) {
        using T = decltype(t);
        rms_dinp_kernel<<<unsigned(gpu::ceil_div(N, k_rows_per_block)),
                          k_rows_per_block * gpu::k_warp, 0, ctx.stream()>>>(
            P<T>(dx), P<T>(dy), P<T>(x), P<T>(w), rstd, N, int(C), accumulate_dx);
        LOOM_CUDA_CHECK_LAUNCH();
        if (dw) {
            dim3 block(gpu::k_warp, gpu::k_colsum_rows);
            rms_dweight_kernel<<<unsigned(gpu::ceil_div(C, gpu::k_warp)), block, 0, ctx.stream()>>>(
                P<T>(dw), P<T>(dy), P<T>(x), rstd, N, C);
            LOOM_CUDA_CHECK_LAUNCH();
        }
    });
}

void rope(const OpCtx& c, void* x, int64_t ld, int64_t B, int64_t T_, int64_t heads, int64_t d,
          const RopeSpec& spec, bool inverse, const int64_t* positions) {
    const int64_t half = d / 2, rows = B * T_;
    LOOM_CUDA_REQUIRE(d % 2 == 0 && half <= k_max_half,
                      "rope: head size must be even and at most 512, got " + std::to_string(d));
    if (rows <= 0 || heads <= 0) return;
    InvFreq f{};
    rope_inv_freq(f.v, d, spec, T_);
    with_act(c, "rope", [&](auto t) {
        using T = decltype(t);
        rope_kernel<<<gpu::grid_for(rows * heads * half, k_block), k_block, 0,
                      context(c).stream()>>>(P<T>(x), ld, rows, T_, heads, half, f,
                                             float(spec.scale), inverse ? -1.0f : 1.0f, positions);
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

void repeat_kv_forward(const OpCtx& c, void* expanded, const void* packed, int64_t N, int64_t NH,
                       int64_t NKV, int64_t d) {
    if (N <= 0) return;
    with_act(c, "repeat_kv_forward", [&](auto t) {
        using T = decltype(t);
        repeat_kv_forward_kernel<<<gpu::grid_for(N * 3 * NH * d, k_block), k_block, 0,
                                   context(c).stream()>>>(P<T>(expanded), P<T>(packed), N, NH, NKV,
                                                          d);
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

void repeat_kv_backward(const OpCtx& c, void* dpacked, const void* dexpanded, int64_t N, int64_t NH,
                        int64_t NKV, int64_t d) {
    if (N <= 0) return;
    with_act(c, "repeat_kv_backward", [&](auto t) {
        using T = decltype(t);
        repeat_kv_backward_kernel<<<gpu::grid_for(N * (NH + 2 * NKV) * d, k_block), k_block, 0,
                                    context(c).stream()>>>(P<T>(dpacked), P<T>(dexpanded), N, NH,
                                                           NKV, d);
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

// CUDA keeps the post-activation in the activation type (no narrower GEMM input).
void swiglu_forward(const OpCtx& c, void* y, DType y_type, const void* gu, int64_t N, int64_t I) {
    check_act_type(c, y_type, "swiglu_forward");
    if (N * I <= 0) return;
    with_act(c, "swiglu_forward", [&](auto t) {
        using T = decltype(t);
        swiglu_forward_kernel<<<gpu::grid_for(N * I, k_block), k_block, 0, context(c).stream()>>>(
            P<T>(y), P<T>(gu), N, I);
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(const OpCtx& c, void* dgu, const void* gu, const void* dy, int64_t N,
                     int64_t I) {
    if (N * I <= 0) return;
    with_act(c, "swiglu_backward", [&](auto t) {
        using T = decltype(t);
        swiglu_backward_kernel<<<gpu::grid_for(N * I, k_block), k_block, 0, context(c).stream()>>>(
            P<T>(dgu), P<T>(gu), P<T>(dy), N, I);
    });
    LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace loom::cuda
