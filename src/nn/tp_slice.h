// ModelTp: the tensor-parallel slice of a model that one process builds.
//
// Megatron's tp rank in the tp group: column/row-parallel linears and the
// vocab-parallel embedding keep this rank's share of their rows. The default
// builds the whole model. `comm` is the tp group the regions' collectives run
// on; it is not owned and must outlive the model.
#pragma once

namespace loom {

class Communicator;  // comm/comm.h; kept out so this header needs no MPI

struct ModelTp {
    int rank = 0;
    int size = 1;
    Communicator* comm = nullptr;
    bool active() const { return size > 1; }
};

}  // namespace loom
