// CudaExecutor: device buffers and the forward/backward drivers (the host
// transfers and memory figures are in cuda_executor_transfer.cpp, the optimizer
// step in cuda_executor_optim.cpp). The op sequences live in
// cuda_executor_layers.cpp and cuda_executor_heads.cpp.
#include "models/cuda/cuda_executor.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/cuda_check.h"
#include "core/check.h"
#include "ops/cuda/elementwise_cuda.h"
#include "ops/cuda/flash_attention_cuda.h"

namespace loom {

namespace {

template <typename U>
U* device_alloc(int64_t n) {
    void* p = nullptr;
    LOOM_CUDA_CHECK(cudaMalloc(&p, size_t(std::max<int64_t>(n, 1)) * sizeof(U)));
    LOOM_CUDA_CHECK(cudaMemset(p, 0, size_t(std::max<int64_t>(n, 1)) * sizeof(U)));
    return static_cast<U*>(p);
}

void device_free(void* p) {
    if (p) (void)cudaFree(p);
}

StackModel& as_stack(Model& m) {
    auto* s = dynamic_cast<StackModel*>(&m);
    LOOM_CHECK(s != nullptr, "the CUDA executor runs transformer stacks; {} is not one",
               m.config().architecture);
    return *s;
}

}  // namespace

template <typename T>
CudaExecutor<T>::CudaExecutor(Model& cpu, const CudaModelOptions& options, CudaExecutor* owner)
    : cpu_(cpu),
      config_(cpu.config()),
      table_(cpu.params()),
      view_(as_stack(cpu).view()),
      options_(options),
      owner_(owner),
      ctx_(options.device, owner ? owner->ctx_.stream() : nullptr) {
    LOOM_CHECK(!config_.llama_like(),
               "{}: the CUDA executor (activation offloading) has no Llama-family path (RMSNorm, rotary "
               "embeddings, grouped-query attention, SwiGLU); train Llama on the CPU",
               config_.source);
    const ModelPart& part = cpu.placement().part;
    const int64_t A = int64_t(view_.schedule->size());
    app_begin_ = part.app_begin;
    app_end_ = part.app_end < 0 ? A : part.app_end;
    with_embeddings_ = part.embeddings;
    with_head_ = part.head;
    LOOM_CHECK(app_begin_ >= 0 && app_begin_ < app_end_ && app_end_ <= A &&
                   with_embeddings_ == (app_begin_ == 0),
               "CUDA executor: pipeline part [{}, {}){} of {} layer applications", app_begin_,
               app_end_, with_embeddings_ ? " + embeddings" : "", A);
    tp_setup();
    C_ = config_.hidden_size;
    flat_ = table_.flat_numel();
    if (owner) {
        // Every instance of a stage holds the same rows at the same offsets
        // (ModelPart::also_hold makes a rank's chunks agree too).
        const ParamTable& o = owner->table_;
        bool same = o.size() == table_.size() && o.flat_numel() == flat_;
        for (int i = 0; same && i < table_.size(); ++i)
            same = o.row(i).local == table_.row(i).local &&
                   (!table_.row(i).local || o.row(i).offset == table_.row(i).offset);
        LOOM_CHECK(same,
                   "CUDA executor instance: its model's parameter layout differs from the "
                   "owner's ({} vs {} elements)",
                   flat_, o.flat_numel());
        master_ = owner->master_;
        params_ = owner->params_;
        grads_ = owner->grads_;
        norm_result_ = device_alloc<double>(1);
    } else {
        master_ = device_alloc<float>(flat_);
        if constexpr (std::is_same_v<T, float>)
            params_ = master_;
        else
            params_ = device_alloc<T>(flat_);
        grads_ = device_alloc<T>(flat_);
        norm_result_ = device_alloc<double>(1);
        optim_setup();
    }
    // Grad-ready bookkeeping, as StackModel::finish_build: every family adds
    // embeddings, then the blocks, then the final norm and head, so rows above
    // the blocks finish before any block's backward and the embeddings last.
    // Only this part's rows and applications count.
    const auto& blocks = *view_.blocks;
    block_begin_.assign(blocks.size(), flat_);
    block_first_app_.assign(blocks.size(), A);
    for (size_t b = 0; b < blocks.size(); ++b) {
        const TransformerBlock& k = blocks[b];
        for (const ParamRef* r :
             {&k.attn.qkv.weight, &k.attn.qkv.bias, &k.attn.proj.weight, &k.attn.proj.bias,
              &k.mlp.fc.weight, &k.mlp.fc.bias, &k.mlp.proj.weight, &k.mlp.proj.bias, &k.ln1.weight,
              &k.ln1.bias, &k.ln2.weight, &k.ln2.bias})
            if (r->defined() && table_.row(r->row).local)
                block_begin_[b] = std::min(block_begin_[b], table_.row(r->row).offset);
    }
    for (int64_t a = app_end_; a-- > app_begin_;)
        block_first_app_[size_t((*view_.schedule)[size_t(a)])] = a;
    block_order_.resize(blocks.size());
    for (size_t b = 0; b < blocks.size(); ++b) block_order_[b] = b;
    std::sort(block_order_.begin(), block_order_.end(),
              [&](size_t x, size_t y) { return block_begin_[x] > block_begin_[y]; });
    if (!owner) upload_params();
    note_peak();
}

template <typename T>
void CudaExecutor<T>::report_blocks_done(int64_t app, int64_t& reported) const {
    if (!hook_) return;
    int64_t w = reported;
    for (size_t b : block_order_) {
        if (block_first_app_[b] < app) break;  // applications below `app` still to run
        w = std::min(w, block_begin_[b]);
    }
    if (w < reported) {
        hook_(w, reported);
        reported = w;
    }
}

template <typename T>
DType CudaExecutor<T>::grad_dtype() const {
    if constexpr (std::is_same_v<T, float>) return DType::f32;
    if constexpr (std::is_same_v<T, __half>) return DType::f16;
    return DType::bf16;
}

template <typename T>
CudaExecutor<T>::~CudaExecutor() {
    (void)cudaStreamSynchronize(ctx_.stream());
    offload_release();
    for (auto& [key, buf] : messages_) device_free(buf.first);
    if (!owner_) {
        if (static_cast<void*>(params_) != static_cast<void*>(master_)) device_free(params_);
        device_free(master_);
        device_free(grads_);
    }
    optim_release();
    device_free(norm_result_);
    device_free(norm_parts_);
}

template <typename T>
T* CudaExecutor<T>::P(const ParamRef& r) const {
    if (!r.defined()) return nullptr;
    return params_ + table_.row(r.row).offset;
}

template <typename T>
T* CudaExecutor<T>::G(const ParamRef& r) const {
    if (!r.defined() || !table_.row(r.row).trainable) return nullptr;
    return grads_ + table_.row(r.row).offset;
}

template <typename T>
void CudaExecutor<T>::plan(int64_t B, int64_t T_len) {
    const int64_t N = B * T_len, C = C_;
    const auto& schedule = *view_.schedule;
    const int64_t A = int64_t(schedule.size());
    const TransformerBlock& b0 = view_.blocks->front();
    const int64_t NH = b0.attn.NH, I = b0.I, E = view_.embeddings.E;
    ints_arena_.build([&](DeviceArena& a) {
        ids_ = a.take<int64_t>(N);
        types_ = a.take<int64_t>(N);
        pos_ = a.take<int64_t>(N);
        mask_ = a.take<int64_t>(N);
        targets_ = a.take<int64_t>(N);
        targets2_ = a.take<int64_t>(N);
    });
    // Indices stay the whole model's (dropout and checkpointing are keyed by
    // application); only this part's applications get buffers.
    const int64_t a0 = app_begin_, a1 = app_end_;
    acts_.assign(size_t(A), BlockActs{});
    // Checkpointed applications keep only their input (a hidden state), which
    // offloading moves to the host between forward and backward.
    off_index_.assign(size_t(A + 1), -1);
    offloaded_.clear();
    if (options_.offload_activations)
        for (int64_t i = a0; i < a1; ++i)
            if (checkpointed(i)) {
                off_index_[size_t(i)] = int64_t(offloaded_.size());
                offloaded_.push_back(i);
            }
    const int64_t R = offloaded_.empty() ? 0
                                         : std::min<int64_t>(options_.loading_horizon + 1,
                                                             int64_t(offloaded_.size()));
    hid_.assign(size_t(A + 1), nullptr);
    acts_arena_.build([&](DeviceArena& a) {
        ring_.assign(size_t(R), nullptr);
        for (int64_t r = 0; r < R; ++r) ring_[size_t(r)] = a.template take<T>(N * C);
        for (int64_t h = a0; h <= a1; ++h)
            hid_[size_t(h)] = off_index_[size_t(h)] >= 0 ? ring_[size_t(off_index_[size_t(h)] % R)]
                                                         : a.template take<T>(N * C);
        recompute_out_ = options_.checkpoint_every > 0 ? a.template take<T>(N * C) : nullptr;
        bool shared_planned = false;
        for (int64_t i = a0; i < a1; ++i) {
            BlockActs& k = checkpointed(i) ? ckpt_acts_ : acts_[size_t(i)];
            if (checkpointed(i) && shared_planned) {
                acts_[size_t(i)] = ckpt_acts_;
                continue;
            }
            k.qkv = a.template take<T>(N * 3 * C);
            // Fused attention saves a log-sum-exp per row instead of the
            // (B, NH, T, T) probabilities.
            k.att = flash_ ? nullptr : a.template take<T>(B * NH * T_len * T_len);
            k.lse = flash_ ? a.template take<float>(B * NH * T_len) : nullptr;
            k.ctx = a.template take<T>(N * C);
            k.res1 = a.template take<T>(N * C);
            k.ln1_out = a.template take<T>(N * C);
            k.fc_pre = a.template take<T>(N * I);
            k.fc_act = a.template take<T>(N * I);
            k.ln2_in = a.template take<T>(N * C);
            k.ln1_mean = a.template take<float>(N);
            k.ln1_rstd = a.template take<float>(N);
            k.ln2_mean = a.template take<float>(N);
            k.ln2_rstd = a.template take<float>(N);
            if (checkpointed(i)) {
                shared_planned = true;
                acts_[size_t(i)] = ckpt_acts_;
            }
        }
        const int64_t NE = with_embeddings_ ? N * E : 0, NW = with_embeddings_ ? N : 0;
        emb_sum_ = a.template take<T>(NE);
        emb_dsum_ = a.template take<T>(NE);
        emb_out_ = a.template take<T>(NE);
        emb_dout_ = a.template take<T>(NE);
        emb_mean_ = a.template take<float>(NW);
        emb_rstd_ = a.template take<float>(NW);
        dqkv_ = a.template take<T>(N * 3 * C);
        datt_ = flash_ ? nullptr : a.template take<T>(B * NH * T_len * T_len);
        dctx_ = a.template take<T>(N * C);
        dI_ = a.template take<T>(N * I);
        t_ = a.template take<T>(N * C);
        u_ = a.template take<T>(N * C);
        dh_ = a.template take<T>(N * C);
        du_ = a.template take<T>(N * C);
        const int64_t NF = with_head_ && view_.final_norm ? N : 0;
        final_ = a.template take<T>(NF * C);
        final_mean_ = a.template take<float>(NF);
        final_rstd_ = a.template take<float>(NF);
        if (tp_) {
            tp_dx_ = a.template take<T>(N * C);
            tp_ids_ = a.template take<int64_t>(N);
            xent_max_ = a.template take<float>(N);
            xent_stats_ = a.template take<float>(2 * N);
            xent_result_ = a.template take<XentSum>(1);
        }
        plan_head(a);
    });
    if (!offloaded_.empty()) offload_setup();
    planned_B_ = B;
    planned_T_ = T_len;
}

template <typename T>
LossSum CudaExecutor<T>::forward_stage(const ModelInputs& in, const DropoutPlan& dropout,
                                       const void* stage_input) {
    LOOM_CHECK(in.input_ids != nullptr && in.B > 0 && in.T > 0,
               "model forward needs input_ids of shape (B, T) with B, T > 0");
    LOOM_CHECK(in.stage_input == nullptr,
               "the CUDA executor takes a stage's input on the device (forward_stage), not from "
               "the host");
    LOOM_CHECK(with_embeddings_ == (stage_input == nullptr),
               "CUDA executor: a pipeline stage takes the previous stage's output exactly when "
               "it has no embeddings (this one has {}, and was given {})",
               with_embeddings_ ? "them" : "none", stage_input ? "an input" : "none");
    B_ = in.B;
    T_ = in.T;
    N_ = B_ * T_;
    drop_ = dropout;

    // Every integer input in one host-to-device copy.
    const int64_t N = N_;
    host_ints_.assign(size_t(6 * N), 0);
    int64_t* h = host_ints_.data();
    std::copy(in.input_ids, in.input_ids + N, h);
    has_types_ = in.token_type_ids != nullptr && view_.embeddings.token_type != nullptr;
    if (has_types_) std::copy(in.token_type_ids, in.token_type_ids + N, h + N);
    has_mask_ = in.attention_mask != nullptr;
    if (has_mask_) std::copy(in.attention_mask, in.attention_mask + N, h + 3 * N);
    // Position ids as the CPU embeddings form them (models/bert.cpp, gpt2.cpp).
    const int64_t max_pos = config_.max_position_embeddings;
    int64_t* pos = h + 2 * N;
    if (view_.embeddings.positions == PositionIds::from_padding) {
        const int64_t pad = view_.embeddings.pad_token_id;
        for (int64_t b = 0; b < B_; ++b) {
            int64_t count = 0;
            for (int64_t t = 0; t < T_; ++t) {
                const int64_t i = b * T_ + t;
                const bool real = in.input_ids[i] != pad;
                count += real;
                pos[i] = real ? count + pad : pad;
                LOOM_CHECK(pos[i] < max_pos,
                           "a row of {} tokens holds more non-pad tokens than the model "
                           "accepts: {}",
                           T_, describe_max_positions(config_));
            }
        }
    } else {
        LOOM_CHECK(T_ <= max_pos, "sequence length {} exceeds what the model accepts: {}", T_,
                   describe_max_positions(config_));
        for (int64_t b = 0; b < B_; ++b)
            for (int64_t t = 0; t < T_; ++t) pos[b * T_ + t] = t;
    }
    fill_targets(in);
    // Fused attention unless this batch has a query row with no visible key
    // (a wholly padded sample): the flash kernels lack HF's uniform-weights
    // rule for such rows, so that batch takes the unfused kernels (re-planned).
    const TransformerBlock& b0 = view_.blocks->front();
    const bool flash =
        options_.fused_attention &&
        flash_attention_supported(AttnShape{B_, T_, b0.attn.NH, b0.attn.C / b0.attn.NH, 0, 0}) &&
        attention_every_row_has_a_key(has_mask_ ? h + 3 * N : nullptr, B_, T_, b0.attn.causal);
    if (B_ != planned_B_ || T_ != planned_T_ || flash != flash_) {
        flash_ = flash;
        plan(B_, T_);
    }
    // NOTE: from pageable memory the copy returns once the bytes are staged, so
    // host_ints_ may be refilled by the next forward.
    LOOM_CUDA_CHECK(cudaMemcpyAsync(ids_, h, size_t(N) * sizeof(int64_t), cudaMemcpyHostToDevice,
                                    ctx_.stream()));
    LOOM_CUDA_CHECK(cudaMemcpyAsync(types_, h + N, size_t(N) * sizeof(int64_t),
                                    cudaMemcpyHostToDevice, ctx_.stream()));
    LOOM_CUDA_CHECK(cudaMemcpyAsync(pos_, h + 2 * N, size_t(N) * sizeof(int64_t),
                                    cudaMemcpyHostToDevice, ctx_.stream()));
    LOOM_CUDA_CHECK(cudaMemcpyAsync(mask_, h + 3 * N, size_t(N) * sizeof(int64_t),
                                    cudaMemcpyHostToDevice, ctx_.stream()));
    // Two copies: the arena aligns each buffer, so targets2_ need not follow targets_.
    LOOM_CUDA_CHECK(cudaMemcpyAsync(targets_, h + 4 * N, size_t(N) * sizeof(int64_t),
                                    cudaMemcpyHostToDevice, ctx_.stream()));
    LOOM_CUDA_CHECK(cudaMemcpyAsync(targets2_, h + 5 * N, size_t(N) * sizeof(int64_t),
                                    cudaMemcpyHostToDevice, ctx_.stream()));

    before_write_hidden(app_begin_);
    if (with_embeddings_)
        embed_forward(hidden_at(app_begin_));
    else
        LOOM_CUDA_CHECK(cudaMemcpyAsync(hidden_at(app_begin_), stage_input,
                                        size_t(N * C_) * sizeof(T), cudaMemcpyDeviceToDevice,
                                        ctx_.stream()));
    const auto& schedule = *view_.schedule;
    for (int64_t a = app_begin_; a < app_end_; ++a) {
        before_write_hidden(a + 1);
        block_forward((*view_.blocks)[size_t(schedule[size_t(a)])], hidden_at(a + 1),
                      acts_[size_t(a)], hidden_at(a), step_for(a));
        if (checkpointed(a)) ckpt_holds_ = a;
        after_read_hidden(a);
    }
    if (!with_head_) {
        // The output goes on on the device; tp collectives are waited for at
        // the end of backward.
        note_peak();
        ready_for_backward_ = true;
        return {};
    }
    const T* top = hidden_at(app_end_);
    if (view_.final_norm) {
        norm_forward(*view_.final_norm, final_, final_mean_, final_rstd_, top, N);
        top = final_;
    }
    // The head's loss copy blocks the host on the stream: the tp collectives
    // queued before it report their errors (bounded) first.
    if (tp_) tp_drain();
    const LossSum loss = head_forward(top);
    note_peak();
    ready_for_backward_ = true;
    return loss;
}

template <typename T>
void CudaExecutor<T>::backward_stage(double loss_scale, const void* d_stage_output) {
    LOOM_CHECK(ready_for_backward_, "backward called without a forward");
    const int64_t N = N_, C = C_;
    const auto& schedule = *view_.schedule;
    if (with_head_) {
        LOOM_CHECK(d_stage_output == nullptr,
                   "CUDA executor: this part ends with the head; its backward starts from the "
                   "loss, not from an output gradient");
        LOOM_CHECK(view_.head.kind != Task::base,
                   "{} has no task head, so there is no loss to differentiate",
                   config_.architecture);
        LOOM_CHECK(has_labels_, "backward needs labels in the batch (task {})",
                   task_name(config_.task));
        if (view_.final_norm) {
            head_backward(du_, final_, loss_scale);
            norm_backward(*view_.final_norm, dh_, du_, hidden_at(app_end_), final_mean_,
                          final_rstd_, N, false);
        } else {
            head_backward(dh_, hidden_at(app_end_), loss_scale);
        }
    } else {
        LOOM_CHECK(d_stage_output != nullptr,
                   "CUDA executor: a pipeline stage without the head needs the gradient of its "
                   "output");
        LOOM_CUDA_CHECK(cudaMemcpyAsync(dh_, d_stage_output, size_t(N * C) * sizeof(T),
                                        cudaMemcpyDeviceToDevice, ctx_.stream()));
    }
    int64_t reported = flat_;  // [reported, flat) went to the hook
    next_prefetch_ = int64_t(offloaded_.size()) - 1;
    outstanding_ = 0;
    for (int64_t a = app_end_ - 1; a >= app_begin_; --a) {
        const TransformerBlock& blk = (*view_.blocks)[size_t(schedule[size_t(a)])];
        prefetch_for(a);
        if (checkpointed(a)) {
            wait_hidden(a);
            // Recompute: the same ops on the same input with the same dropout
            // counters rewrite the activations bit for bit; the output, which
            // the application above has consumed, goes to a scratch buffer.
            if (ckpt_holds_ != a)
                block_forward(blk, recompute_out_, acts_[size_t(a)], hidden_at(a), step_for(a));
            ckpt_holds_ = a;
        }
        block_backward(blk, dh_, acts_[size_t(a)], hidden_at(a), step_for(a));
        release_hidden(a);
        report_blocks_done(a, reported);
    }
    // Without the embeddings dh_ now holds the gradient of the stage input.
    if (with_embeddings_) embed_backward(dh_);
    if (hook_ && reported > 0) hook_(0, reported);
    if (tp_) tp_drain();
    note_peak();
    ready_for_backward_ = false;
}

template class CudaExecutor<float>;
template class CudaExecutor<__nv_bfloat16>;
template class CudaExecutor<__half>;

std::unique_ptr<CudaModel> CudaModel::create(Model& cpu, const CudaModelOptions& options) {
    const std::string why = unavailable_reason();
    LOOM_CHECK(why.empty(), "no usable CUDA device: {}", why);
    LOOM_CHECK(options.device >= 0 && options.device < cuda_device_count(),
               "CUDA device {} does not exist ({} visible)", options.device, cuda_device_count());
    if (options.dtype == DType::f32) return std::make_unique<CudaExecutor<float>>(cpu, options);
    if (options.dtype == DType::f16) return std::make_unique<CudaExecutor<__half>>(cpu, options);
    return std::make_unique<CudaExecutor<__nv_bfloat16>>(cpu, options);
}

std::string CudaModel::unavailable_reason() {
    return cuda_unavailable_reason();
}

}  // namespace loom
