// Tensor-parallel regions and layers against the unsharded ops, on CommLocal
// threads for tp in {1, 2, 4}.
//
// Each test draws global tensors from a fixed seed, runs the plain op
// (matmul, embedding, softmax_xent) once as the reference, then on every rank
// shards the inputs and weights, runs the tp version, and joins the rank's
// outputs and gradients back (gather_from_tp, tp_assemble) to compare with the
// reference: float results within 1e-5 of the tensor's largest magnitude,
// exact where the tp path only moves data or sums exact values. Gradient
// buffers start non-zero so the += rule is checked too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "comm/comm_local.h"
#include "comm/tp_regions.h"
#include "comm/tp_vocab.h"
#include "core/check.h"
#include "core/tensor.h"
#include "nn/embedding.h"
#include "nn/param_table.h"
#include "nn/vocab_xent.h"
#include "ops/device_ops.h"
#include "ops/embedding.h"
#include "ops/matmul.h"
#include "ops/softmax_xent.h"
#include "parallel/tp_layers.h"

namespace loom {
namespace {

constexpr double k_rel = 1e-5;
const int k_tp_sizes[] = {1, 2, 4};

// Uniform in [-scale, scale), the same on every platform (no std distributions).
std::vector<float> random_floats(int64_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 g(seed);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = scale * (float(g() >> 8) / 8388608.0f - 1.0f);
    return v;
}

// got vs want within rel * max|want| per element (rel = 0: bitwise). Reports
// the worst difference and the first mismatching index, as llm.c's check_tensor.
void expect_close(std::span<const float> got, std::span<const float> want, double rel,
                  const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double scale = 0;
    for (float w : want) scale = std::max(scale, double(std::fabs(w)));
    const double tol = rel * scale;
    double worst = 0;
    int64_t first_bad = -1, bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double d = std::fabs(double(got[i]) - double(want[i]));
        if (!(d <= tol)) {  // NaN counts as a mismatch
            if (first_bad < 0) first_bad = int64_t(i);
            ++bad;
        }
        worst = std::max(worst, d);
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size()
                      << " elements differ; first at " << first_bad << " (got "
                      << (first_bad >= 0 ? got[size_t(first_bad)] : 0.f) << " want "
                      << (first_bad >= 0 ? want[size_t(first_bad)] : 0.f) << "), max abs diff "
                      << worst << ", tolerance " << tol;
}

// comm_local_run with a short timeout that throws: a test whose ranks fall out
// of step fails in seconds instead of aborting the binary after 300 s.
void run_tp(int tp_size, const std::function<void(Communicator&)>& fn) {
    CommOptions o;
    o.timeout_s = 30.0;
    o.on_timeout = TimeoutAction::throw_error;
    comm_local_run(tp_size, fn, o);
}

std::string where(const Communicator& tp, const std::string& what) {
    return what + " (tp " + std::to_string(tp.size()) + " rank " + std::to_string(tp.rank()) + ")";
}

const char* layout_name(WeightLayout l) {
    return l == WeightLayout::out_in ? "out_in" : "in_out";
}

// ---------------------------------------------------------------------------
// Regions

TEST(TpRegions, CopyAndReduceAreConjugate) {
    constexpr int64_t n = 37;
    for (int tp_size : k_tp_sizes) {
        run_tp(tp_size, [&](Communicator& tp) {
            // Multiples of 1/64: sums over ranks are exact in any order.
            auto value = [](int r, int64_t i) { return float((i * 5 + r * 11) % 23 - 11) / 64.f; };
            std::vector<float> x(n), y(n), want_sum(n, 0.f);
            for (int64_t i = 0; i < n; ++i) {
                x[size_t(i)] = value(tp.rank(), i);
                for (int r = 0; r < tp.size(); ++r) want_sum[size_t(i)] += value(r, i);
            }
            // f fwd: identity; f bwd: sum over ranks.
            copy_to_tp_forward(y.data(), x.data(), n, tp);
            expect_close(y, x, 0, where(tp, "copy_to_tp fwd"));
            copy_to_tp_backward(y.data(), x.data(), n, tp);
            expect_close(y, want_sum, 0, where(tp, "copy_to_tp bwd"));
            // g fwd: sum over ranks (in place); g bwd: identity.
            std::vector<float> z = x;
            reduce_from_tp_forward(z.data(), z.data(), n, tp);
            expect_close(z, want_sum, 0, where(tp, "reduce_from_tp fwd"));
            reduce_from_tp_backward(y.data(), x.data(), n, tp);
            expect_close(y, x, 0, where(tp, "reduce_from_tp bwd"));
        });
    }
}

TEST(TpRegions, GatherAndScatterSplitTheLastDim) {
    constexpr int64_t N = 5, D = 12;
    const std::vector<float> full = random_floats(N * D, 11);
    for (int tp_size : k_tp_sizes) {
        run_tp(tp_size, [&](Communicator& tp) {
            const int64_t Dl = D / tp.size();
            std::vector<float> want_local(size_t(N * Dl));
            for (int64_t n = 0; n < N; ++n)
                for (int64_t j = 0; j < Dl; ++j)
                    want_local[size_t(n * Dl + j)] = full[size_t(n * D + tp.rank() * Dl + j)];
            std::vector<float> local(size_t(N * Dl)), joined(size_t(N * D));
            scatter_to_tp_forward(local.data(), full.data(), N, D, tp);
            expect_close(local, want_local, 0, where(tp, "scatter fwd"));
            gather_from_tp_forward(joined.data(), local.data(), N, D, tp);
            expect_close(joined, full, 0, where(tp, "gather fwd"));
            // The backward of each is the forward of the other.
            std::fill(local.begin(), local.end(), 0.f);
            gather_from_tp_backward(local.data(), full.data(), N, D, tp);
            expect_close(local, want_local, 0, where(tp, "gather bwd"));
            std::fill(joined.begin(), joined.end(), 0.f);
            scatter_to_tp_backward(joined.data(), want_local.data(), N, D, tp);
            expect_close(joined, full, 0, where(tp, "scatter bwd"));
        });
    }
}

TEST(TpRegions, LastDimNotAMultipleOfTpIsAnError) {
    std::vector<float> in(3 * 6), out(3 * 6);
    EXPECT_THROW(
        run_tp(4,
               [&](Communicator& tp) { scatter_to_tp_forward(out.data(), in.data(), 3, 6, tp); }),
        Error);
}

// ---------------------------------------------------------------------------
// Shard maps

TEST(TpSplit, WeightSplitDimFollowsRoleAndLayout) {
    EXPECT_EQ(tp_weight_split_dim(TpRole::column, WeightLayout::out_in), 0);
    EXPECT_EQ(tp_weight_split_dim(TpRole::column, WeightLayout::in_out), 1);
    EXPECT_EQ(tp_weight_split_dim(TpRole::row, WeightLayout::out_in), 1);
    EXPECT_EQ(tp_weight_split_dim(TpRole::row, WeightLayout::in_out), 0);
    EXPECT_THROW(tp_weight_split_dim(TpRole::none, WeightLayout::out_in), Error);

    const TpSplit w =
        tp_linear_weight_split(TpRole::column, WeightLayout::in_out, 8, 24, {8, 8, 8});
    EXPECT_EQ(w.local_rows(4), 8);
    EXPECT_EQ(w.local_cols(4), 6);
    EXPECT_NO_THROW(w.check(4));
    EXPECT_THROW(w.check(3), Error);  // blocks of 8 do not split in 3
    EXPECT_THROW(tp_linear_weight_split(TpRole::row, WeightLayout::out_in, 8, 24, {8, 16}), Error);
    EXPECT_THROW((TpSplit{24, 8, 0, {8, 8}}).check(2), Error);  // blocks sum to 16, not 24
}

// Element (i, j) of rank r's local matrix, recomputed from the definition.
float expected_local(const std::vector<float>& global, const TpSplit& s, int tp_size, int r,
                     int64_t i, int64_t j) {
    const int64_t len = s.dim == 0 ? s.rows : s.cols;
    std::vector<int64_t> blocks = s.blocks.empty() ? std::vector<int64_t>{len} : s.blocks;
    int64_t k = s.dim == 0 ? i : j;  // local index along the split dim
    int64_t g = 0;
    for (int64_t b : blocks) {
        if (k < b / tp_size) {
            g += r * (b / tp_size) + k;
            break;
        }
        k -= b / tp_size;
        g += b;
    }
    return s.dim == 0 ? global[size_t(g * s.cols + j)] : global[size_t(i * s.cols + g)];
}

void check_shard_round_trip(const TpSplit& s, uint32_t seed, const std::string& what) {
    const std::vector<float> global = random_floats(s.rows * s.cols, seed);
    for (int tp_size : k_tp_sizes) {
        run_tp(tp_size, [&](Communicator& tp) {
            const int64_t lr = s.local_rows(tp.size()), lc = s.local_cols(tp.size());
            std::vector<float> local(size_t(lr * lc));
            tp_shard_for_rank(local.data(), global.data(), s, tp.size(), tp.rank());
            std::vector<float> want(local.size());
            for (int64_t i = 0; i < lr; ++i)
                for (int64_t j = 0; j < lc; ++j)
                    want[size_t(i * lc + j)] =
                        expected_local(global, s, tp.size(), tp.rank(), i, j);
            expect_close(local, want, 0, where(tp, what + " shard"));
            std::vector<float> back(global.size(), -7.f);
            tp_assemble(back.data(), local.data(), s, tp);
            expect_close(back, global, 0, where(tp, what + " assemble"));
        });
    }
}

TEST(TpShard, ShardThenAssembleIsIdentityForEveryLinearLayout) {
    constexpr int64_t C = 12, OC = 20;
    uint32_t seed = 100;
    for (TpRole role : {TpRole::column, TpRole::row}) {
        for (WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
            const std::string what =
                std::string(role == TpRole::column ? "column " : "row ") + layout_name(layout);
            check_shard_round_trip(tp_linear_weight_split(role, layout, C, OC), ++seed,
                                   what + " weight");
        }
    }
    check_shard_round_trip(tp_linear_bias_split(OC), ++seed, "column bias");
}

TEST(TpShard, FusedQkvRoundTripsAndHoldsEachBlocksHeads) {
    constexpr int64_t NH = 4, HS = 3, C = NH * HS;
    check_shard_round_trip(
        tp_linear_weight_split(TpRole::column, WeightLayout::out_in, C, 3 * C, {C, C, C}), 201,
        "qkv out_in weight");
    check_shard_round_trip(
        tp_linear_weight_split(TpRole::column, WeightLayout::in_out, C, 3 * C, {C, C, C}), 202,
        "qkv in_out weight");
    check_shard_round_trip(tp_linear_bias_split(3 * C, {C, C, C}), 203, "qkv bias");

    // The local (3C/tp, C) weight is q rows of heads [r*NH/tp, ...), then k's, then v's.
    const std::vector<float> w = random_floats(3 * C * C, 204);
    const TpSplit s =
        tp_linear_weight_split(TpRole::column, WeightLayout::out_in, C, 3 * C, {C, C, C});
    for (int tp_size : {2, 4}) {
        const int64_t heads = NH / tp_size, rows = heads * HS;
        for (int r = 0; r < tp_size; ++r) {
            std::vector<float> local(size_t(3 * rows * C));
            tp_shard_for_rank(local.data(), w.data(), s, tp_size, r);
            for (int64_t b = 0; b < 3; ++b) {
                const int64_t global_row0 = b * C + r * heads * HS;
                for (int64_t i = 0; i < rows * C; ++i)
                    ASSERT_EQ(local[size_t(b * rows * C + i)], w[size_t(global_row0 * C + i)])
                        << "tp " << tp_size << " rank " << r << " block " << b << " elem " << i;
            }
        }
    }
}

TEST(TpShard, TensorFormsShapeAndRoundTrip) {
    constexpr int64_t C = 8, OC = 12;
    const TpSplit ws = tp_linear_weight_split(TpRole::column, WeightLayout::in_out, C, OC);
    const TpSplit bs = tp_linear_bias_split(OC);
    Tensor w = Tensor::empty(DType::f32, Shape{C, OC}, "h.0.mlp.c_fc.weight");
    Tensor b = Tensor::empty(DType::f64, Shape{OC}, "h.0.mlp.c_fc.bias");
    const auto vals = random_floats(C * OC, 250);
    std::copy(vals.begin(), vals.end(), w.data<float>());
    for (int64_t i = 0; i < OC; ++i) b.data<double>()[i] = double(vals[size_t(i)]);
    run_tp(4, [&](Communicator& tp) {
        const Tensor lw = tp_shard_tensor(w, ws, tp.size(), tp.rank());
        const Tensor lb = tp_shard_tensor(b, bs, tp.size(), tp.rank());
        EXPECT_EQ(lw.shape, (Shape{C, OC / 4}));
        EXPECT_EQ(lb.shape, (Shape{OC / 4}));
        EXPECT_EQ(lw.name, w.name);
        EXPECT_EQ(lb.data<double>()[0], b.data<double>()[tp.rank() * OC / 4]);
        const Tensor gw = tp_assemble_tensor(lw, ws, tp);
        const Tensor gb = tp_assemble_tensor(lb, bs, tp);
        EXPECT_EQ(gw.shape, w.shape);
        EXPECT_TRUE(std::equal(gw.data<float>(), gw.data<float>() + gw.numel(), w.data<float>()));
        EXPECT_TRUE(
            std::equal(gb.data<double>(), gb.data<double>() + gb.numel(), b.data<double>()));
    });
    // A tensor whose shape is not the split's global shape.
    EXPECT_THROW(tp_shard_tensor(
                     w, tp_linear_weight_split(TpRole::column, WeightLayout::out_in, C, OC), 2, 0),
                 Error);
}

// ---------------------------------------------------------------------------
// Linear layers

struct LinearRef {
    std::vector<float> inp, weight, bias, dout;    // inputs
    std::vector<float> out, dinp, dweight, dbias;  // reference results
    std::vector<float> dweight0, dbias0;           // gradient buffers' starting values
};

LinearRef linear_reference(int64_t N, int64_t C, int64_t OC, WeightLayout layout, uint32_t seed) {
    LinearRef r;
    r.inp = random_floats(N * C, seed + 1);
    r.weight = random_floats(OC * C, seed + 2, 0.5f);
    r.bias = random_floats(OC, seed + 3);
    r.dout = random_floats(N * OC, seed + 4);
    r.dweight0 = random_floats(OC * C, seed + 5, 0.1f);
    r.dbias0 = random_floats(OC, seed + 6, 0.1f);
    r.out.resize(size_t(N * OC));
    r.dinp.resize(size_t(N * C));
    r.dweight = r.dweight0;
    r.dbias = r.dbias0;
    matmul_forward(r.out.data(), r.inp.data(), r.weight.data(), r.bias.data(), N, C, OC, layout);
    matmul_backward(r.dinp.data(), r.dweight.data(), r.dbias.data(), r.dout.data(), r.inp.data(),
                    r.weight.data(), N, C, OC, layout);
    return r;
}

void check_column_parallel(int64_t N, int64_t C, int64_t OC, WeightLayout layout,
                           std::vector<int64_t> blocks, uint32_t seed, const std::string& what) {
    const LinearRef ref = linear_reference(N, C, OC, layout, seed);
    const TpSplit ws = tp_linear_weight_split(TpRole::column, layout, C, OC, blocks);
    const TpSplit bs = tp_linear_bias_split(OC, blocks);
    // The (N, OC) activations split like the bias, column by column.
    const TpSplit as{N, OC, 1, blocks};
    for (int tp_size : k_tp_sizes) {
        run_tp(tp_size, [&](Communicator& tp) {
            const int t = tp.size(), r = tp.rank();
            const int64_t OCl = OC / t;
            std::vector<float> w(size_t(ws.local_numel(t))), b(static_cast<size_t>(OCl));
            std::vector<float> dw(w.size()), db(b.size()), dout(size_t(N * OCl));
            tp_shard_for_rank(w.data(), ref.weight.data(), ws, t, r);
            tp_shard_for_rank(b.data(), ref.bias.data(), bs, t, r);
            tp_shard_for_rank(dw.data(), ref.dweight0.data(), ws, t, r);
            tp_shard_for_rank(db.data(), ref.dbias0.data(), bs, t, r);
            tp_shard_for_rank(dout.data(), ref.dout.data(), as, t, r);

            std::vector<float> out(size_t(N * OCl)), dinp(size_t(N * C), 5.f);
            column_parallel_linear_forward(out.data(), ref.inp.data(), w.data(), b.data(), N, C, OC,
                                           layout, tp);
            column_parallel_linear_backward(dinp.data(), dw.data(), db.data(), dout.data(),
                                            ref.inp.data(), w.data(), N, C, OC, layout, tp);

            std::vector<float> g_out(ref.out.size()), g_dw(ref.dweight.size()),
                g_db(ref.dbias.size());
            tp_assemble(g_out.data(), out.data(), as, tp);
            tp_assemble(g_dw.data(), dw.data(), ws, tp);
            tp_assemble(g_db.data(), db.data(), bs, tp);
            expect_close(g_out, ref.out, k_rel, where(tp, what + " out"));
            expect_close(dinp, ref.dinp, k_rel, where(tp, what + " dinp"));
            expect_close(g_dw, ref.dweight, k_rel, where(tp, what + " dweight"));
            expect_close(g_db, ref.dbias, k_rel, where(tp, what + " dbias"));
        });
    }
}

TEST(TpColumnParallel, MatchesUnshardedLinear) {
    // C odd: only OC must divide by tp.
    for (WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out})
        check_column_parallel(7, 9, 20, layout, {}, 300,
                              std::string("column ") + layout_name(layout));
}

TEST(TpColumnParallel, FusedQkvMatchesUnshardedLinear) {
    constexpr int64_t C = 12;
    for (WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out})
        check_column_parallel(5, C, 3 * C, layout, {C, C, C}, 310,
                              std::string("qkv ") + layout_name(layout));
}

