// Whole models built for a tensor-parallel slice (ModelPlacement::tp) against the
// same model built whole, on CommLocal threads (tp 2), for every HF fixture
// (BERT, RoBERTa, DistilBERT, ALBERT, GPT-2; masked LM, classification, QA,
// causal LM heads).
//
// Invariant checked: a sharded model is the unsharded one, cut (linears by
// heads and features, the word table and LM decoders by vocabulary). Loading the
// fixture's global checkpoint gives every rank its slice; with dropout on, the
// loss and the outputs equal the 1-rank ones, and every gradient, its sharded
// rows assembled over tp (all_gather), equals the 1-rank gradient; replicated
// rows hold the same gradient on every tp rank. Init from a seed draws the
// 1-rank values exactly.
//
// On the staged stand-in (tests/test_backends.h: host memory behind a backend
// the host may not read, its host copies poisoned), a tp slice computes the
// CPU slice's loss, outputs and gradients bit for bit: the regions' and the
// vocab-parallel ops' collectives run on the backend's memory.
//
// Not here: optimizer steps, data/pipeline parallelism and checkpoint files
// (tests/cli/train_tp.sh runs those through `loom train`).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "comm/comm_local.h"
#include "hf_fixture.h"
#include "parallel/tp_layers.h"
#include "test_backends.h"

