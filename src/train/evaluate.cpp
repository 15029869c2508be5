// Evaluation loop and per-task metrics (see evaluate.h).
#include "train/evaluate.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "train/metrics.h"

namespace loom {

namespace {

using Clock = std::chrono::steady_clock;

// Argmax over V for each of `rows` rows of `logits` (rows, V).
int64_t argmax_row(const float* row, int64_t V) {
    int64_t best = 0;
    for (int64_t v = 1; v < V; ++v)
        if (row[v] > row[best]) best = v;
    return best;
}

const Tensor& output(const std::map<std::string, Tensor>& outs, const char* name) {
    auto it = outs.find(name);
    LOOM_ASSERT(it != outs.end(), "the model produced no '{}' output", name);
    return it->second;
}

// What the batches of one evaluation add up to.
struct EvalTally {
    double loss_sum = 0;
    int64_t loss_count = 0;
    ClassificationCounter cls;
    TokenAccuracy tok_acc;
    QaLogits qa_logits;
    explicit EvalTally(size_t qa_features) : qa_logits(qa_features) {}
};

// One batch's predictions into the task's counters (and, with keep_outputs,
// the classification logits in feature order).
void score_batch(Task task, const TokenBatch& b, const LossSum& l,
                 const std::map<std::string, Tensor>& outs, const EvalOptions& options,
                 EvalTally& tally, EvalOutput& out) {
    switch (task) {
        case Task::sequence_classification: {
            const Tensor& logits = output(outs, "logits");  // (B, num_labels)
            const int64_t K = logits.shape[1];
            const float* p = logits.data<float>();
            for (int64_t i = 0; i < b.B; ++i) {
                const int64_t label = b.labels[size_t(i)];
                if (label != -100) tally.cls.add(argmax_row(p + i * K, K), label);
                if (options.keep_outputs)
                    std::copy(p + i * K, p + (i + 1) * K,
                              out.logits.begin() + b.feature_index[size_t(i)] * K);
            }
            break;
        }
        case Task::question_answering: {
            const Tensor& s = output(outs, "start_logits");  // (B, T)
            const Tensor& e = output(outs, "end_logits");    // (B, T)
            tally.qa_logits.store(b.feature_index, b.T, s.data<float>(), e.data<float>());
            break;
        }
        case Task::masked_lm: {
            if (l.count == 0) break;
            const Tensor& logits = output(outs, "labelled_logits");  // (M, V)
            const int64_t V = logits.shape[1];
            const float* p = logits.data<float>();
            int64_t m = 0;
            for (size_t i = 0; i < b.labels.size(); ++i) {
                if (b.labels[i] == -100) continue;
                tally.tok_acc.correct += argmax_row(p + m * V, V) == b.labels[i];
                ++tally.tok_acc.total;
                ++m;
            }
            break;
        }
        case Task::causal_lm: {
            const Tensor& logits = output(outs, "logits");  // (B, T, V)
            const int64_t V = logits.shape[2];
            const float* p = logits.data<float>();
            // Position t predicts token t + 1 (the model shifts).
            for (int64_t i = 0; i < b.B; ++i)
                for (int64_t t = 0; t + 1 < b.T; ++t) {
                    const int64_t label = b.labels[size_t(i * b.T + t + 1)];
                    if (label == -100) continue;
                    tally.tok_acc.correct += argmax_row(p + (i * b.T + t) * V, V) == label;
                    ++tally.tok_acc.total;
                }
            break;
        }
        case Task::base:
            break;  // no head, no metric beyond the loss
    }
}

// The task's metrics, after the loss (in HF's order).
void add_task_metrics(Task task, double loss, const FeatureSet& data, const EvalOptions& options,
                      const EvalTally& tally, EvalOutput& out) {
    switch (task) {
        case Task::sequence_classification: {
            const ClassificationMetrics m = tally.cls.compute();
            out.metrics.emplace_back("accuracy", m.accuracy);
            out.metrics.emplace_back("f1", m.f1);
            out.metrics.emplace_back("precision", m.precision);
            out.metrics.emplace_back("recall", m.recall);
            break;
        }
        case Task::question_answering: {
            QaPostprocessOptions qo = options.qa;
            out.qa_predictions = qa_postprocess(data, tally.qa_logits, qo);
            SquadCounter sq;
            for (size_t i = 0; i < out.qa_predictions.size(); ++i) {
                std::vector<std::string> golds;
                for (const QaAnswer& a : data.examples[i].answers) golds.push_back(a.text);
                sq.add(out.qa_predictions[i].text, golds);
            }
            const SquadMetrics m = sq.compute();
            out.metrics.emplace_back("exact_match", m.exact_match);
            out.metrics.emplace_back("f1", m.f1);
            if (!options.keep_outputs) out.qa_predictions.clear();
            break;
        }
        case Task::masked_lm:
        case Task::causal_lm:
            out.metrics.emplace_back("perplexity", perplexity(loss));
            out.metrics.emplace_back("accuracy", tally.tok_acc.accuracy());
            break;
        case Task::base:
            break;
    }
}

}  // namespace

double EvalOutput::metric(const std::string& name) const {
    for (const auto& [k, v] : metrics)
        if (k == name) return v;
    return std::numeric_limits<double>::quiet_NaN();
}

EvalOutput evaluate_model(Model& model, std::shared_ptr<const FeatureSet> data,
                          const LoaderOptions& loader_options, const EvalOptions& options) {
    LOOM_CHECK(data && !data->features.empty(), "evaluation: the eval data set has no features");
    const auto t0 = Clock::now();
    LoaderOptions lo = loader_options;
    lo.shuffle = false;
    lo.drop_last = false;
    Loader loader(data, lo);
    loader.seek({0, 0});

    const Task task = options.task;
    // Masked LM scores only the masked positions (labelled logits); the
    // loss and the argmax are the same as over all positions.
    model.set_logits_scope(task == Task::masked_lm ? LogitsScope::labelled_positions
                                                   : LogitsScope::all_positions);
    DropoutPlan no_dropout;  // training = false

    EvalOutput out;
    EvalTally tally(task == Task::question_answering ? data->features.size() : 0);
    if (options.keep_outputs && task == Task::sequence_classification) {
        out.num_labels = model.config().num_labels;
        out.logits.assign(data->features.size() * size_t(out.num_labels), 0.0f);
    }

    TokenBatch b;
    while (loader.next(b)) {
        const LossSum l = model.forward(b.inputs(), no_dropout);
        tally.loss_sum += l.sum;
        tally.loss_count += l.count;
        out.samples += b.B;
        score_batch(task, b, l, model.outputs(), options, tally, out);
    }
    model.set_logits_scope(LogitsScope::all_positions);

    const double loss = tally.loss_count ? tally.loss_sum / double(tally.loss_count)
                                         : std::numeric_limits<double>::quiet_NaN();
    out.metrics.emplace_back("loss", loss);
    add_task_metrics(task, loss, *data, options, tally, out);
    out.runtime_s = std::chrono::duration<double>(Clock::now() - t0).count();
    out.metrics.emplace_back("runtime", out.runtime_s);
    out.metrics.emplace_back("samples_per_second",
                             out.runtime_s > 0 ? double(out.samples) / out.runtime_s : 0.0);
    return out;
}

}  // namespace loom