TEST(TpColumnParallel, FusedQkvGivesTheHeadSlicesOfTheFullGemm) {
    constexpr int64_t N = 5, NH = 4, HS = 3, C = NH * HS;
    for (WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
        const LinearRef ref = linear_reference(N, C, 3 * C, layout, 320);
        const TpSplit ws = tp_linear_weight_split(TpRole::column, layout, C, 3 * C, {C, C, C});
        const TpSplit bs = tp_linear_bias_split(3 * C, {C, C, C});
        for (int tp_size : k_tp_sizes) {
            run_tp(tp_size, [&](Communicator& tp) {
                const int t = tp.size(), r = tp.rank();
                const int64_t Cl = C / t;  // NH/tp heads of HS
                std::vector<float> w(size_t(ws.local_numel(t))), b(size_t(3 * Cl));
                tp_shard_for_rank(w.data(), ref.weight.data(), ws, t, r);
                tp_shard_for_rank(b.data(), ref.bias.data(), bs, t, r);
                std::vector<float> out(size_t(N * 3 * Cl));
                column_parallel_linear_forward(out.data(), ref.inp.data(), w.data(), b.data(), N, C,
                                               3 * C, layout, tp);
                // Local columns [b*Cl, (b+1)*Cl) are q/k/v (b) of heads [r*NH/tp, (r+1)*NH/tp).
                for (int64_t blk = 0; blk < 3; ++blk) {
                    std::vector<float> got, want;
                    for (int64_t n = 0; n < N; ++n) {
                        for (int64_t j = 0; j < Cl; ++j) {
                            got.push_back(out[size_t(n * 3 * Cl + blk * Cl + j)]);
                            want.push_back(ref.out[size_t(n * 3 * C + blk * C + r * Cl + j)]);
                        }
                    }
                    expect_close(got, want, k_rel,
                                 where(tp, std::string("qkv block ") + "qkv"[blk] + " " +
                                               layout_name(layout)));
                }
            });
        }
    }
}

