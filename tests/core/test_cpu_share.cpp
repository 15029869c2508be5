// cpu_share: the cgroup quota read from v1 and v2 trees laid out in a
// temporary folder, and the thread rule (affinity, quota, ranks per node).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/cpu_share.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;

class CgroupTree : public ::testing::Test {
  protected:
    void SetUp() override {
        root_ = fs::temp_directory_path() /
                ("loom_cgroup_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                 "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(root_);
        fs::create_directories(root_);
    }
    void TearDown() override { fs::remove_all(root_); }
    void write(const std::string& rel, const std::string& text) {
        fs::create_directories((root_ / rel).parent_path());
        std::ofstream(root_ / rel) << text;
    }
    std::string root() const { return root_.string(); }
    fs::path root_;
};

TEST_F(CgroupTree, V2QuotaOfTheProcessCgroup) {
    write("kube/pod1/cpu.max", "150000 100000\n");
    EXPECT_DOUBLE_EQ(cgroup_cpu_quota("0::/kube/pod1\n", root()), 1.5);
}

TEST_F(CgroupTree, V2TightestAncestorWins) {
    write("kube/cpu.max", "100000 100000\n");
    write("kube/pod1/cpu.max", "max 100000\n");
    EXPECT_DOUBLE_EQ(cgroup_cpu_quota("0::/kube/pod1\n", root()), 1.0);
    write("kube/pod1/cpu.max", "50000 100000\n");
    EXPECT_DOUBLE_EQ(cgroup_cpu_quota("0::/kube/pod1\n", root()), 0.5);
}

TEST_F(CgroupTree, V2MaxOrMissingIsNoQuota) {
    write("a/cpu.max", "max 100000\n");
    EXPECT_EQ(cgroup_cpu_quota("0::/a\n", root()), 0);
    EXPECT_EQ(cgroup_cpu_quota("0::/nowhere\n", root()), 0);
    EXPECT_EQ(cgroup_cpu_quota("", root()), 0);
}

TEST_F(CgroupTree, V1CfsQuotaUnderCpuController) {
    write("cpu,cpuacct/docker/c1/cpu.cfs_quota_us", "200000\n");
    write("cpu,cpuacct/docker/c1/cpu.cfs_period_us", "100000\n");
    const std::string proc = "4:memory:/docker/c1\n3:cpu,cpuacct:/docker/c1\n0::/\n";
    EXPECT_DOUBLE_EQ(cgroup_cpu_quota(proc, root()), 2.0);
    write("cpu,cpuacct/docker/c1/cpu.cfs_quota_us", "-1\n");
    EXPECT_EQ(cgroup_cpu_quota(proc, root()), 0);
}

TEST(CpuShareRule, QuotaRanksAndAffinity) {
    CpuShare s = cpu_share_of(16, 0, 1);
    EXPECT_EQ(s.threads, 16);
    EXPECT_TRUE(s.why.empty());
    s = cpu_share_of(16, 2.0, 1);
    EXPECT_EQ(s.threads, 2);
    EXPECT_NE(s.why.find("quota"), std::string::npos) << s.why;
    EXPECT_EQ(cpu_share_of(16, 1.5, 1).threads, 2);  // a part of a core rounds up
    EXPECT_EQ(cpu_share_of(16, 0.3, 1).threads, 1);
    EXPECT_EQ(cpu_share_of(16, 32.0, 1).threads, 16);  // the mask still caps it
    s = cpu_share_of(16, 0, 4);
    EXPECT_EQ(s.threads, 4);
    EXPECT_NE(s.why.find("4 ranks"), std::string::npos) << s.why;
    EXPECT_EQ(cpu_share_of(2, 0, 4).threads, 1);  // never below one
    EXPECT_EQ(cpu_share_of(8, 4.0, 2).threads, 2);
}

}  // namespace
}  // namespace loom::test
