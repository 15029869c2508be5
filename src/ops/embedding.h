// Embedding lookup. Ids outside [0, V) are an error naming the id and row.
//
// Backward accumulates into dtable (+=) in a fixed order (deterministic across
// thread counts); rows equal to padding_idx get no gradient, as torch's
// nn.Embedding(padding_idx=...) does. padding_idx < 0 means none.
#pragma once

#include <cstdint>

namespace loom {

template <typename T>
void embedding_forward(T* out,             // (N, C)
                       const int64_t* ids, // (N)
                       const T* table,     // (V, C)
                       int64_t N, int64_t V, int64_t C, bool accumulate = false);

template <typename T>
void embedding_backward(T* dtable,          // (V, C), +=
                        const int64_t* ids, // (N)
                        const T* dout,      // (N, C)
                        int64_t N, int64_t V, int64_t C, int64_t padding_idx = -1);

}  // namespace loom
