// The fp32 kernels against PyTorch 1.13's own results (forward and backward),
// from tests/data/ops/ops_reference.safetensors (made by make_ops_reference.py:
// F.linear, F.layer_norm, HF's gelu/gelu_new, F.cross_entropy, F.embedding with
// padding_idx, HF eager attention with padding and causal masks, torch AdamW).
#include "io/safetensors.h"
#include "ops/activation.h"
#include "ops/adamw.h"
#include "ops/attention.h"
#include "ops/embedding.h"
#include "ops/layer_norm.h"
#include "ops/matmul.h"
#include "ops/softmax_xent.h"
#include "ops_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// Against PyTorch fp32: both sides round differently, so a few ulp of the
// largest terms of each reduction (tolerances in one place, as tol:: does).
constexpr Tol k_torch_fwd{2e-6, 1e-5};
constexpr Tol k_torch_bwd{1e-5, 1e-5};

class OpsReference : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        file_ = new SafetensorsFile(
            SafetensorsFile::open(std::string(LOOM_TEST_DATA_DIR) + "/ops/ops_reference.safetensors"));
    }
    static void TearDownTestSuite() {
        delete file_;
        file_ = nullptr;
    }
    static std::vector<float> f32(const std::string& name) {
        const Tensor t = file_->get(name);
        const float* p = t.data<float>();
        return std::vector<float>(p, p + t.numel());
    }
    static std::vector<int64_t> i64(const std::string& name) {
        const Tensor t = file_->get(name);
        const int64_t* p = t.data<int64_t>();
        return std::vector<int64_t>(p, p + t.numel());
    }
    static int64_t dim(const std::string& name, int i) { return file_->shape(name)[i]; }
    static SafetensorsFile* file_;
};
SafetensorsFile* OpsReference::file_ = nullptr;

}  // namespace

TEST_F(OpsReference, Linear) {
    const int64_t N = dim("linear.x", 0), C = dim("linear.x", 1), OC = dim("linear.w", 0);
    const auto x = f32("linear.x"), w = f32("linear.w"), b = f32("linear.b"), dout = f32("linear.dout");
    std::vector<float> out(size_t(N * OC)), dx(size_t(N * C)), dw(size_t(OC * C), 0.0f),
        db(size_t(OC), 0.0f);
    matmul_forward<float>(out.data(), x.data(), w.data(), b.data(), N, C, OC, WeightLayout::out_in);
    matmul_backward<float>(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), N, C,
                           OC, WeightLayout::out_in);
    EXPECT_TRUE(all_close("out", out, f32("linear.out"), k_torch_fwd));
    EXPECT_TRUE(all_close("dx", dx, f32("linear.dx"), k_torch_bwd));
    EXPECT_TRUE(all_close("dw", dw, f32("linear.dw"), k_torch_bwd));
    EXPECT_TRUE(all_close("db", db, f32("linear.db"), k_torch_bwd));
}

TEST_F(OpsReference, LayerNorm) {
    const int64_t N = dim("layer_norm.x", 0), C = dim("layer_norm.x", 1);
    const auto x = f32("layer_norm.x"), w = f32("layer_norm.w"), b = f32("layer_norm.b"),
               dout = f32("layer_norm.dout");
    std::vector<float> out(x.size()), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N)),
        dx(x.size()), dw(static_cast<size_t>(C), 0.0f), db(static_cast<size_t>(C), 0.0f);
    layer_norm_forward<float>(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                              N, C, 1e-12);
    layer_norm_backward<float>(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                               mean.data(), rstd.data(), N, C);
    EXPECT_TRUE(all_close("out", out, f32("layer_norm.out"), k_torch_fwd));
    EXPECT_TRUE(all_close("dx", dx, f32("layer_norm.dx"), k_torch_bwd));
    EXPECT_TRUE(all_close("dw", dw, f32("layer_norm.dw"), k_torch_bwd));
    EXPECT_TRUE(all_close("db", db, f32("layer_norm.db"), k_torch_bwd));
}

TEST_F(OpsReference, Activations) {
    const auto x = f32("act.x"), dout = f32("act.dout");
    const int64_t n = int64_t(x.size());
    for (const char* name : {"gelu", "gelu_new", "relu", "tanh"}) {
        const Activation a = *activation_from_hf(name);
        std::vector<float> out(x.size()), dx(x.size());
        activation_forward<float>(out.data(), x.data(), n, a);
        activation_backward<float>(dx.data(), x.data(), dout.data(), n, a);
        // Absolute slack: torch's 1 + tanh / 1 + erf cancel for very negative x
        // (values ~1e-7), and HF's gelu_new gradient is exactly 0 once tanh(u)
        // rounds to -1 (x < -5), where the true one is still ~1e-6 (ours).
        EXPECT_TRUE(all_close(std::string(name) + " out", out, f32(std::string("act.") + name + ".out"),
                              Tol{1e-6, 1e-5}));
        EXPECT_TRUE(all_close(std::string(name) + " dx", dx, f32(std::string("act.") + name + ".dx"),
                              Tol{5e-6, 1e-5}));
    }
}

