// The CUDA executor's pipeline stages (cuda_model.h: forward_stage,
// backward_stage, make_instance, pack_grads / unpack_grads) against the whole
// CPU model, for every bundled HF fixture in fp32 with dropout on: the model
// cut in two stages (pipeline_stage_part), each stage an owner executor with
// two instances, two micro-batches in flight on each stage (both forwards
// before either backward, as 1F1B's warm-up holds them), hidden states and
// their gradients handed over as device pointers. The last stage's losses
// are the whole model's; every gradient a single stage holds is the whole
// model's, and rows both stages hold (tied embeddings, ALBERT's shared layer)
// sum to it. Skips with the reason where no GPU is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "io/safetensors.h"
#include "models/cuda/cuda_model.h"
#include "models/hf_fixture.h"
#include "parallel/pipeline_parallel.h"

namespace loom::test {
namespace {

class CudaPipelineStage : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        const std::string why = CudaModel::unavailable_reason();
        if (!why.empty()) GTEST_SKIP() << "no usable CUDA device: " << why;
        fx_ = std::make_unique<Fixture>(GetParam());
        if (fx_->config.llama_like())
            GTEST_SKIP() << "the CUDA executor replays the encoder and GPT-2 stacks only";
    }
    std::unique_ptr<Fixture> fx_;
};

DropoutPlan dropout_for(int micro) {
    DropoutPlan d;
    d.training = true;
    d.seed = 23;
    d.step = 1;
    d.sample_offset = 100 * micro;  // the two micro-batches draw different masks
    return d;
}

