// LoRA (Hu et al. 2021) on a Linear, as PEFT's LoraLayer computes it:
//   y = W x (+ b) + (B (A drop(x))) * scaling,   scaling = lora_alpha / r,
// A = "<module>.lora_A.weight" (r, C), B = "<module>.lora_B.weight" (OC_k, r)
// where <module> is the HF linear's name. A fused Linear (Llama's q|k|v,
// gate|up) carries one adapter per targeted HF linear, each adding into its
// own output slice [out_offset, out_offset + out) of the fused GEMM's rows.
//
// Written over the table's ops (matmul, copy_2d, scale, add_inplace), so it
// runs on every backend. Nothing is saved for backward: A x is recomputed
// there from the linear's saved input (r columns, cheap next to the base GEMM).
// The workspace is the model's arena (lora_work_elems), lent at each plan.
//
// Tensor parallelism follows the base linear (Megatron's split): column
// parallel, B is split by output rows and B^T du summed over tp in backward;
// row parallel, A is split by input columns and A x summed over tp before B
// (in backward too, where A x is recomputed: one more (N, r) all-reduce
// instead of keeping it).
// The replicated halves (A, resp. B) then get the same gradient on every tp
// rank, as LayerNorms do, without a sum over tp.
//
// lora_dropout (PEFT: on the input of A only): the mask is recomputed in
// backward from the step's Philox keys, as the blocks' dropouts are.
//
// Not here: DoRA, rsLoRA and bias training (the job refuses them before a
// model is built).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/act_ptr.h"
#include "nn/module.h"

namespace loom {

struct Linear;

// A job's `peft:` block as the model reads it (PEFT's LoraConfig names).
struct LoraSpec {
    int64_t r = 0;  // 0: no LoRA
    double lora_alpha = 8;
    std::vector<std::string> target_modules;   // PEFT matching: name == t or ends with "." + t
    std::vector<std::string> modules_to_save;  // trained in full (a classifier head)
    double lora_dropout = 0;                   // on the adapter's input, training only
    bool active() const { return r > 0; }
    double scaling() const { return lora_alpha / double(r); }
    bool operator==(const LoraSpec&) const = default;
};

// PEFT's rule for a list of target names: the module's full name equals the
// target or ends with "." + target.
bool lora_name_matches(const std::string& module, const std::string& target);

// Where one call of a LoRA linear sits, for its adapters' dropout masks: the
// step's keys, the 1-based layer application, the batch's (B, T), and the
// positions of the rows when the linear runs on gathered rows (null: all B *
// T). The block sets it before each forward and backward of its linears.
struct LoraDropout {
    DropoutPlan plan;
    uint32_t layer = 0;
    int64_t B = 0, T = 0;
    const int64_t* rows = nullptr;
};

struct LoraAdapter {
    std::string module;      // the HF linear's name (no ".weight")
    int64_t out_offset = 0;  // first output column of the fused GEMM it adds to
    int64_t out = 0;         // its output width (OC_k)
    ParamRef A, B;           // (r, C), (out, r)
};

// Adds an adapter to every HF linear of `l` that `spec` targets (rows
// "<module>.lora_A.weight" and ".lora_B.weight", trainable); returns the
// HF linear names it matched, in `l`'s order. `slot`: the linear's place in
// its block (0 to 3), which keys its adapters' dropout masks
// (DropoutPlan::lora + 4 * slot + the adapter's index).
std::vector<std::string> lora_attach(ParamTable& t, Linear& l, const LoraSpec& spec,
                                     uint32_t slot = 0);

// The HF module names of `l`'s linears ("model.layers.0.self_attn.q_proj").
std::vector<std::string> lora_module_names(const ParamTable& t, const Linear& l);

// Tensor parallelism (Linear::shard): a column-parallel linear keeps its
// adapters' B rows of this rank's output slice (A whole, replicated); a
// row-parallel one its A columns of the input slice (B whole). Before allocate.
void lora_shard(ParamTable& t, Linear& l, int tp_size, int tp_rank);

// Workspace (activations) one forward or backward of `l` needs for N rows.
int64_t lora_work_elems(const Linear& l, int64_t N);

// y (N, OC) += each adapter's (B (A drop(x))) * scaling in its slice. The
// dropout (lora_dropout, in training) is keyed by the global element of the
// linear's whole input (l.lora_drop), so a row-parallel slice draws the
// whole input's mask at its columns. x16: x's
// bf16 rounding when the linear rounds its operands (then x may be null).
void lora_forward(const Linear& l, ActPtr y, CActPtr x, const uint16_t* x16, int64_t N);
// dA, dB +=; dx (N, C) += the adapters' input gradient (dx may be null).
void lora_backward(const Linear& l, ActPtr dx, CActPtr dy, CActPtr x, const uint16_t* x16,
                   int64_t N);

}  // namespace loom
