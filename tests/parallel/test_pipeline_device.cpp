// PipelineParallel over stage models whose parameters and activations live on
// a backend (tests/test_backends.h): the activations and their gradients go
// from stage to stage in the models' own memory and type, and so do the
// shared rows' gradient sums (GPT-2's tied word table, held by the first and
// the last stage). On the staged stand-in, whose host copies are poisoned,
// two clipped steps of each layout must leave every rank's parameters, the
// losses and the gathered model bit for bit where the CPU run leaves them.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm_local.h"
#include "models/model.h"
#include "models/model_config.h"
#include "optim/adamw.h"
#include "parallel/pipeline_parallel.h"
#include "test_backends.h"
#include "tiny_causal_lm.h"

namespace loom::test {
namespace {

struct Layout {
    const char* name;
    int pp = 2, dp = 1;
    ScheduleKind kind = ScheduleKind::one_f_one_b;
    int V = 1;
};

struct RankResult {
    std::vector<double> losses;
    std::vector<float> params;
    std::map<std::string, Tensor> gathered;
};

std::vector<std::unique_ptr<StageModel>> stage_models(const ModelConfig& c, const Layout& l,
                                                      int M, int stage, Backend& be) {
    const int64_t n_apps = model_layer_applications(c);
    const int slots = schedule_max_in_flight(l.kind, l.pp, stage, M, l.V);
    std::vector<std::unique_ptr<StageModel>> models;
    ModelPlacement place;
    place.device = ParamDevice{&be};
    for (int k = 0; k < slots * l.V; ++k) {
        place.part = pipeline_chunk_part(n_apps, l.pp, l.V, stage, k / slots);
        if (k > 0) place.part.share_with = &models[0]->params();
        auto m = build_model(c, place);
        m->set_logits_scope(LogitsScope::labelled_positions);
        models.push_back(std::move(m));
    }
    dynamic_cast<Model&>(*models[0]).init(11);
    poison_host_copies(models[0]->params());
    return models;
}

// Two clipped steps of layout `l` with every stage model on `be`.
std::vector<RankResult> train(const Layout& l, Backend& be) {
    const ModelConfig c = tiny_gpt2();
    const int M = 4, n = l.pp * l.dp;
    std::vector<RankResult> out(static_cast<size_t>(n));
    comm_local_run(n, [&](Communicator& world) {
        const int r = world.rank();
        const int stage = r / l.dp, d = r % l.dp;  // dp fastest
        std::vector<int> pp_ranks, dp_ranks;
        for (int s = 0; s < l.pp; ++s) pp_ranks.push_back(s * l.dp + d);
        for (int k = 0; k < l.dp; ++k) dp_ranks.push_back(stage * l.dp + k);
        auto pp = world.split(pp_ranks, "pp");
        auto dp = world.split(dp_ranks, "dp");
        PipelineParallel pipe(stage_models(c, l, M, stage, be), *pp, *dp,
                              adamw_config(AdamWParams{}), DpOptions{}, l.kind, l.V);
        RankResult& res = out[size_t(r)];
        for (int step = 0; step < 2; ++step) {
            // Each replica its own micro-batches.
            std::vector<CausalLmBatch> batches;
            std::vector<MicroBatch> micro;
            for (int k = 0; k < M; ++k) batches.emplace_back(100 * step + 10 * d + k);
            for (int k = 0; k < M; ++k) {
                MicroBatch mb = batches[size_t(k)].micro();
                mb.dropout.training = true;
                mb.dropout.seed = 3;
                mb.dropout.step = uint64_t(step);
                mb.dropout.sample_offset = int64_t(2 * (d * M + k));
                micro.push_back(mb);
            }
            const double total = double(l.dp * M) * double(micro[0].label_count);
            pipe.begin_step();
            res.losses.push_back(pipe.run(micro, 1.0 / total));
            pipe.finalize_grads();
            res.losses.push_back(pipe.clip_grad_norm(0.05));
            pipe.step(1e-2);
        }
        // The gather first: it must bring the host copies up to date itself.
        res.gathered = pipe.gather_params(/*to_all=*/true);
        const ParamTable& t = pipe.model().params();
        t.download_params();
        res.params.assign(t.params_data(), t.params_data() + t.flat_numel());
    });
    return out;
}

class PipelineOnDevice : public ::testing::TestWithParam<Layout> {};

TEST_P(PipelineOnDevice, StagedTrainsAsTheCpu) {
    const Layout l = GetParam();
    const std::vector<RankResult> cpu = train(l, cpu_backend());
    StagedBackend& staged = static_cast<StagedBackend&>(test_backend("staged"));
    const size_t up = staged.uploaded;
    const std::vector<RankResult> dev = train(l, staged);
    EXPECT_GT(staged.uploaded, up) << "the stage models did not live on the staged backend";
    ASSERT_EQ(cpu.size(), dev.size());
    for (size_t r = 0; r < cpu.size(); ++r) {
        const std::string where = std::string(l.name) + " rank " + std::to_string(r);
        EXPECT_EQ(dev[r].losses, cpu[r].losses) << where << ": losses and norms";
        ASSERT_EQ(dev[r].params.size(), cpu[r].params.size()) << where;
        ASSERT_FALSE(cpu[r].params.empty()) << where;
        EXPECT_EQ(std::memcmp(dev[r].params.data(), cpu[r].params.data(),
                              cpu[r].params.size() * sizeof(float)),
                  0)
            << where << ": parameters after two steps";
        ASSERT_EQ(dev[r].gathered.size(), cpu[r].gathered.size()) << where;
        for (const auto& [name, want] : cpu[r].gathered) {
            const Tensor& got = dev[r].gathered.at(name);
            ASSERT_EQ(got.nbytes(), want.nbytes()) << where << " " << name;
            EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0)
                << where << ": gathered " << name;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, PipelineOnDevice,
    ::testing::Values(Layout{"pp2_1f1b", 2, 1, ScheduleKind::one_f_one_b, 1},
                      Layout{"pp2_interleaved", 2, 1, ScheduleKind::interleaved, 2},
                      Layout{"pp2_dp2_gpipe", 2, 2, ScheduleKind::simple, 1}),
    [](const ::testing::TestParamInfo<Layout>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace loom::test
