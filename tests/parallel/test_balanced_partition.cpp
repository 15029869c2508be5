// The default pipeline partition: the even split when stages cost the same,
// and the busiest stage's cost minimised when the first or last stage carries
// extra work (GPT-2's LM head is several layers of compute).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "models/model_config.h"
#include "models/stage_extras.h"
#include "parallel/pipeline_parallel.h"

namespace loom::test {
namespace {

double busiest(const std::vector<int64_t>& sizes, const StageExtras& x) {
    double worst = 0;
    for (size_t s = 0; s < sizes.size(); ++s) {
        double c = double(sizes[s]);
        if (s == 0) c += x.first;
        if (s + 1 == sizes.size()) c += x.last;
        worst = std::max(worst, c);
    }
    return worst;
}

// Every split into n_stages parts of at least one (small cases only).
void all_splits(int64_t n, int stages, std::vector<int64_t>& cur,
                std::vector<std::vector<int64_t>>& out) {
    if (int(cur.size()) == stages - 1) {
        if (n >= 1) {
            cur.push_back(n);
            out.push_back(cur);
            cur.pop_back();
        }
        return;
    }
    for (int64_t k = 1; k <= n - (stages - int(cur.size()) - 1); ++k) {
        cur.push_back(k);
        all_splits(n - k, stages, cur, out);
        cur.pop_back();
    }
}

TEST(BalancedPartition, NoExtrasIsTheEvenSplitEarlierStagesFirst) {
    EXPECT_EQ(balanced_partition(10, 4, {}), (std::vector<int64_t>{3, 3, 2, 2}));
    EXPECT_EQ(balanced_partition(12, 4, {}), (std::vector<int64_t>{3, 3, 3, 3}));
    EXPECT_EQ(balanced_partition(5, 5, {}), (std::vector<int64_t>{1, 1, 1, 1, 1}));
    EXPECT_EQ(balanced_partition(7, 1, {}), (std::vector<int64_t>{7}));
    for (int64_t n = 1; n <= 40; ++n)
        for (int S = 1; S <= std::min<int64_t>(n, 9); ++S) {
            const auto p = balanced_partition(n, S, {});
            for (int s = 0; s < S; ++s)
                EXPECT_EQ(p[size_t(s)], n / S + (s < n % S ? 1 : 0)) << n << " / " << S;
        }
}

TEST(BalancedPartition, MinimisesTheBusiestStage) {
    for (const StageExtras x : {StageExtras{0, 4.5}, StageExtras{0.3, 0.4}, StageExtras{2, 0},
                                StageExtras{1.5, 3.2}, StageExtras{0, 30}}) {
        for (int64_t n = 1; n <= 14; ++n)
            for (int S = 1; S <= std::min<int64_t>(n, 5); ++S) {
                const auto p = balanced_partition(n, S, x);
                ASSERT_EQ(int(p.size()), S);
                EXPECT_EQ(std::accumulate(p.begin(), p.end(), int64_t(0)), n);
                EXPECT_GE(*std::min_element(p.begin(), p.end()), 1);
                std::vector<std::vector<int64_t>> splits;
                std::vector<int64_t> cur;
                all_splits(n, S, cur, splits);
                double best = 1e30;
                for (const auto& q : splits) best = std::min(best, busiest(q, x));
                EXPECT_NEAR(busiest(p, x), best, 1e-9)
                    << "n " << n << " S " << S << " extras " << x.first << "/" << x.last;
            }
    }
    // GPT-2 small's LM head at 1024 tokens: 12 layers over 4 stages.
    EXPECT_EQ(balanced_partition(12, 4, StageExtras{0, 4.46}), (std::vector<int64_t>{4, 4, 3, 1}));
}

TEST(BalancedPartition, HeadCostsFromTheModel) {
    const ModelConfig gpt2 = parse_hf_config(
        R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 50257,
            "n_embd": 768, "n_layer": 12, "n_head": 12})",
        "gpt2");
    const StageExtras g = pipeline_stage_extras(gpt2, 1024, 0.15);
    // 2 C V / (24 C^2 + 4 T C) = 77.2M / 17.3M
    EXPECT_NEAR(g.last, 2.0 * 768 * 50257 / (24.0 * 768 * 768 + 4.0 * 1024 * 768), 1e-9);
    EXPECT_EQ(g.first, 0);
    const ModelConfig bert = parse_hf_config(
        R"({"architectures": ["BertForSequenceClassification"], "model_type": "bert",
            "vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
            "num_attention_heads": 12, "intermediate_size": 3072})",
        "bert");
    EXPECT_EQ(pipeline_stage_extras(bert, 128, 0.15).last, 0);
}

}  // namespace
}  // namespace loom::test
