// CudaExecutor<T>: the CudaModel implementation (cuda_model.h), activations
// and compute copy in T (float or __nv_bfloat16). Split over files:
// cuda_executor.cpp (buffers, inputs, host transfers, pipeline stages),
// cuda_executor_optim.cpp (the optimizer's buffers and the norms),
// cuda_executor_layers.cpp (embeddings and transformer blocks) and
// cuda_executor_heads.cpp (task heads and losses).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_context.h"
#include "comm/comm.h"
#include "models/cuda/cuda_model.h"
#include "models/cuda/device_arena.h"
#include "models/stack_model.h"
#include "models/stack_view.h"
#include "optim/flat_optimizer.h"
#include "ops/softmax_xent.h"
#include "parallel/norm_ranges.h"
#include "parallel/zero.h"

namespace loom {

template <typename T>
class CudaExecutor final : public CudaModel {
  public:
    // `owner`: make_instance's executor, whose device parameters, gradients
    // and stream this one shares (null: it owns them and the optimizer).
    CudaExecutor(Model& cpu, const CudaModelOptions& options, CudaExecutor* owner = nullptr);
    ~CudaExecutor() override;

    LossSum forward(const ModelInputs& in, const DropoutPlan& dropout) override {
        return forward_stage(in, dropout, nullptr);
    }
    void backward(double loss_scale) override { backward_stage(loss_scale, nullptr); }
    LossSum forward_stage(const ModelInputs& in, const DropoutPlan& dropout,
                          const void* stage_input) override;
    void backward_stage(double loss_scale, const void* d_stage_output) override;
    const void* stage_output() const override;
    const void* stage_input_grad() const override;
    std::unique_ptr<CudaModel> make_instance(Model& cpu) override;
    void* message_buffer(int64_t key, int64_t bytes) override;
    void pack_grads(const std::vector<int>& rows, void* dst) override;
    void unpack_grads(const std::vector<int>& rows, const void* src) override;
    void attach_group(Communicator& group) override;
    double grad_norm_sq() override;
    double grad_norm_sq_excluding(
        const std::vector<std::pair<int64_t, int64_t>>& excluded) override;
    void step(double lr, double grad_scale) override;
    void zero_grad() override;
    int64_t step_count() const override;
    void upload_params() override;
    void download_params() override;
    void download_grads() override;
    std::map<std::string, Tensor> optimizer_state() override;
    void load_optimizer_state(const std::map<std::string, Tensor>& state, int64_t step) override;
    void set_shard(CudaShard shard) override;
    std::map<std::string, Tensor> outputs() override;
    void set_grad_ready_hook(GradReadyHook hook) override { hook_ = std::move(hook); }
    void set_logits_scope(LogitsScope scope) override { scope_ = scope; }
    void* grads_device() override { return grads_; }
    DType grad_dtype() const override;
    int64_t flat_numel() const override { return flat_; }
    void* compute_stream() override { return ctx_.stream(); }
    void synchronize() override { ctx_.synchronize(); }
    int64_t allocated_bytes() const override;
    int64_t peak_device_bytes() override;
    std::string device_name() const override;

  private:
    // Saved activations of one layer application (device, T unless noted).
    struct BlockActs {
        T* qkv = nullptr;      // (N, 3C)
        T* att = nullptr;      // (B, NH, T, T) unfused attention's probabilities
        float* lse = nullptr;  // (B, NH, T) fused attention's log-sum-exp
        T* ctx = nullptr;      // (N, C)
        T* res1 = nullptr;     // (N, C)
        T* ln1_out = nullptr;  // (N, C)
        T* fc_pre = nullptr;   // (N, I) before the activation
        T* fc_act = nullptr;   // (N, I)
        T* ln2_in = nullptr;   // (N, C) post-LN: res2; pre-LN: ln2's output
        float *ln1_mean = nullptr, *ln1_rstd = nullptr, *ln2_mean = nullptr, *ln2_rstd = nullptr;
    };
    struct Step {
        DropoutSpec probs, attn_out, ffn_out;
    };

    // ---- parameters: device views of a ParamTable row ----
    T* P(const ParamRef& r) const;
    T* G(const ParamRef& r) const;

