// Process-wide set-up that every entry point (CLI, tests, benchmarks) runs once.
//
// NOTE: first touch of fresh pages costs ~14 us per 4 KiB on the target
// machines, so freed memory must stay mapped: runtime_init raises glibc's mmap
// and trim thresholds before any large allocation.
#pragma once

namespace loom {

struct RuntimeOptions {
    int threads = 0;  // 0 = all cores (OMP_NUM_THREADS if set)
};

void runtime_init(const RuntimeOptions& opts = {});
int runtime_threads();

}  // namespace loom
