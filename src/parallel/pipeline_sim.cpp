// Pipeline simulator (see pipeline_sim.h). Each rank has a program counter and
// a clock; ranks advance in turn until none can. Times are max-plus: a
// communication batch ends at the latest post time among its own operations
// and their matched partners, so the result does not depend on which rank the
// loop visits first.
#include "parallel/pipeline_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>

namespace loom {

namespace {

// What a message carries: activation or gradient, of which micro-batch, for
// which global stage.
struct Label {
    bool grad = false;
    int micro = 0;
    int dst_stage = 0;
    bool operator==(const Label&) const = default;
};

std::string label_str(const Label& l) {
    return fmt::format("{}(micro {}, for stage {})", l.grad ? "grad" : "act", l.micro,
                       l.dst_stage);
}

struct Op {
    int rank = 0;
    bool is_send = false;
    Label label;
    int64_t post_time = 0;
    int partner = -1;  // index into ops once matched
};

struct RankState {
    size_t pc = 0;
    int64_t clock = 0;
    std::vector<int> batch;  // op ids of the posted, unfinished batch
    size_t batch_end = 0;
    int in_flight = 0;
    std::set<std::pair<int, int>> fwd_done, bwd_done, act_in, grad_in;  // (micro, chunk)
};

class Simulator {
public:
    Simulator(const std::vector<std::vector<Action>>& lists, int p, int m, int v,
              const SimOptions& opt)
        : lists_(lists), p_(p), m_(m), v_(v), opt_(opt), st_(size_t(p)) {
        res_.busy.assign(size_t(p), 0);
        res_.max_in_flight.assign(size_t(p), 0);
        res_.spans.assign(size_t(p), {});
    }

    SimResult run() {
        if (int(lists_.size()) != p_)
            return fail(fmt::format("{} action lists for a pipeline of {}", lists_.size(), p_));
        for (const auto* t : {&opt_.stage_forward_time, &opt_.stage_backward_time})
            if (!t->empty() && int(t->size()) != p_ * v_)
                return fail(fmt::format("{} per-stage times for {} stages", t->size(), p_ * v_));
        bool progress = true;
        while (progress && res_.error.empty()) {
            progress = false;
            for (int r = 0; r < p_ && res_.error.empty(); ++r)
                while (res_.error.empty() && step(r)) progress = true;
        }
        if (!res_.error.empty()) return res_;
        std::string blocked;
        for (int r = 0; r < p_; ++r) {
            const auto& s = st_[size_t(r)];
            if (s.pc < lists_[size_t(r)].size())
                blocked += fmt::format("{}rank {} at {}", blocked.empty() ? "" : "; ", r,
                                       action_to_string(lists_[size_t(r)][s.pc]));
        }
        if (!blocked.empty()) return fail("deadlock: " + blocked);
        for (const auto* pending : {&pending_sends_, &pending_recvs_})
            for (const auto& [ch, q] : *pending)
                if (!q.empty()) {
                    const Op& op = ops_[size_t(q.front())];
                    return fail(fmt::format("rank {} posted {} {} {} rank {}, never matched",
                                            op.rank, op.is_send ? "send" : "receive",
                                            label_str(op.label), op.is_send ? "to" : "from",
                                            op.is_send ? ch.second : ch.first));
                }
        for (int r = 0; r < p_; ++r) {
            const auto& s = st_[size_t(r)];
            if (int(s.fwd_done.size()) != m_ * v_ || int(s.bwd_done.size()) != m_ * v_)
                return fail(fmt::format("rank {} ran {} forwards and {} backwards, expected {} each",
                                        r, s.fwd_done.size(), s.bwd_done.size(), m_ * v_));
            res_.makespan = std::max(res_.makespan, s.clock);
        }
        int64_t total_busy = 0;
        for (int64_t b : res_.busy) total_busy += b;
        res_.bubble = res_.makespan > 0
                          ? 1.0 - double(total_busy) / (double(p_) * double(res_.makespan))
                          : 0.0;
        res_.ok = true;
        return res_;
    }

private:
    SimResult fail(std::string why) {
        res_.ok = false;
        if (res_.error.empty()) res_.error = std::move(why);
        return res_;
    }

    int stage_of(int r, int chunk) const { return global_stage(p_, r, chunk); }
    int last_stage() const { return p_ * v_ - 1; }

    // One action (or one communication batch) of rank r; false when blocked.
    bool step(int r) {
        auto& s = st_[size_t(r)];
        const auto& list = lists_[size_t(r)];
        if (s.pc >= list.size()) return false;
        const Action& a = list[s.pc];
        if (a.micro < 0 || a.micro >= m_ || a.virtual_stage < 0 || a.virtual_stage >= v_) {
            fail(fmt::format("rank {}: action {} outside {} micro-batches x {} chunks", r,
                             action_to_string(a), m_, v_));
            return false;
        }
        if (!action_is_comm(a.kind)) return compute(r, a);
        if (s.batch.empty()) post_batch(r);
        if (!res_.error.empty()) return false;
        int64_t end = s.clock;
        for (int id : s.batch) {
            const Op& op = ops_[size_t(id)];
            const bool waits = !op.is_send || opt_.comm != CommModel::buffered;
            if (!waits) continue;
            if (op.partner < 0) return false;
            end = std::max(end, ops_[size_t(op.partner)].post_time);
        }
        for (int id : s.batch) {
            const Op& op = ops_[size_t(id)];
            if (op.is_send) continue;
            auto key = std::make_pair(op.label.micro, (op.label.dst_stage - r) / p_);
            (op.label.grad ? s.grad_in : s.act_in).insert(key);
        }
        s.clock = end;
        s.pc = s.batch_end;
        s.batch.clear();
        return true;
    }

