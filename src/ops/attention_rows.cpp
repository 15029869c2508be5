// Attention at a subset of query rows: one (sample, head) per task, as in
// attention.cpp, with the sample's query rows gathered into a small block.
#include "ops/attention_rows.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "ops/attention_common.h"
#include "ops/gemm.h"

namespace loom {
namespace {

using detail::Geometry;

// first[b] .. first[b + 1]: the query rows of sample b.
std::vector<int64_t> sample_starts(const AttnRows& r, int64_t B, int64_t T) {
    LOOM_ASSERT(r.M >= 0 && (r.M == 0 || r.rows != nullptr), "attention rows: {} rows, no list",
                r.M);
    for (int64_t i = 0; i < r.M; ++i)
        LOOM_ASSERT(r.rows[i] >= 0 && r.rows[i] < B * T && (i == 0 || r.rows[i] > r.rows[i - 1]),
                    "attention rows: row {} = {} is not increasing inside [0, {})", i, r.rows[i],
                    B * T);
    std::vector<int64_t> first(size_t(B + 1));
    for (int64_t b = 0; b <= B; ++b)
        first[size_t(b)] = std::lower_bound(r.rows, r.rows + r.M, b * T) - r.rows;
    return first;
}

bool parallel_tasks(const Geometry& g, int64_t M) {
    return g.B * g.NH > 1 && M * g.NH * g.T * g.HS > (1 << 15) && !omp_in_parallel();
}

// The query block of sample b, head h: rows [r0, r0 + m) of q, packed (m, HS).
void gather_queries(float* qg, const float* q, int64_t ld, int64_t h, int64_t HS,
                    const int64_t* rows, int64_t m) {
    for (int64_t i = 0; i < m; ++i) std::copy_n(q + rows[i] * ld + h * HS, HS, qg + i * HS);
}

// Dropout multipliers of the block's rows: element (b, h, t, j) of the stream.
void row_multipliers(float* f, const DropoutSpec& drop, const Geometry& g, int64_t b, int64_t h,
                     int64_t head_offset, const int64_t* rows, int64_t m) {
    const uint64_t base = g.drop_base(drop.sample_offset, head_offset, b, h);
    for (int64_t i = 0; i < m; ++i) {
        const int64_t t = rows[i] - b * g.T;
        dropout_multipliers(f + i * g.T, drop, base + uint64_t(t * g.T), g.T);
    }
}

}  // namespace

void attention_rows_forward(float* out, float* att, const float* q, const float* k, const float* v,
                            int64_t ld, const AttnShape& s, const AttnMask& mask,
                            const DropoutSpec& drop, const AttnRows& r) {
    const Geometry g = detail::geometry_of(s, ld);
    const std::vector<unsigned char> vis = detail::visible_keys(mask, g.B, g.T);
    const std::vector<int64_t> first = sample_starts(r, g.B, g.T);
    const float scale = detail::attn_scale<float>(g.HS);
#pragma omp parallel if (parallel_tasks(g, r.M))
    {
        std::vector<float> qg, dropped;
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < g.B * g.NH; ++bh) {
            const int64_t b = bh / g.NH, h = bh % g.NH;
            const int64_t r0 = first[size_t(b)], m = first[size_t(b + 1)] - r0;
            if (m == 0) continue;
            const int64_t* rows = r.rows + r0;
            const int64_t kv = b * g.T * g.ld + h * g.HS;
            qg.resize(size_t(m * g.HS));
            gather_queries(qg.data(), q, g.ld, h, g.HS, rows, m);
            float* a = att + (r0 * g.NH + h * m) * g.T;  // (m, T)
            gemm<float>(false, true, m, g.T, g.HS, scale, qg.data(), g.HS, k + kv, g.ld, 0.0f, a,
                        g.T);
            for (int64_t i = 0; i < m; ++i) {
                const int64_t t = rows[i] - b * g.T;
                detail::softmax_row(a + i * g.T, vis.data() + b * g.T, mask.causal ? t + 1 : g.T,
                                    g.T);
            }
            const float* p = a;
            if (drop.active()) {
                dropped.resize(size_t(m * g.T));
                row_multipliers(dropped.data(), drop, g, b, h, s.head_offset, rows, m);
#pragma omp simd
                for (int64_t e = 0; e < m * g.T; ++e) dropped[size_t(e)] *= a[e];
                p = dropped.data();
            }
            gemm<float>(false, false, m, g.HS, g.T, 1.0f, p, g.T, v + kv, g.ld, 0.0f,
                        out + r0 * g.C + h * g.HS, g.C);
        }
    }
}

