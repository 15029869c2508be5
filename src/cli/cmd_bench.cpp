// `loom bench`: training-step throughput of a model shape on the CPU or a GPU,
// as one JSON line that bench/gpu/loom_vs_hf.sh sets beside PyTorch + HF
// transformers running the same step on the same machine.
//
// The step is the trainer's: forward, backward, AdamW over every parameter,
// with random weights and random token ids (a fixed seed), dropout off as in
// the peer. Masked LM computes logits at every position, as HF does, so both
// sides do the same arithmetic. MFU follows llm.c's estimate: 6N + 12 L H Q T
// flops per token (N parameters, L layers, H heads of width Q, T tokens per
// sequence) over the device's dense peak for the compute type: a GPU's from its
// datasheet, a CPU's measured after the run (core/cpu_peak.h); the fp32 one for
// bf16 on a CPU whose bf16 GEMMs run in fp32 (ops/gemm.h).
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/check.h"
#include "core/cpu_peak.h"
#include "core/runtime.h"
#include "models/model.h"
#include "models/model_config.h"
#include "ops/gemm.h"
#include "optim/adamw.h"
#include "optim/flat_optimizer.h"

#if defined(LOOM_HAVE_CUDA)
#include <cuda_runtime.h>

#include "backend/cuda/cuda_context.h"
#include "ops/cuda/device_ops_cuda.h"
#endif