TEST(TpRowParallel, MatchesUnshardedLinearWithBiasCountedOnce) {
    constexpr int64_t N = 7, C = 12, OC = 9;  // OC odd: only C must divide by tp
    for (WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
        const std::string what = std::string("row ") + layout_name(layout);
        const LinearRef ref = linear_reference(N, C, OC, layout, 400);
        const TpSplit ws = tp_linear_weight_split(TpRole::row, layout, C, OC);
        for (int tp_size : k_tp_sizes) {
            run_tp(tp_size, [&](Communicator& tp) {
                const int t = tp.size(), r = tp.rank();
                const int64_t Cl = C / t;
                std::vector<float> w(size_t(ws.local_numel(t))), dw(w.size());
                tp_shard_for_rank(w.data(), ref.weight.data(), ws, t, r);
                tp_shard_for_rank(dw.data(), ref.dweight0.data(), ws, t, r);
                std::vector<float> inp(size_t(N * Cl));
                scatter_to_tp_forward(inp.data(), ref.inp.data(), N, C, tp);
                std::vector<float> db = ref.dbias0;  // the bias is replicated

                std::vector<float> out(size_t(N * OC)), dinp(size_t(N * Cl), 5.f);
                row_parallel_linear_forward(out.data(), inp.data(), w.data(), ref.bias.data(), N, C,
                                            OC, layout, tp);
                row_parallel_linear_backward(dinp.data(), dw.data(), db.data(), ref.dout.data(),
                                             inp.data(), w.data(), N, C, OC, layout, tp);

                std::vector<float> g_dinp(ref.dinp.size()), g_dw(ref.dweight.size());
                gather_from_tp_forward(g_dinp.data(), dinp.data(), N, C, tp);
                tp_assemble(g_dw.data(), dw.data(), ws, tp);
                expect_close(out, ref.out, k_rel, where(tp, what + " out"));
                expect_close(g_dinp, ref.dinp, k_rel, where(tp, what + " dinp"));
                expect_close(g_dw, ref.dweight, k_rel, where(tp, what + " dweight"));
                expect_close(db, ref.dbias, k_rel, where(tp, what + " dbias"));
            });
        }
    }
}

