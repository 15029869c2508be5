// The backward kernels of the fused attention (the scheme is in
// flash_attention_cuda.cu's opening comment): D = rowsum(dout * out), then
// dK/dV over key tiles and dQ over query tiles. Device code only; included
// by flash_attention_cuda.cu alone.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_device.cuh"
#include "ops/cuda/flash_attention_tiles.cuh"

namespace loom::flash {

// D[b, h, i] = sum_d dout * out over the head's HS columns; one warp per (b, i, h).
template <typename T>
__global__ void flash_dsum_kernel(float* dsum, const T* dout, const T* out, int64_t rows,
                                  int64_t Tn, int64_t NH, int HS) {
    const int lane = threadIdx.x % gpu::k_warp;
    const int64_t row =
        int64_t(blockIdx.x) * (blockDim.x / gpu::k_warp) + threadIdx.x / gpu::k_warp;
    if (row >= rows) return;
    const T* x = dout + row * HS;  // (b, t, h) rows are consecutive: C = NH * HS
    const T* y = out + row * HS;
    float acc = 0.0f;
    for (int d = lane; d < HS; d += gpu::k_warp) acc += gpu::to_f32(x[d]) * gpu::to_f32(y[d]);
    acc = gpu::warp_sum(acc);
    if (lane == 0) {
        const int64_t h = row % NH, bt = row / NH;
        const int64_t t = bt % Tn, b = bt / Tn;
        dsum[(b * NH + h) * Tn + t] = acc;
    }
}

// Grid (B * NH, key tiles of k_rows); writes dk and dv.
template <typename T, int HS>
__global__ void __launch_bounds__(k_threads) flash_backward_kv_kernel(const FlashArgs<T> a) {
    using D = Dims<T, HS>;
    constexpr int N = D::N;
    extern __shared__ __align__(128) unsigned char flash_smem[];
    const BackwardKvSmem<T, HS> sm(flash_smem);
    const int warp = threadIdx.x / gpu::k_warp, lane = threadIdx.x % gpu::k_warp;
    const int r = lane >> 1, half = lane & 1;
    const int64_t bh = blockIdx.x, b = bh / a.NH, h = bh % a.NH;
    const int64_t k0 = int64_t(blockIdx.y) * k_rows;
    const int64_t w0 = k0 + warp * k_frag;  // the warp's first key
    const int64_t j = w0 + r;               // this lane's key
    const int64_t row0 = b * a.Tn;
    const int64_t col = h * HS;

    const int kvalid = int(std::min<int64_t>(k_rows, a.Tn - k0));
    load_tile<T, HS>(sm.k, D::ld_t, a.k + (row0 + k0) * a.ld + col, a.ld, k_rows, kvalid, a.vec16);
    load_tile<T, HS>(sm.v, D::ld_t, a.v + (row0 + k0) * a.ld + col, a.ld, k_rows, kvalid, a.vec16);
    const bool key_ok = j < a.Tn && key_unpadded(a.key_padding, b, a.Tn, j);
    float* s_w = sm.s + warp * k_frag * D::ld_s;
    float* dp_w = sm.dp + warp * k_frag * D::ld_s;
    T* p_w = sm.p + warp * k_frag * D::ld_p;
    T* ds_w = sm.ds + warp * k_frag * D::ld_p;
    const T* k_w = sm.k + warp * k_frag * D::ld_t;
    const T* v_w = sm.v + warp * k_frag * D::ld_t;

    WarpAcc<T, HS> acc_k, acc_v;
    acc_k.zero();
    acc_v.zero();
    DropDraws draws(a.drop);
    const uint64_t drop_head = a.dropping ? drop_head_base(a, b, h) : 0;
    const float* lse = a.lse + bh * a.Tn;
    const float* dsum = a.dsum + bh * a.Tn;

    const int64_t n_tiles = (a.Tn + N - 1) / N;
    // Causal: query tiles wholly before the block's first key are skipped.
    const int64_t first = a.causal ? k0 / N : 0;
    for (int64_t t = first; t < n_tiles; ++t) {
        const int64_t q0 = t * N;
        const int qvalid = int(std::min<int64_t>(N, a.Tn - q0));
        __syncthreads();  // the previous tiles are consumed
        load_tile<T, HS>(sm.q, D::ld_t, a.q + (row0 + q0) * a.ld + col, a.ld, N, qvalid, a.vec16);
        load_tile<T, HS>(sm.dout, D::ld_t, a.dout + (row0 + q0) * a.C + col, a.C, N, qvalid,
                         a.vec16);
        for (int c = threadIdx.x; c < N; c += k_threads) {
            sm.lse[c] = c < qvalid ? lse[q0 + c] : 0.0f;
            sm.dsum[c] = c < qvalid ? dsum[q0 + c] : 0.0f;
        }
        __syncthreads();
        // Warp-uniform: keys past T, or every query of the tile before the warp's keys.
        if (w0 >= a.Tn || (a.causal && q0 + N - 1 < w0)) continue;

        warp_scores<T, HS>(s_w, k_w, sm.q);      // S^T: keys x queries
        warp_scores<T, HS>(dp_w, v_w, sm.dout);  // dP^T
#pragma unroll 4
        for (int cc = 0; cc < N / 2; ++cc) {
            const int c = 2 * cc + half;
            const int64_t i = q0 + c;
            const bool ok = key_ok && c < qvalid && (!a.causal || j <= i) &&
                            (a.key_start == nullptr || j >= a.key_start[row0 + i]);
            // Select, never multiply: lse is -inf on a row without keys.
            const float p = ok ? expf(s_w[r * D::ld_s + c] * a.scale - sm.lse[c]) : 0.0f;
            float m = ok ? 1.0f : 0.0f;
            if (a.dropping && ok)
                m = draws.keep(drop_head + uint64_t(i) * uint64_t(a.Tn) + uint64_t(j))
                        ? a.drop_scale
                        : 0.0f;
            p_w[r * D::ld_p + c] = gpu::from_f32<T>(p * m);
            ds_w[r * D::ld_p + c] = gpu::from_f32<T>(p * (dp_w[r * D::ld_s + c] * m - sm.dsum[c]));
        }
        __syncwarp();
        acc_v.add(p_w, sm.dout);  // dV += (P M)^T dO
        acc_k.add(ds_w, sm.q);    // dK += dS^T Q
    }
    __syncwarp();
    const int valid = int(std::clamp<int64_t>(a.Tn - w0, 0, k_frag));
    if (valid > 0) {
        acc_k.store(a.dk + (row0 + w0) * a.ld + col, a.ld, valid, a.scale, s_w);
        acc_v.store(a.dv + (row0 + w0) * a.ld + col, a.ld, valid, 1.0f, s_w);
    }
}

// Grid (B * NH, query tiles of k_rows); writes dq.
template <typename T, int HS>
__global__ void __launch_bounds__(k_threads) flash_backward_q_kernel(const FlashArgs<T> a) {
    using D = Dims<T, HS>;
    constexpr int N = D::N;
    extern __shared__ __align__(128) unsigned char flash_smem[];
    const BackwardQSmem<T, HS> sm(flash_smem);
    const int warp = threadIdx.x / gpu::k_warp, lane = threadIdx.x % gpu::k_warp;
    const int r = lane >> 1, half = lane & 1;
    const int64_t bh = blockIdx.x, b = bh / a.NH, h = bh % a.NH;
    const int64_t q0 = int64_t(blockIdx.y) * k_rows;
    const int64_t w0 = q0 + warp * k_frag;
    const int64_t i = w0 + r;
    const int64_t row0 = b * a.Tn;
    const int64_t col = h * HS;

    const int qvalid = int(std::min<int64_t>(k_rows, a.Tn - q0));
    load_tile<T, HS>(sm.q, D::ld_t, a.q + (row0 + q0) * a.ld + col, a.ld, k_rows, qvalid, a.vec16);
    load_tile<T, HS>(sm.dout, D::ld_t, a.dout + (row0 + q0) * a.C + col, a.C, k_rows, qvalid,
                     a.vec16);
    const float lse_i = i < a.Tn ? a.lse[bh * a.Tn + i] : 0.0f;
    const float dsum_i = i < a.Tn ? a.dsum[bh * a.Tn + i] : 0.0f;
    const int64_t lo = a.key_start != nullptr && i < a.Tn ? a.key_start[row0 + i] : 0;
    float* s_w = sm.s + warp * k_frag * D::ld_s;
    float* dp_w = sm.dp + warp * k_frag * D::ld_s;
    T* ds_w = sm.ds + warp * k_frag * D::ld_p;
    const T* q_w = sm.q + warp * k_frag * D::ld_t;
    const T* do_w = sm.dout + warp * k_frag * D::ld_t;

    WarpAcc<T, HS> acc;
    acc.zero();
    DropDraws draws(a.drop);
    const uint64_t drop_row =
        a.dropping ? drop_head_base(a, b, h) + uint64_t(i) * uint64_t(a.Tn) : 0;

    int64_t n_tiles = (a.Tn + N - 1) / N;
    if (a.causal) n_tiles = std::min<int64_t>(n_tiles, (q0 + k_rows - 1) / N + 1);
    for (int64_t t = 0; t < n_tiles; ++t) {
        const int64_t k0 = t * N;
        const int kvalid = int(std::min<int64_t>(N, a.Tn - k0));
        __syncthreads();
        load_tile<T, HS>(sm.k, D::ld_t, a.k + (row0 + k0) * a.ld + col, a.ld, N, kvalid, a.vec16);
        load_tile<T, HS>(sm.v, D::ld_t, a.v + (row0 + k0) * a.ld + col, a.ld, N, kvalid, a.vec16);
        for (int c = threadIdx.x; c < N; c += k_threads)
            sm.vis[c] = c < kvalid && key_unpadded(a.key_padding, b, a.Tn, k0 + c);
        __syncthreads();
        if (w0 >= a.Tn || (a.causal && k0 > w0 + k_frag - 1)) continue;

        warp_scores<T, HS>(s_w, q_w, sm.k);
        warp_scores<T, HS>(dp_w, do_w, sm.v);
#pragma unroll 4
        for (int cc = 0; cc < N / 2; ++cc) {
            const int c = 2 * cc + half;
            const bool ok = sm.vis[c] && i < a.Tn && (!a.causal || k0 + c <= i) && k0 + c >= lo;
            const float p = ok ? expf(s_w[r * D::ld_s + c] * a.scale - lse_i) : 0.0f;
            float m = ok ? 1.0f : 0.0f;
            if (a.dropping && ok) m = draws.keep(drop_row + uint64_t(k0 + c)) ? a.drop_scale : 0.0f;
            ds_w[r * D::ld_p + c] = gpu::from_f32<T>(p * (dp_w[r * D::ld_s + c] * m - dsum_i));
        }
        __syncwarp();
        acc.add(ds_w, sm.k);  // dQ += dS K
    }
    __syncwarp();
    const int valid = int(std::clamp<int64_t>(a.Tn - w0, 0, k_frag));
    if (valid > 0) acc.store(a.dq + (row0 + w0) * a.ld + col, a.ld, valid, a.scale, s_w);
}

}  // namespace loom::flash
