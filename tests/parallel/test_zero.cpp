// ZeRO-1/2: shard segments (decay and trainability per element, chunks that
// cut through parameters), the sharded AdamW against the unsharded one, the
// global norm over shards, the layout-free optimizer state (gather under one
// dp size, load under another), and the memory plan.
//
// Gradients here are small multiples of 1/64, so their sums over ranks and
// micro-batches, and the sums of their squares, are exact in any order: every
// layout must then reproduce the single-process AdamW bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "comm/comm_local.h"
#include "core/check.h"
#include "ops/device_ops.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "parallel/zero.h"
#include "test_backends.h"

namespace loom {
namespace {

// Rows of awkward sizes: decay and no-decay neighbours, a frozen row, an
// unaligned row glued to its predecessor.
std::unique_ptr<ParamTable> make_table(ParamDevice device = {}) {
    auto t = std::make_unique<ParamTable>();
    auto row = [&](const std::string& name, Shape shape, bool decay, bool trainable = true,
                   bool align = true) {
        ParamRow r;
        r.name = name;
        r.shape = shape;
        r.decay = decay;
        r.trainable = trainable;
        r.init_std = 0.5;
        t->add(r, align);
    };
    row("a.weight", Shape{37}, true);
    row("a.bias", Shape{5}, false);
    row("frozen.weight", Shape{20}, true, false);
    row("c.weight", Shape{3, 11}, true);
    row("c.bias", Shape{11}, false, true, false);
    row("d.weight", Shape{7, 13}, true);
    row("norm.weight", Shape{64}, false);
    t->allocate(device);
    t->init_all(99);
    return t;
}

constexpr int64_t k_bucket = 48;

// The global gradient of step s and this rank's share of it (dp ranks, ga
// micro-batches): exact small multiples of 1/64 that sum to the global one.
float global_grad(int64_t step, int64_t i) {
    return float(int((i * 5 + step * 11) % 23) - 11) / 64.0f;
}
float helper_share(int64_t i, int part) { return float(int((i + part) % 3) - 1) / 64.0f; }
float share(int64_t step, int64_t i, int part, int parts) {
    if (part > 0) return helper_share(i, part);
    float g = global_grad(step, i);
    for (int q = 1; q < parts; ++q) g -= helper_share(i, q);
    return g;
}

// Writes this rank's gradient of micro-batch k into the table (trainable rows only).
void fill_grads(ParamTable& t, int64_t step, int part, int parts) {
    for (int i = 0; i < t.size(); ++i) {
        if (!t.row(i).trainable) continue;
        for (int64_t j = 0; j < t.row(i).numel(); ++j)
            t.grad(i)[j] += share(step, t.row(i).offset + j, part, parts);
    }
}

AdamWParams hyper() {
    AdamWParams hp;
    hp.lr = 0.01;
    hp.weight_decay = 0.1;
    return hp;
}

// The single-process reference: `steps` AdamW steps with clipping.
std::vector<float> reference_params(int steps, double max_norm, AdamW** keep_state = nullptr,
                                    std::unique_ptr<ParamTable>* keep_table = nullptr) {
    auto t = make_table();
    auto opt = std::make_unique<AdamW>(*t, hyper());
    for (int s = 0; s < steps; ++s) {
        t->zero_grad();
        fill_grads(*t, s, 0, 1);
        clip_grad_norm(*t, max_norm);
        opt->step();
    }
    std::vector<float> p(t->params_data(), t->params_data() + t->flat_numel());
    if (keep_state) *keep_state = opt.release();
    if (keep_table) *keep_table = std::move(t);
    return p;
}

TEST(ZeroShard, SegmentsCoverEveryTrainableElementOnceWithItsDecayFlag) {
    auto t = make_table();
    for (int dp : {1, 2, 3, 4}) {
        const auto buckets = grad_buckets_plan(t->flat_numel(), k_bucket, dp);
        for (DecayPolicy pol : {DecayPolicy::table, DecayPolicy::all}) {
            std::vector<int> seen(size_t(t->flat_numel()), 0);
            std::vector<int> decay(size_t(t->flat_numel()), -1);
            for (int r = 0; r < dp; ++r) {
                const auto pieces = shard_pieces(buckets, r);
                for (const ShardSegment& s : shard_segments(*t, pieces, pol)) {
                    // The shard offset maps back to the same flat element.
                    bool inside = false;
                    for (const ShardPiece& p : pieces)
                        if (s.flat >= p.flat_begin && s.flat + s.n <= p.flat_end)
                            inside |= s.shard == p.shard_begin + (s.flat - p.flat_begin);
                    EXPECT_TRUE(inside) << "segment at " << s.flat << " outside rank " << r
                                        << "'s pieces";
                    // Its row is the one that holds it.
                    ASSERT_GE(s.row, 0);
                    ASSERT_LT(s.row, t->size());
                    const ParamRow& owner = t->row(s.row);
                    EXPECT_TRUE(s.flat >= owner.offset &&
                                s.flat + s.n <= owner.offset + owner.numel())
                        << "segment at " << s.flat << " is not inside row " << owner.name;
                    for (int64_t i = s.flat; i < s.flat + s.n; ++i) {
                        ++seen[size_t(i)];
                        decay[size_t(i)] = s.decay;
                    }
                }
            }
            bool cut = false;  // some chunk boundary falls inside a row
            for (const ParamRow& r : t->rows()) {
                for (int64_t i = r.offset; i < r.offset + r.numel(); ++i) {
                    ASSERT_EQ(seen[size_t(i)], r.trainable ? 1 : 0) << r.name << " dp " << dp;
                    if (r.trainable) {
                        ASSERT_EQ(decay[size_t(i)], pol == DecayPolicy::all || r.decay) << r.name;
                    }
                }
                for (const GradBucket& b : buckets)
                    for (int q = 1; q < dp; ++q)
                        cut |= b.chunk_begin(q) > r.offset && b.chunk_begin(q) < r.offset + r.numel();
            }
            if (dp > 1) {
                EXPECT_TRUE(cut) << "the test table never has a parameter cut by a chunk";
            }
        }
    }
}

struct ZeroRun {
    std::vector<float> params;
    std::vector<double> norms;
    std::map<std::string, Tensor> state;
};

// `steps` steps of ZeRO (stage z) on dp CommLocal ranks with ga micro-batches,
// starting from `start` parameters and state (step count `start_step`) when given.
std::vector<ZeroRun> run_zero(int dp, int ga, ZeroStage z, int steps, double max_norm,
                              const std::vector<float>* start = nullptr,
                              const std::map<std::string, Tensor>* start_state = nullptr,
                              int start_step = 0) {
    std::vector<ZeroRun> out(static_cast<size_t>(dp));
    comm_local_run(dp, [&](Communicator& world) {
        const int r = world.rank();
        auto t = make_table();
        if (start) std::memcpy(t->params_data(), start->data(), start->size() * sizeof(float));
        GradSyncOptions o;
        o.zero = z;
        o.bucket_elems = k_bucket;
        GradSync sync(t->grads_data(), t->flat_numel(), world, o);
        ZeroOptimizer opt(*t, sync, hyper());
        if (start_state) opt.load_state(*start_state, start_step);
        ZeroRun& run = out[size_t(r)];
        for (int s = start_step; s < start_step + steps; ++s) {
            t->zero_grad();
            sync.begin_step();
            for (int k = 0; k < ga; ++k) {
                sync.begin_micro_batch(k == ga - 1);
                fill_grads(*t, s, r * ga + k, dp * ga);
                sync.grads_ready(0, t->flat_numel());
                sync.end_micro_batch();
            }
            sync.finalize();
            run.norms.push_back(opt.clip_grad_norm(max_norm));
            opt.step(hyper().lr);
        }
        EXPECT_EQ(opt.step_count(), start_step + steps);
        run.params.assign(t->params_data(), t->params_data() + t->flat_numel());
        for (auto& [n, v] : opt.gather_state()) run.state[n] = v;
    });
    return out;
}

// The same with the gradients in a narrow type on the staged backend (host
// memory the table reaches only through uploads), scaled by `loss_scale`
// and unscaled as DataParallel does: the reduced shard is widened to fp32
// (take_grads) before the norm, the clipping and the update.
std::vector<ZeroRun> run_zero_narrow(DType type, int dp, int ga, ZeroStage z, int steps,
                                     double max_norm, float loss_scale) {
    std::vector<ZeroRun> out(static_cast<size_t>(dp));
    test::StagedBackend staged;
    const auto narrow = [type](float x) {
        return type == DType::bf16 ? f32_to_bf16(x) : f32_to_f16(x);
    };
    const auto wide = [type](uint16_t h) {
        return type == DType::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
    };
    comm_local_run(dp, [&](Communicator& world) {
        const int r = world.rank();
        auto t = make_table(ParamDevice{&staged, type});
        GradSyncOptions o;
        o.zero = z;
        o.bucket_elems = k_bucket;
        GradSync sync(t->device_grads(), t->flat_numel(), world, o, staged);
        ZeroOptimizer opt(*t, sync, hyper());
        ZeroRun& run = out[size_t(r)];
        const size_t n = size_t(t->flat_numel());
        std::vector<uint16_t> g(n);
        for (int s = 0; s < steps; ++s) {
            t->zero_grad();
            sync.begin_step();
            for (int k = 0; k < ga; ++k) {
                sync.begin_micro_batch(k == ga - 1);
                // The device gradients += this micro-batch's share, scaled.
                staged.to_host(g.data(), t->device_grads(), n * sizeof(uint16_t));
                for (int i = 0; i < t->size(); ++i) {
                    if (!t->row(i).trainable) continue;
                    for (int64_t j = 0; j < t->row(i).numel(); ++j) {
                        const size_t e = size_t(t->row(i).offset + j);
                        const float add = share(s, int64_t(e), r * ga + k, dp * ga) * loss_scale;
                        g[e] = narrow(wide(g[e]) + add);
                    }
                }
                staged.to_device(t->device_grads(), g.data(), n * sizeof(uint16_t));
                sync.grads_ready(0, t->flat_numel());
                sync.end_micro_batch();
            }
            sync.finalize();
            opt.take_grads();
            if (loss_scale != 1.0f) opt.scale_grads(1.0f / loss_scale);
            run.norms.push_back(opt.clip_grad_norm(max_norm));
            opt.step(hyper().lr);
        }
        t->download_params();
        run.params.assign(t->params_data(), t->params_data() + t->flat_numel());
    });
    return out;
}

// Narrow shards: with gradients whose sums are exact in bf16 and fp16 (and
// a power-of-two loss scale), ZeRO-1/2 over narrow gradients must give the
// fp32 run's parameters and norms bit for bit.
TEST(ZeroOptimizer, NarrowGradientShardsTrainAsFp32) {
    const int steps = 2;
    for (double max_norm : {1e9, 0.3}) {
        const std::vector<float> ref = reference_params(steps, max_norm);
        for (DType type : {DType::bf16, DType::f16}) {
            for (ZeroStage z : {ZeroStage::optimizer, ZeroStage::gradients}) {
                for (int dp : {1, 3}) {
                    const int ga = dp == 1 ? 2 : 1;
                    const float scale = type == DType::f16 ? 256.0f : 1.0f;
                    const std::string what =
                        std::string(dtype_name(type)) + " " + std::string(zero_stage_name(z)) +
                        " dp " + std::to_string(dp) + " max_norm " + std::to_string(max_norm);
                    const auto fp32 = run_zero(dp, ga, z, steps, max_norm);
                    const auto runs = run_zero_narrow(type, dp, ga, z, steps, max_norm, scale);
                    for (int r = 0; r < dp; ++r) {
                        ASSERT_TRUE(runs[size_t(r)].params == ref) << what << " rank " << r;
                        EXPECT_EQ(runs[size_t(r)].norms, fp32[size_t(r)].norms)
                            << what << " rank " << r;
                    }
                }
            }
        }
    }
}

TEST(ZeroOptimizer, MatchesUnshardedAdamWBitwise) {
    const int steps = 3;
    for (double max_norm : {1e9, 0.3}) {  // without and with clipping
        AdamW* ref_opt = nullptr;
        std::unique_ptr<ParamTable> ref_table;
        const std::vector<float> ref = reference_params(steps, max_norm, &ref_opt, &ref_table);
        std::unique_ptr<AdamW> own(ref_opt);
        const auto ref_state = own->state_tensors();
        for (ZeroStage z : {ZeroStage::optimizer, ZeroStage::gradients}) {
            for (int dp : {1, 2, 3, 4}) {
                for (int ga : {1, 2}) {
                    const std::string what = std::string(zero_stage_name(z)) + " dp " +
                                             std::to_string(dp) + " ga " + std::to_string(ga) +
                                             " max_norm " + std::to_string(max_norm);
                    const auto runs = run_zero(dp, ga, z, steps, max_norm);
                    for (int r = 0; r < dp; ++r) {
                        ASSERT_TRUE(runs[size_t(r)].params == ref) << what << " rank " << r;
                        ASSERT_EQ(runs[size_t(r)].state.size(), ref_state.size()) << what;
                        for (const auto& [name, v] : ref_state)
                            ASSERT_EQ(std::memcmp(runs[size_t(r)].state.at(name).raw(), v.raw(),
                                                  v.nbytes()),
                                      0)
                                << what << " rank " << r << " " << name;
                    }
                    if (max_norm < 1) {
                        EXPECT_GT(runs[0].norms[0], max_norm) << "clipping not hit";
                    }
                }
            }
        }
    }
}

// LAMB and SGD run sharded too (optim/flat_optimizer.h): SGD is elementwise,
// so bit for bit; LAMB sums each tensor's partial norms over dp, so its trust
// ratios are the whole tensors' (to the last bits of their fp64 sums), and
// every rank applies the same ones.
TEST(ZeroOptimizer, LambAndSgdShardedMatchTheUnshardedRun) {
    for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::lamb}) {
        OptimizerConfig cfg = adamw_config(hyper());
        cfg.kind = kind;
        const int steps = 3;
        auto ref_t = make_table();
        FlatOptimizer ref(*ref_t, cfg);
        for (int s = 0; s < steps; ++s) {
            ref_t->zero_grad();
            fill_grads(*ref_t, s, 0, 1);
            ref.step(hyper().lr);
        }
        const std::vector<float> want(ref_t->params_data(),
                                       ref_t->params_data() + ref_t->flat_numel());
        for (int dp : {2, 3}) {
            std::vector<std::vector<float>> got(static_cast<size_t>(dp));
            std::vector<std::map<std::string, Tensor>> states(static_cast<size_t>(dp));
            comm_local_run(dp, [&](Communicator& world) {
                auto t = make_table();
                GradSyncOptions o;
                o.zero = ZeroStage::optimizer;
                o.bucket_elems = k_bucket;
                GradSync sync(t->grads_data(), t->flat_numel(), world, o);
                ZeroOptimizer opt(*t, sync, cfg);
                for (int s = 0; s < steps; ++s) {
                    t->zero_grad();
                    sync.begin_step();
                    sync.begin_micro_batch(true);
                    fill_grads(*t, s, world.rank(), dp);
                    sync.grads_ready(0, t->flat_numel());
                    sync.end_micro_batch();
                    sync.finalize();
                    opt.step(hyper().lr);
                }
                got[size_t(world.rank())].assign(t->params_data(),
                                                 t->params_data() + t->flat_numel());
                states[size_t(world.rank())] = opt.gather_state();
            });
            const std::string what =
                std::string(kind == OptimizerKind::sgd ? "sgd" : "lamb") + " dp " + std::to_string(dp);
            for (int r = 0; r < dp; ++r) {
                ASSERT_TRUE(got[size_t(r)] == got[0]) << what << ": ranks disagree";
                EXPECT_EQ(states[size_t(r)].size(), kind == OptimizerKind::sgd ? 0u : 12u) << what;
            }
            double worst = 0;
            for (size_t i = 0; i < want.size(); ++i) {
                if (kind == OptimizerKind::sgd) {
                    ASSERT_EQ(got[0][i], want[i]) << what << " at " << i;
                } else {
                    const double d = std::fabs(double(got[0][i]) - double(want[i]));
                    worst = std::max(worst, d / (1e-7 + std::fabs(double(want[i]))));
                }
            }
            EXPECT_LT(worst, 1e-6) << what << ": largest relative difference " << worst;
        }
    }
}

