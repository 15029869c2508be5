// Causal-LM head: logits = hidden @ wte^T (tied, no bias); position t is
// scored against labels[t + 1], so the last position has no target.
//
// Tensor parallelism (shard): the tied wte is vocab-parallel, so the decoder
// is a column-parallel linear (Megatron "f": its input gradient all-reduced on
// tp) giving (B, T, Vp/tp) local logits, scored by Megatron's vocab-parallel
// cross-entropy; the full logits are never gathered. Under tp, outputs()
// reports no logits (a rank holds only a slice of them).
#include "core/check.h"
#include "models/heads/head.h"
#include "nn/vocab_xent.h"
#include "ops/device_ops.h"

namespace loom {

namespace {

class CausalLmHead final : public Head {
  public:
    CausalLmHead(ParamTable& t, const CausalLmHeadSpec& s) : spec_(s) {
        int weight_row = s.word_embeddings_row;
        if (weight_row >= 0) {
            t.tie(s.decoder, t.row(weight_row).name);
        } else {
            ParamRow r;
            r.name = s.decoder;
            r.shape = Shape{s.V, s.C};
            r.init_std = s.init_std;
            r.head = true;
            weight_row = t.add(r);
        }
        decoder_ = Linear::make_tied(weight_row, -1, s.C, s.V);
    }

    void bind(const ParamTable& t) override {
        ctx_ = t.op_ctx();
        decoder_.bind(t);
    }

    void shard(ParamTable& t, const ModelTp& tp) override {
        if (!tp.active()) return;
        // Tied: already the word table's slice (a no-op); untied: cut alike.
        t.shard_vocab_row(decoder_.weight.row, tp.size, tp.rank);
        decoder_.out = t.row(decoder_.weight.row).shape[0];
        decoder_.tp_role = TpRole::column;
        decoder_.tp = tp.buffer_comm();
        xent_.tp = tp.buffer_comm();
    }

    void set_compute_dtype(DType d) override { decoder_.compute = d; }
    HeadView view() const override {
        HeadView v;
        v.kind = Task::causal_lm;
        v.decoder = &decoder_;
        v.n_out = spec_.V;
        return v;
    }

    void plan(ActArena& a, int64_t B, int64_t T) override {
        B_ = B;
        T_ = T;
        logits_ = a.take_act(B * T * decoder_.out, ctx_.act);
        dlogits_ = a.take_act(B * T * decoder_.out, ctx_.act);
        targets_.resize(size_t(B * T));
        targets_dev_ = a.take_i64(B * T);
        if (xent_.tp) xent_.plan(a, B * T);
    }

    LossSum forward(CActPtr hidden, const HeadBatch& hb, const DropoutPlan&) override {
        const int64_t N = B_ * T_;
        decoder_.forward(logits_, hidden, N);
        has_labels_ = hb.labels != nullptr;
        LossSum l;
        if (!has_labels_) return l;
        for (int64_t b = 0; b < B_; ++b)
            for (int64_t t = 0; t < T_; ++t)
                targets_[size_t(b * T_ + t)] =
                    t + 1 < T_ ? hb.labels[b * T_ + t + 1] : k_ignore_index;
        ctx_.be->to_device(targets_dev_, targets_.data(), size_t(N) * sizeof(int64_t));
        const XentSum x = xent_.tp ? xent_.forward(ctx_, logits_, targets_dev_, N, spec_.V)
                                   : ctx_.nn().softmax_xent_forward(ctx_, nullptr, logits_,
                                                                    targets_dev_, N, spec_.V);
        l.sum = x.loss_sum;
        l.count = x.count;
        return l;
    }

    void backward(ActPtr dhidden, CActPtr hidden, double scale) override {
        LOOM_CHECK(has_labels_, "causal-LM backward needs 'labels' in the batch");
        const int64_t N = B_ * T_;
        if (xent_.tp)
            xent_.backward(ctx_, dlogits_, logits_, targets_dev_, N, spec_.V, scale);
        else
            ctx_.nn().softmax_xent_backward(ctx_, dlogits_, logits_, targets_dev_, N, spec_.V,
                                            scale);
        decoder_.backward(dhidden, dlogits_, hidden, N);
    }

    void outputs(const ActArena& a, std::map<std::string, Tensor>& out) const override {
        if (xent_.tp) return;  // a vocabulary slice is not HF's logits
        out["logits"] = a.view(logits_, Shape{B_, T_, spec_.V}, "logits");
    }

  private:
    OpCtx ctx_;  // where the table the head is bound to runs its ops
    CausalLmHeadSpec spec_;
    Linear decoder_;
    int64_t B_ = 0, T_ = 0;
    bool has_labels_ = false;
    VocabXent xent_;                // vocab-parallel (xent_.tp set); else the whole vocabulary
    ActPtr logits_;                 // (B, T, V), or (B, T, Vp/tp) vocab-parallel
    ActPtr dlogits_;                // like logits_
    std::vector<int64_t> targets_;  // (B, T) labels shifted left, -100 at the end
    int64_t* targets_dev_ = nullptr;  // the same in the backend's memory
};

}  // namespace

std::unique_ptr<Head> make_causal_lm_head(ParamTable& t, const CausalLmHeadSpec& spec) {
    return std::make_unique<CausalLmHead>(t, spec);
}

}  // namespace loom
