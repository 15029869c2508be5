// The `peft:` block: PEFT's LoraConfig keys read, defaults kept, and every
// option Loom lacks refused with the key's name and line.
#include <gtest/gtest.h>

#include <string>

#include "config/job.h"
#include "job_test_util.h"

namespace loom {
namespace {

using test::expect_job_error;
using test::k_min_job;
using test::parse_job;

std::string with_peft(const std::string& block) {
    return std::string(k_min_job) + "peft:\n" + block;
}

TEST(PeftYaml, ReadsLoraConfigKeys) {
    const Job j =
        parse_job(with_peft("  peft_type: LORA\n  task_type: SEQ_CLS\n  r: 4\n"
                            "  lora_alpha: 16\n  lora_dropout: 0.0\n"
                            "  target_modules: [query, value]\n"
                            "  modules_to_save: [classifier]\n  bias: none\n"
                            "  use_dora: false\n  merge_adapters: true\n"));
    EXPECT_TRUE(j.peft.enabled);
    EXPECT_EQ(j.peft.r, 4);
    EXPECT_EQ(j.peft.lora_alpha, 16);
    EXPECT_EQ(j.peft.target_modules, (std::vector<std::string>{"query", "value"}));
    EXPECT_EQ(j.peft.modules_to_save, (std::vector<std::string>{"classifier"}));
    EXPECT_TRUE(j.peft.merge_adapters);
    bool noted = false;
    for (const auto& n : j.notes) noted = noted || n.find("peft.task_type: SEQ_CLS noted") == 0;
    EXPECT_TRUE(noted) << "task_type is accepted without a note";
    // PEFT's defaults, and no peft block: no LoRA.
    const Job d = parse_job(with_peft("  r: 8\n"));
    EXPECT_EQ(d.peft.lora_alpha, 8);
    EXPECT_EQ(d.peft.lora_dropout, 0);
    // lora_dropout, tensor and pipeline parallelism are accepted.
    const Job t =
        parse_job(with_peft("  r: 4\n  lora_dropout: 0.1\n") +
                  "distribution: {tensor_parallel_degree: 2, pipeline_parallel_degree: 2}\n");
    EXPECT_EQ(t.peft.lora_dropout, 0.1);
    EXPECT_TRUE(d.peft.target_modules.empty());
    EXPECT_FALSE(parse_job(k_min_job).peft.enabled);
    // The resolved job round-trips through job_to_yaml.
    EXPECT_EQ(parse_job(job_to_yaml(j)).peft, j.peft);
}

TEST(PeftYaml, RefusesWhatLoomLacksNamingTheKey) {
    expect_job_error(with_peft("  bias: all\n"), {"job.yaml:6", "peft.bias", "'all'"});
    expect_job_error(with_peft("  use_dora: true\n"), {"peft.use_dora", "only false"});
    expect_job_error(with_peft("  use_rslora: true\n"), {"peft.use_rslora", "only false"});
    expect_job_error(with_peft("  peft_type: IA3\n"), {"peft.peft_type", "IA3", "LORA"});
    expect_job_error(with_peft("  lora_dropout: 1.0\n"), {"peft.lora_dropout", "[0, 1)"});
    expect_job_error(with_peft("  lora_dropout: -0.1\n"), {"peft.lora_dropout", "[0, 1)"});
    expect_job_error(with_peft("  r: 0\n"), {"peft.r", "> 0"});
    expect_job_error(with_peft("  target_modules: q_proj\n"),
                     {"peft.target_modules", "regular expression"});
    expect_job_error(with_peft("  layers_to_transform: [0]\n"), {"layers_to_transform"});
    expect_job_error(with_peft("  r: 4\n") + "distribution: auto\n",
                     {"distribution: auto", "peft"});
}

}  // namespace
}  // namespace loom