TEST_P(CudaPipelineStage, TwoStagesTwoMicroBatchesInFlightEqualTheWholeModel) {
    const Fixture& f = *fx_;
    const ModelInputs in = f.inputs();
    // The whole model on the CPU: both micro-batches accumulated.
    auto ref = f.load_model();
    ref->zero_grad();
    const LossSum w0 = ref->forward(in, dropout_for(0));
    const LossSum w1 = ref->forward(in, dropout_for(1));
    ASSERT_GT(w0.count, 0);
    const double scale = 1.0 / double(w0.count + w1.count);
    ref->zero_grad();
    double want_loss = ref->forward(in, dropout_for(0)).sum;
    ref->backward(scale);
    want_loss += ref->forward(in, dropout_for(1)).sum;
    ref->backward(scale);

    // Two stages, each: a CPU model per micro-batch sharing the first's
    // table, an owner executor and two instances.
    const int64_t n_apps = ref->num_layer_applications();
    ASSERT_GE(n_apps, 2);
    const std::string weights = f.dir + "/model.safetensors";
    std::vector<std::unique_ptr<Model>> cpu[2];
    std::unique_ptr<CudaModel> owner[2];
    std::unique_ptr<CudaModel> inst[2][2];
    CudaModelOptions o;
    o.dtype = DType::f32;
    for (int s = 0; s < 2; ++s) {
        ModelPlacement place;
        place.part = pipeline_stage_part(n_apps, 2, s);
        for (int k = 0; k < 2; ++k) {
            if (k > 0) place.part.share_with = &cpu[s][0]->params();
            cpu[s].push_back(build_model(f.config, place));
        }
        cpu[s][0]->load(SafetensorsFile::open(weights));
        owner[s] = CudaModel::create(*cpu[s][0], o);
        for (int k = 0; k < 2; ++k) inst[s][k] = owner[s]->make_instance(*cpu[s][k]);
    }
    // The two stages' executors run on different streams here (one process):
    // each hand-over waits for the producing stage.
    LossSum l[2];
    for (int m = 0; m < 2; ++m) {
        const LossSum first = inst[0][m]->forward_stage(in, dropout_for(m), nullptr);
        EXPECT_EQ(first.count, 0) << "the first stage has no head";
    }
    owner[0]->synchronize();
    for (int m = 0; m < 2; ++m)
        l[m] = inst[1][m]->forward_stage(in, dropout_for(m), inst[0][m]->stage_output());
    EXPECT_THROW(inst[1][0]->stage_output(), Error);
    EXPECT_THROW(inst[0][0]->stage_input_grad(), Error);
    EXPECT_THROW(inst[1][0]->forward_stage(in, dropout_for(0), nullptr), Error);
    EXPECT_EQ(l[0].count, w0.count);
    EXPECT_EQ(l[1].count, w1.count);
    EXPECT_NEAR(l[0].sum + l[1].sum, want_loss, 1e-5 * std::fabs(want_loss) + 1e-6);
    for (int m = 0; m < 2; ++m) {
        inst[1][m]->backward_stage(scale, nullptr);
        owner[1]->synchronize();
        inst[0][m]->backward_stage(scale, inst[1][m]->stage_input_grad());
    }
    // Instances have no optimizer: it is the owner's.
    EXPECT_THROW(inst[0][0]->step(1e-3, 1.0), Error);
    EXPECT_THROW(inst[0][0]->optimizer_state(), Error);

    ParamTable* t[2];
    for (int s = 0; s < 2; ++s) {
        owner[s]->download_grads();
        t[s] = &cpu[s][0]->params();
    }
    const ParamTable& rt = ref->params();
    const Tol tol = f.tol("grad");
    int single = 0;
    for (int i = 0; i < rt.size(); ++i) {
        if (!rt.row(i).trainable) continue;
        const bool h0 = t[0]->row(i).local, h1 = t[1]->row(i).local;
        ASSERT_TRUE(h0 || h1) << rt.row(i).name << " is held by no stage";
        const std::string name = "grad." + rt.row(i).name;
        if (h0 && h1) {
            Tensor sum = t[0]->grad_tensor(i).clone();
            const float* g1 = t[1]->grad(i);
            for (int64_t k = 0; k < sum.numel(); ++k) sum.data<float>()[k] += g1[k];
            EXPECT_TRUE(close(name, sum, rt.grad_tensor(i), Tol{tol.atol, tol.rtol}));
        } else {
            EXPECT_TRUE(close(name, t[h0 ? 0 : 1]->grad_tensor(i), rt.grad_tensor(i),
                              Tol{tol.atol, tol.rtol}));
            ++single;
        }
    }
    EXPECT_GT(single, 0);

    // pack_grads / unpack_grads on stage 0: every trainable row in table
    // order (held or not), zeros for the rows it lacks; unpacking twice the
    // values writes only the held rows.
    std::vector<int> rows;
    int64_t total = 0;
    for (int i = 0; i < rt.size(); ++i)
        if (rt.row(i).trainable) {
            rows.push_back(i);
            total += rt.row(i).numel();
        }
    void* buf = owner[0]->message_buffer(7, total * int64_t(sizeof(float)));
    owner[0]->pack_grads(rows, buf);
    std::vector<float> host(static_cast<size_t>(total));
    owner[0]->synchronize();
    ASSERT_EQ(cudaMemcpy(host.data(), buf, host.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    int64_t off = 0;
    for (int i : rows) {
        const ParamRow& r = t[0]->row(i);
        for (int64_t k = 0; k < r.numel(); ++k)
            ASSERT_EQ(host[size_t(off + k)], r.local ? t[0]->grad(i)[k] : 0.0f) << r.name;
        off += r.numel();
    }
    std::vector<float> before(t[0]->grads_data(), t[0]->grads_data() + t[0]->flat_numel());
    for (float& x : host) x = 2.0f * x + 1.0f;
    ASSERT_EQ(cudaMemcpy(buf, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    owner[0]->unpack_grads(rows, buf);
    owner[0]->download_grads();
    for (int i : rows) {
        const ParamRow& r = t[0]->row(i);
        if (!r.local) continue;
        for (int64_t k = 0; k < r.numel(); ++k)
            ASSERT_EQ(t[0]->grad(i)[k], 2.0f * before[size_t(r.offset + k)] + 1.0f) << r.name;
    }
}

INSTANTIATE_TEST_SUITE_P(Hf, CudaPipelineStage, ::testing::ValuesIn(hf_fixture_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                             std::string n = p.param;
                             for (char& c : n)
                                 if (c == '-') c = '_';
                             return n;
                         });

}  // namespace
}  // namespace loom::test
