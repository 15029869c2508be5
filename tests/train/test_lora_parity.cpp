// LoRA against PEFT 0.10 (tests/data/hf/llama-lora, README "LoRA"): logits,
// loss and hidden states of the adapter model, the adapter's gradients, one
// AdamW step over the adapter only, the merged weights, and the adapter
// folder Loom exports (PEFT's keys and adapter_config.json). The parity
// tests run on each test backend (tests/test_backends.h), as HfParity does:
// the staged one reaches the table only through uploads and downloads, its
// host copies poisoned in between.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/file_utils.h"
#include "models/hf_fixture.h"
#include "optim/adamw.h"
#include "test_backends.h"
#include "train/export_peft.h"

namespace loom {
namespace {

using test::close;
using test::Fixture;
using test::read_tensors;
using test::Tol;

const std::string k_prefix = "base_model.model.";

std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

class LoraParity : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        if (const std::string why = test::backend_absent_reason(GetParam()); !why.empty())
            GTEST_SKIP() << why;
        if (!backend().ops().nn->decoder_supported())
            GTEST_SKIP() << GetParam() << " has no Llama kernels yet";
        fx_ = std::make_unique<Fixture>("llama-lora");
        cfg_ = nlohmann::json::parse(slurp(fx_->dir + "/adapter_config.json"));
        adapter_ = read_tensors(fx_->dir + "/adapter_model.safetensors");
    }
    LoraSpec spec() const {
        LoraSpec s;
        s.r = cfg_.at("r").get<int64_t>();
        s.lora_alpha = cfg_.at("lora_alpha").get<double>();
        s.target_modules = cfg_.at("target_modules").get<std::vector<std::string>>();
        return s;
    }
    Backend& backend() const { return test::test_backend(GetParam()); }
    ModelPlacement placement() const {
        ModelPlacement p;
        p.device = ParamDevice{&backend()};
        return p;
    }
    // The base from model.safetensors, the adapter from
    // adapter_model.safetensors, on this test's backend with its host copies
    // poisoned (a later host read must download first).
    std::unique_ptr<Model> load() const {
        ModelConfig c = fx_->config;
        c.lora = spec();
        auto m = build_model(c, placement());
        const LoadReport r = m->load(SafetensorsFile::open(fx_->dir + "/model.safetensors"));
        EXPECT_TRUE(r.newly_initialised.empty());
        EXPECT_TRUE(r.unused.empty());
        ParamTable& t = m->params();
        for (const auto& [k, v] : adapter_) {
            const int i = t.index(k.substr(k_prefix.size()));
            EXPECT_TRUE(t.row(i).adapter && t.row(i).trainable) << k;
            EXPECT_EQ(t.row(i).shape, v.shape) << k;
            std::memcpy(t.param(i), v.raw(), v.nbytes());
        }
        t.upload_params();
        test::poison_host_copies(t);
        return m;
    }
    std::unique_ptr<Fixture> fx_;
    nlohmann::json cfg_;
    std::map<std::string, Tensor> adapter_;
};

TEST_P(LoraParity, ForwardLogitsLossHiddenStates) {
    const Fixture& f = *fx_;
    auto m = load();
    const LossSum loss = m->forward(f.inputs(), DropoutPlan{});
    EXPECT_TRUE(
        close("logits", m->outputs().at("logits"), f.expected.at("logits"), f.tol("logits")));
    const float got = float(loss.mean()), ref = f.expected.at("loss").data<float>()[0];
    EXPECT_TRUE(close("loss", &got, &ref, 1, f.tol("loss")));
    ASSERT_EQ(m->num_hidden_states(), int(f.config.num_hidden_layers) + 1);
    for (int i = 0; i < m->num_hidden_states(); ++i) {
        const std::string k = "hidden_states." + std::to_string(i);
        EXPECT_TRUE(close(k, m->hidden_state(i), f.expected.at(k), f.tol("hidden_states")));
    }
}

TEST_P(LoraParity, AdapterGradientsOnly) {
    const Fixture& f = *fx_;
    auto m = load();
    ParamTable& t = m->params();
    m->zero_grad();
    const LossSum loss = m->forward(f.inputs(), DropoutPlan{});
    m->backward(1.0 / double(loss.count));
    t.download_grads();
    int n = 0;
    for (const auto& [k, ref] : f.expected) {
        if (k.rfind("grad.", 0) != 0) continue;
        ++n;
        const int i = t.index(k.substr(5 + k_prefix.size()));
        EXPECT_TRUE(close(k, t.grad_tensor(i), ref, f.tol("grad")));
    }
    EXPECT_EQ(n, 20);
    // Only the adapter is trainable: the frozen base gets no gradient at all.
    EXPECT_EQ(t.grad_tensors().size(), adapter_.size());
    for (int i = 0; i < t.size(); ++i) {
        if (t.row(i).trainable) continue;
        const Tensor g = t.grad_tensor(i);
        for (int64_t e = 0; e < g.numel(); ++e)
            ASSERT_EQ(g.data<float>()[e], 0.0f) << t.row(i).name;
    }
}

