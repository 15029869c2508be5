// A ParamTable on a backend whose memory the host may not touch (the staged
// test backend, tests/test_backends.h): the model, the gradient norm, the
// clipping and the optimizer work on the backend's buffers only, and the
// host sees the parameters and gradients through uploads and downloads.
// Training there must be the CPU run bit for bit; the table's compute copy
// and its widening of gradients are checked for a bf16 activation type.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "comm/comm_local.h"
#include "models/model.h"
#include "models/model_config.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "parallel/dp_step.h"
#include "parallel/single_step.h"
#include "test_backends.h"
#include "tiny_causal_lm.h"

namespace loom::test {
namespace {

std::unique_ptr<Model> built_on(Backend& be) {
    ModelPlacement p;
    p.device = ParamDevice{&be};
    auto m = build_model(tiny_gpt2(2), p);
    m->init(5);
    return m;
}

std::vector<float> host_params(ParamTable& t) {
    t.download_params();
    return std::vector<float>(t.params_data(), t.params_data() + t.flat_numel());
}

// Three clipped steps of two keyed micro-batches each (the first of
// `replicas` equal shares of the global batch); returns the losses.
std::vector<double> train(StepEngine& e, int replica = 0, int replicas = 1) {
    std::vector<double> losses;
    for (int step = 0; step < 3; ++step) {
        std::vector<CausalLmBatch> batches;
        std::vector<MicroBatch> micro;
        for (int k = 0; k < 2; ++k) batches.emplace_back(2 * replicas * step + 2 * replica + k);
        for (int k = 0; k < 2; ++k) {
            micro.push_back(batches[size_t(k)].micro());
            micro.back().dropout =
                DropoutPlan{true, 9, uint64_t(step), int64_t(2 * (2 * replica + k))};
        }
        e.begin_step();
        const double total = 2.0 * double(replicas) * double(micro[0].label_count);
        losses.push_back(e.run(micro, 1.0 / total));
        e.finalize_grads();
        EXPECT_GT(e.clip_grad_norm(0.05), 0.05) << "the test means to clip";
        e.step(1e-2);
    }
    return losses;
}

std::vector<double> train(Model& m, Optimizer& opt) {
    SingleStep e(m, opt);
    return train(e);
}

TEST(ParamDevice, StagedTableTrainsAsTheCpuOne) {
    for (const OptimizerKind kind : {OptimizerKind::adamw, OptimizerKind::sgd}) {
        SCOPED_TRACE(kind == OptimizerKind::adamw ? "adamw" : "sgd");
        StagedBackend staged;
        auto cpu = built_on(cpu_backend());
        auto dev = built_on(staged);
        ASSERT_FALSE(cpu->params().staged());
        ASSERT_TRUE(dev->params().staged());
        EXPECT_GE(staged.uploaded, size_t(dev->params().flat_numel()) * sizeof(float))
            << "init did not upload the parameters";
        const std::vector<float> before = host_params(cpu->params());
        EXPECT_EQ(host_params(dev->params()), before);
        poison_host_copies(dev->params());

        std::unique_ptr<Optimizer> a, b;
        if (kind == OptimizerKind::adamw) {
            a = std::make_unique<AdamW>(cpu->params(), AdamWParams{});
            b = std::make_unique<AdamW>(dev->params(), AdamWParams{});
        } else {
            a = std::make_unique<Sgd>(cpu->params(), 0.01);
            b = std::make_unique<Sgd>(dev->params(), 0.01);
        }
        const std::vector<double> la = train(*cpu, *a), lb = train(*dev, *b);
        EXPECT_EQ(la, lb);
        const std::vector<float> pa = host_params(cpu->params()), pb = host_params(dev->params());
        ASSERT_EQ(pa.size(), pb.size());
        EXPECT_EQ(std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)), 0);
        int64_t moved = 0;
        for (size_t i = 0; i < pa.size(); ++i) moved += pa[i] != before[i];
        EXPECT_GT(moved, int64_t(pa.size() / 2)) << "training left the parameters";

