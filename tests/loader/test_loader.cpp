// Loader: the same samples (and masks) under any split of a global batch
// across ranks, order per epoch reproducible from the seed, exact resume
// with seek(), padding and labels per task, the global label count of a step,
// and a producer thread that stops cleanly.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "core/check.h"
#include "loader_fixture.h"
#include "loader_test_util.h"

namespace loom::test {
namespace {

// Rows of every global batch of two epochs, ranks concatenated in order.
std::vector<std::vector<std::vector<Row>>> global_rows(std::shared_ptr<const FeatureSet> data, int64_t B,
                                                       int64_t dp, LoaderOptions base = base_options(1)) {
    std::vector<std::vector<std::vector<TokenBatch>>> per_rank;
    for (int64_t r = 0; r < dp; ++r) {
        LoaderOptions o = base;
        o.batch_size = B;
        o.dp_rank = r;
        o.dp_size = dp;
        Loader loader(data, o);
        per_rank.push_back(drain(loader, 2));
    }
    std::vector<std::vector<std::vector<Row>>> out(2);
    for (size_t e = 0; e < 2; ++e) {
        const size_t n_batches = per_rank[0][e].size();
        for (int64_t r = 1; r < dp; ++r) EXPECT_EQ(per_rank[size_t(r)][e].size(), n_batches) << "rank " << r;
        for (size_t k = 0; k < n_batches; ++k) {
            std::vector<Row> rows;
            for (int64_t r = 0; r < dp; ++r) {
                const TokenBatch& b = per_rank[size_t(r)][e][k];
                EXPECT_EQ(b.epoch, int64_t(e));
                auto part = rows_of(b, *data);
                rows.insert(rows.end(), part.begin(), part.end());
            }
            out[e].push_back(std::move(rows));
        }
    }
    return out;
}

class LoaderSplits : public ::testing::TestWithParam<Task> {};

TEST_P(LoaderSplits, SameSamplesAndMasksForAnySplitOfTheGlobalBatch) {
    // 37 rows: nine full global batches of 4 and a last one of a single row.
    auto data = synthetic_set(GetParam(), 37);
    const auto one = global_rows(data, 4, 1);
    const auto two = global_rows(data, 2, 2);
    const auto four = global_rows(data, 1, 4);
    ASSERT_EQ(one[0].size(), 10u);
    EXPECT_EQ(one, two);
    EXPECT_EQ(one, four);
    EXPECT_EQ(one[0].back().size(), 1u);  // the short batch is there, whole
    // Rows sit at consecutive positions of the epoch order.
    int64_t pos = 0;
    for (const auto& batch : one[0])
        for (const auto& row : batch) EXPECT_EQ(row.position, pos++);
}

INSTANTIATE_TEST_SUITE_P(Tasks, LoaderSplits,
                         ::testing::Values(Task::masked_lm, Task::causal_lm, Task::sequence_classification,
                                           Task::question_answering),
                         [](const auto& param_info) {
                             std::string s(task_name(param_info.param));
                             std::replace(s.begin(), s.end(), '-', '_');
                             return s;
                         });

TEST(Loader, ShortLastBatchIsSplitEvenlyAndEveryRankGetsABatch) {
    auto data = synthetic_set(Task::causal_lm, 11);  // global batch 8: 8 + 3
    std::vector<int64_t> last_sizes;
    for (int64_t r = 0; r < 4; ++r) {
        LoaderOptions o = base_options(2, r, 4);
        Loader loader(data, o);
        EXPECT_EQ(loader.batches_per_epoch(), 2);
        auto epochs = drain(loader, 1);
        ASSERT_EQ(epochs[0].size(), 2u);
        EXPECT_EQ(epochs[0][0].B, 2);
        const TokenBatch& last = epochs[0][1];
        last_sizes.push_back(last.B);
        if (last.B == 0) {
            EXPECT_EQ(last.T, 0);
            EXPECT_TRUE(last.input_ids.empty());
            EXPECT_EQ(last.label_count, 0);
        }
        EXPECT_EQ(last.first_global_sample, 8 + r * 3 / 4);
    }
    // rank r takes [r*3/4, (r+1)*3/4): 0, 1, 1, 1 rows.
    EXPECT_EQ(last_sizes, (std::vector<int64_t>{0, 1, 1, 1}));

    LoaderOptions o = base_options(2, 0, 4);
    o.drop_last = true;
    Loader dropping(data, o);
    EXPECT_EQ(dropping.batches_per_epoch(), 1);
    EXPECT_EQ(drain(dropping, 1)[0].size(), 1u);
}

std::vector<int64_t> epoch_features(const std::vector<TokenBatch>& epoch) {
    std::vector<int64_t> f;
    for (const auto& b : epoch) f.insert(f.end(), b.feature_index.begin(), b.feature_index.end());
    return f;
}

TEST(Loader, OrderIsAPermutationPerEpochReproducibleFromTheSeed) {
    auto data = synthetic_set(Task::sequence_classification, 50);
    Loader a(data, base_options(8));
    Loader b(data, base_options(8));
    const auto ea = drain(a, 3), eb = drain(b, 3);
    std::vector<int64_t> identity(50);
    for (int64_t i = 0; i < 50; ++i) identity[size_t(i)] = i;
    for (size_t e = 0; e < 3; ++e) {
        auto fa = epoch_features(ea[e]);
        EXPECT_EQ(fa, epoch_features(eb[e]));
        EXPECT_NE(fa, identity);
        std::sort(fa.begin(), fa.end());
        EXPECT_EQ(fa, identity) << "epoch " << e << " is not a permutation";
    }
    EXPECT_NE(epoch_features(ea[0]), epoch_features(ea[1]));
    EXPECT_NE(epoch_features(ea[1]), epoch_features(ea[2]));

    LoaderOptions other = base_options(8);
    other.seed = 99;
    Loader c(data, other);
    EXPECT_NE(epoch_features(drain(c, 1)[0]), epoch_features(ea[0]));

    LoaderOptions ordered = base_options(8);
    ordered.shuffle = false;
    Loader d(data, ordered);
    const auto ed = drain(d, 2);
    EXPECT_EQ(epoch_features(ed[0]), identity);
    EXPECT_EQ(epoch_features(ed[1]), identity);
    EXPECT_EQ(*d.epoch_order(5), identity);
}

TEST(Loader, SeekResumesWithExactlyTheUninterruptedBatches) {
    auto data = synthetic_set(Task::masked_lm, 23);
    LoaderOptions o = base_options(2, 1, 2);
    o.prefetch = 3;
    Loader full(data, o);
    const int64_t bpe = full.batches_per_epoch();
    ASSERT_EQ(bpe, 6);
    // The uninterrupted stream with the position before each batch.
    std::vector<std::pair<LoaderPosition, std::vector<Row>>> stream;
    for (int e = 0; e < 3; ++e) {
        TokenBatch b;
        for (;;) {
            const LoaderPosition p = full.position();
            if (!full.next(b)) break;
            stream.push_back({p, rows_of(b, *data)});
        }
        EXPECT_EQ(full.position().epoch, e + 1);
        EXPECT_EQ(full.position().batches, 0);
    }
    ASSERT_EQ(stream.size(), size_t(3 * bpe));

    Loader resumed(data, o);
    TokenBatch first;
    ASSERT_TRUE(resumed.next(first));  // a running producer that seek() must stop
    for (size_t start : {size_t(0), size_t(4), size_t(6), size_t(11), size_t(13)}) {
        resumed.seek(stream[start].first);
        EXPECT_EQ(resumed.position().epoch, stream[start].first.epoch);
        for (size_t i = start; i < std::min(stream.size(), start + 8); ++i) {
            TokenBatch b;
            if (stream[i].first.batches == 0 && i > start) {
                ASSERT_FALSE(resumed.next(b));  // the epoch boundary comes at the same place
            }
            ASSERT_TRUE(resumed.next(b)) << "from " << start << " at " << i;
            EXPECT_EQ(rows_of(b, *data), stream[i].second) << "from " << start << " at " << i;
        }
    }
    // Resuming at the end of an epoch gives its end, then the next epoch.
    resumed.seek({1, bpe});
    TokenBatch b;
    EXPECT_FALSE(resumed.next(b));
    EXPECT_EQ(resumed.position().epoch, 2);
    ASSERT_TRUE(resumed.next(b));
    EXPECT_EQ(rows_of(b, *data), stream[size_t(2 * bpe)].second);

    expect_error([&] { resumed.seek({0, bpe + 1}); }, {"batch 7", "6 batches"});
}

TEST(Loader, PaddingMasksTypesAndLabelsPerTask) {
    for (Task task : {Task::causal_lm, Task::sequence_classification, Task::question_answering}) {
        SCOPED_TRACE(std::string(task_name(task)));
        auto data = synthetic_set(task, 20);
        LoaderOptions o = base_options(5);
        o.pad_id = 7;
        o.pad_to_multiple_of = 8;
        Loader loader(data, o);
        const auto epochs = drain(loader, 1);
        for (const TokenBatch& b : epochs[0]) {
            int64_t longest = 0, labelled = 0;
            for (int64_t r = 0; r < b.B; ++r) {
                const Feature& f = data->features[size_t(b.feature_index[size_t(r)])];
                const int64_t L = int64_t(f.ids.size());
                longest = std::max(longest, L);
                for (int64_t t = 0; t < b.T; ++t) {
                    const size_t k = size_t(r * b.T + t);
                    EXPECT_EQ(b.input_ids[k], t < L ? f.ids[size_t(t)] : 7);
                    EXPECT_EQ(b.attention_mask[k], t < L ? 1 : 0);
                    EXPECT_EQ(b.token_type_ids[k], t < L ? f.type_ids[size_t(t)] : 0);
                    if (task == Task::causal_lm) {
                        EXPECT_EQ(b.labels[k], t < L ? f.ids[size_t(t)] : -100);
                    }
                }
                if (task == Task::causal_lm) labelled += L - 1;
                if (task == Task::sequence_classification) {
                    EXPECT_EQ(b.labels[size_t(r)], f.label);
                    ++labelled;
                }
                if (task == Task::question_answering) {
                    EXPECT_EQ(b.start_positions[size_t(r)], f.start_position);
                    EXPECT_EQ(b.end_positions[size_t(r)], f.end_position);
                    labelled += 2;
                }
            }
            EXPECT_EQ(b.T, (longest + 7) / 8 * 8);
            EXPECT_EQ(b.label_count, labelled);
            const ModelInputs in = b.inputs();
            EXPECT_EQ(in.B, b.B);
            EXPECT_EQ(in.T, b.T);
            EXPECT_EQ(in.labels != nullptr, task != Task::question_answering);
            EXPECT_EQ(in.start_positions != nullptr, task == Task::question_answering);
        }
    }
}

// Packed documents: each row's position ids come through (padding a document
// of its own, 0, 1, ...), and a batch without them has none.
TEST(Loader, PositionIdsOfPackedDocuments) {
    auto set = std::make_shared<FeatureSet>();
    set->task = Task::causal_lm;
    Feature a, b;
    a.ids = a.type_ids = {5, 6, 7, 8};
    a.labels = {-100, 6, -100, 8};
    a.position_ids = {0, 1, 0, 1};
    b.ids = b.type_ids = {9, 10};
    b.labels = {-100, 10};
    b.position_ids = {0, 1};
    set->features = {a, b};
    LoaderOptions o = base_options(2);
    o.shuffle = false;
    Loader loader(set, o);
    TokenBatch batch;
    ASSERT_TRUE(loader.next(batch));
    ASSERT_EQ(batch.T, 4);
    EXPECT_EQ(batch.position_ids, (std::vector<int64_t>{0, 1, 0, 1, /**/ 0, 1, 0, 1}));
    EXPECT_EQ(batch.inputs().position_ids, batch.position_ids.data());
    EXPECT_EQ(batch.label_count, 3);
    auto plain = synthetic_set(Task::causal_lm, 4);
    Loader plain_loader(plain, base_options(2));
    ASSERT_TRUE(plain_loader.next(batch));
    EXPECT_TRUE(batch.position_ids.empty());
    EXPECT_EQ(batch.inputs().position_ids, nullptr);
}

TEST(Loader, PadSpanGivesOneLengthPerStepWhateverTheSplit) {
    auto data = synthetic_set(Task::causal_lm, 40);
    // A step = 2 micro-batches of 8 rows globally: (B=4, dp=2, span 2) vs (B=8, dp=1, span 2)
    // vs (B=2, dp=4, span 2) must give the same T for the same rows.
    auto lengths = [&](int64_t B, int64_t dp) {
        std::vector<std::vector<int64_t>> T(static_cast<size_t>(dp));
        for (int64_t r = 0; r < dp; ++r) {
            LoaderOptions o = base_options(B, r, dp);
            o.pad_span_batches = 2;
            Loader loader(data, o);
            const auto epochs = drain(loader, 1);
            for (const auto& b : epochs[0]) T[size_t(r)].push_back(b.T);
        }
        for (int64_t r = 1; r < dp; ++r) EXPECT_EQ(T[size_t(r)], T[0]);
        return T[0];
    };
    const auto t8 = lengths(8, 1), t4 = lengths(4, 2), t2 = lengths(2, 4);
    EXPECT_EQ(t8, t4);
    EXPECT_EQ(t8, t2);
    ASSERT_EQ(t8.size(), 5u);
    EXPECT_EQ(t8[0], t8[1]);  // one step
    EXPECT_EQ(t8[2], t8[3]);
}

TEST(Loader, GlobalLabelCountIsTheSumOverRanksAndMicroBatches) {
    for (Task task : {Task::masked_lm, Task::causal_lm, Task::question_answering}) {
        SCOPED_TRACE(std::string(task_name(task)));
        auto data = synthetic_set(task, 30, 0, 5);
        const int64_t dp = 3, B = 2, steps_of = 2;
        std::vector<std::vector<TokenBatch>> ranks;
        for (int64_t r = 0; r < dp; ++r) {
            Loader loader(data, base_options(B, r, dp));
            ranks.push_back(drain(loader, 1)[0]);
        }
        Loader probe(data, base_options(B, 0, dp));
        const int64_t bpe = probe.batches_per_epoch();
        for (int64_t k = 0; k < bpe; k += steps_of) {
            int64_t sum = 0;
            for (int64_t r = 0; r < dp; ++r)
                for (int64_t j = k; j < std::min(bpe, k + steps_of); ++j) sum += ranks[size_t(r)][size_t(j)].label_count;
            EXPECT_EQ(probe.global_label_count({0, k}, steps_of), sum) << "step at batch " << k;
            EXPECT_GT(sum, 0);
        }
        EXPECT_EQ(probe.global_label_count({0, bpe - 1}, 100), probe.global_label_count({0, bpe - 1}, 1));
    }
}

TEST(Loader, DestructorStopsARunningProducer) {
    auto data = synthetic_set(Task::masked_lm, 4000, 64);
    for (int prefetch : {1, 2, 8}) {
        LoaderOptions o = base_options(4);
        o.prefetch = prefetch;
        auto t0 = std::chrono::steady_clock::now();
        {
            Loader loader(data, o);
            TokenBatch b;
            ASSERT_TRUE(loader.next(b));
            // Give the producer time to fill the queue and block on it.
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        {
            Loader never_started(data, o);  // no thread at all
            EXPECT_EQ(never_started.position().batches, 0);
        }
        {
            Loader seeking(data, o);
            TokenBatch b;
            ASSERT_TRUE(seeking.next(b));
            seeking.seek({3, 5});
            ASSERT_TRUE(seeking.next(b));
            EXPECT_EQ(b.epoch, 3);
            EXPECT_EQ(seeking.position().batches, 6);
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_LT(s, 10.0);
    }
}

TEST(Loader, WaitSecondsCountsOnlyBlockedTime) {
    auto data = synthetic_set(Task::masked_lm, 64, 32);
    Loader loader(data, base_options(4));
    EXPECT_EQ(loader.wait_seconds(), 0.0);
    const auto t0 = std::chrono::steady_clock::now();
    auto epochs = drain(loader, 2);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(epochs[0].size(), 16u);
    EXPECT_GE(loader.wait_seconds(), 0.0);
    EXPECT_LE(loader.wait_seconds(), wall);
}

TEST(Loader, BadOptionsAreReported) {
    auto data = synthetic_set(Task::masked_lm, 5);
    expect_error([&] { Loader l(data, base_options(4, 2, 2)); }, {"dp_rank 2", "dp_size 2"});
    LoaderOptions o = base_options(4, 0, 2);
    o.drop_last = true;
    expect_error([&] { Loader l(data, o); }, {"5 features", "4 per device x 2 ranks"});
    LoaderOptions no_mask = base_options(4);
    no_mask.mask_id = -1;
    expect_error([&] { Loader l(data, no_mask); }, {"mask"});
    expect_error([&] { Loader l(std::make_shared<FeatureSet>(), base_options(4)); }, {"no features"});
}

}  // namespace
}  // namespace loom::test
