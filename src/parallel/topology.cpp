// Topology: rank <-> coordinate math, groups, pipeline neighbours, tie group.
// See topology.h for the layout rule (first axis in the order string varies
// fastest).
#include "parallel/topology.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"

namespace loom {

namespace {

constexpr std::array<std::string_view, k_n_axes> k_axis_names = {"dp", "pp", "tp", "cp"};

// Splits "tp-dp-pp" on '-' into axes; checks each is named at most once.
std::vector<Axis> parse_order(std::string_view order) {
    std::vector<Axis> axes;
    size_t start = 0;
    while (start <= order.size()) {
        size_t end = order.find('-', start);
        if (end == std::string_view::npos) end = order.size();
        std::string_view word = order.substr(start, end - start);
        LOOM_CHECK(!word.empty(), "topology order '{}': empty axis name (expected e.g. 'tp-dp-pp')",
                   order);
        Axis a = axis_from_name(word);
        LOOM_CHECK(std::find(axes.begin(), axes.end(), a) == axes.end(),
                   "topology order '{}': axis '{}' named twice", order, word);
        axes.push_back(a);
        start = end + 1;
    }
    return axes;
}

}  // namespace

std::string_view axis_name(Axis a) { return k_axis_names[size_t(a)]; }

Axis axis_from_name(std::string_view name) {
    for (int i = 0; i < k_n_axes; ++i)
        if (k_axis_names[size_t(i)] == name) return Axis(i);
    LOOM_FAIL("unknown parallel axis '{}' (expected one of dp, pp, tp, cp)", name);
}

std::string topology_order_from_placement(std::string_view placement) {
    // SMP docs: "cluster" = "DPT", "spread" = "TPD"; in a permutation the
    // right-most letter is the axis that varies fastest over ascending ranks.
    std::string letters;
    if (placement == "cluster") {
        letters = "DPT";
    } else if (placement == "spread") {
        letters = "TPD";
    } else {
        letters = std::string(placement);
        std::string sorted = letters;
        std::sort(sorted.begin(), sorted.end());
        LOOM_CHECK(sorted == "DPT",
                   "placement_strategy '{}': expected 'cluster', 'spread' or a permutation of "
                   "the letters D, P, T (e.g. 'DPT')",
                   placement);
    }
    std::string order;
    for (auto it = letters.rbegin(); it != letters.rend(); ++it) {
        if (!order.empty()) order += '-';
        order += *it == 'D' ? "dp" : *it == 'P' ? "pp" : "tp";
    }
    return order;
}

Topology::Topology(const TopologyConfig& cfg, int world_size, int rank)
    : world_size_(world_size), rank_(rank), order_string_(cfg.order) {
    sizes_[size_t(Axis::dp)] = cfg.dp;
    sizes_[size_t(Axis::pp)] = cfg.pp;
    sizes_[size_t(Axis::tp)] = cfg.tp;
    sizes_[size_t(Axis::cp)] = cfg.cp;
    for (int i = 0; i < k_n_axes; ++i)
        LOOM_CHECK(sizes_[size_t(i)] >= 1, "topology: {} size must be >= 1, got {}",
                   axis_name(Axis(i)), sizes_[size_t(i)]);
    int64_t product = int64_t(cfg.dp) * cfg.pp * cfg.tp * cfg.cp;
    LOOM_CHECK(product == world_size,
               "topology: dp {} x pp {} x tp {} x cp {} = {} ranks, but the world has {} ranks",
               cfg.dp, cfg.pp, cfg.tp, cfg.cp, product, world_size);
    LOOM_CHECK(rank >= 0 && rank < world_size, "topology: rank {} outside world of {} ranks", rank,
               world_size);

    std::vector<Axis> named = parse_order(cfg.order);
    for (Axis a : {Axis::dp, Axis::pp, Axis::tp})
        LOOM_CHECK(std::find(named.begin(), named.end(), a) != named.end(),
                   "topology order '{}' must name dp, pp and tp (missing '{}')", cfg.order,
                   axis_name(a));
    if (std::find(named.begin(), named.end(), Axis::cp) == named.end()) {
        LOOM_CHECK(cfg.cp == 1, "topology order '{}' must name cp when cp size is {}", cfg.order,
                   cfg.cp);
        named.push_back(Axis::cp);
    }
    int stride = 1;
    for (int i = 0; i < k_n_axes; ++i) {
        order_[size_t(i)] = named[size_t(i)];
        strides_[size_t(named[size_t(i)])] = stride;
        stride *= sizes_[size_t(named[size_t(i)])];
    }

    coords_ = coords_of(rank_);
    Coords prev = coords_, next = coords_;
    prev[Axis::pp] = (pp_rank() + pp_size() - 1) % pp_size();
    next[Axis::pp] = (pp_rank() + 1) % pp_size();
    pp_prev_ = rank_of(prev);
    pp_next_ = rank_of(next);

    Coords first = coords_, last = coords_;
    first[Axis::pp] = 0;
    last[Axis::pp] = pp_size() - 1;
    tie_group_ = {rank_of(first)};
    if (pp_size() > 1) tie_group_.push_back(rank_of(last));
}

Coords Topology::coords_of(int rank) const {
    LOOM_CHECK(rank >= 0 && rank < world_size_, "topology: rank {} outside world of {} ranks",
               rank, world_size_);
    Coords c;
    int rest = rank;
    for (Axis a : order_) {
        c[a] = rest % sizes_[size_t(a)];
        rest /= sizes_[size_t(a)];
    }
    return c;
}

int Topology::rank_of(const Coords& c) const {
    int rank = 0;
    for (int i = 0; i < k_n_axes; ++i) {
        LOOM_CHECK(c.c[size_t(i)] >= 0 && c.c[size_t(i)] < sizes_[size_t(i)],
                   "topology: {} coordinate {} outside size {}", axis_name(Axis(i)),
                   c.c[size_t(i)], sizes_[size_t(i)]);
        rank += c.c[size_t(i)] * strides_[size_t(i)];
    }
    return rank;
}

std::vector<int> Topology::group_ranks(const std::vector<Axis>& axes, int rank) const {
    Coords base = coords_of(rank);
    std::array<bool, k_n_axes> in_group{};
    for (Axis a : axes) in_group[size_t(a)] = true;
    // Walk every combination of coordinates on the group's axes (an odometer),
    // keeping the rest fixed at `rank`'s coordinates.
    std::vector<int> ranks;
    Coords c = base;
    for (int i = 0; i < k_n_axes; ++i)
        if (in_group[size_t(i)]) c.c[size_t(i)] = 0;
    while (true) {
        ranks.push_back(rank_of(c));
        int i = 0;
        for (; i < k_n_axes; ++i) {
            if (!in_group[size_t(i)]) continue;
            if (++c.c[size_t(i)] < sizes_[size_t(i)]) break;
            c.c[size_t(i)] = 0;
        }
        if (i == k_n_axes) break;
    }
    std::sort(ranks.begin(), ranks.end());
    return ranks;
}

std::vector<std::vector<int>> Topology::all_groups(const std::vector<Axis>& axes) const {
    std::vector<std::vector<int>> groups;
    std::vector<bool> seen(static_cast<size_t>(world_size_), false);
    for (int r = 0; r < world_size_; ++r) {
        if (seen[size_t(r)]) continue;
        groups.push_back(group_ranks(axes, r));
        for (int member : groups.back()) seen[size_t(member)] = true;
    }
    return groups;
}

std::string Topology::describe_rank(int rank) const {
    Coords c = coords_of(rank);
    std::string grid, coords;
    for (Axis a : {Axis::dp, Axis::cp, Axis::pp, Axis::tp}) {
        if (a == Axis::cp && cp_size() == 1) continue;
        std::string upper(axis_name(a));
        for (char& ch : upper) ch = char(ch - 'a' + 'A');
        grid += fmt::format("{}{}{}", grid.empty() ? "" : "-", upper, size(a));
        coords += fmt::format("{}{} {}", coords.empty() ? "" : ", ", axis_name(a), c[a]);
    }
    return fmt::format("{} rank {} = ({})", grid, rank, coords);
}

std::string Topology::to_string() const { return describe_rank(rank_); }

}  // namespace loom
