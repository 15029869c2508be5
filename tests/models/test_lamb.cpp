// LAMB against the PyTorch reference in tests/data/optim (make_lamb_reference.py):
// parameters after each of 5 steps with warmup, with and without bias
// correction, trust ratios per tensor, exclusions (bias, LayerNorm), a tensor
// starting at zero (trust ratio 1), and a state round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "hf_fixture.h"
#include "optim/lamb.h"
#include "optim/lr_schedule.h"

namespace loom::test {
namespace {

using json = nlohmann::json;

json lamb_reference() {
    std::ifstream in(std::string(LOOM_TEST_DATA_DIR) + "/optim/lamb_reference.json");
    EXPECT_TRUE(in.good()) << "missing tests/data/optim/lamb_reference.json";
    return json::parse(in);
}

bool excluded(const std::string& name) {
    // ALBERT's exclude_from_weight_decay list: ["LayerNorm", "layer_norm", "bias"].
    return name.find("bias") != std::string::npos || name.find("LayerNorm") != std::string::npos ||
           name.find("layer_norm") != std::string::npos;
}

// A table with the reference's rows, in its order, excluded rows not decaying.
std::unique_ptr<ParamTable> reference_table(const json& c) {
    auto t = std::make_unique<ParamTable>();
    for (const auto& [name, p] : c["params"].items()) {
        ParamRow r;
        r.name = name;
        const auto dims = p["shape"].get<std::vector<int64_t>>();
        r.shape = Shape::from(dims.begin(), dims.end());
        r.decay = !excluded(name);
        t->add(r);
    }
    t->allocate();
    for (const auto& [name, p] : c["params"].items()) {
        const auto values = p["values"].get<std::vector<float>>();
        std::memcpy(t->param(t->index(name)), values.data(), values.size() * sizeof(float));
    }
    return t;
}

void set_grads(ParamTable& t, const json& grads) {
    for (const auto& [name, g] : grads.items()) {
        const auto values = g.get<std::vector<float>>();
        std::memcpy(t.grad(t.index(name)), values.data(), values.size() * sizeof(float));
    }
}

LambParams params_of(const json& c) {
    LambParams hp;
    hp.lr = c["lr"];
    hp.beta1 = c["beta1"];
    hp.beta2 = c["beta2"];
    hp.eps = c["eps"];
    hp.weight_decay = c["weight_decay"];
    hp.bias_correction = c["bias_correction"];
    return hp;
}

TEST(Lamb, MatchesTorchReferenceWithWarmup) {
    const json ref = lamb_reference();
    ASSERT_EQ(ref["cases"].size(), 2u);
    for (const json& c : ref["cases"]) {
        SCOPED_TRACE(fmt::format("bias_correction={}", c["bias_correction"].get<bool>()));
        auto t = reference_table(c);
        Lamb opt(*t, params_of(c), DecayPolicy::table);
        LrScheduleArgs la;
        la.type = LrSchedulerType::linear;
        la.base_lr = c["lr"];
        la.warmup_steps = c["warmup_steps"];
        la.total_steps = c["total_steps"];
        const LrSchedule schedule(la);
        int64_t step = 0;
        for (const json& s : c["steps"]) {
            SCOPED_TRACE(fmt::format("step {}", step));
            const double lr = schedule.lr_at(step);
            EXPECT_NEAR(lr, s["lr"].get<double>(), 1e-15);
            set_grads(*t, s["grads"]);
            opt.step(lr);
            ++step;
            for (const auto& [name, want] : s["params"].items()) {
                const int i = t->index(name);
                const auto w = want.get<std::vector<double>>();
                double max_diff = 0, scale = 0;
                for (size_t k = 0; k < w.size(); ++k) {
                    max_diff = std::max(max_diff, std::fabs(double(t->param(i)[k]) - w[k]));
                    scale = std::max(scale, std::fabs(w[k]));
                }
                EXPECT_LT(max_diff, 2e-6 * std::max(scale, 1.0)) << name;
                const double trust = s["trust_ratio"][name];
                EXPECT_NEAR(opt.last_stats()[size_t(i)].trust_ratio, trust, 1e-5 * trust) << name;
            }
        }
        // The references exercise every branch: adapted rows with ratio != 1,
        // excluded rows, and the zero tensor's ratio 1.
        const json& last = c["steps"].back()["trust_ratio"];
        EXPECT_NE(last["predictions.dense.weight"].get<double>(), 1.0);  // non-zero after step 1
        EXPECT_EQ(c["steps"][0]["trust_ratio"]["predictions.dense.weight"].get<double>(), 1.0);
        EXPECT_NE(last["albert.embeddings.word_embeddings.weight"].get<double>(), 1.0);
        EXPECT_EQ(opt.step_count(), 5);
    }
}

TEST(Lamb, ExcludedRowsTakeAPlainAdamStep) {
    // One step with zero moments: an excluded row moves by exactly
    // lr * g / (|g| + eps) (bias-corrected Adam's first step), whatever its norm.
    ParamTable t;
    ParamRow w;
    w.name = "dense.weight";
    w.shape = Shape({4});
    ParamRow b;
    b.name = "dense.bias";
    b.shape = Shape({4});
    b.decay = false;
    t.add(w);
    t.add(b);
    t.allocate();
    for (int i = 0; i < 2; ++i)
        for (int k = 0; k < 4; ++k) {
            t.param(i)[k] = 10.0f * float(k + 1);
            t.grad(i)[k] = 0.5f * float(k + 1);
        }
    LambParams hp;
    hp.weight_decay = 0.1;
    Lamb opt(t, hp);
    opt.step(0.01);
    for (int k = 0; k < 4; ++k)
        EXPECT_NEAR(t.param(1)[k],
                    10.0f * float(k + 1) - 0.01f * float(0.5 * (k + 1) / (0.5 * (k + 1) + 1e-6)),
                    1e-5);
    EXPECT_EQ(opt.last_stats()[1].trust_ratio, 1.0);
    // The adapted row: update u = 1 + 0.1 p per element, step lr * ||p|| / ||u||.
    double pn = 0, un = 0;
    for (int k = 0; k < 4; ++k) {
        const double p = 10.0 * (k + 1), u = 0.5 * (k + 1) / (0.5 * (k + 1) + 1e-6) + 0.1 * p;
        pn += p * p;
        un += u * u;
    }
    EXPECT_NEAR(opt.last_stats()[0].trust_ratio, std::sqrt(pn / un), 1e-6);
}

TEST(Lamb, AlbertExclusionsAreBiasAndLayerNorm) {
    auto m = build_model(load_hf_config(hf_dir() + "/albert-mlm"));
    m->init(3);
    ParamTable& t = m->params();
    int adapted = 0, plain = 0;
    for (const ParamRow& r : t.rows()) {
        EXPECT_EQ(r.decay, !excluded(r.name)) << r.name;
        (r.decay ? adapted : plain)++;
    }
    EXPECT_GT(adapted, 0);
    EXPECT_GT(plain, 0);
}

TEST(Lamb, StateRoundTripContinuesIdentically) {
    const json ref = lamb_reference();
    const json& c = ref["cases"][0];
    auto a = reference_table(c);
    auto b = reference_table(c);
    Lamb oa(*a, params_of(c));
    for (int s = 0; s < 3; ++s) {
        set_grads(*a, c["steps"][size_t(s)]["grads"]);
        oa.step(0.01);
    }
    std::memcpy(b->params_data(), a->params_data(), size_t(a->flat_numel()) * sizeof(float));
    Lamb ob(*b, params_of(c));
    std::map<std::string, Tensor> saved;
    for (const auto& [k, v] : oa.state_tensors()) saved[k] = v.clone();
    ob.load_state(saved, oa.step_count());
    set_grads(*a, c["steps"][3]["grads"]);
    set_grads(*b, c["steps"][3]["grads"]);
    oa.step(0.01);
    ob.step(0.01);
    EXPECT_EQ(0, std::memcmp(a->params_data(), b->params_data(),
                             size_t(a->flat_numel()) * sizeof(float)));
    saved.erase("exp_avg_sq.predictions.dense.weight");
    try {
        ob.load_state(saved, 4);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("exp_avg_sq.predictions.dense.weight"),
                  std::string::npos);
    }
}

}  // namespace
}  // namespace loom::test
