// ZeRO-1/2 on GPUs over NCCL: the GpuGradSync that reduce-scatters gradient
// buckets into this rank's shard and gives the executor (DeviceStage::set_shard)
// the collectives of its sharded update. Internal to make_nccl_grad_sync.
#pragma once

#if defined(LOOM_HAVE_NCCL)

#include <memory>

#include "parallel/gpu_grad_sync_api.h"

namespace loom {

class CommNccl;
class DeviceStage;

std::unique_ptr<GpuGradSync> make_nccl_zero_sync(std::unique_ptr<CommNccl> comm, DeviceStage& model,
                                                 int device, const GpuGradSyncOptions& options);

}  // namespace loom

#endif  // LOOM_HAVE_NCCL