TEST(ZeroOptimizer, GlobalNormEqualsTheUnshardedNorm) {
    auto t = make_table();
    fill_grads(*t, 0, 0, 1);
    const double want = std::sqrt(grad_norm_sq(*t));
    for (int dp : {2, 3}) {
        const auto runs = run_zero(dp, 1, ZeroStage::optimizer, 1, 1e9);
        for (int r = 0; r < dp; ++r) {
            EXPECT_EQ(runs[size_t(r)].norms[0], want) << "rank " << r;
        }
    }
}

TEST(ZeroOptimizer, StateSavedUnderOneLayoutResumesUnderAnother) {
    const std::vector<float> ref = reference_params(5, 0.3);
    // 2 steps as ZeRO-1 on 2 ranks; the rest as ZeRO-2 on 3 ranks, or unsharded.
    const auto first = run_zero(2, 1, ZeroStage::optimizer, 2, 0.3);
    const auto second =
        run_zero(3, 2, ZeroStage::gradients, 3, 0.3, &first[0].params, &first[0].state, 2);
    for (int r = 0; r < 3; ++r) {
        EXPECT_TRUE(second[size_t(r)].params == ref) << "ZeRO-2 dp 3 rank " << r << " after resume";
    }

    auto t = make_table();
    std::memcpy(t->params_data(), first[1].params.data(), first[1].params.size() * sizeof(float));
    AdamW opt(*t, hyper());
    opt.load_state(first[1].state, 2);
    for (int s = 2; s < 5; ++s) {
        t->zero_grad();
        fill_grads(*t, s, 0, 1);
        clip_grad_norm(*t, 0.3);
        opt.step();
    }
    EXPECT_TRUE(std::equal(ref.begin(), ref.end(), t->params_data()))
        << "unsharded AdamW resumed from a ZeRO state";
}

