// Local rank -> GPU (see local_device.h).
#include "backend/cuda/local_device.h"

#include <cstdlib>
#include <string>

#include "backend/cuda/backend_cuda.h"
#include "core/check.h"

namespace loom {

int launcher_local_rank() {
    for (const char* name :
         {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"}) {
        const char* value = std::getenv(name);
        if (value == nullptr || *value == '\0') continue;
        char* end = nullptr;
        const long r = std::strtol(value, &end, 10);
        LOOM_CHECK(*end == '\0' && r >= 0 && r <= 1 << 20,
                   "environment variable {}='{}' is not a local rank (a non-negative integer)",
                   name, value);
        return int(r);
    }
    return -1;
}

int local_device_for_rank(int local_rank, int n_devices) {
    LOOM_CHECK(n_devices >= 1, "no GPU to place local rank {} on", local_rank);
    return local_rank < 0 ? 0 : local_rank % n_devices;
}

int local_device() {
    const int n = cuda_device_count();
    LOOM_CHECK(n >= 1, "no usable CUDA device for this rank: {}", cuda_unavailable_reason());
    return local_device_for_rank(launcher_local_rank(), n);
}

}  // namespace loom
