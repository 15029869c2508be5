// BERT-family model: embeddings and block construction; the layer loop is
// StackModel's.
#include "models/bert.h"

#include <cstring>

#include "core/check.h"
#include "models/hf_names.h"
#include "models/stack_model.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "ops/device_ops.h"

namespace loom {

namespace {

class BertFamilyModel final : public StackModel {
  public:
    BertFamilyModel(const ModelConfig& cfg, const ModelPlacement& placement)
        : StackModel(cfg, placement) {
        const ModelConfig& c = config_;
        const EncoderNames names = encoder_hf_names(c);
        table_.set_base_prefix(names.base);
        const int64_t E = c.embedding_size, C = c.hidden_size;
        const double std = c.initializer_range;
        albert_ = c.family == ModelFamily::albert;
        roberta_ = c.family == ModelFamily::roberta;

        word_ = Embedding::make(table_, names.word, c.vocab_size, E, c.pad_token_id, std);
        // RoBERTa's position table has padding_idx = pad (row `pad` never trains).
        const bool sinusoidal = c.sinusoidal_pos_embds;
        pos_ = Embedding::make(table_, names.position, c.max_position_embeddings, E,
                               roberta_ ? c.pad_token_id : -1, std,
                               sinusoidal ? InitRule::sinusoidal : InitRule::normal, !sinusoidal);
        if (!names.token_type.empty())
            type_ = Embedding::make(table_, names.token_type, c.type_vocab_size, E, -1, std);
        emb_norm_ = LayerNorm::make(table_, names.emb_norm, E, c.layer_norm_eps);
        if (albert_)
            mapping_in_ = Linear::make(table_, names.mapping_in, E, C, WeightLayout::out_in, true,
                                       {std, false, TpRole::none});

        const Activation act = config_activation(c);
        for (const auto& bn : names.blocks) blocks_.push_back(make_block(bn, act));
        if (albert_) {
            const int64_t per_group = c.num_hidden_layers / c.num_hidden_groups;
            for (int64_t i = 0; i < c.num_hidden_layers; ++i)
                for (int64_t j = 0; j < c.inner_group_num; ++j)
                    schedule_.push_back(int((i / per_group) * c.inner_group_num + j));
            apps_per_layer_ = c.inner_group_num;
        } else {
            for (int64_t i = 0; i < c.num_hidden_layers; ++i) schedule_.push_back(int(i));
        }

        switch (c.task) {
            case Task::base:
                break;
            case Task::masked_lm: {
                MlmHeadSpec s = encoder_mlm_head_spec(c);
                s.word_embeddings_row = c.tie_word_embeddings ? word_.table.row : -1;
                head_ = make_mlm_head(table_, s);
                break;
            }
            case Task::sequence_classification:
                LOOM_CHECK(c.num_labels >= 2,
                           "{}: num_labels {} is not supported (regression needs num_labels >= 2 "
                           "classes)",
                           c.source, c.num_labels);
                LOOM_CHECK(
                    c.problem_type.empty() || c.problem_type == "single_label_classification",
                    "{}: problem_type '{}' is not supported (only single_label_classification)",
                    c.source, c.problem_type);
                head_ = make_seq_cls_head(table_, encoder_cls_head_spec(c, names.base));
                break;
            case Task::question_answering:
                head_ = make_qa_head(table_, encoder_qa_head_spec(c));
                break;
            case Task::causal_lm:
                LOOM_FAIL("{}: causal LM is not supported for {}", c.source, family_name(c.family));
        }
        finish_build();
    }

  private:
    TransformerBlock make_block(const EncoderBlockNames& n, Activation act) {
        const ModelConfig& c = config_;
        const int64_t C = c.hidden_size, I = c.intermediate_size;
        const double std = c.initializer_range;
        TransformerBlock b;
        b.norm = NormPlacement::post;
        b.C = C;
        b.NH = c.num_attention_heads;
        b.I = I;
        b.attn.C = C;
        b.attn.NH = c.num_attention_heads;
        b.attn.causal = false;
        b.attn.qkv = Linear::make_fused(table_, {n.query, n.key, n.value}, C, {C, C, C},
                                        {std, false, TpRole::column});
        b.attn.proj = Linear::make(table_, n.attn_out, C, C, WeightLayout::out_in, true,
                                   {std, false, TpRole::row});
        b.ln1 = LayerNorm::make(table_, n.attn_norm, C, c.layer_norm_eps);
        b.mlp.fc = Linear::make(table_, n.ffn_in, C, I, WeightLayout::out_in, true,
                                {std, false, TpRole::column});
        b.mlp.proj = Linear::make(table_, n.ffn_out, I, C, WeightLayout::out_in, true,
                                  {std, false, TpRole::row});
        b.mlp.act = act;
        b.ln2 = LayerNorm::make(table_, n.out_norm, C, c.layer_norm_eps);
        return b;
    }

    void bind_embeddings(const ParamTable& t) override {
        word_.bind(t);
        pos_.bind(t);
        type_.bind(t);
        emb_norm_.bind(t);
        mapping_in_.bind(t);
    }

    Embedding& word_embeddings() override { return word_; }
    void set_embeddings_compute(DType d) override { mapping_in_.compute = d; }

