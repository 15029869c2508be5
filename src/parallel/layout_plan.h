// Layout planning: predicted memory per rank and step time for every
// (dp, tp, pp) layout of a world, from the model's shape, the batch and a
// small machine model. `loom plan` prints the table; the trainer prints the
// chosen layout's memory plan before step 0. The formulas (docs/cost-model.md)
// follow what Loom actually allocates: one fp32 flat buffer each for
// parameters and gradients, AdamW's two moments, and the activation arena of
// StackModel (what each block application saves for backward plus the
// backward workspace shared by all blocks).
//
// Pure arithmetic over plain structs: no model is built, nothing allocated.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "parallel/pipeline_schedule.h"

namespace loom {

// The shape facts the cost model needs.
struct PlanModel {
    int64_t layers = 0;           // L: block applications
    int64_t distinct_blocks = 0;  // parameter sets (ALBERT shares one group)
    int64_t hidden = 0;           // C
    int64_t heads = 0;            // NH
    int64_t intermediate = 0;     // I
    int64_t vocab = 0;            // V
    int64_t embedding = 0;        // E (ALBERT); = C elsewhere
    int64_t positions = 0;        // rows of the position table (0 = sinusoidal)
    int64_t type_vocab = 0;
    bool lm_head = false;          // logits over the vocabulary (MLM, CLM)
    bool causal = false;           // GPT-2: logits at every position
    bool span_head = false;        // question answering: start/end logits, no pooler
    double labelled_share = 0.15;  // MLM: positions with labels (logits only there)
    int64_t num_labels = 2;
    // The Llama family (Llama, Mistral, Qwen2). The defaults are BERT's and
    // GPT-2's blocks: four C x C projections, a two-matrix MLP, every linear
    // with a bias, LayerNorms, a learned position table, a tied LM head.
    int64_t kv_heads = 0;           // NKV: k and v project to NKV x C/NH (grouped-query); 0 = heads
    bool gated_mlp = false;         // SwiGLU: gate and up (C x I each), down (I x C)
    bool rms_norm = false;          // RMSNorm (weight only), none on the embeddings
    bool rotary = false;            // rotary embeddings: no position table
    bool qkv_bias = true;           // biases on q, k, v
    bool out_bias = true;           // bias on the attention output projection
    bool mlp_bias = true;           // biases on the MLP's linears
    bool tied_head = true;          // causal LM: lm_head is the word table, else V x C of its own
    bool score_head = false;        // classification by a bias-free C x num_labels score at the
                                    // last token, no pooler (num_labels 0: the base model)
    int64_t window = -1;            // sliding window: a query sees keys i - window .. i; -1 = none
    bool hidden_dropout = true;     // dropout on the embeddings and residual branches
    bool attention_dropout = true;  // dropout on the attention probabilities
    int64_t total_params = 0;  // counted from the shapes above
    int64_t kv() const { return heads > 0 ? (kv_heads > 0 ? kv_heads : heads) : 0; }
    // Width of the k (and of the v) projection: NKV heads of C/NH.
    int64_t kv_width() const { return heads > 0 ? kv() * (hidden / heads) : hidden; }
};

// Sets m.total_params from the shape fields (train/plan_model.h fills
// those from a ModelConfig).
void plan_model_count_params(PlanModel& m);

// Parameters of one part of the model, split into what tensor parallelism
// divides (column-parallel projections and their biases, row-parallel
// weights, the vocabulary-parallel tables) and what every tp rank keeps
// (row-parallel biases, norms, position tables, small heads).
struct PlanParams {
    double split = 0, replicated = 0;
};
PlanParams plan_block_params(const PlanModel& m);      // one transformer block
PlanParams plan_embedding_params(const PlanModel& m);  // word, position and type tables
PlanParams plan_head_params(const PlanModel& m);       // final norm and head, beyond a tied table

// Keys each query's attention products cover: the sequence, or the sliding
// window's window + 1 keys where that is shorter. FLOPs count every query
// against this span (Megatron's convention: causal masking is not halved).
double plan_attention_keys(const PlanModel& m, int64_t seq);

// One optimizer step of one data-parallel replica.
struct PlanWorkload {
    int64_t micro_batch = 8;  // rows per micro-batch
    int64_t seq = 128;        // max_seq_length
    int64_t microbatches =
        1;  // per optimizer step per replica (pipeline micro-batches or accumulation)
};

// The same global batch on every layout: each of dp replicas runs
// `microbatches` micro-batches of global_batch / (dp * microbatches) rows.
// micro_batch is 0 when that does not divide.
PlanWorkload split_workload(int64_t global_batch, int64_t seq, int64_t microbatches, int dp);

// A tensor-parallel all-reduce's whole cost, measured between compute
// segments with every rank of the node at work: what one collective of
// `bytes` (the buffer each rank all-reduces) among `group` ranks adds to
// the node's time, transfer and waits together.
struct TpCollectiveCost {
    int group = 0;
    double bytes = 0, s = 0;
};

// What one rank can do. Defaults: this project's 2-core build machine
// (docs/cost-model.md says where each figure comes from). A measured figure
// added here is read, and taken at its median over several calibration
// files, in cli/plan_calibration_file.cpp.
struct MachineModel {
    int cores = 2;                 // physical cores shared by all ranks of the node
    int ranks_per_node = 0;        // 0 = the whole world on one node
    double gflops_per_core = 170;  // sustained fp32 GEMM rate of one core inside a training step
    double allreduce_gbps = 2.5;   // bucketed all-reduce algorithm bandwidth, GB/s
    double p2p_gbps = 5.0;         // point-to-point (pipeline) bandwidth, GB/s
    double latency_s = 20e-6;      // per message
    double memory_gib = 0;         // per rank; 0 = no limit
    // GEMM rate by shape: a micro-batch of R token rows runs its GEMMs at
    // R / (R + gemm_half_rows) of gflops_per_core (0 = one rate for every
    // shape). Measured by `loom plan --calibrate`.
    double gemm_half_rows = 0;
    // The share of that GEMM rate a whole training step achieves: attention,
    // LayerNorm, GELU, dropout and the residual stream run between the
    // GEMMs. Measured by `loom plan --calibrate` on a transformer block's
    // forward and backward; 1 = GEMMs only.
    double step_efficiency = 1.0;
    // Where a node has more ranks than cores, a tensor-parallel collective
    // waits for peers the kernel is not running: seconds each, beyond its
    // transfer, measured by `loom plan --calibrate` with shared_sync_ranks
    // ranks on `cores` cores (0 = not measured). Scaled by ranks per core
    // less one: a rank waits for the others' time slices.
    double shared_sync_s = 0;
    int shared_sync_ranks = 0;
    // The same wait measured in tensor-parallel groups of each size (all
    // shared_sync_ranks ranks at work, each group all-reducing within
    // itself): (group size, seconds), ascending. Empty: shared_sync_s for
    // every group.
    std::vector<std::pair<int, double>> shared_sync_by_group;
    // The all-reduce bus bandwidth measured the same way, in groups of each
    // size at once: (group size, GB/s), ascending. Empty: allreduce_gbps.
    std::vector<std::pair<int, double>> allreduce_gbps_by_group;
    // ZeRO's reduce-scatter plus all-gather, the same way, on the all-reduce's
    // bus-bandwidth convention: (group size, GB/s). Empty: the all-reduce's.
    std::vector<std::pair<int, double>> zero_gbps_by_group;
    // A tp all-reduce's whole cost by group and buffer size, measured with
    // shared_sync_ranks ranks on the cores (group ascending, then bytes).
    // Where the node runs that many ranks it replaces the transfer at the
    // bandwidth above plus shared_sync: the bandwidth is measured on 64 MiB
    // buffers, and a tp all-reduce of a micro-batch's activations is a few
    // MiB or less, which the caches hold. Empty: not measured.
    std::vector<TpCollectiveCost> tp_collective_by_group;
    // A linear layer's GEMMs by their narrow side d (the smaller of its input
    // and output widths on a rank, which tensor parallelism divides): they run
    // at (d / (d + gemm_half_narrow)) / (1024 / (1024 + gemm_half_narrow)) of
    // the rate at d = 1024, where gflops_per_core was measured (0 = no
    // dependence). Measured by `loom plan --calibrate`.
    double gemm_half_narrow = 0;
    // AdamW's update, bound by memory: parameters a second on one core
    // (0 = not priced). Measured by `loom plan --calibrate`.
    double adamw_params_per_s = 0;
    // The per-core GEMM rate with every core of the node running its own,
    // over that of one core alone (where gflops_per_core was measured); the
    // plan's ranks and threads always fill the node's cores. Measured by
    // `loom plan --calibrate`; 1 = no difference.
    double all_cores_share = 1.0;
};

struct LayoutChoice {
    int dp = 1, tp = 1, pp = 1;
    int zero_stage = 0;  // 0, 1 or 2 across dp
    ScheduleKind schedule = ScheduleKind::one_f_one_b;
    int virtual_stages = 1;      // interleaved only
    bool checkpointing = false;  // keep block inputs, recompute in backward
    int checkpoint_every = 1;
};

struct MemoryPlan {
    double params = 0, grads = 0, optimizer = 0;  // bytes on the most loaded rank
    double activations_per_micro = 0;             // saved for backward, one micro-batch
    double activations_in_flight = 0;             // x the schedule's live micro-batches
    double workspace = 0;  // backward scratch, logits, embeddings (per model instance in flight)
    double peak = 0;                              // sum of the above
    int in_flight = 1;                            // live micro-batches on that rank
};

struct TimePlan {
    double compute_s = 0;  // GEMM work of the busiest rank, recompute included
    double bubble = 0;     // pipeline idle share (simulated schedule)
    double tp_comm_s = 0;  // activation all-reduces (4 per block per micro-batch)
    double pp_comm_s = 0;  // activations and their gradients between stages
    double dp_comm_s = 0;  // exposed gradient reduction (after overlap)
    double optimizer_s = 0;  // the AdamW update of the rank's parameters (its ZeRO shard)
    double step_s = 0;
};

struct PlanRow {
    LayoutChoice layout;
    PlanWorkload workload;  // this layout's split of the global batch
    MemoryPlan memory;
    TimePlan time;
    bool feasible = true;
    std::string why_not;  // when !feasible: the rule the layout breaks
};

// "" when the layout can run this model, else the reason (heads % tp, ...).
std::string layout_check(const PlanModel& m, const PlanWorkload& w, const LayoutChoice& l);

MemoryPlan plan_memory(const PlanModel& m, const PlanWorkload& w, const LayoutChoice& l);
// The collective wait of a tensor-parallel group of `group` ranks on shared
// cores (MachineModel::shared_sync_by_group, else shared_sync_s).
double shared_sync_for(const MachineModel& mc, int group);
// The all-reduce bandwidth of a group of `group` ranks (allreduce_gbps_by_group,
// else allreduce_gbps).
double allreduce_gbps_for(const MachineModel& mc, int group);
// ZeRO's reduce-scatter plus all-gather (zero_gbps_by_group, else the
// all-reduce's bandwidth).
double zero_gbps_for(const MachineModel& mc, int group);
// A tp all-reduce of `bytes` among `group` ranks from tp_collective_by_group:
// linear in bytes between measured sizes (the nearest two sizes' line beyond
// them, never below 0), linear in log2 of the group size between measured
// groups (the nearest group beyond them); -1 where nothing was measured.
double tp_collective_s(const MachineModel& mc, int group, double bytes);
TimePlan plan_time(const PlanModel& m, const PlanWorkload& w, const LayoutChoice& l,
                   const MachineModel& machine, int world);

// Every dp x tp x pp = world (each schedule and checkpointing on/off where it
// matters) at the same global batch, feasible ones first, fastest first;
// rows over machine.memory_gib are marked infeasible.
struct PlanRequest {
    int world = 1;
    int64_t global_batch = 8;
    int64_t seq = 128;
    int64_t microbatches = 1;
    int zero_stage = 0;  // across dp when dp > 1
};
std::vector<PlanRow> plan_layouts(const PlanModel& m, const PlanRequest& request,
                                  const MachineModel& machine);

// Forward FLOPs per token of one full model (GEMMs and attention products).
double forward_flops_per_token(const PlanModel& m, int64_t seq);
// The same for one block application: 2 x the projections' and the MLP's
// weights (k and v of NKV heads, SwiGLU's three matrices) plus Q K^T and the
// product with V over plan_attention_keys.
double layer_flops_per_token(const PlanModel& m, int64_t seq);
// A block's time on a tp rank over what its FLOPs at the rows' GEMM rate
// would take: its linear layers' narrow sides (MachineModel::gemm_half_narrow);
// 1 when half_narrow is 0.
double block_narrow_factor(const PlanModel& m, int64_t seq, int tp, double half_narrow);

// Bytes one token moves through a block's memory-bound kernels in forward
// (backward moves about twice), at elem_bytes an element.
struct BlockElementwiseBytes {
    double replicated = 0;  // norms, bias-dropout-residual: whole rows on every tp rank
    double mlp = 0;         // the activation function: divided by tp
    double attention = 0;   // softmax and attention dropout: divided by tp; 0 when fused
};
BlockElementwiseBytes block_elementwise_bytes(const PlanModel& m, int64_t seq, double elem_bytes,
                                              bool fused_attention);
// A block's time on a tp rank over its FLOPs / tp at the step's rate: the
// step's non-GEMM share (1 - step_efficiency, measured at tp 1) holds the
// memory-bound kernels, and the replicated ones' share of their bytes does
// not shrink with tp: 1 + (1 - step_efficiency) x that share x (tp - 1).
double block_replicated_factor(const PlanModel& m, int64_t seq, int tp, double step_efficiency);

}  // namespace loom