TEST(ZeroOptimizer, LoadStateNamesTheBadTensor) {
    auto world = comm_local_create(1);
    auto t = make_table();
    GradSyncOptions o;
    o.zero = ZeroStage::optimizer;
    GradSync sync(t->grads_data(), t->flat_numel(), *world[0], o);
    ZeroOptimizer opt(*t, sync, hyper());
    auto state = opt.gather_state();
    EXPECT_EQ(state.count("exp_avg.frozen.weight"), 0u) << "frozen rows have no optimizer state";
    auto missing = state;
    missing.erase("exp_avg_sq.c.weight");
    try {
        opt.load_state(missing, 1);
        ADD_FAILURE() << "missing tensor accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("exp_avg_sq.c.weight"), std::string::npos) << e.what();
    }
    auto wrong = state;
    wrong["exp_avg.a.bias"] = Tensor::empty(DType::f32, Shape{6}, "exp_avg.a.bias");
    EXPECT_THROW(opt.load_state(wrong, 1), Error);

    GradSync plain(t->grads_data(), t->flat_numel(), *world[0], GradSyncOptions{});
    EXPECT_THROW({ ZeroOptimizer z(*t, plain, hyper()); }, Error);
}

TEST(DpMemoryPlan, ShardingSavesOptimizerState) {
    const int64_t F = 110'000'000;  // about BERT-base
    const DpMemoryPlan ddp = dp_memory_plan(F, 25 << 18, 4, ZeroStage::none);
    const DpMemoryPlan z1 = dp_memory_plan(F, 25 << 18, 4, ZeroStage::optimizer);
    const DpMemoryPlan z2 = dp_memory_plan(F, 25 << 18, 4, ZeroStage::gradients);
    EXPECT_EQ(ddp.total_bytes(), 16 * F);
    EXPECT_EQ(ddp.saved_vs_ddp_bytes, 0);
    // Adam moments: 8 bytes per parameter, a quarter of them per rank.
    EXPECT_NEAR(double(z1.optimizer_bytes), 2.0 * F, 2.0 * 16 * 4 * 4 * 8);
    // Moments save 6 bytes per parameter, the gradient shard costs 1 (the
    // padded-bucket staging a little).
    EXPECT_GT(z1.saved_vs_ddp_bytes, 4 * F);
    EXPECT_LE(z1.saved_vs_ddp_bytes, 5 * F);
    EXPECT_EQ(z1.total_bytes() + z1.saved_vs_ddp_bytes, ddp.total_bytes());
    EXPECT_EQ(z2.grad_shard_bytes, 2 * z1.grad_shard_bytes);
    EXPECT_NE(z1.describe().find("ZeRO-1 dp 4"), std::string::npos) << z1.describe();
    EXPECT_NE(z2.describe().find("workspace"), std::string::npos) << z2.describe();
}

