// Pipeline schedule generators (simple, 1f1b, interleaved). The warm-up counts
// and the chunk/micro-batch order of the interleaved schedule follow Megatron's
// forward_backward_pipelining_with_interleaving (get_model_chunk_id,
// get_microbatch_id_in_model_chunk with groups of pp micro-batches).
#include "parallel/pipeline_schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"

namespace loom {

ScheduleKind schedule_kind_from_name(std::string_view name) {
    if (name == "simple" || name == "gpipe" || name == "afab") return ScheduleKind::simple;
    if (name == "1f1b") return ScheduleKind::one_f_one_b;
    if (name == "interleaved") return ScheduleKind::interleaved;
    LOOM_FAIL("unknown pipeline schedule '{}' (expected simple, 1f1b or interleaved)", name);
}

std::string_view schedule_kind_name(ScheduleKind kind) {
    switch (kind) {
        case ScheduleKind::simple: return "simple";
        case ScheduleKind::one_f_one_b: return "1f1b";
        case ScheduleKind::interleaved: return "interleaved";
    }
    return "?";
}

std::string_view action_kind_name(ActionKind kind) {
    switch (kind) {
        case ActionKind::forward: return "F";
        case ActionKind::backward: return "B";
        case ActionKind::send_act: return "SA";
        case ActionKind::recv_act: return "RA";
        case ActionKind::send_grad: return "SG";
        case ActionKind::recv_grad: return "RG";
    }
    return "?";
}

std::string action_to_string(const Action& a) {
    return fmt::format("{}{}.{}", action_kind_name(a.kind), a.micro, a.virtual_stage);
}

std::string actions_to_string(const std::vector<Action>& actions) {
    std::string s;
    for (const auto& a : actions) {
        if (!s.empty()) s += ' ';
        s += action_to_string(a);
    }
    return s;
}

bool action_is_comm(ActionKind kind) {
    return kind != ActionKind::forward && kind != ActionKind::backward;
}

int action_peer(const Action& a, int pp_size, int pp_rank) {
    switch (a.kind) {
        case ActionKind::send_act:
        case ActionKind::recv_grad: return (pp_rank + 1) % pp_size;
        case ActionKind::recv_act:
        case ActionKind::send_grad: return (pp_rank + pp_size - 1) % pp_size;
        default: LOOM_FAIL("action {} has no peer", action_to_string(a));
    }
}

std::string schedule_check(ScheduleKind kind, int pp_size, int n_micro, int n_virtual) {
    if (pp_size < 1) return fmt::format("pipeline size must be >= 1, got {}", pp_size);
    if (n_micro < 1) return fmt::format("micro-batch count must be >= 1, got {}", n_micro);
    if (kind != ScheduleKind::interleaved && n_virtual != 1)
        return fmt::format("the {} schedule has one model chunk per rank, got n_virtual {}",
                           schedule_kind_name(kind), n_virtual);
    if (kind == ScheduleKind::interleaved) {
        // With one rank every chunk hand-off would be a message to itself.
        if (pp_size < 2)
            return "the interleaved schedule needs a pipeline of at least 2 ranks; use 1f1b";
        if (n_virtual < 2)
            return fmt::format("the interleaved schedule needs n_virtual >= 2 (got {}); use 1f1b",
                               n_virtual);
        if (n_micro % pp_size != 0)
            return fmt::format("the interleaved schedule needs micro-batches ({}) divisible by the "
                               "pipeline size ({})",
                               n_micro, pp_size);
    }
    return {};
}

namespace {

// Appends one forward of (micro, chunk) with its receive and send.
void add_forward(std::vector<Action>& out, int p, int r, int v, int micro, int chunk) {
    const int s = global_stage(p, r, chunk);
    if (s > 0) out.push_back({ActionKind::recv_act, micro, chunk});
    out.push_back({ActionKind::forward, micro, chunk});
    if (s < p * v - 1) out.push_back({ActionKind::send_act, micro, chunk});
}

void add_backward(std::vector<Action>& out, int p, int r, int v, int micro, int chunk) {
    const int s = global_stage(p, r, chunk);
    if (s < p * v - 1) out.push_back({ActionKind::recv_grad, micro, chunk});
    out.push_back({ActionKind::backward, micro, chunk});
    if (s > 0) out.push_back({ActionKind::send_grad, micro, chunk});
}

// Megatron: the k-th forward (or backward) slot of a rank runs chunk
// (k mod p*v) / p (reversed for backward) on micro-batch (k / (p*v)) * p + k mod p.
struct Slot {
    int micro;
    int chunk;
};
Slot interleaved_slot(int k, int p, int v, bool forward) {
    const int in_group = k % (p * v);
    int chunk = in_group / p;
    if (!forward) chunk = v - 1 - chunk;
    return {(k / (p * v)) * p + k % p, chunk};
}

}  // namespace

int schedule_max_in_flight(ScheduleKind kind, int p, int r, int m, int v) {
    switch (kind) {
        case ScheduleKind::simple: return m;
        case ScheduleKind::one_f_one_b: return std::min(m, p - r);
        case ScheduleKind::interleaved:
            if (m == p) return m * v;
            return std::min(m * v, 2 * (p - r - 1) + (v - 1) * p + 1);
    }
    return 0;
}

std::vector<Action> make_schedule(ScheduleKind kind, int p, int r, int m, int v) {
    std::string why = schedule_check(kind, p, m, v);
    LOOM_CHECK(why.empty(), "pipeline schedule {} (pp {}, micro-batches {}, virtual {}): {}",
               schedule_kind_name(kind), p, m, v, why);
    LOOM_CHECK(r >= 0 && r < p, "pipeline schedule: rank {} outside pipeline of {}", r, p);
    std::vector<Action> out;
    switch (kind) {
        case ScheduleKind::simple:
            for (int i = 0; i < m; ++i) add_forward(out, p, r, 1, i, 0);
            for (int i = 0; i < m; ++i) add_backward(out, p, r, 1, i, 0);
            break;
        case ScheduleKind::one_f_one_b: {
            const int warmup = std::min(p - r - 1, m);
            const int steady = m - warmup;
            for (int i = 0; i < warmup; ++i) add_forward(out, p, r, 1, i, 0);
            for (int i = 0; i < steady; ++i) {
                add_forward(out, p, r, 1, warmup + i, 0);
                add_backward(out, p, r, 1, i, 0);
            }
            for (int i = steady; i < m; ++i) add_backward(out, p, r, 1, i, 0);
            break;
        }
        case ScheduleKind::interleaved: {
            // Megatron posts each step's sends together with the receives of the
            // next forward and the next backward (send_forward_backward_recv_
            // forward_backward). Receiving one step ahead is what keeps chunk
            // hand-offs between ranks from waiting on each other in a cycle;
            // the natural "receive right before use" order deadlocks here.
            const int total = m * v;
            const int last = p * v - 1;
            const bool all_warmup = m == p;
            const int warmup = all_warmup ? total : std::min(2 * (p - r - 1) + (v - 1) * p, total);
            const int steady = total - warmup;
            auto f_slot = [&](int k) { return interleaved_slot(k, p, v, true); };
            auto b_slot = [&](int k) { return interleaved_slot(k, p, v, false); };
            auto stage = [&](Slot sl) { return global_stage(p, r, sl.chunk); };
            auto recv_act = [&](int k) {
                if (k < total && stage(f_slot(k)) > 0)
                    out.push_back({ActionKind::recv_act, f_slot(k).micro, f_slot(k).chunk});
            };
            auto recv_grad = [&](int k) {
                if (k < total && stage(b_slot(k)) < last)
                    out.push_back({ActionKind::recv_grad, b_slot(k).micro, b_slot(k).chunk});
            };
            auto forward = [&](int k) {
                out.push_back({ActionKind::forward, f_slot(k).micro, f_slot(k).chunk});
            };
            auto backward = [&](int k) {
                out.push_back({ActionKind::backward, b_slot(k).micro, b_slot(k).chunk});
            };
            auto send_act = [&](int k) {
                if (stage(f_slot(k)) < last)
                    out.push_back({ActionKind::send_act, f_slot(k).micro, f_slot(k).chunk});
            };
            auto send_grad = [&](int k) {
                if (stage(b_slot(k)) > 0)
                    out.push_back({ActionKind::send_grad, b_slot(k).micro, b_slot(k).chunk});
            };
            recv_act(0);
            for (int k = 0; k < warmup; ++k) {
                forward(k);
                send_act(k);
                recv_act(k + 1);
                if (k == warmup - 1 && !all_warmup) recv_grad(0);
            }
            for (int k = 0; k < steady; ++k) {
                forward(warmup + k);
                backward(k);
                send_act(warmup + k);
                send_grad(k);
                recv_act(warmup + k + 1);
                recv_grad(k + 1);
            }
            if (all_warmup) recv_grad(0);
            for (int k = steady; k < total; ++k) {
                backward(k);
                send_grad(k);
                recv_grad(k + 1);
            }
            break;
        }
    }
    return out;
}

double schedule_bubble_theory(ScheduleKind kind, int p, int m, int v) {
    if (kind == ScheduleKind::interleaved) return double(p - 1) / double(v * m + p - 1);
    return double(p - 1) / double(m + p - 1);
}

}  // namespace loom
