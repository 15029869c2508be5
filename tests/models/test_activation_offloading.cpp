// Activation offloading (Model::set_activation_offloading, models/act_offload.h)
// on each backend: the CPU (copies done at once), the staged backend with its
// copy queue run as early as a device could run it (eager) and as late as the
// markers allow (deferred), and a GPU (a second stream). For every model
// family, with dropout on, the loss and every gradient are bitwise those of
// the run that keeps every activation, for checkpointing every layer and
// every 2nd, at horizons 0, 1 and past the end, over two steps; the device
// plan holds R = horizon + 1 of the checkpointed inputs instead of all of
// them; and exactly the inputs below the last R cross to the host and back.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "hf_fixture.h"
#include "test_backends.h"

namespace loom::test {
namespace {

struct StepResult {
    double loss = 0;
    std::vector<float> grads;
    int64_t act_bytes = 0;
};

StepResult step(Model& m, const ModelInputs& in, int64_t every_k, bool offload,
                int64_t horizon) {
    m.set_activation_checkpointing(every_k);
    m.set_activation_offloading(offload, horizon);
    m.zero_grad();
    DropoutPlan drop;
    drop.training = true;
    drop.seed = 1234;
    drop.step = 3;
    const LossSum l = m.forward(in, drop);
    EXPECT_GT(l.count, 0);
    m.backward(1.0 / double(l.count));
    const ParamTable& t = m.params();
    t.download_grads();
    StepResult r;
    r.loss = l.sum;
    r.grads.assign(t.grads_data(), t.grads_data() + t.flat_numel());
    r.act_bytes = m.activation_bytes();
    return r;
}

size_t mismatches(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return a.size() + b.size();
    size_t n = 0;
    for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return n;
}

// "on_cpu", "staged_eager", "staged_deferred", "on_cuda".
class ActivationOffloading : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        const std::string p = GetParam();
        name_ = p == "on_cpu" ? "cpu" : p == "on_cuda" ? "cuda" : "staged";
        const std::string absent = backend_absent_reason(name_);
        if (!absent.empty()) GTEST_SKIP() << absent;
        staged_ = dynamic_cast<StagedBackend*>(&test_backend(name_));
        if (staged_)
            staged_->copy_mode = p == "staged_deferred" ? StagedBackend::CopyMode::deferred
                                                        : StagedBackend::CopyMode::eager;
    }
    void TearDown() override {
        if (staged_) staged_->copy_mode = StagedBackend::CopyMode::eager;
    }
    Backend& backend() const { return test_backend(name_); }
    std::string name_;
    StagedBackend* staged_ = nullptr;
};

TEST_P(ActivationOffloading, GradientsAreBitwiseTheKeptActivationsOnes) {
    for (const std::string& name : hf_fixture_names()) {
        SCOPED_TRACE(name);
        const Fixture f(name);
        ModelConfig c = f.config;
        c.num_hidden_layers = 6;
        c.hidden_dropout = c.embedding_dropout = c.attention_dropout = 0.2;
        ModelPlacement place;
        place.device = ParamDevice{&backend()};
        auto m = build_model(c, place);
        m->init(11);
        const ModelInputs in = f.inputs();
        const int64_t slot = (in.B * in.T * c.hidden_size + 15) / 16 * 16 * 4;  // f32, aligned
        const StepResult plain = step(*m, in, 0, false, 0);
        for (int64_t k : {1, 2}) {
            const int64_t n = (c.num_hidden_layers + k - 1) / k;  // checkpointed inputs
            const StepResult kept = step(*m, in, k, false, 0);
            for (int64_t horizon : {0, 1, 9}) {
                SCOPED_TRACE("every " + std::to_string(k) + ", horizon " +
                             std::to_string(horizon));
                // Checkpointing every layer: an application's input and
                // output are both offloaded, and never share a slot.
                const int64_t R = std::max<int64_t>(std::min(horizon + 1, n), k == 1 ? 2 : 1);
                const size_t out0 = staged_ ? staged_->offloaded : 0;
                const size_t in0 = staged_ ? staged_->reloaded : 0;
                for (int rep = 0; rep < 2; ++rep) {
                    const StepResult off = step(*m, in, k, true, horizon);
                    EXPECT_EQ(off.loss, plain.loss);
                    EXPECT_EQ(mismatches(off.grads, plain.grads), 0u) << "step " << rep;
                    // n inputs in R slots, plus the recomputed output's slot.
                    EXPECT_EQ(kept.act_bytes - off.act_bytes, (n - R - 1) * slot);
                }
                if (staged_) {
                    backend().synchronize();
                    const size_t moved = size_t(2 * (n - R) * slot);
                    EXPECT_EQ(staged_->offloaded - out0, moved);
                    EXPECT_EQ(staged_->reloaded - in0, moved);
                }
            }
        }
        // Off again: the plain plan and gradients.
        const StepResult again = step(*m, in, 0, false, 0);
        EXPECT_EQ(again.act_bytes, plain.act_bytes);
        EXPECT_EQ(mismatches(again.grads, plain.grads), 0u);
    }
}