    // ---- module replays (cuda_executor_layers.cpp) ----
    void linear_forward(const Linear& l, T* y, const T* x, int64_t N);
    void linear_backward(const Linear& l, T* dx, const T* dy, const T* x, int64_t N,
                         bool accumulate);
    void norm_forward(const LayerNorm& n, T* y, float* mean, float* rstd, const T* x, int64_t N);
    void norm_backward(const LayerNorm& n, T* dx, const T* dy, const T* x, const float* mean,
                       const float* rstd, int64_t N, bool accumulate);
    void embed_forward(T* h0);
    void embed_backward(T* dh0);
    void block_forward(const TransformerBlock& b, T* y, BlockActs& a, const T* x, const Step& s);
    void block_backward(const TransformerBlock& b, T* dio, const BlockActs& a, const T* x,
                        const Step& s);
    void attention_forward(const SelfAttention& m, T* y, BlockActs& a, const T* x, const Step& s);
    void attention_backward(const SelfAttention& m, T* dx, const T* dy, const BlockActs& a,
                            const T* x, const Step& s, bool accumulate);
    void mlp_forward(const Mlp& m, T* y, BlockActs& a, const T* x);
    void mlp_backward(const Mlp& m, T* dx, const T* dy, const BlockActs& a, const T* x,
                      bool accumulate);
    Step step_for(int64_t app) const;

    // ---- heads (cuda_executor_heads.cpp) ----
    void plan_head(DeviceArena& a);
    LossSum head_forward(const T* hidden);
    // Overwrites dhidden (N, C).
    void head_backward(T* dhidden, const T* hidden, double scale);
    void fill_targets(const ModelInputs& in);

    // ---- tensor parallelism (cuda_executor_tp.cpp) ----
    // Binds options_.tp after checking it against the modules' tp group.
    void tp_setup();
    // In-place all_reduce on the tp twin; the compute stream waits for it on
    // the device, the host later (tp_drain) for its errors and timeouts.
    void tp_all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op);
    void tp_drain();
    // A vocab-parallel word table's forward (overwrites out) and backward.
    void vocab_embed_forward(const Embedding& m, T* out, const int64_t* ids);
    void vocab_embed_backward(const Embedding& m, const int64_t* ids, const T* dout);
    // Cross-entropy over the decoder's logits (N, decoder.out): the whole
    // vocabulary, or Megatron's vocab-parallel one when the decoder is.
    XentSum head_xent_forward(const Linear& decoder, const T* logits, const int64_t* targets,
                              int64_t N, int64_t V);
    void head_xent_backward(const Linear& decoder, T* logits, const int64_t* targets, int64_t N,
                            int64_t V, double scale);

    // ---- optimizer (cuda_executor_optim.cpp) ----
    // FlatOptimizer on the CUDA backend over master_, grads_ and params_.
    void optim_setup();
    void optim_release();
    void check_shard_attached() const;
    template <typename U>
    double sum_squares_ranges(const U* base, const std::vector<IndexRange>& ranges);
    // The optimizer and its state live on the owner only (make_instance).
    void check_owner(const char* what) const;

    void plan(int64_t B, int64_t T_len);
    // Reports the finished suffix of the gradient buffer once backward has
    // passed application `app` (StackModel::report_blocks_done's rule).
    void report_blocks_done(int64_t app, int64_t& reported) const;
    void note_peak();
    // Hidden state h (h = 0: embeddings, h = a + 1: output of application a)
    // on the device: its own slot, or an offload ring slot.
    T* hidden_at(int64_t h) const { return hid_[size_t(h)]; }
    bool checkpointed(int64_t app) const {
        return options_.checkpoint_every > 0 && app % options_.checkpoint_every == 0;
    }
    // Offloading: the copy-stream choreography (cuda_executor_offload.cpp).
    void offload_setup();
    void offload_release();
    void before_write_hidden(int64_t h);  // forward: the slot's previous copy-out is done
    void after_read_hidden(int64_t h);    // forward: copy h out once its reader is enqueued
    void prefetch_for(int64_t app);       // backward: copies in, up to the horizon
    void wait_hidden(int64_t h);          // backward: h is back on the device
    void release_hidden(int64_t h);       // backward: h's reader is enqueued

    Model& cpu_;
    const ModelConfig& config_;
    const ParamTable& table_;
    StackView view_;
    CudaModelOptions options_;
    CudaExecutor* owner_ = nullptr;  // make_instance: the buffers' owner
    CudaContext ctx_;                // on the owner's stream for an instance
    // The part this executor runs (Model::placement().part): layer applications
    // [app_begin_, app_end_), the embeddings, the final norm and the head.
    int64_t app_begin_ = 0, app_end_ = 0;
    bool with_embeddings_ = true, with_head_ = true;
    // message_buffer: key -> (device buffer, bytes).
    std::map<int64_t, std::pair<void*, int64_t>> messages_;

    // Flat device buffers, the table's layout (flat_numel elements each).
    int64_t flat_ = 0;
    float* master_ = nullptr;  // fp32 weights
    T* params_ = nullptr;      // compute copy (== master_ for fp32)
    T* grads_ = nullptr;
    double* norm_result_ = nullptr;
    // The optimizer and its backend (the owner's only; make_instance).
    std::unique_ptr<Backend> backend_;
    std::unique_ptr<FlatOptimizer> optim_;
    std::optional<CudaShard> shard_;  // ZeRO-1/2
    bool shard_detached_ = false;

