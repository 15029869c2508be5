// HostDevice: a stand-in GPU executor over one whole CPU model (its
// "device" is the model's host buffers) whose update is FlatOptimizer with
// AdamW's defaults and the gradient scale DeviceStep hands it, as the CUDA
// executor's is. It counts steps and gradient zeroings, and runs no
// pipeline stage (the stage calls forward to the whole model).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "host_stand_in.h"
#include "models/model.h"
#include "models/model_config.h"
#include "optim/adamw.h"
#include "optim/flat_optimizer.h"
#include "parallel/step_engine.h"

namespace loom::test {

class HostDevice final : public HostStandIn {
  public:
    explicit HostDevice(Model& m) : HostStandIn(m), opt_(m.params(), adamw_config(AdamWParams{})) {}
    LossSum forward(const ModelInputs& in, const DropoutPlan& d) override {
        return m_.forward(in, d);
    }
    void backward(double s) override { m_.backward(s); }
    double grad_norm_sq() override {
        const ParamTable& t = m_.params();
        double sq = 0;
        for (int64_t i = 0; i < t.flat_numel(); ++i)
            sq += double(t.grads_data()[i]) * double(t.grads_data()[i]);
        return sq;
    }
    void step(double lr, double grad_scale) override {
        ++steps;
        opt_.step(lr, float(grad_scale));
        m_.zero_grad();
    }
    void zero_grad() override {
        ++zeroed;
        m_.zero_grad();
    }
    void set_logits_scope(LogitsScope s) override { scope = s; }

    LossSum forward_stage(const ModelInputs& in, const DropoutPlan& d, const void*) override {
        return forward(in, d);
    }
    void backward_stage(double s, const void*) override { backward(s); }
    const void* stage_output() const override { return nullptr; }
    const void* stage_input_grad() const override { return nullptr; }
    void* message_buffer(int64_t, int64_t) override { return nullptr; }
    void pack_grads(const std::vector<int>&, void*) override {}
    void unpack_grads(const std::vector<int>&, const void*) override {}
    void attach_group(Communicator&) override {}
    int64_t step_count() const override { return opt_.step_count(); }
    std::map<std::string, Tensor> optimizer_state() override { return opt_.state_tensors(); }
    void load_optimizer_state(const std::map<std::string, Tensor>&, int64_t) override {}

    int steps = 0, zeroed = 0;
    LogitsScope scope = LogitsScope::all_positions;

  private:
    FlatOptimizer opt_;
};

// The tiny GPT-2 the engine and device tests train: vocabulary 40, width
// 16, two heads, dropout 0.1 on every site.
inline ModelConfig tiny_gpt2(int n_layer = 4) {
    return parse_hf_config(
        R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 40,
            "n_embd": 16, "n_head": 2, "n_inner": 32, "n_layer": )" +
            std::to_string(n_layer) +
            R"(, "n_positions": 16, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1})",
        "tiny-gpt2");
}

// Micro-batch k for the tiny GPT-2 the engine tests train (vocabulary 40):
// deterministic in k, every position labelled; no dropout unless the caller
// keys it.
struct CausalLmBatch {
    int64_t B = 2, T = 6;
    std::vector<int64_t> ids, mask, labels;
    explicit CausalLmBatch(int k) {
        for (int64_t i = 0; i < B * T; ++i) {
            ids.push_back((i * 7 + k * 5 + 3) % 40);
            mask.push_back(1);
            labels.push_back(ids.back());
        }
    }
    MicroBatch micro() const {
        MicroBatch m;
        m.inputs.B = B;
        m.inputs.T = T;
        m.inputs.input_ids = ids.data();
        m.inputs.attention_mask = mask.data();
        m.inputs.labels = labels.data();
        m.label_count = B * (T - 1);  // causal: the last position has no target
        return m;
    }
};

}  // namespace loom::test
