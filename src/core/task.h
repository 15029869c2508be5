// Task: the training objective and, on a model, the head on top of the
// encoder/decoder. One enum for the job file, the model config, the heads and
// the data collators; `base` means no head (BertModel) and is never a job's
// task.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace loom {

// NOTE: `base` is last so that the first four values index the job file's
// names (config/job.h) directly.
enum class Task : uint8_t { masked_lm, sequence_classification, question_answering, causal_lm, base };

// Job-file names: "masked-lm", "sequence-classification", "question-answering",
// "causal-lm", and "base" for a model without a head.
inline constexpr std::array<std::string_view, 5> k_task_names = {
    "masked-lm", "sequence-classification", "question-answering", "causal-lm", "base"};

inline std::string_view task_name(Task t) { return k_task_names[static_cast<size_t>(t)]; }

inline std::optional<Task> task_from_name(std::string_view name) {
    for (size_t i = 0; i < k_task_names.size(); ++i)
        if (k_task_names[i] == name) return static_cast<Task>(i);
    return std::nullopt;
}

}  // namespace loom
