// StackModel: what BERT-like encoders and GPT-2 share — embeddings, a stack of
// transformer blocks applied by a schedule, an optional final LayerNorm, and a
// task head — with one activation arena reused across steps.
//
// The schedule maps layer applications to parameter sets: BERT's L blocks run
// once each; ALBERT's one shared block runs L times (its gradients add up in
// one set of rows). Every application has its own saved activations, and the
// output of application a is hidden_[a + 1]; hidden_[0] is the embeddings.
// Under activation offloading the checkpointed inputs go to host memory
// between forward and backward (models/act_offload.h).
// Subclasses supply the embeddings (forward/backward) and build blocks/head.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "models/act_offload.h"
#include "models/heads/head.h"
#include "models/model.h"
#include "models/stack_view.h"
#include "nn/layer_norm.h"
#include "nn/transformer_block.h"

namespace loom {

class StackModel : public Model {
  public:
    LossSum forward(const ModelInputs& in, const DropoutPlan& dropout) override;
    void backward(double loss_scale, CActPtr d_stage_output = nullptr) override;
    CActPtr stage_output() const override;
    CActPtr stage_input_grad() const override;
    void share_parameters(const StageModel& owner) override;
    int64_t num_layer_applications() const override { return int64_t(schedule_.size()); }
    void set_compute_dtype(DType d) override;
    void set_logits_scope(LogitsScope scope) override {
        scope_ = scope;
        if (head_) head_->set_logits_scope(scope);
    }
    std::map<std::string, Tensor> outputs() const override;
    int num_hidden_states() const override;
    int64_t activation_bytes() const override {
        return arena_.planned_elems() * int64_t(sizeof(float));
    }
    Tensor hidden_state(int i) const override;
    void set_activation_checkpointing(int64_t every_k) override;
    void set_activation_offloading(bool on, int64_t horizon) override;
    bool set_sparse_embedding_grad(bool on) override;
    EmbeddingGradRows embedding_grad_rows() const override { return sparse_rows_; }
    // The modules, for code that walks them without knowing the family.
    StackView view() const;

  protected:
    StackModel(ModelConfig c, ModelPlacement p) : Model(std::move(c), std::move(p)) {}
    // Call at the end of the subclass constructor: allocates the table and binds
    // every module to it.
    void finish_build();

    virtual void bind_embeddings(const ParamTable& t) = 0;
    virtual void plan_embeddings(ActArena& a, int64_t B, int64_t T) = 0;
    // h0 (B, T, C) from the copied inputs (ids_, types_, mask_).
    virtual void embed_forward(ActPtr h0) = 0;
    // dh0 (B, T, C) may be clobbered.
    virtual void embed_backward(ActPtr dh0) = 0;
    // The embedding modules and how they combine (StackView).
    virtual EmbeddingsView embeddings_view() const = 0;
    // The word table, which tensor parallelism splits by vocabulary.
    virtual Embedding& word_embeddings() = 0;
    // The embeddings' own GEMMs (ALBERT's E -> C mapping) follow the blocks.
    virtual void set_embeddings_compute(DType) {}

    std::vector<TransformerBlock> blocks_;  // distinct parameter sets
    std::vector<int> schedule_;             // layer application -> block
    int64_t apps_per_layer_ = 1;            // applications between hidden-state outputs
    LayerNorm final_norm_;                  // GPT-2 ln_f; undefined for encoders
    std::unique_ptr<Head> head_;

    // The last forward's inputs, copied so backward never reads caller memory.
    int64_t B_ = 0, T_ = 0;
    std::vector<int64_t> ids_, types_, mask_;  // (B, T); types_/mask_ empty when absent
    // The same in the backend's memory, where the kernels read them (uploaded
    // each forward); null when absent.
    int64_t* ids_dev_ = nullptr;
    int64_t* types_dev_ = nullptr;
    int64_t* mask_dev_ = nullptr;
    // Packed documents (ModelInputs::position_ids): each token's position and
    // the first key it may see, t - position; empty when absent. Uploaded to
    // the *_dev_ slots.
    std::vector<int64_t> positions_, key_start_;  // (B, T)
    int64_t* positions_dev_ = nullptr;
    int64_t* key_start_dev_ = nullptr;
    // Copies and checks in.position_ids (models/stack_positions.cpp).
    void take_positions(const ModelInputs& in);
    // Copies v into dst, a slot of the backend's memory, and returns it.
    int64_t* upload(int64_t* dst, const std::vector<int64_t>& v) const;
    std::vector<int64_t> labels_, starts_, ends_;
    DropoutPlan drop_;
    OpCtx ctx_;  // where the table's modules run (ParamTable::op_ctx)

    ActArena arena_;

