// Llama model: embeddings and block construction; the layer loop is
// StackModel's, the block's math nn/'s (TransformerBlock with RMSNorm slots,
// SelfAttention with NKV and rope, the gated Mlp).
#include "models/llama.h"

#include "core/check.h"
#include "models/hf_names.h"
#include "models/stack_model.h"
#include "nn/embedding.h"
#include "ops/device_ops.h"

namespace loom {

namespace {

class LlamaModel final : public StackModel {
  public:
    LlamaModel(const ModelConfig& cfg, const ModelPlacement& placement)
        : StackModel(cfg, placement) {
        const ModelConfig& c = config_;
        const LlamaNames names = llama_hf_names(c);
        table_.set_base_prefix(names.base);
        const int64_t C = c.hidden_size, I = c.intermediate_size, NH = c.num_attention_heads;
        const int64_t NKV = c.kv_heads(), KV = NKV * c.head_size();
        const double std = c.initializer_range;
        const double f = c.rope_scaling_factor;
        const RopeSpec rope{c.rope_theta, c.rope_scaling_dynamic ? 1.0 : f,
                            c.rope_scaling_dynamic ? f : 1.0, c.max_position_embeddings};

        embed_ = Embedding::make(table_, names.embed, c.vocab_size, C, c.pad_token_id, std);
        for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
            const LlamaBlockNames& n = names.blocks[size_t(i)];
            TransformerBlock b;
            b.norm = NormPlacement::pre;
            b.C = C;
            b.NH = NH;
            b.I = 2 * I;  // the fused gate|up output
            b.attn.C = C;
            b.attn.NH = NH;
            b.attn.NKV = NKV;
            b.attn.rope = rope;
            b.attn.causal = true;
            b.attn.window = c.sliding_window;
            b.ln1 = LayerNorm::make_rms(table_, n.input_norm, C, c.layer_norm_eps);
            b.attn.qkv =
                Linear::make_fused(table_, {n.q, n.k, n.v}, C, {C, KV, KV},
                                   {std, false, TpRole::column}, c.attention_bias || c.qkv_bias);
            b.attn.proj = Linear::make(table_, n.o, C, C, WeightLayout::out_in, c.attention_bias,
                                       {std, false, TpRole::row});
            b.ln2 = LayerNorm::make_rms(table_, n.post_norm, C, c.layer_norm_eps);
            b.mlp.fc = Linear::make_fused(table_, {n.gate, n.up}, C, {I, I},
                                          {std, false, TpRole::column}, c.mlp_bias);
            b.mlp.proj = Linear::make(table_, n.down, I, C, WeightLayout::out_in, c.mlp_bias,
                                      {std, false, TpRole::row});
            b.mlp.gated = true;
            blocks_.push_back(b);
            schedule_.push_back(int(i));
        }
        final_norm_ = LayerNorm::make_rms(table_, names.norm, C, c.layer_norm_eps);

        switch (c.task) {
            case Task::base:
                break;
            case Task::causal_lm: {
                CausalLmHeadSpec s;
                s.decoder = names.lm_head;
                s.C = C;
                s.V = c.vocab_size;
                s.init_std = std;
                s.word_embeddings_row = c.tie_word_embeddings ? embed_.table.row : -1;
                head_ = make_causal_lm_head(table_, s);
                break;
            }
            case Task::sequence_classification: {
                LastTokenClsSpec s;
                s.out = "score";
                s.C = C;
                s.num_labels = c.num_labels;
                s.pad_token_id = c.pad_token_id;
                s.init_std = std;
                head_ = make_last_token_cls_head(table_, s, &ids_);
                break;
            }
            default:
                LOOM_FAIL(
                    "{}: task '{}' is not supported for {} (causal-lm, "
                    "sequence-classification)",
                    c.source, task_name(c.task), c.model_type);
        }
        finish_build();
        LOOM_CHECK(c.sliding_window < 0 || ctx_.nn().attention_window,
                   "{}: {} has no {} attention kernel with a sliding window yet; train it on the "
                   "CPU (hyperparameters.use_cpu: true)",
                   c.source, c.architecture, table_.backend().name());
        LOOM_CHECK(ctx_.nn().decoder_supported(),
                   "{}: {} has no {} kernel yet (RMSNorm, rotary embeddings, grouped-query "
                   "attention, SwiGLU); train it on the CPU (hyperparameters.use_cpu: true)",
                   c.source, c.architecture, table_.backend().name());
    }

  private:
    void bind_embeddings(const ParamTable& t) override { embed_.bind(t); }

    Embedding& word_embeddings() override { return embed_; }

    EmbeddingsView embeddings_view() const override {
        EmbeddingsView v;
        v.word = &embed_;
        v.positions = PositionIds::sequential;
        v.dropout = config_.embedding_dropout;
        v.E = config_.hidden_size;
        return v;
    }

    void plan_embeddings(ActArena&, int64_t, int64_t) override {}

    void embed_forward(ActPtr h0) override {
        const int64_t N = B_ * T_, C = config_.hidden_size;
        embed_.forward(h0, ids_dev_, N);
        drop_emb_ = drop_.spec(config_.embedding_dropout, 0, DropoutPlan::embeddings);
        if (drop_emb_.active()) ctx_.nn().dropout_forward(ctx_, h0, h0, B_, T_ * C, drop_emb_);
    }

    void embed_backward(ActPtr dh0) override {
        const int64_t N = B_ * T_, C = config_.hidden_size;
        if (drop_emb_.active()) ctx_.nn().dropout_backward(ctx_, dh0, dh0, B_, T_ * C, drop_emb_);
        embed_.backward(dh0, ids_dev_, N);
    }

    Embedding embed_;
    DropoutSpec drop_emb_;
};

}  // namespace

std::unique_ptr<Model> build_llama(const ModelConfig& config, const ModelPlacement& placement) {
    return std::make_unique<LlamaModel>(config, placement);
}

}  // namespace loom
