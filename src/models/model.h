// Model: the interface the trainer, `loom forward` and the tests drive,
// whatever the family or head.
//
//   auto model = build_model(config);            // rows registered, buffers allocated
//   (build_model(config, placement) builds one pipeline stage / tp slice)
//   model->load(SafetensorsFile::open(...));      // by HF name
//   LossSum l = model->forward(inputs, dropout);   // saves activations
//   model->backward(1.0 / global_count);           // grads += d(scale * loss_sum)
//
// Loss normalisation belongs to the caller: forward returns the *sum* of
// per-example losses and how many were counted (labelled tokens, samples), so
// gradient accumulation and data parallelism divide by the global count. HF's
// mean loss is sum / count for one batch.
//
// Outputs ("logits", "start_logits", "end_logits", "hidden_states.<i>") are
// views into reused buffers, valid until the next forward. Parameters and
// gradients are the ParamTable's two flat buffers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/model_inputs.h"
#include "core/tensor.h"
#include "models/model_config.h"
#include "models/model_placement.h"
#include "nn/embedding.h"
#include "nn/module.h"
#include "nn/param_table.h"
#include "ops/matmul.h"
#include "parallel/stage_model.h"

namespace loom {

class TensorSource;

class Model : public StageModel {
  public:
    const ModelConfig& config() const { return config_; }
    // What this process built of the model (pipeline stage, tp slice).
    const ModelPlacement& placement() const { return placement_; }
    ParamTable& params() final { return table_; }
    const ParamTable& params() const final { return table_; }

    // Loads parameters by HF name; head rows missing from the file are
    // initialised (reported), anything else missing is an error.
    LoadReport load(const TensorSource& file, uint64_t init_seed = 0);
    // Initialises every parameter as HF's _init_weights does (pretraining).
    void init(uint64_t seed) { table_.init_all(seed); }
    void zero_grad() final { table_.zero_grad(); }

    // forward, backward, the stage views and the data-parallel hooks are
    // StageModel's (parallel/stage_model.h); the stage is placement().part.

    int64_t hidden_width() const final { return config_.hidden_size; }
    const ModelTp& tp_slice() const final { return placement_.tp; }
    // Transformer-layer applications of the whole model (ALBERT's shared
    // layer counts once per use): what pipeline stages divide.
    virtual int64_t num_layer_applications() const { return config_.num_hidden_layers; }

    // Masked LM: with labelled_positions, forward computes logits only where
    // labels != -100 and outputs "labelled_logits" (M, V) in row-major order of
    // those positions instead of "logits". Under labelled_positions a head that
    // reads only some positions (those, or token 0 for classification) also
    // has the last post-LN layer run at them alone: same loss and gradients,
    // about 5/6 of a layer less work, and no last hidden state in outputs().
    // The trainer sets it for training; all_positions gives HF's outputs.
    virtual void set_logits_scope(LogitsScope scope) = 0;

    // Mixed precision (hyperparameters.bf16 / fp16): every linear layer (the
    // blocks', the head's, ALBERT's embedding mapping) and attention's
    // products multiply bf16- or fp16-rounded operands with fp32
    // accumulation, as PyTorch's autocast does; parameters, gradients,
    // optimizer state, layer norms, softmax and the loss stay fp32.
    virtual void set_compute_dtype(DType /*dtype*/) {}

    void set_grad_ready_hook(GradReadyHook hook) final { grad_ready_hook_ = std::move(hook); }

    // Named outputs of the last forward (views, valid until the next forward).
    virtual std::map<std::string, Tensor> outputs() const = 0;
    // Bytes of activation memory planned for the last forward's shape (saved
    // activations, backward workspace, head buffers): the figure the memory
    // plan (parallel/layout_plan.h) predicts. 0 before the first forward.
    virtual int64_t activation_bytes() const { return 0; }
    // Activation checkpointing (distribution.activation_checkpointing): every
    // k-th transformer-layer application keeps only its input and recomputes
    // its saved activations right before its backward; 0 turns it off.
    // Gradients are bitwise those without it (dropout is keyed by counters).
    // Takes effect at the next forward.
    virtual void set_activation_checkpointing(int64_t /*every_k*/) {}
    // Activation offloading (distribution.offload_activations): the inputs
    // checkpointing keeps go to host memory after forward and come back
    // before backward, at most horizon + 1 of them on the device at a time
    // (models/act_offload.h). Gradients are bitwise those without it; the
    // offloaded hidden states are not in outputs(). Takes effect at the next
    // forward, with checkpointing on.
    virtual void set_activation_offloading(bool /*on*/, int64_t /*horizon*/) {}
    // HF output_hidden_states: i = 0 embeddings, i = k after layer k (L + 1 of them).
    virtual int num_hidden_states() const = 0;
    virtual Tensor hidden_state(int i) const = 0;

  protected:
    Model(ModelConfig c, ModelPlacement p) : config_(std::move(c)), placement_(std::move(p)) {}
    ModelConfig config_;
    ModelPlacement placement_;
    ParamTable table_;
    GradReadyHook grad_ready_hook_;
};

// Transformer-layer applications of the config's model (ALBERT's shared
// layers count once per use): what pipeline stages divide.
int64_t model_layer_applications(const ModelConfig& config);

// Builds the model the config names (family + task head), parameters
// allocated but uninitialised: call load() or init(). `placement` is what
// this process builds of it; the default is the whole model.
std::unique_ptr<Model> build_model(const ModelConfig& config,
                                   const ModelPlacement& placement = {});

}  // namespace loom
