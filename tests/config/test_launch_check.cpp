// SageMaker's launcher keys against the running job: processes_per_host must
// be the ranks on this host, and data-parallel settings on a single replica
// say they do nothing.
#include <gtest/gtest.h>

#include "config/launch_check.h"
#include "job_test_util.h"

namespace loom {
namespace {

using test::k_min_job;
using test::parse_job;

LaunchFacts ranks(int world, int on_host) {
    LaunchFacts f;
    f.launched = true;
    f.world_size = world;
    f.ranks_on_host = on_host;
    return f;
}

Job with_distribution(const std::string& block) {
    return parse_job(std::string(k_min_job) + "distribution:\n" + block);
}

TEST(LaunchCheck, ProcessesPerHostIsCheckedAgainstTheRanksOnThisHost) {
    const Job job = with_distribution("  mpi:\n    enabled: true\n    processes_per_host: 4\n");
    EXPECT_EQ(launch_notes(job, ranks(4, 4)),
              (std::vector<std::string>{
                  "distribution.mpi.processes_per_host 4: ranks are started by the launcher "
                  "(loom launch --nproc N, mpirun -np N or srun); this run has 4 rank(s) on this "
                  "host, 4 in all"}));
    // Two hosts of four: each host checks its own count.
    EXPECT_EQ(launch_notes(job, ranks(8, 4)).size(), 1u);
    EXPECT_EQ(test::expect_error([&] { launch_notes(job, ranks(2, 2)); }, {}),
              "job.yaml:8: distribution.mpi.processes_per_host is 4, but this run has 2 rank(s) "
              "on this host, 2 in all; ranks are started by the launcher (loom launch --nproc N, "
              "mpirun -np N or srun): start 4 per host (loom launch --nproc 4 job.yaml) or set "
              "distribution.mpi.processes_per_host to 2");
    EXPECT_EQ(test::expect_error([&] { launch_notes(job, LaunchFacts{}); }, {}),
              "job.yaml:8: distribution.mpi.processes_per_host is 4, but this process was not "
              "started by an MPI launcher, so it is the only rank; ranks are started by the "
              "launcher (loom launch --nproc N, mpirun -np N or srun): start 4 per host (loom "
              "launch --nproc 4 job.yaml) or set distribution.mpi.processes_per_host to 1");
}

TEST(LaunchCheck, MpiEnabledWithoutALauncher) {
    const Job job = with_distribution("  mpi: {enabled: true}\n");
    EXPECT_EQ(launch_notes(job, LaunchFacts{}),
              (std::vector<std::string>{
                  "distribution.mpi.enabled: true, but this process was not started by an MPI "
                  "launcher, so it is the only rank: start ranks with loom launch --nproc N "
                  "job.yaml or mpirun -np N loom train job.yaml"}));
    EXPECT_TRUE(launch_notes(job, ranks(2, 2)).empty());
}

TEST(LaunchCheck, SageMakerDataParallelOnOneProcessIsOneReplica) {
    const Job job = with_distribution("  smdistributed: {dataparallel: {enabled: true}}\n");
    EXPECT_EQ(launch_notes(job, LaunchFacts{}),
              (std::vector<std::string>{
                  "distribution.smdistributed.dataparallel.enabled: one data-parallel replica (1 "
                  "rank(s)), so there is nothing to average gradients across; start more ranks "
                  "with loom launch --nproc N job.yaml"}));
    EXPECT_EQ(launch_notes(job, ranks(4, 4)),
              (std::vector<std::string>{"distribution.smdistributed.dataparallel.enabled: 4 "
                                        "data-parallel replicas over 4 ranks"}));
}

TEST(LaunchCheck, DataParallelSettingsOnOneReplica) {
    const Job job = with_distribution("  zero_stage: 1\n  bucket_size_mb: 50\n");
    const std::string why = "there is one data-parallel replica, nothing to shard or reduce across";
    EXPECT_EQ(launch_notes(job, LaunchFacts{}),
              (std::vector<std::string>{"distribution.zero_stage: 1 has no effect: " + why,
                                        "distribution.bucket_size_mb: 50 has no effect: " + why}));
    EXPECT_TRUE(launch_notes(job, ranks(2, 2)).empty());
    // Two ranks that form one pipeline: still one replica.
    const Job pp = with_distribution("  zero_stage: 1\n  pipeline_parallel_degree: 2\n");
    EXPECT_EQ(launch_notes(pp, ranks(2, 2)),
              (std::vector<std::string>{"distribution.zero_stage: 1 has no effect: " + why}));
    const Job smp = with_distribution(
        "  smdistributed: {modelparallel: {enabled: true, parameters: {shard_optimizer_state: "
        "true}}}\n");
    EXPECT_EQ(launch_notes(smp, LaunchFacts{}),
              (std::vector<std::string>{"distribution.smdistributed.modelparallel.parameters."
                                        "shard_optimizer_state: true has no effect: " +
                                        why}));
}

}  // namespace
}  // namespace loom
