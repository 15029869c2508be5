// DeviceStage: what the GPU layout runners (parallel/gpu_pipeline.h,
// parallel/cuda/gpu_grad_sync.h, gpu_zero_sync.h) need of a model's device
// executor, so that parallel/ does not see models/. models/cuda/cuda_model.h's
// CudaModel implements it and documents each call; device pointers are void*
// and streams too, so no CUDA header is needed here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/model_inputs.h"
#include "nn/module.h"
#include "parallel/stage_model.h"

namespace loom {

class Communicator;

// ZeRO-1/2 on GPUs (parallel/zero.h's layout, from the data-parallel gradient
// sync): the pieces of the flat buffer this rank updates and the dp
// collectives the update needs. Every collective is ordered after the work
// queued on the executor's compute stream, and that stream waits for it on
// the device (no host block).
struct CudaShard {
    struct Chunk {
        int64_t flat_begin = 0, flat_end = 0;  // valid elements of the flat buffer
        int64_t shard_begin = 0;               // where they start in the shard buffers
    };
    std::vector<Chunk> chunks;     // this rank's chunk of every bucket (grad_sync.h ShardPiece)
    int64_t numel = 0;             // shard buffers' length
    const float* grads = nullptr;  // (numel) device: the reduced gradient shard
    // In-place sum over dp of n device doubles (the norms' partial sums).
    std::function<void(double* sums, int64_t n)> all_reduce_sum;
    // Every rank's updated chunks of the fp32 master weights into every rank's copy.
    std::function<void(float* master)> gather_params;
    // A (numel) shard buffer of every rank into a (flat_numel) device buffer.
    std::function<void(const float* shard, float* full)> gather_flat;
};

class DeviceStage {
  public:
    virtual ~DeviceStage() = default;

    virtual void set_logits_scope(LogitsScope scope) = 0;

    // Runs the model on host inputs (copied to the device); returns the loss
    // sum and count when the inputs carry labels (the call waits for them).
    virtual LossSum forward(const ModelInputs& in, const DropoutPlan& dropout) = 0;
    // Accumulates d(loss_scale * loss_sum) into the device gradients.
    virtual void backward(double loss_scale) = 0;
    // Sum of squared gradients over the trainable rows (fp64, deterministic).
    virtual double grad_norm_sq() = 0;
    // The same outside the flat ranges [begin, end) given (sorted, disjoint):
    // under tensor parallelism the rows tp replicates count on one tp rank
    // only (PipelineParallel::norm_excluded), as Megatron's norm does.
    // Sharded (set_shard): this rank's shard outside those ranges, summed
    // over dp (collective), as grad_norm_sq() is.
    virtual double grad_norm_sq_excluding(
        const std::vector<std::pair<int64_t, int64_t>>& excluded) = 0;
    // Gradients scaled by `grad_scale` (clipping, loss-scale removal), one
    // update with `lr` (the optimizer, optim/flat_optimizer.h), the compute
    // copy refreshed, gradients zeroed. Steps are counted from 1 as torch
    // does. Sharded (set_shard): the shard's update, then the parameters
    // gathered from every rank (collective over dp).
    virtual void step(double lr, double grad_scale = 1.0) = 0;
    virtual void zero_grad() = 0;

    // Data parallelism: final gradient ranges, once their ops are enqueued
    // on compute_stream() (StageModel::GradReadyHook's contract).
    using GradReadyHook = StageModel::GradReadyHook;
    virtual void set_grad_ready_hook(GradReadyHook hook) = 0;
    // The device gradient buffer (flat_numel() elements of grad_dtype()) and
    // the stream the executor's ops run on (a cudaStream_t).
    virtual void* grads_device() = 0;
    virtual DType grad_dtype() const = 0;
    virtual int64_t flat_numel() const = 0;
    virtual void* compute_stream() = 0;
    // ZeRO-1/2: the optimizer keeps this rank's shard only.
    virtual void set_shard(CudaShard shard) = 0;

    // Pipeline stages: hidden states (B, T, C) in grad_dtype() cross stages
    // on the device; `stage_input` is null on the stage with the embeddings,
    // `d_stage_output` on the stage with the head.
    virtual LossSum forward_stage(const ModelInputs& in, const DropoutPlan& dropout,
                                  const void* stage_input) = 0;
    virtual void backward_stage(double loss_scale, const void* d_stage_output) = 0;
    virtual const void* stage_output() const = 0;
    virtual const void* stage_input_grad() const = 0;
    // Another set of activations over these device parameters, for `cpu`
    // (the schedules' instance of the same stage or another chunk).
    virtual std::unique_ptr<DeviceStage> stage_instance(StageModel& cpu) = 0;
    // A device buffer of at least `bytes` kept under `key` (pipeline messages).
    virtual void* message_buffer(int64_t key, int64_t bytes) = 0;
    // Rows shared between stages: their gradients packed into / unpacked
    // from one device buffer, ordered on compute_stream().
    virtual void pack_grads(const std::vector<int>& rows, void* dst) = 0;
    virtual void unpack_grads(const std::vector<int>& rows, const void* src) = 0;
    // Orders a device group's later operations after this executor's work.
    virtual void attach_group(Communicator& group) = 0;
};

}  // namespace loom
