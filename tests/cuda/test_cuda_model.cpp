// The CUDA model executor (models/cuda/cuda_model.h) against Hugging Face and
// the CPU model: every bundled HF fixture in fp32 on the GPU (logits, loss,
// every gradient by name, the parameters after one AdamW step, within the
// fixtures' tolerances); dropout masks equal to the CPU's; and a short bf16
// training run that follows the CPU's fp32 loss curve. Skips with the reason
// where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>

#include "models/cuda/cuda_model.h"
#include "models/hf_fixture.h"
#include "models/model_config.h"
#include "optim/adamw.h"

namespace loom::test {
namespace {

class CudaModelFixture : public ::testing::TestWithParam<std::string> {
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

CudaModelOptions fixture_options(DType dtype) {
    CudaModelOptions o;
    o.dtype = dtype;
    o.adamw = AdamWParams{1e-3, 0.9, 0.999, 1e-8, 0.01};
    o.decay_all = true;  // the fixtures' AdamW step decays every parameter
    return o;
}

TEST_P(CudaModelFixture, Fp32MatchesHfLogitsLossGradientsAndAdamW) {
    const Fixture& f = *fx_;
    auto cpu = f.load_model();
    auto gpu = CudaModel::create(*cpu, fixture_options(DType::f32));
    const LossSum loss = gpu->forward(f.inputs(), DropoutPlan{});
    const auto out = gpu->outputs();
    int checked = 0;
    for (const char* key : {"logits", "start_logits", "end_logits"}) {
        if (!f.expected.count(key)) continue;
        ASSERT_TRUE(out.count(key)) << "the GPU model gave no " << key;
        EXPECT_TRUE(close(key, out.at(key), f.expected.at(key), f.tol("logits")));
        ++checked;
    }
    EXPECT_GE(checked, 1);
    ASSERT_GT(loss.count, 0);
    const float ref_loss = f.expected.at("loss").data<float>()[0];
    const float got = float(loss.mean());
    EXPECT_TRUE(close("loss", &got, &ref_loss, 1, f.tol("loss")));

    gpu->backward(1.0 / double(loss.count));
    ParamTable& t = cpu->params();
    gpu->download_grads();
    const auto noise = f.noise_level_grads();
    const auto tied = f.tied_targets();
    const Tol tol = f.tol("grad");
    int n_grads = 0;
    for (int i = 0; i < t.size(); ++i) {
        const std::string& name = t.row(i).name;
        const Tol use = (noise.count(name) || tied.count(name)) ? Tol{tol.atol, 0.0} : tol;
        EXPECT_TRUE(close("grad." + name, t.grad_tensor(i), f.expected.at("grad." + name), use));
        ++n_grads;
    }
    EXPECT_EQ(n_grads, int(f.after.size()));

    gpu->step(1e-3);
    EXPECT_EQ(gpu->step_count(), 1);
    gpu->download_params();
    const auto& e2e = f.manifest.at("suggested_tolerances").at("after_adamw_end_to_end");
    const double atol = e2e.at("atol"), atol_else = e2e.at("atol_elsewhere");
    const double threshold = e2e.at("only_where_abs_grad_ge");
    for (int i = 0; i < t.size(); ++i) {
        const std::string& name = t.row(i).name;
        const Tensor& g = f.expected.at("grad." + name);
        std::vector<double> atol_of(size_t(g.numel()));
        for (int64_t k = 0; k < g.numel(); ++k)
            atol_of[size_t(k)] = std::fabs(g.data<float>()[k]) >= threshold ? atol : atol_else;
        const Tensor p = t.param_tensor(i);
        EXPECT_TRUE(close("after." + name, p.data<float>(), f.after.at(name).data<float>(),
                          p.numel(), Tol{atol, 0.0}, &atol_of));
    }
}

// Dropout is keyed by (seed, step, site, global sample, element) on both
// devices, so training-mode losses and gradients agree to fp32 rounding.
TEST_P(CudaModelFixture, Fp32DropoutMasksEqualTheCpus) {
    const Fixture& f = *fx_;
    auto ref = f.load_model();
    DropoutPlan drop;
    drop.training = true;
    drop.seed = 17;
    drop.step = 3;
    ref->zero_grad();
    const LossSum want = ref->forward(f.inputs(), drop);
    ASSERT_GT(want.count, 0);
    ref->backward(1.0 / double(want.count));

    auto cpu = f.load_model();
    auto gpu = CudaModel::create(*cpu, fixture_options(DType::f32));
    const LossSum got = gpu->forward(f.inputs(), drop);
    EXPECT_EQ(got.count, want.count);
    EXPECT_NEAR(got.sum, want.sum, 1e-5 * std::fabs(want.sum) + 1e-6);
    gpu->backward(1.0 / double(got.count));
    gpu->download_grads();
    const Tol tol = f.tol("grad");
    for (int i = 0; i < cpu->params().size(); ++i)
        EXPECT_TRUE(close("grad." + cpu->params().row(i).name, cpu->params().grad_tensor(i),
                          ref->params().grad_tensor(i), Tol{tol.atol, tol.rtol}));
}

// bf16 compute with fp32 master weights follows the CPU's fp32 curve over
// 30 AdamW steps on the fixture batch (and the loss falls).
TEST_P(CudaModelFixture, Bf16TrainingFollowsTheCpuLossCurve) {
    const Fixture& f = *fx_;
    auto ref = f.load_model();
    AdamW opt(ref->params(), AdamWParams{1e-3, 0.9, 0.999, 1e-8, 0.01}, DecayPolicy::all);
    auto cpu = f.load_model();
    auto gpu = CudaModel::create(*cpu, fixture_options(DType::bf16));
    const ModelInputs in = f.inputs();
    double first = 0, last = 0;
    for (int s = 0; s < 30; ++s) {
        ref->zero_grad();
        const LossSum w = ref->forward(in, DropoutPlan{});
        ref->backward(1.0 / double(w.count));
        opt.step();
        const LossSum g = gpu->forward(in, DropoutPlan{});
        gpu->backward(1.0 / double(g.count));
        gpu->step(1e-3);
        EXPECT_NEAR(g.mean(), w.mean(), 0.03 * std::fabs(w.mean()) + 0.02) << "step " << s;
        if (s == 0) first = g.mean();
        last = g.mean();
    }
    EXPECT_LT(last, 0.7 * first) << "bf16 training did not bring the loss down";
}

// The data-parallel hook: disjoint ranges, top of the buffer first, covering
// [0, flat) exactly once per backward; the gradients they name are final
// (a second backward without the hook gives twice them, with no range missed).
TEST_P(CudaModelFixture, GradReadyHookCoversTheBufferOnce) {
    const Fixture& f = *fx_;
    auto cpu = f.load_model();
    auto gpu = CudaModel::create(*cpu, fixture_options(DType::f32));
    std::vector<std::pair<int64_t, int64_t>> ranges;
    gpu->set_grad_ready_hook([&](int64_t b, int64_t e) { ranges.emplace_back(b, e); });
    const LossSum l = gpu->forward(f.inputs(), DropoutPlan{});
    gpu->backward(1.0 / double(l.count));
    ASSERT_FALSE(ranges.empty());
    EXPECT_EQ(ranges.front().second, gpu->flat_numel());
    for (size_t i = 0; i + 1 < ranges.size(); ++i)
        EXPECT_EQ(ranges[i + 1].second, ranges[i].first) << "range " << i;
    EXPECT_EQ(ranges.back().first, 0);
    EXPECT_GE(ranges.size(), size_t(2)) << "no overlap possible: one range for the whole backward";
    EXPECT_EQ(gpu->grad_dtype(), DType::f32);
}

// Activation checkpointing and offloading on the GPU: a 6-layer BERT and GPT-2
// with dropout on, every k-th layer recomputed, the kept inputs offloaded
// through a ring smaller than their count (slots reused within a step and
// across steps), give the plain run's losses and gradients; checkpointing
// plans less device memory.
TEST(CudaModelCheckpointing, RecomputeAndOffloadGiveThePlainGradients) {
    const std::string why = CudaModel::unavailable_reason();
    if (!why.empty()) GTEST_SKIP() << "no usable CUDA device: " << why;
    for (const char* family : {"bert", "gpt2"}) {
        const bool gpt = std::string(family) == "gpt2";
        const std::string json =
            gpt ? R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 97,
                     "n_embd": 32, "n_layer": 6, "n_head": 4, "n_positions": 64})"
                : R"({"architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": 97,
                     "hidden_size": 32, "num_hidden_layers": 6, "num_attention_heads": 4,
                     "intermediate_size": 64, "max_position_embeddings": 64})";
        const ModelConfig config = parse_hf_config(json, family);
        const int64_t B = 3, T = 16;
        std::vector<int64_t> ids(size_t(B * T)), labels(size_t(B * T), -100);
        for (size_t i = 0; i < ids.size(); ++i) {
            ids[i] = int64_t((i * 37 + 11) % 97);
            if (gpt || i % 5 == 0) labels[i] = ids[i];
        }
        ModelInputs in;
        in.B = B;
        in.T = T;
        in.input_ids = ids.data();
        in.labels = labels.data();
        DropoutPlan drop;
        drop.training = true;
        drop.seed = 5;

