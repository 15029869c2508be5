// SGD against torch.optim.SGD as the HF Trainer builds it (tests/data/optim,
// make_sgd_reference.py): weight decay on weights only, no momentum, a
// decaying learning rate over 3 steps.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "optim/sgd.h"

namespace loom {
namespace {

using json = nlohmann::json;

TEST(Sgd, MatchesTorchWithPerGroupWeightDecay) {
    std::ifstream in(std::string(LOOM_TEST_DATA_DIR) + "/optim/sgd_reference.json");
    ASSERT_TRUE(in.good()) << "missing tests/data/optim/sgd_reference.json";
    const json ref = json::parse(in);
    ParamTable t;
    for (const auto& [name, p] : ref["params"].items()) {
        ParamRow r;
        r.name = name;
        const auto dims = p["shape"].get<std::vector<int64_t>>();
        r.shape = Shape::from(dims.begin(), dims.end());
        r.decay =
            name.find("bias") == std::string::npos && name.find("LayerNorm") == std::string::npos;
        t.add(r);
    }
    t.allocate();
    for (const auto& [name, p] : ref["params"].items()) {
        const auto v = p["values"].get<std::vector<float>>();
        std::memcpy(t.param(t.index(name)), v.data(), v.size() * sizeof(float));
    }
    Sgd opt(t, ref["weight_decay"].get<double>());
    for (size_t s = 0; s < ref["grads"].size(); ++s) {
        for (const auto& [name, g] : ref["grads"][s].items()) {
            const auto v = g.get<std::vector<float>>();
            std::memcpy(t.grad(t.index(name)), v.data(), v.size() * sizeof(float));
        }
        opt.step(ref["lrs"][s].get<double>());
        for (const auto& [name, want] : ref["after"][s].items()) {
            const auto w = want.get<std::vector<float>>();
            const float* got = t.param(t.index(name));
            for (size_t i = 0; i < w.size(); ++i)
                EXPECT_NEAR(got[i], w[i], 1e-6) << name << "[" << i << "] after step " << s + 1;
        }
    }
    EXPECT_EQ(opt.step_count(), 3);
    EXPECT_TRUE(opt.state_tensors().empty());
    std::map<std::string, Tensor> foreign;
    foreign["exp_avg.dense.weight"] = Tensor();
    EXPECT_THROW(opt.load_state(foreign, 3), Error);
}

}  // namespace
}  // namespace loom
