// Packed documents (ModelInputs::position_ids): a batch of several documents
// packed into rows gives every document the logits and loss it gets alone,
// and the gradient of the summed loss is the sum of the documents' gradients
// — for GPT-2 (learned positions), Llama (rotary, grouped heads), Qwen2 and
// Mistral (sliding window), on every test backend (the staged one takes the
// fused attention path, as a GPU does).
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "hf_fixture.h"
#include "test_backends.h"

namespace loom::test {
namespace {

struct Pass {
    LossSum loss;
    std::vector<float> logits, grads;
};

// Documents of deterministic ids, packed into B rows of T: lens[b] gives row
// b's documents; the rest of a row is padding (a document of its own).
struct PackedBatch {
    int64_t B, T;
    std::vector<std::vector<int64_t>> lens;
    std::vector<int64_t> ids, mask, labels, positions;
    PackedBatch(int64_t b, int64_t t, std::vector<std::vector<int64_t>> l, int64_t vocab)
        : B(b), T(t), lens(std::move(l)) {
        for (int64_t r = 0; r < B; ++r) {
            int64_t t0 = 0;
            for (int64_t n : lens[size_t(r)]) {
                for (int64_t i = 0; i < n; ++i) {
                    ids.push_back(((r * T + t0 + i) * 37 + 11) % vocab);
                    mask.push_back(1);
                    // A document's first token is no target: nothing of it precedes.
                    labels.push_back(i == 0 ? -100 : ids.back());
                    positions.push_back(i);
                }
                t0 += n;
            }
            for (int64_t i = t0; i < T; ++i) {
                ids.push_back(0);
                mask.push_back(0);
                labels.push_back(-100);
                positions.push_back(i - t0);
            }
        }
    }
    ModelInputs inputs(bool with_positions) const {
        ModelInputs in;
        in.B = B;
        in.T = T;
        in.input_ids = ids.data();
        in.attention_mask = mask.data();
        in.labels = labels.data();
        in.position_ids = with_positions ? positions.data() : nullptr;
        return in;
    }
};

// Forward and backward of the summed loss (loss scale 1), gradients added to
// what the model holds (the caller zeroes them).
Pass run(Model& m, const ModelInputs& in) {
    Pass p;
    p.loss = m.forward(in, DropoutPlan{});
    m.backward(1.0);
    const Tensor logits = m.outputs().at("logits");
    p.logits.assign(logits.data<float>(), logits.data<float>() + logits.numel());
    return p;
}

std::vector<float> grads_of(Model& m) {
    ParamTable& t = m.params();
    t.download_grads();
    return {t.grads_data(), t.grads_data() + t.flat_numel()};
}

using Param = std::tuple<std::string, std::string>;  // fixture, backend

class PackedDocuments : public ::testing::TestWithParam<Param> {};

TEST_P(PackedDocuments, EachDocumentAsIfAlone) {
    const auto& [fixture, backend] = GetParam();
    if (const std::string why = backend_absent_reason(backend); !why.empty()) GTEST_SKIP() << why;
    const Fixture f(fixture);
    if (backend == "cuda" && f.config.sliding_window >= 0)
        GTEST_SKIP() << "the CUDA attention kernels take no sliding window";
    auto model = f.load_model(ParamDevice{&test_backend(backend)});
    const int64_t V = f.config.vocab_size;
    // Documents longer than Mistral's window of 6, a piece of one document.
    const PackedBatch packed(2, 16, {{5, 8, 3}, {9, 4}}, V);

    model->zero_grad();
    const Pass all = run(*model, packed.inputs(true));
    const std::vector<float> g_all = grads_of(*model);

    model->zero_grad();
    LossSum alone_sum;
    std::vector<Pass> alone;
    for (int64_t b = 0; b < packed.B; ++b) {
        int64_t t0 = 0;
        for (int64_t n : packed.lens[size_t(b)]) {
            const auto at = [&](const std::vector<int64_t>& v) {
                return std::vector<int64_t>(v.begin() + b * packed.T + t0,
                                            v.begin() + b * packed.T + t0 + n);
            };
            const std::vector<int64_t> ids = at(packed.ids), mask = at(packed.mask),
                                       labels = at(packed.labels);
            ModelInputs in;
            in.B = 1;
            in.T = n;
            in.input_ids = ids.data();
            in.attention_mask = mask.data();
            in.labels = labels.data();
            alone.push_back(run(*model, in));
            alone_sum.sum += alone.back().loss.sum;
            alone_sum.count += alone.back().loss.count;
            // This document's logits in the packed batch.
            const int64_t first = (b * packed.T + t0) * V;
            const std::string where =
                "sample " + std::to_string(b) + ", document at " + std::to_string(t0);
            EXPECT_TRUE(close(where + " logits", all.logits.data() + first,
                              alone.back().logits.data(), n * V, Tol{1e-5, 1e-5}));
            t0 += n;
        }
    }
    const std::vector<float> g_alone = grads_of(*model);
    EXPECT_EQ(all.loss.count, alone_sum.count);
    EXPECT_NEAR(all.loss.sum, alone_sum.sum, 1e-5 * std::abs(alone_sum.sum));
    double g_max = 0;
    for (float g : g_alone) g_max = std::max(g_max, double(std::abs(g)));
    ASSERT_GT(g_max, 0.0);
    EXPECT_TRUE(close("gradients", g_all.data(), g_alone.data(), int64_t(g_all.size()),
                      Tol{1e-5 * g_max, 1e-5}));

    // Without position_ids the rows are single texts: the documents see each
    // other, and the logits and the loss move by far more than the tolerances
    // above (the fixtures' random weights make the context matter little).
    model->zero_grad();
    const Pass mixed = run(*model, packed.inputs(false));
    EXPECT_EQ(mixed.loss.count, all.loss.count);
    EXPECT_GT(std::abs(mixed.loss.sum - all.loss.sum), 1e-4 * std::abs(all.loss.sum));
    EXPECT_FALSE(close("logits without boundaries", mixed.logits.data(), all.logits.data(),
                       int64_t(all.logits.size()), Tol{1e-5, 1e-5}));
}

// position_ids must count up from 0 inside each document.
TEST(PackedDocumentsInput, PositionsThatDoNotCountUpAreRefused) {
    const Fixture f("gpt2-lm");
    auto model = f.load_model();
    PackedBatch packed(1, 6, {{3, 3}}, f.config.vocab_size);
    packed.positions[4] = 2;  // 0 1 2 0 2 ...
    try {
        model->forward(packed.inputs(true), DropoutPlan{});
        FAIL() << "accepted position_ids 0 1 2 0 2";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("position_ids"), std::string::npos) << e.what();
    }
}

std::vector<Param> params() {
    std::vector<Param> out;
    for (const char* fx : {"gpt2-lm", "llama-lm", "qwen2-lm", "mistral-lm"})
        for (const std::string& b : test_backend_names()) out.emplace_back(fx, b);
    return out;
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
    std::string s = std::get<0>(info.param) + "_" + std::get<1>(info.param);
    for (char& c : s)
        if (c == '-') c = '_';
    return s;
}

INSTANTIATE_TEST_SUITE_P(Families, PackedDocuments, ::testing::ValuesIn(params()), param_name);

}  // namespace
}  // namespace loom::test
