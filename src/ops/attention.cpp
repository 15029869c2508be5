// Scaled dot-product attention, forward and backward, one (sample, head) per task.
//
// Each task keeps its (T, T) block hot in cache: scores by a single-threaded
// GEMM, masked softmax in place, dropout into a per-thread buffer, then P @ V.
// B * NH tasks (96 for BERT-base at batch 8) spread over the cores; GEMMs called
// inside the parallel region run on the calling thread (see gemm.h).
//
// Masks (attention.h): key j is visible from query i when key_padding[b, j] != 0
// and, if causal, j <= i. A row with no visible key reproduces HF's eager
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
#include "ops/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
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

}  // namespace

template <typename T>
void attention_forward(T* out, T* att, const T* q, const T* k, const T* v, int64_t ld,
                       const AttnShape& s, const AttnMask& mask, const DropoutSpec& drop) {
    const Geometry g = geometry_of(s, ld);
    const std::vector<unsigned char> vis = visible_keys(mask, g.B, g.T);
    const T scale = attn_scale<T>(g.HS);
    const int64_t TT = g.T * g.T;
#pragma omp parallel if (parallel_heads(g))
    {
        std::vector<T> dropped(drop.active() ? size_t(TT) : 0);  // (T, T) P after dropout
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < g.B * g.NH; ++bh) {
            const int64_t b = bh / g.NH, h = bh % g.NH;
            const int64_t off = b * g.T * g.ld + h * g.HS;
            T* a = att + bh * TT;  // (T, T)
            gemm<T>(false, true, g.T, g.T, g.HS, scale, q + off, g.ld, k + off, g.ld, T(0), a, g.T);
            for (int64_t i = 0; i < g.T; ++i)
                softmax_row(a + i * g.T, vis.data() + b * g.T, mask.causal ? i + 1 : g.T, g.T);
            const T* p = a;
            if (drop.active()) {
                dropout_multipliers(dropped.data(), drop,
                                    g.drop_base(drop.sample_offset, s.head_offset, b, h), TT);
#pragma omp simd
                for (int64_t e = 0; e < TT; ++e) dropped[size_t(e)] *= a[e];
                p = dropped.data();
            }
            gemm<T>(false, false, g.T, g.HS, g.T, T(1), p, g.T, v + off, g.ld, T(0),
                    out + b * g.T * g.C + h * g.HS, g.C);
        }
    }
}

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, T* scratch, const T* dout, const T* att, const T* q,
                        const T* k, const T* v, int64_t ld, const AttnShape& s,
                        const AttnMask& mask, const DropoutSpec& drop) {
    const Geometry g = geometry_of(s, ld);
    const std::vector<unsigned char> vis = visible_keys(mask, g.B, g.T);
    const T scale = attn_scale<T>(g.HS);
    const int64_t TT = g.T * g.T;
#pragma omp parallel if (parallel_heads(g))
    {
        std::vector<T> mult(drop.active() ? size_t(TT) : 0);     // (T, T) dropout multipliers
        std::vector<T> dropped(drop.active() ? size_t(TT) : 0);  // (T, T) P after dropout
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < g.B * g.NH; ++bh) {
            const int64_t b = bh / g.NH, h = bh % g.NH;
            const int64_t off = b * g.T * g.ld + h * g.HS;
            const T* a = att + bh * TT;  // (T, T)
            const T* dy = dout + b * g.T * g.C + h * g.HS;
            T* ds = scratch + bh * TT;  // (T, T): dP, then dScores
            // dP = dout @ v^T (gradient of the dropped probabilities)
            gemm<T>(false, true, g.T, g.T, g.HS, T(1), dy, g.C, v + off, g.ld, T(0), ds, g.T);
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
            // dv = P^T @ dout
            gemm<T>(true, false, g.T, g.HS, g.T, T(1), p, g.T, dy, g.C, T(0), dv + off, g.ld);
            // Softmax backward per row: dS = P (dP - <P, dP>).
            const unsigned char* vb = vis.data() + b * g.T;
            for (int64_t i = 0; i < g.T; ++i) {
                softmax_row_backward(ds + i * g.T, a + i * g.T, vb, mask.causal ? i + 1 : g.T, g.T);
            }
            // dq = scale * dS @ k ; dk = scale * dS^T @ q
            gemm<T>(false, false, g.T, g.HS, g.T, scale, ds, g.T, k + off, g.ld, T(0), dq + off,
                    g.ld);
            gemm<T>(true, false, g.T, g.HS, g.T, scale, ds, g.T, q + off, g.ld, T(0), dk + off,
                    g.ld);
        }
    }
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

}  // namespace loom