// Column (C -> I, outputs left split) then row (I -> C): one all-reduce each
// way, and the pair equals two unsharded linears.
TEST(TpMlp, ColumnThenRowMatchesTwoUnshardedLinears) {
    constexpr int64_t N = 5, C = 7, I = 16;
    const auto x = random_floats(N * C, 500);
    const auto w1 = random_floats(I * C, 501, 0.5f), b1 = random_floats(I, 502);
    const auto w2 = random_floats(C * I, 503, 0.5f), b2 = random_floats(C, 504);
    const auto dy = random_floats(N * C, 505);
    const WeightLayout L = WeightLayout::out_in;
    std::vector<float> h(size_t(N * I)), y(size_t(N * C)), dh(size_t(N * I)), dx(size_t(N * C));
    std::vector<float> dw1(w1.size()), db1(b1.size()), dw2(w2.size()), db2(b2.size());
    matmul_forward(h.data(), x.data(), w1.data(), b1.data(), N, C, I, L);
    matmul_forward(y.data(), h.data(), w2.data(), b2.data(), N, I, C, L);
    matmul_backward(dh.data(), dw2.data(), db2.data(), dy.data(), h.data(), w2.data(), N, I, C, L);
    matmul_backward(dx.data(), dw1.data(), db1.data(), dh.data(), x.data(), w1.data(), N, C, I, L);

    for (int tp_size : k_tp_sizes) {
        run_tp(tp_size, [&](Communicator& tp) {
            const int t = tp.size(), r = tp.rank();
            const int64_t Il = I / t;
            const TpSplit s1 = tp_linear_weight_split(TpRole::column, L, C, I);
            const TpSplit s2 = tp_linear_weight_split(TpRole::row, L, I, C);
            std::vector<float> lw1(size_t(s1.local_numel(t))), lb1(static_cast<size_t>(Il));
            std::vector<float> lw2(size_t(s2.local_numel(t)));
            tp_shard_for_rank(lw1.data(), w1.data(), s1, t, r);
            tp_shard_for_rank(lb1.data(), b1.data(), tp_linear_bias_split(I), t, r);
            tp_shard_for_rank(lw2.data(), w2.data(), s2, t, r);
            std::vector<float> lh(size_t(N * Il)), ly(size_t(N * C)), ldh(size_t(N * Il)),
                ldx(size_t(N * C));
            std::vector<float> ldw1(lw1.size()), ldb1(lb1.size()), ldw2(lw2.size()),
                ldb2(b2.size());
            column_parallel_linear_forward(lh.data(), x.data(), lw1.data(), lb1.data(), N, C, I, L,
                                           tp);
            row_parallel_linear_forward(ly.data(), lh.data(), lw2.data(), b2.data(), N, I, C, L,
                                        tp);
            row_parallel_linear_backward(ldh.data(), ldw2.data(), ldb2.data(), dy.data(), lh.data(),
                                         lw2.data(), N, I, C, L, tp);
            column_parallel_linear_backward(ldx.data(), ldw1.data(), ldb1.data(), ldh.data(),
                                            x.data(), lw1.data(), N, C, I, L, tp);
            std::vector<float> g_dw1(dw1.size()), g_dw2(dw2.size());
            tp_assemble(g_dw1.data(), ldw1.data(), s1, tp);
            tp_assemble(g_dw2.data(), ldw2.data(), s2, tp);
            expect_close(ly, y, k_rel, where(tp, "mlp out"));
            expect_close(ldx, dx, k_rel, where(tp, "mlp dinp"));
            expect_close(g_dw1, dw1, k_rel, where(tp, "mlp dweight1"));
            expect_close(g_dw2, dw2, k_rel, where(tp, "mlp dweight2"));
            expect_close(ldb2, db2, k_rel, where(tp, "mlp dbias2"));
        });
    }
}

