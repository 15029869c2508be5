// Masked-LM head: dense -> activation -> LayerNorm -> tied decoder + bias.
//
// LogitsScope::all_positions computes logits at every position (HF's output).
// labelled_positions gathers the rows whose label is not -100 first and runs
// the whole head on those M rows only: the decoder GEMM (V x E per row, the
// largest in BERT) shrinks by N / M (~7x at 15% masking) with the same loss
// and gradients; unlabelled rows get zero gradient either way.
//
// Tensor parallelism (shard): the decoder and its bias split by vocabulary
// (the tied weight is the vocab-parallel word table's slice), so the decoder
// is a column-parallel linear (Megatron "f": its input gradient all-reduced on
// tp) producing (M, V/tp) local logits, and the loss is Megatron's
// vocab-parallel cross-entropy: the full (M, V) logits are never gathered.
// dense and the LayerNorm stay whole, replicated on tp. Under tp, outputs()
// reports no logits (a rank holds only a slice of them).
#include <cstring>

#include "core/check.h"
#include "models/heads/head.h"
#include "nn/vocab_xent.h"
#include "ops/device_ops.h"

namespace loom {

namespace {

class MlmHead final : public Head {
  public:
    MlmHead(ParamTable& t, const MlmHeadSpec& s) : spec_(s) {
        const LinearInit init{s.init_std, /*head=*/true, TpRole::none};
        dense_ = Linear::make(t, s.dense, s.C, s.E, WeightLayout::out_in, true, init);
        norm_ = LayerNorm::make(t, s.norm, s.E, s.eps, /*head=*/true);
        int weight_row = s.word_embeddings_row;
        if (weight_row >= 0) {
            t.tie(s.decoder, t.row(weight_row).name);
        } else {
            ParamRow r;
            r.name = s.decoder;
            r.shape = Shape{s.V, s.E};
            r.init_std = s.init_std;
            r.head = true;
            weight_row = t.add(r);
        }
        ParamRow b;
        b.name = s.bias;
        b.shape = Shape{s.V};
        b.init = InitRule::zeros;
        b.decay = false;
        b.head = true;
        const int bias_row = t.add(b);
        if (!s.bias_alias.empty()) t.tie(s.bias_alias, s.bias);
        decoder_ = Linear::make_tied(weight_row, bias_row, s.E, s.V);
    }

    void bind(const ParamTable& t) override {
        ctx_ = t.op_ctx();
        dense_.bind(t);
        norm_.bind(t);
        decoder_.bind(t);
    }

    void set_logits_scope(LogitsScope s) override { scope_ = s; }

    bool rows_read(const HeadBatch& hb, std::vector<int64_t>& rows) const override {
        if (scope_ != LogitsScope::labelled_positions || hb.labels == nullptr) return false;
        rows.clear();
        for (int64_t i = 0; i < hb.B * hb.T; ++i)
            if (hb.labels[i] != k_ignore_index) rows.push_back(i);
        return true;
    }

    void shard(ParamTable& t, const ModelTp& tp) override {
        if (!tp.active()) return;
        // Tied: the word table already holds this slice (a no-op); untied:
        // the decoder's own row is cut the same way.
        t.shard_vocab_row(decoder_.weight.row, tp.size, tp.rank);
        t.shard_vocab_row(decoder_.bias.row, tp.size, tp.rank);
        decoder_.out = t.row(decoder_.weight.row).shape[0];
        decoder_.tp_role = TpRole::column;
        decoder_.tp = tp.buffer_comm();
        xent_.tp = tp.buffer_comm();
    }

    void set_compute_dtype(DType d) override { dense_.compute = decoder_.compute = d; }
    HeadView view() const override {
        HeadView v;
        v.kind = Task::masked_lm;
        v.dense = &dense_;
        v.norm = &norm_;
        v.decoder = &decoder_;
        v.act = spec_.act;
        v.n_out = spec_.V;
        return v;
    }

    void plan(ActArena& a, int64_t B, int64_t T) override {
        B_ = B;
        T_ = T;
        const int64_t N = B * T, E = spec_.E;
        const DType t = ctx_.act;
        xg_ = a.take_act(N * spec_.C, t);
        dxg_ = a.take_act(N * spec_.C, t);
        t1_ = a.take_act(N * E, t);
        t2_ = a.take_act(N * E, t);
        t3_ = a.take_act(N * E, t);
        norm_acts_.plan(a, N);
        logits_ = a.take_act(N * decoder_.out, t);
        dlogits_ = a.take_act(N * decoder_.out, t);
        d3_ = a.take_act(N * E, t);
        d2_ = a.take_act(N * E, t);
        rows_.resize(size_t(N));
        targets_.resize(size_t(N));
        targets_dev_ = a.take_i64(N);
        if (xent_.tp) xent_.plan(a, N);
    }