// Hidden states that went to the host are left out of outputs() and refused
// by hidden_state(), with the reason; the others are still there.
TEST_P(ActivationOffloading, OffloadedHiddenStatesAreNotOutputs) {
    const Fixture f("bert-mlm");
    ModelConfig c = f.config;
    c.num_hidden_layers = 4;
    ModelPlacement place;
    place.device = ParamDevice{&backend()};
    auto m = build_model(c, place);
    m->init(3);
    m->set_logits_scope(LogitsScope::all_positions);
    m->set_activation_checkpointing(2);
    m->set_activation_offloading(true, 0);
    m->forward(f.inputs(), DropoutPlan{});
    const auto out = m->outputs();
    // Inputs of applications 0 and 2 (hidden states 0 and 2) are offloaded;
    // 4, the last layer's output, is no application's input.
    for (int i = 0; i <= 4; ++i)
        EXPECT_EQ(out.count("hidden_states." + std::to_string(i)), i == 0 || i == 2 ? 0u : 1u)
            << i;
    EXPECT_EQ(out.count("logits"), 1u);
    try {
        (void)m->hidden_state(2);
        ADD_FAILURE() << "an offloaded hidden state was handed out";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("offloading moved it to host memory"),
                  std::string::npos)
            << e.what();
    }
}

// The staged backend's deferred copy queue really defers: a copy-out is not
// in host memory until compute waits on a marker set after it, so a model
// that forgot that wait would read stale memory in the test above.
TEST(StagedCopyQueue, DeferredCopiesRunOnlyWhenWaitedFor) {
    auto& be = dynamic_cast<StagedBackend&>(test_backend("staged"));
    be.copy_mode = StagedBackend::CopyMode::deferred;
    float dev[4] = {1, 2, 3, 4}, host[4] = {0, 0, 0, 0};
    auto done = be.new_marker();
    be.copy_out(host, dev, sizeof dev);
    be.mark(*done, Backend::Queue::copy);
    EXPECT_EQ(host[0], 0.0f);
    dev[0] = 9;  // compute rewrote the source before the copy ran
    be.wait_for(Backend::Queue::compute, *done);
    EXPECT_EQ(host[0], 9.0f);
    EXPECT_EQ(host[3], 4.0f);
    float back[4] = {0, 0, 0, 0};
    be.copy_back(back, host, sizeof back);
    EXPECT_EQ(back[1], 0.0f);
    be.synchronize();
    EXPECT_EQ(back[1], 2.0f);
    be.copy_mode = StagedBackend::CopyMode::eager;
    be.copy_out(host, back, sizeof back);
    EXPECT_EQ(host[0], 9.0f);
}

std::vector<std::string> params() {
    std::vector<std::string> p = {"on_cpu", "staged_eager", "staged_deferred"};
#ifdef LOOM_TEST_CUDA
    p.push_back("on_cuda");
#endif
    return p;
}

std::string param_name(const ::testing::TestParamInfo<std::string>& p) { return p.param; }

INSTANTIATE_TEST_SUITE_P(Backends, ActivationOffloading, ::testing::ValuesIn(params()),
                         param_name);

}  // namespace
}  // namespace loom::test
