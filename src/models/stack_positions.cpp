// StackModel's packed-document inputs: ModelInputs::position_ids copied and
// checked, and each token's first visible key derived from them.
//
// A row's position ids must count 0, 1, 2, ... within each document and
// restart at 0 where the next one starts (data/featurize_lm.cpp's
// pack_documents, HF's DataCollatorWithFlattening). Token t of a document
// that starts at s has position t - s, so the first key it may see is
// t - position_ids[t]: attention then never crosses a document boundary,
// and every document sees the positions it would see alone.
#include "core/check.h"
#include "models/stack_model.h"

namespace loom {

void StackModel::take_positions(const ModelInputs& in) {
    positions_.clear();
    key_start_.clear();
    if (in.position_ids == nullptr) return;
    // Encoders read positions their own way (RoBERTa's from the padding) and
    // have no notion of packed documents.
    LOOM_CHECK(!blocks_.empty() && blocks_[0].attn.causal,
               "position_ids (packed documents) need a causal decoder (GPT-2, the Llama "
               "family); {} is not one",
               config_.architecture);
    const int64_t N = B_ * T_;
    positions_.assign(in.position_ids, in.position_ids + N);
    key_start_.resize(size_t(N));
    for (int64_t b = 0; b < B_; ++b)
        for (int64_t t = 0; t < T_; ++t) {
            const int64_t p = positions_[size_t(b * T_ + t)];
            const int64_t prev = t > 0 ? positions_[size_t(b * T_ + t - 1)] : -1;
            LOOM_CHECK(p == 0 || p == prev + 1,
                       "position_ids: row {} has {} at token {} after {}; positions must count "
                       "0, 1, 2, ... within each packed document and restart at 0 where the "
                       "next one starts",
                       b, p, t, prev);
            key_start_[size_t(b * T_ + t)] = t - p;
        }
}

}  // namespace loom
