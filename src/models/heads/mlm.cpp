// Masked-LM head: dense -> activation -> LayerNorm -> tied decoder + bias.
//
// Logits are computed at every position (HF's output). Positions labelled
// -100 contribute nothing to the loss or the gradient.
#include "core/check.h"
#include "models/heads/head.h"
#include "ops/softmax_xent.h"

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
        dense_.bind(t);
        norm_.bind(t);
        decoder_.bind(t);
    }

    void plan(ActArena& a, int64_t B, int64_t T) override {
        B_ = B;
        T_ = T;
        const int64_t N = B * T;
        t1_ = a.take(N * spec_.E);
        t2_ = a.take(N * spec_.E);
        t3_ = a.take(N * spec_.E);
        norm_acts_.plan(a, N);
        logits_ = a.take(N * spec_.V);
        dlogits_ = a.take(N * spec_.V);
        d3_ = a.take(N * spec_.E);
        d2_ = a.take(N * spec_.E);
    }

    LossSum forward(const float* hidden, const HeadBatch& hb, const DropoutPlan&) override {
        const int64_t N = B_ * T_;
        dense_.forward(t1_, hidden, N);
        activation_forward(t2_, t1_, N * spec_.E, spec_.act);
        norm_.forward(t3_, norm_acts_, t2_, N);
        decoder_.forward(logits_, t3_, N);
        labels_ = hb.labels;
        LossSum l;
        if (labels_) {
            const XentSum x = softmax_xent_forward<float>(nullptr, logits_, labels_, N, spec_.V);
            l.sum = x.loss_sum;
            l.count = x.count;
        }
        return l;
    }

    void backward(float* dhidden, const float* hidden, double scale) override {
        LOOM_CHECK(labels_ != nullptr, "masked-LM backward needs 'labels' in the batch");
        const int64_t N = B_ * T_;
        softmax_xent_backward(dlogits_, logits_, labels_, N, spec_.V, scale);
        decoder_.backward(d3_, dlogits_, t3_, N);
        norm_.backward(d2_, d3_, t2_, norm_acts_, N);
        activation_backward(d2_, t1_, d2_, N * spec_.E, spec_.act);
        dense_.backward(dhidden, d2_, hidden, N);
    }

    void outputs(const ActArena& a, std::map<std::string, Tensor>& out) const override {
        out["logits"] = a.view(logits_, Shape{B_, T_, spec_.V}, "logits");
    }

private:
    MlmHeadSpec spec_;
    Linear dense_, decoder_;
    LayerNorm norm_;
    LayerNorm::Acts norm_acts_;
    int64_t B_ = 0, T_ = 0;
    const int64_t* labels_ = nullptr;
    float* t1_ = nullptr;       // (N, E) dense output
    float* t2_ = nullptr;       // (N, E) after the activation
    float* t3_ = nullptr;       // (N, E) after LayerNorm (decoder input)
    float* logits_ = nullptr;   // (N, V)
    float* dlogits_ = nullptr;  // (N, V)
    float* d3_ = nullptr;       // (N, E)
    float* d2_ = nullptr;       // (N, E)
};

}  // namespace

std::unique_ptr<Head> make_mlm_head(ParamTable& t, const MlmHeadSpec& spec) {
    return std::make_unique<MlmHead>(t, spec);
}

}  // namespace loom
