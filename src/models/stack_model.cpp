// StackModel: the layer loop, input copies and activation planning.
#include "models/stack_model.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "ops/attention.h"

namespace loom {

void StackModel::bind_all() {
    ctx_ = table_.op_ctx();
    arena_.set_backend(table_.backend());
    bind_embeddings(table_);
    for (auto& b : blocks_) b.bind(table_);
    final_norm_.bind(table_);
    if (head_) head_->bind(table_);
}

namespace {

void mark(std::vector<bool>& keep, const ParamRef& r) {
    if (r.defined()) keep[size_t(r.row)] = true;
}
void mark(std::vector<bool>& keep, const Linear* l) {
    if (!l) return;
    mark(keep, l->weight);
    mark(keep, l->bias);
    for (const LoraAdapter& a : l->lora) {
        mark(keep, a.A);
        mark(keep, a.B);
    }
}
void mark(std::vector<bool>& keep, const LayerNorm* n) {
    if (!n) return;
    mark(keep, n->weight);
    mark(keep, n->bias);
}

}  // namespace

void StackModel::apply_part() {
    const ModelPart& p = placement_.part;
    if (p.whole()) return;
    const int64_t A = int64_t(schedule_.size());
    LOOM_CHECK(p.app_begin >= 0 && app_end() <= A && p.app_begin < app_end(),
               "pipeline stage: layer applications [{}, {}) are outside the model's [0, {})",
               p.app_begin, app_end(), A);
    std::vector<bool> keep(size_t(table_.size()), false);
    if (p.embeddings || p.hold_embeddings) {
        const EmbeddingsView e = embeddings_view();
        for (const Embedding* m : {e.word, e.position, e.token_type})
            if (m) mark(keep, m->table);
        mark(keep, e.norm);
        mark(keep, e.mapping);
    }
    std::vector<std::pair<int64_t, int64_t>> ranges{{p.app_begin, app_end()}};
    ranges.insert(ranges.end(), p.also_hold.begin(), p.also_hold.end());
    for (const auto& [b, e] : ranges) {
        LOOM_CHECK(b >= 0 && e <= A && b < e,
                   "pipeline stage: held layer applications [{}, {}) are outside [0, {})", b, e, A);
        for (int64_t a = b; a < e; ++a) {
            const TransformerBlock& k = blocks_[size_t(schedule_[size_t(a)])];
            for (const Linear* l : {&k.attn.qkv, &k.attn.proj, &k.mlp.fc, &k.mlp.proj})
                mark(keep, l);
            for (const LayerNorm* n : {&k.ln1, &k.ln2}) mark(keep, n);
        }
    }
    if (p.head || p.hold_head) {
        mark(keep, &final_norm_);
        if (head_) {
            const HeadView h = head_->view();
            mark(keep, h.dense);
            mark(keep, h.norm);
            mark(keep, h.decoder);
        }
    }
    // Fused linears (BERT's query/key/value) reference their first row; the
    // rest of the group is packed right after it.
    for (int i = 1; i < table_.size(); ++i)
        if (table_.row(i).packed && keep[size_t(i - 1)]) keep[size_t(i)] = true;
    for (int i = 0; i < table_.size(); ++i)
        if (!keep[size_t(i)]) table_.set_absent(i);
}

void StackModel::finish_build() {
    apply_lora();
    apply_part();
    // Tensor parallelism: the linears' TpRole plan decides what the blocks
    // split; the word table and the LM heads tied to it split by vocabulary
    // (the word table first: a tied decoder finds its row already cut).
    // Position/type tables, LayerNorms and classification heads stay whole,
    // replicated on tp: every tp rank computes them redundantly from
    // replicated inputs, so their gradients agree without a sum over tp.
    if (placement_.tp.active()) {
        for (TransformerBlock& b : blocks_) b.shard(table_, placement_.tp);
        word_embeddings().shard(table_, placement_.tp);
        if (head_) head_->shard(table_, placement_.tp);
    }
    if (placement_.part.share_with)
        table_.share_buffers(*placement_.part.share_with);
    else
        table_.allocate(placement_.device);
    bind_all();
    // NOTE: the grad-ready hook relies on the build order every family uses:
    // embeddings, then the blocks, then the final norm and the head. Rows
    // above the blocks (final norm, untied head) get their gradients before
    // any block runs backward; rows below (embeddings, tied decoders) last.
    block_begin_.assign(blocks_.size(), table_.flat_numel());
    block_first_app_.assign(blocks_.size(), int(schedule_.size()));
    for (size_t b = 0; b < blocks_.size(); ++b) block_begin_[b] = block_grads_begin(blocks_[b]);
    // Only this part's applications run backward here.
    for (int64_t a = app_end(); a-- > app_begin();)
        block_first_app_[size_t(schedule_[size_t(a)])] = int(a);
    block_order_.resize(blocks_.size());
    for (size_t b = 0; b < blocks_.size(); ++b) block_order_[b] = b;
    std::sort(block_order_.begin(), block_order_.end(),
              [&](size_t x, size_t y) { return block_begin_[x] > block_begin_[y]; });
}

void StackModel::share_parameters(const StageModel& owner) {
    table_.share_buffers(owner.params());
    bind_all();
}

bool StackModel::set_sparse_embedding_grad(bool on) {
    Embedding& w = word_embeddings();
    if (on) {
        // Whole tables of whole models only, and the table must lie below every
        // block so the top-down block reports never include it.
        const bool whole = placement_.part.whole() && w.tp == nullptr && w.table.defined() &&
                           w.table.grad != nullptr;
        const int64_t end =
            whole ? table_.row(w.table.row).offset + table_.row(w.table.row).numel() : 0;
        on = whole && std::all_of(block_begin_.begin(), block_begin_.end(),
                                  [&](int64_t b) { return end <= b; });
    }
    sparse_on_ = on;
    w.rows_out = on ? &sparse_rows_ : nullptr;
    sparse_rows_ = {};
    if (on) {  // the table's place is known before any backward
        const ParamRow& row = table_.row(w.table.row);
        LOOM_ASSERT(row.numel() == w.V * w.C, "word table row of {} elements for ({}, {})",
                    row.numel(), w.V, w.C);
        sparse_rows_.offset = row.offset;
        sparse_rows_.table_rows = w.V;
        sparse_rows_.width = w.C;
    }
    return on;
}

void StackModel::report_rest(int64_t end) const {
    if (!grad_ready_hook_ || end <= 0) return;
    if (!sparse_on_) {
        grad_ready_hook_(0, end);
        return;
    }
    const int64_t wb = sparse_rows_.offset, we = wb + sparse_rows_.table_rows * sparse_rows_.width;
    if (wb > 0) grad_ready_hook_(0, wb);
    if (we < end) grad_ready_hook_(we, end);
}

void StackModel::report_blocks_done(int app, int64_t& reported) const {
    if (!grad_ready_hook_) return;
    // Walk the blocks from the top of the buffer down while they are finished.
    int64_t w = reported;
    for (size_t b : block_order_) {
        if (block_first_app_[b] < app) break;  // applications below `app` still to run
        w = std::min(w, block_begin_[b]);
    }
    if (w < reported) {
        grad_ready_hook_(w, reported);
        reported = w;
    }
}

bool StackModel::fused_attention_fits() const {
    if (blocks_.empty()) return false;
    const SelfAttention& at = blocks_[0].attn;
    return ctx_.nn().fused_attention(AttnShape{B_, T_, at.NH, at.C / at.NH}) &&
           attention_every_row_has_a_key(mask_.empty() ? nullptr : mask_.data(), B_, T_, at.causal,
                                         key_start_.empty() ? nullptr : key_start_.data());
}

void StackModel::plan(int64_t B, int64_t T, bool fused) {
    const int64_t N = B * T, C = config_.hidden_size;
    const int64_t A = int64_t(schedule_.size());
    acts_.resize(size_t(A));
    const int64_t a0 = app_begin(), a1 = app_end();
    const bool with_head = placement_.part.head;
    // Offloading keeps the checkpointed inputs in a ring of device slots.
    std::vector<int64_t> offloaded;
    if (offload_on_)
        for (int64_t i = a0; i < a1; ++i)
            if (checkpointed(i)) offloaded.push_back(i);
    const int64_t R = ActOffload::ring_size(offloaded, horizon_);
    std::vector<ActPtr> ring;
    arena_.build([&](ActArena& a) {
        const DType act = ctx_.act;
        ring.clear();
        for (int64_t r = 0; r < R; ++r) ring.push_back(a.take_act(N * C, act));
        hidden_.assign(size_t(a1 - a0 + 1), nullptr);
        for (size_t k = 0, i = 0; k < hidden_.size(); ++k) {
            const bool off = i < offloaded.size() && offloaded[i] == a0 + int64_t(k);
            hidden_[k] = off ? ring[i++ % size_t(R)] : a.take_act(N * C, act);
        }
        recompute_out_ = offloaded.empty() ? nullptr : a.take_act(N * C, act);
        ids_dev_ = a.take_i64(N);
        types_dev_ = a.take_i64(N);
        mask_dev_ = a.take_i64(N);
        positions_dev_ = a.take_i64(N);
        key_start_dev_ = a.take_i64(N);
        if (with_head && final_norm_.weight.defined()) {
            final_ = a.take_act(N * C, act);
            final_acts_.plan(a, N);
        }
        // The row subset keeps (M, NH, T) probabilities: where the table has
        // both, the last application (and the workspace) stays unfused.
        const bool rows = fused && rows_possible();
        const bool fused_ckpt = fused && !(rows && checkpointed(a1 - 1));
        bool shared_planned = false;
        for (int64_t i = a0; i < a1; ++i) {
            const TransformerBlock& blk = blocks_[size_t(schedule_[size_t(i)])];
            if (!checkpointed(i)) {
                blk.plan(acts_[size_t(i)], a, B, T, fused && !(rows && i == a1 - 1));
                continue;
            }
            // Every block of a model has the same shapes, so one set serves all.
            if (!shared_planned) blk.plan(ckpt_acts_, a, B, T, fused_ckpt);
            shared_planned = true;
            acts_[size_t(i)] = ckpt_acts_;
        }
        if (!blocks_.empty()) scratch_.plan(a, B, T, blocks_[0], fused && !rows);
        dh_ = a.take_act(N * C, act);
        du_ = a.take_act(N * C, act);
        if (placement_.part.embeddings) plan_embeddings(a, B, T);
        if (head_ && with_head) head_->plan(a, B, T);
        if (placement_.tp.active()) {
            tp_work_ = a.take_act(N * std::max(C, config_.embedding_size), act);
            tp_ids_work_ = a.take_i64(N);
        }
        const int64_t lora_elems = lora_work_elems_for(N);
        lora_work_ = lora_elems > 0 ? a.take_act(lora_elems, act) : nullptr;
    });
    if (placement_.tp.active()) lend_tp_work();
    // One workspace for every adapter: each linear's use ends before the next runs.
    for (TransformerBlock& b : blocks_)
        for (Linear* l : block_linears(b)) l->lora_work = lora_work_;
    const size_t bytes = size_t(N * C) * dtype_size(ctx_.act);
    offload_.plan(*ctx_.be, offloaded, horizon_, bytes);
    for (int64_t r = 0; r < R; ++r) offload_.set_slot(r, ring[size_t(r)].get());
    planned_offload_ = offload_on_;
    planned_horizon_ = horizon_;
    planned_B_ = B;
    planned_T_ = T;
    planned_ckpt_every_ = ckpt_every_;
    planned_fused_ = fused;
    planned_rows_ = rows_possible();
}

// One workspace for every tensor-parallel partial: each is reduced and
// consumed before the next module runs.
void StackModel::lend_tp_work() {
    for (TransformerBlock& b : blocks_)
        for (Linear* l : {&b.attn.qkv, &b.attn.proj, &b.mlp.fc, &b.mlp.proj}) l->tp_work = tp_work_;
    Embedding& w = word_embeddings();
    w.tp_work = tp_work_;
    w.tp_ids_work = tp_ids_work_;
}

void StackModel::set_compute_dtype(DType d) {
    for (TransformerBlock& b : blocks_) {
        b.attn.qkv.compute = b.attn.proj.compute = b.mlp.fc.compute = b.mlp.proj.compute = d;
        b.attn.compute = d;
    }
    set_embeddings_compute(d);
    if (head_) head_->set_compute_dtype(d);
}

void StackModel::set_activation_checkpointing(int64_t every_k) {
    LOOM_CHECK(every_k >= 0, "activation checkpointing: every_k must be >= 0, got {}", every_k);
    ckpt_every_ = every_k;
}

void StackModel::set_activation_offloading(bool on, int64_t horizon) {
    LOOM_CHECK(horizon >= 0, "activation offloading: the loading horizon must be >= 0, got {}",
               horizon);
    offload_on_ = on;
    horizon_ = horizon;
}

TransformerBlock::Step StackModel::step_for(int app) const {
    TransformerBlock::Step s;
    s.B = B_;
    s.T = T_;
    s.tok.key_padding = mask_.empty() ? nullptr : mask_dev_;
    s.tok.positions = positions_.empty() ? nullptr : positions_dev_;
    s.tok.key_start = key_start_.empty() ? nullptr : key_start_dev_;
    const uint32_t layer = uint32_t(app + 1);
    s.drop_probs = drop_.spec(config_.attention_dropout, layer, DropoutPlan::attn_probs);
    s.drop_attn_out = drop_.spec(config_.hidden_dropout, layer, DropoutPlan::attn_out);
    s.drop_ffn_out = drop_.spec(config_.hidden_dropout, layer, DropoutPlan::ffn_out);
    s.lora = LoraDropout{drop_, layer, B_, T_, nullptr};
    return s;
}

int64_t* StackModel::upload(int64_t* dst, const std::vector<int64_t>& v) const {
    ctx_.be->to_device(dst, v.data(), v.size() * sizeof(int64_t));
    return dst;
}

CActPtr StackModel::final_hidden() const {
    if (final_norm_.weight.defined()) return final_;
    return hidden_at(app_end());
}

CActPtr StackModel::stage_output() const {
    LOOM_CHECK(!placement_.part.head, "stage_output: this part ends with the head (it has a loss)");
    return hidden_at(app_end());
}

CActPtr StackModel::stage_input_grad() const {
    LOOM_CHECK(!placement_.part.embeddings,
               "stage_input_grad: this part starts with the embeddings (no input gradient)");
    return dh_;
}

void StackModel::copy_in(ActPtr dst, CActPtr src, int64_t n, const char* what) const {
    LOOM_CHECK(src.dtype() == dst.dtype(), "{}: {} activations handed to a model that keeps {}",
               what, dtype_name(src.dtype()), dtype_name(dst.dtype()));
    ctx_.be->copy(dst.get(), src.get(), size_t(n) * dtype_size(dst.dtype()));
}

bool StackModel::rows_possible() const {
    return scope_ == LogitsScope::labelled_positions && head_ && placement_.part.head &&
           app_end() == int64_t(schedule_.size()) && app_end() > app_begin() &&
           blocks_[size_t(schedule_[size_t(app_end() - 1)])].supports_rows();
}

void StackModel::choose_last_rows() {
    last_rows_on_ = false;
    const int64_t N = B_ * T_;
    if (!rows_possible()) return;
    HeadBatch hb;
    hb.B = B_;
    hb.T = T_;
    hb.labels = labels_.empty() ? nullptr : labels_.data();
    if (!head_->rows_read(hb, last_rows_)) return;
    // No rows (a batch with nothing labelled) or every row: the whole layer.
    last_rows_on_ = !last_rows_.empty() && int64_t(last_rows_.size()) < N;
}

void StackModel::forward_app(int64_t a, ActPtr out) {
    const TransformerBlock& blk = blocks_[size_t(schedule_[size_t(a)])];
    if (!out) out = hidden_at(a + 1);
    if (runs_rows(a))
        blk.forward_rows(out, acts_[size_t(a)], hidden_at(a), step_for(int(a)), last_rows());
    else
        blk.forward(out, acts_[size_t(a)], hidden_at(a), step_for(int(a)));
}

LossSum StackModel::forward(const ModelInputs& in, const DropoutPlan& dropout) {
    LOOM_CHECK(in.input_ids != nullptr && in.B > 0 && in.T > 0,
               "model forward needs input_ids of shape (B, T) with B, T > 0");
    B_ = in.B;
    T_ = in.T;
    const int64_t N = B_ * T_, C = config_.hidden_size;
    ids_.assign(in.input_ids, in.input_ids + N);
    mask_.clear();
    if (in.attention_mask) mask_.assign(in.attention_mask, in.attention_mask + N);
    take_positions(in);
    types_.clear();
    if (in.token_type_ids && config_.type_vocab_size > 0)
        types_.assign(in.token_type_ids, in.token_type_ids + N);
    labels_.clear();
    starts_.clear();
    ends_.clear();
    const bool per_sample_labels = config_.task == Task::sequence_classification;
    if (in.labels) labels_.assign(in.labels, in.labels + (per_sample_labels ? B_ : N));
    if (in.start_positions) starts_.assign(in.start_positions, in.start_positions + B_);
    if (in.end_positions) ends_.assign(in.end_positions, in.end_positions + B_);
    drop_ = dropout;

    // Fused attention where the table has it for this shape, unless a sample
    // has a query row with no visible key: that batch is re-planned unfused.
    const bool fused = fused_attention_fits();
    if (B_ != planned_B_ || T_ != planned_T_ || ckpt_every_ != planned_ckpt_every_ ||
        fused != planned_fused_ || rows_possible() != planned_rows_ ||
        offload_on_ != planned_offload_ || horizon_ != planned_horizon_)
        plan(B_, T_, fused);
    upload(ids_dev_, ids_);
    if (!types_.empty()) upload(types_dev_, types_);
    if (!mask_.empty()) upload(mask_dev_, mask_);
    if (!positions_.empty()) {
        upload(positions_dev_, positions_);
        upload(key_start_dev_, key_start_);
    }

    offload_.before_write(app_begin());
    if (placement_.part.embeddings) {
        embed_forward(hidden_at(app_begin()));
    } else {
        LOOM_CHECK(in.stage_input != nullptr,
                   "pipeline stage without embeddings: forward needs the previous stage's output");
        copy_in(hidden_at(app_begin()), in.stage_input, N * C, "pipeline stage input");
    }
    choose_last_rows();
    for (int64_t a = app_begin(); a < app_end(); ++a) {
        offload_.before_write(a + 1);
        forward_app(a);
        offload_.after_read(a);
        if (checkpointed(a)) ckpt_holds_ = a;
    }
    const bool with_head = placement_.part.head;
    if (with_head && final_norm_.weight.defined())
        final_norm_.forward(final_, final_acts_, hidden_at(app_end()), N);

    LossSum loss;
    has_labels_ = false;
    if (head_ && with_head) {
        HeadBatch hb;
        hb.B = B_;
        hb.T = T_;
        hb.labels = labels_.empty() ? nullptr : labels_.data();
        hb.start_positions = starts_.empty() ? nullptr : starts_.data();
        hb.end_positions = ends_.empty() ? nullptr : ends_.data();
        loss = head_->forward(final_hidden(), hb, drop_);
        has_labels_ = hb.labels || (hb.start_positions && hb.end_positions);
    }
    ready_for_backward_ = true;
    return loss;
}

void StackModel::backward(double loss_scale, CActPtr d_stage_output) {
    LOOM_CHECK(ready_for_backward_, "backward called without a forward");
    const int64_t N = B_ * T_, C = config_.hidden_size;
    if (placement_.part.head) {
        LOOM_CHECK(head_ != nullptr, "{} has no task head, so there is no loss to differentiate",
                   config_.architecture);
        LOOM_CHECK(has_labels_, "backward needs labels in the batch (task {})",
                   task_name(config_.task));
        if (final_norm_.weight.defined()) {
            head_->backward(du_, final_, loss_scale);
            final_norm_.backward(dh_, du_, hidden_at(app_end()), final_acts_, N);
        } else {
            head_->backward(dh_, final_hidden(), loss_scale);
        }
    } else {
        LOOM_CHECK(d_stage_output != nullptr,
                   "pipeline stage without the head: backward needs the gradient of its output");
        copy_in(dh_, d_stage_output, N * C, "pipeline stage output gradient");
    }
    if (sparse_on_) {
        // Nothing but the head writes the word table's gradient now (the
        // lookup's part becomes rows), and the head is done.
        sparse_rows_.count = 0;
        sparse_rows_.ids = nullptr;
        sparse_rows_.rows = nullptr;
        const int64_t b = sparse_rows_.offset;
        if (grad_ready_hook_) grad_ready_hook_(b, b + sparse_rows_.table_rows * sparse_rows_.width);
    }
    int64_t reported = table_.flat_numel();  // [reported, flat) went to the hook
    offload_.begin_backward();
    for (int64_t a = app_end() - 1; a >= app_begin(); --a) {
        const TransformerBlock& blk = blocks_[size_t(schedule_[size_t(a)])];
        offload_.prefetch_for(a);
        if (checkpointed(a)) offload_.wait(a);
        if (checkpointed(a) && ckpt_holds_ != a) {
            // Recompute: the same ops on the same input with the same dropout
            // counters rewrite the activations (and the output, which the
            // application above has already consumed) bit for bit; under
            // offloading the output's slot may hold another input by now.
            forward_app(a, recompute_out_);
            ckpt_holds_ = a;
        }
        if (runs_rows(a))
            blk.backward_rows(dh_, acts_[size_t(a)], hidden_at(a), step_for(int(a)), scratch_,
                              last_rows());
        else
            blk.backward(dh_, acts_[size_t(a)], hidden_at(a), step_for(int(a)), scratch_);
        offload_.release(a);
        report_blocks_done(int(a), reported);
    }
    if (placement_.part.embeddings) embed_backward(dh_);
    report_rest(reported);
    ready_for_backward_ = false;  // saved activations were consumed with this loss scale
}

}  // namespace loom
