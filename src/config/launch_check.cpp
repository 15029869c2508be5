// Launcher keys against the running job (see launch_check.h).
#include "config/launch_check.h"

#include <algorithm>

#include "core/check.h"

namespace loom {

namespace {

const char* const k_launcher =
    "ranks are started by the launcher (loom launch --nproc N, mpirun -np N or srun)";

std::string where(const Job& job, const std::string& key) {
    auto it = job.locations.find(key);
    return it != job.locations.end() ? it->second : job.source;
}

bool written(const Job& job, const std::string& key) {
    return job.locations.count(key) > 0;
}

}  // namespace

std::vector<std::string> launch_notes(const Job& job, const LaunchFacts& f) {
    std::vector<std::string> notes;
    const DistributionArgs& d = job.distribution;
    const std::string this_run =
        f.launched ? fmt::format("this run has {} rank(s) on this host, {} in all", f.ranks_on_host,
                                 f.world_size)
                   : "this process was not started by an MPI launcher, so it is the only rank";

    if (d.processes_per_host > 0) {
        const std::string key = "distribution.mpi.processes_per_host";
        if (d.processes_per_host != f.ranks_on_host)
            LOOM_FAIL(
                "{}: {} is {}, but {}; {}: start {} per host (loom launch --nproc {} {}) or set "
                "{} to {}",
                where(job, key), key, d.processes_per_host, this_run, k_launcher,
                d.processes_per_host, d.processes_per_host, job.source, key, f.ranks_on_host);
        notes.push_back(
            fmt::format("{} {}: {}; {}", key, d.processes_per_host, k_launcher, this_run));
    }
    if (d.mpi_enabled && !f.launched)
        notes.push_back(fmt::format(
            "distribution.mpi.enabled: true, but {}: start ranks with loom launch --nproc N {} "
            "or mpirun -np N loom train {}",
            this_run, job.source, job.source));

    const int64_t model_ranks =
        std::max<int64_t>(1, d.pipeline_parallel_degree * d.tensor_parallel_degree);
    const int64_t replicas = d.data_parallel_degree > 0
                                 ? d.data_parallel_degree
                                 : std::max<int64_t>(1, f.world_size / model_ranks);
    if (d.smddp)
        notes.push_back(
            replicas == 1
                ? fmt::format("distribution.smdistributed.dataparallel.enabled: one data-parallel "
                              "replica ({} rank(s)), so there is nothing to average gradients "
                              "across; start more ranks with loom launch --nproc N {}",
                              f.world_size, job.source)
                : fmt::format("distribution.smdistributed.dataparallel.enabled: {} data-parallel "
                              "replicas over {} ranks",
                              replicas, f.world_size));
    if (replicas > 1) return notes;
    const std::string why = "there is one data-parallel replica, nothing to shard or reduce across";
    const std::string smp_shard =
        "distribution.smdistributed.modelparallel.parameters.shard_optimizer_state";
    if (d.zero_stage > 0) {
        const bool by_smp = written(job, smp_shard) && !written(job, "distribution.zero_stage");
        notes.push_back(by_smp ? fmt::format("{}: true has no effect: {}", smp_shard, why)
                               : fmt::format("distribution.zero_stage: {} has no effect: {}",
                                             d.zero_stage, why));
    }
    const DistributionArgs defaults;
    if (d.bucket_size_mb != defaults.bucket_size_mb)
        notes.push_back(fmt::format("distribution.bucket_size_mb: {} has no effect: {}",
                                    d.bucket_size_mb, why));
    if (d.overlap_comm != defaults.overlap_comm)
        notes.push_back(
            fmt::format("distribution.overlap_comm: {} has no effect: {}", d.overlap_comm, why));
    if (d.sparse_embedding_grads != defaults.sparse_embedding_grads)
        notes.push_back(fmt::format("distribution.sparse_embedding_grads: {} has no effect: {}",
                                    d.sparse_embedding_grads, why));
    return notes;
}

}  // namespace loom
