// ReplicaSync over a Communicator: data-parallel replicas of one training job
// (one per rank of the dp group) agree on counts, losses, stop decisions and
// the job itself.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "train/trainer.h"

namespace loom {

class Communicator;

class CommReplicaSync : public ReplicaSync {
  public:
    // `world` (pipeline parallelism): the whole job, for is_main and any().
    explicit CommReplicaSync(Communicator& dp, Communicator* world = nullptr)
        : dp_(dp), world_(world) {}
    bool is_main() const override;
    bool any(bool flag) override;
    int64_t dp_rank() const override;
    int64_t dp_size() const override;
    double sum(double local) override;
    // Every rank passes a fingerprint of `what`; throws on every rank, naming
    // the first rank whose fingerprint differs from rank 0's.
    void check_same(uint64_t fingerprint, const std::string& what) override;

  private:
    Communicator& dp_;
    Communicator* world_;
};

// FNV-1a 64 over bytes: a fingerprint for check_same.
uint64_t fingerprint64(const std::string& bytes, uint64_t seed = 1469598103934665603ull);

}  // namespace loom
