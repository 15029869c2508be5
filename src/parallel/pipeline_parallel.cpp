// PipelineParallel: the schedule executor, shared-row sums and the gathers.
#include "parallel/pipeline_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "optim/grad_clip.h"
#include "parallel/tp_layers.h"

namespace loom {

ModelPart pipeline_stage_part(int64_t n_apps, int n_stages, int stage,
                              const std::vector<int64_t>& partition) {
    LOOM_CHECK(n_stages >= 1 && stage >= 0 && stage < n_stages,
               "pipeline stage {} of {} is out of range", stage, n_stages);
    LOOM_CHECK(n_apps >= n_stages,
               "pipeline_parallel_degree {} is more than the model's {} layer applications: "
               "every stage needs at least one",
               n_stages, n_apps);
    std::vector<int64_t> sizes(size_t(n_stages), n_apps / n_stages);
    if (!partition.empty()) {
        LOOM_CHECK(int(partition.size()) == n_stages,
                   "distribution.partition has {} entries for {} pipeline stages", partition.size(),
                   n_stages);
        int64_t total = 0;
        for (int64_t p : partition) {
            LOOM_CHECK(p >= 1,
                       "distribution.partition: every stage needs at least one layer "
                       "application, got {}",
                       p);
            total += p;
        }
        LOOM_CHECK(total == n_apps,
                   "distribution.partition sums to {} layer applications, the model has {}", total,
                   n_apps);
        sizes = partition;
    } else {
        for (int s = 0; s < int(n_apps % n_stages); ++s) ++sizes[size_t(s)];
    }
    ModelPart p;
    for (int s = 0; s < stage; ++s) p.app_begin += sizes[size_t(s)];
    p.app_end = p.app_begin + sizes[size_t(stage)];
    p.embeddings = stage == 0;
    p.head = stage == n_stages - 1;
    return p;
}

std::vector<int64_t> balanced_partition(int64_t n_apps, int n_stages, const StageExtras& extras) {
    LOOM_CHECK(n_stages >= 1 && n_apps >= n_stages,
               "pipeline: {} layer applications cannot fill {} stages", n_apps, n_stages);
    auto extra = [&](int s) {
        double e = 0;
        if (s == 0) e += extras.first;
        if (s == n_stages - 1) e += extras.last;
        return e;
    };
    // The smallest cap M with room for every application: stage s takes at
    // most floor(M - extra_s) (at least 1). M is some k + extra_s, k integer.
    auto capacity = [&](double M, int s) {
        return std::max<int64_t>(1, int64_t(std::floor(M - extra(s) + 1e-9)));
    };
    auto fits = [&](double M) {
        int64_t room = 0;
        for (int s = 0; s < n_stages; ++s) room += capacity(M, s);
        return room >= n_apps;
    };
    std::vector<double> candidates;
    for (int64_t k = 1; k <= n_apps; ++k)
        for (int s : {0, n_stages - 1}) candidates.push_back(double(k) + extra(s));
    candidates.push_back(double((n_apps + n_stages - 1) / n_stages));
    std::sort(candidates.begin(), candidates.end());
    double M = candidates.back();
    for (double m : candidates)
        if (fits(m)) {
            M = m;
            break;
        }
    std::vector<int64_t> sizes(static_cast<size_t>(n_stages), 0);
    int64_t room = 0;
    for (int s = 0; s < n_stages; ++s) room += sizes[size_t(s)] = capacity(M, s);
    // Give the surplus back one application at a time from the costliest
    // stage (the later one on a tie, never below one), so with no extras
    // earlier stages keep the extra applications, as the even split did.
    for (; room > n_apps; --room) {
        int worst = -1;
        for (int s = 0; s < n_stages; ++s)
            if (sizes[size_t(s)] > 1 &&
                (worst < 0 || double(sizes[size_t(s)]) + extra(s) >=
                                  double(sizes[size_t(worst)]) + extra(worst)))
                worst = s;
        --sizes[size_t(worst)];
    }
    return sizes;
}

ModelPart pipeline_chunk_part(int64_t n_apps, int pp_size, int n_virtual, int pp_rank, int chunk,
                              const std::vector<int64_t>& partition) {
    const int S = pp_size * n_virtual;
    ModelPart p = pipeline_stage_part(n_apps, S, chunk * pp_size + pp_rank, partition);
    for (int c = 0; c < n_virtual; ++c) {
        if (c == chunk) continue;
        const ModelPart o = pipeline_stage_part(n_apps, S, c * pp_size + pp_rank, partition);
        p.also_hold.emplace_back(o.app_begin, o.app_end);
        p.hold_embeddings = p.hold_embeddings || o.embeddings;
        p.hold_head = p.hold_head || o.head;
    }
    return p;
}

PipelineParallel::PipelineParallel(std::vector<std::unique_ptr<StageModel>> stage_models,
                                   Communicator& pp, Communicator& dp,
                                   const OptimizerConfig& optimizer, DpOptions dp_options,
                                   ScheduleKind kind, int n_virtual, Communicator* pp_buffers)
    : models_(std::move(stage_models)),
      pp_(pp),
      pp_buf_(pp_buffers ? *pp_buffers : pp),
      kind_(kind),
      n_virtual_(n_virtual) {
    LOOM_CHECK(!models_.empty() && n_virtual >= 1 && int(models_.size()) % n_virtual == 0,
               "pipeline stage: {} model instances for {} chunks", models_.size(), n_virtual);
    LOOM_CHECK((kind == ScheduleKind::interleaved) == (n_virtual > 1),
               "pipeline: {} model chunks per rank need the interleaved schedule", n_virtual);
    StageModel& m0 = *models_[0];
    be_ = &m0.params().backend();
    act_ = m0.params().op_ctx().act;
    for (size_t i = 1; i < models_.size(); ++i) models_[i]->share_parameters(m0);
    if (m0.tp_slice().active()) tp_ = m0.tp_slice().comm;
    C_ = m0.hidden_width();
    // The whole step is one "micro-batch" for the dp reduction (see the header).
    dp_options.overlap = false;
    dp_options.max_in_flight_at_end = 2;  // bounded temporary buffers (grad_sync.h)
    dp_ = std::make_unique<DataParallel>(m0, dp, optimizer, dp_options);
    m0.set_grad_ready_hook({});

    // Which stage holds which row: every stage's table lists the same rows.
    const ParamTable& t = m0.params();
    const int R = t.size(), P = pp.size();
    std::vector<int32_t> mine(static_cast<size_t>(R)), all(static_cast<size_t>(R * P));
    for (int i = 0; i < R; ++i) mine[size_t(i)] = t.row(i).local ? 1 : 0;
    pp.all_gather(mine.data(), all.data(), R, DType::i32)->wait();
    holds_.assign(size_t(P), std::vector<uint8_t>(size_t(R), 0));
    for (int s = 0; s < P; ++s)
        for (int i = 0; i < R; ++i) holds_[size_t(s)][size_t(i)] = uint8_t(all[size_t(s * R + i)]);
    for (int i = 0; i < R; ++i) {
        int n = 0;
        for (int s = 0; s < P; ++s) n += holds_[size_t(s)][size_t(i)];
        LOOM_CHECK(n > 0, "pipeline: no stage holds parameter '{}'", t.row(i).name);
        if (n > 1) shared_rows_.push_back(i);
        const bool tp_duplicate = tp_ && tp_->rank() > 0 && !t.row(i).shard.sharded();
        if (t.row(i).local && ((n > 1 && holder(i) != stage()) || tp_duplicate))
            norm_excluded_.emplace_back(t.row(i).offset, t.row(i).offset + t.row(i).numel());
    }
}

PipelineParallel::~PipelineParallel() = default;

std::vector<int64_t> PipelineParallel::params_per_stage() const {
    const ParamTable& t = models_[0]->params();
    std::vector<int64_t> n(holds_.size(), 0);
    for (size_t s = 0; s < holds_.size(); ++s)
        for (int i = 0; i < t.size(); ++i)
            if (holds_[s][size_t(i)]) n[s] += t.row(i).numel();
    return n;
}

int PipelineParallel::holder(int row) const {
    for (int s = 0; s < int(holds_.size()); ++s)
        if (holds_[size_t(s)][size_t(row)]) return s;
    return -1;
}

void PipelineParallel::begin_step() {
    dp_->begin_step();  // zeroes the shared gradient buffer
}

double PipelineParallel::run(const std::vector<MicroBatch>& micro, double loss_scale) {
    const int M = int(micro.size()), V = n_virtual_, S = n_stages() * V;
    LOOM_CHECK(M >= 1, "pipeline step without micro-batches");
    const std::vector<Action> actions = make_schedule(kind_, n_stages(), stage(), M, V);
    auto numel = [&](int m) { return micro[size_t(m)].inputs.B * micro[size_t(m)].inputs.T * C_; };
    for (auto* v : {&act_in_, &act_out_, &grad_in_, &grad_out_})
        if (int(v->size()) < M * V) v->resize(size_t(M * V));
    // Model instance of (chunk, micro-batch) while it is in flight; free
    // instances per chunk.
    std::vector<int> slot_of(size_t(M * V), -1);
    std::vector<std::vector<int>> free_slots(static_cast<size_t>(V));
    for (int c = 0; c < V; ++c)
        for (int s = n_slots(); s-- > 0;) free_slots[size_t(c)].push_back(c * n_slots() + s);
    const size_t esize = dtype_size(act_);
    auto buffer = [&](std::vector<Message>& v, int c, int m) -> ActPtr {
        Message& b = v[size_t(c * M + m)];
        if (b.capacity < numel(m)) {
            b.mem = be_->alloc(size_t(numel(m)) * esize);
            b.capacity = numel(m);
        }
        return ActPtr(b.mem->data(), act_);
    };

    double loss_sum = 0;
    size_t i = 0;
    while (i < actions.size()) {
        const Action& a = actions[i];
        if (action_is_comm(a.kind)) {
            // Consecutive communication actions go out together (the schedule's
            // pairing; pipeline_sim.h proves the lists cannot deadlock).
            pp_buf_.group_start();
            for (; i < actions.size() && action_is_comm(actions[i].kind); ++i) {
                const Action& c = actions[i];
                const int m = c.micro;
                const int64_t n = numel(m);
                if (n == 0) continue;  // an empty share of a short last batch, on every stage
                const int peer = action_peer(c, n_stages(), stage());
                const int v = c.virtual_stage;
                const int g = global_stage(n_stages(), stage(), v);
                // Tags name the boundary (the lower global stage) and the
                // micro-batch, so both ends agree whatever the chunk numbers.
                const bool grad =
                    c.kind == ActionKind::send_grad || c.kind == ActionKind::recv_grad;
                const bool upper =
                    c.kind == ActionKind::recv_act || c.kind == ActionKind::send_grad;
                const int boundary = upper ? g - 1 : g;
                const int tag = ((m * S + boundary) * 2 + (grad ? 1 : 0)) % 32768;
                switch (c.kind) {
                    case ActionKind::send_act:
                        pp_buf_.send(buffer(act_out_, v, m), n, act_, peer, tag);
                        break;
                    case ActionKind::recv_act:
                        pp_buf_.recv(buffer(act_in_, v, m), n, act_, peer, tag);
                        break;
                    case ActionKind::send_grad:
                        pp_buf_.send(buffer(grad_out_, v, m), n, act_, peer, tag);
                        break;
                    case ActionKind::recv_grad:
                        pp_buf_.recv(buffer(grad_in_, v, m), n, act_, peer, tag);
                        break;
                    default:
                        break;
                }
            }
            pp_buf_.group_end()->wait();
            continue;
        }
        const int m = a.micro, v = a.virtual_stage;
        const MicroBatch& mb = micro[size_t(m)];
        std::vector<int>& free = free_slots[size_t(v)];
        int& slot = slot_of[size_t(v * M + m)];
        ++i;
        if (a.kind == ActionKind::forward) {
            if (mb.inputs.B == 0) continue;
            LOOM_CHECK(!free.empty(),
                       "pipeline: more micro-batches in flight than the {} model instances",
                       n_slots());
            const int s = free.back();
            free.pop_back();
            slot = s;
            ModelInputs in = mb.inputs;
            if (!is_first(v)) in.stage_input = buffer(act_in_, v, m);
            const LossSum l = models_[size_t(s)]->forward(in, mb.dropout);
            if (is_last(v)) {
                LOOM_ASSERT(l.count == mb.label_count,
                            "the model counted {} labels in a micro-batch, the loader {}", l.count,
                            mb.label_count);
                loss_sum += l.sum;
            } else {
                be_->copy(buffer(act_out_, v, m), models_[size_t(s)]->stage_output(),
                          size_t(numel(m)) * esize);
            }
        } else if (a.kind == ActionKind::backward) {
            if (mb.inputs.B == 0) continue;
            const int s = slot;
            LOOM_ASSERT(s >= 0, "pipeline: backward of micro-batch {} before its forward", m);
            StageModel& model = *models_[size_t(s)];
            if (mb.label_count > 0) {
                model.backward(loss_scale, is_last(v) ? nullptr : buffer(grad_in_, v, m));
                if (!is_first(v))
                    be_->copy(buffer(grad_out_, v, m), model.stage_input_grad(),
                              size_t(numel(m)) * esize);
            } else if (!is_first(v)) {
                // No labels, no loss: nothing flows back (every stage knows).
                be_->zero(buffer(grad_out_, v, m), size_t(numel(m)) * esize);
            }
            slot = -1;
            free.push_back(s);
        }
    }
    pp_.all_reduce(&loss_sum, 1, DType::f64, ReduceOp::sum)->wait();
    return loss_sum;
}

void PipelineParallel::finalize_grads() {
    // 1. Rows several stages hold: every holder gets the sum of their partial
    //    gradients (Megatron's embedding group, generalised). One all-reduce
    //    on pp; stages without the row add zeros.
    //    In the gradients' own type and memory (the table's backend).
    if (!shared_rows_.empty()) {
        const ParamTable& t = model().params();
        const DType g = t.op_ctx().act;  // the gradients' type
        const size_t esize = dtype_size(g);
        int64_t total = 0;
        for (int r : shared_rows_) total += t.row(r).numel();
        if (!shared_buf_ || shared_buf_->nbytes() < size_t(total) * esize)
            shared_buf_ = be_->alloc(size_t(total) * esize);
        std::byte* buf = static_cast<std::byte*>(shared_buf_->data());
        be_->zero(buf, size_t(total) * esize);
        int64_t off = 0;
        for (int r : shared_rows_) {
            const size_t n = size_t(t.row(r).numel()) * esize;
            if (t.row(r).local) be_->copy(buf + size_t(off) * esize, t.device_grad(r), n);
            off += t.row(r).numel();
        }
        pp_buf_.all_reduce(buf, total, g, ReduceOp::sum)->wait();
        off = 0;
        for (int r : shared_rows_) {
            const size_t n = size_t(t.row(r).numel()) * esize;
            if (t.row(r).local) be_->copy(t.device_grad(r), buf + size_t(off) * esize, n);
            off += t.row(r).numel();
        }
    }
    // 2. The dp reduction of the whole buffer, as one micro-batch.
    dp_->begin_micro_batch(true);
    dp_->end_micro_batch();
    dp_->finalize_grads();
}

double PipelineParallel::global_norm_sq(double local_sq) {
    double sq = local_sq;
    pp_.all_reduce(&sq, 1, DType::f64, ReduceOp::sum)->wait();
    // Sharded rows' squares live on different tp ranks; replicated ones were
    // counted on tp rank 0 only (norm_excluded_).
    if (tp_) tp_->all_reduce(&sq, 1, DType::f64, ReduceOp::sum)->wait();
    return sq;
}

double PipelineParallel::clip_grad_norm(double max_norm) {
    const double total = std::sqrt(global_norm_sq(dp_->grad_norm_sq(norm_excluded_)));
    if (max_norm > 0) {
        const double c = clip_coefficient(total, max_norm);
        if (c < 1.0) dp_->scale_grads(float(c));
    }
    return total;
}

std::map<std::string, Tensor> PipelineParallel::gather_rows(
    const std::map<std::string, Tensor>& local,
    const std::vector<std::pair<std::string, int>>& names_rows, bool to_all) const {
    const ParamTable& t = models_[0]->params();
    // For one rank (to_all false), tp rank 0 of stage 0 alone receives: the
    // other tp ranks send it their slices of each row and never hold a whole
    // row (assembling every row on every tp rank took BERT-large's ranks
    // from 0.87 to 1.13 GiB at the export).
    const bool tp_lead = !tp_ || tp_->rank() == 0;
    std::map<std::string, Tensor> out;
    // Rows go one at a time, in the same order on every stage, so at most one
    // row is in flight beyond what the receiver keeps.
    for (const auto& [name, row] : names_rows) {
        const int h = holder(row);
        const ParamRow& r = t.row(row);
        const Shape shape = r.shard.sharded() ? r.shard.global : r.shape;
        Tensor whole;
        if (h == stage()) {
            auto it = local.find(name);
            LOOM_ASSERT(it != local.end(), "pipeline gather: stage {} lacks '{}'", stage(), name);
            // Tensor-parallel rows travel whole: assembled on tp (collective;
            // every tp rank of the stage walks the same rows in this order),
            // for one rank on tp rank 0 alone.
            if (!r.shard.sharded() || !tp_)
                whole = it->second;
            else if (to_all)
                whole = tp_assemble_row_tensor(r.shard, it->second, *tp_);
            else
                whole = tp_gather_row_tensor(r.shard, it->second, *tp_, 0);
        }
        if (to_all) {
            Tensor x = Tensor::empty(DType::f32, shape, name);
            if (h == stage()) std::memcpy(x.raw(), whole.raw(), size_t(x.numel()) * sizeof(float));
            pp_.broadcast(x.raw(), x.numel(), DType::f32, h)->wait();
            out[name] = x;
            continue;
        }
        if (!tp_lead) continue;
        if (stage() == 0) {
            // A row assembled over tp is already a tensor of its own: kept as
            // it is, not copied (a second whole copy per row, and the holes
            // it left in the heap, cost rank 0 0.3 GiB at BERT-large's export).
            if (h == 0 && r.shard.sharded() && tp_) {
                out[name] = whole;
                continue;
            }
            Tensor x = Tensor::empty(DType::f32, shape, name);
            if (h == 0)
                std::memcpy(x.raw(), whole.raw(), size_t(x.numel()) * sizeof(float));
            else
                pp_.recv(x.raw(), x.numel(), DType::f32, h, 0)->wait();
            out[name] = x;
        } else if (h == stage()) {
            pp_.send(whole.raw(), whole.numel(), DType::f32, 0, 0)->wait();
        }
    }
    return out;
}

std::map<std::string, Tensor> PipelineParallel::gather_params(bool to_all) const {
    // For a file only replica 0 gathers: every replica holds the same rows.
    if (!to_all && dp_->dp_rank() != 0) return {};
    const ParamTable& t = models_[0]->params();
    std::vector<std::pair<std::string, int>> names;
    for (int i = 0; i < t.size(); ++i) names.emplace_back(t.row(i).name, i);
    t.download_params();  // the host copy, where the table keeps one
    // Whole tensors, assembled over tp and carried over pp row by row.
    return gather_rows(t.param_tensors(), names, to_all);
}

std::map<std::string, Tensor> PipelineParallel::gather_optimizer_state(bool to_all) const {
    return gather_optimizer_state(dp_->optimizer_state(), to_all);  // collective on dp
}

std::map<std::string, Tensor> PipelineParallel::gather_optimizer_state(
    const std::map<std::string, Tensor>& local, bool to_all) const {
    const ParamTable& t = models_[0]->params();
    if (!to_all && dp_->dp_rank() != 0) return {};
    // SGD keeps no state (every rank runs the same optimizer).
    if (!dp_->optimizer_has_state()) return {};
    std::vector<std::pair<std::string, int>> names;
    for (int i = 0; i < t.size(); ++i) {
        // Trainable where it is held (frozen rows have no optimizer state).
        const int h = holder(i);
        const bool held_here = h == stage();
        int32_t trainable = held_here && t.row(i).trainable ? 1 : 0;
        pp_.broadcast(&trainable, 1, DType::i32, h)->wait();
        if (!trainable) continue;
        names.emplace_back("exp_avg." + t.row(i).name, i);
        names.emplace_back("exp_avg_sq." + t.row(i).name, i);
    }
    return gather_rows(local, names, to_all);
}

void PipelineParallel::load_optimizer_state(const std::map<std::string, Tensor>& state,
                                            int64_t step) {
    dp_->load_optimizer_state(tp_ ? local_optimizer_state(state) : state, step);
}

std::map<std::string, Tensor> PipelineParallel::local_optimizer_state(
    const std::map<std::string, Tensor>& state) const {
    // The file holds global moments (layout-free): keep this rank's slices.
    std::map<std::string, Tensor> mine = state;
    if (!tp_) return mine;
    const ParamTable& t = models_[0]->params();
    for (const ParamRow& r : t.rows()) {
        if (!r.local || !r.trainable || !r.shard.sharded()) continue;
        for (const char* kind : {"exp_avg.", "exp_avg_sq."}) {
            auto it = mine.find(kind + r.name);
            if (it == mine.end()) continue;  // the optimizer names what is missing
            it->second = tp_shard_row_tensor(r.shard, it->second);
        }
    }
    return mine;
}

}  // namespace loom
