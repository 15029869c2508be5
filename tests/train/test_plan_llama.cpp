// The planner on the Llama family (Llama, Mistral, Qwen2): exact parameter
// counts against the fixtures' safetensors and the published Llama 2 sizes,
// FLOPs per token against a hand count for grouped-query attention, SwiGLU,
// an untied head and Mistral's sliding window, the activation arena of a real
// forward, Korthikanti's per-layer bytes as adapted in gpu_plan_memory.cpp,
// and the rule that tp must divide the key/value heads.
#include <gtest/gtest.h>

#include <vector>

#include "io/safetensors.h"
#include "models/model.h"
#include "models/model_config.h"
#include "parallel/gpu_plan.h"
#include "parallel/layout_plan.h"
#include "train/plan_model.h"

namespace loom {
namespace {

std::string fixture(const std::string& name) {
    return std::string(LOOM_TEST_DATA_DIR) + "/hf/" + name;
}

// Elements in DIR/model.safetensors; HF saves a tied lm_head once (as the
// word table), so a tied lm_head.weight, were it there, is not counted twice.
int64_t safetensors_params(const std::string& dir, const ModelConfig& c) {
    const SafetensorsFile f = SafetensorsFile::open(dir + "/model.safetensors");
    int64_t n = 0;
    for (const std::string& name : f.names()) {
        if (c.tie_word_embeddings && name == "lm_head.weight") continue;
        n += f.shape(name).numel();
    }
    return n;
}

TEST(PlanLlama, ParameterCountsEqualTheFixturesWeights) {
    for (const char* name : {"llama-lm", "mistral-lm", "qwen2-lm", "llama-cls"}) {
        SCOPED_TRACE(name);
        const ModelConfig c = load_hf_config(fixture(name));
        const int64_t in_file = safetensors_params(fixture(name), c);
        EXPECT_EQ(plan_model_from_config(c).total_params, in_file);
        EXPECT_EQ(int64_t(build_model(c)->params().num_parameters()), in_file);
    }
    // What the four fixtures exercise: untied heads, Qwen2's q/k/v biases with
    // a tied head, the last-token score: 94528, 78400 and 78336 elements.
    EXPECT_EQ(plan_model_from_config(load_hf_config(fixture("llama-lm"))).total_params, 94528);
    EXPECT_EQ(plan_model_from_config(load_hf_config(fixture("qwen2-lm"))).total_params, 78400);
    EXPECT_EQ(plan_model_from_config(load_hf_config(fixture("llama-cls"))).total_params, 78336);
}

// meta-llama/Llama-2-{7b,13b,70b}-hf config.json (the keys that size the model).
ModelConfig llama2(int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads,
                   int64_t intermediate) {
    const std::string json =
        R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
            "hidden_size": )" +
        std::to_string(hidden) + R"(, "num_hidden_layers": )" + std::to_string(layers) +
        R"(, "num_attention_heads": )" + std::to_string(heads) + R"(, "num_key_value_heads": )" +
        std::to_string(kv_heads) + R"(, "intermediate_size": )" + std::to_string(intermediate) +
        R"(, "max_position_embeddings": 4096, "hidden_act": "silu", "rms_norm_eps": 1e-05,
            "rope_theta": 10000.0, "tie_word_embeddings": false, "attention_bias": false})";
    return parse_hf_config(json, "llama-2.json");
}

