// GpuPipeline's own logic without a GPU: behind the DeviceStage interface, a
// stand-in whose "device" is host memory and whose stages are the CPU stage
// models, on CommLocal threads (pp 2). What the driver adds to the CPU
// PipelineParallel (executor instances per micro-batch in flight, messages
// sent from and received into the executors' buffers, slots held until their
// input gradient is sent, the skipped messages of unlabelled and empty
// micro-batches, the shared rows packed and summed) must give the CPU
// pipeline's loss and gradients bit for bit, and the whole model's within
// rounding, under GPipe, 1F1B and interleaved schedules, for GPT-2 (tied
// word embeddings: a row on the first and the last stage) with dropout on.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm_local.h"
#include "host_device.h"
#include "host_stand_in.h"
#include "models/cuda/cuda_model.h"
#include "models/model.h"
#include "models/model_config.h"
#include "parallel/gpu_pipeline.h"
#include "parallel/pipeline_parallel.h"

namespace loom::test {
namespace {

// A CudaModel over a CPU stage model; hidden states and gradients are fp32
// host buffers where the executor's are device buffers.
class HostStage final : public HostStandIn {
  public:
    HostStage(Model& m, HostStage* owner) : HostStandIn(m), owner_(owner) {}
    LossSum forward(const ModelInputs& in, const DropoutPlan& d) override {
        return forward_stage(in, d, nullptr);
    }
    LossSum forward_stage(const ModelInputs& in, const DropoutPlan& d,
                          const void* stage_input) override {
        EXPECT_NE(owner_, nullptr) << "the owner runs no micro-batch";
        ModelInputs x = in;
        x.stage_input = static_cast<const float*>(stage_input);
        return m_.forward(x, d);
    }
    void backward(double s) override { backward_stage(s, nullptr); }
    void backward_stage(double s, const void* d) override {
        m_.backward(s, static_cast<const float*>(d));
    }
    const void* stage_output() const override { return m_.stage_output(); }
    const void* stage_input_grad() const override { return m_.stage_input_grad(); }
    std::unique_ptr<CudaModel> make_instance(Model& cpu) override {
        EXPECT_EQ(owner_, nullptr) << "instances are made by the owner";
        ++instances_made;
        return std::make_unique<HostStage>(cpu, this);
    }
    void* message_buffer(int64_t key, int64_t bytes) override {
        std::vector<char>& b = buffers_[key];
        if (int64_t(b.size()) < bytes) b.assign(size_t(bytes), char(0x7f));  // junk, not zeros
        return b.data();
    }
    void pack_grads(const std::vector<int>& rows, void* dst) override {
        const ParamTable& t = m_.params();
        float* out = static_cast<float*>(dst);
        for (int i : rows) {
            const ParamRow& r = t.row(i);
            for (int64_t k = 0; k < r.numel(); ++k) *out++ = r.local ? t.grad(i)[k] : 0.0f;
        }
    }
    void unpack_grads(const std::vector<int>& rows, const void* src) override {
        ParamTable& t = m_.params();
        const float* in = static_cast<const float*>(src);
        for (int i : rows) {
            const ParamRow& r = t.row(i);
            if (r.local)
                for (int64_t k = 0; k < r.numel(); ++k) t.grad(i)[k] = in[k];
            in += r.numel();
        }
    }
    void attach_group(Communicator&) override { ++groups_attached; }
    void set_logits_scope(LogitsScope s) override { m_.set_logits_scope(s); }

    double grad_norm_sq() override { return 0; }
    void step(double, double) override {}
    void zero_grad() override { m_.zero_grad(); }
    int64_t step_count() const override { return 0; }
    std::map<std::string, Tensor> optimizer_state() override { return {}; }
    void load_optimizer_state(const std::map<std::string, Tensor>&, int64_t) override {}

    int instances_made = 0;
    int groups_attached = 0;

