// Extractive-QA head: qa_outputs (C -> 2) gives start and end logits per token.
//
// HF clamps positions to [0, T] and ignores T (a span outside the window);
// that maps to ignore_index here. The softmax runs over all T positions,
// padding included, as in HF.
#include <algorithm>

#include "core/check.h"
#include "models/heads/head.h"
#include "ops/device_ops.h"

namespace loom {

namespace {

class QaHead final : public Head {
  public:
    QaHead(ParamTable& t, const QaHeadSpec& s) : spec_(s) {
        const LinearInit init{s.init_std, /*head=*/true, TpRole::none};
        out_ = Linear::make(t, s.out, s.C, 2, WeightLayout::out_in, true, init);
    }

    void bind(const ParamTable& t) override {
        ctx_ = t.op_ctx();
        out_.bind(t);
    }

    void set_compute_dtype(DType d) override { out_.compute = d; }
    HeadView view() const override {
        HeadView v;
        v.kind = Task::question_answering;
        v.decoder = &out_;
        v.p_drop_a = spec_.p_drop;
        v.n_out = 2;
        return v;
    }

    void plan(ActArena& a, int64_t B, int64_t T) override {
        B_ = B;
        T_ = T;
        const int64_t N = B * T;
        const DType t = ctx_.act;
        xd_ = a.take_act(N * spec_.C, t);
        out2_ = a.take_act(N * 2, t);
        start_ = a.take_act(N, t);
        end_ = a.take_act(N, t);
        dstart_ = a.take_act(N, t);
        dend_ = a.take_act(N, t);
        starts_.resize(size_t(B));
        ends_.resize(size_t(B));
        starts_dev_ = a.take_i64(B);
        ends_dev_ = a.take_i64(B);
    }

    LossSum forward(CActPtr hidden, const HeadBatch& hb, const DropoutPlan& drop) override {
        const int64_t N = B_ * T_;
        drop_ = drop.spec(spec_.p_drop, 0, DropoutPlan::head_a);
        x_ = hidden;
        if (drop_.active()) {
            ctx_.nn().dropout_forward(ctx_, xd_, hidden, B_, T_ * spec_.C, drop_);
            x_ = xd_;
        }
        out_.forward(out2_, x_, N);
        split_columns(start_, end_, out2_, N);
        has_labels_ = hb.start_positions && hb.end_positions;
        LossSum l;
        if (!has_labels_) return l;
        for (int64_t b = 0; b < B_; ++b) {
            starts_[size_t(b)] = clamp_position(hb.start_positions[b]);
            ends_[size_t(b)] = clamp_position(hb.end_positions[b]);
        }
        ctx_.be->to_device(starts_dev_, starts_.data(), size_t(B_) * sizeof(int64_t));
        ctx_.be->to_device(ends_dev_, ends_.data(), size_t(B_) * sizeof(int64_t));
        const XentSum s = ctx_.nn().softmax_xent_forward(ctx_, nullptr, start_, starts_dev_, B_, T_);
        const XentSum e = ctx_.nn().softmax_xent_forward(ctx_, nullptr, end_, ends_dev_, B_, T_);
        l.sum = s.loss_sum + e.loss_sum;
        l.count = s.count + e.count;
        return l;
    }

    void backward(ActPtr dhidden, CActPtr, double scale) override {
        LOOM_CHECK(has_labels_,
                   "question-answering backward needs 'start_positions' and 'end_positions'");
        const int64_t N = B_ * T_;
        ctx_.nn().softmax_xent_backward(ctx_, dstart_, start_, starts_dev_, B_, T_, scale);
        ctx_.nn().softmax_xent_backward(ctx_, dend_, end_, ends_dev_, B_, T_, scale);
        // out2 holds d(out2) now: its forward values were split out.
        const size_t e = dtype_size(ctx_.act);
        ctx_.be->copy_2d(out2_, 2 * e, dstart_, e, e, size_t(N));
        ctx_.be->copy_2d(out2_ + 1, 2 * e, dend_, e, e, size_t(N));
        out_.backward(dhidden, out2_, x_, N);
        if (drop_.active())
            ctx_.nn().dropout_backward(ctx_, dhidden, dhidden, B_, T_ * spec_.C, drop_);
    }

    void outputs(const ActArena& a, std::map<std::string, Tensor>& out) const override {
        out["start_logits"] = a.view(start_, Shape{B_, T_}, "start_logits");
        out["end_logits"] = a.view(end_, Shape{B_, T_}, "end_logits");
    }

  private:
    OpCtx ctx_;  // where the table the head is bound to runs its ops
    // (N, 2) -> its columns, (N) each.
    void split_columns(ActPtr a, ActPtr b, CActPtr ab, int64_t N) const {
        const size_t e = dtype_size(ctx_.act);
        ctx_.be->copy_2d(a, e, ab, 2 * e, e, size_t(N));
        ctx_.be->copy_2d(b, e, ab + 1, 2 * e, e, size_t(N));
    }
    int64_t clamp_position(int64_t p) const {
        const int64_t c = std::clamp<int64_t>(p, 0, T_);
        return c == T_ ? k_ignore_index : c;
    }

    QaHeadSpec spec_;
    Linear out_;
    int64_t B_ = 0, T_ = 0;
    bool has_labels_ = false;
    DropoutSpec drop_;
    CActPtr x_;                           // qa_outputs' input: hidden or xd
    ActPtr xd_;                           // (B, T, C) hidden after dropout
    ActPtr out2_;                         // (B, T, 2) qa_outputs (then its gradient in backward)
    ActPtr start_;                        // (B, T)
    ActPtr end_;                          // (B, T)
    ActPtr dstart_;                       // (B, T)
    ActPtr dend_;                         // (B, T)
    std::vector<int64_t> starts_, ends_;  // (B) clamped targets
    int64_t* starts_dev_ = nullptr;       // the same in the backend's memory
    int64_t* ends_dev_ = nullptr;
};

}  // namespace

std::unique_ptr<Head> make_qa_head(ParamTable& t, const QaHeadSpec& spec) {
    return std::make_unique<QaHead>(t, spec);
}

}  // namespace loom
