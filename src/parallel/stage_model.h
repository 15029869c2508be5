// StageModel: what the layout runners (parallel/: DataParallel, the pipeline
// schedules) need of a model, so that they depend on this and not on models/.
// models/model.h's Model implements it; the layer table in
// docs/architecture.md keeps parallel/ below models/.
//
// Loss normalisation belongs to the caller: forward returns the *sum* of
// per-example losses and how many were counted, so gradient accumulation and
// data parallelism divide by the global count.
#pragma once

#include <cstdint>
#include <functional>

#include "core/model_inputs.h"
#include "nn/embedding.h"
#include "nn/module.h"
#include "nn/param_table.h"
#include "nn/tp_slice.h"

namespace loom {

// Where the LM heads compute logits. HF computes every position; a training
// step only needs the labelled ones (about 15% for masked LM), and the loss and
// gradients are identical either way.
enum class LogitsScope { all_positions, labelled_positions };

struct LossSum {
    double sum = 0;     // sum of per-example losses
    int64_t count = 0;  // examples counted (0: no labels given)
    double mean() const { return count ? sum / double(count) : 0.0; }
};

class StageModel {
  public:
    virtual ~StageModel() = default;

    // The flat parameter and gradient buffers (this process's rows).
    virtual ParamTable& params() = 0;
    virtual const ParamTable& params() const = 0;
    virtual void zero_grad() = 0;

    // Runs the model; returns the loss sum when the inputs carry labels.
    // `dropout.training` switches dropout on (keys: seed, step, sample_offset).
    virtual LossSum forward(const ModelInputs& in, const DropoutPlan& dropout) = 0;
    // Accumulates d(loss_scale * loss_sum)/d(params) into the gradient buffer,
    // for the last forward (which must have had labels). A stage without the
    // head takes the gradient of its output, (B, T, C), instead of a loss:
    // `d_stage_output`, in the activation type and memory of the model.
    virtual void backward(double loss_scale, CActPtr d_stage_output = nullptr) = 0;

    // Pipeline stages: the last forward's output, (B, T, C), on a stage
    // without the head; after backward, the gradient of the stage input on a
    // stage without the embeddings. Views of the model's activations (its
    // backend's memory, its activation type), valid until the next forward.
    virtual CActPtr stage_output() const { return nullptr; }
    virtual CActPtr stage_input_grad() const { return nullptr; }
    // Uses `owner`'s parameter and gradient buffers (a model built from the
    // same config and part): pipeline schedules keep several micro-batches in
    // flight, one model instance (one set of activations) each.
    virtual void share_parameters(const StageModel& owner) = 0;
    // The width of a stage's output rows (the hidden size): what the
    // schedules hand from stage to stage.
    virtual int64_t hidden_width() const = 0;
    // The tensor-parallel slice this process holds (inactive: all of it).
    virtual const ModelTp& tp_slice() const = 0;

    // Data parallelism: during backward() the model calls `hook(begin, end)`
    // for ranges of the flat gradient buffer whose gradients are final (no later
    // op of this backward adds to them), so their all-reduce can start while the
    // rest of backward runs. The ranges of one backward are disjoint and cover
    // [0, flat_numel()) by the time backward() returns. An empty hook: no calls.
    using GradReadyHook = std::function<void(int64_t begin_elem, int64_t end_elem)>;
    virtual void set_grad_ready_hook(GradReadyHook hook) = 0;

    // Sparse word-embedding gradient (data parallelism): with `on`, backward
    // keeps the input lookup's gradient out of the flat buffer, as one row per
    // token (embedding_grad_rows()). The word table's range of the buffer then
    // holds only what the head adds (a tied decoder; zeros otherwise), final
    // before any block runs backward, and the hook gets it then: its reduction
    // overlaps the whole backward instead of starting when backward returns
    // (94 MB for BERT-base), and the rows (tokens x width) are exchanged after.
    // Returns whether sparse rows are on; false where the model cannot give
    // them (pipeline stages, vocab-parallel or frozen tables). Takes effect at
    // the next backward and stays until turned off.
    virtual bool set_sparse_embedding_grad(bool /*on*/) { return false; }
    // The rows the last backward kept (empty when sparse rows are off).
    virtual EmbeddingGradRows embedding_grad_rows() const { return {}; }
};

}  // namespace loom