TEST(TpLinear, SizesThatDoNotSplitAreErrors) {
    std::vector<float> buf(1024);
    // OC = 10 does not split over 4 ranks (column); C = 6 does not (row).
    EXPECT_THROW(run_tp(4,
                        [&](Communicator& tp) {
                            column_parallel_linear_forward(buf.data(), buf.data(), buf.data(),
                                                           buf.data(), 2, 4, 10,
                                                           WeightLayout::out_in, tp);
                        }),
                 Error);
    EXPECT_THROW(run_tp(4,
                        [&](Communicator& tp) {
                            std::vector<float> out(20);
                            row_parallel_linear_forward(out.data(), buf.data(), buf.data(),
                                                        buf.data(), 2, 6, 10, WeightLayout::out_in,
                                                        tp);
                        }),
                 Error);
}

// ---------------------------------------------------------------------------
// Vocab-parallel embedding and cross-entropy

TEST(TpVocab, PaddedRangesTileTheVocabulary) {
    EXPECT_EQ(tp_vocab_padded(37, 1), 37);
    EXPECT_EQ(tp_vocab_padded(37, 2), 38);
    EXPECT_EQ(tp_vocab_padded(37, 4), 40);
    EXPECT_EQ(tp_vocab_padded(40, 4), 40);
    for (int t : k_tp_sizes) {
        int64_t next = 0;
        for (int r = 0; r < t; ++r) {
            const TpVocabRange v = tp_vocab_range(37, t, r);
            EXPECT_EQ(v.first, next);
            EXPECT_EQ(v.count, tp_vocab_padded(37, t) / t);
            next = v.first + v.count;
        }
        EXPECT_GE(next, 37);
        EXPECT_LT(next - 37, t);
    }
}

