// runtime_release_freed_memory: what a one-off phase freed under
// runtime_init's thresholds (kept mapped) leaves the resident set.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime.h"

namespace loom {
namespace {

int64_t resident_kib() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
    return -1;
}

TEST(RuntimeMemory, FreedHeapPagesLeaveTheResidentSet) {
#if !defined(__GLIBC__)
    GTEST_SKIP() << "glibc's heap only";
#endif
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP()
        << "AddressSanitizer's allocator keeps freed blocks in its quarantine, not glibc's heap";
#endif
    runtime_init();
    if (resident_kib() < 0) GTEST_SKIP() << "no /proc/self/status";
    // Like tokenizing: many small blocks, touched, then freed, with one that
    // stays allocated above them (so the heap's top cannot simply shrink).
    std::vector<std::unique_ptr<char[]>> blocks;
    for (int i = 0; i < 64 * 1024; ++i) {
        blocks.emplace_back(new char[1000]);
        std::memset(blocks.back().get(), 1, 1000);
    }
    auto kept = std::make_unique<char[]>(1000);
    std::memset(kept.get(), 1, 1000);
    blocks.clear();
    const int64_t before = resident_kib();
    runtime_release_freed_memory();
    const int64_t released_mib = (before - resident_kib()) / 1024;
    // 64 MiB were freed; the thresholds keep them resident until released.
    EXPECT_GT(released_mib, 40) << "released " << released_mib << " MiB of 64 MiB freed";
}

}  // namespace
}  // namespace loom
