// Scaled dot-product attention, forward and backward, one (sample, head) per task.
//
// Each task keeps its (T, T) block hot in cache: scores by a single-threaded
// GEMM, masked softmax in place, dropout into a per-thread buffer, then P @ V.
// B * NH tasks (96 for BERT-base at batch 8) spread over the cores; GEMMs called
// inside the parallel region run on the calling thread (see gemm.h).
//
// Masks (attention.h): key j is visible from query i when key_padding[b, j] != 0
// and, if causal, j <= i. Keys before a sliding window or before the query's
// document (key_start) are outside the row altogether: weight 0, whatever the
// rest of the row. A row with no visible key reproduces HF's eager
// arithmetic, where a causally hidden key is *replaced* by float32's lowest
// value and a padded key has lowest *added* (so hidden and padded gives -inf):
// the row is uniform over the keys left at "lowest", i.e. the causally allowed
// keys plus the unpadded future keys (all T keys without a causal mask). Such a
// row's output does not depend on q or k, so backward sends it no gradient to q
// or k (HF's autograd passes a rounding artefact there; those rows carry no loss
// in practice: a sample with no real token, or a left-padded position).
//
// Dropout on the probabilities: element (b, h, i, j) is global element
// ((sample_offset + b) * NH_total + head_offset + h) * T * T + i * T + j of the
// dropout stream, so a tensor-parallel head split draws the same mask.
//
// Precision: a task's six GEMMs go through a policy, so the fp32, fp64 and bf16
// variants share every other line. DirectGemms runs them in T on the caller's
// memory. Bf16Gemms rounds each operand once into per-thread bf16 buffers (the
// task's q, k, v and dout slices, P after dropout, dS) and accumulates in fp32;
// everything between the GEMMs (masks, softmax, dropout, softmax backward) is
// the same fp32 code in both.
#include "ops/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "ops/attention_common.h"
#include "ops/gemm.h"

namespace loom {
namespace {

using detail::attn_scale;
using detail::Geometry;
using detail::geometry_of;
using detail::softmax_row;
using detail::softmax_row_backward;
using detail::visible_keys;

// Threads only pay off past ~10 us of work (tiny shapes in gradient checks).
bool parallel_heads(const Geometry& g) {
    return g.B * g.NH > 1 && g.B * g.NH * g.T * g.T * g.HS > (1 << 15) && !omp_in_parallel();
}

// The GEMMs of one (sample, head) task in T, on the caller's memory: q, k, v are
// (T, HS) slices with row stride ld, dy a (T, HS) slice with row stride C (null
// in forward). Shapes of the results are as in the kernels below.
template <typename T>
class DirectGemms {
  public:
    DirectGemms(const Geometry& g, const T* q, const T* k, const T* v, const T* dy)
        : g_(g), q_(q), k_(k), v_(v), dy_(dy) {}
    // s (T, T) = scale * q @ k^T
    void scores(T* s, T scale) const {
        gemm<T>(false, true, g_.T, g_.T, g_.HS, scale, q_, g_.ld, k_, g_.ld, T(0), s, g_.T);
    }
    // out (T, HS) with row stride C = p (T, T) @ v
    void context(T* out, const T* p) const {
        gemm<T>(false, false, g_.T, g_.HS, g_.T, T(1), p, g_.T, v_, g_.ld, T(0), out, g_.C);
    }
    // dp (T, T) = dy @ v^T
    void dprobs(T* dp) const {
        gemm<T>(false, true, g_.T, g_.T, g_.HS, T(1), dy_, g_.C, v_, g_.ld, T(0), dp, g_.T);
    }
    // dv (T, HS) with row stride ld = p^T @ dy
    void dvalues(T* dv, const T* p) const {
        gemm<T>(true, false, g_.T, g_.HS, g_.T, T(1), p, g_.T, dy_, g_.C, T(0), dv, g_.ld);
    }
    // dq = scale * ds @ k ; dk = scale * ds^T @ q (row stride ld)
    void dqk(T* dq, T* dk, const T* ds, T scale) const {
        gemm<T>(false, false, g_.T, g_.HS, g_.T, scale, ds, g_.T, k_, g_.ld, T(0), dq, g_.ld);
        gemm<T>(true, false, g_.T, g_.HS, g_.T, scale, ds, g_.T, q_, g_.ld, T(0), dk, g_.ld);
    }

