// The CUDA table's tensor-parallel entries (vocab-parallel cross-entropy and
// embedding, the row-parallel bias) against the CPU's unsharded ops: every tp
// rank's entries run on one GPU and the collectives between them (max, sum)
// are done on the host, so they are checked without NCCL.
#include <algorithm>
#include <limits>

#include "comm/tp_vocab.h"
#include "core/check.h"
#include "cuda_test_util.h"
#include "ops/embedding.h"
#include "ops/softmax_xent.h"

namespace loom::test {
namespace {

template <typename T>
class CudaTpVocab : public CudaTypedOpTest<T> {};
TYPED_TEST_SUITE(CudaTpVocab, DeviceTypes, TypeNames);

struct Case {
    int64_t N, V;
    int tp;
};
// V not a multiple of tp: the last rank holds padding columns.
constexpr Case k_cases[] = {{1, 4, 2}, {7, 13, 2}, {9, 13, 3}, {33, 1000, 2}, {5, 3001, 4}};

// Rank r's (N, Vl) slice of logits (N, V); padding columns hold a large value
// the kernels must ignore.
std::vector<float> logit_slice(const std::vector<float>& full, int64_t N, int64_t V,
                               const TpVocabRange& r) {
    std::vector<float> s(size_t(N * r.count), 50.0f);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < r.count && r.first + j < V; ++j)
            s[size_t(n * r.count + j)] = full[size_t(n * V + r.first + j)];
    return s;
}

TYPED_TEST(CudaTpVocab, CrossEntropyPiecesMatchCpu) {
    using T = TypeParam;
    for (const Case& c : k_cases) {
        const std::string tag = "N=" + std::to_string(c.N) + " V=" + std::to_string(c.V) +
                                " tp=" + std::to_string(c.tp);
        const auto logits = round_all<T>(random_vec(size_t(c.N * c.V), 5, -6.0f, 6.0f));
        auto targets = random_ids(size_t(c.N), c.V, 6);
        for (size_t i = 0; i < targets.size(); i += 3) targets[i] = k_ignore_index;
        const XentSum want =
            softmax_xent_forward<float>(nullptr, logits.data(), targets.data(), c.N, c.V);
        const double scale = want.count ? 1.0 / double(want.count) : 0.0;
        std::vector<float> dwant(size_t(c.N * c.V));
        softmax_xent_backward<float>(dwant.data(), logits.data(), targets.data(), c.N, c.V, scale);

        auto dt = upload_raw<int64_t>(targets);
        const OpCtx op = this->template gpu<T>();
        std::vector<std::unique_ptr<DeviceBuffer<T>>> slices;
        std::vector<TpVocabRange> ranges;
        // 1. Local maxima, all_reduce(max) on the host.
        std::vector<float> row_max(size_t(c.N), -std::numeric_limits<float>::infinity());
        for (int r = 0; r < c.tp; ++r) {
            ranges.push_back(tp_vocab_range(c.V, c.tp, r));
            const TpVocabRange& g = ranges.back();
            slices.push_back(upload<T>(logit_slice(logits, c.N, c.V, g)));
            DeviceBuffer<float> m(size_t(c.N));
            const int64_t valid = std::clamp<int64_t>(c.V - g.first, 0, g.count);
            op.nn().vocab_xent_max(op, m.get(), slices.back()->get(), c.N, g.count, valid);
            const auto mr = download(m);
            for (int64_t n = 0; n < c.N; ++n)
                row_max[size_t(n)] = std::max(row_max[size_t(n)], mr[size_t(n)]);
        }
        auto dmax = upload<float>(row_max);
        // 2. Local exp sums and target logits, all_reduce(sum) on the host.
        std::vector<float> stats(size_t(2 * c.N), 0.0f);
        for (int r = 0; r < c.tp; ++r) {
            const TpVocabRange& g = ranges[size_t(r)];
            const int64_t valid = std::clamp<int64_t>(c.V - g.first, 0, g.count);
            DeviceBuffer<float> st(size_t(2 * c.N));
            op.nn().vocab_xent_stats(op, st.get(), slices[size_t(r)]->get(), dt->get(), dmax->get(),
                                     c.N, g.count, valid, g.first, c.V);
            const auto sr = download(st);
            for (size_t i = 0; i < stats.size(); ++i) stats[i] += sr[i];
        }
        auto dstats = upload<float>(stats);
        // 3. The loss sum, the same on every rank.
        const XentSum got =
            op.nn().vocab_xent_loss(op, dmax->get(), dstats->get(), dt->get(), c.N, c.V);
        EXPECT_EQ(got.count, want.count) << tag;
        EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-4 * (1.0 + std::fabs(want.loss_sum))) << tag;
        // 4. Backward per rank (in place) against the CPU's columns.
        for (int r = 0; r < c.tp; ++r) {
            const TpVocabRange& g = ranges[size_t(r)];
            const int64_t valid = std::clamp<int64_t>(c.V - g.first, 0, g.count);
            T* x = slices[size_t(r)]->get();
            op.nn().vocab_xent_backward(op, x, x, dt->get(), dmax->get(), dstats->get(), c.N,
                                        g.count, valid, g.first, c.V, scale);
            std::vector<float> want_slice(size_t(c.N * g.count), 0.0f);  // padding: 0
            for (int64_t n = 0; n < c.N; ++n)
                for (int64_t j = 0; j < valid; ++j)
                    want_slice[size_t(n * g.count + j)] = dwant[size_t(n * c.V + g.first + j)];
            EXPECT_TRUE(all_close(tag + " dlogits rank " + std::to_string(r),
                                  download(*slices[size_t(r)]), want_slice,
                                  tol_for<T>(1e-7, 1e-4)));
        }
    }
}