        // The last step's gradients (clipped), fetched from the backend.
        poison_host_copies(dev->params());
        dev->params().download_grads();
        EXPECT_EQ(std::memcmp(cpu->params().grads_data(), dev->params().grads_data(),
                              size_t(pa.size()) * sizeof(float)),
                  0);
        // Outputs come back to the host as copies.
        const Tensor la_logits = cpu->outputs().at("logits");
        const Tensor lb_logits = dev->outputs().at("logits");
        ASSERT_EQ(la_logits.shape, lb_logits.shape);
        EXPECT_EQ(std::memcmp(la_logits.raw(), lb_logits.raw(), la_logits.nbytes()), 0);
    }
}

// Data parallel on staged tables (2 CommLocal ranks), every ZeRO stage:
// the bucket reductions, the shard, its norm and clipping, the parameters'
// all-gather and the optimizer state all work on the backend's buffers.
// oneDNN's AVX2 sgemm halves its speed on a weight that starts on a 32-byte
// boundary (nn/param_table.cpp): rows the CPU computes on start 16 bytes past
// a 64-byte one, the same on the host and on a staged CPU backend; a GPU's
// rows start on 64 bytes.
TEST(ParamDevice, RowsStartWhereTheirDevicesGemmsRunFastest) {
    auto cpu = built_on(cpu_backend());
    StagedBackend staged;
    auto dev = built_on(staged);
    const ParamTable& t = cpu->params();
    ASSERT_EQ(t.rows().size(), dev->params().rows().size());
    ASSERT_EQ(t.flat_numel(), dev->params().flat_numel());
    int checked = 0;
    for (int i = 0; i < int(t.rows().size()); ++i) {
        const ParamRow& r = t.row(i);
        if (!r.local || r.packed) continue;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(t.param(i)) % 64, 16u) << r.name;
        EXPECT_EQ(r.offset, dev->params().row(i).offset) << r.name;
        ++checked;
    }
    EXPECT_GT(checked, 10);

    StagedBackend gpu;
    gpu.kind = Device::cuda;
    ParamTable g;
    for (const char* name : {"a.weight", "a.bias", "b.weight"}) {
        ParamRow r;
        r.name = name;
        r.shape = Shape{3, 7};
        g.add(r);
    }
    g.allocate(ParamDevice{&gpu});
    for (int i = 0; i < 3; ++i) EXPECT_EQ(g.row(i).offset % 16, 0) << g.row(i).name;
    EXPECT_EQ(g.row(2).offset, 64);  // 21 elements, rounded up to 32, twice
}