    EmbeddingsView embeddings_view() const override {
        EmbeddingsView v;
        v.word = &word_;
        v.position = &pos_;
        v.token_type = type_.table.defined() ? &type_ : nullptr;
        v.positions = roberta_ ? PositionIds::from_padding : PositionIds::sequential;
        v.pad_token_id = config_.pad_token_id;
        v.norm = &emb_norm_;
        v.mapping = albert_ ? &mapping_in_ : nullptr;
        v.dropout = config_.embedding_dropout;
        v.E = config_.embedding_size;
        return v;
    }

    void plan_embeddings(ActArena& a, int64_t B, int64_t T) override {
        const int64_t N = B * T, E = config_.embedding_size;
        sum_ = a.take_act(N * E, ctx_.act);
        dsum_ = a.take_act(N * E, ctx_.act);
        norm_acts_.plan(a, N);
        if (albert_) {
            emb_out_ = a.take_act(N * E, ctx_.act);
            demb_out_ = a.take_act(N * E, ctx_.act);
        }
        pos_ids_.resize(size_t(N));
        pos_dev_ = a.take_i64(N);
    }

    void fill_position_ids() {
        const ModelConfig& c = config_;
        const int64_t max_pos = c.max_position_embeddings;
        if (roberta_) {
            // HF create_position_ids_from_input_ids: pads get `pad`, real tokens
            // count from pad + 1.
            const int64_t pad = c.pad_token_id;
            for (int64_t b = 0; b < B_; ++b) {
                int64_t count = 0;
                for (int64_t t = 0; t < T_; ++t) {
                    const int64_t i = b * T_ + t;
                    const bool real = ids_[size_t(i)] != pad;
                    count += real;
                    pos_ids_[size_t(i)] = real ? count + pad : pad;
                    LOOM_CHECK(pos_ids_[size_t(i)] < max_pos,
                               "a row of {} tokens holds more non-pad tokens than the model "
                               "accepts: {}",
                               T_, describe_max_positions(c));
                }
            }
            return;
        }
        LOOM_CHECK(T_ <= max_pos, "sequence length {} exceeds what the model accepts: {}", T_,
                   describe_max_positions(c));
        for (int64_t b = 0; b < B_; ++b)
            for (int64_t t = 0; t < T_; ++t) pos_ids_[size_t(b * T_ + t)] = t;
    }

    void embed_forward(ActPtr h0) override {
        const int64_t N = B_ * T_, E = config_.embedding_size;
        fill_position_ids();
        upload(pos_dev_, pos_ids_);
        // HF order: (word + token_type) + position.
        word_.forward(sum_, ids_dev_, N);
        if (type_.table.defined()) {
            if (types_.empty()) {  // HF: token type 0 everywhere
                types_.assign(size_t(N), 0);
                upload(types_dev_, types_);
            }
            type_.forward(sum_, types_dev_, N, /*accumulate=*/true);
        }
        pos_.forward(sum_, pos_dev_, N, /*accumulate=*/true);
        ActPtr out = albert_ ? emb_out_ : h0;
        emb_norm_.forward(out, norm_acts_, sum_, N);
        drop_emb_ = drop_.spec(config_.embedding_dropout, 0, DropoutPlan::embeddings);
        if (drop_emb_.active()) ctx_.nn().dropout_forward(ctx_, out, out, B_, T_ * E, drop_emb_);
        if (albert_) mapping_in_.forward(h0, emb_out_, N);
    }

    void embed_backward(ActPtr dh0) override {
        const int64_t N = B_ * T_, E = config_.embedding_size;
        ActPtr dout = dh0;
        if (albert_) {
            mapping_in_.backward(demb_out_, dh0, emb_out_, N);
            dout = demb_out_;
        }
        if (drop_emb_.active()) ctx_.nn().dropout_backward(ctx_, dout, dout, B_, T_ * E, drop_emb_);
        emb_norm_.backward(dsum_, dout, sum_, norm_acts_, N);
        word_.backward(dsum_, ids_dev_, N);
        if (type_.table.defined()) type_.backward(dsum_, types_dev_, N);
        pos_.backward(dsum_, pos_dev_, N);
    }

    bool albert_ = false, roberta_ = false;
    Embedding word_, pos_, type_;
    LayerNorm emb_norm_;
    Linear mapping_in_;  // ALBERT: E -> C
    LayerNorm::Acts norm_acts_;
    DropoutSpec drop_emb_;
    std::vector<int64_t> pos_ids_;  // (B, T)
    int64_t* pos_dev_ = nullptr;    // pos_ids_ in the backend's memory
    ActPtr sum_;                    // (B, T, E) word + type + position
    ActPtr dsum_;                   // (B, T, E)
    ActPtr emb_out_;                // (B, T, E) ALBERT: LayerNorm output (mapping input)
    ActPtr demb_out_;               // (B, T, E)
};

}  // namespace

std::unique_ptr<Model> build_bert_family(const ModelConfig& config,
                                         const ModelPlacement& placement) {
    return std::make_unique<BertFamilyModel>(config, placement);
}

}  // namespace loom