    bool compute(int r, const Action& a) {
        auto& s = st_[size_t(r)];
        const auto key = std::make_pair(a.micro, a.virtual_stage);
        const int stage = stage_of(r, a.virtual_stage);
        if (a.kind == ActionKind::forward) {
            if (stage > 0 && !s.act_in.count(key)) {
                fail(fmt::format("rank {}: {} runs before its activation arrived", r,
                                 action_to_string(a)));
                return false;
            }
            if (!s.fwd_done.insert(key).second) {
                fail(fmt::format("rank {}: {} forwarded twice", r, action_to_string(a)));
                return false;
            }
            run_for(r, time_of(opt_.stage_forward_time, opt_.forward_time, stage));
            res_.max_in_flight[size_t(r)] = std::max(res_.max_in_flight[size_t(r)], ++s.in_flight);
        } else {
            if (!s.fwd_done.count(key)) {
                fail(fmt::format("rank {}: {} before its forward", r, action_to_string(a)));
                return false;
            }
            if (stage < last_stage() && !s.grad_in.count(key)) {
                fail(fmt::format("rank {}: {} runs before its gradient arrived", r,
                                 action_to_string(a)));
                return false;
            }
            if (!s.bwd_done.insert(key).second) {
                fail(fmt::format("rank {}: {} backwarded twice", r, action_to_string(a)));
                return false;
            }
            run_for(r, time_of(opt_.stage_backward_time, opt_.backward_time, stage));
            --s.in_flight;
        }
        ++s.pc;
        return true;
    }

    static int64_t time_of(const std::vector<int64_t>& per_stage, int64_t uniform, int stage) {
        return per_stage.empty() ? uniform : per_stage[size_t(stage)];
    }
    void run_for(int r, int64_t dt) {
        auto& s = st_[size_t(r)];
        res_.spans[size_t(r)].push_back({s.clock, s.clock + dt});
        s.clock += dt;
        res_.busy[size_t(r)] += dt;
    }

    // Posts the communication actions starting at pc (one, or the whole run of
    // consecutive ones when batched) and matches them against posted partners.
    void post_batch(int r) {
        auto& s = st_[size_t(r)];
        const auto& list = lists_[size_t(r)];
        size_t end = s.pc + 1;
        if (opt_.comm != CommModel::sequential)
            while (end < list.size() && action_is_comm(list[end].kind)) ++end;
        s.batch_end = end;
        for (size_t i = s.pc; i < end; ++i) {
            const Action& a = list[i];
            const int stage = stage_of(r, a.virtual_stage);
            Op op;
            op.rank = r;
            op.post_time = s.clock;
            op.is_send = a.kind == ActionKind::send_act || a.kind == ActionKind::send_grad;
            op.label.grad = a.kind == ActionKind::send_grad || a.kind == ActionKind::recv_grad;
            op.label.micro = a.micro;
            const int delta = a.kind == ActionKind::send_act ? 1 : a.kind == ActionKind::send_grad ? -1 : 0;
            op.label.dst_stage = stage + delta;
            if (op.label.dst_stage < 0 || op.label.dst_stage > last_stage() ||
                (a.kind == ActionKind::recv_act && stage == 0) ||
                (a.kind == ActionKind::recv_grad && stage == last_stage())) {
                fail(fmt::format("rank {}: {} has no peer stage", r, action_to_string(a)));
                return;
            }
            const int peer = action_peer(a, p_, r);
            const auto channel = op.is_send ? std::make_pair(r, peer) : std::make_pair(peer, r);
            const int id = int(ops_.size());
            ops_.push_back(op);
            s.batch.push_back(id);
            auto& mine = (op.is_send ? pending_sends_ : pending_recvs_)[channel];
            auto& theirs = (op.is_send ? pending_recvs_ : pending_sends_)[channel];
            if (theirs.empty()) {
                mine.push_back(id);
                continue;
            }
            const int other = theirs.front();
            theirs.pop_front();
            const Op& o = ops_[size_t(other)];
            if (!(o.label == op.label)) {
                const Op& snd = op.is_send ? op : o;
                const Op& rcv = op.is_send ? o : op;
                fail(fmt::format("mismatch on channel {} -> {}: sent {} but the receive expects {}",
                                 channel.first, channel.second, label_str(snd.label),
                                 label_str(rcv.label)));
                return;
            }
            ops_[size_t(id)].partner = other;
            ops_[size_t(other)].partner = id;
            ++res_.messages;
        }
    }

    const std::vector<std::vector<Action>>& lists_;
    int p_, m_, v_;
    SimOptions opt_;
    std::vector<RankState> st_;
    std::vector<Op> ops_;
    using Channel = std::pair<int, int>;  // (src, dst)
    std::map<Channel, std::deque<int>> pending_sends_, pending_recvs_;  // unmatched op ids
    SimResult res_;
};

}  // namespace

SimResult simulate_pipeline(const std::vector<std::vector<Action>>& per_rank, int pp_size,
                            int n_micro, int n_virtual, const SimOptions& options) {
    return Simulator(per_rank, pp_size, n_micro, n_virtual, options).run();
}

SimResult simulate_schedule(ScheduleKind kind, int pp_size, int n_micro, int n_virtual,
                            const SimOptions& options) {
    std::vector<std::vector<Action>> lists;
    for (int r = 0; r < pp_size; ++r)
        lists.push_back(make_schedule(kind, pp_size, r, n_micro, n_virtual));
    return simulate_pipeline(lists, pp_size, n_micro, n_virtual, options);
}

}  // namespace loom
