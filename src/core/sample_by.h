// SampleBy: how plain-text files become records (HF datasets' `text` builder
// names). Here because the job file (config/) and the readers (data/) both
// name it and neither includes the other.
#pragma once

#include <array>
#include <string_view>

namespace loom {

// How plain-text files become records (HF datasets' `text` builder names).
// `line` is the default everywhere (loom train and loom preprocess alike), as
// in HF datasets, so one file is the same data by either route.
enum class SampleBy { line, paragraph, document };
inline constexpr std::array<std::string_view, 3> k_sample_by_names = {"line", "paragraph",
                                                                      "document"};

// What one record (or document) is, for logs: "per line", ...
inline std::string_view sample_by_unit(SampleBy s) {
    switch (s) {
        case SampleBy::line:
            return "per line";
        case SampleBy::paragraph:
            return "per paragraph (lines up to a blank line)";
        case SampleBy::document:
            return "per file";
    }
    return "per line";
}

}  // namespace loom
