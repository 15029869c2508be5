// Linear: out = inp @ W^T + b (nn.Linear) or inp @ W + b (GPT-2 Conv1D).
//
// Registers its rows in the ParamTable; `make_fused` registers several HF
// linears (BERT's query/key/value) back to back so their weights form one
// (sum OC, C) matrix and their biases one vector: one GEMM instead of three,
// and attention reads the packed (N, 3C) result with row stride 3C.
// Gradients accumulate (+=) into the flat gradient buffer; dinp overwrites
// unless `accumulate_dinp` (ops/matmul.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/module.h"
#include "ops/matmul.h"

namespace loom {

// Tensor-parallel role recorded in the rows' ShardSpec (Megatron's names).
enum class TpRole { none, column, row };

struct LinearInit {
    double std = 0.02;  // N(0, std) for the weight; the bias starts at zero
    bool head = false;  // rows may be absent from a checkpoint
    TpRole tp = TpRole::none;
};

struct Linear {
    int64_t in = 0, out = 0;  // C, OC
    WeightLayout layout = WeightLayout::out_in;
    ParamRef weight, bias;  // bias undefined: no bias
    // Compute precision: bf16 or fp16 GEMM operands with fp32 accumulation
    // (autocast); parameters and gradients stay fp32 either way.
    ComputeDtype compute = ComputeDtype::fp32;

    // Rows "<prefix>.weight" (OC, C) or (C, OC) and "<prefix>.bias" (OC).
    static Linear make(ParamTable& t, const std::string& prefix, int64_t in, int64_t out,
                       WeightLayout layout, bool has_bias, const LinearInit& init);
    // One linear over several HF ones with the same input: weights then biases
    // contiguous, in the order given; out = outs[0] + outs[1] + ...
    static Linear make_fused(ParamTable& t, const std::vector<std::string>& prefixes, int64_t in,
                             const std::vector<int64_t>& outs, const LinearInit& init);
    // A linear whose weight is another module's row (a tied decoder), with an
    // optional bias row of its own.
    static Linear make_tied(int weight_row, int bias_row, int64_t in, int64_t out);

    void bind(const ParamTable& t) {
        weight.bind(t);
        bias.bind(t);
    }
    void forward(float* y,        // (N, OC)
                 const float* x,  // (N, C)
                 int64_t N) const;
    void backward(float* dx,        // (N, C) or null
                  const float* dy,  // (N, OC)
                  const float* x,   // (N, C)
                  int64_t N, bool accumulate_dx = false) const;
};

}  // namespace loom
