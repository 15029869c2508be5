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

    void set_compute_dtype(DType d) override { dense_.compute = out_.compute = d; }
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
        const DType t = ctx_.act;
        x0_ = a.take_act(B * C, t);
        xa_ = a.take_act(B * C, t);
        pre_ = a.take_act(B * C, t);
        post_ = a.take_act(B * C, t);
        logits_ = a.take_act(B * spec_.num_labels, t);
        dlogits_ = a.take_act(B * spec_.num_labels, t);
        dpost_ = a.take_act(B * C, t);
        dxa_ = a.take_act(B * C, t);
        labels_dev_ = a.take_i64(B);
    }

    LossSum forward(CActPtr hidden, const HeadBatch& hb, const DropoutPlan& drop) override {
        const int64_t C = spec_.C;
        const size_t row = size_t(C) * dtype_size(ctx_.act);
        ctx_.be->copy_2d(x0_, row, hidden, size_t(T_) * row, row, size_t(B_));  // token 0
        drop_a_ = drop.spec(spec_.p_drop_a, 0, DropoutPlan::head_a);
        drop_b_ = drop.spec(spec_.p_drop_b, 0, DropoutPlan::head_b);
        CActPtr xa = x0_;
        if (drop_a_.active()) {
            ctx_.nn().dropout_forward(ctx_, xa_, x0_, B_, C, drop_a_);
            xa = xa_;
        }
        xa_used_ = xa;
        dense_.forward(pre_, xa, B_);
        ctx_.nn().activation_forward(ctx_, post_, ctx_.act, pre_, B_ * C, spec_.act);
        if (drop_b_.active()) ctx_.nn().dropout_forward(ctx_, post_, post_, B_, C, drop_b_);
        out_.forward(logits_, post_, B_);
        labels_ = nullptr;
        LossSum l;
        if (hb.labels) {
            labels_ = labels_dev_;
            ctx_.be->to_device(labels_dev_, hb.labels, size_t(B_) * sizeof(int64_t));
            const XentSum x = ctx_.nn().softmax_xent_forward(ctx_, nullptr, logits_, labels_, B_,
                                                             spec_.num_labels);
            l.sum = x.loss_sum;
            l.count = x.count;
        }
        return l;
    }

    void backward(ActPtr dhidden, CActPtr, double scale) override {
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
        const size_t row = size_t(C) * dtype_size(ctx_.act);
        ctx_.be->zero(dhidden, size_t(B_ * T_) * row);
        ctx_.be->copy_2d(dhidden, size_t(T_) * row, dxa_, row, row, size_t(B_));
    }

    void outputs(const ActArena& a, std::map<std::string, Tensor>& out) const override {
        out["logits"] = a.view(logits_, Shape{B_, spec_.num_labels}, "logits");
    }

  private:
    OpCtx ctx_;  // where the table the head is bound to runs its ops
    ClsHeadSpec spec_;
    Linear dense_, out_;
    int64_t B_ = 0, T_ = 0;
    const int64_t* labels_ = nullptr;  // labels_dev_ when the batch has labels
    int64_t* labels_dev_ = nullptr;    // (B) in the backend's memory
    DropoutSpec drop_a_, drop_b_;
    CActPtr xa_used_;
    ActPtr x0_;       // (B, C) hidden at token 0
    ActPtr xa_;       // (B, C) after dropout_a
    ActPtr pre_;      // (B, C) dense output
    ActPtr post_;     // (B, C) after activation and dropout_b
    ActPtr logits_;   // (B, num_labels)
    ActPtr dlogits_;  // (B, num_labels)
    ActPtr dpost_;    // (B, C)
    ActPtr dxa_;      // (B, C)
};

}  // namespace

std::unique_ptr<Head> make_seq_cls_head(ParamTable& t, const ClsHeadSpec& spec) {
    return std::make_unique<SeqClsHead>(t, spec);
}

}  // namespace loom
