// LogitsScope::labelled_positions: the masked-LM head run on labelled rows only
// gives the same loss, the same gradients, and the same logits at those rows
// as the full HF-style computation.
#include <gtest/gtest.h>

#include "hf_fixture.h"

namespace loom::test {
namespace {

class LogitsScopeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LogitsScopeTest, LabelledRowsOnlyMatchFullHead) {
    const Fixture f(GetParam());
    auto full = f.load_model();
    auto sparse = f.load_model();
    sparse->set_logits_scope(LogitsScope::labelled_positions);
    full->zero_grad();
    sparse->zero_grad();
    const LossSum lf = full->forward(f.inputs(), DropoutPlan{});
    const LossSum ls = sparse->forward(f.inputs(), DropoutPlan{});
    EXPECT_EQ(lf.count, ls.count);
    EXPECT_NEAR(lf.sum, ls.sum, 1e-5 * lf.sum);
    // Against HF too.
    EXPECT_NEAR(ls.mean(), f.expected.at("loss").data<float>()[0], 1e-5);

    const auto of = full->outputs();
    const auto os = sparse->outputs();
    ASSERT_TRUE(os.count("labelled_logits"));
    EXPECT_FALSE(os.count("logits"));
    const Tensor& logits = of.at("logits");  // (B, T, V)
    const Tensor& picked = os.at("labelled_logits");
    const int64_t V = logits.shape[2];
    ASSERT_EQ(picked.shape, (Shape{lf.count, V}));
    const Tensor& labels = f.batch.require("labels");
    int64_t m = 0;
    for (int64_t i = 0; i < labels.numel(); ++i) {
        if (labels.data<int64_t>()[i] == -100) continue;
        EXPECT_TRUE(close("labelled row " + std::to_string(m), picked.data<float>() + m * V,
                          logits.data<float>() + i * V, V, Tol{1e-5, 1e-5}));
        ++m;
    }
    EXPECT_EQ(m, lf.count);

    full->backward(1.0 / double(lf.count));
    sparse->backward(1.0 / double(ls.count));
    const ParamTable& t = full->params();
    for (int i = 0; i < t.size(); ++i)
        EXPECT_TRUE(close("grad." + t.row(i).name, sparse->params().grad(i), t.grad(i),
                          t.row(i).numel(), Tol{1e-6, 1e-4}));
}

INSTANTIATE_TEST_SUITE_P(MaskedLm, LogitsScopeTest,
                         ::testing::Values("bert-mlm", "albert-mlm", "distilbert-mlm"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                             std::string s = p.param;
                             for (char& c : s)
                                 if (c == '-') c = '_';
                             return s;
                         });

}  // namespace
}  // namespace loom::test
