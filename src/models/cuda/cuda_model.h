// CudaModel: a StackModel's forward, backward and AdamW step on one GPU.
//
// The CPU model stays the single source of truth (models/stack_view.h): the
// executor reads its modules (sizes, layouts, activations, dropout sites, task
// head) and its ParamTable (row offsets, tying, decay and trainable flags),
// and replays the same op sequence with the CUDA kernels of src/ops/cuda, so
// no family is written twice. Device buffers mirror the table's flat layout:
// fp32 master weights, the compute copy and the gradients in the compute type
// (the same buffer as the master in fp32), and the AdamW moments in fp32.
//
//   auto cpu = build_model(config); cpu->load(...);
//   auto gpu = CudaModel::create(*cpu, {.device = 0, .dtype = DType::bf16});
//   LossSum l = gpu->forward(inputs, dropout);   // host inputs, loss synchronised
//   gpu->backward(1.0 / l.count);                // grads += d(scale * loss sum)
//   gpu->step(lr, clip);                         // AdamW on the device, grads zeroed
//   gpu->download_params();                      // master weights -> cpu->params()
//
// The dropout masks, the masking rules and the loss normalisation are the
// CPU's, so the same batch gives the CPU's loss and gradients within the
// compute type's rounding (fp32: op rounding only). A model sharded for
// tensor parallelism runs its slice, posting the Megatron collectives its
// modules declare on CudaModelOptions::tp. A pipeline stage
// (Model::placement().part) runs its layer applications, with the embeddings
// only on the first stage and the head only on the last; its hidden states
// cross stages on the device (forward_stage, backward_stage), and
// make_instance gives it one set of activations per micro-batch in flight
// (parallel/gpu_pipeline.h drives them through the schedule).
//
// This header includes no CUDA header, so host code of any build may include
// it; the implementation exists only in a CUDA build (LOOM_HAVE_CUDA), and
// callers guard their calls with that macro.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/tensor.h"
#include "models/model.h"
#include "ops/adamw.h"
#include "ops/matmul.h"
#include "optim/optimizer.h"
#include "parallel/device_stage.h"

namespace loom {

class Communicator;

// CudaModelOptions::dtype (DType, ops/matmul.h) is the compute type:
// activations, the parameter copy and gradients. fp16 needs a loss scale
// (the caller's: backward(scale / count), step(lr, 1 / scale)).
// CudaModelOptions::optimizer (OptimizerKind, optim/optimizer.h) is the update
// step() applies, with optim/adamw.h, lamb.h and sgd.h's semantics
// (hyperparameters from CudaModelOptions::adamw: betas, eps, weight_decay).

struct CudaModelOptions {
    int device = 0;
    DType dtype = DType::bf16;
    AdamWParams adamw;  // lr is passed per step
    OptimizerKind optimizer = OptimizerKind::adamw;
    bool lamb_bias_correction = true;  // LambParams::bias_correction
    // Weight decay on every trainable row (optim/adamw.h DecayPolicy::all, as
    // the HF fixtures' AdamW step); false: ParamRow::decay decides.
    bool decay_all = false;
    // Activation checkpointing (distribution.activation_checkpointing /
    // checkpoint_every): application a with a % k == 0 keeps only its input
    // and recomputes its activations right before its backward; 0: off.
    int64_t checkpoint_every = 0;
    // distribution.offload_activations: those kept inputs go to pinned host
    // memory on a copy stream after their forward and come back ahead of
    // their backward, at most `loading_horizon` + 1 in flight on the device
    // (activation_loading_horizon).
    bool offload_activations = false;
    int64_t loading_horizon = 4;
    // Fused (flash) attention where its kernels cover the head size and every
    // query row sees a key; false: always the unfused kernels (which save the
    // (B, NH, T, T) probabilities).
    bool fused_attention = true;
    // Tensor parallelism: the device twin (CommNccl, same ranks) of the tp
    // group the model was sharded on (Model::placement().tp). The executor posts
    // the collectives its modules declare (Linear::tp_role, a vocab-parallel
    // Embedding, a vocab-parallel head) on it, ordered on its compute stream.
    // Must outlive the executor; null when the model is not sharded.
    Communicator* tp = nullptr;
};

class CudaModel : public DeviceStage {
  public:

