// GPT-2 model: embeddings and block construction; the layer loop is StackModel's.
#include "models/gpt2.h"

#include <cmath>

#include "core/check.h"
#include "models/hf_names.h"
#include "models/stack_model.h"
#include "nn/embedding.h"
#include "ops/device_ops.h"

namespace loom {

namespace {

class Gpt2Model final : public StackModel {
  public:
    Gpt2Model(const ModelConfig& cfg, const ModelPlacement& placement)
        : StackModel(cfg, placement) {
        const ModelConfig& c = config_;
        LOOM_CHECK(c.scale_attn_weights, "{}: scale_attn_weights=false is not supported", c.source);
        LOOM_CHECK(!c.scale_attn_by_inverse_layer_idx,
                   "{}: scale_attn_by_inverse_layer_idx=true is not supported", c.source);
        const Gpt2Names names = gpt2_hf_names(c);
        table_.set_base_prefix(names.base);
        const int64_t C = c.hidden_size, I = c.intermediate_size;
        const double std = c.initializer_range;
        // HF scales the residual projections' init by 1/sqrt(2 * n_layer).
        const double proj_std = std / std::sqrt(2.0 * double(c.num_hidden_layers));
        const Activation act = config_activation(c);

        wte_ = Embedding::make(table_, names.wte, c.vocab_size, C, -1, std);
        wpe_ = Embedding::make(table_, names.wpe, c.max_position_embeddings, C, -1, std);
        for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
            const Gpt2BlockNames& n = names.blocks[size_t(i)];
            TransformerBlock b;
            b.norm = NormPlacement::pre;
            b.C = C;
            b.NH = c.num_attention_heads;
            b.I = I;
            b.attn.C = C;
            b.attn.NH = c.num_attention_heads;
            b.attn.causal = true;
            b.ln1 = LayerNorm::make(table_, n.ln_1, C, c.layer_norm_eps);
            b.attn.qkv = Linear::make(table_, n.c_attn, C, 3 * C, WeightLayout::in_out, true,
                                      {std, false, TpRole::column, /*tp_blocks=*/3});
            b.attn.proj = Linear::make(table_, n.c_proj, C, C, WeightLayout::in_out, true,
                                       {proj_std, false, TpRole::row});
            b.ln2 = LayerNorm::make(table_, n.ln_2, C, c.layer_norm_eps);
            b.mlp.fc = Linear::make(table_, n.c_fc, C, I, WeightLayout::in_out, true,
                                    {std, false, TpRole::column});
            b.mlp.proj = Linear::make(table_, n.mlp_proj, I, C, WeightLayout::in_out, true,
                                      {proj_std, false, TpRole::row});
            b.mlp.act = act;
            blocks_.push_back(b);
            schedule_.push_back(int(i));
        }
        final_norm_ = LayerNorm::make(table_, names.ln_f, C, c.layer_norm_eps);

        switch (c.task) {
            case Task::base:
                break;
            case Task::causal_lm: {
                CausalLmHeadSpec s;
                s.decoder = names.lm_head;
                s.C = C;
                s.V = c.vocab_size;
                s.init_std = std;
                s.word_embeddings_row = c.tie_word_embeddings ? wte_.table.row : -1;
                head_ = make_causal_lm_head(table_, s);
                break;
            }
            default:
                LOOM_FAIL("{}: task '{}' is not supported for GPT-2 (only causal-lm)", c.source,
                          task_name(c.task));
        }
        finish_build();
    }

  private:
    void bind_embeddings(const ParamTable& t) override {
        wte_.bind(t);
        wpe_.bind(t);
    }

    Embedding& word_embeddings() override { return wte_; }

    EmbeddingsView embeddings_view() const override {
        EmbeddingsView v;
        v.word = &wte_;
        v.position = &wpe_;
        v.positions = PositionIds::sequential;
        v.dropout = config_.embedding_dropout;
        v.E = config_.hidden_size;
        return v;
    }

    void plan_embeddings(ActArena& a, int64_t B, int64_t T) override {
        pos_ids_.resize(size_t(B * T));
        pos_dev_ = a.take_i64(B * T);
    }

    void embed_forward(ActPtr h0) override {
        const int64_t N = B_ * T_, C = config_.hidden_size;
        LOOM_CHECK(T_ <= config_.max_position_embeddings,
                   "sequence length {} exceeds what the model accepts: {}", T_,
                   describe_max_positions(config_));
        // Packed documents read their own positions (ModelInputs::position_ids).
        if (!positions_.empty()) {
            pos_ids_ = positions_;
        } else {
            for (int64_t b = 0; b < B_; ++b)
                for (int64_t t = 0; t < T_; ++t) pos_ids_[size_t(b * T_ + t)] = t;
        }
        upload(pos_dev_, pos_ids_);
        wte_.forward(h0, ids_dev_, N);
        wpe_.forward(h0, pos_dev_, N, /*accumulate=*/true);
        drop_emb_ = drop_.spec(config_.embedding_dropout, 0, DropoutPlan::embeddings);
        if (drop_emb_.active()) ctx_.nn().dropout_forward(ctx_, h0, h0, B_, T_ * C, drop_emb_);
    }

    void embed_backward(ActPtr dh0) override {
        const int64_t N = B_ * T_, C = config_.hidden_size;
        if (drop_emb_.active()) ctx_.nn().dropout_backward(ctx_, dh0, dh0, B_, T_ * C, drop_emb_);
        wte_.backward(dh0, ids_dev_, N);
        wpe_.backward(dh0, pos_dev_, N);
    }

    Embedding wte_, wpe_;
    DropoutSpec drop_emb_;
    std::vector<int64_t> pos_ids_;  // (B, T)
    int64_t* pos_dev_ = nullptr;    // pos_ids_ in the backend's memory
};

}  // namespace

std::unique_ptr<Model> build_gpt2(const ModelConfig& config, const ModelPlacement& placement) {
    return std::make_unique<Gpt2Model>(config, placement);
}

}  // namespace loom
