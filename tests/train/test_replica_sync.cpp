// Data-parallel replicas agree before step 0: CommReplicaSync over CommLocal
// ranks sums scalars and names the rank whose job or data differs.
#include <gtest/gtest.h>

#include <atomic>

#include "comm/comm_local.h"
#include "core/check.h"
#include "train/replica_sync_comm.h"

namespace loom {
namespace {

TEST(ReplicaSync, SumsOverRanks) {
    comm_local_run(3, [](Communicator& c) {
        CommReplicaSync s(c);
        EXPECT_EQ(s.dp_size(), 3);
        EXPECT_EQ(s.dp_rank(), c.rank());
        EXPECT_DOUBLE_EQ(s.sum(double(c.rank()) + 0.5), 0.5 + 1.5 + 2.5);
        EXPECT_EQ(s.is_main(), c.rank() == 0);
    });
}

TEST(ReplicaSync, SameFingerprintsPass) {
    comm_local_run(4, [](Communicator& c) {
        CommReplicaSync s(c);
        s.check_same(fingerprint64("job: same"), "job");
    });
}

TEST(ReplicaSync, DifferentDataPlanNamesTheRank) {
    std::atomic<int> errors{0};
    comm_local_run(4, [&](Communicator& c) {
        CommReplicaSync s(c);
        const std::string plan = c.rank() == 2 ? "1000 examples" : "1001 examples";
        try {
            s.check_same(fingerprint64(plan), "data plan");
        } catch (const Error& e) {
            const std::string m = e.what();
            // Every rank hears which one differs (rank 2 differs from rank 0).
            EXPECT_NE(m.find("rank 2"), std::string::npos) << m;
            EXPECT_NE(m.find("data plan"), std::string::npos) << m;
            ++errors;
        }
    });
    EXPECT_EQ(errors.load(), 4);
}

TEST(ReplicaSync, FingerprintDependsOnEveryByte) {
    EXPECT_NE(fingerprint64("abc"), fingerprint64("abd"));
    EXPECT_NE(fingerprint64("abc"), fingerprint64("abcd"));
    EXPECT_EQ(fingerprint64("abc"), fingerprint64("abc"));
}

}  // namespace
}  // namespace loom
