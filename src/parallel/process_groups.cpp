// ProcessGroups: one split per axis set, in a fixed order on every rank (each
// split is a collective over the world).
#include "parallel/process_groups.h"

#include "core/check.h"

namespace loom {

ProcessGroups process_groups_create(Communicator& world, const Topology& topo) {
    LOOM_CHECK(world.size() == topo.world_size() && world.rank() == topo.rank(),
               "process groups: topology {} (world of {}) does not match communicator '{}' "
               "(rank {} of {})",
               topo.to_string(), topo.world_size(), world.name(), world.rank(), world.size());
    ProcessGroups g;
    g.dp = world.split(topo.group_ranks({Axis::dp}), "dp");
    g.tp = world.split(topo.group_ranks({Axis::tp}), "tp");
    g.pp = world.split(topo.group_ranks({Axis::pp}), "pp");
    g.cp = world.split(topo.group_ranks({Axis::cp}), "cp");
    g.mp = world.split(topo.group_ranks({Axis::tp, Axis::pp}), "mp");
    // Middle stages pass their slice's pair without being in it: they take part
    // in the split and get nullptr.
    g.tie = world.split(topo.tie_group(), "tie");
    LOOM_ASSERT(g.pp->rank() == topo.pp_rank() && g.tp->rank() == topo.tp_rank() &&
                    g.dp->rank() == topo.dp_rank(),
                "process groups: group ranks disagree with {}", topo.to_string());
    return g;
}

}  // namespace loom