// AdamW over the adapter: from the stored gradients (optimizer alone) and
// end to end; the base is bitwise unchanged and the optimizer holds moments
// for the adapter's elements only.
TEST_P(LoraParity, AdamWOverTheAdapterOnly) {
    const Fixture& f = *fx_;
    const auto base = read_tensors(f.dir + "/model.safetensors");
    for (bool stored : {true, false}) {
        SCOPED_TRACE(stored ? "stored gradients" : "end to end");
        auto m = load();
        ParamTable& t = m->params();
        m->zero_grad();
        if (stored) {
            for (const auto& [k, v] : adapter_) {
                const Tensor& g = f.expected.at("grad." + k);
                t.backend().to_device(t.device_grad(t.index(k.substr(k_prefix.size()))), g.raw(),
                                      g.nbytes());
            }
        } else {
            const LossSum loss = m->forward(f.inputs(), DropoutPlan{});
            m->backward(1.0 / double(loss.count));
        }
        AdamW opt(t, AdamWParams{1e-3, 0.9, 0.999, 1e-8, 0.01}, DecayPolicy::all);
        EXPECT_EQ(opt.state_bytes(), 2 * 5376 * int64_t(sizeof(float)));
        EXPECT_EQ(opt.state_tensors().size(), 2 * adapter_.size());
        opt.step();
        t.download_params();
        const auto& e2e = f.manifest.at("suggested_tolerances").at("after_adamw_end_to_end");
        for (const auto& [k, ref] : f.after) {
            const int i = t.index(k.substr(k_prefix.size()));
            const Tensor p = t.param_tensor(i);
            if (stored) {
                EXPECT_TRUE(close(k, p, ref, f.tol("after_adamw_from_stored_grads")));
                continue;
            }
            const Tensor& g = f.expected.at("grad." + k);
            std::vector<double> atol_of(size_t(g.numel()));
            for (int64_t e = 0; e < g.numel(); ++e)
                atol_of[size_t(e)] = std::fabs(g.data<float>()[e]) >= 1e-6
                                         ? e2e.at("atol").get<double>()
                                         : e2e.at("atol_elsewhere").get<double>();
            EXPECT_TRUE(
                close(k, p.data<float>(), ref.data<float>(), p.numel(), Tol{0, 0}, &atol_of));
        }
        for (const auto& [k, w] : base) {
            const Tensor p = t.param_tensor(t.index(k));
            EXPECT_EQ(std::memcmp(p.raw(), w.raw(), w.nbytes()), 0) << k << " changed";
        }
    }
}

TEST_P(LoraParity, MergedWeightsMatchPeft) {
    auto m = load();
    m->params().download_params();
    const auto merged = merged_tensors(m->params(), spec(), false);
    const auto ref = read_tensors(fx_->dir + "/merged.safetensors");
    ASSERT_EQ(merged.size(), ref.size());
    for (const auto& [k, r] : ref) {
        ASSERT_TRUE(merged.count(k)) << k;
        // W + (B @ A) * scaling in fp32: PEFT's sum over r may round once differently.
        EXPECT_TRUE(close(k, merged.at(k), r, Tol{1e-7, 0}));
    }
    // And the merged model computes the adapter model's logits.
    ModelConfig c = fx_->config;
    auto plain = build_model(c, placement());
    ParamTable& t = plain->params();
    for (int i = 0; i < t.size(); ++i)
        std::memcpy(t.param(i), merged.at(t.row(i).name).raw(), size_t(t.row(i).numel()) * 4);
    t.upload_params();
    plain->forward(fx_->inputs(), DropoutPlan{});
    EXPECT_TRUE(close("merged logits", plain->outputs().at("logits"), fx_->expected.at("logits"),
                      fx_->tol("logits")));
}

