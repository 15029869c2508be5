// A tensor-parallel rank's slices of sharded rows: initialised, each rank
// draws only its own elements (keyed by global index) and gets exactly the
// slice of the 1-rank tensor; gathered for one rank, that rank alone gets the
// whole tensor.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "comm/comm_local.h"
#include "core/tensor.h"
#include "nn/param_table.h"
#include "nn/tp_shard.h"

namespace loom {
namespace {

struct RowSpec {
    std::string name;
    Shape shape;
    InitRule init;
    ShardSpec::Kind kind;
    int axis = 0;
    std::vector<int64_t> blocks;  // packed sizes along axis (split rows)
    int64_t zero_row = -1;
};

// Rows of every kind a model shards: a packed q|k|v split by rows, a
// row-parallel weight split by columns, a packed column-parallel bias, a
// vocabulary table whose size no tp divides (padded rows) with a zeroed
// padding row, and the other init rules on split rows.
std::vector<RowSpec> row_specs() {
    using K = ShardSpec::Kind;
    return {
        {"qkv.weight", Shape{3 * 24, 16}, InitRule::normal, K::split, 0, {24, 24, 24}, -1},
        {"qkv.bias", Shape{3 * 24}, InitRule::normal, K::split, 0, {24, 24, 24}, -1},
        {"proj.weight", Shape{16, 24}, InitRule::kaiming_uniform, K::split, 1, {}, -1},
        {"word_embeddings.weight", Shape{37, 16}, InitRule::normal, K::vocab, 0, {}, 3},
        {"decoder.bias", Shape{37}, InitRule::normal, K::vocab, 0, {}, -1},
        {"table.weight", Shape{24, 16}, InitRule::sinusoidal, K::split, 1, {}, -1},
    };
}

// A table of the rows, whole (tp_size 1) or as rank tp_rank's slices.
ParamTable make_table(int tp_size, int tp_rank) {
    ParamTable t;
    for (const RowSpec& s : row_specs()) {
        ParamRow r;
        r.name = s.name;
        r.shape = s.shape;
        r.init = s.init;
        r.init_std = 0.5;
        r.zero_row = s.zero_row;
        if (s.kind == ShardSpec::Kind::split) {
            r.shard.kind = ShardSpec::Kind::split;
            r.shard.axis = s.axis;
        }
        const int i = t.add(r);
        if (tp_size == 1) continue;
        if (s.kind == ShardSpec::Kind::vocab)
            t.shard_vocab_row(i, tp_size, tp_rank);
        else
            t.shard_row(i, tp_size, tp_rank, s.blocks.empty() ? 1 : int(s.blocks.size()));
    }
    t.allocate();
    return t;
}

TEST(TpInit, EachRankDrawsExactlyItsSliceOfTheWholeRow) {
    ParamTable whole = make_table(1, 0);
    whole.init_all(11);
    for (int tp : {2, 4, 8}) {
        for (int rank = 0; rank < tp; ++rank) {
            SCOPED_TRACE("tp " + std::to_string(tp) + " rank " + std::to_string(rank));
            ParamTable t = make_table(tp, rank);
            t.init_all(11);
            for (int i = 0; i < t.size(); ++i) {
                const ParamRow& r = t.row(i);
                ASSERT_TRUE(r.shard.sharded()) << r.name;
                const Tensor want = tp_shard_row_tensor(r.shard, whole.param_tensor(i));
                ASSERT_EQ(want.numel(), r.numel()) << r.name;
                EXPECT_EQ(std::memcmp(want.raw(), t.param(i), size_t(r.numel()) * sizeof(float)), 0)
                    << r.name << ": the slice differs from the whole row's";
            }
        }
    }
}

int64_t status_kib(const char* key) {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::strlen(key)));
    return -1;
}

// A tp rank never holds the whole row while initialising its slice: with
// BERT-large's word table (125 MB) on each of 8 tp ranks, the whole tensor
// drawn per rank stayed resident in the allocator (docs/cost-model.md).
TEST(TpInit, ARankNeverHoldsTheWholeRow) {
    const int64_t V = 1 << 16, C = 512;  // 128 MiB whole, 16 MiB a slice at tp 8
    ParamTable t;
    ParamRow r;
    r.name = "word_embeddings.weight";
    r.shape = Shape{V, C};
    const int i = t.add(r);
    t.shard_vocab_row(i, 8, 3);
    t.allocate();
    // Reset the peak resident set to the current one (Linux: clear_refs 5).
    std::ofstream("/proc/self/clear_refs") << "5";
    const int64_t before = status_kib("VmRSS:"), reset = status_kib("VmHWM:");
    if (before < 0 || reset < 0 || reset > before + 4096)
        GTEST_SKIP() << "this kernel does not report or reset the peak resident set";
    t.init_all(1);
    const int64_t grown_mib = (status_kib("VmHWM:") - before) / 1024;
    // The slice's own pages (16 MiB, untouched by allocate only where the
    // allocator did not zero them) at most; the whole row would be 128 MiB.
    EXPECT_LT(grown_mib, 40) << "initialising a tp slice grew the peak by " << grown_mib << " MiB";
}

// Checkpoints and the export: the slices go to one rank, which alone holds
// the whole row (the other ranks send theirs and return nothing).
TEST(TpGather, OneRankGetsEveryKindOfRowWhole) {
    ParamTable whole = make_table(1, 0);
    whole.init_all(11);
    for (int tp : {2, 4}) {
        for (int root : {0, tp - 1}) {
            SCOPED_TRACE("tp " + std::to_string(tp) + " root " + std::to_string(root));
            std::vector<std::vector<Tensor>> got(static_cast<size_t>(tp));
            comm_local_run(tp, [&](Communicator& c) {
                ParamTable t = make_table(tp, c.rank());
                t.init_all(11);
                for (int i = 0; i < t.size(); ++i)
                    got[size_t(c.rank())].push_back(
                        tp_gather_row_tensor(t.row(i).shard, t.param_tensor(i), c, root));
            });
            for (int r = 0; r < tp; ++r)
                for (int i = 0; i < whole.size(); ++i) {
                    const Tensor& g = got[size_t(r)][size_t(i)];
                    if (r != root) {
                        EXPECT_FALSE(g.defined()) << "rank " << r << " kept " << whole.row(i).name;
                        continue;
                    }
                    ASSERT_EQ(g.shape, whole.row(i).shape) << whole.row(i).name;
                    EXPECT_EQ(std::memcmp(g.raw(), whole.param(i), g.nbytes()), 0)
                        << whole.row(i).name << " differs from the whole row";
                }
        }
    }
}

// A slice of the wrong size is refused, naming the row, before anything is
// sent (the root would otherwise receive it at its own size).
TEST(TpGather, ASliceOfAnotherSizeIsRefused) {
    std::vector<std::string> errors(2);
    comm_local_run(2, [&](Communicator& c) {
        ParamTable t = make_table(2, c.rank());
        const ParamRow& r = t.row(0);
        ASSERT_TRUE(r.shard.sharded()) << r.name;
        Shape wrong = r.shape;
        wrong.dims[0] += 1;
        try {
            tp_gather_row_tensor(r.shard, Tensor::empty(DType::f32, wrong, r.name), c, 0);
        } catch (const Error& e) {
            errors[size_t(c.rank())] = e.what();
        }
    });
    for (const std::string& e : errors)
        EXPECT_NE(e.find("is not this rank's f32 slice"), std::string::npos) << e;
}

}  // namespace
}  // namespace loom
