// `loom train job.yaml [--set key=value ...]`: runs a training job (train/trainer.h).
// Exit status 0 when training completes or stops early; 75 (EX_TEMPFAIL) when
// SIGTERM, SIGINT or SIGUSR1 stopped it after a checkpoint (core/stop_signals.h:
// running the same job again continues); 1 on an error.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "cli/hub_model.h"
#include "comm/comm_mpi.h"
#include "comm/cuda/comm_nccl.h"
#include "config/job.h"
#include "config/launch_check.h"
#include "core/check.h"
#include "core/runtime.h"
#include "core/stop_signals.h"
#include "backend/cuda/local_device.h"
#include "parallel/mpi_job.h"
#include "parallel/process_groups.h"
#include "parallel/topology.h"
#include "train/auto_layout.h"
#include "train/trainer.h"

#if defined(LOOM_HAVE_CUDA)
#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda_context.h"
#include "ops/cuda/device_ops_cuda.h"
#endif

namespace loom::cli {

namespace {

#if defined(LOOM_HAVE_CUDA)
// This process's GPU as a backend for the one model stack (one device per
// process: the first call's); built on first use and kept until exit, after
// every Trainer (whose buffers it frees) is gone.
Backend* gpu_backend(int device) {
    static CudaContext ctx(device);
    static const std::unique_ptr<Backend> be = make_cuda_backend(ctx);
    return be.get();
}
#endif

struct TrainOptions {
    std::string job_path;
    std::vector<std::string> overrides;
    int threads = 0;
    bool quiet = false;
};

// True when an MPI launcher (mpirun, srun, an MPIJob) started this process.
bool launched_by_mpi() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"})
        if (std::getenv(v)) return true;
    return false;
}

// Ends a run the way its result asks (output flushed first: under mpirun a
// non-zero exit makes mpirun kill the ranks that are still exiting).
int exit_status(const TrainResult& r) {
    std::fflush(stdout);
    std::fflush(stderr);
    return r.stop == StopReason::interrupted ? k_exit_stopped_by_signal : 0;
}

// The job's notes and the launch checks' (config/launch_check.h), before
// anything slow; printed once, by rank 0.
void print_notes(const Job& job, const LaunchFacts& facts, bool quiet) {
    std::vector<std::string> notes = job.notes;
    for (auto& n : launch_notes(job, facts)) notes.push_back(std::move(n));
    if (const std::string t = runtime_thread_note(); !t.empty()) notes.push_back(t);
    if (quiet) return;
    for (const auto& n : notes) fmt::print("{}\n", n);
    std::fflush(stdout);
}

// `distribution: auto`'s choice (train/auto_layout.h), printed once.
void print_auto_layout(const std::vector<std::string>& lines, bool quiet) {
    if (quiet) return;
    for (const auto& l : lines) fmt::print("{}\n", l);
    std::fflush(stdout);
}

Job load_for_training(const TrainOptions& o) {
    JobParseOptions po;
    po.for_training = true;
    Job job = job_load(o.job_path, o.overrides, po);
    resolve_hub_model(job);
    return job;
}

int run_train(const TrainOptions& o) {
    // Before any thread exists (MPI, OpenMP, the loader, curl's resolver):
    // they all inherit the blocked stop signals.
    stop_signals_install();
    stop_signals_accept(true);
    TrainerOptions topts;
    topts.quiet = o.quiet;
    if (!launched_by_mpi() || !MpiSession::available()) {
        Job job = load_for_training(o);
        print_auto_layout(apply_auto_layout(job, 1, 1), o.quiet);
        print_notes(job, LaunchFacts{}, o.quiet);
        if (o.threads > 0) runtime_init({o.threads});
        runtime_pin_threads();
        LOOM_CHECK(job.distribution.data_parallel_degree <= 1 &&
                       job.distribution.tensor_parallel_degree <= 1 &&
                       job.distribution.pipeline_parallel_degree <= 1,
                   "{}: distribution asks for more than one rank; start the job with `loom launch "
                   "--nproc N {}` or `mpirun -np N loom train {}`",
                   job.source, job.source, job.source);
#if defined(LOOM_HAVE_CUDA)
        // One process on GPU 0 when this build has CUDA and a device is
        // visible: the model stack runs there.
        if (cuda_unavailable_reason().empty()) topts.stack_device = [] { return gpu_backend(0); };
#endif
        Trainer trainer(std::move(job), topts);
        return exit_status(trainer.train());
    }
    // main() gave each rank its share of the node (runtime_init); --threads wins.
    if (o.threads > 0) runtime_init({o.threads});
    // MPI first: a bad job then fails on every rank with MPI running, and is
    // reported once for the job (cli/main.cpp, parallel/mpi_job.h).
    MpiSession mpi;
    runtime_pin_threads();  // after MPI's own threads started, on every CPU
    Job job = load_for_training(o);
    print_auto_layout(apply_auto_layout(job, mpi.world_size(), mpi_ranks_on_host()),
                      o.quiet || mpi.world_rank() != 0);
    LaunchFacts facts;
    facts.launched = true;
    facts.world_size = mpi.world_size();
    facts.ranks_on_host = mpi_ranks_on_host();
    print_notes(job, facts, o.quiet || mpi.world_rank() != 0);
    const DistributionArgs& d = job.distribution;
    const int world_size = mpi.world_size();
    const int pp = int(d.pipeline_parallel_degree);
    const int tp = int(std::max<int64_t>(d.tensor_parallel_degree, 1));
    LOOM_CHECK(world_size % (pp * tp) == 0,
               "{}: distribution.pipeline_parallel_degree {} x tensor_parallel_degree {} does "
               "not divide the {} ranks",
               job.source, pp, tp, world_size);
    LOOM_CHECK(d.data_parallel_degree <= 0 || d.data_parallel_degree * pp * tp == world_size,
               "{}: distribution.data_parallel_degree {} x pipeline_parallel_degree {} x "
               "tensor_parallel_degree {} is not the {} ranks the job runs on",
               job.source, d.data_parallel_degree, pp, tp, world_size);
    CommOptions co;
    co.timeout_s = d.collective_timeout_s;
    // More ranks than cores on this node: a waiting rank naps after 2 ms
    // (pipeline stages wait whole stage times for their neighbours).
    if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
        if (std::atoi(local) > int(std::thread::hardware_concurrency())) co.spin_s = 0.002;
    auto world = comm_mpi_world(co);
    TopologyConfig tc;
    tc.pp = pp;
    tc.tp = tp;
    tc.dp = world_size / (pp * tp);
    tc.order = topology_order_from_placement(d.placement_strategy);
    const Topology topo(tc, world_size, mpi.world_rank());
    ProcessGroups groups;
    if (pp > 1 || tp > 1) {
        groups = process_groups_create(*world, topo);
        topts.dp_comm = groups.dp.get();
        topts.pp_comm = groups.pp.get();
        if (tp > 1) topts.tp_comm = groups.tp.get();
        topts.world_comm = world.get();
        if (mpi.world_rank() == 0 && !o.quiet) {
            fmt::print("rank map ({}, placement_strategy {}):\n", topo.order(),
                       d.placement_strategy);
            for (int r = 0; r < world_size; ++r) fmt::print("  {}\n", topo.describe_rank(r));
        }
    } else {
        topts.dp_comm = world.get();
    }
#if defined(LOOM_HAVE_CUDA)
    // Data, tensor and pipeline parallelism on GPUs: each rank drives the GPU
    // of its node-local rank; gradients are reduced over NCCL while backward
    // runs, tensor-parallel collectives and pipeline messages run on NCCL
    // twins of the dp, tp and pp groups (the trainer says when a job stays
    // on the CPU, e.g. no NCCL in this build).
    if (cuda_unavailable_reason().empty()) {
        const int device = local_device();
        topts.stack_device = [device] { return gpu_backend(device); };
#if defined(LOOM_HAVE_NCCL)
        // NCCL ordered after the backend's stream.
        topts.make_stack_group =
            [device](Communicator& cpu_group) -> std::unique_ptr<Communicator> {
            return CommNccl::from_mpi(cpu_group, device, gpu_backend(device)->cuda()->stream());
        };
#endif
    }
#endif
    // Messages, progress and files come from rank 0 only.
    if (mpi.world_rank() != 0) topts.quiet = true;
    Trainer trainer(std::move(job), topts);
    return exit_status(trainer.train());
}

void setup_train(CLI::App& app) {
    auto o = std::make_shared<TrainOptions>();
    CLI::App* sub = app.add_subcommand("train", "Train or fine-tune a model from a job file");
    sub->footer(R"(
The job file (YAML) names the model folder (or a config.json and tokenizer.json
to pretrain from scratch), the task (masked-lm, sequence-classification,
question-answering, causal-lm), the data channels and Hugging Face
TrainingArguments under `hyperparameters`. Example:

  model: tests/data/hf/bert-cls
  task: sequence-classification
  data: {train: train.jsonl, eval: eval.jsonl, max_seq_length: 128}
  hyperparameters: {output_dir: out, num_train_epochs: 3, learning_rate: 5e-5,
                    eval_strategy: epoch, save_strategy: epoch}

Output: output_dir/ becomes a Hugging Face folder (config.json,
model.safetensors, tokenizer.json), with checkpoint-<step>/ folders,
metrics.jsonl, TensorBoard events in runs/ and report.html.
Stopping: SIGTERM (spot interruption, pod eviction, Slurm preemption), Ctrl-C
or SIGUSR1 (Slurm's --signal=USR1@120) on any rank: every rank finishes the
same step, one checkpoint is written (and uploaded to checkpoint_uri), and
loom exits with status 75 (EX_TEMPFAIL). Run the same command again to
continue from the newest checkpoint. A second Ctrl-C stops at once.

Restarts: running the same job again continues from the newest complete
checkpoint of the same job in output_dir (or at checkpoint_uri), on any
layout; with none it starts fresh. A checkpoint of a different job (model,
task, data, learning rate, seed, global batch, ...) is refused, naming what
differs; the layout, precision and max_steps / num_train_epochs may change.
resume_from_checkpoint: latest does the same; a path resumes that
checkpoint even with changed settings (they are listed).
overwrite_output_dir: true starts over, removing the old run's checkpoints,
TensorBoard events and metrics.jsonl.

GPU: a loom built with CUDA (the cuda-release preset) trains on GPU 0 when
one is visible, in fp32, bf16 or fp16 (fp32 master weights, fp16 with a
dynamic loss scale), with AdamW, LAMB or SGD; evaluation runs there too.
Under mpirun / loom launch each rank uses one GPU: data parallel (ZeRO 0, 1
or 2) reduces gradients over NCCL while backward runs; tensor and pipeline
parallel post their collectives and stage messages over NCCL.
use_cpu: true keeps it on the CPU; a job the GPU path does not cover says
why it stays there.

Data parallel: the same job on N ranks, e.g. `loom launch --nproc 4 job.yaml`
or `mpirun -np 4 loom train job.yaml` (or srun). Each rank reads its share of
every global batch (per_device_train_batch_size x accumulation x ranks);
`distribution: {zero_stage: 1, bucket_size_mb: 25}` shards the optimizer state
(2: gradients too). Checkpoints resume on any number of ranks.

Pipeline parallel: `distribution: {pipeline_parallel_degree: 4,
microbatches: 8, pipeline: 1f1b}` splits the layers over 4 ranks (each
holds only its layers); the other ranks of the world are data parallel.
pipeline: simple (GPipe) | 1f1b | interleaved (with virtual_stages: 2);
Tensor parallel: `tensor_parallel_degree: 2` splits attention heads, MLP
features and the vocabulary over 2 ranks (Megatron style); world =
data x tensor x pipeline degrees.
placement_strategy: cluster | spread | DPT... decides which ranks are
neighbours (the rank map is printed at start). Every layout trains the
same model, and checkpoints move between layouts.
See examples/*.yaml and docs/parallelism.md.
)");
    sub->add_option("job", o->job_path, "job file (YAML)")->required();
    sub->add_option("--set", o->overrides,
                    "override a key, e.g. --set hyperparameters.learning_rate=3e-5 (repeatable)")
        ->take_all();
    sub->add_option("--threads", o->threads, "CPU threads (default: all cores or OMP_NUM_THREADS)");
    sub->add_flag("--quiet", o->quiet, "no progress bar or messages");
    sub->callback([o] {
        if (const int rc = run_train(*o); rc != 0) std::exit(rc);
    });
}

}  // namespace

LOOM_COMMAND(setup_train);

}  // namespace loom::cli
