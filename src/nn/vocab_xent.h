// VocabXent: Megatron's vocab-parallel softmax cross-entropy (comm/tp_vocab.h's
// semantics) over logits whose vocabulary is split on tp, on any backend: the
// local steps are the device table's (NnOps::vocab_xent_*), the collectives
// are posted here on the tp group's buffer twin, so one piece of code serves
// every device. The LM heads own one each.
//
// The per-row maxima and stats live in the model's arena (plan); backward
// reuses the forward's reduced values (the logits do not change between the
// two), so it posts no collective. The loss sum and label count come back to
// the host through the table's loss entry and are the same on every tp rank.
#pragma once

#include <cstdint>

#include "core/act_ptr.h"
#include "nn/module.h"
#include "ops/softmax_xent.h"

namespace loom {

class Communicator;

struct VocabXent {
    Communicator* tp = nullptr;  // the tp group's buffer twin; null: not vocab-parallel
    float* row_max = nullptr;    // (N) in the arena
    float* stats = nullptr;      // (2N) in the arena
    int64_t planned_rows = 0;

    // Before forward: workspace for up to N rows.
    void plan(ActArena& a, int64_t N) {
        row_max = a.take(N);
        stats = a.take(2 * N);
        planned_rows = N;
    }
    // Loss sum and count over N rows of (N, Vl) logits; targets (N) global
    // ids in the backend's memory, -100 ignored.
    XentSum forward(const OpCtx& ctx, CActPtr logits, const int64_t* targets, int64_t N,
                    int64_t V) const;
    // dlogits (N, Vl) = scale * (softmax - onehot) after forward on the same logits.
    void backward(const OpCtx& ctx, ActPtr dlogits, CActPtr logits, const int64_t* targets,
                  int64_t N, int64_t V, double scale) const;
};

}  // namespace loom