TEST_F(OpsReference, SoftmaxXent) {
    const int64_t N = dim("xent.logits", 0), V = dim("xent.logits", 1);
    const auto logits = f32("xent.logits");
    const auto targets = i64("xent.targets");
    const XentSum s = softmax_xent_forward<float>(nullptr, logits.data(), targets.data(), N, V);
    EXPECT_NEAR(s.loss_sum, f32("xent.loss_sum")[0], 1e-6 * std::fabs(s.loss_sum));
    std::vector<float> d(logits.size());
    softmax_xent_backward<float>(d.data(), logits.data(), targets.data(), N, V,
                                 1.0 / double(s.count));
    EXPECT_TRUE(all_close("dlogits", d, f32("xent.dlogits_mean"), Tol{1e-8, 1e-5}));
}

TEST_F(OpsReference, EmbeddingWithPaddingIdx) {
    const int64_t V = dim("embedding.table", 0), C = dim("embedding.table", 1);
    const auto table = f32("embedding.table"), dout = f32("embedding.dout");
    const auto ids = i64("embedding.ids");
    const int64_t N = int64_t(ids.size());
    std::vector<float> out(size_t(N * C)), dt(table.size(), 0.0f);
    embedding_forward<float>(out.data(), ids.data(), table.data(), N, V, C);
    embedding_backward<float>(dt.data(), ids.data(), dout.data(), N, V, C, 0);
    EXPECT_TRUE(all_close("out", out, f32("embedding.out"), Tol{0, 0}));
    EXPECT_TRUE(all_close("dtable", dt, f32("embedding.dtable"), k_torch_bwd));
}

TEST_F(OpsReference, AttentionBertAndGpt2Masks) {
    for (const std::string tag : {"attn.", "attn_causal."}) {
        const int64_t B = dim(tag + "q", 0), T = dim(tag + "q", 1), C = dim(tag + "q", 2);
        const int64_t NH = dim(tag + "att", 1), HS = C / NH;
        const auto q = f32(tag + "q"), k = f32(tag + "k"), v = f32(tag + "v"), dout = f32(tag + "dout");
        const auto mask_ids = i64(tag + "mask");
        const AttnShape s{B, T, NH, HS};
        const AttnMask mask{mask_ids.data(), tag == "attn_causal."};
        std::vector<float> out(q.size()), att(size_t(B * NH * T * T)), dq(q.size()), dk(q.size()),
            dv(q.size()), scratch(att.size());
        attention_forward<float>(out.data(), att.data(), q.data(), k.data(), v.data(), C, s, mask,
                                 DropoutSpec{});
        attention_backward<float>(dq.data(), dk.data(), dv.data(), scratch.data(), dout.data(),
                                  att.data(), q.data(), k.data(), v.data(), C, s, mask,
                                  DropoutSpec{});
        EXPECT_TRUE(all_close(tag + "att", att, f32(tag + "att"), k_torch_fwd));
        EXPECT_TRUE(all_close(tag + "out", out, f32(tag + "out"), k_torch_fwd));
        EXPECT_TRUE(all_close(tag + "dq", dq, f32(tag + "dq"), k_torch_bwd));
        EXPECT_TRUE(all_close(tag + "dk", dk, f32(tag + "dk"), k_torch_bwd));
        EXPECT_TRUE(all_close(tag + "dv", dv, f32(tag + "dv"), k_torch_bwd));
    }
}

TEST_F(OpsReference, AdamWBitForBitOverThreeSteps) {
    auto p = f32("adamw.p0");
    const int64_t n = int64_t(p.size());
    std::vector<float> m(p.size(), 0.0f), v(p.size(), 0.0f);
    AdamWParams hp;
    hp.lr = 3e-4;
    hp.beta1 = 0.9;
    hp.beta2 = 0.98;
    hp.eps = 1e-6;
    hp.weight_decay = 0.05;
    for (int t = 1; t <= 3; ++t) {
        const std::string s = std::to_string(t);
        const auto g = f32("adamw.g" + s);
        adamw_update(p.data(), g.data(), m.data(), v.data(), n, hp, t);
        EXPECT_TRUE(all_close("param at step " + s, p, f32("adamw.p" + s), Tol{0, 0}));
        EXPECT_TRUE(all_close("exp_avg at step " + s, m, f32("adamw.m" + s), Tol{0, 0}));
        EXPECT_TRUE(all_close("exp_avg_sq at step " + s, v, f32("adamw.v" + s), Tol{0, 0}));
    }
}