TEST_P(LoraParity, ExportedAdapterFolderIsPeftsFormat) {
    auto m = load();
    m->params().download_params();
    const std::string dir = ::testing::TempDir() + "/lora_export_" + GetParam();
    std::filesystem::remove_all(dir);
    export_peft_adapter(dir, m->params(), spec(), Task::causal_lm, "");
    // adapter_config.json: PEFT's text for this adapter, byte for byte.
    EXPECT_EQ(slurp(dir + "/adapter_config.json"), slurp(fx_->dir + "/adapter_config.json"));
    const auto got = read_tensors(dir + "/adapter_model.safetensors");
    ASSERT_EQ(got.size(), adapter_.size());
    for (const auto& [k, v] : adapter_) {
        ASSERT_TRUE(got.count(k)) << k;
        ASSERT_EQ(got.at(k).shape, v.shape) << k;
        EXPECT_EQ(std::memcmp(got.at(k).raw(), v.raw(), v.nbytes()), 0) << k;
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, LoraParity, ::testing::ValuesIn(test::test_backend_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(LoraInit, AsPeftKaimingUniformAndZeroB) {
    ModelConfig c = load_hf_config(test::hf_dir() + "/llama-lm");
    c.lora.r = 4;
    c.lora.target_modules = {"q_proj", "down_proj"};
    auto m = build_model(c);
    ParamTable& t = m->params();
    m->init(7);
    int n_a = 0;
    for (int i = 0; i < t.size(); ++i) {
        const ParamRow& r = t.row(i);
        EXPECT_EQ(r.trainable, r.adapter) << r.name;
        if (!r.adapter) continue;
        const Tensor p = t.param_tensor(i);
        const bool is_a = r.name.find("lora_A") != std::string::npos;
        const double bound = 1.0 / std::sqrt(double(r.shape[1]));
        double mx = 0;
        for (int64_t e = 0; e < p.numel(); ++e) {
            const double v = p.data<float>()[e];
            if (is_a)
                ASSERT_LE(std::fabs(v), bound) << r.name;
            else
                ASSERT_EQ(v, 0.0) << r.name;
            mx = std::max(mx, std::fabs(v));
        }
        if (is_a) {
            ++n_a;
            EXPECT_GT(mx, 0.8 * bound) << r.name << " does not spread over U(-b, b)";
        }
    }
    EXPECT_EQ(n_a, 2 * int(c.num_hidden_layers));
    // A target that names no linear is an error naming the key.
    c.lora.target_modules = {"query"};
    try {
        build_model(c);
        FAIL() << "an unknown target was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("peft.target_modules: 'query'"), std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Every family takes adapters by its HF linear names (PEFT's defaults), a
// classifier head is trained in full through modules_to_save, and with B = 0
// the adapter model is the base model: HF's logits, a gradient for B only.
TEST(LoraFamilies, DefaultTargetsIdentityAtInitAndSavedHead) {
    struct Case {
        const char* fixture;
        ModelFamily family;
        std::vector<std::string> save;
    };
    for (const Case& k : {Case{"bert-cls", ModelFamily::bert, {"classifier"}},
                          Case{"distilbert-cls", ModelFamily::distilbert, {"classifier"}},
                          Case{"gpt2-lm", ModelFamily::gpt2, {}},
                          Case{"llama-cls", ModelFamily::llama, {"score"}}}) {
        SCOPED_TRACE(k.fixture);
        const Fixture f(k.fixture);
        ModelConfig c = f.config;
        ASSERT_EQ(c.family, k.family);
        c.lora.r = 2;
        c.lora.target_modules = peft_default_targets(c.family);
        c.lora.modules_to_save = k.save;
        auto m = build_model(c);
        m->load(SafetensorsFile::open(f.dir + "/model.safetensors"), 3);
        ParamTable& t = m->params();
        int saved = 0;
        for (const ParamRow& r : t.rows()) {
            const bool head = !k.save.empty() && r.name.rfind(k.save[0] + ".", 0) == 0;
            EXPECT_EQ(r.trainable, r.adapter || head) << r.name;
            saved += head;
        }
        EXPECT_EQ(saved > 0, !k.save.empty());
        m->zero_grad();
        const LossSum loss = m->forward(f.inputs(), DropoutPlan{});
        EXPECT_TRUE(
            close("logits", m->outputs().at("logits"), f.expected.at("logits"), f.tol("logits")));
        m->backward(1.0 / double(loss.count));
        int b_moved = 0;
        for (int i = 0; i < t.size(); ++i) {
            const ParamRow& r = t.row(i);
            const Tensor g = t.grad_tensor(i);
            double mx = 0;
            for (int64_t e = 0; e < g.numel(); ++e)
                mx = std::max(mx, double(std::fabs(g.data<float>()[e])));
            if (!r.trainable || r.name.find("lora_A") != std::string::npos)
                EXPECT_EQ(mx, 0.0) << r.name;  // frozen, or behind B = 0
            else if (r.name.find("lora_B") != std::string::npos)
                b_moved += mx > 0;
        }
        EXPECT_GT(b_moved, 0);
        const auto exported = adapter_tensors(t);
        for (const std::string& s : k.save)
            EXPECT_TRUE(exported.count("base_model.model." + s + ".weight")) << s;
    }
}

}  // namespace
}  // namespace loom
