// Building blocks of the fused attention kernels (flash_attention_cuda.cu):
// the tiling constants, shared-memory layouts, kernel arguments, tile loads,
// dropout multipliers and the per-warp accumulators (wmma for bf16/f16, SIMT
// for fp32). Device code only; included by flash_attention_cuda.cu alone.
#pragma once

#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_device.cuh"
#include "ops/attention.h"
#include "ops/cuda/dropout_math.cuh"

namespace loom::flash {

namespace wmma = nvcuda::wmma;

constexpr int k_warps = 4;
constexpr int k_threads = k_warps * gpu::k_warp;
constexpr int k_frag = 16;                // wmma m = n = k
constexpr int k_rows = k_warps * k_frag;  // rows of a block
constexpr unsigned k_full = 0xffffffffu;

template <typename T>
constexpr bool k_tensor_cores = !std::is_same_v<T, float>;

template <typename T>
constexpr int k_cols = k_tensor_cores<T> ? 64 : 32;

// Shared-memory rows are padded by 16 bytes: consecutive rows then start in
// different banks, and wmma's ldm stays a multiple of 16 bytes.
template <typename T>
constexpr int k_pad = 16 / int(sizeof(T));

template <typename T, int HS>
struct Dims {
    static constexpr int N = k_cols<T>;
    static constexpr int ld_t = HS + k_pad<T>;  // T tiles of HS columns
    static constexpr int ld_s = N + 4;          // fp32 16 x N tiles
    static constexpr int ld_p = N + k_pad<T>;   // T 16 x N tiles
    static_assert(HS % k_frag == 0 && HS <= 128);
};

// Consecutive 128-byte-aligned regions of dynamic shared memory; with a null
// base it only sums the sizes (the host's launch size).
class SmemCarver {
  public:
    __host__ __device__ explicit SmemCarver(unsigned char* base) : base_(base) {}
    template <typename U>
    __host__ __device__ U* take(int n) {
        U* p = base_ ? reinterpret_cast<U*>(base_ + used_) : nullptr;
        used_ += (size_t(n) * sizeof(U) + 127) / 128 * 128;
        return p;
    }
    __host__ __device__ size_t used() const { return used_; }

