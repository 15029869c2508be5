// Cluster planner for GPU nodes: memory per GPU and step time of one
// data x tensor x pipeline layout of a GPT/BERT-style or Llama-family transformer in mixed
// precision (docs/plan-gpu.md), and the search over layouts that `loom plan
// --machine` and `distribution: auto` use.
//
// Memory follows Korthikanti et al. 2022 (per-layer activation bytes, the
// first pipeline stage's in-flight micro-batches) and ZeRO's 16 bytes per
// parameter; time prices each GEMM by its shape, the memory-bound kernels by
// HBM bandwidth, collectives as rings over NVLink or the network, and the
// pipeline bubble by simulating the schedule (pipeline_sim.h).
//
// Pure arithmetic over plain structs: nothing is measured or allocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/gpu_profile.h"
#include "parallel/layout_plan.h"
#include "parallel/pipeline_schedule.h"

namespace loom {

enum class Recompute : uint8_t { none, selective, full };
std::string_view recompute_name(Recompute r);
Recompute recompute_from_name(std::string_view name);  // throws naming the choices

// One layout of the job. schedule is ignored when pp == 1.
struct GpuLayout {
    int dp = 1, tp = 1, pp = 1;
    int64_t micro_batch = 1;
    int64_t global_batch = 0;  // rows per optimizer step over all replicas
    ScheduleKind schedule = ScheduleKind::one_f_one_b;
    int virtual_stages = 1;  // interleaved chunks per rank
    Recompute recompute = Recompute::none;
    bool sequence_parallel = false;
    int zero_stage = 0;              // 0, 1 (optimizer state) or 2 (+ gradients)
    std::string precision = "bf16";  // bf16, fp16 (both mixed), tf32 or fp32
    bool fused_attention = false;    // flash-style: no s x s tensors kept or streamed
};

// "dp=8,tp=4,pp=12,micro_batch=2,..." (keys as GpuLayout's, schedule=1f1b|
// interleaved|gpipe, attention=fused|unfused); throws naming the bad key.
GpuLayout parse_gpu_layout(const std::string& text, GpuLayout base = {});
std::string gpu_layout_name(const GpuLayout& l);

struct GpuJob {
    PlanModel model;
    int64_t seq = 2048;
    int nodes = 1;
    GpuProfile machine;
    int world() const { return nodes * machine.gpus_per_node; }
};

// Bytes per GPU on the busiest pipeline stage.
struct GpuMemory {
    double weights = 0, grads = 0, optimizer = 0;  // model state
    double activations = 0;  // saved for backward, all micro-batches in flight
    double logits = 0;       // output layer and loss (last stage)
    double reserved = 0;     // CUDA context, cuBLAS workspace, NCCL buffers
    double allocator = 0;    // fragmentation margin on activations and logits
    double total = 0;
    double layer_activation = 0;  // one layer, one micro-batch (Korthikanti Table 2)
    int in_flight = 1;            // micro-batch chunks the stage holds
    bool first_stage = true;      // which stage is the busiest
};

struct GpuTime {
    double gemm_s = 0;         // matrix products, recompute included
    double memory_bound_s = 0;  // LayerNorm, softmax, dropout, GeLU, residual (HBM)
    double tp_comm_s = 0;      // tensor-parallel all-reduces (or SP gather/scatter)
    double pp_comm_s = 0;      // stage-to-stage sends
    double bubble = 0;         // pipeline idle share (simulated schedule)
    double dp_comm_s = 0;      // gradient reduction (ZeRO: + parameter gather), total
    double dp_exposed_s = 0;   // the part not hidden behind the last backward
    double optimizer_s = 0;    // AdamW, streaming its state through HBM
    double step_s = 0;
};

struct GpuPlanRow {
    GpuLayout layout;
    int64_t microbatches = 0;  // per replica per step
    GpuMemory memory;
    GpuTime time;
    double tokens_per_s = 0;
    double tflops_model = 0, tflops_hardware = 0;  // per GPU
    double mfu = 0, hfu = 0;
    bool feasible = false;
    std::string reason;  // why not, when !feasible
};

// Share of the token positions the output layer computes logits for: all
// for causal LM, the labelled share for masked LM (as Loom and Megatron's
// BERT compute them), none for classification and QA heads (negligible).
double gpu_logit_share(const PlanModel& m);

// Memory (gpu_plan_memory.cpp).
double gpu_layer_activation_bytes(const PlanModel& m, int64_t seq, const GpuLayout& l);
GpuMemory gpu_plan_memory(const GpuJob& job, const GpuLayout& l);
// Parameters held by the busiest stage's GPU.
double gpu_stage_params(const PlanModel& m, int64_t seq, const GpuLayout& l, bool first_stage);

// Time and FLOPs (gpu_plan_time.cpp).
// simulate = false takes the bubble from schedule_bubble_theory (cheap; the
// search uses it for layouts memory already rules out).
GpuTime gpu_plan_time(const GpuJob& job, const GpuLayout& l, bool simulate = true);
double gpu_model_flops(const PlanModel& m, int64_t seq, int64_t rows);     // 3 x forward
double gpu_hardware_flops(const PlanModel& m, int64_t seq, int64_t rows,  // + recompute
                          const GpuLayout& l);

// Pricing and search (gpu_plan_search.cpp).
std::string gpu_layout_check(const GpuJob& job, const GpuLayout& l);  // "" = can run
GpuPlanRow gpu_plan_price(const GpuJob& job, const GpuLayout& l);

struct GpuSearchBounds {
    int max_tp = 0, max_pp = 0;       // 0 = no bound beyond the world
    int64_t micro_batch = 0;          // 0 = try powers of two
    int zero_stage = 0;
    std::string precision = "bf16";
    bool fused_attention = false;
    bool sequence_parallel = true;  // also try it where tp > 1
    std::vector<Recompute> recompute{Recompute::none, Recompute::selective, Recompute::full};
};
// Every layout of job.world() at the global batch, feasible ones first,
// fastest first.
std::vector<GpuPlanRow> gpu_plan_search(const GpuJob& job, int64_t global_batch,
                                        const GpuSearchBounds& bounds);

// Why the first feasible row beats the second (and the fastest infeasible
// one, if faster): lines of plain text.
std::vector<std::string> gpu_plan_explain(const std::vector<GpuPlanRow>& rows);

}  // namespace loom
