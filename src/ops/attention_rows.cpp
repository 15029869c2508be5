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

// What both kernels derive from their arguments, and the block of one
// (sample, head) task.
struct RowTasks {
    Geometry g;
    std::vector<unsigned char> vis;  // (B, T) visible keys
    std::vector<int64_t> first;      // first[b] .. first[b + 1]: the query rows of sample b
    float scale;
    const int64_t* rows;
    int64_t M;

    RowTasks(const AttnShape& s, int64_t ld, const AttnMask& mask, const AttnRows& r)
        : g(detail::geometry_of(s, ld)),
          vis(detail::visible_keys(mask, g.B, g.T)),
          first(size_t(g.B + 1)),
          scale(detail::attn_scale<float>(g.HS)),
          rows(r.rows),
          M(r.M) {
        LOOM_ASSERT(mask.window < 0, "attention at selected rows takes no sliding window");
        LOOM_ASSERT(mask.key_start == nullptr,
                    "attention at selected rows takes no document bounds (key_start)");
        LOOM_ASSERT(M >= 0 && (M == 0 || rows != nullptr), "attention rows: {} rows, no list", M);
        for (int64_t i = 0; i < M; ++i)
            LOOM_ASSERT(rows[i] >= 0 && rows[i] < g.B * g.T && (i == 0 || rows[i] > rows[i - 1]),
                        "attention rows: row {} = {} is not increasing inside [0, {})", i, rows[i],
                        g.B * g.T);
        for (int64_t b = 0; b <= g.B; ++b)
            first[size_t(b)] = std::lower_bound(rows, rows + M, b * g.T) - rows;
    }
    bool parallel() const {
        return g.B * g.NH > 1 && M * g.NH * g.T * g.HS > (1 << 15) && !omp_in_parallel();
    }

    struct Task {
        int64_t b, h;
        int64_t r0, m;        // query rows [r0, r0 + m) of sample b
        const int64_t* rows;  // their positions
        int64_t kv;           // the (T, HS) block of sample b, head h in q, k, v (stride ld)
        int64_t block;        // the (m, T) probabilities of the task in att and scratch
    };
    Task task(int64_t bh) const {
        Task t;
        t.b = bh / g.NH;
        t.h = bh % g.NH;
        t.r0 = first[size_t(t.b)];
        t.m = first[size_t(t.b + 1)] - t.r0;
        t.rows = rows + t.r0;
        t.kv = t.b * g.T * g.ld + t.h * g.HS;
        t.block = (t.r0 * g.NH + t.h * t.m) * g.T;
        return t;
    }
};

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
    const RowTasks rt(s, ld, mask, r);
    const Geometry& g = rt.g;
#pragma omp parallel if (rt.parallel())
    {
        std::vector<float> qg, dropped;
        // Dynamic: parts are taken as threads come free, so a thread whose core
        // another process holds delays the region less (docs/cpu-contention.md).
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < g.B * g.NH; ++bh) {
            const RowTasks::Task t = rt.task(bh);
            if (t.m == 0) continue;
            qg.resize(size_t(t.m * g.HS));
            gather_queries(qg.data(), q, g.ld, t.h, g.HS, t.rows, t.m);
            float* a = att + t.block;  // (m, T)
            gemm<float>(false, true, t.m, g.T, g.HS, rt.scale, qg.data(), g.HS, k + t.kv, g.ld,
                        0.0f, a, g.T);
            for (int64_t i = 0; i < t.m; ++i) {
                const int64_t pos = t.rows[i] - t.b * g.T;
                detail::softmax_row(a + i * g.T, rt.vis.data() + t.b * g.T,
                                    mask.causal ? pos + 1 : g.T, g.T);
            }
            const float* p = a;
            if (drop.active()) {
                dropped.resize(size_t(t.m * g.T));
                row_multipliers(dropped.data(), drop, g, t.b, t.h, s.head_offset, t.rows, t.m);
#pragma omp simd
                for (int64_t e = 0; e < t.m * g.T; ++e) dropped[size_t(e)] *= a[e];
                p = dropped.data();
            }
            gemm<float>(false, false, t.m, g.HS, g.T, 1.0f, p, g.T, v + t.kv, g.ld, 0.0f,
                        out + t.r0 * g.C + t.h * g.HS, g.C);
        }
    }
}

void attention_rows_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout,
                             const float* att, const float* q, const float* k, const float* v,
                             int64_t ld, const AttnShape& s, const AttnMask& mask,
                             const DropoutSpec& drop, const AttnRows& r) {
    const RowTasks rt(s, ld, mask, r);
    const Geometry& g = rt.g;
#pragma omp parallel if (rt.parallel())
    {
        std::vector<float> qg, dqg, mult, dropped;
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < g.B * g.NH; ++bh) {
            const RowTasks::Task t = rt.task(bh);
            const int64_t m = t.m;
            // This task owns the (T, HS) blocks of sample b, head h in dq, dk, dv.
            for (int64_t i = 0; i < g.T; ++i) std::fill_n(dq + t.kv + i * g.ld, g.HS, 0.0f);
            if (m == 0) {
                for (int64_t i = 0; i < g.T; ++i) {
                    std::fill_n(dk + t.kv + i * g.ld, g.HS, 0.0f);
                    std::fill_n(dv + t.kv + i * g.ld, g.HS, 0.0f);
                }
                continue;
            }
            const float* a = att + t.block;                    // (m, T)
            float* ds = scratch + t.block;                     // (m, T): dP, then dScores
            const float* dy = dout + t.r0 * g.C + t.h * g.HS;  // (m, HS), stride C
            gemm<float>(false, true, m, g.T, g.HS, 1.0f, dy, g.C, v + t.kv, g.ld, 0.0f, ds, g.T);
            const float* p = a;
            if (drop.active()) {
                mult.resize(size_t(m * g.T));
                dropped.resize(size_t(m * g.T));
                row_multipliers(mult.data(), drop, g, t.b, t.h, s.head_offset, t.rows, m);
#pragma omp simd
                for (int64_t e = 0; e < m * g.T; ++e) {
                    dropped[size_t(e)] = a[e] * mult[size_t(e)];
                    ds[e] *= mult[size_t(e)];
                }
                p = dropped.data();
            }
            // dv = P^T @ dout over this sample's query rows only.
            gemm<float>(true, false, g.T, g.HS, m, 1.0f, p, g.T, dy, g.C, 0.0f, dv + t.kv, g.ld);
            for (int64_t i = 0; i < m; ++i) {
                const int64_t pos = t.rows[i] - t.b * g.T;
                detail::softmax_row_backward(ds + i * g.T, a + i * g.T, rt.vis.data() + t.b * g.T,
                                             mask.causal ? pos + 1 : g.T, g.T);
            }
            qg.resize(size_t(m * g.HS));
            dqg.resize(size_t(m * g.HS));
            gather_queries(qg.data(), q, g.ld, t.h, g.HS, t.rows, m);
            gemm<float>(false, false, m, g.HS, g.T, rt.scale, ds, g.T, k + t.kv, g.ld, 0.0f,
                        dqg.data(), g.HS);
            for (int64_t i = 0; i < m; ++i)
                std::copy_n(dqg.data() + i * g.HS, g.HS, dq + t.rows[i] * g.ld + t.h * g.HS);
            gemm<float>(true, false, g.T, g.HS, m, rt.scale, ds, g.T, qg.data(), g.HS, 0.0f,
                        dk + t.kv, g.ld);
        }
    }
}

}  // namespace loom
