// Sequence-classification head at each sample's last token (the Llama
// family's). Loss: cross-entropy summed over the batch, counted once per
// sample, as seq_cls.cpp. Only the pooled position of each sample receives a
// gradient. The pooled positions are picked on the host from the model's
// copy of the ids, then the rows are moved with Backend::copy.
#include "core/check.h"
#include "models/heads/head.h"
#include "ops/device_ops.h"

namespace loom {

namespace {

class LastTokenClsHead final : public Head {
  public:
    LastTokenClsHead(ParamTable& t, const LastTokenClsSpec& s, const std::vector<int64_t>* ids)
        : spec_(s), ids_(ids) {
        out_ = Linear::make(t, s.out, s.C, s.num_labels, WeightLayout::out_in, false,
                            LinearInit{s.init_std, /*head=*/true, TpRole::none});
    }

    void bind(const ParamTable& t) override {
        ctx_ = t.op_ctx();
        out_.bind(t);
    }

    void set_compute_dtype(DType d) override { out_.compute = d; }
    HeadView view() const override {
        HeadView v;
        v.kind = Task::sequence_classification;
        v.decoder = &out_;
        v.n_out = spec_.num_labels;
        return v;
    }

    bool rows_read(const HeadBatch& hb, std::vector<int64_t>& rows) const override {
        rows = pooled(hb.B, hb.T);
        for (int64_t b = 0; b < hb.B; ++b) rows[size_t(b)] += b * hb.T;
        return true;
    }

    void plan(ActArena& a, int64_t B, int64_t T) override {
        B_ = B;
        T_ = T;
        const DType t = ctx_.act;
        x_ = a.take_act(B * spec_.C, t);
        dx_ = a.take_act(B * spec_.C, t);
        logits_ = a.take_act(B * spec_.num_labels, t);
        dlogits_ = a.take_act(B * spec_.num_labels, t);
        labels_dev_ = a.take_i64(B);
    }

    LossSum forward(CActPtr hidden, const HeadBatch& hb, const DropoutPlan&) override {
        pos_ = pooled(B_, T_);
        const size_t row = size_t(spec_.C) * dtype_size(ctx_.act);
        for (int64_t b = 0; b < B_; ++b)
            ctx_.be->copy(x_ + b * spec_.C, hidden + (b * T_ + pos_[size_t(b)]) * spec_.C, row);
        out_.forward(logits_, x_, B_);
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
        ctx_.nn().softmax_xent_backward(ctx_, dlogits_, logits_, labels_, B_, spec_.num_labels,
                                        scale);
        out_.backward(dx_, dlogits_, x_, B_);
        const size_t row = size_t(spec_.C) * dtype_size(ctx_.act);
        ctx_.be->zero(dhidden, size_t(B_ * T_) * row);
        for (int64_t b = 0; b < B_; ++b)
            ctx_.be->copy(dhidden + (b * T_ + pos_[size_t(b)]) * spec_.C, dx_ + b * spec_.C, row);
    }

    void outputs(const ActArena& a, std::map<std::string, Tensor>& out) const override {
        out["logits"] = a.view(logits_, Shape{B_, spec_.num_labels}, "logits");
    }

  private:
    // HF: argmax(input_ids == pad_token_id) - 1, modulo T.
    std::vector<int64_t> pooled(int64_t B, int64_t T) const {
        LOOM_CHECK(ids_ != nullptr && int64_t(ids_->size()) >= B * T,
                   "sequence classification: no input ids for the batch");
        LOOM_CHECK(spec_.pad_token_id >= 0 || B == 1,
                   "sequence classification of batches of {} samples needs pad_token_id in the "
                   "model config (the last real token of a row is found by it)",
                   B);
        std::vector<int64_t> pos(size_t(B), T - 1);
        if (spec_.pad_token_id < 0) return pos;
        for (int64_t b = 0; b < B; ++b) {
            int64_t first = 0;  // argmax of an all-false row is 0
            for (int64_t t = 0; t < T; ++t)
                if ((*ids_)[size_t(b * T + t)] == spec_.pad_token_id) {
                    first = t;
                    break;
                }
            pos[size_t(b)] = ((first - 1) % T + T) % T;
        }
        return pos;
    }

    OpCtx ctx_;
    LastTokenClsSpec spec_;
    const std::vector<int64_t>* ids_;
    Linear out_;
    int64_t B_ = 0, T_ = 0;
    std::vector<int64_t> pos_;         // (B) pooled positions of the last forward
    const int64_t* labels_ = nullptr;  // labels_dev_ when the batch has labels
    int64_t* labels_dev_ = nullptr;    // (B) in the backend's memory
    ActPtr x_, dx_;                    // (B, C) pooled hidden states and their gradient
    ActPtr logits_, dlogits_;          // (B, num_labels)
};

}  // namespace

std::unique_ptr<Head> make_last_token_cls_head(ParamTable& t, const LastTokenClsSpec& spec,
                                               const std::vector<int64_t>* input_ids) {
    return std::make_unique<LastTokenClsHead>(t, spec, input_ids);
}

}  // namespace loom