  private:
    unsigned char* base_;
    size_t used_ = 0;
};

template <typename T, int HS>
struct ForwardSmem {
    using D = Dims<T, HS>;
    T *q, *k, *v;        // q: k_rows x HS; k, v: N x HS
    float* s;            // per warp 16 x N scores
    T* p;                // per warp 16 x N dropped probabilities
    unsigned char* vis;  // N: key in range and not padding
    size_t bytes;
    __host__ __device__ explicit ForwardSmem(unsigned char* base) {
        SmemCarver c(base);
        q = c.take<T>(k_rows * D::ld_t);
        k = c.take<T>(D::N * D::ld_t);
        v = c.take<T>(D::N * D::ld_t);
        s = c.take<float>(k_rows * D::ld_s);
        p = c.take<T>(k_rows * D::ld_p);
        vis = c.take<unsigned char>(D::N);
        bytes = c.used();
    }
};

template <typename T, int HS>
struct BackwardKvSmem {
    using D = Dims<T, HS>;
    T *k, *v;           // k_rows x HS (this block's keys)
    T *q, *dout;        // N x HS (the current query tile)
    float *s, *dp;      // per warp 16 x N: S^T and dP^T
    T *p, *ds;          // per warp 16 x N: (P M)^T and dS^T
    float *lse, *dsum;  // N: the query tile's lse and D
    size_t bytes;
    __host__ __device__ explicit BackwardKvSmem(unsigned char* base) {
        SmemCarver c(base);
        k = c.take<T>(k_rows * D::ld_t);
        v = c.take<T>(k_rows * D::ld_t);
        q = c.take<T>(D::N * D::ld_t);
        dout = c.take<T>(D::N * D::ld_t);
        s = c.take<float>(k_rows * D::ld_s);
        dp = c.take<float>(k_rows * D::ld_s);
        p = c.take<T>(k_rows * D::ld_p);
        ds = c.take<T>(k_rows * D::ld_p);
        lse = c.take<float>(D::N);
        dsum = c.take<float>(D::N);
        bytes = c.used();
    }
};

template <typename T, int HS>
struct BackwardQSmem {
    using D = Dims<T, HS>;
    T *q, *dout;         // k_rows x HS (this block's queries)
    T *k, *v;            // N x HS (the current key tile)
    float *s, *dp;       // per warp 16 x N
    T* ds;               // per warp 16 x N
    unsigned char* vis;  // N
    size_t bytes;
    __host__ __device__ explicit BackwardQSmem(unsigned char* base) {
        SmemCarver c(base);
        q = c.take<T>(k_rows * D::ld_t);
        dout = c.take<T>(k_rows * D::ld_t);
        k = c.take<T>(D::N * D::ld_t);
        v = c.take<T>(D::N * D::ld_t);
        s = c.take<float>(k_rows * D::ld_s);
        dp = c.take<float>(k_rows * D::ld_s);
        ds = c.take<T>(k_rows * D::ld_p);
        vis = c.take<unsigned char>(D::N);
        bytes = c.used();
    }
};

template <typename T>
struct FlashArgs {
    const T *q, *k, *v;  // row stride ld
    int64_t ld;
    T* out;             // forward output, row stride C
    float* lse_out;     // forward's (B, NH, T)
    const T* dout;      // row stride C
    const float* lse;   // backward's input (B, NH, T)
    const float* dsum;  // (B, NH, T): rowsum(dout * out)
    T *dq, *dk, *dv;    // row stride ld
    const int64_t* key_padding;
    const int64_t* key_start;  // (B, T) first key of each query's document, or null
    int64_t B, Tn, NH, C;
    int64_t head_offset, NH_total;
    bool causal;
    bool vec16;  // every tile source row is 16-byte aligned: copy as uint4
    float scale;
    bool dropping;
    float drop_scale;
    DropoutSpec drop;
};

// Dropout keep decisions, gpu::dropout_keep's, reusing the last Philox block
// (four consecutive elements) when the next element falls in it.
class DropDraws {
  public:
    __device__ explicit DropDraws(const DropoutSpec& d) : stream_(d.stream), p_(d.p) {}
    __device__ bool keep(uint64_t e) {
        const uint64_t blk = e >> 2;
        if (blk != blk_) {
            const auto w = stream_.block(blk);
            w0_ = w[0];
            w1_ = w[1];
            w2_ = w[2];
            w3_ = w[3];
            blk_ = blk;
        }
        const unsigned sel = unsigned(e & 3);
        const uint32_t w = sel == 0 ? w0_ : sel == 1 ? w1_ : sel == 2 ? w2_ : w3_;
        return philox_u01(w) >= p_;
    }

