// The models' grad-ready hook, which GradSync trusts to launch reductions
// early: on every HF fixture, the ranges reported during backward are
// disjoint, cover the whole flat buffer, arrive block by block (more than one
// report), and are really final: the gradients in a range when it is reported
// equal the gradients when backward returns, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "models/hf_fixture.h"

namespace loom::test {
namespace {

struct Report {
    int64_t begin, end;
    std::vector<float> grads;  // (end - begin) at report time
};

class GradReadyHook : public ::testing::TestWithParam<std::string> {};

// The fixture's model with its weights and dropout on everywhere.
std::unique_ptr<Model> dropout_model(const Fixture& fx) {
    ModelConfig c = fx.config;
    c.hidden_dropout = c.attention_dropout = c.embedding_dropout = 0.1;
    auto model = build_model(c);
    model->load(SafetensorsFile::open(fx.dir + "/model.safetensors"));
    return model;
}

// Records every report with the gradients of its range at report time.
void record_reports(Model& model, std::vector<Report>& reports) {
    const ParamTable& t = model.params();
    model.set_grad_ready_hook([&reports, &t](int64_t b, int64_t e) {
        reports.push_back({b, e, std::vector<float>(t.grads_data() + b, t.grads_data() + e)});
    });
}

// The reports tile [0, flat) without gap or overlap, and no reported
// gradient changed after its report.
void expect_complete_and_final(const std::vector<Report>& reports, const ParamTable& t,
                               const std::string& where) {
    std::vector<Report> sorted = reports;
    std::sort(sorted.begin(), sorted.end(),
              [](const Report& a, const Report& b) { return a.begin < b.begin; });
    int64_t at = 0;
    for (const Report& r : sorted) {
        EXPECT_EQ(r.begin, at) << where << ": gap or overlap before [" << r.begin << ", " << r.end
                               << ")";
        EXPECT_LT(r.begin, r.end) << where;
        at = r.end;
        const float* now = t.grads_data() + r.begin;
        int64_t changed = 0;
        for (int64_t i = 0; i < r.end - r.begin; ++i)
            changed += std::memcmp(&now[i], &r.grads[size_t(i)], sizeof(float)) != 0;
        EXPECT_EQ(changed, 0) << where << ": [" << r.begin << ", " << r.end
                              << ") reported final, but " << changed
                              << " gradients changed afterwards";
    }
    EXPECT_EQ(at, t.flat_numel()) << where << ": reports do not reach the end of the buffer";
}

TEST_P(GradReadyHook, RangesAreDisjointCompleteAndFinal) {
    Fixture fx(GetParam());
    auto model = dropout_model(fx);
    const ParamTable& t = model->params();
    std::vector<Report> reports;
    record_reports(*model, reports);
    DropoutPlan drop;
    drop.training = true;
    drop.seed = 3;
    for (int pass = 0; pass < 2; ++pass) {  // the second backward accumulates
        reports.clear();
        const LossSum l = model->forward(fx.inputs(), drop);
        ASSERT_GT(l.count, 0);
        model->backward(1.0 / double(l.count));

        expect_complete_and_final(reports, t, "pass " + std::to_string(pass));
        // Distinct transformer blocks report one by one, then the embeddings.
        EXPECT_GE(reports.size(), 2u) << "only one report: nothing could overlap backward";
        EXPECT_EQ(reports.back().begin, 0) << "the embeddings are the last to be final";
    }
    model->set_grad_ready_hook({});
    reports.clear();
    model->forward(fx.inputs(), drop);
    model->backward(1.0);
    EXPECT_TRUE(reports.empty()) << "a removed hook was still called";
}

// Sparse embedding rows: the word table's range is reported first (before
// any block), every range stays final, and the kept rows added back in token
// order give the dense gradients bit for bit (the dense scatter adds them in
// the same order, after the head's part).
TEST_P(GradReadyHook, SparseEmbeddingRowsReportTheTableFirstAndAddBackExactly) {
    Fixture fx(GetParam());
    auto model = dropout_model(fx);
    const ParamTable& t = model->params();
    DropoutPlan drop;
    drop.training = true;
    drop.seed = 5;

    model->zero_grad();
    LossSum l = model->forward(fx.inputs(), drop);
    model->backward(1.0 / double(l.count));
    const std::vector<float> dense(t.grads_data(), t.grads_data() + t.flat_numel());

    std::vector<Report> reports;
    record_reports(*model, reports);
    ASSERT_TRUE(model->set_sparse_embedding_grad(true)) << "a whole model keeps sparse rows";
    const EmbeddingGradRows before = model->embedding_grad_rows();
    const int64_t wb = before.offset, we = wb + before.table_rows * before.width;
    EXPECT_GT(we, wb);
    model->zero_grad();
    l = model->forward(fx.inputs(), drop);
    model->backward(1.0 / double(l.count));
    const EmbeddingGradRows rows = model->embedding_grad_rows();
    ASSERT_FALSE(reports.empty());
    EXPECT_EQ(reports.front().begin, wb) << "the word table is reported before the blocks";
    EXPECT_EQ(reports.front().end, we);
    expect_complete_and_final(reports, t, "sparse rows");

    // One row per token of the batch.
    ASSERT_EQ(rows.count, fx.inputs().B * fx.inputs().T);
    EXPECT_EQ(rows.offset, wb);
    std::vector<float> g(t.grads_data(), t.grads_data() + t.flat_numel());
    for (int64_t k = 0; k < rows.count; ++k) {
        if (rows.ids[k] == rows.padding_idx) continue;
        float* dst = g.data() + rows.offset + rows.ids[k] * rows.width;
        for (int64_t j = 0; j < rows.width; ++j) dst[j] += rows.rows[k * rows.width + j];
    }
    int64_t differ = 0;
    for (size_t i = 0; i < g.size(); ++i)
        differ += std::memcmp(&g[i], &dense[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0) << "gradients that differ from the dense backward's";

    // Off again: the dense backward, nothing kept.
    model->set_grad_ready_hook({});
    EXPECT_FALSE(model->set_sparse_embedding_grad(false));
    model->zero_grad();
    l = model->forward(fx.inputs(), drop);
    model->backward(1.0 / double(l.count));
    EXPECT_TRUE(model->embedding_grad_rows().empty());
    EXPECT_EQ(std::memcmp(dense.data(), t.grads_data(), dense.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GradReadyHook, ::testing::ValuesIn(hf_fixture_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                             std::string s = p.param;
                             for (char& ch : s)
                                 if (ch == '-') ch = '_';
                             return s;
                         });

}  // namespace
}  // namespace loom::test
