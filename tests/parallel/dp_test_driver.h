// Data-parallel training driver for the layout-equivalence tests (CommLocal
// threads and mpirun): the same model code and the same global batches under
// any (dp size, gradient accumulation, ZeRO stage); only this driver's split
// of the global batch differs. It makes the DataParallel calls in the order
// dp_step.h documents (what the trainer does).
//
// Global batch of step s: G samples of length T drawn from Philox keyed by
// (seed, s), with random padding; masked LM labels ~20% of the real tokens
// (the input there replaced by a mask id), causal LM labels = input ids with
// -100 on padding. Dropout is on and keyed by global sample index.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "core/check.h"
#include "core/philox.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "models/model_config.h"
#include "parallel/dp_step.h"

namespace loom::test {

struct DpLayout {
    int dp = 1;
    int ga = 1;  // micro-batches per rank per step
    ZeroStage zero = ZeroStage::none;
    double bucket_size_mb = 0.05;  // ~13k floats: a dozen buckets on the fixtures
    bool overlap = true;
    bool sparse_embedding_grad = true;  // DpOptions::sparse_embedding_grad
};

struct DpRun {
    std::vector<double> losses;      // (steps) global mean loss per step
    std::vector<double> grad_norms;  // (steps) before clipping
    std::vector<float> params;       // (flat_numel) final parameters
    // (flat_numel) 1 where the true gradient is exactly zero and the float one
    // is rounding noise: attention key biases (softmax ignores a per-row
    // constant). AdamW turns noise into steps of about lr, in any layout.
    std::vector<uint8_t> noise_level;
    std::map<int64_t, std::string> row_at;  // offset -> parameter name (messages)
    int64_t launched_by_hook = 0;           // over the run, this rank
    int64_t sparse_rows = 0;                // embedding rows exchanged over the run, this rank
    std::map<std::string, Tensor> optimizer_state;  // when asked for
};

struct DpJob {
    std::string fixture_dir;  // tests/data/hf/<name>
    int64_t G = 12, T = 16;   // global batch
    int steps = 20;
    double lr = 2e-3, max_grad_norm = 0.5, dropout = 0.1;
    uint64_t seed = 1234;
    bool gather_state = false;
    OptimizerKind optim = OptimizerKind::adamw;  // HF's betas and eps, weight decay 0.01
    // Resume: parameters and optimizer state of an earlier run (any layout),
    // continuing at step `first_step` (null: from the fixture, step 0).
    const std::vector<float>* start_params = nullptr;
    const std::map<std::string, Tensor>* start_state = nullptr;
    int64_t first_step = 0;
};

// One step's global batch (G, T), deterministic in (seed, step).
struct GlobalBatch {
    std::vector<int64_t> ids, mask, types, labels;  // (G, T) each
};

inline GlobalBatch make_global_batch(const ModelConfig& c, const DpJob& job, int64_t step) {
    const int64_t G = job.G, T = job.T, V = c.vocab_size;
    GlobalBatch b;
    b.ids.resize(size_t(G * T));
    b.mask.resize(size_t(G * T));
    b.types.assign(size_t(G * T), 0);
    b.labels.assign(size_t(G * T), -100);
    PhiloxStream rng(job.seed, uint64_t(step), 77);
    uint64_t ctr = 0;
    auto draw = [&](uint64_t n) {
        const uint64_t i = ctr++;
        return rng.block(i >> 2)[i & 3] % uint32_t(n);
    };
    const bool causal = c.task == Task::causal_lm;
    for (int64_t g = 0; g < G; ++g) {
        const int64_t len = T / 2 + int64_t(draw(uint64_t(T / 2 + 1)));  // [T/2, T]
        for (int64_t t = 0; t < T; ++t) {
            const size_t i = size_t(g * T + t);
            const bool real = t < len;
            b.mask[i] = real ? 1 : 0;
            b.ids[i] = real ? 5 + int64_t(draw(uint64_t(V - 5))) : 0;
            if (!real) continue;
            if (causal) {
                b.labels[i] = b.ids[i];
            } else if (draw(5) == 0) {
                b.labels[i] = b.ids[i];
                b.ids[i] = 4;  // the "mask" token of these tests
            }
        }
    }
    return b;
}

inline ModelConfig dp_test_config(const DpJob& job) {
    ModelConfig c = load_hf_config(job.fixture_dir);
    c.hidden_dropout = c.embedding_dropout = c.attention_dropout = c.classifier_dropout =
        job.dropout;
    return c;
}

// Runs the job on this rank of `dp` (every rank calls it). Rank r of D sees
// global samples [r*G/D, (r+1)*G/D), split into `ga` micro-batches.
inline DpRun run_dp_job(const DpJob& job, const DpLayout& layout, Communicator& dp) {
    LOOM_CHECK(dp.size() == layout.dp, "layout dp {} on a group of {}", layout.dp, dp.size());
    LOOM_CHECK(job.G % (int64_t(layout.dp) * layout.ga) == 0,
               "global batch {} does not split into dp {} x ga {}", job.G, layout.dp, layout.ga);
    const ModelConfig c = dp_test_config(job);
    auto model = build_model(c);
    model->load(SafetensorsFile::open(job.fixture_dir + "/model.safetensors"));
    AdamWParams hp;
    hp.lr = job.lr;
    hp.weight_decay = 0.01;
    DpOptions o;
    o.zero = layout.zero;
    o.bucket_size_mb = layout.bucket_size_mb;
    o.overlap = layout.overlap;
    o.sparse_embedding_grad = layout.sparse_embedding_grad;
    if (job.start_params) {
        ParamTable& t = model->params();
        LOOM_CHECK(int64_t(job.start_params->size()) == t.flat_numel(), "resume: parameter count");
        std::memcpy(t.params_data(), job.start_params->data(),
                    job.start_params->size() * sizeof(float));
    }
    OptimizerConfig opt = adamw_config(hp);
    opt.kind = job.optim;
    DataParallel ddp(*model, dp, opt, o);
    ddp.broadcast_parameters();
    if (job.start_state) ddp.load_optimizer_state(*job.start_state, job.first_step);

    const int64_t T = job.T, per_rank = job.G / layout.dp, B = per_rank / layout.ga;
    DpRun run;
    for (int64_t step = job.first_step; step < job.first_step + job.steps; ++step) {
        // Two batches in turn: random, but learnable, so the loss falls.
        const GlobalBatch gb = make_global_batch(c, job, step % 2);
        const int64_t first = int64_t(dp.rank()) * per_rank;
        // The global count before any backward: this rank's labels, summed.
        int64_t local = 0;
        for (int64_t i = first * T; i < (first + per_rank) * T; ++i)
            local += gb.labels[size_t(i)] != -100;
        if (c.task == Task::causal_lm) {  // the last labelled token of a row has no target
            local = 0;
            for (int64_t g = first; g < first + per_rank; ++g) {
                int64_t n = 0;
                for (int64_t t = 0; t < T; ++t) n += gb.labels[size_t(g * T + t)] != -100;
                local += n > 0 ? n - 1 : 0;
            }
        }
        ddp.begin_step();
        const double total = ddp.sum(double(local));
        double loss_sum = 0;
        int64_t counted = 0;
        for (int k = 0; k < layout.ga; ++k) {
            const int64_t s0 = first + int64_t(k) * B;
            ModelInputs in;
            in.B = B;
            in.T = T;
            in.input_ids = gb.ids.data() + s0 * T;
            in.attention_mask = gb.mask.data() + s0 * T;
            in.token_type_ids = gb.types.data() + s0 * T;
            in.labels = gb.labels.data() + s0 * T;
            DropoutPlan drop;
            drop.training = true;
            drop.seed = job.seed;
            drop.step = uint64_t(step);
            drop.sample_offset = s0;
            const LossSum l = model->forward(in, drop);
            loss_sum += l.sum;
            counted += l.count;
            ddp.begin_micro_batch(k == layout.ga - 1);
            if (l.count > 0) model->backward(1.0 / total);
            ddp.end_micro_batch();
        }
        LOOM_CHECK(counted == local, "rank {} step {}: model counted {} labels, driver {}",
                   dp.rank(), step, counted, local);
        ddp.finalize_grads();
        run.losses.push_back(ddp.sum(loss_sum) / total);
        run.grad_norms.push_back(ddp.clip_grad_norm(job.max_grad_norm));
        ddp.step(job.lr);
        run.launched_by_hook += ddp.stats().launched_by_hook;
        run.sparse_rows += ddp.stats().sparse_rows;
    }
    const ParamTable& t = model->params();
    run.params.assign(t.params_data(), t.params_data() + t.flat_numel());
    run.noise_level.assign(size_t(t.flat_numel()), 0);
    for (const ParamRow& r : t.rows()) {
        run.row_at[r.offset] = r.name;
        const auto ends_with = [&](const std::string& suffix) {
            return r.name.size() >= suffix.size() &&
                   r.name.compare(r.name.size() - suffix.size(), suffix.size(), suffix) == 0;
        };
        int64_t b = -1, e = -1;
        if (ends_with("attention.self.key.bias")) {
            b = r.offset, e = r.offset + r.numel();
        } else if (ends_with("attn.c_attn.bias")) {  // GPT-2: (3C) = q, k, v biases
            b = r.offset + c.hidden_size, e = r.offset + 2 * c.hidden_size;
        }
        for (int64_t i = b; i < e; ++i) run.noise_level[size_t(i)] = 1;
    }
    if (job.gather_state) {
        for (auto& [name, tensor] : ddp.optimizer_state())
            run.optimizer_state[name] = tensor.clone();
    }
    return run;
}

// The same training, to float rounding:
// - per-step losses within relative 1e-6, gradient norms within 1e-5;
// - parameters: the bulk within 2e-6 + 1e-4 |p|; at most 1 in 10^4 elements
//   outside that, and none by more than 5% of one AdamW step (lr). Those few
//   are elements whose gradient sits near zero at some step: AdamW divides by
//   sqrt(v), so the rounding of a near-zero gradient becomes a visible part
//   of a step (measured: 1 element of ~170k, 1e-5 = lr / 200);
// - noise-level elements (DpRun::noise_level) only within AdamW's bound.
inline void expect_same_training(const DpRun& run, const DpRun& ref, const std::string& what,
                                 const DpJob& job) {
    ASSERT_EQ(run.losses.size(), ref.losses.size());
    for (size_t s = 0; s < ref.losses.size(); ++s) {
        EXPECT_NEAR(run.losses[s], ref.losses[s], 1e-6 * std::fabs(ref.losses[s]))
            << what << ": loss of step " << s;
        EXPECT_NEAR(run.grad_norms[s], ref.grad_norms[s], 1e-5 * ref.grad_norms[s])
            << what << ": grad norm of step " << s;
    }
    ASSERT_EQ(run.params.size(), ref.params.size());
    const int64_t n = int64_t(ref.params.size());
    int64_t outside_bulk = 0, bad = 0, first = -1;
    double max_diff = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double d = std::fabs(double(run.params[size_t(i)]) - double(ref.params[size_t(i)]));
        if (ref.noise_level[size_t(i)]) {
            if (!(d <= 2.0 * job.lr * double(job.steps))) ++bad;
            continue;
        }
        max_diff = std::max(max_diff, d);
        if (d <= 2e-6 + 1e-4 * std::fabs(double(ref.params[size_t(i)]))) continue;
        ++outside_bulk;
        if (first < 0) first = i;
        if (!(d <= 0.05 * job.lr)) ++bad;
    }
    std::string where;
    if (first >= 0) {
        auto it = ref.row_at.upper_bound(first);
        if (it != ref.row_at.begin()) {
            --it;
            where = " (" + it->second + "[" + std::to_string(first - it->first) +
                    "]: " + std::to_string(run.params[size_t(first)]) + " vs " +
                    std::to_string(ref.params[size_t(first)]) + ")";
        }
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad
                      << " parameters beyond 5% of an AdamW step; max |diff| " << max_diff
                      << "; first outside the bulk tolerance at " << first << where;
    EXPECT_LE(outside_bulk, n / 10000)
        << what << ": " << outside_bulk << " of " << n
        << " parameters outside 2e-6 + 1e-4 |p|; first at " << first << where;
    if (std::getenv("LOOM_DP_TEST_VERBOSE"))
        std::printf("%s: max |param diff| %.3g, %lld outside the bulk tolerance\n", what.c_str(),
                    max_diff, static_cast<long long>(outside_bulk));
}

}  // namespace loom::test