  private:
    PhiloxStream stream_;
    float p_;
    uint64_t blk_ = ~uint64_t(0);
    uint32_t w0_ = 0, w1_ = 0, w2_ = 0, w3_ = 0;
};

// Global dropout element of (b, h, 0, 0); (b, h, i, j) is this + i * T + j.
template <typename T>
__device__ uint64_t drop_head_base(const FlashArgs<T>& a, int64_t b, int64_t h) {
    return (uint64_t(a.drop.sample_offset + b) * uint64_t(a.NH_total) +
            uint64_t(a.head_offset + h)) *
           uint64_t(a.Tn) * uint64_t(a.Tn);
}

// rows x HS tile from global rows of stride ld_src into shared rows of stride
// ld_dst; rows from `valid` on are zeros.
template <typename T, int HS>
__device__ void load_tile(T* dst, int ld_dst, const T* src, int64_t ld_src, int rows, int valid,
                          bool vec16) {
    if (vec16) {
        constexpr int per_vec = 16 / int(sizeof(T));
        constexpr int per_row = HS / per_vec;
        for (int e = threadIdx.x; e < rows * per_row; e += k_threads) {
            const int r = e / per_row, c = (e % per_row) * per_vec;
            uint4 x = make_uint4(0u, 0u, 0u, 0u);
            if (r < valid) x = *reinterpret_cast<const uint4*>(src + int64_t(r) * ld_src + c);
            *reinterpret_cast<uint4*>(dst + r * ld_dst + c) = x;
        }
    } else {
        for (int e = threadIdx.x; e < rows * HS; e += k_threads) {
            const int r = e / HS, c = e % HS;
            dst[r * ld_dst + c] = r < valid ? src[int64_t(r) * ld_src + c] : gpu::from_f32<T>(0.0f);
        }
    }
}

// One warp: s (16 x N fp32, row stride ld_s) = a (16 rows) . b (N rows)^T,
// both row-major with HS columns and row stride ld_t.
template <typename T, int HS>
__device__ void warp_scores(float* s, const T* a, const T* b) {
    using D = Dims<T, HS>;
    if constexpr (k_tensor_cores<T>) {
#pragma unroll 1
        for (int n = 0; n < D::N / k_frag; ++n) {
            wmma::fragment<wmma::accumulator, k_frag, k_frag, k_frag, float> acc;
            wmma::fill_fragment(acc, 0.0f);
#pragma unroll
            for (int kk = 0; kk < HS / k_frag; ++kk) {
                wmma::fragment<wmma::matrix_a, k_frag, k_frag, k_frag, T, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, k_frag, k_frag, k_frag, T, wmma::col_major> fb;
                wmma::load_matrix_sync(fa, a + kk * k_frag, D::ld_t);
                wmma::load_matrix_sync(fb, b + n * k_frag * D::ld_t + kk * k_frag, D::ld_t);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(s + n * k_frag, acc, D::ld_s, wmma::mem_row_major);
        }
    } else {
        const int lane = threadIdx.x % gpu::k_warp, r = lane >> 1, half = lane & 1;
        float acc[D::N / 2];
#pragma unroll
        for (int cc = 0; cc < D::N / 2; ++cc) acc[cc] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < HS; ++d) {
            const float x = gpu::to_f32(a[r * D::ld_t + d]);
#pragma unroll
            for (int cc = 0; cc < D::N / 2; ++cc)
                acc[cc] += x * gpu::to_f32(b[(2 * cc + half) * D::ld_t + d]);
        }
#pragma unroll
        for (int cc = 0; cc < D::N / 2; ++cc) s[r * D::ld_s + 2 * cc + half] = acc[cc];
    }
    __syncwarp();
}

// A warp's 16 x HS fp32 accumulator: tensor-core fragments, or for fp32
// HS / 2 floats per lane (row lane / 2, columns lane % 2 + 2 cc).
template <typename T, int HS, bool TC = k_tensor_cores<T>>
struct WarpAcc;

template <typename T, int HS>
struct WarpAcc<T, HS, true> {
    using D = Dims<T, HS>;
    wmma::fragment<wmma::accumulator, k_frag, k_frag, k_frag, float> f[HS / k_frag];