    LossSum forward(CActPtr hidden, const HeadBatch& hb, const DropoutPlan&) override {
        const int64_t N = B_ * T_, C = spec_.C;
        const size_t row = size_t(C) * dtype_size(ctx_.act);
        labels_ = hb.labels;
        sparse_ = scope_ == LogitsScope::labelled_positions && labels_ != nullptr;
        x_ = hidden;
        M_ = N;
        const int64_t* targets = labels_;  // host memory until uploaded
        if (sparse_) {
            M_ = 0;
            for (int64_t i = 0; i < N; ++i) {
                if (labels_[i] == k_ignore_index) continue;
                rows_[size_t(M_)] = i;
                targets_[size_t(M_)] = labels_[i];
                ctx_.be->copy(xg_ + M_ * C, hidden + i * C, row);
                ++M_;
            }
            x_ = xg_;
            targets = targets_.data();
        }
        if (targets) targets = upload_targets(targets);
        LossSum l;
        if (M_ == 0) return l;
        dense_.forward(t1_, x_, M_);
        ctx_.nn().activation_forward(ctx_, t2_, ctx_.act, t1_, M_ * spec_.E, spec_.act);
        norm_.forward(t3_, norm_acts_, t2_, M_);
        decoder_.forward(logits_, t3_, M_);
        if (labels_) {
            const XentSum x = xent_.tp ? xent_.forward(ctx_, logits_, targets, M_, spec_.V)
                                       : ctx_.nn().softmax_xent_forward(ctx_, nullptr, logits_,
                                                                        targets, M_, spec_.V);
            l.sum = x.loss_sum;
            l.count = x.count;
        }
        return l;
    }

    void backward(ActPtr dhidden, CActPtr, double scale) override {
        LOOM_CHECK(labels_ != nullptr, "masked-LM backward needs 'labels' in the batch");
        const int64_t N = B_ * T_, C = spec_.C;
        ActPtr dx = sparse_ ? dxg_ : dhidden;
        if (M_ > 0) {
            const int64_t* targets = targets_dev_;
            if (xent_.tp)
                xent_.backward(ctx_, dlogits_, logits_, targets, M_, spec_.V, scale);
            else
                ctx_.nn().softmax_xent_backward(ctx_, dlogits_, logits_, targets, M_, spec_.V,
                                                scale);
            decoder_.backward(d3_, dlogits_, t3_, M_);
            norm_.backward(d2_, d3_, t2_, norm_acts_, M_);
            ctx_.nn().activation_backward(ctx_, d2_, t1_, d2_, M_ * spec_.E, spec_.act);
            dense_.backward(dx, d2_, x_, M_);
        }
        if (sparse_) {
            const size_t row = size_t(C) * dtype_size(ctx_.act);
            ctx_.be->zero(dhidden, size_t(N) * row);
            for (int64_t m = 0; m < M_; ++m)
                ctx_.be->copy(dhidden + rows_[size_t(m)] * C, dxg_ + m * C, row);
        }
    }

    void outputs(const ActArena& a, std::map<std::string, Tensor>& out) const override {
        if (xent_.tp) return;  // a vocabulary slice is not HF's logits
        if (sparse_)
            out["labelled_logits"] = a.view(logits_, Shape{M_, spec_.V}, "labelled_logits");
        else
            out["logits"] = a.view(logits_, Shape{B_, T_, spec_.V}, "logits");
    }

  private:
    OpCtx ctx_;  // where the table the head is bound to runs its ops
    MlmHeadSpec spec_;
    Linear dense_, decoder_;
    LayerNorm norm_;
    LayerNorm::Acts norm_acts_;
    LogitsScope scope_ = LogitsScope::all_positions;
    VocabXent xent_;  // vocab-parallel (xent_.tp set); else the whole vocabulary
    bool sparse_ = false;
    int64_t B_ = 0, T_ = 0, M_ = 0;  // M: rows the head ran on (N, or the labelled ones)
    const int64_t* labels_ = nullptr;
    CActPtr x_;                       // head input: hidden (N, C) or xg
    std::vector<int64_t> rows_;       // (M) labelled positions, sparse mode
    std::vector<int64_t> targets_;    // (M) their labels
    int64_t* targets_dev_ = nullptr;  // (M) the labels the kernels read, in the backend's memory
    ActPtr xg_;                       // (M, C) gathered hidden rows
    ActPtr dxg_;                      // (M, C)
    ActPtr t1_;                       // (M, E) dense output
    ActPtr t2_;                       // (M, E) after the activation
    ActPtr t3_;                       // (M, E) after LayerNorm (decoder input)
    ActPtr logits_;                   // (M, V), or (M, Vp/tp) vocab-parallel
    ActPtr dlogits_;                  // like logits_
    ActPtr d3_;                       // (M, E)
    ActPtr d2_;                       // (M, E)

    const int64_t* upload_targets(const int64_t* host) const {
        ctx_.be->to_device(targets_dev_, host, size_t(M_) * sizeof(int64_t));
        return targets_dev_;
    }
};

}  // namespace

std::unique_ptr<Head> make_mlm_head(ParamTable& t, const MlmHeadSpec& spec) {
    return std::make_unique<MlmHead>(t, spec);
}

}  // namespace loom