TEST(TpVocabEmbedding, MatchesUnshardedWithIdsOnEveryShard) {
    constexpr int64_t V = 37, C = 5, padding_idx = 3;
    // Both ends of every shard for tp = 2 and 4, the padding id, repeats.
    std::vector<int64_t> ids = {0, 36, 18, 19, 9, 10, 20, 29, 30, 3, 3, 17, 36, 0, 27};
    std::mt19937 g(600);
    for (int i = 0; i < 8; ++i) ids.push_back(int64_t(g() % V));
    const int64_t N = int64_t(ids.size());
    const auto table = random_floats(V * C, 601);
    const auto dout = random_floats(N * C, 602);
    const auto dtable0 = random_floats(V * C, 603, 0.1f);
    std::vector<float> out(size_t(N * C)), dtable = dtable0;
    embedding_forward(out.data(), ids.data(), table.data(), N, V, C);
    embedding_backward(dtable.data(), ids.data(), dout.data(), N, V, C, padding_idx);

    for (int tp_size : k_tp_sizes) {
        run_tp(tp_size, [&](Communicator& tp) {
            const TpVocabRange r = tp_vocab_range(V, tp.size(), tp.rank());
            // The model's vocab-parallel Embedding over this rank's slice.
            ParamTable t;
            Embedding e = Embedding::make(t, "w", V, C, padding_idx, 0.02);
            e.shard(t, ModelTp{tp.rank(), tp.size(), &tp});
            t.allocate();
            e.bind(t);
            float* local = t.param(e.table.row);
            float* dlocal = t.grad(e.table.row);
            tp_vocab_shard_for_rank(local, table.data(), V, C, tp.size(), tp.rank());
            tp_vocab_shard_for_rank(dlocal, dtable0.data(), V, C, tp.size(), tp.rank());
            std::vector<float> got(size_t(N * C), 9.f);
            e.forward(got.data(), ids.data(), N);
            e.backward(dout.data(), ids.data(), N);
            // Every row comes from exactly one rank and the backward sums rows
            // in the op's order: both are exact.
            expect_close(got, out, 0, where(tp, "embedding out"));
            // NOTE: EXPECT, never ASSERT, inside a rank: an early return would
            // leave the other ranks waiting in the next collective.
            int64_t padding_grads = 0;
            for (int64_t i = std::max<int64_t>(0, V - r.first) * C; i < r.count * C; ++i)
                padding_grads += dlocal[i] != 0.f;
            EXPECT_EQ(padding_grads, 0) << where(tp, "padding rows got a gradient");
            std::vector<float> g_dtable(dtable.size());
            tp_vocab_assemble(g_dtable.data(), dlocal, V, C, tp);
            expect_close(g_dtable, dtable, 0, where(tp, "embedding dtable"));
            std::vector<float> g_table(table.size());
            tp_vocab_assemble(g_table.data(), local, V, C, tp);
            expect_close(g_table, table, 0, where(tp, "table round trip"));
        });
    }
    std::vector<int64_t> bad = {0, V};
    EXPECT_THROW(run_tp(2,
                        [&](Communicator& tp) {
                            ParamTable t;
                            Embedding e = Embedding::make(t, "w", V, C, padding_idx, 0.02);
                            e.shard(t, ModelTp{tp.rank(), tp.size(), &tp});
                            t.allocate();
                            e.bind(t);
                            std::vector<float> o(2 * C);
                            e.forward(o.data(), bad.data(), 2);
                        }),
                 Error);
}

