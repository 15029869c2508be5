// build_step_engines (parallel/step_engines.h): for each layout it can build
// on the CPU in one process (one model; data parallel on CommLocal thread
// ranks; pipeline and tensor parallel on the same), it must pick the
// layout's engine and build it as one would by hand: one step through the
// factory's engine leaves the parameters bit for bit where the same step
// through the directly constructed engine leaves them, on every rank. The
// hand-built engines are what the trainer built before the factory existed.
// The optimizer settings differ from the defaults, so a factory that dropped
// them would train differently.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "comm/comm_local.h"
#include "models/model.h"
#include "models/model_config.h"
#include "optim/adamw.h"
#include "parallel/pipeline_parallel.h"
#include "parallel/single_step.h"
#include "parallel/step_engines.h"
#include "tiny_causal_lm.h"

namespace loom::test {
namespace {

// AdamW away from its defaults (and LAMB where asked): a factory that lost
// the optimizer config would update differently.
OptimizerConfig job_optimizer(OptimizerKind kind = OptimizerKind::adamw) {
    AdamWParams hp;
    hp.beta1 = 0.8;
    hp.beta2 = 0.95;
    hp.eps = 1e-6;
    hp.weight_decay = 0.1;
    OptimizerConfig c = adamw_config(hp);
    c.kind = kind;
    return c;
}

// Micro-batch k of a step, its dropout keyed by its first global sample.
MicroBatch keyed_micro(const CausalLmBatch& b, int k) {
    MicroBatch m = b.micro();
    m.dropout.training = true;
    m.dropout.seed = 7;
    m.dropout.step = 1;
    m.dropout.sample_offset = 2 * k;
    return m;
}

// Micro-batches [first, first + n) of the step.
struct Step {
    std::vector<CausalLmBatch> batches;
    std::vector<MicroBatch> micro;
    Step(int first, int n) {
        for (int k = first; k < first + n; ++k) batches.emplace_back(k);
        for (int i = 0; i < n; ++i) micro.push_back(keyed_micro(batches[size_t(i)], first + i));
    }
};

// One step as Trainer::train_step drives any engine, clipping on.
double drive(StepEngine& e, const std::vector<MicroBatch>& micro, double global_count) {
    e.begin_step();
    const double loss = e.run(micro, 1.0 / global_count);
    e.finalize_grads();
    const double norm = e.clip_grad_norm(0.05);
    e.step(1e-2);
    EXPECT_GT(norm, 0.05) << "the test means to clip";
    return loss;
}

std::vector<float> params_of(const ParamTable& t) {
    return std::vector<float>(t.params_data(), t.params_data() + t.flat_numel());
}

// Bit for bit, and moved by the step (an engine that did nothing fails).
void expect_same_step(const std::vector<float>& before, const std::vector<float>& factory,
                      const std::vector<float>& hand, const std::string& where) {
    ASSERT_EQ(factory.size(), hand.size()) << where;
    ASSERT_FALSE(factory.empty()) << where;
    EXPECT_EQ(std::memcmp(factory.data(), hand.data(), factory.size() * sizeof(float)), 0)
        << where << ": the factory's engine trained otherwise than the hand-built one";
    int64_t moved = 0;
    for (size_t i = 0; i < factory.size(); ++i) moved += factory[i] != before[i];
    EXPECT_GT(moved, int64_t(factory.size() / 2)) << where << ": the step left the parameters";
}

TEST(StepEngines, OneModelBuildsSingleStep) {
    const ModelConfig c = tiny_gpt2();
    const OptimizerConfig opt = job_optimizer(OptimizerKind::lamb);
    auto a = build_model(c), b = build_model(c);
    a->init(11);
    b->init(11);
    const std::vector<float> before = params_of(a->params());
    // A one-rank dp group is no data parallelism.
    auto dp = comm_local_create(1);
    EngineSpec spec;
    spec.dp = dp[0].get();
    spec.model = a.get();
    spec.optimizer = opt;
    const auto engines = build_step_engines(std::move(spec));
    EXPECT_EQ(engines->kind(), EngineKind::single);
    EXPECT_EQ(engines->pipeline(), nullptr);
    EXPECT_EQ(engines->data_parallel(), nullptr);

    FlatOptimizer hand_opt(b->params(), opt);
    SingleStep hand(*b, hand_opt);
    const Step s(0, 2);
    const double total = 2.0 * double(s.micro[0].label_count);
    EXPECT_EQ(drive(engines->engine(), s.micro, total), drive(hand, s.micro, total));
    expect_same_step(before, params_of(a->params()), params_of(b->params()), "single");
    EXPECT_EQ(engines->step_count(), 1);
    // The checkpoint's state is the optimizer's (LAMB's moments by name).
    const auto state = engines->optimizer_state(), want = hand_opt.state_tensors();
    ASSERT_EQ(state.size(), want.size());
    ASSERT_FALSE(state.empty());
    for (const auto& [name, t] : want) {
        ASSERT_TRUE(state.count(name)) << name;
        EXPECT_EQ(std::memcmp(state.at(name).raw(), t.raw(), t.nbytes()), 0) << name;
    }
}

TEST(StepEngines, TwoReplicasBuildDataParallel) {
    const ModelConfig c = tiny_gpt2();
    const OptimizerConfig opt = job_optimizer();
    DpOptions o;
    o.zero = ZeroStage::optimizer;
    o.bucket_size_mb = 0.01;
    std::vector<std::vector<float>> before(2), got(2), want(2);
    std::vector<EngineKind> kind(2);
    std::vector<ZeroStage> zero(2);
    comm_local_run(2, [&](Communicator& dp) {
        const int r = dp.rank();
        auto a = build_model(c), b = build_model(c);
        a->init(11);
        b->init(11);
        before[size_t(r)] = params_of(a->params());
        EngineSpec spec;
        spec.dp = &dp;
        spec.model = a.get();
        spec.optimizer = opt;
        spec.dp_options = o;
        const auto engines = build_step_engines(std::move(spec));
        kind[size_t(r)] = engines->kind();
        ASSERT_NE(engines->data_parallel(), nullptr);
        zero[size_t(r)] = engines->data_parallel()->zero();
        DataParallel hand(*b, dp, opt, o);
        hand.broadcast_parameters();
        // Each replica its own half of the global batch.
        const Step s(2 * r, 2);
        const double total = 4.0 * double(s.micro[0].label_count);
        drive(engines->engine(), s.micro, total);
        drive(hand, s.micro, total);
        got[size_t(r)] = params_of(a->params());
        want[size_t(r)] = params_of(b->params());
    });
    for (int r = 0; r < 2; ++r) {
        EXPECT_EQ(kind[size_t(r)], EngineKind::data_parallel);
        EXPECT_EQ(zero[size_t(r)], ZeroStage::optimizer) << "the dp options did not reach it";
        expect_same_step(before[size_t(r)], got[size_t(r)], want[size_t(r)],
                         "dp rank " + std::to_string(r));
    }
    EXPECT_EQ(got[0], got[1]) << "the replicas left the step apart";
}

// This rank's stage models as the trainer builds them: one instance per
// micro-batch in flight and chunk, sharing the first's buffers.
std::vector<std::unique_ptr<StageModel>> stage_models(const ModelConfig& c, ScheduleKind kind,
                                                      int V, int M, int P, int stage,
                                                      Communicator* tp) {
    const int64_t n_apps = model_layer_applications(c);
    const int slots = schedule_max_in_flight(kind, P, stage, M, V);
    std::vector<std::unique_ptr<StageModel>> models;
    ModelPlacement place;
    if (tp) place.tp = ModelTp{tp->rank(), tp->size(), tp};
    for (int k = 0; k < slots * V; ++k) {
        place.part = pipeline_chunk_part(n_apps, P, V, stage, k / slots);
        if (k > 0) place.part.share_with = &models[0]->params();
        auto m = build_model(c, place);
        m->set_logits_scope(LogitsScope::labelled_positions);
        models.push_back(std::move(m));
    }
    dynamic_cast<Model&>(*models[0]).init(11);
    return models;
}

struct PipeCase {
    const char* name;
    int pp = 1, tp = 1;
    ScheduleKind kind = ScheduleKind::one_f_one_b;
    int V = 1;
};

void PrintTo(const PipeCase& c, std::ostream* os) {
    *os << c.name;
}

class StepEnginesPipeline : public ::testing::TestWithParam<PipeCase> {};

TEST_P(StepEnginesPipeline, BuildsThePipelineEngine) {
    const PipeCase pc = GetParam();
    const ModelConfig c = tiny_gpt2();
    const OptimizerConfig opt = job_optimizer();
    const int M = 4, n = pc.pp * pc.tp;
    const size_t N = static_cast<size_t>(n);
    std::vector<std::vector<float>> before(N), got(N), want(N);
    std::vector<EngineKind> kind(N);
    std::vector<int> stages(N), virt(N);
    comm_local_run(n, [&](Communicator& world) {
        const int r = world.rank();
        // Ranks pp-major: rank = stage * tp + tp rank.
        const int stage = r / pc.tp, tr = r % pc.tp;
        std::vector<int> pp_ranks, tp_ranks;
        for (int s = 0; s < pc.pp; ++s) pp_ranks.push_back(s * pc.tp + tr);
        for (int t = 0; t < pc.tp; ++t) tp_ranks.push_back(stage * pc.tp + t);
        auto pp = world.split(pp_ranks, "pp");
        auto tp = world.split(tp_ranks, "tp");
        auto dp = world.split({r}, "dp");
        Communicator* tpc = pc.tp > 1 ? tp.get() : nullptr;
        EngineSpec spec;
        spec.dp = dp.get();
        spec.pp = pp.get();
        spec.tp = tpc;
        spec.schedule = pc.kind;
        spec.virtual_stages = pc.V;
        spec.optimizer = opt;
        spec.stage_models = stage_models(c, pc.kind, pc.V, M, pc.pp, stage, tpc);
        const auto engines = build_step_engines(std::move(spec));
        kind[size_t(r)] = engines->kind();
        ASSERT_NE(engines->pipeline(), nullptr);
        stages[size_t(r)] = engines->pipeline()->n_stages();
        virt[size_t(r)] = engines->pipeline()->n_virtual();
        PipelineParallel hand(stage_models(c, pc.kind, pc.V, M, pc.pp, stage, tpc), *pp, *dp, opt,
                              DpOptions{}, pc.kind, pc.V);
        before[size_t(r)] = params_of(hand.model().params());
        const Step s(0, M);
        const double total = double(M) * double(s.micro[0].label_count);
        EXPECT_EQ(drive(engines->engine(), s.micro, total), drive(hand, s.micro, total));
        got[size_t(r)] = params_of(engines->pipeline()->model().params());
        want[size_t(r)] = params_of(hand.model().params());
    });
    for (int r = 0; r < n; ++r) {
        EXPECT_EQ(kind[size_t(r)], EngineKind::pipeline);
        EXPECT_EQ(stages[size_t(r)], pc.pp);
        EXPECT_EQ(virt[size_t(r)], pc.V);
        expect_same_step(before[size_t(r)], got[size_t(r)], want[size_t(r)],
                         std::string(pc.name) + " rank " + std::to_string(r));
    }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, StepEnginesPipeline,
    ::testing::Values(PipeCase{"pp2_1f1b", 2, 1, ScheduleKind::one_f_one_b, 1},
                      PipeCase{"pp2_interleaved", 2, 1, ScheduleKind::interleaved, 2},
                      PipeCase{"tp2", 1, 2, ScheduleKind::one_f_one_b, 1}),
    [](const ::testing::TestParamInfo<PipeCase>& i) { return std::string(i.param.name); });

TEST(StepEngines, RefusesASpecThatIsNoLayout) {
    const ModelConfig c = tiny_gpt2();
    EngineSpec none;
    EXPECT_THROW(build_step_engines(std::move(none)), std::exception);
    // Stage models without pipeline or tensor parallelism.
    EngineSpec stray;
    stray.stage_models.push_back(build_model(c));
    auto whole = build_model(c);
    stray.model = whole.get();
    EXPECT_THROW(build_step_engines(std::move(stray)), std::exception);
}

}  // namespace
}  // namespace loom::test
