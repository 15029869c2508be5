// One training step (forward, backward, AdamW) of a BERT-base-shaped model
// with random weights, timed per phase: the Loom side of
// bench/torch_bert_step.py (same shapes, no dropout, batch 8 x 128 by default).
// --task clm is a Llama-shaped causal LM instead (RMSNorm, rotary
// embeddings, grouped-query attention with --kv-heads, SwiGLU with
// --intermediate, an untied lm_head), the side of bench/torch_llama_step.py.
//
//   bench_model_step [--task mlm|cls|clm] [--batch 8] [--seq 128] [--layers 12]
//                    [--steps 5] [--warmup 2] [--hidden 768] [--vocab 30522]
//                    [--heads C/64] [--kv-heads heads] [--intermediate 4C]
//                    [--all-logits 0|1] [--dtype fp32|bf16] [--dropout 0]
//
// --dropout P sets both of the config's dropout rates (HF's default is 0.1),
// to see what the masks cost a step; the PyTorch peer has no dropout.
//
// Masked LM computes logits only at labelled positions unless --all-logits 1
// (what PyTorch/HF do; same loss and gradients).
// Prints one JSON line like the PyTorch peer, plus a per-phase breakdown in
// wall time and in process CPU time (the latter is what to compare when the
// machine is shared: other jobs inflate wall time, not our CPU seconds).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "core/runtime.h"
#include "models/model.h"
#include "models/model_config.h"
#include "optim/adamw.h"

using namespace loom;

