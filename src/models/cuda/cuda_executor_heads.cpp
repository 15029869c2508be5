// CudaExecutor: the four task heads and their losses, the op sequences of
// models/heads/{mlm,causal_lm,seq_cls,qa_span}.cpp with the CUDA kernels.
//
// As on the CPU, the masked-LM head runs on every position (HF's output,
// LogitsScope::all_positions) or only on the labelled ones
// (labelled_positions: about 15% of the rows, the same loss and gradients);
// the rows are gathered and the gradient scattered back with the embedding
// kernels (a row lookup by index, and its deterministic backward). One
// difference, on purpose: the loss gradient overwrites the logits in place
// (llm.c's fused classifier), so outputs() are valid after forward, not after
// backward.
// Strided row picks (token 0 for classification, the start/end columns for QA)
// are 2-D copies on the stream rather than kernels.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "core/check.h"
#include "models/cuda/cuda_executor.h"
#include "ops/cuda/activation_cuda.h"
#include "ops/cuda/dropout_cuda.h"
#include "ops/cuda/elementwise_cuda.h"
#include "ops/cuda/embedding_cuda.h"
#include "ops/cuda/matmul_cuda.h"
#include "ops/cuda/softmax_xent_cuda.h"

namespace loom {

namespace {

// Copies `rows` elements of `width` T-sized items between strided rows.
template <typename T>
void copy_rows(T* dst, int64_t dst_stride, const T* src, int64_t src_stride, int64_t width,
               int64_t rows, cudaStream_t stream) {
    LOOM_CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(dst_stride) * sizeof(T), src,
                                      size_t(src_stride) * sizeof(T), size_t(width) * sizeof(T),
                                      size_t(rows), cudaMemcpyDeviceToDevice, stream));
}

}  // namespace

template <typename T>
void CudaExecutor<T>::plan_head(DeviceArena& a) {
    const HeadView& h = view_.head;
    const int64_t B = B_, N = N_, C = C_;
    hmean_ = hrstd_ = nullptr;
    h1_ = h2_ = h3_ = h4_ = hd1_ = logits_ = logits2_ = xg_ = dxg_ = nullptr;
    if (!with_head_) return;  // a pipeline stage before the last
    switch (h.kind) {
        case Task::base:
            break;
        case Task::masked_lm: {
            const int64_t E = h.dense->out;
            h1_ = a.template take<T>(N * E);   // dense + bias (pre-activation)
            h2_ = a.template take<T>(N * E);   // after the activation
            h3_ = a.template take<T>(N * E);   // after LayerNorm: decoder input
            h4_ = a.template take<T>(N * E);   // d(decoder input)
            hd1_ = a.template take<T>(N * E);  // d(activation output), then d(pre)
            hmean_ = a.template take<float>(N);
            hrstd_ = a.template take<float>(N);
            logits_ = a.template take<T>(N * h.decoder->out);  // a vocab slice under tp
            xg_ = a.template take<T>(N * C);                   // labelled rows (at most N)
            dxg_ = a.template take<T>(N * C);
            break;
        }
        case Task::causal_lm:
            logits_ = a.template take<T>(N * h.decoder->out);
            break;
        case Task::sequence_classification: {
            const int64_t D = h.dense->out;
            h1_ = a.template take<T>(B * C);  // token 0 rows
            h2_ = a.template take<T>(B * C);  // after dropout a
            h3_ = a.template take<T>(B * D);  // dense + bias
            h4_ = a.template take<T>(B * D);  // after the activation and dropout b
            hd1_ = a.template take<T>(B * D);
            logits_ = a.template take<T>(B * h.n_out);
            break;
        }
        case Task::question_answering:
            h1_ = a.template take<T>(N * C);  // hidden after dropout
            h2_ = a.template take<T>(N);      // start logits (B, T)
            h3_ = a.template take<T>(N);      // end logits
            logits_ = a.template take<T>(N * 2);
            break;
    }
}

template <typename T>
void CudaExecutor<T>::fill_targets(const ModelInputs& in) {
    const int64_t N = N_;
    int64_t* tg = host_ints_.data() + 4 * N;
    int64_t* tg2 = host_ints_.data() + 5 * N;
    std::fill(tg, tg + 2 * N, k_ignore_index);
    has_labels_ = false;
    switch (view_.head.kind) {
        case Task::base:
            break;
        case Task::masked_lm:
            sparse_ = scope_ == LogitsScope::labelled_positions && in.labels != nullptr;
            if (!in.labels) break;
            has_labels_ = true;
            if (!sparse_) {
                std::copy(in.labels, in.labels + N, tg);
                break;
            }
            // The labelled rows, in order: their targets and their positions.
            head_rows_ = 0;
            for (int64_t i = 0; i < N; ++i) {
                if (in.labels[i] == k_ignore_index) continue;
                tg[head_rows_] = in.labels[i];
                tg2[head_rows_] = i;
                ++head_rows_;
            }
            break;
        case Task::causal_lm:
            if (!in.labels) break;
            // Position t predicts labels[t + 1]; the last position has no target.
            for (int64_t b = 0; b < B_; ++b)
                for (int64_t t = 0; t + 1 < T_; ++t) tg[b * T_ + t] = in.labels[b * T_ + t + 1];
            has_labels_ = true;
            break;
        case Task::sequence_classification:
            if (!in.labels) break;
            std::copy(in.labels, in.labels + B_, tg);
            has_labels_ = true;
            break;
        case Task::question_answering: {
            if (!in.start_positions || !in.end_positions) break;
            // HF clamps positions to [0, T] and ignores T (an answer cut off).
            auto clamp = [&](int64_t p) {
                const int64_t c = std::clamp<int64_t>(p, 0, T_);
                return c == T_ ? k_ignore_index : c;
            };
            for (int64_t b = 0; b < B_; ++b) {
                tg[b] = clamp(in.start_positions[b]);
                tg2[b] = clamp(in.end_positions[b]);
            }
            has_labels_ = true;
            break;
        }
    }
}

