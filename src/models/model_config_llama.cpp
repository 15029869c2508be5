// LlamaConfig, MistralConfig and Qwen2Config (transformers 4.40) ->
// ModelConfig. Defaults are each config class's, except that the size keys
// are required (model_config.cpp says why).
//
// Sliding window: Mistral's `sliding_window` (null: none) always applies.
// Qwen2's applies only under `use_sliding_window: true`, as its flash-attention
// path and later transformers do; 4.40's eager and SDPA paths apply it
// whatever use_sliding_window says, so the two agree while sliding_window is
// at least the sequence length (every published Qwen2 config). Qwen2's
// max_window_layers is read by no one while the window is off, and a Qwen2
// config that turns it on is refused unless max_window_layers covers every
// layer (the window would then apply to the first layers only).
//
// Not here: pretraining_tp, which in 4.40 only splits HF's own projections
// into slices summed in another order (the same math), so it is read by no
// one. rope_scaling (linear or dynamic) is Llama's alone in 4.40: on Mistral
// and Qwen2 it is refused, since their models ignore it.
#include "models/model_config_llama.h"

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace loom {

namespace {

using json = nlohmann::json;

bool has(const json& j, const char* k) {
    return j.contains(k) && !j[k].is_null();
}

int64_t get_int(const json& j, const char* k, const ModelConfig& c, bool required,
                int64_t def = 0) {
    if (!has(j, k)) {
        LOOM_CHECK(!required, "{}: missing required key '{}' (the model's size cannot be guessed)",
                   c.source, k);
        return def;
    }
    LOOM_CHECK(j[k].is_number_integer(), "{}: key '{}' must be an integer, found {}", c.source, k,
               j[k].dump());
    return j[k].get<int64_t>();
}

double get_num(const json& j, const char* k, const ModelConfig& c, double def) {
    if (!has(j, k)) return def;
    LOOM_CHECK(j[k].is_number(), "{}: key '{}' must be a number, found {}", c.source, k,
               j[k].dump());
    return j[k].get<double>();
}

bool get_bool(const json& j, const char* k, const ModelConfig& c, bool def) {
    if (!has(j, k)) return def;
    LOOM_CHECK(j[k].is_boolean(), "{}: key '{}' must be true or false, found {}", c.source, k,
               j[k].dump());
    return j[k].get<bool>();
}

void parse_rope_scaling(const json& j, ModelConfig& c) {
    c.rope_scaling_factor = 1.0;
    c.rope_scaling_dynamic = false;
    if (!has(j, "rope_scaling")) return;
    // 4.40's MistralConfig and Qwen2Config have no rope_scaling: their models
    // would ignore it, and a scaled run would not be the model HF loads.
    LOOM_CHECK(c.family == ModelFamily::llama,
               "{}: key 'rope_scaling' is read only by Llama in transformers 4.40; {} ignores "
               "it, so remove it (or set it to null)",
               c.source, family_name(c.family));
    const json& s = j["rope_scaling"];
    LOOM_CHECK(
        s.is_object() && s.contains("type") && s["type"].is_string() && s.contains("factor") &&
            s["factor"].is_number(),
        "{}: key 'rope_scaling' must be null or {{\"type\": ..., \"factor\": ...}}, found {}",
        c.source, s.dump());
    const std::string type = s["type"].get<std::string>();
    LOOM_CHECK(type == "linear" || type == "dynamic",
               "{}: rope_scaling type '{}' is not supported (expected 'linear' or 'dynamic', "
               "the two transformers 4.40 defines)",
               c.source, type);
    const double f = s["factor"].get<double>();
    LOOM_CHECK(f > 1.0, "{}: rope_scaling factor must be a number > 1, found {}", c.source, f);
    c.rope_scaling_factor = f;
    c.rope_scaling_dynamic = type == "dynamic";
}

}  // namespace

void parse_window(const json& j, ModelConfig& c) {
    c.sliding_window = -1;
    if (c.family == ModelFamily::llama) return;
    const bool on = c.family == ModelFamily::mistral || get_bool(j, "use_sliding_window", c, false);
    const int64_t w =
        get_int(j, "sliding_window", c, false, c.family == ModelFamily::mistral ? -1 : 4096);
    if (!on || w < 0) return;
    LOOM_CHECK(w > 0, "{}: sliding_window must be positive or null, found {}", c.source, w);
    if (c.family == ModelFamily::qwen2) {
        const int64_t mwl = get_int(j, "max_window_layers", c, false, 28);
        LOOM_CHECK(mwl >= c.num_hidden_layers,
                   "{}: use_sliding_window with max_window_layers {} < num_hidden_layers {} (a "
                   "window on some layers only) is not supported",
                   c.source, mwl, c.num_hidden_layers);
    }
    c.sliding_window = w;
}

void parse_llama_config(const json& j, ModelConfig& c) {
    c.vocab_size = get_int(j, "vocab_size", c, true);
    c.hidden_size = get_int(j, "hidden_size", c, true);
    c.num_hidden_layers = get_int(j, "num_hidden_layers", c, true);
    c.num_attention_heads = get_int(j, "num_attention_heads", c, true);
    c.intermediate_size = get_int(j, "intermediate_size", c, true);
    const bool mistral = c.family == ModelFamily::mistral, qwen2 = c.family == ModelFamily::qwen2;
    // MistralConfig defaults to 8 key/value heads; the others to one per query head.
    c.num_key_value_heads =
        get_int(j, "num_key_value_heads", c, false, mistral ? 8 : c.num_attention_heads);
    c.embedding_size = c.hidden_size;
    c.max_position_embeddings = get_int(j, "max_position_embeddings", c, false,
                                        mistral ? 4096 * 32
                                        : qwen2 ? 32768
                                                : 2048);
    c.type_vocab_size = 0;
    c.pad_token_id = get_int(j, "pad_token_id", c, false, -1);
    c.hidden_act = has(j, "hidden_act") && j["hidden_act"].is_string()
                       ? j["hidden_act"].get<std::string>()
                       : "silu";
    LOOM_CHECK(c.hidden_act == "silu",
               "{}: hidden_act '{}' is not supported for {} (only 'silu', the SwiGLU MLP)",
               c.source, c.hidden_act, family_name(c.family));
    c.layer_norm_eps = get_num(j, "rms_norm_eps", c, 1e-6);
    c.rope_theta = get_num(j, "rope_theta", c, 10000.0);
    LOOM_CHECK(c.rope_theta > 0, "{}: rope_theta must be positive, found {}", c.source,
               c.rope_theta);
    parse_rope_scaling(j, c);
    // Only LlamaConfig has these keys; Qwen2 always has q/k/v biases.
    if (c.family == ModelFamily::llama) {
        c.attention_bias = get_bool(j, "attention_bias", c, false);
        c.mlp_bias = get_bool(j, "mlp_bias", c, false);
    }
    c.qkv_bias = qwen2;
    // Llama has no dropout on the embeddings or the residual branches.
    c.hidden_dropout = c.embedding_dropout = 0.0;
    c.attention_dropout = get_num(j, "attention_dropout", c, 0.0);
    c.classifier_dropout = 0.0;
    LOOM_CHECK(c.num_key_value_heads > 0 && c.num_attention_heads > 0 &&
                   c.num_attention_heads % c.num_key_value_heads == 0,
               "{}: num_attention_heads {} must be a multiple of num_key_value_heads {}", c.source,
               c.num_attention_heads, c.num_key_value_heads);
    LOOM_CHECK(c.hidden_size % c.num_attention_heads == 0 &&
                   (c.hidden_size / c.num_attention_heads) % 2 == 0,
               "{}: hidden_size {} / num_attention_heads {} must be an even head size (rotary "
               "embeddings turn pairs of dimensions)",
               c.source, c.hidden_size, c.num_attention_heads);
    parse_window(j, c);
}

void llama_config_to_json(const ModelConfig& c, json& j) {
    j["hidden_size"] = c.hidden_size;
    j["num_hidden_layers"] = c.num_hidden_layers;
    j["num_attention_heads"] = c.num_attention_heads;
    j["num_key_value_heads"] = c.kv_heads();
    j["intermediate_size"] = c.intermediate_size;
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["hidden_act"] = c.hidden_act;
    j["rms_norm_eps"] = c.layer_norm_eps;
    j["rope_theta"] = c.rope_theta;
    if (c.rope_scaling_factor != 1.0)
        j["rope_scaling"] = json{{"type", c.rope_scaling_dynamic ? "dynamic" : "linear"},
                                 {"factor", c.rope_scaling_factor}};
    j["attention_dropout"] = c.attention_dropout;
    if (c.family == ModelFamily::llama) {
        j["attention_bias"] = c.attention_bias;
        if (c.mlp_bias) j["mlp_bias"] = true;
    }
}

}  // namespace loom
