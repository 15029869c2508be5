// GpuEvalModel's own logic, without a GPU: behind it, a CudaModel stand-in
// that runs the CPU model at every position (what the CUDA executor
// returns). Through the adapter, labelled_positions must give the CPU model's
// own labelled logits and loss, and the other scopes and tasks pass through.
#include <gtest/gtest.h>

#include <cmath>

#include "models/model.h"
#include "models/model_config.h"
#include "train/gpu_eval_model.h"

namespace loom::test {
namespace {

class CpuStandIn final : public CudaModel {
  public:
    explicit CpuStandIn(Model& m) : m_(m) {}
    LossSum forward(const ModelInputs& in, const DropoutPlan& d) override {
        m_.set_logits_scope(LogitsScope::all_positions);
        return m_.forward(in, d);
    }
    std::map<std::string, Tensor> outputs() override {
        std::map<std::string, Tensor> out;
        for (const auto& [k, v] : m_.outputs())
            if (k.rfind("hidden_states.", 0) != 0) out[k] = v.clone();
        return out;
    }
    void backward(double) override { FAIL() << "not used"; }
    double grad_norm_sq() override { return 0; }
    void step(double, double) override {}
    void zero_grad() override {}
    int64_t step_count() const override { return 0; }
    void upload_params() override {}
    void download_params() override {}
    void download_grads() override {}
    std::map<std::string, Tensor> optimizer_state() override { return {}; }
    void load_optimizer_state(const std::map<std::string, Tensor>&, int64_t) override {}
    void set_grad_ready_hook(GradReadyHook) override {}
    // Like an executor that always computes every position: the adapter's
    // host-side gather is what this test checks.
    void set_logits_scope(LogitsScope) override {}
    void* grads_device() override { return nullptr; }
    DType grad_dtype() const override { return DType::f32; }
    int64_t flat_numel() const override { return 0; }
    void* compute_stream() override { return nullptr; }
    void synchronize() override {}
    int64_t allocated_bytes() const override { return 0; }
    int64_t peak_device_bytes() override { return 0; }
    std::string device_name() const override { return "stand-in"; }

  private:
    Model& m_;
};

ModelConfig tiny_mlm() {
    return parse_hf_config(
        R"({"architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": 50,
            "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
            "intermediate_size": 32, "max_position_embeddings": 32})",
        "tiny");
}

TEST(GpuEvalModel, LabelledLogitsAreTheCpuModelsOwn) {
    const ModelConfig c = tiny_mlm();
    auto ref = build_model(c);
    ref->init(9);
    auto behind = build_model(c);
    behind->init(9);
    CpuStandIn gpu(*behind);
    GpuEvalModel view(gpu, c);

    const int64_t B = 2, T = 8;
    std::vector<int64_t> ids(size_t(B * T)), labels(size_t(B * T), -100);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(5 + i * 7 % 40);
    labels[1] = 11;
    labels[6] = 3;
    labels[12] = 40;
    ModelInputs in;
    in.B = B;
    in.T = T;
    in.input_ids = ids.data();
    in.labels = labels.data();

    ref->set_logits_scope(LogitsScope::labelled_positions);
    const LossSum want = ref->forward(in, DropoutPlan{});
    const Tensor w = ref->outputs().at("labelled_logits");
    view.set_logits_scope(LogitsScope::labelled_positions);
    const LossSum got = view.forward(in, DropoutPlan{});
    const auto out = view.outputs();
    ASSERT_TRUE(out.count("labelled_logits"));
    EXPECT_FALSE(out.count("logits"));
    const Tensor& g = out.at("labelled_logits");
    ASSERT_EQ(g.shape, w.shape);
    ASSERT_EQ(g.shape[0], 3);
    for (int64_t i = 0; i < g.numel(); ++i)
        ASSERT_NEAR(g.data<float>()[i], w.data<float>()[i], 1e-5) << "element " << i;
    EXPECT_EQ(got.count, want.count);
    EXPECT_NEAR(got.sum, want.sum, 1e-5 * std::fabs(want.sum));

    // All positions: the executor's logits pass through unchanged.
    view.set_logits_scope(LogitsScope::all_positions);
    view.forward(in, DropoutPlan{});
    EXPECT_EQ(view.outputs().at("logits").shape, (Shape{B, T, 50}));
    EXPECT_THROW(view.backward(1.0, nullptr), Error);
}

}  // namespace
}  // namespace loom::test