  private:
    HostStage* owner_;
    std::map<int64_t, std::vector<char>> buffers_;
};

struct Batch {
    int64_t B = 0, T = 0;
    std::vector<int64_t> ids, mask, labels;
    ModelInputs inputs() const {
        ModelInputs in;
        in.B = B;
        in.T = T;
        if (B == 0) return in;
        in.input_ids = ids.data();
        in.attention_mask = mask.data();
        in.labels = labels.data();
        return in;
    }
};

// n micro-batches: labelled ones (the second with padding), the third without
// labels (no backward, no gradient message) and the last an empty share
// (B = 0: nothing at all).
std::vector<Batch> make_batches(int n) {
    std::vector<Batch> out;
    const int64_t T = 6;
    for (int k = 0; k < n; ++k) {
        Batch b;
        b.B = k == n - 1 ? 0 : 2;
        b.T = T;
        for (int64_t i = 0; i < b.B * T; ++i) {
            b.ids.push_back((i * 7 + k * 5 + 3) % 40);
            b.mask.push_back(k == 1 && i % T >= 4 ? 0 : 1);
            b.labels.push_back(k == 2 || b.mask.back() == 0 ? -100 : b.ids.back());
        }
        out.push_back(std::move(b));
    }
    return out;
}

DropoutPlan dropout_for(int k) {
    DropoutPlan d;
    d.training = true;
    d.seed = 7;
    d.step = 3;
    d.sample_offset = 2 * k;
    return d;
}

struct StepOut {
    double loss = 0;
    std::map<std::string, std::vector<float>> grads;  // rows this stage holds
};

StepOut grads_of(const ParamTable& t, double loss) {
    StepOut r;
    r.loss = loss;
    for (int i = 0; i < t.size(); ++i) {
        if (!t.row(i).local || !t.row(i).trainable) continue;
        const float* g = t.grad(i);
        r.grads[t.row(i).name] = std::vector<float>(g, g + t.row(i).numel());
    }
    return r;
}

// The trainer's stage set-up (trainer_setup.cpp): one instance per
// micro-batch in flight, sharing the first's buffers, initialised from a seed.
std::unique_ptr<PipelineParallel> build_stage(const ModelConfig& c, ScheduleKind kind, int V, int M,
                                              Communicator& pp, Communicator& dp) {
    const int64_t n_apps = model_layer_applications(c);
    const int P = pp.size();
    const int slots = schedule_max_in_flight(kind, P, pp.rank(), M, V);
    std::vector<std::unique_ptr<Model>> models;
    ModelPlacement place;
    for (int k = 0; k < slots * V; ++k) {
        place.part = pipeline_chunk_part(n_apps, P, V, pp.rank(), k / slots);
        if (k > 0) place.part.share_with = &models[0]->params();
        auto m = build_model(c, place);
        m->set_logits_scope(LogitsScope::labelled_positions);
        models.push_back(std::move(m));
    }
    models[0]->init(11);
    return std::make_unique<PipelineParallel>(std::move(models), pp, dp,
                                              adamw_config(AdamWParams{}), DpOptions{}, kind, V);
}

void check_schedule(ScheduleKind kind, int V, int n_micro) {
    const ModelConfig c = tiny_gpt2();
    const std::vector<Batch> batches = make_batches(n_micro);
    const int M = int(batches.size());
    std::vector<MicroBatch> micro;
    // The whole model, micro-batch after micro-batch: the reference sums.
    auto whole = build_model(c);
    whole->init(11);
    whole->set_logits_scope(LogitsScope::labelled_positions);
    whole->zero_grad();
    double whole_loss = 0;
    int64_t total = 0;
    std::vector<int64_t> counts;
    for (int k = 0; k < M; ++k) {
        LossSum l;
        if (batches[size_t(k)].B > 0)
            l = whole->forward(batches[size_t(k)].inputs(), dropout_for(k));
        counts.push_back(l.count);
        total += l.count;
    }
    ASSERT_EQ(counts[2], 0);  // the unlabelled micro-batch
    ASSERT_GT(total, 0);
    const double scale = 1.0 / double(total);
    for (int k = 0; k < M; ++k) {
        if (counts[size_t(k)] == 0) continue;
        whole_loss += whole->forward(batches[size_t(k)].inputs(), dropout_for(k)).sum;
        whole->backward(scale);
    }
    for (int k = 0; k < M; ++k) {
        MicroBatch x;
        x.inputs = batches[size_t(k)].inputs();
        x.dropout = dropout_for(k);
        x.label_count = counts[size_t(k)];
        micro.push_back(x);
    }
    const StepOut want_whole = grads_of(whole->params(), whole_loss);

    std::vector<StepOut> cpu(2), gpu(2);
    std::vector<int> made(2), slots(2), attached(2), n_shared(2);
    comm_local_run(2, [&](Communicator& world) {
        auto dp = world.split({world.rank()}, "dp");
        const int r = world.rank();
        // The reference: PipelineParallel on the CPU stage models.
        auto ref = build_stage(c, kind, V, M, world, *dp);
        ref->begin_step();
        const double ref_loss = ref->run(micro, scale);
        ref->finalize_grads();
        cpu[size_t(r)] = grads_of(ref->model().params(), ref_loss);
        n_shared[size_t(r)] = int(ref->shared_rows().size());

        // The driver on stand-ins over a second, identical set of stage models.
        auto layout = build_stage(c, kind, V, M, world, *dp);
        layout->begin_step();
        HostStage owner(dynamic_cast<Model&>(layout->model()), nullptr);
        GpuPipeline pipe(owner, *layout, world, world);
        const double loss = pipe.run(micro, scale);
        pipe.reduce_shared_rows();
        gpu[size_t(r)] = grads_of(layout->model().params(), loss);
        made[size_t(r)] = owner.instances_made;
        slots[size_t(r)] = layout->n_slots() * V;
        attached[size_t(r)] = owner.groups_attached;
        EXPECT_EQ(pipe.n_instances(), layout->n_slots() * V);
    });
    for (int r = 0; r < 2; ++r) {
        SCOPED_TRACE("stage " + std::to_string(r));
        // One executor instance per micro-batch chunk in flight, as the CPU's models.
        EXPECT_EQ(made[size_t(r)], slots[size_t(r)]);
        EXPECT_EQ(attached[size_t(r)], 1);
        // The tied word embeddings sit on both stages.
        EXPECT_GT(n_shared[size_t(r)], 0);
        EXPECT_EQ(gpu[size_t(r)].loss, cpu[size_t(r)].loss);
        EXPECT_NEAR(gpu[size_t(r)].loss, want_whole.loss, 1e-5 * std::fabs(want_whole.loss));
        ASSERT_EQ(gpu[size_t(r)].grads.size(), cpu[size_t(r)].grads.size());
        ASSERT_FALSE(gpu[size_t(r)].grads.empty());
        for (const auto& [name, g] : cpu[size_t(r)].grads) {
            EXPECT_EQ(gpu[size_t(r)].grads.at(name), g) << name;
            const std::vector<float>& w = want_whole.grads.at(name);
            const std::vector<float>& got = gpu[size_t(r)].grads.at(name);
            double scale_w = 0, worst = 0;
            for (size_t i = 0; i < w.size(); ++i) {
                scale_w = std::max(scale_w, double(std::fabs(w[i])));
                worst = std::max(worst, double(std::fabs(got[i] - w[i])));
            }
            EXPECT_LE(worst, 1e-7 + 2e-5 * scale_w) << name << " against the whole model";
        }
    }
    // Every row of the model is held by some stage, with the whole model's gradient.
    size_t rows = 0;
    for (const auto& [name, g] : want_whole.grads)
        rows += gpu[0].grads.count(name) || gpu[1].grads.count(name);
    EXPECT_EQ(rows, want_whole.grads.size());
}

TEST(GpuPipeline, GpipeMatchesTheCpuPipelineAndTheWholeModel) {
    check_schedule(ScheduleKind::simple, 1, 5);
}

TEST(GpuPipeline, OneFOneBMatchesTheCpuPipelineAndTheWholeModel) {
    check_schedule(ScheduleKind::one_f_one_b, 1, 5);
}

TEST(GpuPipeline, InterleavedMatchesTheCpuPipelineAndTheWholeModel) {
    // Interleaved needs n_micro % pp == 0; two chunks of one layer per rank.
    check_schedule(ScheduleKind::interleaved, 2, 4);
}

}  // namespace
}  // namespace loom::test
