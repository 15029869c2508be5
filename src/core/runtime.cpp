#include "core/runtime.h"

#include <malloc.h>
#include <omp.h>

#include <cstdlib>

namespace loom {

void runtime_init(const RuntimeOptions& opts) {
    static bool done = false;
    if (!done) {
        mallopt(M_MMAP_THRESHOLD, 1 << 30);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
        mallopt(M_TOP_PAD, 64 << 20);
        done = true;
    }
    if (opts.threads > 0) omp_set_num_threads(opts.threads);
}

int runtime_threads() { return omp_get_max_threads(); }

}  // namespace loom
