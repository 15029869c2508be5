// Collation of padded batches for every task (collate.h), and the
// TokenBatch -> ModelInputs views. Masking itself is in collate_mlm.cpp.
#include <algorithm>

#include "core/check.h"
#include "data/collate.h"

namespace loom {

ModelInputs TokenBatch::inputs() const {
    ModelInputs in;
    in.B = B;
    in.T = T;
    in.input_ids = input_ids.data();
    in.attention_mask = attention_mask.data();
    in.token_type_ids = token_type_ids.data();
    in.position_ids = position_ids.empty() ? nullptr : position_ids.data();
    in.labels = labels.empty() ? nullptr : labels.data();
    in.start_positions = start_positions.empty() ? nullptr : start_positions.data();
    in.end_positions = end_positions.empty() ? nullptr : end_positions.data();
    return in;
}

namespace detail {

int64_t padded_length(int64_t longest, int64_t pad_to_multiple_of) {
    if (pad_to_multiple_of > 1 && longest % pad_to_multiple_of != 0)
        longest += pad_to_multiple_of - longest % pad_to_multiple_of;
    return longest;
}

int64_t row_label_count(Task task, const Feature& f, int64_t feature_index, int64_t epoch,
                        const MlmMasker* masker) {
    switch (task) {
        case Task::sequence_classification:
            return f.label != -100 ? 1 : 0;
        case Task::question_answering:
            return 2;
        case Task::causal_lm: {
            if (f.labels.empty()) return f.ids.empty() ? 0 : int64_t(f.ids.size()) - 1;
            // The first token is never a target (the model shifts).
            return std::count_if(f.labels.begin() + 1, f.labels.end(),
                                 [](int32_t l) { return l != -100; });
        }
        case Task::masked_lm:
            return masker->count_row(f, feature_index, epoch);
        case Task::base:
            return 0;
    }
    return 0;
}

void collate_rows(TokenBatch& out, const RowSource& rows, const LoaderOptions& opts,
                  const MlmMasker* masker, const int64_t* feature_index, int64_t B, int64_t T,
                  int64_t epoch) {
    const Task task = rows.task();
    Feature scratch;
    out.B = B;
    out.T = T;
    const size_t BT = size_t(B * T);
    out.input_ids.assign(BT, opts.pad_id);
    out.attention_mask.assign(BT, 0);
    out.token_type_ids.assign(BT, 0);
    out.labels.clear();
    out.start_positions.clear();
    out.end_positions.clear();
    out.position_ids.clear();
    out.feature_index.assign(feature_index, feature_index + B);
    out.label_count = 0;
    const bool token_labels = task == Task::masked_lm || task == Task::causal_lm;
    if (token_labels) out.labels.assign(BT, -100);
    if (task == Task::sequence_classification) out.labels.assign(size_t(B), -100);
    if (task == Task::question_answering) {
        out.start_positions.assign(size_t(B), 0);
        out.end_positions.assign(size_t(B), 0);
    }

    for (int64_t b = 0; b < B; ++b) {
        const int64_t fi = feature_index[b];
        const Feature& f = rows.row(fi, scratch);
        const int64_t n = int64_t(f.ids.size());
        LOOM_ASSERT(n <= T, "feature {} has {} tokens, more than the batch length {}", fi, n, T);
        int64_t* ids = out.input_ids.data() + b * T;
        int64_t* mask = out.attention_mask.data() + b * T;
        int64_t* types = out.token_type_ids.data() + b * T;
        std::fill(mask, mask + n, 1);
        for (int64_t t = 0; t < n; ++t) types[t] = f.type_ids[size_t(t)];
        switch (task) {
            case Task::masked_lm:
                out.label_count += masker->mask_row(ids, out.labels.data() + b * T, f, fi, epoch);
                break;
            case Task::causal_lm: {
                int64_t* labels = out.labels.data() + b * T;
                for (int64_t t = 0; t < n; ++t) ids[t] = labels[t] = f.ids[size_t(t)];
                if (!f.labels.empty())
                    for (int64_t t = 0; t < n; ++t) labels[t] = f.labels[size_t(t)];
                if (!f.position_ids.empty()) {
                    // The first row with documents gives every row positions:
                    // 0 .. T-1 (one document) until its own are written.
                    if (out.position_ids.empty())
                        for (int64_t r = 0; r < B; ++r)
                            for (int64_t t = 0; t < T; ++t) out.position_ids.push_back(t);
                    int64_t* pos = out.position_ids.data() + b * T;
                    for (int64_t t = 0; t < n; ++t) pos[t] = f.position_ids[size_t(t)];
                    for (int64_t t = n; t < T; ++t) pos[t] = t - n;  // padding: its own
                }
                out.label_count += row_label_count(task, f, fi, epoch, masker);
                break;
            }
            case Task::sequence_classification:
                for (int64_t t = 0; t < n; ++t) ids[t] = f.ids[size_t(t)];
                out.labels[size_t(b)] = f.label;
                out.label_count += row_label_count(task, f, fi, epoch, masker);
                break;
            case Task::question_answering:
                for (int64_t t = 0; t < n; ++t) ids[t] = f.ids[size_t(t)];
                out.start_positions[size_t(b)] = f.start_position;
                out.end_positions[size_t(b)] = f.end_position;
                out.label_count += row_label_count(task, f, fi, epoch, masker);
                break;
            case Task::base:  // no labels: the model's hidden states only
                for (int64_t t = 0; t < n; ++t) ids[t] = f.ids[size_t(t)];
                break;
        }
    }
}

}  // namespace detail

}  // namespace loom