namespace loom::cli {

namespace {

struct BenchOptions {
    std::string model = "gpt2-124m";
    std::string task;  // default: the preset's
    int64_t seq = 0, batch = 8, steps = 10, warmup = 3;
    std::string dtype = "bf16", device = "cpu";
    int gpu = 0, threads = 0;
    uint64_t seed = 1;
};

// Shapes the GPU targets name (HF configs with dropout off), plus tiny ones
// for a quick check.
std::string preset_config(const std::string& name) {
    auto gpt2 = [](int64_t C, int64_t L, int64_t H, int64_t V) {
        return fmt::format(
            R"({{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": {},
                "n_embd": {}, "n_layer": {}, "n_head": {}, "n_positions": 1024,
                "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}})",
            V, C, L, H);
    };
    auto bert = [](int64_t C, int64_t L, int64_t H, int64_t V) {
        return fmt::format(
            R"({{"architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": {},
                "hidden_size": {}, "num_hidden_layers": {}, "num_attention_heads": {},
                "intermediate_size": {}, "max_position_embeddings": 512,
                "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}})",
            V, C, L, H, 4 * C);
    };
    if (name == "gpt2-124m") return gpt2(768, 12, 12, 50257);
    if (name == "bert-base") return bert(768, 12, 12, 30522);
    if (name == "bert-large") return bert(1024, 24, 16, 30522);
    if (name == "tiny-gpt2") return gpt2(64, 2, 4, 1000);
    if (name == "tiny-bert") return bert(64, 2, 4, 1000);
    return {};
}

ModelConfig bench_config(const BenchOptions& o) {
    namespace fs = std::filesystem;
    ModelConfig c;
    const std::string preset = preset_config(o.model);
    if (!preset.empty()) {
        c = parse_hf_config(preset, o.model);
    } else {
        LOOM_CHECK(fs::exists(o.model),
                   "--model {}: neither a preset (gpt2-124m, bert-base, bert-large, tiny-gpt2, "
                   "tiny-bert) nor a config.json or model folder",
                   o.model);
        c = load_hf_config(o.model);
        c.hidden_dropout = c.embedding_dropout = c.attention_dropout = c.classifier_dropout = 0;
    }
    if (!o.task.empty()) {
        const auto t = task_from_name(o.task);
        LOOM_CHECK(t && (*t == Task::masked_lm || *t == Task::causal_lm),
                   "--task {}: expected masked-lm or causal-lm", o.task);
        config_set_task(c, *t);
    }
    LOOM_CHECK(c.task == Task::masked_lm || c.task == Task::causal_lm,
               "{}: loom bench times language-model steps; pass --task masked-lm or causal-lm",
               o.model);
    return c;
}

// Dense peak of the device for the compute type, in TFLOP/s; 0 when unknown
// (MFU is then not reported). H100 SXM: 989.4 bf16, 494.7 TF32; A100: 312, 156.
double peak_tflops(const std::string& device_name, bool bf16) {
    auto has = [&](const char* s) { return device_name.find(s) != std::string::npos; };
    if (has("H100 NVL")) return 0.0;
    if (has("H100 PCIe")) return bf16 ? 756.5 : 378.0;
    if (has("H100") || has("H200")) return bf16 ? 989.4 : 494.7;
    if (has("A100")) return bf16 ? 312.0 : 156.0;
    return 0.0;
}

double peak_rss_gib() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return double(u.ru_maxrss) * 1024.0 / double(1ull << 30);  // ru_maxrss is KiB on Linux
}

struct Batch {
    std::vector<int64_t> ids, mask, labels;
    ModelInputs in;
};

Batch random_batch(const ModelConfig& c, int64_t B, int64_t T, uint64_t seed) {
    Batch b;
    const size_t N = size_t(B * T);
    b.ids.resize(N);
    b.mask.assign(N, 1);
    b.labels.assign(N, -100);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    auto rnd = [&] { return (s = s * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
    for (auto& id : b.ids) id = int64_t(rnd() % uint64_t(c.vocab_size));
    for (size_t i = 0; i < N; ++i) {
        // Masked LM: 15% of positions labelled; causal LM: every next token.
        if (c.task == Task::causal_lm || rnd() % 100 < 15) b.labels[i] = b.ids[i];
    }
    b.in.B = B;
    b.in.T = T;
    b.in.input_ids = b.ids.data();
    b.in.attention_mask = b.mask.data();
    b.in.labels = b.labels.data();
    return b;
}

using Clock = std::chrono::steady_clock;

struct Timing {
    double step_ms = 0, loss = 0, peak_gib = 0;
    std::string device_name;
};

Timing run_cpu(Model& model, const ModelInputs& in, const BenchOptions& o) {
    model.set_logits_scope(LogitsScope::all_positions);
    if (o.dtype == "bf16") model.set_compute_dtype(DType::bf16);
    AdamW opt(model.params(), AdamWParams{1e-4, 0.9, 0.999, 1e-8, 0.01});
    std::vector<double> ms;
    Timing r;
    for (int64_t s = 0; s < o.warmup + o.steps; ++s) {
        const auto t0 = Clock::now();
        model.zero_grad();
        const LossSum l = model.forward(in, DropoutPlan{});
        model.backward(1.0 / double(std::max<int64_t>(l.count, 1)));
        opt.step(1e-4);
        if (s >= o.warmup)
            ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        r.loss = l.mean();
        if (o.steps > 0 && s + 1 == o.warmup)
            fmt::print(stderr, "warm-up done, timing {} steps\n", o.steps);
    }
    std::sort(ms.begin(), ms.end());
    r.step_ms = ms[ms.size() / 2];
    r.peak_gib = peak_rss_gib();
    r.device_name = fmt::format("cpu ({} threads)", runtime_threads());
    return r;
}

#if defined(LOOM_HAVE_CUDA)
// The model stack on a CUDA backend, as `loom train` runs it: activations,
// the compute copy and gradients in the compute type, AdamW (FlatOptimizer)
// on fp32 master weights.
Timing run_cuda(const ModelConfig& c, const ModelInputs& in, const BenchOptions& o) {
    CudaContext ctx(o.gpu);
    const std::unique_ptr<Backend> be = make_cuda_backend(ctx);
    const DType act = o.dtype == "bf16" ? DType::bf16 : DType::f32;
    ModelPlacement place;
    place.device = ParamDevice{be.get(), act};
    auto model = build_model(c, place);
    model->init(o.seed);
    model->set_logits_scope(LogitsScope::all_positions);
    model->set_compute_dtype(act);
    OptimizerConfig oc;
    oc.hp = AdamWParams{1e-4, 0.9, 0.999, 1e-8, 0.01};
    FlatOptimizer opt(model->params(), oc);
    Timing r;
    r.device_name = be->name();
    auto one = [&] {
        model->zero_grad();
        const LossSum l = model->forward(in, DropoutPlan{});
        model->backward(1.0 / double(std::max<int64_t>(l.count, 1)));
        opt.step(1e-4);
        r.loss = l.mean();
    };
    for (int64_t s = 0; s < o.warmup; ++s) one();
    be->synchronize();
    const auto t0 = Clock::now();
    for (int64_t s = 0; s < o.steps; ++s) one();
    be->synchronize();
    r.step_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / double(o.steps);
    // The stack plans its memory up front, so what is in use after the
    // steps is its peak (plus the CUDA context and cuBLAS's workspace).
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        r.peak_gib = double(total_b - free_b) / double(1ull << 30);
    return r;
}

#endif

void run_bench(const BenchOptions& o) {
    LOOM_CHECK(o.dtype == "bf16" || o.dtype == "fp32", "--dtype {}: expected bf16 or fp32",
               o.dtype);
    LOOM_CHECK(o.device == "cpu" || o.device == "cuda", "--device {}: expected cpu or cuda",
               o.device);
    LOOM_CHECK(o.steps >= 1 && o.warmup >= 0 && o.batch >= 1,
               "--steps must be >= 1, --warmup >= 0, --batch >= 1");
    if (o.threads > 0) runtime_init({o.threads});
    runtime_pin_threads();
    const ModelConfig c = bench_config(o);
    const int64_t T = o.seq > 0 ? o.seq : std::min<int64_t>(c.max_position_embeddings, 1024);
    LOOM_CHECK(T <= c.max_position_embeddings, "--seq {} exceeds the model's {} positions", T,
               c.max_position_embeddings);
    auto model = build_model(c);
    model->init(o.seed);
    const Batch batch = random_batch(c, o.batch, T, o.seed);
    fmt::print(stderr, "{}: {} ({} parameters), batch {} x {}, {} on {}\n", o.model, c.architecture,
               model->params().num_parameters(), o.batch, T, o.dtype, o.device);
    const bool widened =
        o.device == "cpu" && o.dtype == "bf16" && gemm_bf16_route() == Bf16Impl::widen_f32;
    if (widened)
        fmt::print(stderr,
                   "bf16: this CPU has no bf16 GEMM kernels in oneDNN (needs AVX-512); operands "
                   "are rounded to bf16 and multiplied in fp32: same numerics, no speed gain; MFU "
                   "counts against the fp32 peak\n");

    Timing r;
    if (o.device == "cuda") {
#if defined(LOOM_HAVE_CUDA)
        r = run_cuda(c, batch.in, o);
#else
        LOOM_FAIL(
            "--device cuda: this loom was built without CUDA (configure with -DLOOM_CUDA=ON, "
            "the cuda-release preset)");
#endif
    } else {
        r = run_cpu(*model, batch.in, o);
    }

    const double N = double(model->params().num_parameters());
    const double L = double(c.num_hidden_layers), H = double(c.num_attention_heads);
    const double Q = double(c.hidden_size) / H;
    const double flops_per_token = 6.0 * N + 12.0 * L * H * Q * double(T);
    const double tokens_per_s = double(o.batch * T) / (r.step_ms / 1e3);
    double peak = 0;
    std::string peak_source = "null";
    if (o.device == "cuda") {
        peak = peak_tflops(r.device_name, o.dtype == "bf16");
        if (peak > 0) peak_source = "\"datasheet\"";
    } else {
        // Widened bf16 GEMMs run on fp32 multiply-adds: theirs is the peak to count against.
        const CpuPeak p = measure_cpu_peak(o.dtype == "bf16" && !widened);
        peak = p.gflops / 1e3;
        if (peak > 0)
            peak_source = fmt::format("\"measured: {}{}\"", p.instruction,
                                      widened ? " (bf16 GEMMs run in fp32 on this CPU)" : "");
    }
    const std::string mfu =
        peak > 0 ? fmt::format("{:.4f}", flops_per_token * tokens_per_s / (peak * 1e12)) : "null";
    fmt::print(
        "{{\"side\":\"loom\",\"model\":\"{}\",\"task\":\"{}\",\"device\":\"{}\",\"dtype\":\"{}\","
        "\"batch\":{},\"seq\":{},\"steps\":{},\"params\":{},\"step_ms\":{:.3f},"
        "\"tokens_per_s\":{:.1f},\"flops_per_token\":{:.6g},\"mfu\":{},\"peak_mem_gib\":{:.3f},"
        "\"peak_tflops\":{},\"peak_source\":{},\"gpu\":\"{}\",\"loss\":{:.6f}}}\n",
        o.model, task_name(c.task), o.device, o.dtype, o.batch, T, o.steps, int64_t(N), r.step_ms,
        tokens_per_s, flops_per_token, mfu, r.peak_gib,
        peak > 0 ? fmt::format("{:.6g}", peak) : "null", peak_source, r.device_name, r.loss);
    fmt::print(stderr, "{:.1f} ms/step, {:.0f} tokens/s, MFU {}, peak memory {:.2f} GiB\n",
               r.step_ms, tokens_per_s, mfu, r.peak_gib);
}

void setup(CLI::App& app) {
    auto o = std::make_shared<BenchOptions>();
    CLI::App* cmd = app.add_subcommand(
        "bench",
        "Time training steps (forward, backward, AdamW) of a model shape and print one JSON line:\n"
        "tokens/s, MFU and peak memory. bench/gpu/loom_vs_hf.sh runs it beside PyTorch + HF\n"
        "transformers on the same GPU. MFU counts against a GPU's datasheet peak, or against\n"
        "the CPU's peak measured after the run (its multiply-add units on every thread,\n"
        "\"peak_source\" names the instruction; bf16 on a CPU without oneDNN bf16 kernels runs\n"
        "its GEMMs in fp32 and counts against the fp32 peak).\n\n"
        "  loom bench --model gpt2-124m --seq 1024 --batch 16 --device cuda\n"
        "  loom bench --model bert-large --seq 128 --batch 64 --device cuda --dtype bf16\n"
        "  loom bench --model tiny-bert --device cpu --steps 3      (a quick check)");
    cmd->add_option("--model", o->model,
                    "gpt2-124m | bert-base | bert-large | tiny-gpt2 | tiny-bert, or a config.json "
                    "or model folder (random weights either way)")
        ->capture_default_str();
    cmd->add_option("--task", o->task, "masked-lm | causal-lm (default: the model's)");
    cmd->add_option("--seq", o->seq,
                    "tokens per sequence (default: the model's positions, at most 1024)");
    cmd->add_option("--batch", o->batch, "sequences per step")->capture_default_str();
    cmd->add_option("--steps", o->steps, "timed steps")->capture_default_str();
    cmd->add_option("--warmup", o->warmup, "untimed steps first")->capture_default_str();
    cmd->add_option("--dtype", o->dtype, "bf16 (mixed precision, fp32 master weights) | fp32")
        ->capture_default_str();
    cmd->add_option("--device", o->device, "cpu | cuda")->capture_default_str();
    cmd->add_option("--gpu", o->gpu, "CUDA device index")->capture_default_str();
    cmd->add_option("--threads", o->threads, "CPU threads (default: all cores)");
    cmd->add_option("--seed", o->seed, "weights and token ids")->capture_default_str();
    cmd->callback([o] { run_bench(*o); });
}

LOOM_COMMAND(setup);

}  // namespace

}  // namespace loom::cli
