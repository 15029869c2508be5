// `loom forward`: one step of a Hugging Face model on a saved batch, writing
// logits, loss, hidden states and (optionally) gradients and the parameters
// after one AdamW step, all keyed by HF names. This is how parity with
// transformers is checked, by the tests, the demo and users.
//
// The AdamW step here applies weight decay to EVERY parameter (biases and
// LayerNorm included), matching the reference fixtures; the trainer follows
// HF's Trainer instead and exempts them.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/hub_model.h"
#include "core/check.h"
#include "core/runtime.h"
#include "io/batch.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "models/model_config.h"
#include "models/parity.h"
#include "optim/adamw.h"

namespace loom::cli {

namespace {

struct ForwardOptions {
    std::string model_dir, revision, batch_path, out_path;
    bool backward = false, adamw_step = false;
    AdamWParams adamw;
    bool dropout = false;
    uint64_t seed = 0, step = 0;
    int threads = 0;
    std::string compare_path, compare_after_path;
};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::map<std::string, Tensor> read_all(const std::string& path) {
    SafetensorsFile f = SafetensorsFile::open(path);
    std::map<std::string, Tensor> m;
    for (const auto& n : f.names()) m[n] = f.get(n);
    return m;
}

void print_parity(const ParitySummary& s) {
    for (const TensorDiff& d : s.failures) {
        if (d.n_bad < 0)
            fmt::print("  MISMATCH {}: missing or wrong shape\n", d.name);
        else
            fmt::print("  MISMATCH {}: {} elements outside tolerance, first at {} ({} vs {}), max "
                       "|diff| {:.3g}\n",
                       d.name, d.n_bad, d.first_bad, d.bad_value, d.bad_ref, d.max_abs);
    }
    fmt::print("parity: logits {:.2e} loss {:.2e} hidden {:.2e} grads {:.2e} after {:.2e} "
               "checked {} {}\n",
               s.logits, s.loss, s.hidden, s.grads, s.after, s.checked, s.ok() ? "PASS" : "FAIL");
}

void run_forward(const ForwardOptions& o) {
    namespace fs = std::filesystem;
    if (o.threads > 0) runtime_init({o.threads});
    runtime_pin_threads();
    const bool backward = o.backward || o.adamw_step;

    const std::string dir = model_folder_or_hub(o.model_dir, o.revision);
    const ModelConfig config = load_hf_config(dir);
    const std::string weights = safetensors_weights_in(dir);
    LOOM_CHECK(fs::exists(weights), "{}: no model.safetensors (or its shard index) next to config.json", dir);
    auto t0 = Clock::now();
    std::unique_ptr<Model> model = build_model(config);
    const LoadReport report = model->load(SafetensorsFile::open(weights), o.seed);
    fmt::print("model: {} ({}), {} parameters, loaded in {:.1f} ms\n", config.architecture,
               weights, model->params().num_parameters(), ms_since(t0));
    for (const auto& n : report.newly_initialised) fmt::print("  newly initialised: {}\n", n);
    for (const auto& n : report.unused) fmt::print("  not used by this model: {}\n", n);

    const Batch batch = load_batch(o.batch_path);
    const ModelInputs in = inputs_from_batch(batch, config.task, backward);
    DropoutPlan drop;
    drop.training = o.dropout;
    drop.seed = o.seed;
    drop.step = o.step;

    model->zero_grad();
    t0 = Clock::now();
    const LossSum loss = model->forward(in, drop);
    const double fwd_ms = ms_since(t0);
    fmt::print("batch: {} x {} from {}\n", in.B, in.T, o.batch_path);
    if (loss.count > 0)
        fmt::print("loss: {:.8f} (sum {:.6f} over {} labelled)\n", loss.mean(), loss.sum, loss.count);
    else
        fmt::print("loss: none (the batch has no labels for {})\n", task_name(config.task));

    // Outputs are views into reused buffers: copy before backward.
    std::map<std::string, Tensor> results;
    for (const auto& [k, v] : model->outputs()) results[k] = v.clone();
    if (loss.count > 0) {
        Tensor l = Tensor::empty(DType::f32, Shape{}, "loss");
        l.data<float>()[0] = float(loss.mean());
        results["loss"] = l;
    }

    double bwd_ms = 0;
    if (backward) {
        LOOM_CHECK(loss.count > 0, "{}: --backward needs labels, and no labelled position was found",
                   o.batch_path);
        t0 = Clock::now();
        model->backward(1.0 / double(loss.count));
        bwd_ms = ms_since(t0);
        for (const auto& [name, g] : model->params().grad_tensors()) results["grad." + name] = g.clone();
    }
    if (o.adamw_step) {
        AdamW opt(model->params(), o.adamw, DecayPolicy::all);
        opt.step();
        for (const auto& [name, p] : model->params().param_tensors()) results["after." + name] = p;
    }
    fmt::print("time: forward {:.1f} ms{}\n", fwd_ms,
               backward ? fmt::format(", backward {:.1f} ms", bwd_ms) : "");

    if (!o.out_path.empty()) {
        safetensors_write(o.out_path, results);
        fmt::print("wrote {} tensors to {}\n", results.size(), o.out_path);
    }
    if (!o.compare_path.empty()) {
        const auto expected = read_all(o.compare_path);
        const auto after = o.compare_after_path.empty() ? std::map<std::string, Tensor>{}
                                                        : read_all(o.compare_after_path);
        const ParitySummary s = compare_with_reference(results, expected, after);
        print_parity(s);
        LOOM_CHECK(s.ok(), "parity check against {} failed: {} tensors outside tolerance",
                   o.compare_path, s.failures.size());
    }
}

void setup_forward(CLI::App& app) {
    auto o = std::make_shared<ForwardOptions>();
    CLI::App* sub = app.add_subcommand(
        "forward", "Run one forward (and backward, and AdamW step) of a Hugging Face model on a "
                   "saved batch, writing outputs by HF name");
    sub->footer(R"(
The model folder holds config.json and model.safetensors as save_pretrained
writes them (BERT, RoBERTa, DistilBERT, ALBERT, GPT-2; the head comes from
config.json's architectures). The batch is a safetensors file of int64 tensors:
input_ids [B,T], attention_mask [B,T], token_type_ids [B,T] (optional),
position_ids [B,T] (optional, causal LM: packed documents, 0 where each starts;
a token then attends to its own document only), and labels [B,T] (masked/causal LM, -100 = ignored) or [B] (classification), or
start_positions/end_positions [B] (question answering).

The output file (safetensors, float32) holds:
  logits                 [B,T,V] or [B,num_labels]; QA: start_logits, end_logits [B,T]
  loss                   [] HF's mean loss, when the batch has labels
  hidden_states.<i>      [B,T,C] HF output_hidden_states (0 = embeddings)
  grad.<hf name>         with --backward: d loss / d parameter, tied weights once
  after.<hf name>        with --adamw-step: parameters after one torch AdamW step
                         (weight decay on every parameter, as the HF fixtures)

Example (parity with a bundled HF fixture):
  loom forward --model tests/data/hf/bert-mlm --batch tests/data/hf/bert-mlm/batch.safetensors \
      --out /tmp/out.safetensors --adamw-step \
      --compare tests/data/hf/bert-mlm/expected.safetensors \
      --compare-after tests/data/hf/bert-mlm/after_adamw.safetensors
)");
    sub->add_option("--model", o->model_dir,
                    "model folder (config.json + model.safetensors) or Hub id")
        ->required();
    sub->add_option("--revision", o->revision, "branch, tag or commit of a Hub model id");
    sub->add_option("--batch", o->batch_path, "batch .safetensors file")->required();
    sub->add_option("--out", o->out_path, "output .safetensors file (omit to only print)");
    sub->add_flag("--backward", o->backward, "also compute gradients (grad.<name>)");
    sub->add_flag("--adamw-step", o->adamw_step,
                  "also apply one AdamW step (after.<name>); implies --backward");
    sub->add_option("--lr", o->adamw.lr, "AdamW learning rate")->capture_default_str();
    sub->add_option("--beta1", o->adamw.beta1, "AdamW beta1")->capture_default_str();
    sub->add_option("--beta2", o->adamw.beta2, "AdamW beta2")->capture_default_str();
    sub->add_option("--eps", o->adamw.eps, "AdamW epsilon (added after bias correction)")
        ->capture_default_str();
    sub->add_option("--weight-decay", o->adamw.weight_decay, "AdamW decoupled weight decay")
        ->capture_default_str();
    sub->add_flag("--dropout", o->dropout,
                  "apply the config's dropout (training mode); off by default, like model.eval()");
    sub->add_option("--seed", o->seed, "dropout and new-head init seed")->capture_default_str();
    sub->add_option("--step", o->step, "step number keying the dropout masks")
        ->capture_default_str();
    sub->add_option("--threads", o->threads, "CPU threads (default: all cores or OMP_NUM_THREADS)");
    sub->add_option("--compare", o->compare_path,
                    "reference outputs (a fixture's expected.safetensors): print the max |diff| "
                    "per group and PASS/FAIL; exit 1 on FAIL");
    sub->add_option("--compare-after", o->compare_after_path,
                    "reference parameters after one AdamW step (after_adamw.safetensors)");
    sub->callback([o] { run_forward(*o); });
}

}  // namespace

LOOM_COMMAND(setup_forward);

}  // namespace loom::cli
