// Pipeline schedules as data: the ordered list of actions one pipeline rank
// performs in one training step (torchtitan's CSV schedules, Megatron's
// schedule table), so that a runner only executes and tests can check every
// list before any model exists.
//
// Kinds:
//   simple       GPipe / SMP "simple": all forwards, then all backwards.
//   1f1b         PipeDream-flush, Megatron's non-interleaved schedule: rank r
//                runs min(pp-1-r, m) warm-up forwards, then alternates one
//                forward and one backward, then drains the backwards. At most
//                pp - r micro-batches are in flight on rank r.
//   interleaved  Megatron's interleaved 1F1B over n_virtual model chunks per
//                rank (SMP "interleaved" is this idea). Chunk c of rank r is
//                global stage c * pp + r. Needs pp >= 2, n_virtual >= 2 and
//                n_micro % pp == 0 (Megatron's constraint: micro-batches run
//                in groups of pp per chunk).
//
// Communication placement: consecutive communication actions form one batch
// that the runner posts together (group_start/group_end) and waits for as a
// whole. simple and 1f1b put a RecvAct right before the Forward that consumes
// it and a SendAct right after the Forward that produced it (likewise RecvGrad
// / SendGrad around Backward), which gives Megatron's send_forward_recv_backward
// and send_backward_recv_forward pairs. interleaved follows Megatron's
// interleaved loop: after each step one batch with that step's sends and the
// receives of the next forward and the next backward (posted a step ahead;
// receiving right before use deadlocks there). pipeline_sim.h proves all of
// this runs without deadlock and that every send meets its receive.
//
// Peers: activations go to the next stage, gradients to the previous one; the
// pipeline wraps (the last rank's chunk c feeds rank 0's chunk c+1), see
// action_peer().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/schedule_kind.h"

namespace loom {

// "simple" | "1f1b" | "interleaved" (aliases: "gpipe", "afab" -> simple)
ScheduleKind schedule_kind_from_name(std::string_view name);
std::string_view schedule_kind_name(ScheduleKind kind);

enum class ActionKind : uint8_t { forward, backward, send_act, recv_act, send_grad, recv_grad };
std::string_view action_kind_name(ActionKind kind);

struct Action {
    ActionKind kind = ActionKind::forward;
    int micro = 0;          // micro-batch index in [0, n_micro)
    int virtual_stage = 0;  // model chunk on this rank, in [0, n_virtual)
    bool operator==(const Action&) const = default;
};

// "F3.1" (forward micro 3, chunk 1), "SA3.1", "RG0.0" ...
std::string action_to_string(const Action& a);
std::string actions_to_string(const std::vector<Action>& actions);

bool action_is_comm(ActionKind kind);

// Global stage of chunk `virtual_stage` on `pp_rank`: virtual_stage * pp_size + pp_rank.
inline int global_stage(int pp_size, int pp_rank, int virtual_stage) {
    return virtual_stage * pp_size + pp_rank;
}

// The pp rank a communication action talks to.
int action_peer(const Action& a, int pp_size, int pp_rank);

// Empty when (kind, sizes) is valid, else the reason.
std::string schedule_check(ScheduleKind kind, int pp_size, int n_micro, int n_virtual);

// The action list of one pipeline rank. Throws loom::Error with
// schedule_check's reason when the arguments are invalid.
std::vector<Action> make_schedule(ScheduleKind kind, int pp_size, int pp_rank, int n_micro,
                                  int n_virtual = 1);

// Theoretical bubble share (idle / total time per rank) with forward and
// backward chunk times tf, tb: (p-1)/(m+p-1) for simple and 1f1b,
// (p-1)/(v*m+p-1) for interleaved (chunk times are 1/v of a full stage).
double schedule_bubble_theory(ScheduleKind kind, int pp_size, int n_micro, int n_virtual);

// Most micro-batch chunks rank pp_rank holds activations for at once under
// the schedule: 1f1b min(m, p - r); interleaved min(v*m, 2(p-r-1) + (v-1)p + 1)
// (all v*m when m == p); simple m.
int schedule_max_in_flight(ScheduleKind kind, int pp_size, int pp_rank, int n_micro,
                           int n_virtual);

}  // namespace loom
