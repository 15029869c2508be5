// PipelineParallel's gathers under tensor parallelism (one stage, tp 2, on
// CommLocal threads). Gathered for every rank, each tp rank gets the whole
// tensors; gathered for one rank (checkpoints, the final export), tp rank 0
// alone gets the same tensors and the other tp rank none, so the whole
// model is never held by every rank of a large tp group at once.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm_local.h"
#include "models/model.h"
#include "models/model_config.h"
#include "parallel/pipeline_parallel.h"

namespace loom::test {
namespace {

TEST(PipelineGather, TensorParallelRowsReachTheLeadRankOnly) {
    const ModelConfig c = parse_hf_config(
        R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 40,
            "n_embd": 16, "n_head": 2, "n_inner": 32, "n_layer": 2, "n_positions": 16})",
        "tiny-gpt2");
    std::vector<std::map<std::string, Tensor>> all(2), one(2);
    comm_local_run(2, [&](Communicator& tp) {
        auto pp = comm_local_create(1), dp = comm_local_create(1);
        ModelPlacement place;
        place.tp = ModelTp{tp.rank(), tp.size(), &tp};
        std::vector<std::unique_ptr<Model>> models;
        models.push_back(build_model(c, place));
        models[0]->init(11);
        PipelineParallel pipe(std::move(models), *pp[0], *dp[0], adamw_config(AdamWParams{}),
                              DpOptions{}, ScheduleKind::one_f_one_b);
        all[size_t(tp.rank())] = pipe.gather_params(/*to_all=*/true);
        one[size_t(tp.rank())] = pipe.gather_params(/*to_all=*/false);
    });
    ASSERT_FALSE(all[0].empty());
    EXPECT_TRUE(one[1].empty()) << "tp rank 1 kept " << one[1].size() << " gathered tensors";
    ASSERT_EQ(one[0].size(), all[0].size());
    int sharded = 0;
    for (const auto& [name, t] : all[0]) {
        const Tensor& a = t;
        const Tensor& b = one[0].at(name);
        const Tensor& other = all[1].at(name);
        ASSERT_EQ(a.shape, b.shape) << name;
        EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << name;
        EXPECT_EQ(std::memcmp(a.raw(), other.raw(), a.nbytes()), 0)
            << name << " differs between tp ranks";
        sharded += name.find("c_attn.weight") != std::string::npos;
    }
    EXPECT_EQ(sharded, 2) << "the tp-split attention weights were not among the rows";
}

}  // namespace
}  // namespace loom::test