        struct Variant {
            int64_t every;
            bool offload;
            int64_t horizon;
        };
        std::vector<std::vector<float>> grads;
        std::vector<double> losses;
        std::vector<int64_t> bytes;
        for (const Variant v : {Variant{0, false, 1}, Variant{1, false, 1}, Variant{2, false, 1},
                                Variant{1, true, 1}, Variant{2, true, 1}, Variant{1, true, 4}}) {
            auto cpu = build_model(config);
            cpu->init(3);
            CudaModelOptions o;
            o.dtype = DType::f32;
            o.checkpoint_every = v.every;
            o.offload_activations = v.offload;
            o.loading_horizon = v.horizon;
            auto gpu = CudaModel::create(*cpu, o);
            double loss = 0;
            for (int step = 0; step < 2; ++step) {  // the second step reuses every slot
                drop.step = uint64_t(step);
                gpu->zero_grad();
                const LossSum l = gpu->forward(in, drop);
                gpu->backward(1.0 / double(l.count));
                loss = l.mean();
            }
            gpu->download_grads();
            const ParamTable& t = cpu->params();
            grads.emplace_back(t.grads_data(), t.grads_data() + t.flat_numel());
            losses.push_back(loss);
            bytes.push_back(gpu->allocated_bytes());
        }
        for (size_t k = 1; k < grads.size(); ++k) {
            EXPECT_NEAR(losses[k], losses[0], 1e-6 * std::fabs(losses[0]))
                << family << " variant " << k;
            double worst = 0;
            for (size_t i = 0; i < grads[0].size(); ++i)
                worst = std::max(worst, double(std::fabs(grads[k][i] - grads[0][i])));
            EXPECT_LT(worst, 1e-6) << family << " variant " << k;
        }
        EXPECT_LT(bytes[1], bytes[0])
            << family << ": checkpointing every layer planned no less memory";
        EXPECT_LT(bytes[3], bytes[1]) << family << ": offloading kept every input on the device";
    }
}

