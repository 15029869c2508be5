// Where `loom launch` puts its ranks: how many, on which hosts, how many per
// node, how many OpenMP threads each, from the command line and the job file.
//
// Sources, strongest first: --nproc / --nproc-per-node, then the job's
// distribution block (data_parallel_degree x pipeline x tensor degrees for the
// rank count, mpi.processes_per_host for ranks per node), then the hosts'
// slots (--hosts h1:8,h2:8 or --hostfile), then a Slurm allocation's task
// count. Contradictions between them are errors naming both. Ranks fill one
// node before the next (--map-by slot), so with placement_strategy "cluster"
// (tensor-parallel rank varying fastest) tensor groups stay inside a node
// whenever the tensor degree divides the ranks per node.
//
// Pure planning: reads the job file and hostfile, starts nothing. The mpirun
// line itself is assembled in cmd_launch.cpp.
#pragma once

#include <string>
#include <vector>

namespace loom::cli {

struct HostSlots {
    std::string name;
    int slots = 0;  // 0 = not given
};

struct LaunchRequest {
    int nproc = 0;           // 0 = from the job, the hosts or the allocation
    int nproc_per_node = 0;  // 0 = from the job's mpi.processes_per_host or the slots
    std::string hosts;       // "h1:8,h2:8"
    std::string hostfile;
    std::string job;                         // read when the file exists
    std::vector<std::string> job_overrides;  // the --set values passed to the ranks
    int local_cores = 1;                     // cores of this machine (nodes are alike)
    int threads = 0;  // OpenMP threads per rank; 0 = local_cores / ranks per node
};

struct LaunchPlan {
    int np = 1;
    std::vector<HostSlots> hosts;  // empty: this machine or the Slurm allocation
    bool hosts_from_file = false;  // pass --hostfile as given (slots unchanged)
    bool in_allocation = false;    // inside a Slurm allocation, no hosts named
    int per_node = 0;              // ranks per node; 0 = not fixed (mpirun fills slots)
    int threads = 1;               // OMP_NUM_THREADS per rank
    bool oversubscribe = false;    // more ranks on a node than cores
    std::vector<std::string> custom_mpi_options;  // from the job's mpi blocks
    std::vector<std::string> notes;               // said before the run
};

// "h1:8,h2:8" or "h1,h2" (slots left 0); throws loom::Error naming the entry.
std::vector<HostSlots> parse_hosts(const std::string& spec);

// Open MPI's hostfile format: "name [slots=N] [max_slots=N]" per line, '#'
// comments. Throws loom::Error naming file:line for anything else.
std::vector<HostSlots> read_hostfile(const std::string& path);

// Splits an option string as a shell would for plain words and quotes
// (SageMaker's custom_mpi_options); throws on an unterminated quote.
std::vector<std::string> split_words(const std::string& s, const std::string& what);

LaunchPlan plan_launch(const LaunchRequest& r);

}  // namespace loom::cli
