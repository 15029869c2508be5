// The trainer on the one model stack over a device backend
// (TrainerOptions::stack_device; tests/test_backends.h): a job trained there
// must be the CPU run. On the staged stand-in (host memory the host may only
// reach through uploads and downloads) that is bit for bit: the per-step
// losses, the evaluation, the checkpoints (parameters and optimizer state),
// the exported model, a resume from its own checkpoint, and two
// data-parallel replicas under ZeRO-1 whose gradients go over a twin group
// (TrainerOptions::make_stack_group). On a GPU the same within fp32
// reduction-order tolerances (one process).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/comm_local.h"
#include "io/safetensors.h"
#include "test_backends.h"
#include "trainer_e2e_util.h"

namespace loom::test {
namespace {

class TrainerOnDevice : public TrainDir, public ::testing::WithParamInterface<std::string> {
  protected:
    void SetUp() override {
        const std::string absent = backend_absent_reason(GetParam());
        if (!absent.empty()) GTEST_SKIP() << absent;
        TrainDir::SetUp();
    }
    bool exact() const { return GetParam() == "staged"; }
    TrainerOptions on_device() const {
        TrainerOptions o = quiet();
        const std::string name = GetParam();
        o.stack_device = [name] { return &test_backend(name); };
        return o;
    }
    Job cls_job(const std::string& out, const std::vector<std::string>& overrides = {}) const {
        return job(job_text("sequence-classification", out,
                            "  per_device_train_batch_size: 8\n  gradient_accumulation_steps: 2\n"
                            "  max_steps: 6\n  max_grad_norm: 0.05\n  weight_decay: 0.01\n"
                            "  warmup_steps: 2\n  eval_strategy: steps\n  eval_steps: 3\n"
                            "  save_strategy: steps\n  save_steps: 3\n"),
                   overrides);
    }
    void expect_close(const std::vector<double>& a, const std::vector<double>& b,
                      const std::string& what) const {
        ASSERT_EQ(a.size(), b.size()) << what;
        if (exact()) {
            EXPECT_EQ(a, b) << what;
            return;
        }
        for (size_t i = 0; i < a.size(); ++i)
            EXPECT_NEAR(a[i], b[i], 1e-4 * std::max(1.0, std::fabs(b[i]))) << what << " " << i;
    }
    // Every tensor of two safetensors files, by name.
    void expect_same_file(const std::string& a, const std::string& b) const {
        SafetensorsFile fa = SafetensorsFile::open(a), fb = SafetensorsFile::open(b);
        ASSERT_EQ(fa.names(), fb.names()) << a;
        ASSERT_FALSE(fa.names().empty()) << a;
        for (const std::string& n : fa.names()) {
            const Tensor x = fa.get(n).to(DType::f32), y = fb.get(n).to(DType::f32);
            ASSERT_EQ(x.shape, y.shape) << n;
            std::vector<double> vx(x.data<float>(), x.data<float>() + x.numel());
            std::vector<double> vy(y.data<float>(), y.data<float>() + y.numel());
            expect_close(vx, vy, a + ": " + n);
        }
    }
};

TEST_P(TrainerOnDevice, TrainsAsOnTheCpu) {
    const TrainResult ref = Trainer(cls_job("cpu"), quiet()).train();
    Trainer dev(cls_job("dev"), on_device());
    ASSERT_TRUE(dev.model().params().staged() || GetParam() != "staged");
    const TrainResult got = dev.train();
    ASSERT_EQ(ref.step_losses.size(), 6u);
    expect_close(got.step_losses, ref.step_losses, "step losses");
    ASSERT_FALSE(ref.final_metrics.empty());
    ASSERT_EQ(got.final_metrics.size(), ref.final_metrics.size());
    int compared = 0;
    for (size_t i = 0; i < ref.final_metrics.size(); ++i) {
        const std::string& key = ref.final_metrics[i].first;
        EXPECT_EQ(got.final_metrics[i].first, key);
        if (key.find("runtime") != std::string::npos || key.find("per_second") != std::string::npos)
            continue;  // timings
        ++compared;
        expect_close({got.final_metrics[i].second}, {ref.final_metrics[i].second},
                     ref.final_metrics[i].first);
    }
    EXPECT_GE(compared, 2) << "loss and accuracy at least";
    for (const char* f : {"checkpoint-3/model.safetensors", "checkpoint-3/optimizer.safetensors",
                          "checkpoint-6/model.safetensors", "checkpoint-6/optimizer.safetensors",
                          "model.safetensors"})
        expect_same_file(path(std::string("dev/") + f), path(std::string("cpu/") + f));
    // The trainer's host view after the run is the device's parameters.
    const std::vector<float> a = params_of(dev);
    SafetensorsFile exported = SafetensorsFile::open(path("dev/model.safetensors"));
    const ParamTable& t = dev.model().params();
    const int i = t.index("classifier.weight");
    const Tensor w = exported.get("classifier.weight");
    EXPECT_EQ(std::memcmp(a.data() + t.row(i).offset, w.raw(), w.nbytes()), 0);
}

TEST_P(TrainerOnDevice, ResumesAsTheCpuRunTrains) {
    const TrainResult ref = Trainer(cls_job("cpu"), quiet()).train();
    TrainerOptions o = on_device();
    o.interrupt_at_step = 4;
    const TrainResult first = Trainer(cls_job("dev"), o).train();
    ASSERT_EQ(first.global_step, 4);
    const TrainResult second =
        Trainer(cls_job("dev", {"hyperparameters.resume_from_checkpoint=latest"}), on_device())
            .train();
    EXPECT_EQ(second.start_step, 4);
    std::vector<double> joined = first.step_losses;
    joined.insert(joined.end(), second.step_losses.begin(), second.step_losses.end());
    expect_close(joined, ref.step_losses, "interrupted and resumed");
}

// Two data-parallel replicas (CommLocal threads) under ZeRO-1: the
// gradients go over the dp group's twin (make_stack_group) in the backend's
// memory, scalars over the group; the run is the CPU replicas' run.
TEST_P(TrainerOnDevice, DataParallelAsOnTheCpu) {
    if (GetParam() == "cuda")
        GTEST_SKIP() << "CommLocal moves host memory; data parallelism on a GPU is "
                        "cli.train_gpu_dp's (NCCL)";
    std::vector<TrainResult> ref(2), got(2);
    const auto run = [&](bool device, const std::string& out, std::vector<TrainResult>& res) {
        comm_local_run(2, [&](Communicator& dp) {
            TrainerOptions o = device ? on_device() : quiet();
            o.dp_comm = &dp;
            if (device)
                o.make_stack_group = [](Communicator& g) { return g.split({0, 1}, "dp-twin"); };
            // Dense on both: a device table has no sparse row exchange.
            Trainer t(
                cls_job(out, {"distribution.data_parallel_degree=2", "distribution.zero_stage=1",
                              "distribution.sparse_embedding_grads=false"}),
                o);
            res[size_t(dp.rank())] = t.train();
        });
    };
    run(false, "cpu", ref);
    run(true, "dev", got);
    for (size_t r = 0; r < 2; ++r) {
        ASSERT_EQ(ref[r].step_losses.size(), 6u);
        expect_close(got[r].step_losses, ref[r].step_losses, "rank " + std::to_string(r));
    }
    for (const char* f : {"checkpoint-6/model.safetensors", "checkpoint-6/optimizer.safetensors",
                          "model.safetensors"})
        expect_same_file(path(std::string("dev/") + f), path(std::string("cpu/") + f));
}

// Checkpointing every layer with offloading: the device run sends the
// checkpointed inputs through host memory and back (models/act_offload.h)
// and trains the CPU run, which keeps them (its memory is the host's).
TEST_P(TrainerOnDevice, OffloadsActivationsAsTheCpuTrains) {
    // Four layers: at horizon 1 two inputs stay on the device, two travel.
    nlohmann::json c = nlohmann::json::parse(std::ifstream(data_path("train/tiny-bert.json")));
    c["num_hidden_layers"] = 4;
    std::ofstream(path("bert4.json")) << c.dump();
    const auto text = [&](const std::string& out) {
        std::string t = job_text("sequence-classification", out,
                                 "  per_device_train_batch_size: 8\n  max_steps: 4\n");
        const std::string from = data_path("train/tiny-bert.json");
        t.replace(t.find(from), from.size(), path("bert4.json"));
        return t;
    };
    const std::vector<std::string> offload = {
        "distribution.activation_checkpointing=true", "distribution.checkpoint_every=1",
        "distribution.offload_activations=true", "distribution.activation_loading_horizon=1"};
    const TrainResult ref = Trainer(job(text("cpu"), offload), quiet()).train();
    auto* staged = dynamic_cast<StagedBackend*>(&test_backend(GetParam()));
    const size_t before = staged ? staged->offloaded : 0;
    const TrainResult got = Trainer(job(text("dev"), offload), on_device()).train();
    ASSERT_EQ(ref.step_losses.size(), 4u);
    expect_close(got.step_losses, ref.step_losses, "step losses");
    expect_same_file(path("dev/model.safetensors"), path("cpu/model.safetensors"));
    if (staged) {
        EXPECT_GT(staged->offloaded - before, 0u) << "nothing went to the host";
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, TrainerOnDevice, ::testing::ValuesIn([] {
                             std::vector<std::string> v;
                             for (const std::string& n : test_backend_names())
                                 if (n != "cpu") v.push_back(n);
                             return v;
                         }()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace loom::test
