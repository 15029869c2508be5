// The GPU data-parallel gradient reduction over NCCL (GpuGradSync, see
// parallel/gpu_grad_sync_api.h for the calling sequence). What follows is
// ZeRO-0's all-reduce; ZeRO-1/2 (options.zero_stage) reduce-scatter into a
// shard instead (gpu_zero_sync.cpp), with the same overlap.
//
// Overlap (llm.c's and PyTorch DDP's scheme): the executor's gradient buffer
// is cut into buckets (GradBucketQueue, top of the buffer first). During the
// step's last backward the executor's grad-ready hook reports ranges whose
// gradient kernels are already enqueued on its compute stream; as soon as the
// next bucket in order is complete, its in-place all_reduce(sum) is posted on
// CommNccl's communication stream, which first waits (on the device) for an
// event recorded on the compute stream at that moment. The host never
// blocks: backward keeps enqueuing the lower layers on the compute stream
// while the finished buckets travel, and the two streams only meet again at
// finalize(), where the compute stream waits for the communication stream
// before the norm and AdamW. The buckets that the hook did not start (the
// embeddings, reported last; everything, when overlap is off) start at the
// end of backward.
//
// This header includes no CUDA or NCCL header (the CLI includes it); the
// factory exists only in a build with NCCL (LOOM_HAVE_NCCL).
#pragma once

#include <memory>

#include "parallel/gpu_grad_sync_api.h"

namespace loom {

class DeviceStage;
class Communicator;

#if defined(LOOM_HAVE_NCCL)
// Builds the NCCL twin of the CPU data-parallel group `cpu_dp` on `device`
// (collective over cpu_dp: every rank calls it, each with its own GPU),
// ordered after `model`'s compute stream, and installs `model`'s grad-ready
// hook (removed again by the destructor). model and cpu_dp must outlive the
// result. The NCCL group takes cpu_dp's timeouts.
std::unique_ptr<GpuGradSync> make_nccl_grad_sync(Communicator& cpu_dp, DeviceStage& model, int device,
                                                 const GpuGradSyncOptions& options);
#endif

}  // namespace loom