  private:
    const Geometry& g_;
    const T *q_, *k_, *v_, *dy_;
};

// Rounds (rows, cols) floats with row stride ld to contiguous bf16, on the
// calling thread (convert_f32_to_bf16 would open a parallel region per row).
// A head's slice is a few cache lines per 3C-float row, a stride the hardware
// prefetcher does not follow: without the explicit prefetch, rounding q, k and
// v took ~20% of the bf16 forward (bench_ops, misses on the (B, T, 3C) input),
// with it ~15%. Eight rows ahead is about one memory latency of work.
void round_rows_bf16(uint16_t* out, const float* in, int64_t rows, int64_t cols, int64_t ld) {
    constexpr int64_t ahead = 8;
    for (int64_t r = 0; r < rows; ++r) {
        const float* x = in + r * ld;
        uint16_t* y = out + r * cols;
        if (r + ahead < rows)
            for (int64_t c = 0; c < cols; c += 16) __builtin_prefetch(x + ahead * ld + c);
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) y[c] = f32_to_bf16(x[c]);
    }
}

// Per-thread bf16 operands of the task in flight. Grown, never shrunk: fresh
// pages are slow to first-touch, and every task of a step has the same sizes.
struct Bf16Operands {
    std::vector<uint16_t> q, k, v, dy;  // (T, HS) each, contiguous
    std::vector<uint16_t> p, ds;        // (T, T) each
};

uint16_t* grown(std::vector<uint16_t>& w, int64_t n) {
    if (int64_t(w.size()) < n) w.resize(size_t(n));
    return w.data();
}

// DirectGemms' contract on bf16-rounded operands with fp32 accumulation and fp32
// results (PyTorch's bf16 autocast). q, k, v and dy are rounded when the task
// starts; P and dS when the GEMM that reads them runs.
class Bf16Gemms {
  public:
    Bf16Gemms(const Geometry& g, const float* q, const float* k, const float* v, const float* dy)
        : g_(g) {
        thread_local Bf16Operands ops;
        const int64_t n = g.T * g.HS, TT = g.T * g.T;
        q_ = grown(ops.q, n);
        k_ = grown(ops.k, n);
        v_ = grown(ops.v, n);
        p_ = grown(ops.p, TT);
        round_rows_bf16(q_, q, g.T, g.HS, g.ld);
        round_rows_bf16(k_, k, g.T, g.HS, g.ld);
        round_rows_bf16(v_, v, g.T, g.HS, g.ld);
        if (dy != nullptr) {
            dy_ = grown(ops.dy, n);
            ds_ = grown(ops.ds, TT);
            round_rows_bf16(dy_, dy, g.T, g.HS, g.C);
        }
    }
    void scores(float* s, float scale) const {
        gemm_bf16(false, true, g_.T, g_.T, g_.HS, scale, q_, g_.HS, k_, g_.HS, 0.0f, s, g_.T);
    }
    void context(float* out, const float* p) const {
        round_rows_bf16(p_, p, 1, g_.T * g_.T, 0);
        gemm_bf16(false, false, g_.T, g_.HS, g_.T, 1.0f, p_, g_.T, v_, g_.HS, 0.0f, out, g_.C);
    }
    void dprobs(float* dp) const {
        gemm_bf16(false, true, g_.T, g_.T, g_.HS, 1.0f, dy_, g_.HS, v_, g_.HS, 0.0f, dp, g_.T);
    }
    void dvalues(float* dv, const float* p) const {
        round_rows_bf16(p_, p, 1, g_.T * g_.T, 0);
        gemm_bf16(true, false, g_.T, g_.HS, g_.T, 1.0f, p_, g_.T, dy_, g_.HS, 0.0f, dv, g_.ld);
    }
    void dqk(float* dq, float* dk, const float* ds, float scale) const {
        round_rows_bf16(ds_, ds, 1, g_.T * g_.T, 0);
        gemm_bf16(false, false, g_.T, g_.HS, g_.T, scale, ds_, g_.T, k_, g_.HS, 0.0f, dq, g_.ld);
        gemm_bf16(true, false, g_.T, g_.HS, g_.T, scale, ds_, g_.T, q_, g_.HS, 0.0f, dk, g_.ld);
    }