namespace {

using Clock = std::chrono::steady_clock;
double ms(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

double cpu_ms() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

}  // namespace

constexpr const char* k_usage =
    "usage: bench_model_step [--task mlm|cls|clm] [--batch 8] [--seq 128] [--layers 12]\n"
    "                        [--steps 5] [--warmup 2] [--hidden 768] [--vocab 30522]\n"
    "                        [--heads C/64] [--kv-heads heads] [--intermediate 4C]\n"
    "                        [--all-logits 0|1] [--dtype fp32|bf16] [--dropout 0]\n"
    "Times one training step of a BERT-base-shaped model (or a Llama-shaped one with\n"
    "--task clm) and prints one JSON line, as bench/torch_bert_step.py does.\n";

int main(int argc, char** argv) {
    for (int i = 1; i < argc; ++i)
        if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
            fmt::print("{}", k_usage);
            return 0;
        }
    if (argc % 2 == 0) {
        fmt::print(stderr, "bench_model_step: {} needs a value\n{}", argv[argc - 1], k_usage);
        return 2;
    }
    runtime_exec_with_wait_policy(argv);  // as `loom` does
    runtime_init();
    runtime_pin_threads();
    std::string task = "mlm";
    int64_t B = 8, T = 128, L = 12, C = 768, V = 30522, steps = 5, warmup = 2, all_logits = 0;
    int64_t NH = 0, NKV = 0, I = 0;  // 0: C / 64, NH and 4 C
    double dropout = 0.0;
    std::string dtype = "fp32";
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--task")
            task = v;
        else if (k == "--batch")
            B = std::stoll(v);
        else if (k == "--seq")
            T = std::stoll(v);
        else if (k == "--layers")
            L = std::stoll(v);
        else if (k == "--hidden")
            C = std::stoll(v);
        else if (k == "--vocab")
            V = std::stoll(v);
        else if (k == "--steps")
            steps = std::stoll(v);
        else if (k == "--warmup")
            warmup = std::stoll(v);
        else if (k == "--all-logits")
            all_logits = std::stoll(v);
        else if (k == "--dtype")
            dtype = v;
        else if (k == "--dropout")
            dropout = std::stod(v);
        else if (k == "--heads")
            NH = std::stoll(v);
        else if (k == "--kv-heads")
            NKV = std::stoll(v);
        else if (k == "--intermediate")
            I = std::stoll(v);
        else {
            fmt::print(stderr, "bench_model_step: unknown option {}\n{}", k, k_usage);
            return 2;
        }
    }
    const bool mlm = task == "mlm", clm = task == "clm";
    if (NH == 0) NH = C / 64;
    if (NKV == 0) NKV = NH;
    if (I == 0) I = 4 * C;
    const std::string json =
        clm ? fmt::format(
                  R"({{"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                       "vocab_size": {}, "hidden_size": {}, "num_hidden_layers": {},
                       "num_attention_heads": {}, "num_key_value_heads": {},
                       "intermediate_size": {}, "max_position_embeddings": 4096,
                       "attention_dropout": {}}})",
                  V, C, L, NH, NKV, I, dropout)
            : fmt::format(
                  R"({{"architectures": ["{}"], "model_type": "bert", "vocab_size": {},
                       "hidden_size": {}, "num_hidden_layers": {}, "num_attention_heads": {},
                       "intermediate_size": {}, "max_position_embeddings": 512,
                       "hidden_dropout_prob": {}, "attention_probs_dropout_prob": {},
                       "num_labels": 3}})",
                  mlm ? "BertForMaskedLM" : "BertForSequenceClassification", V, C, L, NH, I,
                  dropout, dropout);
    const ModelConfig config = parse_hf_config(json, "bench");
    auto model = build_model(config);
    model->init(0);
    if (!all_logits) model->set_logits_scope(LogitsScope::labelled_positions);
    // bf16: the blocks' linear layers in bf16 with fp32 accumulation (autocast).
    model->set_compute_dtype(dtype == "bf16"   ? DType::bf16
                             : dtype == "fp16" ? DType::f16
                                               : DType::f32);

    std::vector<int64_t> ids(size_t(B * T)), types(size_t(B * T), 0), mask(size_t(B * T), 1);
    std::vector<int64_t> labels(size_t(mlm || clm ? B * T : B), -100);
    uint64_t s = 12345;
    auto rnd = [&] { return (s = s * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
    for (auto& id : ids) id = 5 + int64_t(rnd() % uint64_t(V - 5));
    if (clm) {
        labels = ids;  // HF's causal LM shifts inside the model
    } else if (mlm) {
        for (size_t i = 0; i < labels.size(); ++i)
            if (rnd() % 100 < 15) labels[i] = ids[i];
    } else {
        for (auto& l : labels) l = int64_t(rnd() % 3);
    }
    ModelInputs in;
    in.B = B;
    in.T = T;
    in.input_ids = ids.data();
    in.attention_mask = mask.data();
    in.token_type_ids = clm ? nullptr : types.data();
    in.labels = labels.data();

    AdamW opt(model->params(), AdamWParams{1e-4, 0.9, 0.999, 1e-8, 0.01});
    DropoutPlan drop;
    drop.training = true;
    std::vector<double> tf, tb, to, tt, cf, cb, co;
    double loss = 0;
    for (int64_t step = 0; step < warmup + steps; ++step) {
        const auto t0 = Clock::now();
        const double c0 = cpu_ms();
        model->zero_grad();
        drop.step = uint64_t(step);  // fresh masks each step, as in training
        const LossSum l = model->forward(in, drop);
        const auto t1 = Clock::now();
        const double c1 = cpu_ms();
        model->backward(1.0 / double(l.count));
        const auto t2 = Clock::now();
        const double c2 = cpu_ms();
        opt.step();
        const auto t3 = Clock::now();
        const double c3 = cpu_ms();
        loss = l.mean();
        if (step >= warmup) {
            tf.push_back(ms(t0, t1));
            tb.push_back(ms(t1, t2));
            to.push_back(ms(t2, t3));
            tt.push_back(ms(t0, t3));
            cf.push_back(c1 - c0);
            cb.push_back(c2 - c1);
            co.push_back(c3 - c2);
        }
    }
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    const double step_ms = median(tt);
    // The whole model's FLOPs, as the PyTorch peer counts them: work Loom skips
    // (logits and the last layer only at the rows the head reads) still counts.
    const int64_t KV = NKV * (C / NH);
    const double block = clm ? double(2 * C * C + 2 * C * KV + 3 * C * I)  // q, o, k, v; SwiGLU
                             : double(4 * C * C + 2 * C * I);
    double per_tok = double(L) * (2.0 * block + 4.0 * double(T * C));
    if (mlm) per_tok += 2.0 * double(C * C + C * V);
    if (clm) per_tok += 2.0 * double(C * V);
    const double flops = 3.0 * per_tok * double(B * T);
    fmt::print("forward {:.1f} ms, backward {:.1f} ms, adamw {:.1f} ms (loss {:.4f}, {} threads)\n",
               median(tf), median(tb), median(to), loss, runtime_threads());
    fmt::print("cpu time: forward {:.1f} ms, backward {:.1f} ms, adamw {:.1f} ms, step {:.1f} ms\n",
               median(cf), median(cb), median(co), median(cf) + median(cb) + median(co));
    fmt::print(
        R"({{"peer": "loom", "task": "{}", "dtype": "{}", "threads": {}, "ms_per_step": {:.1f}, "tokens_per_s": {:.1f}, "gflops": {:.1f}}})"
        "\n",
        task, dtype, runtime_threads(), step_ms, double(B * T) / (step_ms / 1000),
        flops / (step_ms / 1000) / 1e9);
    return 0;
}
