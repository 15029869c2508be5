// Tensor and pipeline parallelism on the one model stack over a device
// backend: tp 2, pp 2 and pp 2 x tp 2 (CommLocal threads) train a tiny BERT
// masked LM and a tiny GPT-2 causal LM (tied head: the vocab-parallel word
// table and cross-entropy; under pp the word table's gradient summed between
// the first and the last stage) on the staged stand-in
// (tests/test_backends.h), the activations' all-reduces and the stages'
// messages going over the groups' twins (TrainerOptions::make_stack_group),
// each stage's host copies poisoned with NaN so that any host read of the
// backend's memory shows. The run must be the CPU's run of the same layout
// bit for bit (per-step losses, evaluation, checkpoint, exported model) and
// the 1-rank run within the limits tests/cli/train_tp.sh holds tp 2 to.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "comm/comm_local.h"
#include "io/safetensors.h"
#include "test_backends.h"
#include "trainer_e2e_util.h"

namespace loom::test {
namespace {

struct Layout {
    const char* name;
    int pp = 1, tp = 1;
    int ranks() const { return pp * tp; }
};

struct TpRun {
    explicit TpRun(int n) : ranks(size_t(n)), staged(size_t(n), false), twin(size_t(n), false) {}
    std::vector<TrainResult> ranks;
    std::vector<bool> staged;
    // The slice's activations reduce over the tp group's twin, not the group
    // (tp > 1; true where tp is 1).
    std::vector<bool> twin;
};

class TrainerTpOnDevice : public TrainDir,
                          public ::testing::WithParamInterface<std::tuple<std::string, Layout>> {
  protected:
    const Layout& layout() const { return std::get<1>(GetParam()); }
    Job lm_job(const std::string& out, bool parallel) const {
        std::vector<std::string> o;
        if (parallel && layout().tp > 1)
            o.push_back("distribution.tensor_parallel_degree=" + std::to_string(layout().tp));
        if (parallel && layout().pp > 1) {
            o.push_back("distribution.pipeline_parallel_degree=" + std::to_string(layout().pp));
            o.push_back("distribution.microbatches=2");
        }
        return job(job_text(std::get<0>(GetParam()), out,
                            "  max_steps: 4\n  max_grad_norm: 1.0\n  weight_decay: 0.01\n"
                            "  eval_strategy: steps\n  eval_steps: 2\n"
                            "  save_strategy: steps\n  save_steps: 4\n"),
                   o);
    }

    // The layout over CommLocal threads (dp of one rank; ranks pp-major:
    // rank = stage * tp + tp rank); on the staged backend when `device`.
    TpRun run_tp(bool device, const std::string& out) const {
        const Layout l = layout();
        TpRun r(l.ranks());
        comm_local_run(l.ranks(), [&](Communicator& world) {
            const int rank = world.rank(), stage = rank / l.tp, tr = rank % l.tp;
            std::vector<int> pp_ranks, tp_ranks;
            for (int s = 0; s < l.pp; ++s) pp_ranks.push_back(s * l.tp + tr);
            for (int k = 0; k < l.tp; ++k) tp_ranks.push_back(stage * l.tp + k);
            const std::unique_ptr<Communicator> dp = world.split({rank}, "dp");
            const std::unique_ptr<Communicator> pp = world.split(pp_ranks, "pp");
            const std::unique_ptr<Communicator> tp = world.split(tp_ranks, "tp");
            TrainerOptions o = quiet();
            o.world_comm = &world;
            o.dp_comm = dp.get();
            o.pp_comm = pp.get();
            o.tp_comm = tp.get();
            if (device) {
                o.stack_device = [] { return &test_backend("staged"); };
                o.make_stack_group = [](Communicator& g) {
                    std::vector<int> all(size_t(g.size()));
                    std::iota(all.begin(), all.end(), 0);
                    return g.split(all, g.name() + "-twin");
                };
            }
            Trainer t(lm_job(out, true), o);
            const ModelTp& slice = t.train_model().placement().tp;
            r.twin[size_t(rank)] =
                l.tp == 1 || (slice.buffers != nullptr && slice.buffers != tp.get() &&
                              slice.buffers->size() == l.tp && slice.comm == tp.get());
            const ParamTable& p = t.train_model().params();
            r.staged[size_t(rank)] = p.staged();
            poison_host_copies(p);
            r.ranks[size_t(rank)] = t.train();
        });
        return r;
    }

    static std::vector<float> floats(const Tensor& t) {
        const Tensor f = t.to(DType::f32);
        return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
    }
};

TEST_P(TrainerTpOnDevice, TrainsAsTheCpuAndTheOneRankRun) {
    const TpRun cpu = run_tp(false, "cpu");
    const TpRun dev = run_tp(true, "dev");
    const int n_ranks = layout().ranks();
    for (int r = 0; r < n_ranks; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        EXPECT_FALSE(cpu.staged[size_t(r)]);
        EXPECT_TRUE(dev.staged[size_t(r)]) << "the stage's table is not on the staged backend";
        if (layout().tp > 1) {
            EXPECT_FALSE(cpu.twin[size_t(r)]);
        }
        EXPECT_TRUE(dev.twin[size_t(r)]) << "no buffer twin of the tp group";
        ASSERT_EQ(cpu.ranks[size_t(r)].step_losses.size(), 4u);
        EXPECT_EQ(dev.ranks[size_t(r)].step_losses, cpu.ranks[size_t(r)].step_losses);
        for (double l : dev.ranks[size_t(r)].step_losses) EXPECT_TRUE(std::isfinite(l));
        const auto& got = dev.ranks[size_t(r)].final_metrics;
        const auto& ref = cpu.ranks[size_t(r)].final_metrics;
        ASSERT_EQ(got.size(), ref.size());
        ASSERT_FALSE(ref.empty());
        for (size_t i = 0; i < ref.size(); ++i) {
            EXPECT_EQ(got[i].first, ref[i].first);
            if (ref[i].first.find("runtime") != std::string::npos ||
                ref[i].first.find("per_second") != std::string::npos)
                continue;  // timings
            EXPECT_EQ(got[i].second, ref[i].second) << ref[i].first;
        }
    }
    // Every rank reports the one loss.
    for (int r = 1; r < n_ranks; ++r)
        EXPECT_EQ(dev.ranks[size_t(r)].step_losses, dev.ranks[0].step_losses);

    // Checkpoints and the export hold global tensors: the same bytes.
    for (const char* f : {"checkpoint-4/model.safetensors", "checkpoint-4/optimizer.safetensors",
                          "model.safetensors"}) {
        SafetensorsFile a = SafetensorsFile::open(path(std::string("dev/") + f));
        SafetensorsFile b = SafetensorsFile::open(path(std::string("cpu/") + f));
        ASSERT_EQ(a.names(), b.names()) << f;
        ASSERT_FALSE(a.names().empty()) << f;
        for (const std::string& n : a.names()) {
            const std::vector<float> x = floats(a.get(n)), y = floats(b.get(n));
            ASSERT_EQ(x.size(), y.size()) << f << ": " << n;
            EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0)
                << f << ": " << n;
        }
    }

