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
        xd_ = a.take(N * spec_.C);
        out2_ = a.take(N * 2);
        start_ = a.take(N);
        end_ = a.take(N);
        dstart_ = a.take(N);
        dend_ = a.take(N);
        starts_.resize(size_t(B));
        ends_.resize(size_t(B));
    }

    LossSum forward(const float* hidden, const HeadBatch& hb, const DropoutPlan& drop) override {
        const int64_t N = B_ * T_;
        drop_ = drop.spec(spec_.p_drop, 0, DropoutPlan::head_a);
        x_ = hidden;
        if (drop_.active()) {
            ctx_.nn().dropout_forward(ctx_, xd_, hidden, B_, T_ * spec_.C, drop_);
            x_ = xd_;
        }
        out_.forward(out2_, x_, N);
        for (int64_t i = 0; i < N; ++i) {
            start_[i] = out2_[2 * i];
            end_[i] = out2_[2 * i + 1];
        }
        has_labels_ = hb.start_positions && hb.end_positions;
        LossSum l;
        if (!has_labels_) return l;
        for (int64_t b = 0; b < B_; ++b) {
            starts_[size_t(b)] = clamp_position(hb.start_positions[b]);
            ends_[size_t(b)] = clamp_position(hb.end_positions[b]);
        }
        const XentSum s =
            ctx_.nn().softmax_xent_forward(ctx_, nullptr, start_, starts_.data(), B_, T_);
        const XentSum e = ctx_.nn().softmax_xent_forward(ctx_, nullptr, end_, ends_.data(), B_, T_);
        l.sum = s.loss_sum + e.loss_sum;
        l.count = s.count + e.count;
        return l;
    }

    void backward(float* dhidden, const float*, double scale) override {
        LOOM_CHECK(has_labels_,
                   "question-answering backward needs 'start_positions' and 'end_positions'");
        const int64_t N = B_ * T_;
        ctx_.nn().softmax_xent_backward(ctx_, dstart_, start_, starts_.data(), B_, T_, scale);
        ctx_.nn().softmax_xent_backward(ctx_, dend_, end_, ends_.data(), B_, T_, scale);
        for (int64_t i = 0; i < N; ++i) {  // reuse out2 for d(out2): forward values are split out
            out2_[2 * i] = dstart_[i];
            out2_[2 * i + 1] = dend_[i];
        }
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
    int64_t clamp_position(int64_t p) const {
        const int64_t c = std::clamp<int64_t>(p, 0, T_);
        return c == T_ ? k_ignore_index : c;
    }

    QaHeadSpec spec_;
    Linear out_;
    int64_t B_ = 0, T_ = 0;
    bool has_labels_ = false;
    DropoutSpec drop_;
    const float* x_ = nullptr;            // qa_outputs' input: hidden or xd
    float* xd_ = nullptr;                 // (B, T, C) hidden after dropout
    float* out2_ = nullptr;               // (B, T, 2) qa_outputs (then its gradient in backward)
    float* start_ = nullptr;              // (B, T)
    float* end_ = nullptr;                // (B, T)
    float* dstart_ = nullptr;             // (B, T)
    float* dend_ = nullptr;               // (B, T)
    std::vector<int64_t> starts_, ends_;  // (B) clamped targets
};

}  // namespace

std::unique_ptr<Head> make_qa_head(ParamTable& t, const QaHeadSpec& spec) {
    return std::make_unique<QaHead>(t, spec);
}

}  // namespace loom
