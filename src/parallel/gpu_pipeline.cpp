// GpuPipeline: the schedule executor on device buffers and the shared rows'
// sum over pp. The loop mirrors PipelineParallel::run action for action.
#include "parallel/gpu_pipeline.h"

#include "core/check.h"

namespace loom {

namespace {

// message_buffer keys: (kind, chunk, micro-batch) and the shared rows.
enum class Msg : int64_t { act_in = 0, grad_in = 1 };
constexpr int64_t k_shared_rows_key = -1;

int64_t msg_key(Msg kind, int chunk, int micro, int n_micro) {
    return (int64_t(chunk) * n_micro + micro) * 2 + int64_t(kind);
}

}  // namespace

GpuPipeline::GpuPipeline(DeviceStage& owner, PipelineParallel& layout, Communicator& pp_device,
                         Communicator& pp_host)
    : owner_(owner), layout_(layout), pp_(pp_device), pp_host_(pp_host) {
    LOOM_CHECK(pp_.size() == layout_.n_stages() && pp_.rank() == layout_.stage() &&
                   pp_host_.size() == pp_.size() && pp_host_.rank() == pp_.rank(),
               "GPU pipeline: the pp groups (device rank {} of {}, host rank {} of {}) are not "
               "the layout's (stage {} of {})",
               pp_.rank(), pp_.size(), pp_host_.rank(), pp_host_.size(), layout_.stage(),
               layout_.n_stages());
    LOOM_CHECK(owner_.flat_numel() == layout_.model().params().flat_numel(),
               "GPU pipeline: the executor holds {} elements, the stage {}", owner_.flat_numel(),
               layout_.model().params().flat_numel());
    owner_.attach_group(pp_);
    for (int c = 0; c < layout_.n_virtual(); ++c)
        for (int s = 0; s < layout_.n_slots(); ++s) {
            instances_.push_back(owner_.stage_instance(layout_.instance(c, s)));
            // Training scores the labelled positions only (the CPU stages' scope).
            instances_.back()->set_logits_scope(LogitsScope::labelled_positions);
        }
}

GpuPipeline::~GpuPipeline() = default;

double GpuPipeline::run(const std::vector<MicroBatch>& micro, double loss_scale) {
    const int M = int(micro.size()), V = layout_.n_virtual(), P = layout_.n_stages();
    const int S = P * V, stage = layout_.stage(), n_slots = layout_.n_slots();
    LOOM_CHECK(M >= 1, "pipeline step without micro-batches");
    const std::vector<Action> actions = make_schedule(layout_.kind(), P, stage, M, V);
    const DType dtype = owner_.grad_dtype();
    const int64_t C = layout_.model().hidden_width();
    auto numel = [&](int m) { return micro[size_t(m)].inputs.B * micro[size_t(m)].inputs.T * C; };
    auto buffer = [&](Msg kind, int c, int m) {
        return owner_.message_buffer(msg_key(kind, c, m, M), numel(m) * int64_t(dtype_size(dtype)));
    };
    // Instance of (chunk, micro-batch) while it is in flight; free instances
    // per chunk. An instance whose input gradient is still to be sent stays
    // taken until that send completes (its next forward may re-plan, and so
    // move, the buffer the send reads).
    std::vector<int> slot_of(size_t(M * V), -1);
    std::vector<std::vector<int>> free_slots(static_cast<size_t>(V));
    for (int c = 0; c < V; ++c)
        for (int s = n_slots; s-- > 0;) free_slots[size_t(c)].push_back(c * n_slots + s);
    auto release = [&](int c, int m) {
        int& slot = slot_of[size_t(c * M + m)];
        LOOM_ASSERT(slot >= 0, "GPU pipeline: micro-batch {} released twice", m);
        free_slots[size_t(c)].push_back(slot);
        slot = -1;
    };
    auto in_flight = [&](int c, int m) -> DeviceStage& {
        const int s = slot_of[size_t(c * M + m)];
        LOOM_ASSERT(s >= 0, "GPU pipeline: micro-batch {} of chunk {} is not in flight", m, c);
        return *instances_[size_t(s)];
    };
    // No backward runs for a micro-batch without labels: its gradient
    // message is skipped on both ends (every stage knows the count).
    auto flows_back = [&](int m) { return micro[size_t(m)].label_count > 0; };

    double loss_sum = 0;
    size_t i = 0;
    while (i < actions.size()) {
        const Action& a = actions[i];
        if (action_is_comm(a.kind)) {
            std::vector<std::pair<int, int>> sent_grads;  // (chunk, micro) released after
            pp_.group_start();
            for (; i < actions.size() && action_is_comm(actions[i].kind); ++i) {
                const Action& c = actions[i];
                const int m = c.micro, v = c.virtual_stage;
                const int64_t n = numel(m);
                const bool grad =
                    c.kind == ActionKind::send_grad || c.kind == ActionKind::recv_grad;
                if (n == 0 || (grad && !flows_back(m))) continue;
                const int peer = action_peer(c, P, stage);
                const int g = global_stage(P, stage, v);
                // PipelineParallel::run's tags (NCCL ignores them; see the header).
                const bool upper =
                    c.kind == ActionKind::recv_act || c.kind == ActionKind::send_grad;
                const int boundary = upper ? g - 1 : g;
                const int tag = ((m * S + boundary) * 2 + (grad ? 1 : 0)) % 32768;
                switch (c.kind) {
                    case ActionKind::send_act:
                        pp_.send(in_flight(v, m).stage_output(), n, dtype, peer, tag);
                        break;
                    case ActionKind::recv_act:
                        pp_.recv(buffer(Msg::act_in, v, m), n, dtype, peer, tag);
                        break;
                    case ActionKind::send_grad:
                        pp_.send(in_flight(v, m).stage_input_grad(), n, dtype, peer, tag);
                        sent_grads.emplace_back(v, m);
                        break;
                    case ActionKind::recv_grad:
                        pp_.recv(buffer(Msg::grad_in, v, m), n, dtype, peer, tag);
                        break;
                    default:
                        break;
                }
            }
            pp_.group_end()->wait();
            for (const auto& [v, m] : sent_grads) release(v, m);
            continue;
        }
        const int m = a.micro, v = a.virtual_stage;
        const MicroBatch& mb = micro[size_t(m)];
        ++i;
        if (mb.inputs.B == 0) continue;
        if (a.kind == ActionKind::forward) {
            std::vector<int>& free = free_slots[size_t(v)];
            LOOM_CHECK(!free.empty(),
                       "GPU pipeline: more micro-batches in flight than the {} executor instances",
                       n_slots);
            slot_of[size_t(v * M + m)] = free.back();
            free.pop_back();
            const void* input = layout_.is_first(v) ? nullptr : buffer(Msg::act_in, v, m);
            const LossSum l = in_flight(v, m).forward_stage(mb.inputs, mb.dropout, input);
            if (layout_.is_last(v)) {
                LOOM_ASSERT(l.count == mb.label_count,
                            "the model counted {} labels in a micro-batch, the loader {}", l.count,
                            mb.label_count);
                loss_sum += l.sum;
            }
        } else if (a.kind == ActionKind::backward) {
            if (flows_back(m)) {
                const void* d_out = layout_.is_last(v) ? nullptr : buffer(Msg::grad_in, v, m);
                in_flight(v, m).backward_stage(loss_scale, d_out);
            }
            // Below the first stage the input gradient is still to be sent.
            if (layout_.is_first(v) || !flows_back(m)) release(v, m);
        }
    }
    pp_host_.all_reduce(&loss_sum, 1, DType::f64, ReduceOp::sum)->wait();
    return loss_sum;
}

void GpuPipeline::reduce_shared_rows() {
    const std::vector<int>& rows = layout_.shared_rows();
    if (rows.empty()) return;
    const ParamTable& t = layout_.model().params();
    int64_t total = 0;
    for (int r : rows) total += t.row(r).numel();
    const DType dtype = owner_.grad_dtype();
    void* buf = owner_.message_buffer(k_shared_rows_key, total * int64_t(dtype_size(dtype)));
    owner_.pack_grads(rows, buf);
    // Ordered after the packing on the executor's stream; the host waits, so
    // the unpacking is enqueued after the sum.
    pp_.all_reduce(buf, total, dtype, ReduceOp::sum)->wait();
    owner_.unpack_grads(rows, buf);
}

}  // namespace loom