TYPED_TEST(CudaTpVocab, EmbeddingSliceMatchesCpu) {
    using T = TypeParam;
    for (const Case& c : k_cases) {
        const int64_t C = 5, N = c.N + 6, pad = c.V / 2;
        const std::string tag = "V=" + std::to_string(c.V) + " tp=" + std::to_string(c.tp);
        const auto table = round_all<T>(random_vec(size_t(c.V * C), 7));
        const auto dout = round_all<T>(random_vec(size_t(N * C), 8));
        auto ids = random_ids(size_t(N), c.V, 9);
        ids[0] = ids[3] = pad;  // padding gets no gradient
        ids[1] = ids[4];        // a repeated id sums in row order
        std::vector<float> out_want(size_t(N * C)), dtable_want(size_t(c.V * C), 0.0f);
        embedding_forward(out_want.data(), ids.data(), table.data(), N, c.V, C);
        embedding_backward(dtable_want.data(), ids.data(), dout.data(), N, c.V, C, pad);

        auto did = upload_raw<int64_t>(ids);
        auto ddout = upload<T>(dout);
        const OpCtx op = this->template gpu<T>();
        std::vector<float> out_sum(size_t(N * C), 0.0f);
        for (int r = 0; r < c.tp; ++r) {
            const TpVocabRange g = tp_vocab_range(c.V, c.tp, r);
            std::vector<float> local(size_t(g.count * C), 0.0f);
            tp_vocab_shard_for_rank<float>(local.data(), table.data(), c.V, C, c.tp, r);
            auto dlocal = upload<T>(local);
            DeviceBuffer<T> out(size_t(N * C));
            op.nn().vocab_embedding_forward(op, out.get(), did->get(), dlocal->get(), N, c.V, C,
                                            g.first, g.count);
            const auto o = download(out);
            for (size_t i = 0; i < o.size(); ++i) out_sum[i] += o[i];  // Megatron "g"
            // Backward: the rank's rows of the whole table's gradient.
            DeviceBuffer<int64_t> lid(static_cast<size_t>(N));
            DeviceBuffer<T> dlocal_grad(size_t(g.count * C));
            op.nn().vocab_embedding_backward(op, dlocal_grad.get(), did->get(), ddout->get(), N,
                                             c.V, C, g.first, g.count, pad, lid.get());
            this->ctx().check_device_errors();
            std::vector<float> want(size_t(g.count * C), 0.0f);
            for (int64_t v = g.first; v < std::min(c.V, g.first + g.count); ++v)
                for (int64_t k = 0; k < C; ++k)
                    want[size_t((v - g.first) * C + k)] = dtable_want[size_t(v * C + k)];
            EXPECT_TRUE(all_close(tag + " dtable rank " + std::to_string(r), download(dlocal_grad),
                                  want, tol_for<T>(1e-6, 1e-5)));
        }
        EXPECT_TRUE(all_close(tag + " lookup", out_sum, out_want, tol_for<T>(0.0, 0.0)));
    }
}

TYPED_TEST(CudaTpVocab, RowParallelBiasAddsOncePerRow) {
    using T = TypeParam;
    const int64_t N = 7, OC = 300;
    const auto y = round_all<T>(random_vec(size_t(N * OC), 10));
    const auto b = round_all<T>(random_vec(size_t(OC), 11));
    std::vector<float> want(y);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < OC; ++o) want[size_t(n * OC + o)] += b[size_t(o)];
    auto dy = upload<T>(y);
    auto db = upload<T>(b);
    const OpCtx op = this->template gpu<T>();
    op.nn().add_bias(op, dy->get(), db->get(), N, OC);
    EXPECT_TRUE(all_close("y + bias", download(*dy), want, tol_for<T>(1e-6, 1e-6)));
}

class CudaTpVocabErrors : public CudaOpTest {};

TEST_F(CudaTpVocabErrors, BadTargetIsReportedAndNotCounted) {
    const int64_t N = 3, V = 4;
    auto logits = upload<float>(random_vec(size_t(N * 2), 1));
    auto targets = upload_raw<int64_t>({1, 9, k_ignore_index});
    DeviceBuffer<float> m(static_cast<size_t>(N)), st(static_cast<size_t>(2 * N));
    const OpCtx g = gpu<float>();
    g.nn().vocab_xent_max(g, m.get(), logits->get(), N, 2, 2);
    g.nn().vocab_xent_stats(g, st.get(), logits->get(), targets->get(), m.get(), N, 2, 2, 0, V);
    try {
        g.nn().vocab_xent_loss(g, m.get(), st.get(), targets->get(), N, V);
        FAIL() << "target 9 with V = 4 was accepted";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("9"), std::string::npos) << msg;
    }
    // Reported once (the stats entry met it); the loss leaves the row out.
    EXPECT_EQ(g.nn().vocab_xent_loss(g, m.get(), st.get(), targets->get(), N, V).count, 1);
}

}  // namespace
}  // namespace loom::test