void attention_rows_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout,
                             const float* att, const float* q, const float* k, const float* v,
                             int64_t ld, const AttnShape& s, const AttnMask& mask,
                             const DropoutSpec& drop, const AttnRows& r) {
    const Geometry g = detail::geometry_of(s, ld);
    const std::vector<unsigned char> vis = detail::visible_keys(mask, g.B, g.T);
    const std::vector<int64_t> first = sample_starts(r, g.B, g.T);
    const float scale = detail::attn_scale<float>(g.HS);
#pragma omp parallel if (parallel_tasks(g, r.M))
    {
        std::vector<float> qg, dqg, mult, dropped;
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < g.B * g.NH; ++bh) {
            const int64_t b = bh / g.NH, h = bh % g.NH;
            const int64_t r0 = first[size_t(b)], m = first[size_t(b + 1)] - r0;
            const int64_t kv = b * g.T * g.ld + h * g.HS;
            // This task owns the (T, HS) blocks of sample b, head h in dq, dk, dv.
            for (int64_t t = 0; t < g.T; ++t) std::fill_n(dq + kv + t * g.ld, g.HS, 0.0f);
            if (m == 0) {
                for (int64_t t = 0; t < g.T; ++t) {
                    std::fill_n(dk + kv + t * g.ld, g.HS, 0.0f);
                    std::fill_n(dv + kv + t * g.ld, g.HS, 0.0f);
                }
                continue;
            }
            const int64_t* rows = r.rows + r0;
            const float* a = att + (r0 * g.NH + h * m) * g.T;  // (m, T)
            float* ds = scratch + (r0 * g.NH + h * m) * g.T;   // (m, T): dP, then dScores
            const float* dy = dout + r0 * g.C + h * g.HS;      // (m, HS), stride C
            gemm<float>(false, true, m, g.T, g.HS, 1.0f, dy, g.C, v + kv, g.ld, 0.0f, ds, g.T);
            const float* p = a;
            if (drop.active()) {
                mult.resize(size_t(m * g.T));
                dropped.resize(size_t(m * g.T));
                row_multipliers(mult.data(), drop, g, b, h, s.head_offset, rows, m);
#pragma omp simd
                for (int64_t e = 0; e < m * g.T; ++e) {
                    dropped[size_t(e)] = a[e] * mult[size_t(e)];
                    ds[e] *= mult[size_t(e)];
                }
                p = dropped.data();
            }
            // dv = P^T @ dout over this sample's query rows only.
            gemm<float>(true, false, g.T, g.HS, m, 1.0f, p, g.T, dy, g.C, 0.0f, dv + kv, g.ld);
            for (int64_t i = 0; i < m; ++i) {
                const int64_t t = rows[i] - b * g.T;
                detail::softmax_row_backward(ds + i * g.T, a + i * g.T, vis.data() + b * g.T,
                                             mask.causal ? t + 1 : g.T, g.T);
            }
            qg.resize(size_t(m * g.HS));
            dqg.resize(size_t(m * g.HS));
            gather_queries(qg.data(), q, g.ld, h, g.HS, rows, m);
            gemm<float>(false, false, m, g.HS, g.T, scale, ds, g.T, k + kv, g.ld, 0.0f, dqg.data(),
                        g.HS);
            for (int64_t i = 0; i < m; ++i)
                std::copy_n(dqg.data() + i * g.HS, g.HS, dq + rows[i] * g.ld + h * g.HS);
            gemm<float>(true, false, g.T, g.HS, m, scale, ds, g.T, qg.data(), g.HS, 0.0f, dk + kv,
                        g.ld);
        }
    }
}

}  // namespace loom
