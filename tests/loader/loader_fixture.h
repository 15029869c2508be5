// Synthetic feature sets and loader drivers for the loader and masking tests:
// feature i has a distinct, deterministic id pattern and a length that varies
// with i, so rows can be told apart and padding is exercised.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "data/loader.h"

namespace loom::test {

constexpr int64_t k_cls = 101, k_sep = 102, k_mask = 103, k_vocab = 30522;

// [CLS] x x x ... [SEP], 3 + (i * 7) % 11 tokens (or `len` when > 0).
inline std::shared_ptr<FeatureSet> synthetic_set(Task task, int64_t n, int64_t len = 0,
                                                 uint32_t seed = 1) {
    auto set = std::make_shared<FeatureSet>();
    set->task = task;
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> word(1000, int32_t(k_vocab) - 1);
    for (int64_t i = 0; i < n; ++i) {
        Feature f;
        const int64_t L = len > 0 ? len : 3 + (i * 7) % 11;
        f.ids.push_back(int32_t(k_cls));
        for (int64_t t = 1; t + 1 < L; ++t) f.ids.push_back(word(rng));
        f.ids.push_back(int32_t(k_sep));
        f.type_ids.assign(f.ids.size(), 0);
        if (L > 4) f.type_ids.back() = 1;  // something non-zero to carry through
        f.label = i % 3;
        f.start_position = i % int64_t(f.ids.size());
        f.end_position = f.start_position;
        set->features.push_back(std::move(f));
    }
    return set;
}

inline LoaderOptions base_options(int64_t B, int64_t dp_rank = 0, int64_t dp_size = 1) {
    LoaderOptions o;
    o.batch_size = B;
    o.dp_rank = dp_rank;
    o.dp_size = dp_size;
    o.seed = 1234;
    o.mask_id = k_mask;
    o.vocab_size = k_vocab;
    o.special_ids = {0, 100, k_cls, k_sep, k_mask};
    return o;
}

// One row as the model sees it, without padding.
struct Row {
    int64_t feature = -1;
    int64_t position = -1;  // in the epoch order
    std::vector<int64_t> ids, types, labels;  // unpadded
    int64_t label = -100, start = -1, end = -1;
    bool operator==(const Row&) const = default;
};

inline std::vector<Row> rows_of(const TokenBatch& b, const FeatureSet& data) {
    std::vector<Row> rows;
    for (int64_t r = 0; r < b.B; ++r) {
        Row row;
        row.feature = b.feature_index[size_t(r)];
        row.position = b.first_global_sample + r;
        const int64_t L = int64_t(data.features[size_t(row.feature)].ids.size());
        for (int64_t t = 0; t < b.T; ++t) {
            const size_t k = size_t(r * b.T + t);
            EXPECT_EQ(b.attention_mask[k], t < L ? 1 : 0);
            if (t >= L) continue;
            row.ids.push_back(b.input_ids[k]);
            row.types.push_back(b.token_type_ids[k]);
            if (b.labels.size() == size_t(b.B * b.T)) row.labels.push_back(b.labels[k]);
        }
        if (b.labels.size() == size_t(b.B)) row.label = b.labels[size_t(r)];
        if (!b.start_positions.empty()) {
            row.start = b.start_positions[size_t(r)];
            row.end = b.end_positions[size_t(r)];
        }
        rows.push_back(std::move(row));
    }
    return rows;
}

// Every batch of `epochs` epochs of one rank, in order (one inner vector per
// global batch; an epoch ends where next() returned false).
inline std::vector<std::vector<TokenBatch>> drain(Loader& loader, int epochs) {
    std::vector<std::vector<TokenBatch>> out;
    for (int e = 0; e < epochs; ++e) {
        std::vector<TokenBatch> epoch;
        TokenBatch b;
        while (loader.next(b)) epoch.push_back(b);
        out.push_back(std::move(epoch));
    }
    return out;
}

}  // namespace loom::test