TEST(ParamDevice, DataParallelOnStagedTablesTrainsAsOnTheCpu) {
    for (const ZeroStage z : {ZeroStage::none, ZeroStage::optimizer, ZeroStage::gradients}) {
        SCOPED_TRACE(std::string(zero_stage_name(z)));
        std::vector<std::vector<double>> la(2), lb(2);
        std::vector<std::vector<float>> pa(2), pb(2), before(2);
        std::vector<std::map<std::string, Tensor>> sa(2), sb(2);
        comm_local_run(2, [&](Communicator& dp) {
            const size_t r = size_t(dp.rank());
            StagedBackend staged;  // one per rank: its counters are not shared
            auto cpu = built_on(cpu_backend());
            auto dev = built_on(staged);
            before[r] = host_params(cpu->params());
            poison_host_copies(dev->params());
            DpOptions o;
            o.zero = z;
            o.bucket_size_mb = 0.002;  // several buckets, a padded bottom one
            o.sparse_embedding_grad = false;
            const OptimizerConfig opt = adamw_config(AdamWParams{});
            // The staged table's buffers go over a twin of the group (as a
            // GPU table's go over NCCL), its scalars over the group itself.
            auto twin = dp.split({0, 1}, "dp-buffers");
            DpOptions ob = o;
            ob.buffers = twin.get();
            DataParallel a(*cpu, dp, opt, o), b(*dev, dp, opt, ob);
            a.broadcast_parameters();
            b.broadcast_parameters();
            la[r] = train(a, int(r), 2);
            lb[r] = train(b, int(r), 2);
            pa[r] = host_params(cpu->params());
            pb[r] = host_params(dev->params());
            sa[r] = a.optimizer_state();
            sb[r] = b.optimizer_state();
        });
        for (size_t r = 0; r < 2; ++r) {
            EXPECT_EQ(la[r], lb[r]) << "rank " << r;
            ASSERT_EQ(pa[r].size(), pb[r].size());
            EXPECT_EQ(std::memcmp(pa[r].data(), pb[r].data(), pa[r].size() * sizeof(float)), 0)
                << "rank " << r;
            int64_t moved = 0;
            for (size_t i = 0; i < pa[r].size(); ++i) moved += pa[r][i] != before[r][i];
            EXPECT_GT(moved, int64_t(pa[r].size() / 2)) << "training left the parameters";
            ASSERT_EQ(sa[r].size(), sb[r].size());
            ASSERT_FALSE(sa[r].empty());
            for (const auto& [name, t] : sa[r]) {
                ASSERT_TRUE(sb[r].count(name)) << name;
                EXPECT_EQ(std::memcmp(t.raw(), sb[r].at(name).raw(), t.nbytes()), 0) << name;
            }
        }
        EXPECT_EQ(pb[0], pb[1]) << "the replicas left the steps apart";
    }
}

TEST(ParamDevice, Bf16ComputeCopyAndWidenedGradients) {
    StagedBackend staged;
    ParamTable t;
    ParamRow w;
    w.name = "w";
    w.shape = Shape{3, 5};
    t.add(w);
    ParamRow b;
    b.name = "b";
    b.shape = Shape{7};
    b.init = InitRule::ones;
    t.add(b);
    t.allocate(ParamDevice{&staged, DType::bf16});
    ASSERT_TRUE(t.staged());
    t.init_all(3);
    const int64_t n = t.flat_numel();

    // The compute copy is the master rounded to bf16 (staged memory is host
    // memory, so the test may look).
    const auto* copy = static_cast<const uint16_t*>(t.device_copy().get());
    int64_t inexact = 0;
    for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(copy[i], f32_to_bf16(t.device_master()[i])) << i;
        inexact += bf16_to_f32(copy[i]) != t.device_master()[i];
    }
    EXPECT_GT(inexact, 0) << "the normal init should not be bf16-exact";
    EXPECT_EQ(std::memcmp(t.device_master(), t.params_data(), size_t(n) * sizeof(float)), 0);
    const UpdateBuffers u = t.update_buffers();
    EXPECT_EQ(u.copy, t.device_copy().get());
    EXPECT_EQ(u.copy_dtype, DType::bf16);
    EXPECT_EQ(u.grad_dtype, DType::bf16);
    EXPECT_EQ(u.master, t.device_master());

    // bf16 gradients come to the host widened.
    auto* g = static_cast<uint16_t*>(t.device_grads().get());
    for (int64_t i = 0; i < n; ++i) g[i] = f32_to_bf16(0.25f * float(i) - 1.0f);
    poison_host_copies(t);
    t.download_grads();
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(t.grads_data()[i], bf16_to_f32(g[i])) << i;
    EXPECT_EQ(t.device_grad(1).get(), static_cast<void*>(g + t.row(1).offset));
    t.zero_grad();
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(g[i], 0) << i;

    // A host write reaches the backend (and the copy) only through upload.
    t.params_data()[t.row(1).offset] = 2.5f;
    EXPECT_NE(t.device_master()[t.row(1).offset], 2.5f);
    t.upload_params();
    EXPECT_EQ(t.device_master()[t.row(1).offset], 2.5f);
    EXPECT_EQ(copy[t.row(1).offset], f32_to_bf16(2.5f));
}

}  // namespace
}  // namespace loom::test
