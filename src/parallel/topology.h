// Topology: the named rank grid (dp, pp, tp; cp reserved) and every derived fact
// the trainer needs about it, computed once from (sizes, order, rank).
//
// Rank layout: an order string names the axes from fastest- to slowest-varying,
// as Megatron's `order` does ("tp-dp-pp": consecutive ranks differ in tp, then
// dp, then pp). So with sizes s_a and coordinates c_a in that order,
//     rank = c_0 + s_0 * (c_1 + s_1 * (c_2 + ...)).
// SMP's `placement_strategy` ("cluster", "spread", or a permutation of D, P, T
// whose right-most letter varies fastest) maps onto an order string through
// topology_order_from_placement (docs/parallelism.md has the table).
//
// Groups are lists of world ranks in ascending order; for a single axis the
// position in the list is the coordinate on that axis (pp group index = pp
// stage), which is what the communicator split relies on.
//
// Pure logic: no MPI, no globals. A Topology is a value passed by reference.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

// NOTE: the numeric values index arrays; keep k_n_axes in step.
enum class Axis : uint8_t { dp = 0, pp = 1, tp = 2, cp = 3 };
inline constexpr int k_n_axes = 4;

std::string_view axis_name(Axis a);
// "dp" -> Axis::dp; throws loom::Error naming the accepted names otherwise.
Axis axis_from_name(std::string_view name);

// Coordinates of one rank, indexed by Axis.
struct Coords {
    std::array<int, k_n_axes> c{};  // (k_n_axes)
    int& operator[](Axis a) { return c[size_t(a)]; }
    int operator[](Axis a) const { return c[size_t(a)]; }
    bool operator==(const Coords&) const = default;
};

struct TopologyConfig {
    int dp = 1;
    int pp = 1;
    int tp = 1;
    int cp = 1;  // context parallel: reserved; any size works in the grid math
    // Fastest-varying first. Must name dp, pp and tp exactly once; cp may be
    // named anywhere and must be when cp > 1 (an unnamed cp of size 1 is slowest).
    std::string order = "tp-dp-pp";
};

// "cluster" -> "tp-pp-dp", "spread" -> "dp-pp-tp", "DPT" -> "tp-pp-dp",
// "PTD" -> "dp-tp-pp": SMP reads the right-most letter as fastest-varying.
std::string topology_order_from_placement(std::string_view placement_strategy);

class Topology {
public:
    // Throws loom::Error if dp*pp*tp*cp != world_size, a size < 1, rank out of
    // range, or the order string is not a permutation of the axis names.
    Topology(const TopologyConfig& cfg, int world_size, int rank);

    int world_size() const { return world_size_; }
    int rank() const { return rank_; }
    const std::string& order() const { return order_string_; }
    int size(Axis a) const { return sizes_[size_t(a)]; }
    int coord(Axis a) const { return coords_[a]; }
    const Coords& coords() const { return coords_; }
    int dp_size() const { return size(Axis::dp); }
    int pp_size() const { return size(Axis::pp); }
    int tp_size() const { return size(Axis::tp); }
    int cp_size() const { return size(Axis::cp); }
    int dp_rank() const { return coord(Axis::dp); }
    int pp_rank() const { return coord(Axis::pp); }
    int tp_rank() const { return coord(Axis::tp); }
    int cp_rank() const { return coord(Axis::cp); }

    // World rank <-> coordinates, for any rank of the grid.
    Coords coords_of(int rank) const;
    int rank_of(const Coords& coords) const;

    // The group of `rank` along `axes`: every rank that shares rank's
    // coordinates on all other axes, ascending. Empty axes -> {rank}.
    std::vector<int> group_ranks(const std::vector<Axis>& axes, int rank) const;
    std::vector<int> group_ranks(const std::vector<Axis>& axes) const {
        return group_ranks(axes, rank_);
    }
    // All groups along `axes` (a partition of the world), ordered by their
    // smallest rank.
    std::vector<std::vector<int>> all_groups(const std::vector<Axis>& axes) const;

    // Pipeline neighbours of this rank (world ranks). They wrap around
    // (last -> first) because interleaved schedules send from the last stage's
    // chunk v to the first stage's chunk v+1; use is_first/last_stage to tell.
    int pp_prev() const { return pp_prev_; }
    int pp_next() const { return pp_next_; }
    bool is_first_stage() const { return pp_rank() == 0; }
    bool is_last_stage() const { return pp_rank() == pp_size() - 1; }

    // Tie group: first and last stage of this rank's (dp, tp, cp) slice, where
    // tied embeddings live (GPT-2 wte <-> LM head). One rank when pp == 1.
    // Ranks on middle stages are not members; tie_group() is still their
    // slice's pair, so every rank can take part in a collective split.
    const std::vector<int>& tie_group() const { return tie_group_; }
    bool in_tie_group() const { return is_first_stage() || is_last_stage(); }

    // "DP2-PP2-TP2 rank 5 = (dp 1, pp 0, tp 1)"; cp appears when cp > 1.
    std::string to_string() const;
    std::string describe_rank(int rank) const;

private:
    int world_size_ = 1;
    int rank_ = 0;
    std::string order_string_;
    std::array<int, k_n_axes> sizes_{};    // (k_n_axes) indexed by Axis
    std::array<Axis, k_n_axes> order_{};   // fastest-varying first
    std::array<int, k_n_axes> strides_{};  // (k_n_axes) indexed by Axis
    Coords coords_;
    int pp_prev_ = 0;
    int pp_next_ = 0;
    std::vector<int> tie_group_;
};

}  // namespace loom
