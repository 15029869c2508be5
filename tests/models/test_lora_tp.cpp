// LoRA under tensor parallelism (nn/lora.h), on CommLocal threads (tp 2),
// against the same adapter model built whole: Llama with grouped-query
// attention (fused q|k|v of unequal widths, gate|up), GPT-2 (c_attn: one
// Conv1D packing q, k, v) and BERT (post-LN).
//
// Invariant checked: an adapter on a column-parallel linear keeps the rows
// of B that match the base's output slice, one on a row-parallel linear the
// columns of A that match its input slice; loss, outputs and every adapter
// gradient (split rows assembled over tp) equal the 1-rank run's, with
// lora_dropout 0 and > 0 (the mask is keyed by global element, so a split
// input draws the whole input's mask); the replicated halves (A of a column
// linear, B of a row linear) hold the same gradient on every tp rank, bit for
// bit, so they stay equal without a sum over tp. On the staged stand-in
// (tests/test_backends.h) a tp slice computes the CPU slice's numbers exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "comm/comm_local.h"
#include "hf_fixture.h"
#include "parallel/tp_layers.h"
#include "test_backends.h"

namespace loom::test {
namespace {

constexpr int k_tp = 2;

struct StepOut {
    double loss = 0;
    std::map<std::string, std::vector<float>> grads;       // adapter rows, global
    std::map<std::string, std::vector<float>> replicated;  // unsplit adapter rows, as held
    std::map<std::string, std::vector<float>> outputs;
};

std::vector<float> values(const Tensor& t) {
    const Tensor f = t.dtype == DType::f32 ? t : t.to(DType::f32);
    const float* p = static_cast<const float*>(f.raw());
    return std::vector<float>(p, p + f.numel());
}

// Every adapter row set from a global tensor that is a pure function of its
// name and element (B nonzero, so A gets a gradient), cut to this rank's slice.
void set_adapters(Model& m) {
    ParamTable& t = m.params();
    for (int i = 0; i < t.size(); ++i) {
        const ParamRow& r = t.row(i);
        if (!r.adapter) continue;
        const Shape global = r.shard.sharded() ? r.shard.global : r.shape;
        Tensor g = Tensor::empty(DType::f32, global, r.name);
        float* p = static_cast<float*>(g.raw());
        const double h = double(std::hash<std::string>{}(r.name) % 97);
        for (int64_t e = 0; e < g.numel(); ++e) p[e] = float(0.1 * std::sin(0.37 * double(e) + h));
        const Tensor mine = r.shard.sharded() ? tp_shard_row_tensor(r.shard, g) : g;
        std::memcpy(t.param(i), mine.raw(), size_t(r.numel()) * sizeof(float));
    }
    t.upload_params();
}

StepOut run(Model& m, const ModelInputs& in, Communicator* tp, bool training) {
    m.zero_grad();
    DropoutPlan drop;
    drop.training = training;
    drop.seed = 11;
    drop.step = 3;
    const LossSum l = m.forward(in, drop);
    m.backward(1.0 / double(l.count));
    StepOut r;
    r.loss = l.sum;
    const ParamTable& t = m.params();
    t.download_grads();
    for (int i = 0; i < t.size(); ++i) {
        const ParamRow& row = t.row(i);
        if (!row.adapter) continue;
        Tensor g = t.grad_tensor(i);
        if (!row.shard.sharded()) r.replicated[row.name] = values(g);
        if (row.shard.sharded()) g = tp_assemble_row_tensor(row.shard, g, *tp);
        r.grads[row.name] = values(g);
    }
    for (const auto& [name, o] : m.outputs()) r.outputs[name] = values(o);
    return r;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                 const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double scale = 0, worst = 0;
    for (float w : want) scale = std::max(scale, double(std::fabs(w)));
    for (size_t i = 0; i < want.size(); ++i)
        worst = std::max(worst, std::fabs(double(got[i]) - double(want[i])));
    EXPECT_LE(worst, 1e-7 + rtol * scale) << what << " (scale " << scale << ")";
}

struct Case {
    const char* fixture;
    std::vector<std::string> targets;
};

const std::vector<Case>& cases() {
    static const std::vector<Case> c = {
        {"llama-lm", {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}},
        {"gpt2-lm", {"c_attn", "c_proj", "c_fc"}},
        {"bert-cls", {"query", "value", "dense"}}};
    return c;
}

ModelConfig lora_config(const Fixture& f, const Case& k, double p) {
    ModelConfig c = f.config;
    c.lora.r = 4;
    c.lora.lora_alpha = 8;
    c.lora.lora_dropout = p;
    c.lora.target_modules = k.targets;
    return c;
}

TEST(LoraTensorParallel, AdaptersEqualTheWholeModel) {
    for (const Case& k : cases()) {
        for (const double p : {0.0, 0.3}) {
            SCOPED_TRACE(std::string(k.fixture) + " lora_dropout " + std::to_string(p));
            const Fixture f(k.fixture);
            const ModelConfig c = lora_config(f, k, p);
            const ModelInputs in = f.inputs();
            const std::string weights = f.dir + "/model.safetensors";
            auto whole = build_model(c);
            whole->load(SafetensorsFile::open(weights));
            set_adapters(*whole);
            const StepOut ref = run(*whole, in, nullptr, true);
            std::vector<StepOut> got(k_tp);
            int64_t split = 0;
            comm_local_run(k_tp, [&](Communicator& tp) {
                ModelPlacement place;
                place.tp = ModelTp{tp.rank(), tp.size(), &tp};
                auto m = build_model(c, place);
                m->load(SafetensorsFile::open(weights));
                set_adapters(*m);
                got[size_t(tp.rank())] = run(*m, in, &tp, true);
                if (tp.rank() == 0)
                    for (const ParamRow& r : m->params().rows())
                        split += r.adapter && r.shard.sharded();
            });
            // Both kinds of split: B of column linears and A of row linears.
            EXPECT_GE(split, 2);
            for (int r = 0; r < k_tp; ++r) {
                SCOPED_TRACE("tp rank " + std::to_string(r));
                const StepOut& g = got[size_t(r)];
                EXPECT_NEAR(g.loss, ref.loss, 1e-5 * std::fabs(ref.loss));
                ASSERT_EQ(g.grads.size(), ref.grads.size());
                for (const auto& [n, want] : ref.grads) expect_near(g.grads.at(n), want, 2e-5, n);
                for (const auto& [n, want] : ref.outputs)
                    if (g.outputs.count(n)) expect_near(g.outputs.at(n), want, 1e-5, n);
            }
            EXPECT_FALSE(got[0].replicated.empty());
            for (const auto& [n, g0] : got[0].replicated)
                EXPECT_EQ(got[1].replicated.at(n), g0) << n;
        }
    }
}

TEST(LoraTensorParallel, OnTheStagedBackendAsOnTheCpu) {
    const Case& k = cases()[0];
    const Fixture f(k.fixture);
    const ModelConfig c = lora_config(f, k, 0.3);
    const ModelInputs in = f.inputs();
    std::vector<StepOut> cpu(k_tp), dev(k_tp);
    for (const bool staged : {false, true}) {
        comm_local_run(k_tp, [&](Communicator& tp) {
            ModelPlacement place;
            place.tp = ModelTp{tp.rank(), tp.size(), &tp};
            if (staged) place.device.be = &test_backend("staged");
            auto m = build_model(c, place);
            m->load(SafetensorsFile::open(f.dir + "/model.safetensors"));
            set_adapters(*m);
            poison_host_copies(m->params());
            (staged ? dev : cpu)[size_t(tp.rank())] = run(*m, in, &tp, true);
        });
    }
    for (int r = 0; r < k_tp; ++r) {
        EXPECT_EQ(dev[size_t(r)].loss, cpu[size_t(r)].loss);
        ASSERT_EQ(dev[size_t(r)].grads.size(), cpu[size_t(r)].grads.size());
        for (const auto& [n, w] : cpu[size_t(r)].grads)
            EXPECT_EQ(dev[size_t(r)].grads.at(n), w) << n;
    }
}

}  // namespace
}  // namespace loom::test
