// Sequence-classification head on token 0 (BERT/ALBERT pooler + classifier,
// RoBERTa's classification head, DistilBERT's pre_classifier).
//
// Loss: cross-entropy summed over the batch, counted once per sample (HF's
// single_label_classification mean is sum / B). Only hidden[:, 0] receives a
// gradient.
#include <cstring>

#include "core/check.h"
#include "models/heads/head.h"
#include "ops/device_ops.h"

namespace loom {

namespace {

class SeqClsHead final : public Head {
  public:
    SeqClsHead(ParamTable& t, const ClsHeadSpec& s) : spec_(s) {
        const LinearInit init{s.init_std, /*head=*/true, TpRole::none};
        dense_ = Linear::make(t, s.dense, s.C, s.C, WeightLayout::out_in, true, init);
        out_ = Linear::make(t, s.out, s.C, s.num_labels, WeightLayout::out_in, true, init);
    }

    void bind(const ParamTable& t) override {
        ctx_ = t.op_ctx();
        dense_.bind(t);
        out_.bind(t);
    }

    HeadView view() const override {
        HeadView v;
        v.kind = Task::sequence_classification;
        v.dense = &dense_;
        v.decoder = &out_;
        v.act = spec_.act;
        v.p_drop_a = spec_.p_drop_a;
        v.p_drop_b = spec_.p_drop_b;
        v.n_out = spec_.num_labels;
        return v;
    }

    bool rows_read(const HeadBatch& hb, std::vector<int64_t>& rows) const override {
        rows.resize(size_t(hb.B));
        for (int64_t b = 0; b < hb.B; ++b) rows[size_t(b)] = b * hb.T;
        return true;
    }

    void plan(ActArena& a, int64_t B, int64_t T) override {
        B_ = B;
        T_ = T;
        const int64_t C = spec_.C;
        x0_ = a.take(B * C);
        xa_ = a.take(B * C);
        pre_ = a.take(B * C);
        post_ = a.take(B * C);
        logits_ = a.take(B * spec_.num_labels);
        dlogits_ = a.take(B * spec_.num_labels);
        dpost_ = a.take(B * C);
        dxa_ = a.take(B * C);
    }

    LossSum forward(const float* hidden, const HeadBatch& hb, const DropoutPlan& drop) override {
        const int64_t C = spec_.C;
        for (int64_t b = 0; b < B_; ++b)
            std::memcpy(x0_ + b * C, hidden + b * T_ * C, size_t(C) * sizeof(float));
        drop_a_ = drop.spec(spec_.p_drop_a, 0, DropoutPlan::head_a);
        drop_b_ = drop.spec(spec_.p_drop_b, 0, DropoutPlan::head_b);
        const float* xa = x0_;
        if (drop_a_.active()) {
            ctx_.nn().dropout_forward(ctx_, xa_, x0_, B_, C, drop_a_);
            xa = xa_;
        }
        xa_used_ = xa;
        dense_.forward(pre_, xa, B_);
        ctx_.nn().activation_forward(ctx_, post_, ctx_.act, pre_, B_ * C, spec_.act);
        if (drop_b_.active()) ctx_.nn().dropout_forward(ctx_, post_, post_, B_, C, drop_b_);
        out_.forward(logits_, post_, B_);
        labels_ = hb.labels;
        LossSum l;
        if (labels_) {
            const XentSum x = ctx_.nn().softmax_xent_forward(ctx_, nullptr, logits_, labels_, B_,
                                                             spec_.num_labels);
            l.sum = x.loss_sum;
            l.count = x.count;
        }
        return l;
    }

    void backward(float* dhidden, const float*, double scale) override {
        LOOM_CHECK(labels_ != nullptr,
                   "sequence-classification backward needs 'labels' in the batch");
        const int64_t C = spec_.C;
        ctx_.nn().softmax_xent_backward(ctx_, dlogits_, logits_, labels_, B_, spec_.num_labels,
                                        scale);
        out_.backward(dpost_, dlogits_, post_, B_);
        if (drop_b_.active()) ctx_.nn().dropout_backward(ctx_, dpost_, dpost_, B_, C, drop_b_);
        ctx_.nn().activation_backward(ctx_, dpost_, pre_, dpost_, B_ * C, spec_.act);
        dense_.backward(dxa_, dpost_, xa_used_, B_);
        if (drop_a_.active()) ctx_.nn().dropout_backward(ctx_, dxa_, dxa_, B_, C, drop_a_);
        std::memset(dhidden, 0, size_t(B_ * T_ * C) * sizeof(float));
        for (int64_t b = 0; b < B_; ++b)
            std::memcpy(dhidden + b * T_ * C, dxa_ + b * C, size_t(C) * sizeof(float));
    }

    void outputs(const ActArena& a, std::map<std::string, Tensor>& out) const override {
        out["logits"] = a.view(logits_, Shape{B_, spec_.num_labels}, "logits");
    }

  private:
    OpCtx ctx_;  // where the table the head is bound to runs its ops
    ClsHeadSpec spec_;
    Linear dense_, out_;
    int64_t B_ = 0, T_ = 0;
    const int64_t* labels_ = nullptr;
    DropoutSpec drop_a_, drop_b_;
    const float* xa_used_ = nullptr;
    float* x0_ = nullptr;       // (B, C) hidden at token 0
    float* xa_ = nullptr;       // (B, C) after dropout_a
    float* pre_ = nullptr;      // (B, C) dense output
    float* post_ = nullptr;     // (B, C) after activation and dropout_b
    float* logits_ = nullptr;   // (B, num_labels)
    float* dlogits_ = nullptr;  // (B, num_labels)
    float* dpost_ = nullptr;    // (B, C)
    float* dxa_ = nullptr;      // (B, C)
};

}  // namespace

std::unique_ptr<Head> make_seq_cls_head(ParamTable& t, const ClsHeadSpec& spec) {
    return std::make_unique<SeqClsHead>(t, spec);
}

}  // namespace loom
