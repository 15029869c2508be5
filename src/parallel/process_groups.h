// ProcessGroups: the communicators a training rank uses, split from the world
// along a Topology (Megatron's ProcessGroupCollection, nanotron's `pg=`).
//
// Which collective runs on which group:
//   dp   gradient all-reduce / ZeRO reduce-scatter + all-gather (same pp, tp, cp)
//   tp   tensor-parallel regions (Megatron f/g), vocab-parallel cross-entropy
//   pp   activations and gradients between stages (group rank = pp stage)
//   cp   reserved (context parallel); size 1 today
//   mp   model-parallel (tp x pp) group: one replica, e.g. for grad-norm sums
//   tie  first + last stage of one (dp, tp, cp) slice: tied embedding grads;
//        nullptr on middle stages
// Every group's rank order is ascending world rank, so tp->rank() == tp coord
// and pp->rank() == pp stage.
#pragma once

#include <memory>

#include "comm/comm.h"
#include "parallel/topology.h"

namespace loom {

struct ProcessGroups {
    std::unique_ptr<Communicator> dp;
    std::unique_ptr<Communicator> tp;
    std::unique_ptr<Communicator> pp;
    std::unique_ptr<Communicator> cp;
    std::unique_ptr<Communicator> mp;
    std::unique_ptr<Communicator> tie;  // nullptr on middle pipeline stages
};

// Collective over `world` (every rank calls it, same topology config).
// Checks that the topology's rank and size agree with the world's.
ProcessGroups process_groups_create(Communicator& world, const Topology& topo);

}  // namespace loom
