// ScheduleKind: the pipeline schedule, one enum for the job file (config/),
// the schedule generator and the planner (parallel/).
//   simple       GPipe / all-forward-all-backward
//   one_f_one_b  1F1B (PipeDream-Flush, Megatron's default)
//   interleaved  Megatron's interleaved 1F1B over virtual stages
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace loom {

enum class ScheduleKind : uint8_t { simple, one_f_one_b, interleaved };
// Loom's names, in the enum's order ("gpipe" and "afab" are parsed as aliases
// of simple by parallel/pipeline_schedule.h).
inline constexpr std::array<std::string_view, 3> k_schedule_kind_names = {"simple", "1f1b",
                                                                          "interleaved"};

}  // namespace loom
