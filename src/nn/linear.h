// Linear: out = inp @ W^T + b (nn.Linear) or inp @ W + b (GPT-2 Conv1D).
//
// Registers its rows in the ParamTable; `make_fused` registers several HF
// linears (BERT's query/key/value) back to back so their weights form one
// (sum OC, C) matrix and their biases one vector: one GEMM instead of three,
// and attention reads the packed (N, 3C) result with row stride 3C.
// Gradients accumulate (+=) into the flat gradient buffer; dinp overwrites
// unless `accumulate_dinp` (ops/matmul.h).
//
// Tensor parallelism: the model declares a TpRole per linear (its plan); when
// the model is built for tp > 1, `shard` cuts the rows to this rank's slice
// and the linear brackets its GEMM with Megatron's regions on the tp group:
//   column  output features split; Megatron "f" on the input: identity fwd,
//           all-reduce(sum, tp) of the input gradient bwd
//   row     input features split; Megatron "g" on the output: all-reduce(sum,
//           tp) fwd, then the replicated bias (added once, after the sum)
// The all-reduces run on the activations' memory in their type, so the same
// code serves every backend. With tp = 1 (or TpRole::none) no collective is posted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/lora.h"
#include "nn/module.h"
#include "nn/tp_slice.h"
#include "ops/matmul.h"

namespace loom {

class Communicator;

// Tensor-parallel role recorded in the rows' ShardSpec (Megatron's names).
enum class TpRole { none, column, row };

struct LinearInit {
    double std = 0.02;  // N(0, std) for the weight; the bias starts at zero
    bool head = false;  // rows may be absent from a checkpoint
    TpRole tp = TpRole::none;
    // Column role: the output is this many packed equal blocks (GPT-2's c_attn
    // is q, k, v: 3), each split on its own so a rank keeps whole heads.
    int tp_blocks = 1;
};

struct Linear {
    int64_t in = 0, out = 0;  // C, OC
    WeightLayout layout = WeightLayout::out_in;
    ParamRef weight, bias;  // bias undefined: no bias
    // Compute precision: bf16 or fp16 GEMM operands with fp32 accumulation
    // (autocast); parameters and gradients stay fp32 either way.
    DType compute = DType::f32;
    TpRole tp_role = TpRole::none;
    int tp_blocks = 1;           // see LinearInit
    int n_fused = 1;             // HF linears packed by make_fused (rows weight.row + k)
    // Once sharded, the tp group's twin that reaches the table's backend
    // (ModelTp::buffer_comm); null: whole layer, no collective.
    Communicator* tp = nullptr;
    // Column parallel, accumulating its input gradient: (N, C) of the
    // backend's memory the partial gradient is reduced in before it is
    // added; the model's arena workspace, set at each plan.
    ActPtr tp_work;
    // LoRA (nn/lora.h): adapters on some of the fused HF linears, their
    // rank and alpha / r, and the model's arena workspace (lora_work_elems),
    // set at each plan. Empty: a plain linear.
    std::vector<LoraAdapter> lora;
    int64_t lora_r = 0;
    float lora_scaling = 1;
    float lora_p = 0;        // lora_dropout
    uint32_t lora_site = 0;  // DropoutPlan site of its first adapter
    ActPtr lora_work;
    // This call's dropout keys, set by the block before each forward and
    // backward (it holds nothing between calls that a later one reads).
    mutable LoraDropout lora_drop;
    OpCtx ctx;

    // Rows "<prefix>.weight" (OC, C) or (C, OC) and "<prefix>.bias" (OC).
    static Linear make(ParamTable& t, const std::string& prefix, int64_t in, int64_t out,
                       WeightLayout layout, bool has_bias, const LinearInit& init);
    // One linear over several HF ones with the same input: weights then biases
    // contiguous, in the order given; out = outs[0] + outs[1] + ...
    // has_bias false: weights only (Llama's q/k/v, gate/up).
    static Linear make_fused(ParamTable& t, const std::vector<std::string>& prefixes, int64_t in,
                             const std::vector<int64_t>& outs, const LinearInit& init,
                             bool has_bias = true);
    // A linear whose weight is another module's row (a tied decoder), with an
    // optional bias row of its own.
    static Linear make_tied(int weight_row, int bias_row, int64_t in, int64_t out);

    // Keeps this rank's slice of the rows (before allocate) and the local
    // sizes: OC / tp (column) or C / tp (row). No-op for TpRole::none or tp 1.
    void shard(ParamTable& t, const ModelTp& tp);

    // Its GEMM operands narrower than the activations (the CPU's bf16), so
    // rounded as read, with roundings worth keeping (forward's keep_x16).
    bool rounds_operands() const;
    void bind(const ParamTable& t) {
        ctx = t.op_ctx();
        weight.bind(t);
        bias.bind(t);
        for (LoraAdapter& a : lora) {
            a.A.bind(t);
            a.B.bind(t);
        }
    }
    // Sizes are the local ones (`in`, `out`) once sharded. Under bf16 compute,
    // forward writes x's bf16 rounding to keep_x16 (N, C) when given (an
    // activation the caller saves), and backward takes it as x16 instead of
    // rounding x again; both null: rounded into a workspace each time.
    void forward(ActPtr y,   // (N, OC)
                 CActPtr x,  // (N, C)
                 int64_t N, uint16_t* keep_x16 = nullptr) const;
    // bf16 compute only: the input given already rounded (what keep_x16 holds;
    // an activation written straight to bf16).
    void forward_rounded(ActPtr y, const uint16_t* x16, int64_t N) const;
    void backward(ActPtr dx,   // (N, C) or null
                  CActPtr dy,  // (N, OC)
                  CActPtr x,   // (N, C)
                  int64_t N, bool accumulate_dx = false, const uint16_t* x16 = nullptr) const;

  private:
    // bf16 compute: the weight as forward rounded it, which backward reuses
    // (parameters change only between a backward and the next forward).
    mutable std::vector<uint16_t> weight16_;
    // The input of a forward: fp32 x (its rounding kept in keep16 when given),
    // or already rounded.
    struct Input {
        CActPtr x;
        uint16_t* keep16;
        const uint16_t* rounded;
    };
    void forward_input(ActPtr y, const Input& x, int64_t N) const;
    void gemm_forward(ActPtr y, const Input& x, CActPtr b, int64_t N) const;
    void gemm_backward(ActPtr dx, CActPtr dy, CActPtr x, int64_t N, bool accumulate_dx,
                       const uint16_t* x16) const;
    void base_backward(ActPtr dx, CActPtr dy, CActPtr x, int64_t N, bool accumulate_dx,
                       const uint16_t* x16) const;
};

}  // namespace loom
