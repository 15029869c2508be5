// Dropout's keep decision and scale on the device, shared by dropout and attention.
// Must stay the CPU's rule (ops/dropout.h): keep iff uniform(global) >= p, kept
// values scaled by 1 / (1 - p).
#pragma once

#include <cstdint>

#include "ops/dropout.h"

namespace loom::gpu {

__device__ __forceinline__ bool dropout_keep(const DropoutSpec& d, uint64_t global_elem) {
    return d.stream.uniform(global_elem) >= d.p;
}

// The CPU's scale (ops/dropout.h): 1 / (1 - p) with 1 - p rounded to float first.
inline float dropout_scale(const DropoutSpec& d) {
    return loom::dropout_scale<float>(d);
}

}  // namespace loom::gpu