  private:
    void bind_all();
    // LoRA (config_.lora, models/stack_lora.cpp): adapters on the blocks'
    // targeted linears, every other row frozen but modules_to_save, the
    // trainable rows grouped at the top of the buffers (before apply_part).
    void apply_lora();
    // The blocks' linears, for code that walks them all.
    std::vector<Linear*> block_linears(TransformerBlock& b) const {
        return {&b.attn.qkv, &b.attn.proj, &b.mlp.fc, &b.mlp.proj};
    }
    int64_t lora_work_elems_for(int64_t N) const;
    // The first flat element of block k's gradients the grad-ready hook waits for.
    int64_t block_grads_begin(const TransformerBlock& k) const;
    ActPtr lora_work_;  // (lora_work_elems_for(B * T)) shared by every LoRA linear
    // Marks the rows of placement_.part's other stages absent (before allocate).
    void apply_part();
    int64_t app_begin() const { return placement_.part.app_begin; }
    int64_t app_end() const {
        return placement_.part.app_end < 0 ? int64_t(schedule_.size()) : placement_.part.app_end;
    }
    // Block output of application a - 1 (input of a), a in [app_begin, app_end].
    ActPtr hidden_at(int64_t a) const { return hidden_[size_t(a - app_begin())]; }
    void plan(int64_t B, int64_t T, bool fused);
    // dst <- src (n elements of the activation type), on the backend.
    void copy_in(ActPtr dst, CActPtr src, int64_t n, const char* what) const;
    // Whether this batch (B_, T_, mask_) can take the table's fused attention.
    bool fused_attention_fits() const;
    TransformerBlock::Step step_for(int app) const;
    CActPtr final_hidden() const;

    // Grad-ready hook bookkeeping (finish_build): where each distinct block's
    // rows start in the flat buffer, and its first application (the last one
    // backward reaches, after which the block's gradients are final).
    std::vector<int64_t> block_begin_;  // (blocks)
    std::vector<int> block_first_app_;  // (blocks)
    std::vector<size_t> block_order_;   // (blocks) by block_begin_, highest first
    // Reports the final suffix of the gradient buffer once backward has passed
    // application `app`; `reported` is the start of what was already reported.
    void report_blocks_done(int app, int64_t& reported) const;

    // Sparse word-embedding gradient (set_sparse_embedding_grad): the rows the
    // last backward kept, and the table's range, reported before the blocks.
    bool sparse_on_ = false;
    EmbeddingGradRows sparse_rows_;
    // Reports [0, end) to the grad-ready hook, less the word table's range
    // when that went out early.
    void report_rest(int64_t end) const;

    // Under LogitsScope::labelled_positions, when the head reads only some
    // positions and the last layer is post-LN, that layer runs at those rows
    // alone (TransformerBlock::forward_rows); its output is then partial and
    // not offered as a hidden state.
    LogitsScope scope_ = LogitsScope::all_positions;
    std::vector<int64_t> last_rows_;  // the head's rows, when last_rows_on_
    bool last_rows_on_ = false;
    // Whether the last layer may run at the head's rows (batch aside).
    bool rows_possible() const;
    void choose_last_rows();
    bool runs_rows(int64_t app) const { return last_rows_on_ && app == app_end() - 1; }
    AttnRows last_rows() const { return {last_rows_.data(), int64_t(last_rows_.size())}; }
    // Application a's forward, whole or at the head's rows, into `out`
    // (default: hidden_at(a + 1)).
    void forward_app(int64_t a, ActPtr out = nullptr);

    bool has_labels_ = false;
    bool ready_for_backward_ = false;
    int64_t planned_B_ = -1, planned_T_ = -1, planned_ckpt_every_ = 0, planned_horizon_ = -1;
    bool planned_fused_ = false, planned_rows_ = false, planned_offload_ = false;
    // (A + 1) block outputs (B, T, C), [0] = the embeddings (A: this part's);
    // offloaded ones share the ring's slots.
    std::vector<ActPtr> hidden_;
    ActPtr final_;   // (B, T, C) after final_norm_ (GPT-2)
    LayerNorm::Acts final_acts_;
    std::vector<TransformerBlock::Acts> acts_;  // (A) one per application
    // Activation checkpointing: applications a with a % ckpt_every_ == 0 share
    // one set of saved activations (ckpt_acts_), refilled by recomputing the
    // application's forward from its kept input before its backward.
    int64_t ckpt_every_ = 0;  // 0: off
    bool checkpointed(int64_t app) const { return ckpt_every_ > 0 && app % ckpt_every_ == 0; }
    TransformerBlock::Acts ckpt_acts_;
    int64_t ckpt_holds_ = -1;  // the application whose activations ckpt_acts_ holds
    // Offloading the checkpointed inputs: a recomputed application's output
    // goes to recompute_out_, as the slot it was written to holds another
    // input by then.
    bool offload_on_ = false;
    int64_t horizon_ = 2;
    ActOffload offload_;
    ActPtr recompute_out_;
    TransformerBlock::Scratch scratch_;
    ActPtr dh_;  // (B, T, C) gradient flowing down the stack
    ActPtr du_;  // (B, T, C) gradient into final_norm_
    // Tensor parallelism: the partials the linears and the word embeddings
    // reduce apart (Linear::tp_work, Embedding::tp_work, tp_ids_work).
    ActPtr tp_work_;                  // (B, T, max(C, E))
    int64_t* tp_ids_work_ = nullptr;  // (B, T)
    void lend_tp_work();
};

}  // namespace loom
