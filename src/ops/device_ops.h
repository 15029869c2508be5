// DeviceOps: the kernels a device offers the device-neutral code above the
// ops, one table of function pointers per device (ggml's backend interface),
// reached through Backend::ops(). The CPU table is in device_ops_cpu.cpp,
// the CUDA one in cuda/device_ops_cuda.cpp; tests/cuda/test_cuda_device_ops.cpp
// checks every CUDA entry against the CPU one.
//
// The table holds the optimizer updates (optim/flat_optimizer.h) and, in
// NnOps (ops/nn_ops.h), the kernels of the nn modules. Every pointer an
// entry takes is memory of the backend it is called with.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include "backend/backend.h"
#include "core/dtype.h"
#include "ops/adamw.h"
#include "ops/lamb.h"
#include "ops/nn_ops.h"

namespace loom {

// What an optimizer update reads and writes. Weights and the compute copy
// are indexed by flat offset, gradients and moments by state offset (the
// same on the whole buffer; a ZeRO shard's own offsets otherwise).
struct UpdateBuffers {
    float* master = nullptr;  // fp32 weights
    const void* grad = nullptr;
    DType grad_dtype = DType::f32;
    float* m = nullptr;  // Adam moments; null for SGD
    float* v = nullptr;
    void* copy = nullptr;  // the compute-type weights, refreshed by the update; null: none
    DType copy_dtype = DType::f32;
};

// A LAMB tile plan in backend memory (ops/lamb_tiles.h).
struct LambPlanView {
    const LambTile* tiles = nullptr;
    int64_t n_tiles = 0;
    const int64_t* row_begin = nullptr;  // (rows + 1)
    int32_t rows = 0;
    double* tile_sums = nullptr;  // (n_tiles, 2) scratch
    double* row_sums = nullptr;   // (rows, 2)
};

struct DeviceOps {
    Device device = Device::cpu;
    void (*adamw)(Backend&, const UpdateBuffers&, std::span<const UpdateRun>, const AdamWParams&,
                  int64_t step, float grad_scale) = nullptr;
    void (*sgd)(Backend&, const UpdateBuffers&, std::span<const UpdateRun>, double lr,
                double weight_decay, float grad_scale) = nullptr;
    void (*lamb_moments)(Backend&, const UpdateBuffers&, const LambPlanView&, const LambStep&,
                         float grad_scale) = nullptr;
    void (*lamb_apply)(Backend&, const UpdateBuffers&, const LambPlanView&, const LambStep&,
                       double lr) = nullptr;
    // dst (n, dst_type) = src (n, src_type), rounding to nearest even; types
    // f32, bf16 and f16 (the compute copy, widened gradients).
    void (*convert)(Backend&, void* dst, DType dst_type, const void* src, DType src_type,
                    int64_t n) = nullptr;
    // parts[k] (host) = the sum of x[i]^2 over ranges[k] = [first, second),
    // in fp64 and the same bits run to run. Callers add the parts in order,
    // so a norm does not depend on how the device splits a range.
    void (*sum_squares)(Backend&, const void* x, DType,
                        std::span<const std::pair<int64_t, int64_t>>, double* parts) = nullptr;
    // x (n) *= s.
    void (*scale)(Backend&, void* x, DType, int64_t n, float s) = nullptr;
    // The nn modules' kernels; a constant of the device's table file.
    const NnOps* nn = nullptr;
};

inline const NnOps& OpCtx::nn() const {
    return *be->ops().nn;
}

// The host: memory from Storage::alloc, kernels from ops/, no stream.
Backend& cpu_backend();

}  // namespace loom