// fp16 with a static loss scale of 1024 (the trainer's GradScaler supplies a
// dynamic one): backward on the scaled loss, the scale removed inside AdamW.
TEST_P(CudaModelFixture, Fp16WithALossScaleFollowsTheCpuLossCurve) {
    const Fixture& f = *fx_;
    auto ref = f.load_model();
    AdamW opt(ref->params(), AdamWParams{1e-3, 0.9, 0.999, 1e-8, 0.01}, DecayPolicy::all);
    auto cpu = f.load_model();
    auto gpu = CudaModel::create(*cpu, fixture_options(DType::f16));
    EXPECT_EQ(gpu->grad_dtype(), DType::f16);
    const ModelInputs in = f.inputs();
    const double scale = 1024.0;
    for (int s = 0; s < 20; ++s) {
        ref->zero_grad();
        const LossSum w = ref->forward(in, DropoutPlan{});
        ref->backward(1.0 / double(w.count));
        opt.step();
        const LossSum g = gpu->forward(in, DropoutPlan{});
        gpu->backward(scale / double(g.count));
        EXPECT_TRUE(std::isfinite(gpu->grad_norm_sq())) << "step " << s;
        gpu->step(1e-3, 1.0 / scale);
        EXPECT_NEAR(g.mean(), w.mean(), 0.03 * std::fabs(w.mean()) + 0.02) << "step " << s;
    }
}

