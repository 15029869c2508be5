// Masked-LM masking (HF DataCollatorForLanguageModeling): rate and 80/10/10
// split within statistical bounds, special and padding tokens never masked,
// masks keyed by (seed, epoch, sample) only, and real BERT features.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "feature_test_util.h"
#include "loader_fixture.h"

namespace loom::test {
namespace {

// |x/n - p| within 5 standard deviations of a binomial proportion.
void expect_rate(int64_t x, int64_t n, double p, const char* what) {
    ASSERT_GT(n, 0) << what;
    const double sd = std::sqrt(p * (1 - p) / double(n));
    EXPECT_NEAR(double(x) / double(n), p, 5 * sd) << what << ": " << x << " of " << n;
}

TEST(CollateMlm, RateAndSplitFollowDataCollatorForLanguageModeling) {
    auto data = synthetic_set(Task::masked_lm, 3000, 40);  // 114k maskable tokens
    LoaderOptions o = base_options(16);
    Loader loader(data, o);
    int64_t eligible = 0, picked = 0, masked = 0, random = 0, kept = 0, special_seen = 0;
    double random_sum = 0;
    TokenBatch b;
    while (loader.next(b)) {
        int64_t batch_picked = 0;
        for (int64_t r = 0; r < b.B; ++r) {
            const Feature& f = data->features[size_t(b.feature_index[size_t(r)])];
            for (int64_t t = 0; t < b.T; ++t) {
                const size_t k = size_t(r * b.T + t);
                const int64_t id = b.input_ids[k], label = b.labels[k];
                if (t >= int64_t(f.ids.size())) {
                    EXPECT_EQ(label, -100);
                    continue;
                }
                const int64_t orig = f.ids[size_t(t)];
                if (orig == k_cls || orig == k_sep) {
                    ++special_seen;
                    EXPECT_EQ(id, orig);
                    EXPECT_EQ(label, -100);
                    continue;
                }
                ++eligible;
                if (label == -100) {
                    EXPECT_EQ(id, orig);
                    continue;
                }
                EXPECT_EQ(label, orig);
                ++picked;
                ++batch_picked;
                if (id == k_mask) {
                    ++masked;
                } else if (id == orig) {
                    ++kept;
                } else {
                    ++random;
                    EXPECT_GE(id, 0);
                    EXPECT_LT(id, k_vocab);
                    random_sum += double(id);
                }
            }
        }
        EXPECT_EQ(b.label_count, batch_picked);
    }
    EXPECT_EQ(special_seen, 2 * 3000);
    expect_rate(picked, eligible, 0.15, "picked");
    // A random draw equal to the original (1 / V) counts as kept; negligible here.
    expect_rate(masked, picked, 0.8, "[MASK]");
    expect_rate(random, picked, 0.1, "random");
    expect_rate(kept, picked, 0.1, "unchanged");
    // Random ids are uniform over [0, V): their mean is near V/2.
    const double mean = random_sum / double(random);
    const double sd_mean = double(k_vocab) / std::sqrt(12.0 * double(random));
    EXPECT_NEAR(mean, double(k_vocab) / 2, 5 * sd_mean);
}

// The masked row of feature `fi` in epoch `e` as a given loader delivers it.
std::map<int64_t, Row> masked_rows(std::shared_ptr<const FeatureSet> data, LoaderOptions o, int epochs,
                                   int epoch_wanted) {
    std::map<int64_t, Row> out;
    Loader loader(data, o);
    const auto all = drain(loader, epochs);
    for (const auto& b : all[size_t(epoch_wanted)])
        for (Row& row : rows_of(b, *data)) {
            row.position = -1;  // positions differ with the order; the mask must not
            out[row.feature] = std::move(row);
        }
    return out;
}

TEST(CollateMlm, MaskDependsOnSampleAndEpochOnly) {
    auto data = synthetic_set(Task::masked_lm, 64, 0, 3);
    LoaderOptions o = base_options(8);
    const auto ref = masked_rows(data, o, 1, 0);
    ASSERT_EQ(ref.size(), 64u);

    // Different batch size, rank split, order (no shuffle), padding: same masks.
    LoaderOptions ordered = base_options(3, 1, 2);
    ordered.shuffle = false;
    ordered.pad_to_multiple_of = 16;
    std::map<int64_t, Row> merged;
    for (int64_t r = 0; r < 2; ++r) {
        LoaderOptions rank = ordered;
        rank.dp_rank = r;
        for (auto& [fi, row] : masked_rows(data, rank, 1, 0)) merged[fi] = row;
    }
    EXPECT_EQ(merged, ref);

    // Another epoch draws other masks (for the same sample), reproducibly.
    const auto e1 = masked_rows(data, o, 2, 1);
    int differ = 0;
    for (const auto& [fi, row] : e1) differ += row.labels != ref.at(fi).labels;
    EXPECT_GT(differ, 32);
    EXPECT_EQ(masked_rows(data, o, 2, 1), e1);

    // And another seed too.
    LoaderOptions seeded = o;
    seeded.seed = 7;
    const auto s7 = masked_rows(data, seeded, 1, 0);
    differ = 0;
    for (const auto& [fi, row] : s7) differ += row.labels != ref.at(fi).labels;
    EXPECT_GT(differ, 32);
}

TEST(CollateMlm, ProbabilityExtremes) {
    auto data = synthetic_set(Task::masked_lm, 20, 12);
    for (double p : {0.0, 1.0}) {
        LoaderOptions o = base_options(4);
        o.mlm_probability = p;
        Loader loader(data, o);
        TokenBatch b;
        while (loader.next(b)) {
            const int64_t maskable = b.B * 10;  // 12 tokens, 2 special
            EXPECT_EQ(b.label_count, p == 0.0 ? 0 : maskable);
        }
    }
}

TEST(CollateMlm, RealBertFeaturesKeepSpecialTokens) {
    const Tokenizer& tok = bert_tokenizer();
    std::vector<Record> recs;
    for (int i = 0; i < 40; ++i)
        recs.push_back(text_record("Sentence number " + std::to_string(i) +
                                   " talks about [MASK] tokens, commas, and the weather in Zürich."));
    FeaturizeOptions fo;
    fo.task = Task::masked_lm;
    fo.max_seq_length = 32;
    auto data = std::make_shared<FeatureSet>(featurize(recs, tok, fo));
    LoaderOptions o = base_options(8);
    o.mask_id = int64_t(*tok.token_to_id("[MASK]"));
    o.vocab_size = int64_t(tok.vocab_size());
    o.special_ids.clear();
    for (const char* s : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}) o.special_ids.push_back(*tok.token_to_id(s));
    o.mlm_probability = 0.5;
    Loader loader(data, o);
    TokenBatch b;
    int64_t labelled = 0;
    while (loader.next(b)) {
        for (int64_t r = 0; r < b.B; ++r) {
            const Feature& f = data->features[size_t(b.feature_index[size_t(r)])];
            for (size_t t = 0; t < f.ids.size(); ++t) {
                const bool special =
                    std::find(o.special_ids.begin(), o.special_ids.end(), f.ids[t]) != o.special_ids.end();
                if (special) {
                    EXPECT_EQ(b.labels[size_t(r * b.T) + t], -100) << "token " << f.ids[t];
                }
                labelled += b.labels[size_t(r * b.T) + t] != -100;
            }
        }
    }
    EXPECT_GT(labelled, 0);
    EXPECT_EQ(data->features[0].ids.front(), 101);
}

}  // namespace
}  // namespace loom::test