    __device__ void zero() {
#pragma unroll
        for (int n = 0; n < HS / k_frag; ++n) wmma::fill_fragment(f[n], 0.0f);
    }
    // += a (16 x N, row stride ld_p) . b (N x HS, row stride ld_t)
    __device__ void add(const T* a, const T* b) {
#pragma unroll 1
        for (int kk = 0; kk < D::N / k_frag; ++kk) {
            wmma::fragment<wmma::matrix_a, k_frag, k_frag, k_frag, T, wmma::row_major> fa;
            wmma::load_matrix_sync(fa, a + kk * k_frag, D::ld_p);
#pragma unroll
            for (int n = 0; n < HS / k_frag; ++n) {
                wmma::fragment<wmma::matrix_b, k_frag, k_frag, k_frag, T, wmma::row_major> fb;
                wmma::load_matrix_sync(fb, b + kk * k_frag * D::ld_t + n * k_frag, D::ld_t);
                wmma::mma_sync(f[n], fa, fb, f[n]);
            }
        }
    }
    // Row r times the factor lanes 2r and 2r+1 hold; buf is the warp's 16 x 16
    // fp32 staging tile (row stride ld_s). Skipped when every factor is 1,
    // which is most tiles once the running maxima settle.
    __device__ void scale_rows(float factor, float* buf) {
        if (__all_sync(k_full, factor == 1.0f)) return;
        const int lane = threadIdx.x % gpu::k_warp;
#pragma unroll
        for (int n = 0; n < HS / k_frag; ++n) {
            wmma::store_matrix_sync(buf, f[n], D::ld_s, wmma::mem_row_major);
            __syncwarp();
#pragma unroll
            for (int e = lane; e < k_frag * k_frag; e += gpu::k_warp) {
                const int r = e / k_frag, c = e % k_frag;
                buf[r * D::ld_s + c] *= __shfl_sync(k_full, factor, 2 * r);
            }
            __syncwarp();
            wmma::load_matrix_sync(f[n], buf, D::ld_s, wmma::mem_row_major);
            __syncwarp();
        }
    }
    // dst rows r < valid (row stride ld) = row r times the factor of lanes 2r, 2r+1.
    __device__ void store(T* dst, int64_t ld, int valid, float factor, float* buf) {
        const int lane = threadIdx.x % gpu::k_warp;
        // Fully unrolled: f[n] with a run-time n would put f in local memory.
#pragma unroll
        for (int n = 0; n < HS / k_frag; ++n) {
            wmma::store_matrix_sync(buf, f[n], D::ld_s, wmma::mem_row_major);
            __syncwarp();
#pragma unroll
            for (int e = lane; e < k_frag * k_frag; e += gpu::k_warp) {
                const int r = e / k_frag, c = e % k_frag;
                const float fr = __shfl_sync(k_full, factor, 2 * r);
                if (r < valid)
                    dst[r * ld + n * k_frag + c] = gpu::from_f32<T>(buf[r * D::ld_s + c] * fr);
            }
            __syncwarp();
        }
    }
};

template <typename T, int HS>
struct WarpAcc<T, HS, false> {
    using D = Dims<T, HS>;
    float v[HS / 2];

    __device__ void zero() {
#pragma unroll
        for (int cc = 0; cc < HS / 2; ++cc) v[cc] = 0.0f;
    }
    __device__ void add(const T* a, const T* b) {
        const int lane = threadIdx.x % gpu::k_warp, r = lane >> 1, half = lane & 1;
#pragma unroll 2
        for (int j = 0; j < D::N; ++j) {
            const float x = gpu::to_f32(a[r * D::ld_p + j]);
#pragma unroll
            for (int cc = 0; cc < HS / 2; ++cc)
                v[cc] += x * gpu::to_f32(b[j * D::ld_t + 2 * cc + half]);
        }
    }
    __device__ void scale_rows(float factor, float*) {
#pragma unroll
        for (int cc = 0; cc < HS / 2; ++cc) v[cc] *= factor;
    }
    __device__ void store(T* dst, int64_t ld, int valid, float factor, float*) {
        const int lane = threadIdx.x % gpu::k_warp, r = lane >> 1, half = lane & 1;
        if (r >= valid) return;
#pragma unroll
        for (int cc = 0; cc < HS / 2; ++cc)
            dst[r * ld + 2 * cc + half] = gpu::from_f32<T>(v[cc] * factor);
    }
};

__device__ __forceinline__ bool key_unpadded(const int64_t* key_padding, int64_t b, int64_t Tn,
                                             int64_t j) {
    return key_padding == nullptr || key_padding[b * Tn + j] != 0;
}

}  // namespace loom::flash
