// Task heads: what turns the final hidden states (B, T, C) into logits and a
// loss sum. One implementation per task (mlm.cpp, seq_cls.cpp, qa_span.cpp,
// causal_lm.cpp); the family-specific parts (names, activation, where dropout
// sits) arrive in a spec built by the model (models/hf_names.h).
//
// Contract: forward saves what backward needs in the arena; backward
// *overwrites* dhidden (B, T, C) and accumulates parameter gradients.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/model_config.h"
#include "models/stack_view.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "ops/activation.h"

namespace loom {

// Labels as the model copied them: (B, T) token labels or (B) class labels;
// start/end positions (B) for QA. Null when absent.
struct HeadBatch {
    int64_t B = 0, T = 0;
    const int64_t* labels = nullptr;
    const int64_t* start_positions = nullptr;
    const int64_t* end_positions = nullptr;
};

class Head {
  public:
    virtual ~Head() = default;
    virtual void bind(const ParamTable& t) = 0;
    virtual void plan(ActArena& a, int64_t B, int64_t T) = 0;
    // hidden (B, T, C) and dhidden in the activations' type and the backend's
    // memory; the HeadBatch's labels are host memory (a head reads them to
    // pick rows and uploads what its kernels read).
    virtual LossSum forward(CActPtr hidden, const HeadBatch& hb, const DropoutPlan& drop) = 0;
    virtual void backward(ActPtr dhidden, CActPtr hidden, double loss_scale) = 0;
    virtual void outputs(const ActArena& a, std::map<std::string, Tensor>& out) const = 0;
    virtual void set_logits_scope(LogitsScope) {}
    // The GEMMs' operand type, as the blocks' (Model::set_compute_dtype):
    // autocast runs the head's linears in bf16 too, and a GPU's bf16
    // activations leave no fp32 operand to read.
    virtual void set_compute_dtype(DType d) = 0;
    // The positions b * T + t (increasing) whose final hidden state forward
    // will read, when that is only some of them: token 0 of each sample for
    // classification, the labelled positions for a masked-LM head under
    // labelled_positions. False (rows untouched): it reads every position.
    virtual bool rows_read(const HeadBatch&, std::vector<int64_t>& /*rows*/) const { return false; }
    // Tensor parallelism (before allocate, after the word embeddings were
    // sharded): LM heads split their decoder by vocabulary; the others stay
    // whole, replicated on tp (the default: nothing to do).
    virtual void shard(ParamTable&, const ModelTp&) {}
    // The head's modules (StackView).
    virtual HeadView view() const = 0;
};

// Masked LM: transform dense (C -> E), activation, LayerNorm (E), decoder
// (V, E) tied to the word embeddings, plus a vocabulary bias. Supports
// LogitsScope::labelled_positions (the head runs on the labelled rows only).
struct MlmHeadSpec {
    std::string dense, norm;  // row prefixes
    std::string decoder;      // decoder weight name (an alias when tied)
    std::string bias;         // stored bias row
    std::string bias_alias;   // "<decoder>.bias" alias of `bias`, "" if none
    int64_t C = 0, E = 0, V = 0;
    Activation act = Activation::gelu_erf;
    double eps = 1e-12;
    double init_std = 0.02;
    int word_embeddings_row = -1;  // tied decoder weight; -1: a decoder row of its own
};
std::unique_ptr<Head> make_mlm_head(ParamTable& t, const MlmHeadSpec& spec);

// Sequence classification on token 0:
//   [dropout_a] -> dense (C -> C) -> act -> dropout_b -> out (C -> num_labels)
// BERT/ALBERT pooler + classifier (tanh), RoBERTa's classification head
// (dropout_a too), DistilBERT's pre_classifier (ReLU).
struct ClsHeadSpec {
    std::string dense, out;  // row prefixes
    int64_t C = 0, num_labels = 2;
    Activation act = Activation::tanh;
    double p_drop_a = 0, p_drop_b = 0;
    double init_std = 0.02;
};
std::unique_ptr<Head> make_seq_cls_head(ParamTable& t, const ClsHeadSpec& spec);

// Sequence classification at each sample's last token, the Llama family's
// (transformers 4.40 LlamaForSequenceClassification): score (C ->
// num_labels, no bias) on the final normed hidden state at position
// (first index of pad_token_id in the row) - 1, modulo T, so T - 1 when the
// row has no pad id. `input_ids` is the model's host copy of the batch's
// ids (B, T), read at each forward. No dropout (HF has none there).
struct LastTokenClsSpec {
    std::string out;  // "score"
    int64_t C = 0, num_labels = 2;
    int64_t pad_token_id = -1;  // -1: none, then one sample per batch, pooled at T - 1
    double init_std = 0.02;
};
std::unique_ptr<Head> make_last_token_cls_head(ParamTable& t, const LastTokenClsSpec& spec,
                                               const std::vector<int64_t>* input_ids);

// Extractive QA: [dropout] -> qa_outputs (C -> 2) on every token; loss is
// CE(start) + CE(end) summed, counted once per labelled position (HF's
// (mean_start + mean_end) / 2 when both are present for every sample).
struct QaHeadSpec {
    std::string out;  // "qa_outputs"
    int64_t C = 0;
    double p_drop = 0;
    double init_std = 0.02;
};
std::unique_ptr<Head> make_qa_head(ParamTable& t, const QaHeadSpec& spec);

// Causal LM: logits = hidden @ W^T with W tied to the token embeddings (no
// bias); position t predicts labels[t + 1].
struct CausalLmHeadSpec {
    std::string decoder;  // "lm_head.weight" (an alias when tied)
    int64_t C = 0, V = 0;
    double init_std = 0.02;
    int word_embeddings_row = -1;  // tied; -1: a row of its own
};
std::unique_ptr<Head> make_causal_lm_head(ParamTable& t, const CausalLmHeadSpec& spec);

}  // namespace loom
