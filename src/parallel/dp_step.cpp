// DataParallel: dispatch to the replicated or sharded path.
#include "parallel/dp_step.h"

#include <cmath>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/fault_points.h"
#include "optim/grad_clip.h"

namespace loom {

DataParallel::DataParallel(StageModel& model, Communicator& dp, const OptimizerConfig& optimizer,
                           const DpOptions& options)
    : model_(model), dp_(dp), opt_(options) {
    ParamTable& t = model.params();
    LOOM_CHECK(t.allocated(), "data parallel over a model whose parameters are not allocated");
    GradSyncOptions g;
    g.zero = options.zero;
    g.bucket_elems = bucket_elems_from_mb(options.bucket_size_mb);
    g.overlap = options.overlap;
    g.max_in_flight_at_end = options.max_in_flight_at_end;
    // A grouped table (LoRA) reduces and shards its trainable span only.
    if (t.grouped_trainable()) g.first_elem = t.trainable_begin();
    Communicator& buffers = options.buffers ? *options.buffers : dp;
    LOOM_CHECK(buffers.size() == dp.size() && buffers.rank() == dp.rank(),
               "data parallel: the buffers' group ({} of {}) is not the dp group ({} of {})",
               buffers.rank(), buffers.size(), dp.rank(), dp.size());
    sync_ = std::make_unique<GradSync>(t.device_grads(), t.flat_numel(), buffers, g, t.backend());
    if (options.zero == ZeroStage::none)
        whole_ = std::make_unique<FlatOptimizer>(t, optimizer);
    else
        zero_ = std::make_unique<ZeroOptimizer>(t, *sync_, optimizer, &dp);
    GradSync* s = sync_.get();
    model.set_grad_ready_hook([s](int64_t b, int64_t e) { s->grads_ready(b, e); });
    // The same model on every rank gives the same answer, so every rank
    // plans the same launch order.
    // The row exchange adds rows on the host: a device table reduces densely.
    if (options.sparse_embedding_grad && dp.size() > 1 && t.backend().host_addressable() &&
        model.set_sparse_embedding_grad(true)) {
        const EmbeddingGradRows r = model.embedding_grad_rows();
        sync_->set_sparse_rows(r.offset, r.offset + r.table_rows * r.width);
        sparse_ = true;
    }
    model.set_sparse_embedding_grad(false);  // on for reducing micro-batches only
}

DataParallel::~DataParallel() {
    model_.set_grad_ready_hook({});
    model_.set_sparse_embedding_grad(false);
}

void DataParallel::broadcast_parameters() {
    ParamTable& t = model_.params();
    sync_->comm().broadcast(t.device_master(), t.flat_numel(), DType::f32, 0)->wait();
    t.refresh_copy();
}

double DataParallel::sum(double local) {
    dp_.all_reduce(&local, 1, DType::f64, ReduceOp::sum)->wait();
    return local;
}

void DataParallel::begin_step() {
    model_.zero_grad();
    sync_->begin_step();
    pending_.reset();
}

bool DataParallel::defer_scaling() const {
    return !zero_ && model_.params().op_ctx().act != DType::f32;
}

void DataParallel::begin_micro_batch(bool last) {
    sync_->begin_micro_batch(last);
    // Only a micro-batch whose gradients are reduced keeps rows; the others
    // add the lookup's gradient into the buffer, which is reduced later.
    if (sparse_) {
        sparse_now_ = model_.set_sparse_embedding_grad(last || opt_.zero == ZeroStage::gradients);
    }
}
void DataParallel::end_micro_batch() {
    sync_->end_micro_batch(sparse_now_ ? model_.embedding_grad_rows() : EmbeddingGradRows{});
}
LossSum forward_micro_batch(StageModel& model, const MicroBatch& m) {
    LossSum l;
    fault_point("forward");
    if (m.inputs.B > 0) l = model.forward(m.inputs, m.dropout);
    LOOM_ASSERT(l.count == m.label_count,
                "the model counted {} labels in a micro-batch, the loader {}", l.count,
                m.label_count);
    return l;
}

double DataParallel::run(const std::vector<MicroBatch>& micro, double loss_scale) {
    double loss_sum = 0;
    const size_t n = micro.size();
    for (size_t k = 0; k < n; ++k) {
        const LossSum l = forward_micro_batch(model_, micro[k]);
        loss_sum += l.sum;
        begin_micro_batch(k + 1 == n);
        fault_point("backward");
        if (l.count > 0) model_.backward(loss_scale);
        end_micro_batch();
    }
    return loss_sum;
}

void DataParallel::finalize_grads() {
    sync_->finalize(1.0);
    if (zero_) zero_->take_grads();
}

double DataParallel::clip_grad_norm(double max_norm) {
    if (zero_) return zero_->clip_grad_norm(max_norm);
    if (defer_scaling()) return pending_.clip(loom::grad_norm_sq(model_.params()), max_norm);
    // Replicated: every rank holds the same summed gradients, so the local
    // norm is the global one and no communication is needed.
    if (max_norm > 0) return loom::clip_grad_norm(model_.params(), max_norm);
    return std::sqrt(loom::grad_norm_sq(model_.params()));
}

double DataParallel::grad_norm_sq(const std::vector<std::pair<int64_t, int64_t>>& exclude) {
    if (zero_) return zero_->grad_norm_sq(&exclude);
    return loom::grad_norm_sq(model_.params(), exclude);
}

void DataParallel::scale_grads(float s) {
    if (defer_scaling()) {
        pending_.scale(double(s));
        return;
    }
    ParamTable& t = model_.params();
    Backend& be = t.backend();
    if (zero_)
        zero_->scale_grads(s);
    else
        be.ops().scale(be, t.device_grads(), t.op_ctx().act, t.flat_numel(), s);
}

void DataParallel::step(double lr) {
    if (zero_)
        zero_->step(lr);
    else
        whole_->step(lr, float(pending_.factor));
    pending_.reset();
}

int64_t DataParallel::step_count() const {
    return zero_ ? zero_->step_count() : whole_->step_count();
}

std::map<std::string, Tensor> DataParallel::optimizer_state() const {
    if (zero_) return zero_->gather_state();
    return whole_->state_tensors();
}

void DataParallel::load_optimizer_state(const std::map<std::string, Tensor>& state, int64_t step) {
    if (zero_)
        zero_->load_state(state, step);
    else
        whole_->load_state(state, step);
}

DpMemoryPlan DataParallel::memory_plan() const {
    const ParamTable& t = model_.params();
    const DType act = t.op_ctx().act;
    return dp_memory_plan(t.flat_numel(), bucket_elems_from_mb(opt_.bucket_size_mb), dp_.size(),
                          opt_.zero, optimizer_has_state(), act, act != DType::f32);
}

}  // namespace loom