template <typename T>
LossSum CudaExecutor<T>::head_forward(const T* hidden) {
    const HeadView& h = view_.head;
    const int64_t N = N_, C = C_;
    cudaStream_t st = ctx_.stream();
    drop_a_ = drop_.spec(h.p_drop_a, 0, DropoutPlan::head_a);
    drop_b_ = drop_.spec(h.p_drop_b, 0, DropoutPlan::head_b);
    LossSum l;
    XentSum x;
    switch (h.kind) {
        case Task::base:
            return l;
        case Task::masked_lm: {
            const int64_t E = h.dense->out;
            const T* in = hidden;
            if (sparse_) {
                // xg (M, C) = hidden rows at the labelled positions.
                embedding_forward_cuda<T>(xg_, targets2_, hidden, head_rows_, N, C, false, ctx_);
                in = xg_;
            } else {
                head_rows_ = N;
            }
            const int64_t M = head_rows_;
            if (M == 0) break;
            matmul_bias_act_forward_cuda<T>(h2_, h1_, in, P(h.dense->weight), P(h.dense->bias), M,
                                            C, E, h.dense->layout, h.act, ctx_);
            norm_forward(*h.norm, h3_, hmean_, hrstd_, h2_, M);
            linear_forward(*h.decoder, logits_, h3_, M);
            if (has_labels_) x = head_xent_forward(*h.decoder, logits_, targets_, M, h.n_out);
            break;
        }
        case Task::causal_lm:
            linear_forward(*h.decoder, logits_, hidden, N);
            head_rows_ = N;
            if (has_labels_) x = head_xent_forward(*h.decoder, logits_, targets_, N, h.n_out);
            break;
        case Task::sequence_classification: {
            const int64_t D = h.dense->out;
            copy_rows(h1_, C, hidden, T_ * C, C, B_, st);
            const T* xa = h1_;
            if (drop_a_.active()) {
                dropout_forward_cuda<T>(h2_, h1_, B_, C, drop_a_, ctx_);
                xa = h2_;
            }
            matmul_bias_act_forward_cuda<T>(h4_, h3_, xa, P(h.dense->weight), P(h.dense->bias), B_,
                                            C, D, h.dense->layout, h.act, ctx_);
            if (drop_b_.active()) dropout_forward_cuda<T>(h4_, h4_, B_, D, drop_b_, ctx_);
            linear_forward(*h.decoder, logits_, h4_, B_);
            head_rows_ = B_;
            if (has_labels_)
                x = softmax_xent_forward_cuda<T>(nullptr, logits_, targets_, B_, h.n_out, ctx_);
            break;
        }
        case Task::question_answering: {
            const T* in = hidden;
            if (drop_a_.active()) {
                dropout_forward_cuda<T>(h1_, hidden, B_, T_ * C, drop_a_, ctx_);
                in = h1_;
            }
            linear_forward(*h.decoder, logits_, in, N);
            copy_rows(h2_, 1, logits_, 2, 1, N, st);
            copy_rows(h3_, 1, logits_ + 1, 2, 1, N, st);
            head_rows_ = N;
            if (has_labels_) {
                const XentSum s =
                    softmax_xent_forward_cuda<T>(nullptr, h2_, targets_, B_, T_, ctx_);
                const XentSum e =
                    softmax_xent_forward_cuda<T>(nullptr, h3_, targets2_, B_, T_, ctx_);
                x.loss_sum = s.loss_sum + e.loss_sum;
                x.count = s.count + e.count;
            }
            break;
        }
    }
    l.sum = x.loss_sum;
    l.count = x.count;
    return l;
}

