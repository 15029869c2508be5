// Masked-LM masking (HF DataCollatorForLanguageModeling.torch_mask_tokens)
// with counter-based draws; the keying rule is documented in collate.h.
#include <cmath>

#include "core/check.h"
#include "core/philox.h"
#include "data/collate.h"

namespace loom::detail {

namespace {

// Philox counter word 3 for masking draws (distinct from shuffling and dropout).
constexpr uint32_t k_mlm_site = 0x4D4C4D00u;  // "MLM"

// 0.8 and 0.5 of 2^32: HF draws bernoulli(0.8) for [MASK], then bernoulli(0.5)
// among the rest for a random token, leaving 10% unchanged.
constexpr uint64_t k_mask_threshold = 3435973837ull;   // ceil(0.8 * 2^32)
constexpr uint64_t k_random_threshold = 2147483648ull; // 0.5 * 2^32

}  // namespace

MlmMasker::MlmMasker(const LoaderOptions& opts)
    : seed_(opts.seed), mask_id_(opts.mask_id), vocab_size_(uint64_t(std::max<int64_t>(opts.vocab_size, 0))) {
    LOOM_CHECK(opts.mlm_probability >= 0.0 && opts.mlm_probability <= 1.0,
               "masked-lm: mlm_probability must be in [0, 1], got {}", opts.mlm_probability);
    LOOM_CHECK(opts.mask_id >= 0, "masked-lm: the tokenizer has no mask token (mask_id {})", opts.mask_id);
    LOOM_CHECK(opts.vocab_size > 0 && opts.mask_id < opts.vocab_size,
               "masked-lm: vocab_size {} must be positive and above mask_id {}", opts.vocab_size,
               opts.mask_id);
    pick_threshold_ = uint64_t(std::llround(opts.mlm_probability * 4294967296.0));
    special_.assign(size_t(opts.vocab_size), 0);
    for (int64_t id : opts.special_ids)
        if (id >= 0 && id < opts.vocab_size) special_[size_t(id)] = 1;
}

int64_t MlmMasker::mask_row(int64_t* ids, int64_t* labels, const Feature& f, int64_t feature_index,
                            int64_t epoch) const {
    const PhiloxStream stream(seed_, uint64_t(epoch), k_mlm_site);
    const uint64_t row_key = uint64_t(feature_index) << 32;
    int64_t picked = 0;
    for (size_t t = 0; t < f.ids.size(); ++t) {
        const int32_t id = f.ids[t];
        ids[t] = id;
        labels[t] = -100;
        if (!eligible(id)) continue;
        const auto r = stream.block(row_key | t);
        if (uint64_t(r[0]) >= pick_threshold_) continue;
        ++picked;
        labels[t] = id;
        if (uint64_t(r[1]) < k_mask_threshold)
            ids[t] = mask_id_;
        else if (uint64_t(r[2]) < k_random_threshold)
            ids[t] = int64_t((uint64_t(r[3]) * vocab_size_) >> 32);
    }
    return picked;
}

int64_t MlmMasker::count_row(const Feature& f, int64_t feature_index, int64_t epoch) const {
    const PhiloxStream stream(seed_, uint64_t(epoch), k_mlm_site);
    const uint64_t row_key = uint64_t(feature_index) << 32;
    int64_t picked = 0;
    for (size_t t = 0; t < f.ids.size(); ++t)
        if (eligible(f.ids[t]) && uint64_t(stream.block(row_key | t)[0]) < pick_threshold_) ++picked;
    return picked;
}

}  // namespace loom::detail
