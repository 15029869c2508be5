// CUDA embedding lookup and its deterministic backward (semantics of ops/embedding.h).
//
// Backward sorts the (id, position) pairs with a stable radix sort, then one
// block per distinct id adds that id's dout rows into dtable in position order:
// the same order as the CPU's sequential loop, with no atomics, so the result
// is bit-identical run to run (and equal to the CPU in fp32 up to the ops'
// fp32 rounding). Ids outside [0, V) are reported through the context's error
// record (the row gets zeros in forward, no gradient in backward); padding_idx
// rows get no gradient.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_context.h"

namespace loom {

template <typename T>
void embedding_forward_cuda(T* out,              // (N, C)
                            const int64_t* ids,  // (N) on the device
                            const T* table,      // (V, C)
                            int64_t N, int64_t V, int64_t C, bool accumulate, CudaContext& ctx);

template <typename T>
void embedding_backward_cuda(T* dtable,           // (V, C), +=
                             const int64_t* ids,  // (N) on the device
                             const T* dout,       // (N, C)
                             int64_t N, int64_t V, int64_t C, int64_t padding_idx,
                             CudaContext& ctx);

}  // namespace loom