  private:
    const Geometry& g_;
    uint16_t *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *dy_ = nullptr;
    uint16_t *p_ = nullptr, *ds_ = nullptr;
};

// The first key query i of sample b may see: under a sliding window, and
// from the start of its document (AttnMask::key_start); 0 without either.
inline int64_t key_lo(const AttnMask& mask, int64_t b, int64_t T, int64_t i) {
    int64_t lo = mask.window >= 0 ? std::max<int64_t>(0, i - mask.window) : 0;
    if (mask.key_start != nullptr) lo = std::max(lo, mask.key_start[b * T + i]);
    return lo;
}

void check_key_start(const AttnMask& mask, int64_t B, int64_t T) {
    if (mask.key_start == nullptr) return;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < T; ++i) {
            const int64_t lo = mask.key_start[b * T + i];
            LOOM_ASSERT(lo >= 0 && lo <= (mask.causal ? i : T - 1),
                        "attention: key_start {} of query {} (sample {}) outside [0, {}]", lo, i, b,
                        mask.causal ? i : T - 1);
        }
}

template <typename T, typename Gemms>
void forward_tasks(T* out, T* att, const T* q, const T* k, const T* v, int64_t ld,
                   const AttnShape& s, const AttnMask& mask, const DropoutSpec& drop) {
    const Geometry g = geometry_of(s, ld);
    LOOM_ASSERT(mask.window < 0 || mask.causal, "attention: a sliding window needs the causal mask");
    check_key_start(mask, g.B, g.T);
    const std::vector<unsigned char> vis = visible_keys(mask, g.B, g.T);
    const T scale = attn_scale<T>(g.HS);
    const int64_t TT = g.T * g.T;
#pragma omp parallel if (parallel_heads(g))
    {
        std::vector<T> dropped(drop.active() ? size_t(TT) : 0);  // (T, T) P after dropout
        // Dynamic: parts are taken as threads come free, so a thread whose core
        // another process holds delays the region less (docs/cpu-contention.md).
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < g.B * g.NH; ++bh) {
            const int64_t b = bh / g.NH, h = bh % g.NH;
            const int64_t off = b * g.T * g.ld + h * g.HS;
            T* a = att + bh * TT;  // (T, T)
            const Gemms gm(g, q + off, k + off, v + off, nullptr);
            gm.scores(a, scale);
            for (int64_t i = 0; i < g.T; ++i) {
                // Keys before the window or the document are outside the
                // row: weight 0.
                const int64_t lo = key_lo(mask, b, g.T, i);
                T* r = a + i * g.T;
                std::fill(r, r + lo, T(0));
                softmax_row(r + lo, vis.data() + b * g.T + lo, (mask.causal ? i + 1 : g.T) - lo,
                            g.T - lo);
            }
            const T* p = a;
            if (drop.active()) {
                dropout_multipliers(dropped.data(), drop,
                                    g.drop_base(drop.sample_offset, s.head_offset, b, h), TT);
#pragma omp simd
                for (int64_t e = 0; e < TT; ++e) dropped[size_t(e)] *= a[e];
                p = dropped.data();
            }
            gm.context(out + b * g.T * g.C + h * g.HS, p);
        }
    }
}

