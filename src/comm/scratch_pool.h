// ScratchPool: host buffers a communicator reuses between calls. Fresh pages
// fault on first touch (slow on the hosts Loom runs on), and buffers above
// glibc's mmap threshold (32 MiB at most) come back fresh from every malloc:
// a 64 MiB reduce-scatter's scratch cost 16k page faults a call.
//
// Single-threaded like the communicators that own it: take() and the
// buffers' release run on the thread that drives communication.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace loom {

class ScratchPool : public std::enable_shared_from_this<ScratchPool> {
  public:
    // At least `bytes`, uninitialised; back in the pool when the last copy of
    // the pointer goes (or freed, if the pool went first).
    std::shared_ptr<std::byte[]> take(size_t bytes) {
        std::unique_ptr<std::byte[]> buf;
        size_t size = bytes;
        size_t best = free_.size();
        for (size_t i = 0; i < free_.size(); ++i)
            if (free_[i].second >= bytes &&
                (best == free_.size() || free_[i].second < free_[best].second))
                best = i;
        if (best < free_.size()) {
            buf = std::move(free_[best].first);
            size = free_[best].second;
            free_.erase(free_.begin() + std::ptrdiff_t(best));
        } else {
            buf.reset(new std::byte[bytes]);
        }
        std::weak_ptr<ScratchPool> pool = weak_from_this();
        return std::shared_ptr<std::byte[]>(buf.release(), [pool, size](std::byte* p) {
            if (auto alive = pool.lock())
                alive->free_.emplace_back(std::unique_ptr<std::byte[]>(p), size);
            else
                delete[] p;
        });
    }
    size_t pooled() const { return free_.size(); }

  private:
    std::vector<std::pair<std::unique_ptr<std::byte[]>, size_t>> free_;
};

}  // namespace loom