TEST(PlanLlama, ParameterCountsEqualThePublishedLlama2Sizes) {
    EXPECT_EQ(plan_model_from_config(llama2(4096, 32, 32, 32, 11008)).total_params, 6'738'415'616);
    EXPECT_EQ(plan_model_from_config(llama2(5120, 40, 40, 40, 13824)).total_params, 13'015'864'320);
    // 70B: grouped-query attention, 8 key/value heads of 128.
    const PlanModel m70 = plan_model_from_config(llama2(8192, 80, 64, 8, 28672));
    EXPECT_EQ(m70.total_params, 68'976'648'192);

    // The GPU planner's stage holds the same parameters: all of them on one
    // GPU; over tp 8 everything but the norms (2 per layer and the final one)
    // is split.
    GpuLayout one;
    EXPECT_EQ(gpu_stage_params(m70, 4096, one, true), double(m70.total_params));
    GpuLayout tp8;
    tp8.tp = 8;
    const double norms = 80.0 * 2 * 8192 + 8192;
    EXPECT_DOUBLE_EQ(gpu_stage_params(m70, 4096, tp8, true),
                     (double(m70.total_params) - norms) / 8 + norms);
    // Pipeline: the first stage has the word table, the last the lm_head and
    // the final norm; no tied copy (the head is untied).
    GpuLayout pp2;
    pp2.pp = 2;
    EXPECT_DOUBLE_EQ(
        gpu_stage_params(m70, 4096, pp2, true) + gpu_stage_params(m70, 4096, pp2, false),
        double(m70.total_params));
}

// llama-lm: C 64, 4 heads of 16, 2 key/value heads (k and v are 64 x 32),
// I 96, V 256, 2 layers, untied lm_head. Mistral-lm is the same shape with a
// window of 6 (7 keys per query).
TEST(PlanLlama, FlopsPerTokenCountGqaSwigluTheUntiedHeadAndTheWindow) {
    const PlanModel m = plan_model_from_config(load_hf_config(fixture("llama-lm")));
    const double q = 64 * 64, k = 64 * 32, v = 64 * 32, o = 64 * 64, mlp = 3 * 64 * 96;
    const double attention = 4.0 * 32 * 64;  // Q K^T and the product with V over 32 keys
    const double layer = 2 * (q + k + v + o + mlp) + attention;
    const double head = 2.0 * 64 * 256;
    EXPECT_DOUBLE_EQ(layer_flops_per_token(m, 32), layer);
    EXPECT_DOUBLE_EQ(forward_flops_per_token(m, 32), 2 * layer + head);
    EXPECT_DOUBLE_EQ(gpu_model_flops(m, 32, 4), 3 * (2 * layer + head) * 4 * 32);

    const PlanModel w = plan_model_from_config(load_hf_config(fixture("mistral-lm")));
    ASSERT_EQ(w.window, 6);
    const double windowed = 2 * (q + k + v + o + mlp) + 4.0 * 7 * 64;
    EXPECT_DOUBLE_EQ(forward_flops_per_token(w, 32), 2 * windowed + head);
    // Shorter than the window: the whole sequence.
    EXPECT_DOUBLE_EQ(forward_flops_per_token(w, 4), forward_flops_per_token(m, 4));
    // Recompute reruns the windowed products only.
    GpuLayout sel;
    sel.recompute = Recompute::selective;
    EXPECT_DOUBLE_EQ(gpu_hardware_flops(w, 32, 1, sel) - gpu_model_flops(w, 32, 1),
                     2 * 4.0 * 7 * 64 * 32);

    // Classification: no logits over the vocabulary.
    const PlanModel cls = plan_model_from_config(load_hf_config(fixture("llama-cls")));
    EXPECT_DOUBLE_EQ(forward_flops_per_token(cls, 32), 2 * layer);
}

TEST(PlanLlama, TensorParallelismMustDivideTheKeyValueHeads) {
    const PlanModel m = plan_model_from_config(load_hf_config(fixture("llama-lm")));
    ASSERT_EQ(m.heads, 4);
    ASSERT_EQ(m.kv(), 2);
    PlanWorkload w;
    w.micro_batch = 2;
    w.seq = 32;
    LayoutChoice l;
    l.tp = 2;
    EXPECT_EQ(layout_check(m, w, l), "");
    l.tp = 4;  // divides the 4 heads and I = 96, not the 2 key/value heads
    EXPECT_EQ(layout_check(m, w, l),
              "key/value heads (2) not divisible by tp (each rank keeps whole query groups)");

    GpuJob j;
    j.model = m;
    j.seq = 32;
    j.machine = gpu_profile_by_name("h100-sxm");
    GpuLayout g;
    g.dp = 2, g.tp = 4, g.micro_batch = 1, g.global_batch = 8;
    EXPECT_EQ(gpu_layout_check(j, g),
              "key/value heads (2) not divisible by tp 4 (each rank keeps whole query groups)");
    g.dp = 4, g.tp = 2;
    EXPECT_EQ(gpu_layout_check(j, g), "");
    for (const GpuPlanRow& r : gpu_plan_search(j, 8, GpuSearchBounds{}))
        EXPECT_LE(r.layout.tp, 2) << "the search tries only tp that divide the kv heads";
}

// One forward with labels at (B, T); the arena's bytes.
int64_t measured_activation_bytes(const ModelConfig& c, int64_t B, int64_t T,
                                  int64_t checkpoint_every = 0) {
    auto model = build_model(c);
    model->init(1);
    model->set_activation_checkpointing(checkpoint_every);
    std::vector<int64_t> ids(size_t(B * T)), mask(size_t(B * T), 1), labels(size_t(B * T));
    for (int64_t i = 0; i < B * T; ++i) labels[size_t(i)] = ids[size_t(i)] = 5 + i % 200;
    std::vector<int64_t> cls_labels(size_t(B), 1);
    ModelInputs in;
    in.B = B;
    in.T = T;
    in.input_ids = ids.data();
    in.attention_mask = mask.data();
    in.labels = c.task == Task::sequence_classification ? cls_labels.data() : labels.data();
    model->forward(in, DropoutPlan{});
    return model->activation_bytes();
}

TEST(PlanLlama, ActivationMemoryMatchesTheArena) {
    for (const char* name : {"llama-lm", "mistral-lm", "qwen2-lm", "llama-cls"}) {
        SCOPED_TRACE(name);
        const ModelConfig c = load_hf_config(fixture(name));
        const PlanModel m = plan_model_from_config(c);
        for (int every : {0, 1}) {
            PlanWorkload w;
            w.micro_batch = 4;
            w.seq = 32;
            LayoutChoice l;
            l.checkpointing = every > 0;
            const MemoryPlan p = plan_memory(m, w, l);
            const double predicted = p.activations_per_micro + p.workspace;
            const double measured = double(measured_activation_bytes(c, 4, 32, every));
            ASSERT_GT(measured, 0);
            // The arena rounds each buffer up to 16 floats.
            EXPECT_NEAR(predicted, measured, 0.03 * measured) << "checkpoint every " << every;
        }
    }
}

// Korthikanti's per-layer bytes adapted (gpu_plan_memory.cpp): 16-bit
// values, no dropout; norm inputs, the QKV and MLP inputs 8sbh; Q 2sbh, K
// and V 2 sb NKV d each, q|k|v expanded to the 64 query heads 6sbh, the
// context 2sbh, SwiGLU's gate and up outputs and down's input 6sbI, the
// softmax output 2as^2b: all but the first split by t.
TEST(PlanLlama, LayerActivationBytesAreKorthikantisAdapted) {
    const PlanModel m = plan_model_from_config(llama2(8192, 80, 64, 8, 28672));
    ASSERT_FALSE(m.hidden_dropout);
    ASSERT_FALSE(m.attention_dropout);
    const double s = 4096, b = 1, h = 8192, kv = 8 * 128, I = 28672, a = 64, t = 8;
    GpuLayout l;
    l.tp = 8;
    l.micro_batch = 1;
    const double split = 2 * h + 2 * kv + 2 * kv + 6 * h + 2 * h + 6 * I;
    EXPECT_DOUBLE_EQ(gpu_layer_activation_bytes(m, 4096, l),
                     s * b * (8 * h + (split + 2 * a * s) / t));
    l.recompute = Recompute::selective;
    EXPECT_DOUBLE_EQ(gpu_layer_activation_bytes(m, 4096, l), s * b * (8 * h + split / t));
    l.sequence_parallel = true;
    EXPECT_DOUBLE_EQ(gpu_layer_activation_bytes(m, 4096, l), s * b * (8 * h + split) / t);

    // Model state from the exact count: 16 bytes per parameter in bf16.
    GpuJob j;
    j.model = m;
    j.seq = 4096;
    j.nodes = 8;
    j.machine = gpu_profile_by_name("h100-sxm");
    GpuLayout whole;
    whole.dp = 64, whole.micro_batch = 1, whole.global_batch = 64;
    const GpuMemory g = gpu_plan_memory(j, whole);
    EXPECT_DOUBLE_EQ(g.weights + g.grads + g.optimizer, 16 * double(m.total_params));
}

}  // namespace
}  // namespace loom