template <typename T>
void CudaExecutor<T>::head_backward(T* dhidden, const T* hidden, double scale) {
    const HeadView& h = view_.head;
    const int64_t N = N_, C = C_;
    cudaStream_t st = ctx_.stream();
    switch (h.kind) {
        case Task::base:
            break;
        case Task::masked_lm: {
            const int64_t E = h.dense->out, M = head_rows_;
            if (sparse_)
                LOOM_CUDA_CHECK(cudaMemsetAsync(dhidden, 0, size_t(N * C) * sizeof(T), st));
            if (M == 0) break;
            head_xent_backward(*h.decoder, logits_, targets_, M, h.n_out, scale);
            linear_backward(*h.decoder, h4_, logits_, h3_, M, false);
            norm_backward(*h.norm, hd1_, h4_, h2_, hmean_, hrstd_, M, false);
            activation_backward_cuda<T>(hd1_, h1_, hd1_, M * E, h.act, ctx_);
            linear_backward(*h.dense, sparse_ ? dxg_ : dhidden, hd1_, sparse_ ? xg_ : hidden, M,
                            false);
            // Scatter the rows' gradient back (each position appears once).
            if (sparse_) embedding_backward_cuda<T>(dhidden, targets2_, dxg_, M, N, C, -1, ctx_);
            break;
        }
        case Task::causal_lm:
            head_xent_backward(*h.decoder, logits_, targets_, N, h.n_out, scale);
            linear_backward(*h.decoder, dhidden, logits_, hidden, N, false);
            break;
        case Task::sequence_classification: {
            const int64_t D = h.dense->out;
            softmax_xent_backward_cuda<T>(logits_, logits_, targets_, B_, h.n_out, scale, ctx_);
            linear_backward(*h.decoder, hd1_, logits_, h4_, B_, false);
            if (drop_b_.active()) dropout_backward_cuda<T>(hd1_, hd1_, B_, D, drop_b_, ctx_);
            activation_backward_cuda<T>(hd1_, h3_, hd1_, B_ * D, h.act, ctx_);
            // t_ (N, C) is free until the blocks' backward: d(dropout a output).
            const T* xa = drop_a_.active() ? h2_ : h1_;
            linear_backward(*h.dense, t_, hd1_, xa, B_, false);
            if (drop_a_.active()) dropout_backward_cuda<T>(t_, t_, B_, C, drop_a_, ctx_);
            LOOM_CUDA_CHECK(cudaMemsetAsync(dhidden, 0, size_t(N * C) * sizeof(T), st));
            copy_rows(dhidden, T_ * C, t_, C, C, B_, st);
            break;
        }
        case Task::question_answering: {
            softmax_xent_backward_cuda<T>(h2_, h2_, targets_, B_, T_, scale, ctx_);
            softmax_xent_backward_cuda<T>(h3_, h3_, targets2_, B_, T_, scale, ctx_);
            copy_rows(logits_, 2, h2_, 1, 1, N, st);
            copy_rows(logits_ + 1, 2, h3_, 1, 1, N, st);
            const T* in = drop_a_.active() ? h1_ : hidden;
            linear_backward(*h.decoder, dhidden, logits_, in, N, false);
            if (drop_a_.active())
                dropout_backward_cuda<T>(dhidden, dhidden, B_, T_ * C, drop_a_, ctx_);
            break;
        }
    }
}

template <typename T>
std::map<std::string, Tensor> CudaExecutor<T>::outputs() {
    LOOM_CHECK(with_head_, "outputs: this pipeline stage has no head (the last stage has them)");
    std::map<std::string, Tensor> out;
    auto fetch = [&](const char* name, const T* p, Shape shape) {
        Tensor t = Tensor::empty(DType::f32, shape, name);
        const int64_t n = t.numel();
        float* wide = static_cast<float*>(ctx_.scratch(size_t(n) * sizeof(float)));
        convert_cuda<float, T>(wide, p, n, ctx_);
        LOOM_CUDA_CHECK(cudaMemcpyAsync(t.raw(), wide, size_t(n) * sizeof(float),
                                        cudaMemcpyDeviceToHost, ctx_.stream()));
        ctx_.synchronize();
        out[name] = t;
    };
    const HeadView& h = view_.head;
    // A vocab-parallel decoder's logits are a slice, not HF's (as the CPU head).
    if (h.decoder && h.decoder->tp) return out;
    switch (h.kind) {
        case Task::base:
            break;
        case Task::masked_lm:
            if (sparse_)
                fetch("labelled_logits", logits_, Shape{head_rows_, h.n_out});
            else
                fetch("logits", logits_, Shape{B_, T_, h.n_out});
            break;
        case Task::causal_lm:
            fetch("logits", logits_, Shape{B_, T_, h.n_out});
            break;
        case Task::sequence_classification:
            fetch("logits", logits_, Shape{B_, h.n_out});
            break;
        case Task::question_answering:
            fetch("start_logits", h2_, Shape{B_, T_});
            fetch("end_logits", h3_, Shape{B_, T_});
            break;
    }
    return out;
}

#define LOOM_INSTANTIATE(T)                                             \
    template void CudaExecutor<T>::plan_head(DeviceArena&);             \
    template void CudaExecutor<T>::fill_targets(const ModelInputs&);    \
    template LossSum CudaExecutor<T>::head_forward(const T*);           \
    template void CudaExecutor<T>::head_backward(T*, const T*, double); \
    template std::map<std::string, Tensor> CudaExecutor<T>::outputs();
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