    // The whole model on one rank: the limits of tests/cli/train_tp.sh (the
    // row-parallel sums add partial GEMMs in another order; attention key
    // biases move by rounding noise only, so a looser limit there).
    const TrainResult one = Trainer(lm_job("one", false), quiet()).train();
    ASSERT_EQ(one.step_losses.size(), 4u);
    for (size_t s = 0; s < 4; ++s)
        EXPECT_NEAR(dev.ranks[0].step_losses[s], one.step_losses[s],
                    1e-5 * std::fabs(one.step_losses[s]))
            << "step " << s + 1;
    SafetensorsFile a = SafetensorsFile::open(path("dev/model.safetensors"));
    SafetensorsFile b = SafetensorsFile::open(path("one/model.safetensors"));
    ASSERT_EQ(a.names(), b.names());
    for (const std::string& n : a.names()) {
        const std::vector<float> x = floats(a.get(n)), y = floats(b.get(n));
        ASSERT_EQ(x.size(), y.size()) << n;
        const double limit = n.find("key.bias") != std::string::npos ? 3e-3 : 3e-4;
        double worst = 0;
        for (size_t i = 0; i < x.size(); ++i)
            worst = std::max(worst, double(std::fabs(x[i] - y[i])));
        EXPECT_LT(worst, limit) << n;
    }
}

INSTANTIATE_TEST_SUITE_P(
    Tasks, TrainerTpOnDevice,
    ::testing::Combine(::testing::Values("masked-lm", "causal-lm"),
                       ::testing::Values(Layout{"tp2", 1, 2}, Layout{"pp2", 2, 1},
                                         Layout{"pp2_tp2", 2, 2})),
    [](const ::testing::TestParamInfo<std::tuple<std::string, Layout>>& i) {
        return std::string(std::get<0>(i.param) == "masked-lm" ? "BertMlm" : "Gpt2CausalLm") + "_" +
               std::get<1>(i.param).name;
    });

}  // namespace
}  // namespace loom::test
