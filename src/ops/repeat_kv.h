// Grouped-query attention's key/value expansion (HF's repeat_kv): the packed
// projection (N, (NH + 2 NKV) d) = [q: NH heads | k: NKV heads | v: NKV heads]
// becomes (N, 3 NH d) = [q | k repeated | v repeated], where query head h
// reads kv head h / (NH / NKV): each kv head is repeated NH/NKV times in a
// row (heads 0, 1 -> kv 0, heads 2, 3 -> kv 1 for NH 4, NKV 2), not
// interleaved. The expanded rows are what the plain multi-head attention ops
// read (stride 3 NH d), so GQA needs no attention kernel of its own.
//
// The backward sums each group's gradients back into its kv head and copies
// dq; it overwrites dpacked.
#pragma once

#include <cstdint>

namespace loom {

void repeat_kv_forward(float* expanded,      // (N, 3 NH d)
                       const float* packed,  // (N, (NH + 2 NKV) d)
                       int64_t N, int64_t NH, int64_t NKV, int64_t d);

void repeat_kv_backward(float* dpacked,          // (N, (NH + 2 NKV) d), overwritten
                        const float* dexpanded,  // (N, 3 NH d)
                        int64_t N, int64_t NH, int64_t NKV, int64_t d);

}  // namespace loom