    // Per-batch state.
    int64_t B_ = 0, T_ = 0, N_ = 0, C_ = 0, planned_B_ = -1, planned_T_ = -1;
    DropoutPlan drop_;
    bool flash_ = false;  // the plan's attention: fused (flash) or unfused
    bool has_mask_ = false, has_types_ = false, has_labels_ = false, ready_for_backward_ = false;
    std::vector<int64_t> host_ints_;  // staging for the int inputs below
    DeviceArena ints_arena_, acts_arena_;
    int64_t *ids_ = nullptr, *types_ = nullptr, *pos_ = nullptr, *mask_ = nullptr;
    int64_t *targets_ = nullptr, *targets2_ = nullptr;  // head targets (QA: start, end)
    std::vector<T*> hid_;          // (A + 1) device hidden states, see hidden_at (a part's: h
                                   // in [app_begin_, app_end_], the others null)
    std::vector<BlockActs> acts_;  // checkpointed applications share ckpt_acts_
    BlockActs ckpt_acts_;
    int64_t ckpt_holds_ = -1;     // the application whose activations ckpt_acts_ holds
    T* recompute_out_ = nullptr;  // (N, C) a recomputed block's (unused) output
    // Offloading: hidden state h -> its index among the offloaded ones, or -1;
    // ring slots, pinned host copies, the copy stream and its events.
    std::vector<int64_t> off_index_;
    std::vector<int64_t> offloaded_;  // hidden states offloaded, ascending
    std::vector<T*> ring_;
    T* host_ = nullptr;
    size_t host_bytes_ = 0;
    void* copy_stream_ = nullptr;                        // cudaStream_t
    std::vector<void*> d2h_done_, h2d_done_, bwd_done_;  // cudaEvent_t per ring slot
    void* fwd_event_ = nullptr;
    int64_t next_prefetch_ = -1, outstanding_ = 0;
    // Embeddings.
    T *emb_sum_ = nullptr, *emb_dsum_ = nullptr, *emb_out_ = nullptr, *emb_dout_ = nullptr;
    float *emb_mean_ = nullptr, *emb_rstd_ = nullptr;
    DropoutSpec drop_emb_;
    // Backward workspace and the gradient flowing down the stack.
    T *dqkv_ = nullptr, *datt_ = nullptr, *dctx_ = nullptr, *dI_ = nullptr;
    T *t_ = nullptr, *u_ = nullptr, *dh_ = nullptr, *du_ = nullptr;
    // Final norm (GPT-2).
    T* final_ = nullptr;
    float *final_mean_ = nullptr, *final_rstd_ = nullptr;
    // Heads: buffers named for the largest user; see cuda_executor_heads.cpp.
    T *h1_ = nullptr, *h2_ = nullptr, *h3_ = nullptr, *h4_ = nullptr, *hd1_ = nullptr;
    float *hmean_ = nullptr, *hrstd_ = nullptr;
    T* logits_ = nullptr;   // also their gradient after backward
    T* logits2_ = nullptr;  // QA end logits
    // Masked LM on the labelled rows only: their input and its gradient.
    T *xg_ = nullptr, *dxg_ = nullptr;
    LogitsScope scope_ = LogitsScope::all_positions;
    bool sparse_ = false;    // this forward's masked-LM head ran on the labelled rows
    int64_t head_rows_ = 0;  // rows of logits_
    DropoutSpec drop_a_, drop_b_;
    int64_t peak_used_ = 0;
    GradReadyHook hook_;
    // Tensor parallelism: the device tp group (null: not sharded), the Works
    // posted since the host last waited, and the buffers of its pieces.
    Communicator* tp_ = nullptr;
    std::vector<WorkPtr> tp_pending_;
    T* tp_dx_ = nullptr;           // (N, C) a column-parallel branch's dx before its sum
    int64_t* tp_ids_ = nullptr;    // (N) word ids local to the vocab slice (backward)
    float* xent_max_ = nullptr;    // (N) vocab-parallel row maxima
    float* xent_stats_ = nullptr;  // (2N) [sum of exp | target logit]
    XentSum* xent_result_ = nullptr;
    double* norm_parts_ = nullptr;  // one partial sum per included range
    int64_t norm_parts_n_ = 0;
    // Per distinct block: where its rows start in the flat buffer and its
    // first application (the last one backward reaches); blocks by start,
    // highest first.
    std::vector<int64_t> block_begin_;
    std::vector<int64_t> block_first_app_;
    std::vector<size_t> block_order_;
};

}  // namespace loom
