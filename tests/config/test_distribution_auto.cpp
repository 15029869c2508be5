// `distribution: auto` and its keys: the scalar and map forms, the bounds,
// the machine file resolved next to the job, the keys auto chooses refused,
// and a note for the planner keys when auto is off.
#include <gtest/gtest.h>

#include <algorithm>

#include "config/job.h"
#include "job_test_util.h"

namespace loom {
namespace {

using test::expect_job_error;
using test::k_min_job;
using test::parse_job;

TEST(DistributionAuto, ScalarForm) {
    const Job job = parse_job(std::string(k_min_job) + "distribution: auto\n");
    EXPECT_TRUE(job.distribution.auto_layout);
    EXPECT_TRUE(job.distribution.machine.empty());
}

TEST(DistributionAuto, MapFormWithBoundsAndMachine) {
    const Job job = parse_job(std::string(k_min_job) +
                              "distribution: {auto: true, machine: h100-sxm, "
                              "max_tensor_parallel_degree: 8, max_pipeline_parallel_degree: 4, "
                              "zero_stage: 1}\n");
    const DistributionArgs& d = job.distribution;
    EXPECT_TRUE(d.auto_layout);
    EXPECT_EQ(d.machine, "h100-sxm");  // a profile name stays a name
    EXPECT_EQ(d.max_tensor_parallel_degree, 8);
    EXPECT_EQ(d.max_pipeline_parallel_degree, 4);
    EXPECT_EQ(d.zero_stage, 1);
}

TEST(DistributionAuto, MachineFileResolvesAgainstTheJob) {
    const Job job =
        parse_job(std::string(k_min_job) + "distribution: {auto: true, machine: nodes/a.yaml}\n");
    EXPECT_EQ(job.distribution.machine, "/jobs/nodes/a.yaml");
}

TEST(DistributionAuto, KeysAutoChoosesAreRefused) {
    for (const char* key : {"tensor_parallel_degree: 2", "pipeline_parallel_degree: 2",
                            "data_parallel_degree: 2", "microbatches: 4",
                            "activation_checkpointing: true"}) {
        const std::string k(key);
        expect_job_error(std::string(k_min_job) + "distribution: {auto: true, " + k + "}\n",
                         {"job.yaml:", "distribution." + k.substr(0, k.find(':')),
                          "is chosen by distribution.auto"});
    }
    expect_job_error(std::string(k_min_job) + "distribution: {auto: true, "
                                              "max_tensor_parallel_degree: -1}\n",
                     {"distribution.max_tensor_parallel_degree", ">= 0"});
}

TEST(DistributionAuto, PlannerKeysWithoutAutoLeaveANote) {
    const Job job = parse_job(std::string(k_min_job) + "distribution: {machine: h100-sxm}\n");
    EXPECT_FALSE(job.distribution.auto_layout);
    const bool noted = std::any_of(job.notes.begin(), job.notes.end(), [](const std::string& n) {
        return n.find("distribution.machine: no effect without distribution.auto") !=
               std::string::npos;
    });
    EXPECT_TRUE(noted);
}

}  // namespace
}  // namespace loom