    // Builds the executor for `cpu` (a whole StackModel whose parameters are
    // loaded or initialised) and uploads its parameters. `cpu` must outlive
    // it: the executor reads its modules and downloads into its table.
    static std::unique_ptr<CudaModel> create(Model& cpu, const CudaModelOptions& options);
    // "" when this machine can run create(); else why not ("no CUDA device").
    static std::string unavailable_reason();

    // forward, backward, the norms, step and zero_grad: DeviceStage's.
    double grad_norm_sq_excluding(
        const std::vector<std::pair<int64_t, int64_t>>& excluded) override;
    virtual int64_t step_count() const = 0;

    // Host <-> device: the CPU table's parameters (fp32) and gradients.
    virtual void upload_params() = 0;
    virtual void download_params() = 0;
    virtual void download_grads() = 0;
    // AdamW moments by torch's names ("exp_avg.<name>", "exp_avg_sq.<name>"),
    // host copies: the CPU optimizer's checkpoint layout.
    // Sharded, optimizer_state() is collective over dp (every rank gets the
    // whole state) and load_optimizer_state() keeps this rank's part.
    virtual std::map<std::string, Tensor> optimizer_state() = 0;
    virtual void load_optimizer_state(const std::map<std::string, Tensor>& state, int64_t step) = 0;
    // ZeRO-1/2: from now on the optimizer state holds this rank's shard only
    // (the current state's part is kept), step() reads shard.grads, and
    // grad_norm_sq() sums over every rank's shard. Set once, before training;
    // a CudaShard without collectives detaches it (its sync is gone: step,
    // the norm and the state then throw).
    void set_shard(CudaShard shard) override;

    // Masked LM (Model::set_logits_scope): labelled_positions runs the head on
    // the labelled rows only (~7x less decoder work at 15% masking, the same
    // loss and gradients) and outputs "labelled_logits" (M, V) instead of
    // "logits". Other heads ignore it.
    void set_logits_scope(LogitsScope scope) override = 0;
    // The last forward's outputs ("logits" or "labelled_logits",
    // "start_logits", "end_logits"), copied to the host in fp32.
    virtual std::map<std::string, Tensor> outputs() = 0;

    // Data parallelism: during backward() the executor calls hook(begin, end)
    // for ranges of the flat gradient buffer whose gradients are final (as
    // Model::GradReadyHook), once the ops producing them are enqueued on
    // compute_stream(). A communicator that orders itself after that stream
    // (CommNccl) can start their reduction while the rest of backward runs.
    void set_grad_ready_hook(GradReadyHook hook) override = 0;
    // The device gradient buffer (flat_numel() elements of grad_dtype(): f32,
    // bf16 or f16 as the compute type) and the stream the model's ops run on
    // (a cudaStream_t), for the data-parallel reduction.
    void* grads_device() override = 0;
    DType grad_dtype() const override = 0;
    int64_t flat_numel() const override = 0;
    void* compute_stream() override = 0;

    virtual void synchronize() = 0;
    // Device bytes this executor holds (parameters, state, activations, workspace).
    virtual int64_t allocated_bytes() const = 0;
    // Peak device memory in use since create(), as the driver reports it.
    virtual int64_t peak_device_bytes() = 0;
    virtual std::string device_name() const = 0;

