// Hugging Face config.json -> ModelConfig, for the five supported families.
//
// ModelConfig holds every field that changes the math (sizes, activation, eps,
// padding id, ALBERT's groups, dropout probabilities, the task head), under
// one name per concept whatever the family calls it (hidden_size / dim /
// n_embd). Missing size keys and unknown architectures are errors naming the
// config.json path and the key; optional keys take transformers' defaults for
// that family. The original JSON text is kept so export rewrites only the
// fields Loom changed (config_to_json), as save_pretrained would.
//
// Deliberately not here: the activation enum (ops/activation.h; the model
// builder converts `hidden_act` and reports unknown names), anything about
// tokenizers, and what this process builds of the model (a pipeline stage, a
// tensor-parallel slice: models/model_placement.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/task.h"
#include "nn/lora.h"

namespace loom {

enum class ModelFamily { bert, roberta, distilbert, albert, gpt2, llama, mistral, qwen2 };


std::string_view family_name(ModelFamily f);  // "bert", ... (HF model_type)

struct ModelConfig {
    std::string source;        // path of config.json, for error messages
    std::string architecture;  // architectures[0], e.g. "BertForMaskedLM"
    std::string model_type;    // "bert", "roberta", "distilbert", "albert", "gpt2"
    ModelFamily family = ModelFamily::bert;
    Task task = Task::base;
    // LoRA adapters on the blocks' linears (a job's `peft:` block; not from
    // config.json): set before build_model, like the task.
    LoraSpec lora;

    int64_t vocab_size = 0;               // V
    int64_t hidden_size = 0;              // C (hidden_size / dim / n_embd)
    int64_t num_hidden_layers = 0;        // L (num_hidden_layers / n_layers / n_layer)
    int64_t num_attention_heads = 0;      // NH (num_attention_heads / n_heads / n_head)
    int64_t intermediate_size = 0;        // I (intermediate_size / hidden_dim / n_inner)
    int64_t embedding_size = 0;           // E: ALBERT's factorised embedding; = C elsewhere
    int64_t num_hidden_groups = 1;        // ALBERT: distinct layer groups
    int64_t inner_group_num = 1;          // ALBERT: layers inside one group
    int64_t max_position_embeddings = 0;  // rows of the position table
    int64_t type_vocab_size = 0;          // 0 = the model has no token types
    int64_t pad_token_id = -1;            // -1 = none (GPT-2)
    std::string hidden_act;               // HF name: "gelu", "gelu_new", "relu", ...
    double layer_norm_eps = 1e-12;
    double initializer_range = 0.02;
    bool sinusoidal_pos_embds = false;  // DistilBERT: fixed sinusoidal positions
    bool tie_word_embeddings = true;
    bool scale_attn_weights = true;  // GPT-2
    bool scale_attn_by_inverse_layer_idx = false;

    // Llama, Mistral, Qwen2 (layer_norm_eps holds rms_norm_eps).
    int64_t num_key_value_heads = 0;  // grouped-query attention; 0: num_attention_heads
    double rope_theta = 10000.0;
    double rope_scaling_factor = 1.0;   // rope_scaling's factor; 1: none
    bool rope_scaling_dynamic = false;  // rope_scaling {"type": "dynamic"} (else linear)
    bool attention_bias = false;       // q/k/v/o biases
    bool mlp_bias = false;             // gate/up/down biases
    bool qkv_bias = false;             // Qwen2: q/k/v biases, none on o_proj
    int64_t sliding_window = -1;       // keys i - w .. i (Mistral; Qwen2 when used); -1: none
    // Llama, Mistral or Qwen2: one builder (models/llama.cpp).
    bool llama_like() const {
        return family == ModelFamily::llama || family == ModelFamily::mistral ||
               family == ModelFamily::qwen2;
    }

    // Classification heads.
    int64_t num_labels = 2;
    std::vector<std::string> id2label;  // size num_labels
    std::string problem_type;           // "" | single_label_classification | ...

    // Dropout probabilities, mapped onto Loom's sites.
    double hidden_dropout = 0.1;      // residual branches (hidden_dropout_prob / dropout / resid_pdrop)
    double embedding_dropout = 0.1;   // after the embeddings (hidden_dropout_prob / dropout / embd_pdrop)
    double attention_dropout = 0.1;   // attention probabilities
    double classifier_dropout = 0.1;  // before the classifier (classifier_dropout / seq_classif_dropout)
    double qa_dropout = 0.0;          // DistilBERT's QA head only

    std::string json_text;  // the config.json this came from ("" when built in code)
    // config.json's torch_dtype: the type its weights are stored in (float32
    // when absent). Loom computes in its own types whatever this says;
    // config_to_json writes it back, so an export sets it to what it writes.
    DType torch_dtype = DType::f32;

    int64_t head_size() const { return hidden_size / num_attention_heads; }
    int64_t kv_heads() const {
        return num_key_value_heads > 0 ? num_key_value_heads : num_attention_heads;
    }
    // Tokens one sequence may hold, what every length check compares with.
    // RoBERTa numbers real tokens from pad_token_id + 1 (HF's
    // create_position_ids_from_input_ids), so its first pad_token_id + 1 rows
    // never hold a token: 514 rows fit 512 tokens. The other families use
    // every row.
    int64_t max_positions() const;
    // Rows of the position table max_positions() leaves unused (RoBERTa: 2).
    int64_t position_offset() const;
};

// "512 positions (max_position_embeddings 514 minus RoBERTa's offset of 2),
// DIR/config.json": the usable length and where it comes from, for messages.
std::string describe_max_positions(const ModelConfig& c);
// Fails when `length`, the value of setting `what` ("data.max_seq_length",
// "--max-seq-length"), exceeds max_positions(), naming both and the reason.
void check_max_length(const ModelConfig& c, std::string_view what, int64_t length);

// Parses config.json text; `source` names the file in errors.
ModelConfig parse_hf_config(const std::string& json_text, const std::string& source);
// Reads DIR/config.json (or the file itself when `path` is a file).
ModelConfig load_hf_config(const std::string& path);

// The HF class for (family, task), e.g. (bert, masked_lm) -> "BertForMaskedLM".
std::string architecture_name(ModelFamily f, Task t);
// Switches the task head (fine-tuning a pretrained checkpoint), keeping
// architecture and labels consistent. num_labels <= 0 keeps the current count.
void config_set_task(ModelConfig& c, Task t, int64_t num_labels = 0);

// config.json text for export: the original JSON with Loom's fields written
// back under the family's own key names.
std::string config_to_json(const ModelConfig& c);

}  // namespace loom
