// CommReplicaSync: the data-parallel replicas' agreements (replica_sync_comm.h).
#include "train/replica_sync_comm.h"

#include <vector>

#include "comm/comm.h"
#include "core/check.h"

namespace loom {

int64_t CommReplicaSync::dp_rank() const {
    return dp_.rank();
}
int64_t CommReplicaSync::dp_size() const {
    return dp_.size();
}

bool CommReplicaSync::is_main() const {
    return world_ ? world_->rank() == 0 : dp_.rank() == 0;
}

bool CommReplicaSync::any(bool flag) {
    double v = flag ? 1.0 : 0.0;
    (world_ ? *world_ : dp_).all_reduce(&v, 1, DType::f64, ReduceOp::sum)->wait();
    return v > 0;
}

double CommReplicaSync::max_over_job(double local) {
    (world_ ? *world_ : dp_).all_reduce(&local, 1, DType::f64, ReduceOp::max)->wait();
    return local;
}

double CommReplicaSync::sum(double local) {
    dp_.all_reduce(&local, 1, DType::f64, ReduceOp::sum)->wait();
    return local;
}

void CommReplicaSync::check_same(uint64_t fingerprint, const std::string& what) {
    std::vector<int64_t> all(size_t(dp_.size()));
    const int64_t mine = int64_t(fingerprint);
    dp_.all_gather(&mine, all.data(), 1, DType::i64)->wait();
    for (size_t r = 1; r < all.size(); ++r)
        LOOM_CHECK(all[r] == all[0],
                   "data-parallel rank {} (world rank {}) has a different {} than rank 0 "
                   "(fingerprint {:016x} vs {:016x}): every rank must run the same job on the "
                   "same data",
                   r, dp_.world_ranks()[r], what, uint64_t(all[r]), uint64_t(all[0]));
}

uint64_t fingerprint64(const std::string& bytes, uint64_t seed) {
    uint64_t h = seed;
    for (unsigned char c : bytes) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return h;
}

}  // namespace loom