template <typename T, typename Gemms>
void backward_tasks(T* dq, T* dk, T* dv, T* scratch, const T* dout, const T* att, const T* q,
                    const T* k, const T* v, int64_t ld, const AttnShape& s, const AttnMask& mask,
                    const DropoutSpec& drop) {
    const Geometry g = geometry_of(s, ld);
    const std::vector<unsigned char> vis = visible_keys(mask, g.B, g.T);
    const T scale = attn_scale<T>(g.HS);
    const int64_t TT = g.T * g.T;
#pragma omp parallel if (parallel_heads(g))
    {
        std::vector<T> mult(drop.active() ? size_t(TT) : 0);     // (T, T) dropout multipliers
        std::vector<T> dropped(drop.active() ? size_t(TT) : 0);  // (T, T) P after dropout
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < g.B * g.NH; ++bh) {
            const int64_t b = bh / g.NH, h = bh % g.NH;
            const int64_t off = b * g.T * g.ld + h * g.HS;
            const T* a = att + bh * TT;  // (T, T)
            const T* dy = dout + b * g.T * g.C + h * g.HS;
            T* ds = scratch + bh * TT;  // (T, T): dP, then dScores
            const Gemms gm(g, q + off, k + off, v + off, dy);
            gm.dprobs(ds);  // dP: gradient of the dropped probabilities
            const T* p = a;
            if (drop.active()) {
                dropout_multipliers(mult.data(), drop,
                                    g.drop_base(drop.sample_offset, s.head_offset, b, h), TT);
#pragma omp simd
                for (int64_t e = 0; e < TT; ++e) {
                    dropped[size_t(e)] = a[e] * mult[size_t(e)];
                    ds[e] *= mult[size_t(e)];
                }
                p = dropped.data();
            }
            gm.dvalues(dv + off, p);
            // Softmax backward per row: dS = P (dP - <P, dP>).
            const unsigned char* vb = vis.data() + b * g.T;
            for (int64_t i = 0; i < g.T; ++i) {
                const int64_t lo = key_lo(mask, b, g.T, i);
                std::fill(ds + i * g.T, ds + i * g.T + lo, T(0));
                softmax_row_backward(ds + i * g.T + lo, a + i * g.T + lo, vb + lo,
                                     (mask.causal ? i + 1 : g.T) - lo, g.T - lo);
            }
            gm.dqk(dq + off, dk + off, ds, scale);
        }
    }
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* att, const T* q, const T* k, const T* v, int64_t ld,
                       const AttnShape& s, const AttnMask& mask, const DropoutSpec& drop) {
    forward_tasks<T, DirectGemms<T>>(out, att, q, k, v, ld, s, mask, drop);
}

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, T* scratch, const T* dout, const T* att, const T* q,
                        const T* k, const T* v, int64_t ld, const AttnShape& s,
                        const AttnMask& mask, const DropoutSpec& drop) {
    backward_tasks<T, DirectGemms<T>>(dq, dk, dv, scratch, dout, att, q, k, v, ld, s, mask, drop);
}

void attention_forward_bf16(float* out, float* att, const float* q, const float* k, const float* v,
                            int64_t ld, const AttnShape& s, const AttnMask& mask,
                            const DropoutSpec& drop) {
    forward_tasks<float, Bf16Gemms>(out, att, q, k, v, ld, s, mask, drop);
}

void attention_backward_bf16(float* dq, float* dk, float* dv, float* scratch, const float* dout,
                             const float* att, const float* q, const float* k, const float* v,
                             int64_t ld, const AttnShape& s, const AttnMask& mask,
                             const DropoutSpec& drop) {
    backward_tasks<float, Bf16Gemms>(dq, dk, dv, scratch, dout, att, q, k, v, ld, s, mask, drop);
}

template void attention_forward<float>(float*, float*, const float*, const float*, const float*,
                                       int64_t, const AttnShape&, const AttnMask&,
                                       const DropoutSpec&);
template void attention_forward<double>(double*, double*, const double*, const double*,
                                        const double*, int64_t, const AttnShape&, const AttnMask&,
                                        const DropoutSpec&);
template void attention_backward<float>(float*, float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int64_t,
                                        const AttnShape&, const AttnMask&, const DropoutSpec&);
template void attention_backward<double>(double*, double*, double*, double*, const double*,
                                         const double*, const double*, const double*, const double*,
                                         int64_t, const AttnShape&, const AttnMask&,
                                         const DropoutSpec&);

bool attention_every_row_has_a_key(const int64_t* key_padding_host, int64_t B, int64_t T,
                                   bool causal, const int64_t* key_start_host) {
    if (key_padding_host == nullptr || T == 0) return true;
    for (int64_t b = 0; b < B; ++b) {
        const int64_t* pad = key_padding_host + b * T;
        if (key_start_host != nullptr) {
            // Query i sees [key_start[i], i] (causal) or [key_start[i], T):
            // track the last unpadded key at or before i (causal) or the
            // next at or after key_start[i] (otherwise).
            const int64_t* lo = key_start_host + b * T;
            if (causal) {
                int64_t last = -1;
                for (int64_t i = 0; i < T; ++i) {
                    if (pad[i] != 0) last = i;
                    if (last < lo[i]) return false;
                }
            } else {
                std::vector<int64_t> next(size_t(T + 1), T);
                for (int64_t j = T; j-- > 0;)
                    next[size_t(j)] = pad[j] != 0 ? j : next[size_t(j + 1)];
                for (int64_t i = 0; i < T; ++i)
                    if (next[size_t(lo[i])] >= T) return false;
            }
            continue;
        }
        if (causal) {
            if (pad[0] == 0) return false;
        } else if (std::none_of(pad, pad + T, [](int64_t x) { return x != 0; })) {
            return false;
        }
    }
    return true;
}

}  // namespace loom
