// Topology: Megatron's documented 16-rank example, SMP's documented placement
// tables, and a round trip over every small grid and every axis order.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/check.h"
#include "parallel/topology.h"

using namespace loom;

namespace {

using Groups = std::vector<std::vector<int>>;

Groups all_groups(const Topology& t, std::vector<Axis> axes) {
    Groups g = t.all_groups(axes);
    std::sort(g.begin(), g.end());
    return g;
}

}  // namespace

// megatron/core/parallel_state.py, initialize_model_parallel docstring:
// 16 GPUs, tensor parallel 2, pipeline parallel 4 (so data parallel 2),
// default order tp-dp-pp.
TEST(Topology, MegatronWorkedExample) {
    TopologyConfig cfg;
    cfg.tp = 2;
    cfg.pp = 4;
    cfg.dp = 2;
    cfg.order = "tp-dp-pp";
    Topology t(cfg, 16, 0);
    EXPECT_EQ(all_groups(t, {Axis::dp}),
              (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
    EXPECT_EQ(all_groups(t, {Axis::tp}),
              (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
    EXPECT_EQ(all_groups(t, {Axis::pp}),
              (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
    // Model-parallel groups (tp x pp), as the same docstring's _MODEL_PARALLEL_GROUP.
    EXPECT_EQ(all_groups(t, {Axis::tp, Axis::pp}),
              (Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
    // Embedding (tie) groups: first and last stage of each pipeline.
    std::set<std::vector<int>> ties;
    for (int r = 0; r < 16; ++r) ties.insert(Topology(cfg, 16, r).tie_group());
    EXPECT_EQ(ties, (std::set<std::vector<int>>{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
}

TEST(Topology, PipelineNeighboursAndStages) {
    TopologyConfig cfg;
    cfg.tp = 2;
    cfg.pp = 4;
    cfg.dp = 2;
    Topology t5(cfg, 16, 5);  // tp 1, dp 0, pp 1
    EXPECT_EQ(t5.pp_rank(), 1);
    EXPECT_EQ(t5.pp_prev(), 1);
    EXPECT_EQ(t5.pp_next(), 9);
    EXPECT_FALSE(t5.is_first_stage());
    EXPECT_FALSE(t5.is_last_stage());
    EXPECT_FALSE(t5.in_tie_group());
    EXPECT_EQ(t5.tie_group(), (std::vector<int>{1, 13}));
    Topology t13(cfg, 16, 13);
    EXPECT_TRUE(t13.is_last_stage());
    EXPECT_EQ(t13.pp_next(), 1);  // wraps to the first stage
    EXPECT_EQ(t13.pp_prev(), 9);
    Topology t1(cfg, 16, 1);
    EXPECT_TRUE(t1.is_first_stage());
    EXPECT_EQ(t1.pp_prev(), 13);  // wraps to the last stage
}

TEST(Topology, ToStringNamesGridAndCoordinates) {
    TopologyConfig cfg;
    cfg.dp = cfg.pp = cfg.tp = 2;
    cfg.order = "tp-pp-dp";
    EXPECT_EQ(Topology(cfg, 8, 5).to_string(), "DP2-PP2-TP2 rank 5 = (dp 1, pp 0, tp 1)");
    cfg.order = "tp-dp-pp";
    EXPECT_EQ(Topology(cfg, 8, 5).to_string(), "DP2-PP2-TP2 rank 5 = (dp 0, pp 1, tp 1)");
    TopologyConfig single;
    EXPECT_EQ(Topology(single, 1, 0).to_string(), "DP1-PP1-TP1 rank 0 = (dp 0, pp 0, tp 0)");
}

// SageMaker model parallel docs, "Placement Strategy with Tensor Parallelism":
// 8 devices, tp 2, pp 2, rdp 2.
TEST(Topology, SmpPlacementTables) {
    EXPECT_EQ(topology_order_from_placement("cluster"), "tp-pp-dp");
    EXPECT_EQ(topology_order_from_placement("spread"), "dp-pp-tp");
    EXPECT_EQ(topology_order_from_placement("DPT"), "tp-pp-dp");
    EXPECT_EQ(topology_order_from_placement("PTD"), "dp-tp-pp");
    TopologyConfig cfg;
    cfg.dp = cfg.pp = cfg.tp = 2;
    // "DPT": rank -> (rdp, pp, tp)
    const int dpt[8][3] = {{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1},
                           {1, 0, 0}, {1, 0, 1}, {1, 1, 0}, {1, 1, 1}};
    // "PTD"
    const int ptd[8][3] = {{0, 0, 0}, {1, 0, 0}, {0, 0, 1}, {1, 0, 1},
                           {0, 1, 0}, {1, 1, 0}, {0, 1, 1}, {1, 1, 1}};
    for (int r = 0; r < 8; ++r) {
        cfg.order = topology_order_from_placement("DPT");
        Topology a(cfg, 8, r);
        EXPECT_EQ(a.dp_rank(), dpt[r][0]) << r;
        EXPECT_EQ(a.pp_rank(), dpt[r][1]) << r;
        EXPECT_EQ(a.tp_rank(), dpt[r][2]) << r;
        cfg.order = topology_order_from_placement("PTD");
        Topology b(cfg, 8, r);
        EXPECT_EQ(b.dp_rank(), ptd[r][0]) << r;
        EXPECT_EQ(b.pp_rank(), ptd[r][1]) << r;
        EXPECT_EQ(b.tp_rank(), ptd[r][2]) << r;
    }
    // Without tensor parallelism (the docs' partitions=2 on 8 processes):
    // "spread" gives model-parallel groups [0,4],[1,5],[2,6],[3,7].
    TopologyConfig mp;
    mp.dp = 4;
    mp.pp = 2;
    mp.order = topology_order_from_placement("spread");
    Topology s(mp, 8, 0);
    EXPECT_EQ(all_groups(s, {Axis::pp}), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
    EXPECT_EQ(all_groups(s, {Axis::dp}), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
    mp.order = topology_order_from_placement("cluster");
    Topology c(mp, 8, 0);
    EXPECT_EQ(all_groups(c, {Axis::pp}), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
    EXPECT_EQ(all_groups(c, {Axis::dp}), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
    EXPECT_THROW(topology_order_from_placement("DPP"), Error);
    EXPECT_THROW(topology_order_from_placement("nearby"), Error);
}

TEST(Topology, RoundTripEveryGridAndOrder) {
    const std::vector<std::string> orders = {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp",
                                             "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"};
    int grids = 0;
    for (int dp = 1; dp <= 8; ++dp)
        for (int tp = 1; tp <= 8; ++tp)
            for (int pp = 1; pp <= 8; ++pp) {
                const int n = dp * tp * pp;
                if (n > 8) continue;
                for (const auto& order : orders) {
                    TopologyConfig cfg{dp, pp, tp, 1, order};
                    std::set<std::array<int, 3>> seen;
                    for (int r = 0; r < n; ++r) {
                        Topology t(cfg, n, r);
                        Coords c = t.coords();
                        ASSERT_EQ(t.rank_of(c), r) << order;
                        ASSERT_EQ(t.coords_of(r), c);
                        ASSERT_LT(c[Axis::dp], dp);
                        ASSERT_LT(c[Axis::tp], tp);
                        ASSERT_LT(c[Axis::pp], pp);
                        seen.insert({c[Axis::dp], c[Axis::pp], c[Axis::tp]});
                        // The fastest axis in the order string moves first.
                        Axis fastest = axis_from_name(order.substr(0, 2));
                        if (t.size(fastest) > 1 && c[fastest] + 1 < t.size(fastest)) {
                            Coords next = c;
                            next[fastest] += 1;
                            EXPECT_EQ(t.rank_of(next), r + 1);
                        }
                        // Single-axis groups: size of the axis, position = coordinate,
                        // members share every other coordinate.
                        for (Axis a : {Axis::dp, Axis::pp, Axis::tp}) {
                            auto g = t.group_ranks({a});
                            ASSERT_EQ(int(g.size()), t.size(a));
                            EXPECT_EQ(g[size_t(c[a])], r);
                            for (int member : g) {
                                Coords mc = t.coords_of(member);
                                for (Axis other : {Axis::dp, Axis::pp, Axis::tp}) {
                                    if (other != a) {
                                        EXPECT_EQ(mc[other], c[other]);
                                    }
                                }
                            }
                        }
                        EXPECT_EQ(int(t.group_ranks({Axis::dp, Axis::pp, Axis::tp}).size()), n);
                        EXPECT_EQ(t.group_ranks({}), std::vector<int>{r});
                        // Pipeline neighbours differ only in pp, by one (wrapping).
                        Coords prev = t.coords_of(t.pp_prev());
                        EXPECT_EQ(prev[Axis::pp], (c[Axis::pp] + pp - 1) % pp);
                        EXPECT_EQ(prev[Axis::tp], c[Axis::tp]);
                        EXPECT_EQ(t.coords_of(t.pp_next())[Axis::pp], (c[Axis::pp] + 1) % pp);
                    }
                    EXPECT_EQ(int(seen.size()), n);  // a bijection
                    // Groups of one axis partition the world.
                    Topology t0(cfg, n, 0);
                    for (Axis a : {Axis::dp, Axis::pp, Axis::tp}) {
                        std::vector<int> all;
                        for (auto& g : t0.all_groups({a})) all.insert(all.end(), g.begin(), g.end());
                        std::sort(all.begin(), all.end());
                        ASSERT_EQ(int(all.size()), n);
                        for (int r = 0; r < n; ++r) EXPECT_EQ(all[size_t(r)], r);
                    }
                    ++grids;
                }
            }
    EXPECT_EQ(grids, 6 * 38);  // 38 (dp, tp, pp) triples with product <= 8
}

TEST(Topology, ContextParallelAxisIsReserved) {
    TopologyConfig cfg;
    cfg.tp = 2;
    cfg.cp = 2;
    cfg.order = "tp-cp-dp-pp";
    Topology t(cfg, 4, 3);
    EXPECT_EQ(t.cp_rank(), 1);
    EXPECT_EQ(t.tp_rank(), 1);
    EXPECT_EQ(t.group_ranks({Axis::cp}), (std::vector<int>{1, 3}));
    EXPECT_EQ(t.to_string(), "DP1-CP2-PP1-TP2 rank 3 = (dp 0, cp 1, pp 0, tp 1)");
    cfg.order = "tp-dp-pp";  // cp > 1 must be placed explicitly
    EXPECT_THROW(Topology(cfg, 4, 0), Error);
}

TEST(Topology, RejectsBadConfigs) {
    TopologyConfig cfg;
    cfg.dp = 2;
    cfg.tp = 2;
    EXPECT_THROW(Topology(cfg, 8, 0), Error);  // 4 != 8
    EXPECT_THROW(Topology(cfg, 4, 4), Error);  // rank out of range
    cfg.order = "tp-dp";
    EXPECT_THROW(Topology(cfg, 4, 0), Error);  // pp missing
    cfg.order = "tp-dp-pp-dp";
    EXPECT_THROW(Topology(cfg, 4, 0), Error);  // dp twice
    cfg.order = "tp-xp-pp";
    EXPECT_THROW(Topology(cfg, 4, 0), Error);  // unknown axis
    cfg.order = "tp-dp-pp";
    cfg.dp = 0;
    EXPECT_THROW(Topology(cfg, 0, 0), Error);
    try {
        TopologyConfig c2;
        c2.dp = 3;
        Topology bad(c2, 4, 0);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("the world has 4 ranks"), std::string::npos);
    }
}
