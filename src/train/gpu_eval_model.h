// GpuEvalModel: a CudaModel seen through the Model interface for evaluation
// and prediction (train/evaluate.h drives a Model), so a run training on the
// GPU evaluates there too instead of copying the weights back to a CPU model.
//
// Forward and outputs only. LogitsScope::labelled_positions goes to the
// executor, which runs the masked-LM head on the labelled rows; an executor
// that returns every position's logits instead has the labelled rows
// gathered here from the host copy, so the evaluation code sees exactly what
// the CPU model would give it either way.
#pragma once

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/check.h"
#include "models/cuda/cuda_model.h"
#include "models/model.h"

namespace loom {

class GpuEvalModel final : public Model {
  public:
    // A whole model: the trainer uses this view only without pipeline or tp.
    GpuEvalModel(CudaModel& gpu, const ModelConfig& config)
        : Model(config, ModelPlacement{}), gpu_(gpu) {}

    LossSum forward(const ModelInputs& in, const DropoutPlan& dropout) override {
        const LossSum l = gpu_.forward(in, dropout);
        out_ = gpu_.outputs();
        auto it = out_.find("logits");
        if (scope_ == LogitsScope::labelled_positions && config_.task == Task::masked_lm &&
            in.labels && it != out_.end()) {
            const Tensor& all = it->second;  // (B, T, V)
            const int64_t N = in.B * in.T, V = all.shape[2];
            std::vector<int64_t> rows;
            for (int64_t i = 0; i < N; ++i)
                if (in.labels[i] != -100) rows.push_back(i);
            Tensor picked =
                Tensor::empty(DType::f32, Shape{int64_t(rows.size()), V}, "labelled_logits");
            for (size_t m = 0; m < rows.size(); ++m)
                std::memcpy(picked.data<float>() + int64_t(m) * V, all.data<float>() + rows[m] * V,
                            size_t(V) * sizeof(float));
            out_.erase(it);
            out_["labelled_logits"] = picked;
        }
        return l;
    }
    void backward(double, CActPtr) override {
        LOOM_FAIL("GpuEvalModel is an evaluation view: train through CudaModel");
    }
    void share_parameters(const StageModel&) override {
        LOOM_FAIL("GpuEvalModel is an evaluation view: it shares no parameters");
    }
    void set_logits_scope(LogitsScope scope) override {
        scope_ = scope;
        gpu_.set_logits_scope(scope);
    }
    std::map<std::string, Tensor> outputs() const override { return out_; }
    int num_hidden_states() const override { return 0; }
    Tensor hidden_state(int) const override { LOOM_FAIL("GpuEvalModel keeps no hidden states"); }

  private:
    CudaModel& gpu_;
    LogitsScope scope_ = LogitsScope::all_positions;
    std::map<std::string, Tensor> out_;
};

}  // namespace loom