// bf16 gradients and compute copy (a GPU's mixed precision): the flat
// gradient buffer and the sync's shard are 2 bytes an element, the copy adds
// 2 to the parameters, and the shard is widened once to fp32 for the update.
TEST(DpMemoryPlan, NarrowGradientsAndTheWideShard) {
    const int64_t F = int64_t(1) << 20;  // four buckets of 2^18, no padding at dp 4
    const DpMemoryPlan ddp =
        dp_memory_plan(F, 1 << 18, 4, ZeroStage::none, true, DType::bf16, true);
    EXPECT_EQ(ddp.param_bytes, 6 * F);
    EXPECT_EQ(ddp.grad_bytes, 2 * F);
    EXPECT_EQ(ddp.total_bytes(), 16 * F);
    const DpMemoryPlan z1 =
        dp_memory_plan(F, 1 << 18, 4, ZeroStage::optimizer, true, DType::bf16, true);
    EXPECT_EQ(z1.grad_shard_bytes, F / 4 * (2 + 4));
    EXPECT_EQ(z1.optimizer_bytes, F / 4 * 8);
    EXPECT_EQ(z1.comm_bytes, 0);
    EXPECT_EQ(z1.saved_vs_ddp_bytes, ddp.total_bytes() - z1.total_bytes());
    const DpMemoryPlan z2 =
        dp_memory_plan(F, 1 << 18, 4, ZeroStage::gradients, true, DType::bf16, true);
    EXPECT_EQ(z2.grad_shard_bytes, F / 4 * (2 + 2 + 4));
    // fp32 gradients: no copy, no widening.
    const DpMemoryPlan f1 = dp_memory_plan(F, 1 << 18, 4, ZeroStage::optimizer);
    EXPECT_EQ(f1.grad_shard_bytes, F / 4 * 4);
    EXPECT_EQ(f1.param_bytes, 4 * F);
}

}  // namespace
}  // namespace loom