TEST(TpVocabXent, MatchesUnshardedWithIgnoredTargets) {
    constexpr int64_t N = 13, V = 37;
    const auto logits = random_floats(N * V, 700, 4.f);
    // Shard boundaries for tp = 2 and 4, the last id, and ignored rows.
    const std::vector<int64_t> targets = {0,  36, k_ignore_index, 18, 19, 9, 10, k_ignore_index, 29,
                                          30, 5,  k_ignore_index, 27};
    ASSERT_EQ(int64_t(targets.size()), N);
    std::vector<float> losses(N), dlogits(size_t(N * V));
    const XentSum want = softmax_xent_forward(losses.data(), logits.data(), targets.data(), N, V);
    ASSERT_EQ(want.count, 10);
    const double scale = 1.0 / double(want.count);
    softmax_xent_backward(dlogits.data(), logits.data(), targets.data(), N, V, scale);

    for (int tp_size : k_tp_sizes) {
        run_tp(tp_size, [&](Communicator& tp) {
            const int64_t Vp = tp_vocab_padded(V, tp.size()), Vl = Vp / tp.size();
            // Local logits: this rank's columns of the padded (N, Vp) logits.
            // Padding columns hold a large value the op must ignore.
            std::vector<float> padded(size_t(N * Vp), 50.f), local(size_t(N * Vl));
            for (int64_t n = 0; n < N; ++n)
                std::copy(logits.begin() + n * V, logits.begin() + (n + 1) * V,
                          padded.begin() + n * Vp);
            scatter_to_tp_forward(local.data(), padded.data(), N, Vp, tp);

            // The LM heads' VocabXent on the CPU table, its workspace here.
            std::vector<float> dlocal(local.size(), 9.f), row_max(N), stats(2 * N);
            VocabXent xent;
            xent.tp = &tp;
            xent.row_max = row_max.data();
            xent.stats = stats.data();
            xent.planned_rows = N;
            const OpCtx ctx{&cpu_backend(), DType::f32};
            const XentSum got = xent.forward(ctx, local.data(), targets.data(), N, V);
            xent.backward(ctx, dlocal.data(), local.data(), targets.data(), N, V, scale);
            EXPECT_EQ(got.count, want.count) << where(tp, "xent count");
            EXPECT_NEAR(got.loss_sum, want.loss_sum, k_rel * std::fabs(want.loss_sum))
                << where(tp, "xent loss sum");

            std::vector<float> g_padded(size_t(N * Vp)), g_dlogits(size_t(N * V));
            gather_from_tp_forward(g_padded.data(), dlocal.data(), N, Vp, tp);
            int64_t padding_grads = 0;
            for (int64_t n = 0; n < N; ++n) {
                std::copy(g_padded.begin() + n * Vp, g_padded.begin() + n * Vp + V,
                          g_dlogits.begin() + n * V);
                for (int64_t j = V; j < Vp; ++j)
                    padding_grads += g_padded[size_t(n * Vp + j)] != 0.f;
            }
            EXPECT_EQ(padding_grads, 0) << where(tp, "padding columns got a gradient");
            expect_close(g_dlogits, dlogits, k_rel, where(tp, "xent dlogits"));
        });
    }
    const std::vector<int64_t> bad = {1, V};
    EXPECT_THROW(
        run_tp(2,
               [&](Communicator& tp) {
                   std::vector<float> local(2 * 19), row_max(2), stats(4);
                   VocabXent xent;
                   xent.tp = &tp;
                   xent.row_max = row_max.data();
                   xent.stats = stats.data();
                   xent.planned_rows = 2;
                   xent.forward(OpCtx{&cpu_backend(), DType::f32}, local.data(), bad.data(), 2, V);
               }),
        Error);
}

}  // namespace
}  // namespace loom
