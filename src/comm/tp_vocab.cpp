// The vocab-parallel layout: padded size, ranges, slicing and assembling.
#include "comm/tp_vocab.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "ops/vocab_parallel.h"

namespace loom {

int64_t tp_vocab_padded(int64_t V, int tp_size) {
    LOOM_CHECK(tp_size >= 1 && V >= 0, "tp_vocab_padded: V {} tp size {}", V, tp_size);
    return (V + tp_size - 1) / tp_size * tp_size;
}

TpVocabRange tp_vocab_range(int64_t V, int tp_size, int tp_rank) {
    LOOM_CHECK(tp_rank >= 0 && tp_rank < tp_size, "tp_vocab_range: rank {} of {}", tp_rank,
               tp_size);
    const int64_t count = tp_vocab_padded(V, tp_size) / tp_size;
    return {int64_t(tp_rank) * count, count};
}

template <typename T>
void tp_vocab_shard_for_rank(T* table_local, const T* table, int64_t V, int64_t C, int tp_size,
                             int tp_rank) {
    const TpVocabRange r = tp_vocab_range(V, tp_size, tp_rank);
    const int64_t valid = vocab_slice_valid(V, r.first, r.count);
    std::copy(table + r.first * C, table + (r.first + valid) * C, table_local);
    std::fill(table_local + valid * C, table_local + r.count * C, T(0));
}

template <typename T>
void tp_vocab_assemble(T* table, const T* table_local, int64_t V, int64_t C, Communicator& tp) {
    const int64_t Vp = tp_vocab_padded(V, tp.size());
    const int64_t n = Vp / tp.size() * C;
    std::vector<T> staged(size_t(Vp * C));  // (Vp, C): rank slices are consecutive rows
    if (tp.size() == 1)
        std::copy(table_local, table_local + n, staged.data());
    else
        tp.all_gather(table_local, staged.data(), n, dtype_of<T>())->wait();
    std::copy(staged.data(), staged.data() + V * C, table);
}

#define LOOM_TP_VOCAB_INSTANTIATE(T)                                                    \
    template void tp_vocab_shard_for_rank<T>(T*, const T*, int64_t, int64_t, int, int); \
    template void tp_vocab_assemble<T>(T*, const T*, int64_t, int64_t, Communicator&)

LOOM_TP_VOCAB_INSTANTIATE(float);
LOOM_TP_VOCAB_INSTANTIATE(double);

#undef LOOM_TP_VOCAB_INSTANTIATE

}  // namespace loom