// Fused (flash) attention in the executor against the unfused kernels and the
// CPU, with padding and dropout; a batch with a wholly padded sample falls
// back to the unfused kernels for that batch and still gives the CPU's loss.
TEST_P(CudaModelFixture, FusedAttentionGivesTheUnfusedResults) {
    const Fixture& f = *fx_;
    DropoutPlan drop;
    drop.training = true;
    drop.seed = 23;
    std::vector<std::vector<float>> grads;
    std::vector<double> losses;
    for (bool fused : {false, true}) {
        auto cpu = f.load_model();
        CudaModelOptions o = fixture_options(DType::f32);
        o.fused_attention = fused;
        auto gpu = CudaModel::create(*cpu, o);
        const LossSum l = gpu->forward(f.inputs(), drop);
        gpu->backward(1.0 / double(l.count));
        gpu->download_grads();
        const ParamTable& t = cpu->params();
        grads.emplace_back(t.grads_data(), t.grads_data() + t.flat_numel());
        losses.push_back(l.mean());
    }
    EXPECT_NEAR(losses[1], losses[0], 1e-5 * std::fabs(losses[0]));
    double worst = 0;
    for (size_t i = 0; i < grads[0].size(); ++i)
        worst = std::max(worst, double(std::fabs(grads[1][i] - grads[0][i])));
    EXPECT_LT(worst, f.tol("grad").atol + 1e-5);

    // A wholly padded sample: the fused kernels cannot give HF's uniform
    // weights, so this batch must take the unfused path, matching the CPU.
    ModelInputs in = f.inputs();
    std::vector<int64_t> mask(size_t(in.B * in.T), 1);
    for (int64_t t = 0; t < in.T; ++t) mask[size_t(t)] = 0;
    in.attention_mask = mask.data();
    auto ref = f.load_model();
    const LossSum want = ref->forward(in, DropoutPlan{});
    auto cpu = f.load_model();
    auto gpu = CudaModel::create(*cpu, fixture_options(DType::f32));
    const LossSum got = gpu->forward(in, DropoutPlan{});
    EXPECT_EQ(got.count, want.count);
    EXPECT_NEAR(got.sum, want.sum, 1e-4 * std::fabs(want.sum) + 1e-5);
}

// Masked LM on the labelled rows only: the same loss and gradients as every
// position, and labelled_logits are those rows of the full logits.
TEST_P(CudaModelFixture, LabelledPositionsGiveTheSameLossAndGradients) {
    const Fixture& f = *fx_;
    if (f.config.task != Task::masked_lm) GTEST_SKIP() << f.name << " is not masked LM";
    std::vector<std::vector<float>> grads;
    std::vector<double> sums;
    std::map<std::string, Tensor> outs[2];
    for (int sparse = 0; sparse < 2; ++sparse) {
        auto cpu = f.load_model();
        auto gpu = CudaModel::create(*cpu, fixture_options(DType::f32));
        gpu->set_logits_scope(sparse ? LogitsScope::labelled_positions
                                     : LogitsScope::all_positions);
        const LossSum l = gpu->forward(f.inputs(), DropoutPlan{});
        outs[sparse] = gpu->outputs();
        gpu->backward(1.0 / double(l.count));
        gpu->download_grads();
        const ParamTable& t = cpu->params();
        grads.emplace_back(t.grads_data(), t.grads_data() + t.flat_numel());
        sums.push_back(l.sum);
    }
    EXPECT_NEAR(sums[1], sums[0], 1e-5 * std::fabs(sums[0]));
    double worst = 0;
    for (size_t i = 0; i < grads[0].size(); ++i)
        worst = std::max(worst, double(std::fabs(grads[1][i] - grads[0][i])));
    EXPECT_LT(worst, 1e-6);
    ASSERT_TRUE(outs[1].count("labelled_logits"));
    const Tensor& all = outs[0].at("logits");
    const Tensor& some = outs[1].at("labelled_logits");
    const int64_t V = all.shape[2];
    const ModelInputs in = f.inputs();
    int64_t m = 0;
    for (int64_t i = 0; i < in.B * in.T; ++i) {
        if (in.labels[i] == -100) continue;
        for (int64_t v = 0; v < V; ++v)
            ASSERT_NEAR(some.data<float>()[m * V + v], all.data<float>()[i * V + v], 1e-5);
        ++m;
    }
    EXPECT_EQ(m, some.shape[0]);
}

INSTANTIATE_TEST_SUITE_P(Hf, CudaModelFixture, ::testing::ValuesIn(hf_fixture_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                             std::string n = p.param;
                             for (char& c : n)
                                 if (c == '-') c = '_';
                             return n;
                         });

}  // namespace
}  // namespace loom::test
