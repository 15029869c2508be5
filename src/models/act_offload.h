// ActOffload: activation offloading (SMP's offload_activations and its
// activation_loading_horizon) on any Backend, through its copy queue and
// markers (backend/backend.h).
//
// Under activation checkpointing the only activations kept from forward to
// backward are the inputs of the checkpointed applications (hidden states).
// Offloaded, the n of them share a ring of R = min(horizon + 1, n) device
// slots (at least 2 when two consecutive hidden states are offloaded, so that
// no application reads and writes one slot); input i lives in slot i % R, and
// its host copy at i in a host buffer.
//   forward:  before slot i % R is written again, compute waits for the
//             copy-out of its previous occupant; once the application reading
//             input i is enqueued, the copy queue (after a marker on compute)
//             copies it out. The last R inputs are never overwritten in
//             forward, so they neither go out nor come back.
//   backward: walking down, before application a the copy queue brings back
//             the next inputs at or below a (highest first) while fewer than
//             R slots hold inputs not yet consumed, each after compute has
//             enqueued the backward of its slot's previous occupant; compute
//             waits for a copy-in only right before the recompute that reads
//             it. So at most R inputs occupy device memory and the copies
//             overlap the layers above.
// Hidden-state indices are the model's application indices (the input of
// application h); what is not offloaded is none of this class's business.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/storage.h"

namespace loom {

class ActOffload {
  public:
    // `hidden`: the offloaded hidden states, increasing; `bytes`: the size of
    // one. Allocates the host buffer and the markers (none when empty).
    void plan(Backend& be, std::vector<int64_t> hidden, int64_t horizon, size_t bytes);
    bool active() const { return !hidden_.empty(); }
    // R, the device slots the caller provides (set_slot) after plan().
    int64_t ring_size() const { return R_; }
    static int64_t ring_size(const std::vector<int64_t>& hidden, int64_t horizon);
    void set_slot(int64_t r, void* p) { ring_[size_t(r)] = p; }
    // The slot holding hidden state h, or null when h is not offloaded.
    void* slot_of(int64_t h) const;
    bool offloaded(int64_t h) const { return index(h) >= 0; }

    // Forward, around the writer and the reader of hidden state h.
    void before_write(int64_t h);
    void after_read(int64_t h);
    // Backward: once before the walk down, then for each application a.
    void begin_backward();
    void prefetch_for(int64_t a);
    void wait(int64_t h);     // before the recompute that reads h
    void release(int64_t h);  // after the last read of h is enqueued

  private:
    int64_t index(int64_t h) const {
        return h >= 0 && h < int64_t(index_.size()) ? index_[size_t(h)] : -1;
    }
    // Inputs below this index leave the device in forward; the rest stay.
    int64_t first_resident() const { return int64_t(hidden_.size()) - R_; }
    size_t slot(int64_t i) const { return size_t(i % R_); }
    char* host(int64_t i) const { return static_cast<char*>(host_->data()) + size_t(i) * bytes_; }

    Backend* be_ = nullptr;
    std::vector<int64_t> hidden_;  // offloaded hidden states, increasing
    std::vector<int64_t> index_;   // hidden state -> position in hidden_, or -1
    int64_t R_ = 0;
    size_t bytes_ = 0;
    std::vector<void*> ring_;             // (R) device slots
    std::shared_ptr<Storage> host_;       // (n, bytes) host copies
    std::unique_ptr<Backend::Marker> read_;  // compute, after a reader was enqueued
    // Per slot: its copy-out finished, its copy-in finished, and compute has
    // enqueued the backward of its occupant.
    std::vector<std::unique_ptr<Backend::Marker>> out_done_, in_done_, used_;
    int64_t next_in_ = -1;    // the next input to bring back, walking down
    int64_t occupied_ = 0;    // slots holding inputs backward has not consumed
};

}  // namespace loom