    // ---- pipeline stages (Model::placement().part) ----
    // Hidden states cross stages on the device: (B, T, C) in grad_dtype()
    // (the compute type, so a stage boundary rounds nothing one device would
    // not), ordered on compute_stream().
    // forward(in, dropout) with the previous stage's output as the input of
    // the first layer application; null on a stage with the embeddings. A
    // stage without the head returns an empty LossSum and does not wait for
    // the device.
    LossSum forward_stage(const ModelInputs& in, const DropoutPlan& dropout,
                          const void* stage_input) override;
    // backward(loss_scale) from the gradient of the stage output on a stage
    // without the head (null on the last stage).
    void backward_stage(double loss_scale, const void* d_stage_output) override;
    // After forward on a stage without the head: its output. After backward
    // on a stage without the embeddings: the gradient of its input. Device
    // pointers valid until this instance's next forward.
    const void* stage_output() const override;
    const void* stage_input_grad() const override;
    // Another set of activations for the same parameters (one per micro-batch
    // in flight, as PipelineParallel keeps one Model per micro-batch): an
    // executor for `cpu` (a model with this one's table layout: another
    // instance of the stage, or another chunk of the rank under interleaved
    // schedules) that shares this one's device parameters, gradients, stream
    // and tp group, and has no optimizer (step, the state and set_shard stay
    // here). This executor must outlive it.
    virtual std::unique_ptr<CudaModel> make_instance(Model& cpu);
    // DeviceStage's: make_instance of the Model the schedules hold.
    std::unique_ptr<DeviceStage> stage_instance(StageModel& cpu) override {
        return make_instance(dynamic_cast<Model&>(cpu));
    }
    // A device buffer of at least `bytes` kept under `key` until the executor
    // goes (pipeline messages). Asking again for more replaces it: the old
    // one must no longer be in use.
    void* message_buffer(int64_t key, int64_t bytes) override;
    // The gradients of table rows `rows`, in order, packed into the device
    // buffer `dst` (the rows' numel summed, grad_dtype()), zeros for rows this
    // stage does not hold; unpack_grads writes the held ones back. Ordered
    // on compute_stream() (the shared rows' sum over pp runs in between).
    void pack_grads(const std::vector<int>& rows, void* dst) override;
    void unpack_grads(const std::vector<int>& rows, const void* src) override;
    // Orders a device group's later operations (a CommNccl on this device)
    // after the work this executor queues: the pipeline's pp twin.
    void attach_group(Communicator& group) override;
};

// Stand-ins without range support (tests) answer only the whole-buffer case.
inline double CudaModel::grad_norm_sq_excluding(
    const std::vector<std::pair<int64_t, int64_t>>& excluded) {
    LOOM_CHECK(excluded.empty(), "this CUDA model cannot leave gradient ranges out of the norm");
    return grad_norm_sq();
}

inline void CudaModel::set_shard(CudaShard) {
    LOOM_FAIL("this CUDA model has no sharded optimizer");
}

// Stand-ins without pipeline support (tests) refuse stage calls.
inline LossSum CudaModel::forward_stage(const ModelInputs& in, const DropoutPlan& dropout,
                                        const void* stage_input) {
    LOOM_CHECK(stage_input == nullptr, "this CUDA model runs no pipeline stages");
    return forward(in, dropout);
}
inline void CudaModel::backward_stage(double loss_scale, const void* d_stage_output) {
    LOOM_CHECK(d_stage_output == nullptr, "this CUDA model runs no pipeline stages");
    backward(loss_scale);
}
inline const void* CudaModel::stage_output() const {
    LOOM_FAIL("this CUDA model runs no pipeline stages");
}
inline const void* CudaModel::stage_input_grad() const {
    LOOM_FAIL("this CUDA model runs no pipeline stages");
}
inline std::unique_ptr<CudaModel> CudaModel::make_instance(Model&) {
    LOOM_FAIL("this CUDA model cannot make instances for pipeline micro-batches");
}
inline void* CudaModel::message_buffer(int64_t, int64_t) {
    LOOM_FAIL("this CUDA model keeps no message buffers");
}
inline void CudaModel::pack_grads(const std::vector<int>&, void*) {
    LOOM_FAIL("this CUDA model cannot pack gradient rows");
}
inline void CudaModel::unpack_grads(const std::vector<int>&, const void*) {
    LOOM_FAIL("this CUDA model cannot unpack gradient rows");
}
inline void CudaModel::attach_group(Communicator&) {
    LOOM_FAIL("this CUDA model cannot order a device group after its stream");
}

}  // namespace loom