namespace loom::test {
namespace {

constexpr int k_tp = 2;

struct StepOut {
    double loss = 0;
    int64_t count = 0;
    std::map<std::string, std::vector<float>> grads;    // by row name, global
    std::map<std::string, std::vector<float>> outputs;  // logits and the like
};

std::vector<float> values(const Tensor& t) {
    const Tensor f = t.dtype == DType::f32 ? t : t.to(DType::f32);
    const float* p = static_cast<const float*>(f.raw());
    return std::vector<float>(p, p + f.numel());
}

// One forward and backward with dropout on; sharded gradients assembled on tp.
StepOut run(Model& m, const ModelInputs& in, Communicator* tp) {
    m.zero_grad();
    DropoutPlan drop;
    drop.training = true;
    drop.seed = 99;
    drop.step = 2;
    const LossSum l = m.forward(in, drop);
    StepOut r;
    r.loss = l.sum;
    r.count = l.count;
    EXPECT_GT(l.count, 0);
    m.backward(1.0 / double(l.count));
    const ParamTable& t = m.params();
    t.download_grads();  // the host's view of a device table
    for (int i = 0; i < t.size(); ++i) {
        const ParamRow& row = t.row(i);
        if (!row.trainable) continue;
        Tensor g = t.grad_tensor(i);
        if (row.shard.sharded()) g = tp_assemble_row_tensor(row.shard, g, *tp);
        r.grads[row.name] = values(g);
    }
    for (const auto& [name, t_out] : m.outputs()) r.outputs[name] = values(t_out);
    return r;
}

// |got - want| <= atol + rtol * max|want| elementwise; names the worst element.
void expect_near(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                 const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double scale = 0;
    for (float w : want) scale = std::max(scale, double(std::fabs(w)));
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double d = std::fabs(double(got[i]) - double(want[i]));
        if (!(d <= worst)) {
            worst = d;
            at = i;
        }
    }
    EXPECT_LE(worst, 1e-7 + rtol * scale)
        << what << ": worst difference " << worst << " at element " << at << " (scale " << scale
        << ")";
}

TEST(TensorParallelModel, LossOutputsAndGradientsEqualTheWholeModel) {
    for (const std::string& name : hf_fixture_names()) {
        SCOPED_TRACE(name);
        const Fixture f(name);
        ModelConfig c = f.config;
        c.hidden_dropout = c.embedding_dropout = c.attention_dropout = 0.2;
        const ModelInputs in = f.inputs();
        const std::string weights = f.dir + "/model.safetensors";
        auto whole = build_model(c);
        EXPECT_FALSE(whole->tp_slice().active());
        whole->load(SafetensorsFile::open(weights));
        const StepOut ref = run(*whole, in, nullptr);

        std::vector<StepOut> got(k_tp);
        std::vector<std::map<std::string, std::vector<float>>> replicated(k_tp);
        comm_local_run(k_tp, [&](Communicator& tp) {
            ModelPlacement place;
            place.tp = ModelTp{tp.rank(), tp.size(), &tp};
            auto m = build_model(c, place);
            // The model keeps its placement.
            EXPECT_EQ(m->tp_slice().rank, tp.rank());
            EXPECT_EQ(m->placement().tp.comm, &tp);
            EXPECT_TRUE(m->placement().part.whole());
            const LoadReport rep = m->load(SafetensorsFile::open(weights));
            EXPECT_TRUE(rep.unused.empty());
            // Some row must really be split, or this test proves nothing.
            int64_t sharded = 0;
            for (const ParamRow& r : m->params().rows()) sharded += r.shard.sharded();
            EXPECT_GT(sharded, 0);
            EXPECT_LT(m->params().num_parameters(), whole->params().num_parameters());
            got[size_t(tp.rank())] = run(*m, in, &tp);
            const ParamTable& t = m->params();
            for (int i = 0; i < t.size(); ++i)
                if (t.row(i).trainable && !t.row(i).shard.sharded())
                    replicated[size_t(tp.rank())][t.row(i).name] = values(t.grad_tensor(i));
        });
        for (int r = 0; r < k_tp; ++r) {
            SCOPED_TRACE("tp rank " + std::to_string(r));
            const StepOut& g = got[size_t(r)];
            EXPECT_EQ(g.count, ref.count);
            EXPECT_NEAR(g.loss, ref.loss, 1e-5 * std::fabs(ref.loss));
            ASSERT_EQ(g.grads.size(), ref.grads.size());
            for (const auto& [n, want] : ref.grads) expect_near(g.grads.at(n), want, 2e-5, n);
            // LM heads report no logits under tp (a vocabulary slice is not
            // HF's output); the hidden states and other heads' logits remain.
            for (const auto& [n, want] : ref.outputs)
                if (g.outputs.count(n)) expect_near(g.outputs.at(n), want, 1e-5, n);
            EXPECT_GT(g.outputs.size(), 0u);
        }
        // Replicated rows: the same gradient on every tp rank, bit for bit,
        // so they stay identical without a sum over tp.
        for (const auto& [n, g0] : replicated[0]) EXPECT_EQ(replicated[1].at(n), g0) << n;
    }
}

TEST(TensorParallelModel, OnTheStagedBackendAsOnTheCpu) {
    for (const std::string& name : hf_fixture_names()) {
        SCOPED_TRACE(name);
        const Fixture f(name);
        ModelConfig c = f.config;
        c.hidden_dropout = c.embedding_dropout = c.attention_dropout = 0.2;
        const ModelInputs in = f.inputs();
        const std::string weights = f.dir + "/model.safetensors";
        std::vector<StepOut> cpu(k_tp), dev(k_tp);
        for (const bool staged : {false, true}) {
            comm_local_run(k_tp, [&](Communicator& tp) {
                ModelPlacement place;
                place.tp = ModelTp{tp.rank(), tp.size(), &tp};
                if (staged) place.device.be = &test_backend("staged");
                auto m = build_model(c, place);
                m->load(SafetensorsFile::open(weights));
                EXPECT_EQ(m->params().staged(), staged);
                poison_host_copies(m->params());
                (staged ? dev : cpu)[size_t(tp.rank())] = run(*m, in, &tp);
            });
        }
        for (int r = 0; r < k_tp; ++r) {
            SCOPED_TRACE("tp rank " + std::to_string(r));
            const StepOut &g = dev[size_t(r)], &want = cpu[size_t(r)];
            EXPECT_EQ(g.count, want.count);
            EXPECT_EQ(g.loss, want.loss);
            EXPECT_TRUE(std::isfinite(g.loss));
            ASSERT_EQ(g.grads.size(), want.grads.size());
            for (const auto& [n, w] : want.grads) {
                const std::vector<float>& x = g.grads.at(n);
                ASSERT_EQ(x.size(), w.size()) << n;
                EXPECT_EQ(std::memcmp(x.data(), w.data(), x.size() * sizeof(float)), 0) << n;
            }
            ASSERT_EQ(g.outputs.size(), want.outputs.size());
            for (const auto& [n, w] : want.outputs) EXPECT_EQ(g.outputs.at(n), w) << n;
        }
    }
}

TEST(TensorParallelModel, InitDrawsTheWholeModelsValues) {
    for (const std::string& name : {std::string("bert-mlm"), std::string("gpt2-lm")}) {
        SCOPED_TRACE(name);
        const Fixture f(name);
        auto whole = build_model(f.config);
        whole->init(5);
        const std::map<std::string, Tensor> want = whole->params().param_tensors();
        comm_local_run(k_tp, [&](Communicator& tp) {
            ModelPlacement place;
            place.tp = ModelTp{tp.rank(), tp.size(), &tp};
            auto m = build_model(f.config, place);
            m->init(5);
            const ParamTable& t = m->params();
            for (int i = 0; i < t.size(); ++i) {
                Tensor p = t.param_tensor(i);
                if (t.row(i).shard.sharded())
                    p = tp_assemble_row_tensor(t.row(i).shard, p, tp);
                EXPECT_EQ(values(p), values(want.at(t.row(i).name))) << t.row(i).name;
            }
        });
    }
}

TEST(TensorParallelModel, HeadsThatDoNotDivideAreRefusedByName) {
    const Fixture f("bert-mlm");
    comm_local_run(3, [&](Communicator& tp) {
        ModelPlacement place;
        place.tp = ModelTp{tp.rank(), tp.size(), &tp};
        try {
            build_model(f.config, place);
            ADD_FAILURE() << "tp 3 accepted for " << f.config.num_attention_heads << " heads";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("tensor_parallel_degree 3"), std::string::npos)
                << e.what();
        }
    });
}

}  // namespace
}  // namespace loom::test
