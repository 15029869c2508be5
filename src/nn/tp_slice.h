// ModelTp: the tensor-parallel slice of a model that one process builds.
//
// Megatron's tp rank in the tp group: column/row-parallel linears and the
// vocab-parallel embedding keep this rank's share of their rows. The default
// builds the whole model. `comm` is the tp group (CommMpi, CommLocal): its
// scalars (norms, counts) go there. `buffers` is its twin that reaches the
// memory of the table's backend (NCCL on the backend's stream for a GPU),
// where the regions' collectives on activations run; null when `comm`
// itself does (the CPU, and host memory behind any backend). Neither is
// owned; both must outlive the model.
#pragma once

namespace loom {

class Communicator;  // comm/comm.h; kept out so this header needs no MPI

struct ModelTp {
    int rank = 0;
    int size = 1;
    Communicator* comm = nullptr;
    Communicator* buffers = nullptr;
    bool active() const { return size > 1; }
    // Where the collectives on activations and logits run.
    Communicator* buffer_comm() const { return buffers ? buffers : comm; }
};

}  // namespace loom
